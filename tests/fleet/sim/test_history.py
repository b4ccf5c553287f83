"""--history-days: the trace's preceding days of demand, scaled as the run's day, without engines."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fleet.sim.history import history_rows
from fleet.sim.types import DEFAULT_START
from fleet.sim.workload import build_workload, parse_workload_spec, servegen_path

needs_servegen = pytest.mark.skipif(
    not servegen_path("language_m-large").exists(), reason=f"shared traces not found at {servegen_path('')}"
)


@needs_servegen
def test_preceding_days_of_a_servegen_day_are_written_per_minute():
    spec = parse_workload_spec("servegen:m-small,day=2,peak=15")
    rows, note = history_rows(spec, 2, DEFAULT_START, 3600.0)
    assert len(rows) == 2 * 1440 and "2 day(s)" in note
    assert rows[0].at == DEFAULT_START - timedelta(days=2)
    assert rows[-1].at == DEFAULT_START - timedelta(minutes=1)
    # same scale as the run: the first hour of the run and the hour just before it are of one size
    run = build_workload(spec, 3600.0)
    run_rps = len(run) / 3600.0
    before = sum(r.rps for r in rows[-60:]) / 60
    assert 0.5 < before / run_rps < 2.0


@needs_servegen
def test_the_trace_has_only_so_many_days_before():
    spec = parse_workload_spec("servegen:m-small,day=1,peak=15")
    rows, note = history_rows(spec, 5, DEFAULT_START, 3600.0)
    assert len(rows) == 1440 and "no day before day 0" in note


def test_replays_have_no_preceding_days():
    rows, note = history_rows(parse_workload_spec("azure:code"), 3, DEFAULT_START, 3600.0)
    assert rows == [] and "no preceding days" in note


@needs_servegen
def test_the_history_scatters_as_the_runs_clumps_do_not_as_poisson():
    """The run draws a window's arrivals at its recorded CV (clumps); the history was written with Poisson
    noise alone, so a forecast or dispersion learned from it had never seen a clump."""
    import statistics

    from fleet.sim.workload import load_servegen

    spec = parse_workload_spec("servegen:m-mid,day=2,peak=15")
    rows, _ = history_rows(spec, 1, DEFAULT_START, 3600.0)
    curve = load_servegen(servegen_path("language_m-mid")).day(1)
    assert len(rows) == 10 * len(curve.windows)
    ratios, expected = [], []
    for i, w in enumerate(curve.windows):
        counts = [r.rps * 60.0 for r in rows[10 * i : 10 * i + 10]]
        mean = statistics.fmean(counts)
        if len(counts) == 10 and mean > 20:
            ratios.append(statistics.variance(counts) / mean)  # the index of dispersion of the minutes
            expected.append(min(w.iat_cv if w.iat_cv > 0 else 1.0, 8.0) ** 2)
    assert len(ratios) > 50
    got, want = statistics.median(ratios), statistics.median(expected)
    assert want > 4  # a clumpy trace: Poisson minutes would read about 1
    assert want / 2 < got < want * 2
