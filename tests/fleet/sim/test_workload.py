"""Workload loaders and generators: the shared traces parse, replays scale, ServeGen curves hit their peak."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from fleet.sim.workload import (
    Request,
    WorkloadError,
    build_workload,
    from_rate_curve,
    load_azure_csv,
    load_mooncake_jsonl,
    load_servegen,
    parse_workload_spec,
    peak_rate_rps,
    replay,
    traces_dir,
)

TRACES = traces_dir()
needs_traces = pytest.mark.skipif(
    not (TRACES / "azure2023_conv.csv").exists(), reason=f"shared traces not found at {TRACES}"
)


@needs_traces
def test_azure_conv_loads_every_row_with_seven_digit_timestamps():
    reqs = load_azure_csv(TRACES / "azure2023_conv.csv")
    assert len(reqs) == 19366  # the README's row count: the last line has no trailing newline
    assert reqs[0].arrival_s == 0.0
    assert 3400 < reqs[-1].arrival_s < 3600  # 58 minutes
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(reqs, reqs[1:], strict=False))


def test_azure_timestamps_keep_microseconds_and_last_row_without_newline(tmp_path: Path):
    f = tmp_path / "t.csv"
    f.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.1805919,10,2"
    )
    reqs = load_azure_csv(f)
    assert reqs == [Request(0.0, 374, 44), Request(pytest.approx(0.500001), 10, 2)]


def test_a_trace_saved_with_a_byte_order_mark_loads_and_one_not_text_is_named(tmp_path: Path):
    f = tmp_path / "excel.csv"
    f.write_bytes(b"\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n")
    assert load_azure_csv(f) == [Request(0.0, 374, 44)]
    g = tmp_path / "binary.csv"
    g.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(WorkloadError, match="binary.csv: not UTF-8 text"):
        load_azure_csv(g)


def test_azure_loader_names_the_file_and_line_of_a_bad_row(tmp_path: Path):
    f = tmp_path / "bad.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,x,1")
    with pytest.raises(WorkloadError, match=r"bad.csv:2"):
        load_azure_csv(f)


@needs_traces
def test_mooncake_offsets_are_milliseconds():
    reqs = load_mooncake_jsonl(TRACES / "mooncake_fast25_conversation.jsonl")
    assert len(reqs) == 12031
    assert 3400 < reqs[-1].arrival_s < 3600  # 59 minutes, so the ms were divided by 1000


@needs_traces
def test_servegen_large_has_fourteen_days_of_windows():
    curve = load_servegen(TRACES / "servegen" / "servegen_language_m-large_aggregate_600s.csv")
    assert len(curve.windows) == 2016
    assert curve.days() == 14
    assert curve.day(1).windows[0].start_s == 0.0


def _trace(n: int, gap_s: float) -> list[Request]:
    return [Request(i * gap_s, 100 + i, 10) for i in range(n)]


def test_replay_speed_compresses_time():
    out = replay(_trace(10, 1.0), 100.0, speed=2.0, loop=False)
    assert [r.arrival_s for r in out] == [i * 0.5 for i in range(10)]


def test_replay_rate_multiplies_requests():
    trace = _trace(1000, 0.1)
    out = replay(trace, 100.0, rate=2.5, loop=False, seed=1)
    assert 2400 < len(out) < 2600


def test_replay_loops_to_fill_the_duration():
    out = replay(_trace(10, 1.0), 35.0)  # a 10 s period: 3.5 passes
    assert len(out) == 35
    assert out[-1].arrival_s < 35.0


def test_replay_is_deterministic_for_a_seed():
    trace = _trace(200, 0.3)
    assert replay(trace, 60.0, rate=1.7, seed=5) == replay(trace, 60.0, rate=1.7, seed=5)
    assert replay(trace, 60.0, rate=1.7, seed=5) != replay(trace, 60.0, rate=1.7, seed=6)


def _flat_curve(rate: float, cv: float, windows: int = 6):
    from fleet.sim.workload import RateCurve, RateWindow

    return RateCurve(tuple(RateWindow(i * 600.0, rate * (1 + i % 2), cv) for i in range(windows)))


def test_rate_curve_is_scaled_to_the_target_peak():
    sizes = _trace(50, 1.0)
    out = from_rate_curve(_flat_curve(100.0, 1.0), 3600.0, peak_rps=5.0, sizes=sizes, seed=3)
    busy = [r for r in out if 600 <= r.arrival_s < 1200]  # a window at the curve's peak
    assert 5.0 * 600 * 0.9 < len(busy) < 5.0 * 600 * 1.1
    quiet = [r for r in out if r.arrival_s < 600]
    assert 2.5 * 600 * 0.9 < len(quiet) < 2.5 * 600 * 1.1


def test_rate_curve_gaps_follow_the_recorded_cv():
    sizes = _trace(5, 1.0)
    for cv in (1.0, 3.0):
        out = from_rate_curve(_flat_curve(10.0, cv, windows=2), 600.0, peak_rps=20.0, sizes=sizes, seed=7)
        gaps = [b.arrival_s - a.arrival_s for a, b in zip(out, out[1:], strict=False)]
        measured = statistics.pstdev(gaps) / statistics.mean(gaps)
        assert abs(measured - cv) < 0.25 * cv


def test_rate_curve_draws_sizes_from_the_given_trace():
    sizes = [Request(0.0, 777, 33), Request(1.0, 555, 11)]
    out = from_rate_curve(_flat_curve(1.0, 1.0), 600.0, peak_rps=2.0, sizes=sizes)
    assert {(r.prompt_tokens, r.output_tokens) for r in out} == {(777, 33), (555, 11)}


@needs_traces
def test_servegen_spec_builds_a_day_scaled_to_its_peak():
    reqs = build_workload("servegen:m-large,peak=5,seed=2", 86400.0)
    # the busiest 10-minute window averages 5 req/s; 1-minute peaks sit a little above it
    assert 4.5 < peak_rate_rps(reqs, 600.0) < 5.5


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("nonsense", "KIND:NAME"),
        ("servegen:m-huge", "language_m-large"),
        ("azure:chat", "conv, code"),
        ("azure:conv,peak=3", "unknown key"),
        ("servegen:m-large,peak=-1", "positive"),
        ("s3:foo", "unknown kind"),
        ("trace:my.csv,peak=3", "unknown key"),
    ],
)
def test_bad_workload_specs_name_the_problem(text: str, fragment: str):
    with pytest.raises(WorkloadError, match=fragment):
        parse_workload_spec(text)


def test_a_users_own_trace_replays_from_its_columns(tmp_path: Path):
    # BurstGPT's columns (seconds, failed requests with zero tokens), starting 5 s in: restarted at 0
    path = tmp_path / "mine.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"
        "65,GPT-4,417,276,693,Conversation log\n"
    )
    spec = parse_workload_spec(f"trace:{path},speed=2,loop=false")
    assert (spec.kind, spec.name) == ("trace", str(path))
    reqs = build_workload(spec, 3600.0)
    got = [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in reqs]
    assert got == [(0.0, 472, 18), (30.0, 417, 276)]
    jsonl = tmp_path / "mine.jsonl"
    jsonl.write_text('{"timestamp": 1000, "input_length": 10, "output_length": 3}\n' * 2)
    assert len(build_workload(f"trace:{jsonl},loop=false", 60.0)) == 2


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("Timestamp,Request tokens\n1,2\n", "needs a time column"), (None, "cannot read")],
)
def test_a_trace_that_cannot_be_replayed_names_the_file(tmp_path: Path, text, fragment):
    path = tmp_path / "bad.csv"
    if text is not None:
        path.write_text(text)
    with pytest.raises(WorkloadError, match=fragment) as err:
        build_workload(f"trace:{path}", 60.0)
    assert str(path) in str(err.value)


def test_a_trace_whose_requests_all_arrive_at_once_cannot_loop_and_says_so(tmp_path: Path):
    # a looped replay repeats the trace every span: with a span of 0 it never advanced (a hang), and the CLI's
    # size bound called the run one of 1.4e12 requests; played once it is fine
    path = tmp_path / "burst.csv"
    path.write_text("timestamp,prompt_tokens,output_tokens\n5,100,50\n5,200,60\n")
    with pytest.raises(WorkloadError, match="all arrive at the same instant.*loop=false") as err:
        build_workload(f"trace:{path}", 60.0)
    assert str(path) in str(err.value)
    assert len(build_workload(f"trace:{path},loop=false", 60.0)) == 2


def test_a_servegen_run_from_a_later_day_goes_on_into_the_next_day(tmp_path: Path):
    # day=1 from 20:00 for 8 h: its last 4 h are day 2's night, not day 1's own 00:00-04:00 again (as day=0
    # already went on; a later day was cut out alone and repeated)
    (tmp_path / "servegen").mkdir()
    rows = ["window_start_s,total_rate_rps,active_clients,rate_weighted_iat_cv"]
    for w in range(3 * 144):
        rows.append(f"{w * 600},{10.0 if w // 144 == 1 else 1.0},5,1.0")
    (tmp_path / "servegen" / "servegen_language_m-small_aggregate_600s.csv").write_text("\n".join(rows))
    (tmp_path / "azure2023_conv.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,100,10\n"
    )
    reqs = build_workload("servegen:m-small,day=1,start_h=20,peak=0.5", 8 * 3600.0, directory=tmp_path)
    day1 = sum(1 for r in reqs if r.arrival_s < 4 * 3600)
    day2 = len(reqs) - day1
    assert day1 == pytest.approx(7200, rel=0.1) and day2 == pytest.approx(720, rel=0.2)
