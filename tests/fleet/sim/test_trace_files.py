"""Users' own request logs read as traces: gzip, big files read row by row, gateway export shapes."""

from __future__ import annotations

import gzip
import json
import os
import tracemalloc
from pathlib import Path

import pytest

from fleet.cli import main
from fleet.sim.workload import WorkloadError, build_workload, load_columns, read_trace_file

CSV = "timestamp,prompt_tokens,completion_tokens\n0,100,20\n1.5,200,30\n3,50,5\n"
JSONL = (
    '{"timestamp": 0, "input_length": 10, "output_length": 3}\n'
    '{"timestamp": 2000, "input_length": 20, "output_length": 4}\n'
)


@pytest.mark.parametrize(("name", "text"), [("log.csv.gz", CSV), ("log.jsonl.gz", JSONL)])
def test_a_gzip_compressed_trace_reads_as_the_plain_one(tmp_path: Path, name: str, text: str) -> None:
    plain = tmp_path / name.removesuffix(".gz")
    plain.write_text(text)
    packed = tmp_path / name
    packed.write_bytes(gzip.compress(text.encode()))
    assert load_columns(packed) == load_columns(plain)
    assert len(build_workload(f"trace:{packed},loop=false", 60.0)) == len(load_columns(plain))


def test_a_broken_gzip_file_is_one_line_naming_it(tmp_path: Path, capsys) -> None:
    path = tmp_path / "log.csv.gz"
    path.write_bytes(gzip.compress(CSV.encode())[:30])  # cut short, as a download that stopped
    with pytest.raises(WorkloadError, match="not a readable gzip file"):
        read_trace_file(path)
    code = main(["simulate", "--workload", f"trace:{path}", "--hours", "1", "--json"])
    err = capsys.readouterr().err
    assert code == 2 and f"{path}: not a readable gzip file" in err and "Traceback" not in err


def test_a_trace_is_unpacked_by_its_bytes_not_its_name(tmp_path: Path) -> None:
    # a .gz that a browser already unpacked was "not a readable gzip file"; logrotate's access.log.1
    # compressed in place was "not UTF-8 text"
    plain = tmp_path / "log.csv"
    plain.write_text(CSV)
    unpacked = tmp_path / "download.csv.gz"
    unpacked.write_text(CSV)
    packed = tmp_path / "rotated.csv"
    packed.write_bytes(gzip.compress(CSV.encode()))
    assert load_columns(unpacked) == load_columns(packed) == load_columns(plain)


def test_a_big_trace_is_read_row_by_row_not_held_whole(tmp_path: Path) -> None:
    # the reader held the whole text and a dict per row besides the requests: a million-row gateway log
    # took gigabytes; now what stays is the requests (and the sort's list of them)
    rows = 20_000
    path = tmp_path / "big.csv"
    with path.open("w") as handle:
        handle.write("timestamp,model,user,prompt_tokens,completion_tokens,total_tokens,status\n")
        for i in range(rows):
            handle.write(
                f"{i * 0.01:.2f},qwen2.5-14b-instruct,user-{i % 97},{100 + i % 7},{20 + i % 5},0,ok\n"
            )
    tracemalloc.start()
    try:
        got = load_columns(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(got) == rows
    # 850 bytes a row before (the text, a dict a row, the requests), 180 now (the requests, restarted at 0 s)
    assert peak < rows * 400, f"peak {peak / 1e6:.1f} MB for {rows} rows"


SKIPPY = "timestamp,prompt_tokens,completion_tokens\n0,10,2\n60,,2\n120,-5,2\n180,10,0\n240,11,3\n300,11,3\n"
SKIPPED = "3 of 6 rows skipped: 1 with zero tokens (failed requests), 1 with no token counts, 1 with negative"


def test_fleet_size_warns_of_skipped_rows_on_stderr_not_in_its_json(tmp_path: Path, capsys) -> None:
    path = tmp_path / "gw.csv"
    path.write_text(SKIPPY)
    code = main(["size", "--model", "Qwen2.5-14B", "--trace", str(path), "--top", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["workload"]["trace_requests"] == 3
    assert f"warning: {path}: {SKIPPED}" in " ".join(err.split())


def test_fleet_size_warns_of_a_log_read_twice(tmp_path: Path, capsys) -> None:
    path = tmp_path / "gw.csv"
    rows = "".join(f"{t * 30},{300 + t},{40 + t % 5}\n" for t in range(20))
    path.write_text("timestamp,prompt_tokens,completion_tokens\n" + rows + rows)
    code = main(["size", "--model", "Qwen2.5-14B", "--trace", str(path), "--top", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["workload"]["trace_requests"] == 40
    assert f"warning: {path}: 20 of 40 requests repeat another exactly" in " ".join(err.split())


def test_fleet_simulate_warns_of_skipped_rows_once_before_the_run(tmp_path: Path, capsys) -> None:
    path = tmp_path / "gw.csv"
    path.write_text(SKIPPY)
    # a bad fault ends the command right after the workload is checked: the warning comes before any run
    code = main(["simulate", "--workload", f"trace:{path}", "--hours", "1", "--fault", "bogus", "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert " ".join(err.split()).count(SKIPPED) == 1


def test_hours_past_the_end_of_a_trace_played_once_are_warned_of_once(tmp_path: Path, capsys) -> None:
    # the run went on idle after the trace's last request, and its GPU-hours grew with nothing said
    path = tmp_path / "gw.csv"
    path.write_text("timestamp,prompt_tokens,completion_tokens\n0,10,2\n1800,11,3\n")
    argv = ["simulate", "--workload", f"trace:{path},loop=false,speed=2", "--hours", "2", "--fault", "bogus"]
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    err = " ".join(err.split())
    assert code == 2 and out == ""
    assert (
        err.count("with loop=false ends at 0.25 h (900 s) of the 2 h run: the last 1.75 h have no requests")
        == 1
    )
    assert "--hours 0.25" in err
    for quiet in (f"trace:{path},speed=2", f"trace:{path},loop=false,speed=2"):
        hours = "2" if "loop" not in quiet else "0.25"
        main(["simulate", "--workload", quiet, "--hours", hours, "--fault", "bogus", "--json"])
        assert "ends at" not in capsys.readouterr().err


# The published traces' shapes and the ways files come: each must give these three requests.
SHAPES = {
    "burstgpt.csv": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,100,20,120,Conversation log\n6,ChatGPT,9,0,9,Conversation log\n"
    "7,GPT-4,50,10,60,Conversation log\n9,GPT-4,30,5,35,Conversation log\n",
    "azure.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0000000,100,20\n"
    "2023-11-16 18:15:48.0000000,50,10\n2023-11-16 18:15:50.0000000,30,5",
    "mooncake.jsonl": '{"timestamp": 0, "input_length": 100, "output_length": 20, "hash_ids": [0]}\n'
    '{"timestamp": 2000, "input_length": 50, "output_length": 10, "hash_ids": [1]}\n'
    '{"timestamp": 4000, "input_length": 30, "output_length": 5, "hash_ids": [2]}\n',
    "crlf.csv": "time,input_tokens,output_tokens\r\n0,100,20\r\n2,50,10\r\n4,30,5\r\n",
    "unsorted.csv": "time,input_tokens,output_tokens\n4,30,5\n0,100,20\n2,50,10\n",
    "iso-t-zone.csv": "time,input_tokens,output_tokens\n2024-12-06T10:00:00+08:00,100,20\n"
    "2024-12-06T02:00:02Z,50,10\n2024-12-06T10:00:04+08:00,30,5\n",
    "iso-space.csv": "time,input_tokens,output_tokens\n2024-12-06 10:00:00,100,20\n"
    "2024-12-06 10:00:02,50,10\n2024-12-06 10:00:04,30,5\n",
}


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("packed", [False, True])
def test_published_shapes_read_the_same_plain_or_gzip(tmp_path: Path, name: str, packed: bool) -> None:
    path = tmp_path / (name + (".gz" if packed else ""))
    data = SHAPES[name].encode()
    path.write_bytes(gzip.compress(data) if packed else data)
    got = [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in load_columns(path)]
    assert got == [(0.0, 100, 20), (2.0, 50, 10), (4.0, 30, 5)]


def test_fleet_simulate_parses_the_users_trace_once_and_runs_as_a_run_that_reads_it_itself(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    # the file was parsed to bound the run, to warn of skipped rows, to say where a loop=false trace ends,
    # to build the workload and to calibrate the sizes: five reads of a log that may hold millions of rows,
    # held off by a cache keyed by the file's stat. Now the command reads it once and hands the read on.
    from fleet.config import load_config
    from fleet.sim import scenario, workload
    from fleet.sim.types import SimOptions

    path = tmp_path / "gw.csv"
    path.write_text(SKIPPY)
    config = tmp_path / "fleet.yaml"  # the rules alone, so no capacity model is sized during the run
    config.write_text(scenario.DEFAULT_CONFIG.read_text().replace("mode: on", "mode: off"))
    spec = f"trace:{path},loop=false,seed=0"
    parsed: list[str] = []
    parse = workload.read_trace

    def counted(lines, source: str, **how):
        parsed.append(source)
        return parse(lines, source, **how)

    def sized(factory, sizes, slo_ms, *, seed=0, duration_s=600.0):
        # the engine's bisection takes seconds: a stand-in that still reads the sizes it was handed
        return scenario.CapacityTest(sum(r.prompt_tokens for r in sizes) / 10, float(len(sizes)))

    monkeypatch.setattr(workload, "read_trace", counted)
    monkeypatch.setattr(scenario, "capacity_test", sized)
    argv = ["simulate", "--config", str(config), "--workload", spec, "--hours", "0.1", "--json"]
    for _ in range(2):  # each run reads the file, once: a second run in the process is not handed the first's
        parsed.clear()
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 0 and parsed == [str(path)]
        err = " ".join(err.split())
        assert err.count(SKIPPED) == 1 and err.count("with loop=false ends at") == 1
    # the same run with the trace read by the run itself, as a library caller runs it
    alone = scenario.simulate(load_config(config, env={}), spec, 0.1, options=SimOptions())
    assert json.loads(out) == json.loads(json.dumps(alone.summary))
    assert alone.summary["requests"] == 3 and alone.summary["capacity_rps_per_instance"] == 3.2


def test_a_trace_rewritten_in_place_is_read_anew_even_where_its_stat_says_the_same(tmp_path: Path) -> None:
    # a cache keyed by inode, size and modification time gave the old rows for a file rewritten within the
    # file system's time resolution (or with its time set back, as a copy that keeps times does)
    path = tmp_path / "gw.csv"
    path.write_text(CSV)
    stat = path.stat()
    assert [r.prompt_tokens for r in read_trace_file(path).requests] == [100, 200, 50]
    with path.open("r+") as handle:  # the same inode and size
        handle.write(CSV.replace("0,100,20", "0,900,20"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert [r.prompt_tokens for r in read_trace_file(path).requests] == [900, 200, 50]


def _access(t: int, prompt: int) -> str:
    return json.dumps({"created": t, "usage": {"prompt_tokens": prompt, "completion_tokens": 7}})


def test_a_gateways_log_of_any_name_is_read_as_json_lines_by_its_content(tmp_path: Path) -> None:
    # `kubectl logs deploy/gateway > gw.log`: read as CSV for its name, it was "needs a time column ...;
    # found info:     started server process [1]"
    path = tmp_path / "gw.log"
    path.write_text(
        "INFO:     Started server process [1]\n" + _access(1733500000, 10) + "\n" + _access(1733500002, 20)
    )
    got = read_trace_file(path)
    assert [(r.arrival_s - 1733500000, r.prompt_tokens) for r in got.requests] == [(0, 10), (2, 20)]
    assert got.skipped_note() == "1 of 3 rows skipped: 1 not JSON (the log's other lines)"
    # a name that says CSV is read as CSV, a row that begins with a brace among its rows
    named = tmp_path / "gw.csv"
    named.write_text(CSV + "{x},,\n")
    assert read_trace_file(named).skipped_note() == "1 of 4 rows skipped: 1 with no token counts"


def test_fleet_size_reads_a_csv_trace_among_a_programs_other_output(tmp_path: Path, capsys) -> None:
    # `kubectl logs deploy/gateway > gw.log` of a gateway that prints CSV: the first line was taken for the
    # header ("needs a time column ...; found info:     started server process [1]")
    path = tmp_path / "gw.log"
    rows = [f"{1733500000 + t * 30},{300 + t},{40 + t % 5}\n" for t in range(20)]
    path.write_text(
        "INFO:     Started server process [1]\ntimestamp,prompt_tokens,completion_tokens\n"
        + "".join(rows[:10])
        + "WARNING: upstream slow, retrying, 2 s\n"
        + "".join(rows[10:])
    )
    code = main(["size", "--model", "Qwen2.5-14B", "--trace", str(path), "--top", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["workload"]["trace_requests"] == 20
    note = "2 of 22 rows skipped: 2 not rows of the CSV trace (the log's other lines)"
    assert f"warning: {path}: {note}" in " ".join(err.split())


GUESSED = "numeric times read as epoch seconds"
RELATIVE_MS = "".join(
    f'{{"timestamp": {1_500_000_000 + i * 60_000}, "input_length": 100, "output_length": 20}}\n'
    for i in range(5)
)


def test_fleet_size_says_when_the_unit_of_a_traces_times_is_a_guess_and_takes_the_one_given(
    tmp_path: Path, capsys
) -> None:
    path = tmp_path / "late.jsonl"  # 17 days into a trace in ms from its start: reads as a date of 2017
    path.write_text(RELATIVE_MS)
    argv = ["size", "--model", "Qwen2.5-14B", "--trace", str(path), "--top", "1", "--json"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0 and GUESSED in err and "--trace-time-unit ms" in " ".join(err.split())
    assert json.loads(out)["workload"]["trace_requests"] == 5
    code = main([*argv, "--trace-time-unit", "ms"])
    out, err = capsys.readouterr()
    assert code == 0 and GUESSED not in err
    assert main([*argv, "--trace-time-unit", "minutes"]) == 2
    assert "--trace-time-unit: 'minutes' is not one of s, ms, us, ns" in capsys.readouterr().err


def test_a_simulated_trace_takes_its_time_unit_from_the_spec(tmp_path: Path, capsys) -> None:
    path = tmp_path / "late.jsonl"
    path.write_text(RELATIVE_MS)
    # a minute apart in milliseconds; read as epoch seconds, 16.7 hours apart: one request in the hour
    seconds = build_workload(f"trace:{path},loop=false", 3600.0)
    millis = build_workload(f"trace:{path},loop=false,time_unit=ms", 3600.0)
    assert len(seconds) == 1 and [r.arrival_s for r in millis] == [0.0, 60.0, 120.0, 180.0, 240.0]
    code = main(["simulate", "--workload", f"trace:{path},time_unit=h", "--hours", "1", "--json"])
    assert code == 2 and "time_unit must be one of s, ms, us, ns" in capsys.readouterr().err
    # the guess is said once before the run, naming the key that settles it
    code = main(["simulate", "--workload", f"trace:{path}", "--hours", "1", "--fault", "bogus", "--json"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and err.count(GUESSED) == 1 and "time_unit=ms" in err


def test_a_utf16_trace_is_read_and_another_encoding_is_named(tmp_path: Path) -> None:
    # PowerShell's > saves UTF-16 with its byte-order mark: it was "not UTF-8 text (byte 0): not a trace"
    path = tmp_path / "gw.csv"
    path.write_bytes(CSV.replace("\n", "\r\n").encode("utf-16"))
    assert load_columns(path) == load_columns_of(tmp_path, CSV)
    path.write_bytes("timestamp,model,prompt_tokens,completion_tokens\n0,café,1,1\n".encode("latin-1"))
    with pytest.raises(WorkloadError, match=r"gw.csv: not UTF-8 text \(byte 53\): save it as UTF-8"):
        read_trace_file(path)


def load_columns_of(tmp_path: Path, text: str) -> list:
    plain = tmp_path / "plain.csv"
    plain.write_text(text)
    return load_columns(plain)


def test_a_cri_log_cut_inside_a_character_is_read_whole(tmp_path: Path) -> None:
    # containerd cuts at 16 KiB of bytes: inside a character of Chinese text, each piece alone is not UTF-8,
    # and the file was refused as "not UTF-8 text"
    cut = 16 * 1024
    records = []
    for t in range(3):
        line = json.dumps(
            {
                "created": 1733500000 + t,
                "messages": "你好" * 6000,
                "usage": {"prompt_tokens": 9, "completion_tokens": 3},
            },
            ensure_ascii=False,
        ).encode()
        pieces = [line[i : i + cut] for i in range(0, len(line), cut)]
        for k, piece in enumerate(pieces):
            tag = b"F" if k == len(pieces) - 1 else b"P"
            records.append(b"2024-12-06T10:00:00.1Z stdout " + tag + b" " + piece + b"\n")
    data = b"".join(records)
    with pytest.raises(UnicodeDecodeError):
        data.decode()  # a cut is inside a character
    for name, body in (("gw.log", data), ("gw.log.gz", gzip.compress(data))):
        path = tmp_path / name
        path.write_bytes(body)
        got = read_trace_file(path)
        assert [r.prompt_tokens for r in got.requests] == [9, 9, 9] and got.skipped_note() is None
