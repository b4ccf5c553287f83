"""Synthetic traffic shapes (``shape:NAME`` workloads): the SPEC parses with durations and defaults, bad
values are one line, each shape's arrivals follow its definition within Poisson noise, and a seed fixes the
draw."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from fleet.cli import main
from fleet.sim.scenario import requests_upper_bound, run_start
from fleet.sim.shapes import SHAPES, make_shape, shape_arrivals
from fleet.sim.types import DEFAULT_START
from fleet.sim.workload import (
    Request,
    WorkloadError,
    build_workload,
    parse_workload_spec,
    shape_of,
    traces_dir,
)

needs_traces = pytest.mark.skipif(
    not (traces_dir() / "azure2023_conv.csv").exists(), reason=f"shared traces not found at {traces_dir()}"
)
SIZES = [Request(0.0, 100 + i, 10 + i) for i in range(50)]
M = 60.0

# The shapes as the probe of 2026-12-07 defined them (a one-off generator script then), written out again
# here so that the module's own rate functions are checked against them, not against themselves.
REFERENCE: dict[str, tuple[float, Callable[[float], float]]] = {
    "ramp": (120 * M, lambda t: (0.5 + 11.5 * t / (60 * M)) if t < 60 * M else (12.0 if t < 90 * M else 1.0)),
    "flash": (120 * M, lambda t: 12.0 if 40 * M <= t < 48 * M else 1.0),
    "step": (120 * M, lambda t: 2.0 if t < 30 * M else 10.0),
    "silence": (120 * M, lambda t: 0.0 if t < 70 * M else 8.0),
    "sine": (180 * M, lambda t: 5.5 + 4.5 * math.sin(2 * math.pi * t / (90 * M))),
    "spikes": (120 * M, lambda t: 25.0 if (t % (5 * M)) < 20 else 1.0),
    "drop": (120 * M, lambda t: 10.0 if t < 30 * M else 0.5),
    "noise": (120 * M, lambda t: 4.0),
}


def _expected(rate: Callable[[float], float], lo: float, hi: float) -> float:
    """Requests a Poisson process at ``rate`` brings in [lo, hi): the rate integrated by the second."""
    return sum(rate(lo + k + 0.5) for k in range(int(hi - lo)))


def _assert_follows(arrivals: list[Request], rate: Callable[[float], float], duration_s: float) -> None:
    """Every minute's count within five standard deviations (and the request at 0 s) of the rate's."""
    counts = [0] * math.ceil(duration_s / M)
    for r in arrivals:
        counts[int(r.arrival_s // M)] += 1
    for minute, n in enumerate(counts):
        want = _expected(rate, minute * M, min(duration_s, (minute + 1) * M))
        assert abs(n - want) <= 5 * math.sqrt(want) + 2, (minute, n, want)


def test_every_shape_has_a_reference_definition():
    assert set(SHAPES) == set(REFERENCE)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_each_shape_at_its_defaults_follows_its_definition_minute_by_minute(name: str):
    duration_s, rate = REFERENCE[name]
    assert SHAPES[name].hours * 3600 == duration_s
    arrivals = shape_arrivals(make_shape(name, {}), duration_s, SIZES, seed=11)
    assert arrivals[0].arrival_s == 0.0 and all(0 <= r.arrival_s < duration_s for r in arrivals)
    assert [r.arrival_s for r in arrivals] == sorted(r.arrival_s for r in arrivals)
    _assert_follows(arrivals, rate, duration_s)


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("shape:flash,base=2,peak=30,at=10m,for=90s", lambda t: 30.0 if 600 <= t < 690 else 2.0),
        ("shape:ramp,base=0,peak=6,at=5m,for=10m,hold=5m,after=3", None),
        ("shape:step,base=1,peak=5,at=1h30m", lambda t: 1.0 if t < 5400 else 5.0),
        ("shape:silence,peak=3,at=20m", lambda t: 0.0 if t < 1200 else 3.0),
        ("shape:sine,base=2,peak=6,period=20m", lambda t: 4.0 + 2.0 * math.sin(2 * math.pi * t / 1200)),
        ("shape:spikes,base=0.5,peak=40,every=2m,width=10s", lambda t: 40.0 if t % 120 < 10 else 0.5),
        ("shape:drop,peak=8,base=0,at=15m", lambda t: 8.0 if t < 900 else 0.0),
        ("shape:noise,base=7", lambda t: 7.0),
    ],
)
def test_a_shapes_parameters_move_its_rate_as_named(text: str, rate: Callable[[float], float] | None):
    def ramp(t: float) -> float:
        if t < 300:
            return 0.0
        return 6.0 * (t - 300) / 600 if t < 900 else (6.0 if t < 1200 else 3.0)

    shape = shape_of(parse_workload_spec(text))
    _assert_follows(shape_arrivals(shape, 7200.0, SIZES, seed=4), rate or ramp, 7200.0)


def test_times_take_the_policys_duration_syntax_and_keys_any_case():
    shape = shape_of(parse_workload_spec("shape:Flash,AT=1h30m,for=90,peak=20"))
    assert (shape.name, shape.at_s, shape.for_s, shape.peak_rps, shape.base_rps) == ("flash", 5400, 90, 20, 1)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("shape:tsunami", "unknown shape 'tsunami'; one of ramp, flash, step, silence, sine, spikes, drop"),
        ("shape:flash,period=3m", "unknown key(s) period; allowed: at, base, for, peak, seed, sizes"),
        ("shape:flash,at=soon", "at='soon' is not a duration like 90s, 40m or 1h30m"),
        ("shape:flash,at=-5m", "at='-5m' is not a duration"),
        ("shape:flash,at=400d", "a duration cannot be longer than 366d"),
        ("shape:flash,for=0", "for must be longer than 0 s"),
        ("shape:sine,period=0s", "period must be longer than 0 s"),
        ("shape:spikes,every=1m,width=1m", "width must be shorter than every"),
        ("shape:flash,peak=lots", "peak='lots' is not a rate in req/s"),
        ("shape:flash,base=-1", "base must be a rate of 0 req/s or more"),
        ("shape:flash,peak=2000", "peak must be between 0 and 1000"),
        ("shape:noise,base=0", "the shape has no traffic"),
        ("shape:flash,base=0,peak=0", "the shape has no traffic"),
        ("shape:step,sizes=huge", "sizes must be one of azure-conv"),
        ("shape:step,seed=1.5", "seed must be a whole number"),
        ("shape:step,start_h=1e6", "start_h must be between 0 and 336"),
    ],
)
def test_bad_shape_specs_name_the_problem(text: str, fragment: str):
    with pytest.raises(WorkloadError) as info:
        parse_workload_spec(text)
    assert fragment in str(info.value) and text in str(info.value)


def test_the_kinds_listed_for_an_unknown_kind_include_shape():
    with pytest.raises(WorkloadError, match="one of servegen, azure, mooncake, trace, shape"):
        parse_workload_spec("synthetic:flash")


def test_a_seed_fixes_the_draw_and_another_seed_changes_it():
    shape = make_shape("flash", {})
    first = shape_arrivals(shape, 3600.0, SIZES, seed=7)
    assert first == shape_arrivals(shape, 3600.0, SIZES, seed=7)
    assert first != shape_arrivals(shape, 3600.0, SIZES, seed=8)


@needs_traces
def test_the_draw_does_not_depend_on_the_processs_string_hashing():
    code = (
        "import hashlib; from fleet.sim.workload import build_workload as b; "
        "print(hashlib.sha256(repr(b('shape:spikes,seed=3', 600.0)).encode()).hexdigest())"
    )

    def digest(hash_seed: str) -> str:
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        return run.stdout.strip()

    here = hashlib.sha256(repr(build_workload("shape:spikes,seed=3", 600.0)).encode()).hexdigest()
    assert digest("1") == digest("2") == here


@needs_traces
def test_a_shape_draws_sizes_from_its_size_source_with_prompts_cut():
    conv = build_workload("shape:noise,base=20", 300.0)
    code = build_workload("shape:noise,base=20,sizes=azure-code", 300.0)
    assert [r.arrival_s for r in conv] == [r.arrival_s for r in code]  # one draw, sizes from another trace
    assert [r.prompt_tokens for r in conv] != [r.prompt_tokens for r in code]
    cut = build_workload("shape:noise,base=20,sizes=azure-code", 300.0, max_prompt_tokens=500)
    assert max(r.prompt_tokens for r in cut) == 500


def test_a_shape_starts_at_10_local_unless_start_h_says_otherwise():
    from datetime import timedelta

    assert run_start(parse_workload_spec("shape:flash"), DEFAULT_START) == DEFAULT_START + timedelta(hours=10)
    at_14 = run_start(parse_workload_spec("shape:flash,start_h=14.5"), DEFAULT_START)
    assert at_14 == DEFAULT_START + timedelta(hours=14.5)


def test_the_request_bound_is_the_shapes_top_rate():
    assert requests_upper_bound(parse_workload_spec("shape:spikes"), 2.0) == 25 * 7200 + 1
    assert requests_upper_bound(parse_workload_spec("shape:ramp,after=40"), 1.0) == 40 * 3600 + 1


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("shape:flash,at=soon", "at='soon' is not a duration"),
        ("shape:spikes,width=10m", "width must be shorter than every"),
        ("shape:flash,peak=1000", "more than one run simulates"),
    ],
)
def test_a_bad_shape_on_the_command_line_is_one_line_and_exit_2(capsys, spec: str, fragment: str):
    assert main(["simulate", "--workload", spec, "--hours", "336"]) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.startswith("error: --workload") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@needs_traces
def test_a_short_shape_runs_end_to_end_on_the_command_line(capsys):
    argv = ["simulate", "--workload", "shape:flash,at=1m,for=1m,peak=6", "--hours", str(3 / 60), "--json"]
    assert main([*argv, "--policy", "static-peak"]) == 0
    summary = json.loads(capsys.readouterr().out)
    # 1 req/s, and 6 in the second minute: about 480 requests over the three
    assert 380 < summary["requests"] < 580
    assert summary["invariant_violations"] == []


@needs_traces
@pytest.mark.parametrize(("spec", "hours"), [("shape:flash", 2.0), ("shape:sine,period=1h", 3.0)])
def test_a_shape_without_hours_runs_its_own_window_not_a_day(monkeypatch, spec, hours):
    """--hours defaulted to 24: a flash crowd's run went on for 22 hours of its base rate after it."""
    import fleet.sim.scenario as scenario

    asked: list[float] = []

    class Stop(Exception):
        pass

    def run(cfg, workload, run_hours, **kw):
        asked.append(run_hours)
        raise Stop

    monkeypatch.setattr(scenario, "simulate", run)
    with pytest.raises(Stop):
        main(["simulate", "--workload", spec, "--json"])
    with pytest.raises(Stop):
        main(["simulate", "--workload", spec, "--hours", "5", "--json"])
    assert asked == [hours, 5.0]


def test_the_shapes_sweep_runs_every_shape_over_its_window_under_ours_static_and_kpa():
    from fleet.sim.sweep import Sweep, sweep_runs

    workloads, policies = sweep_runs(Sweep.SHAPES)
    assert policies == ("ours", "static-peak", "kpa")
    assert workloads == [(f"shape-{n}", f"shape:{n}", 3.0 if n == "sine" else 2.0) for n in REFERENCE]
    assert {h for _, _, h in sweep_runs(Sweep.SHAPES, hours=1.0)[0]} == {1.0}


def test_sweep_shapes_on_the_command_line_reaches_the_sweep_and_prints_its_json(monkeypatch, capsys):
    import fleet.sim.sweep as sweep

    seen = {}

    def fake_run_sweep(cfg, *, sweep, days, hours, progress, jobs, hardware):
        seen.update(sweep=sweep, days=days, hours=hours)
        return {"sweep": sweep.value, "workloads": {}, "distribution": {}}

    monkeypatch.setattr(sweep, "run_sweep", fake_run_sweep)
    assert main(["bench", "autoscale", "--sweep", "shapes", "--quick", "--json"]) == 0
    assert seen == {"sweep": sweep.Sweep.SHAPES, "days": None, "hours": 1.0}
    assert json.loads(capsys.readouterr().out)["sweep"] == "shapes"


def test_sweep_shapes_refuses_days_in_one_line(capsys):
    assert main(["bench", "autoscale", "--sweep", "shapes", "--days", "2"]) == 2
    err = capsys.readouterr().err
    assert "--days: only with --sweep servegen" in err and len(err.strip().splitlines()) == 1
