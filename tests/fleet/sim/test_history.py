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
