"""ServeGen's collection gaps (zero-rate windows) are missing data, not quiet hours: they are filled from the
same time of a nearby day at the level around the gap, unless the spec asks for ``gaps=zero``."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fleet.sim.history import history_rows
from fleet.sim.workload import (
    RateCurve,
    RateWindow,
    WorkloadError,
    build_workload,
    fill_collection_gaps,
    load_servegen,
    parse_workload_spec,
    traces_dir,
)

PER_DAY = 144
TRACES = traces_dir()
M_SMALL = TRACES / "servegen" / "servegen_language_m-small_aggregate_600s.csv"


def _shape(i: int) -> float:
    """A diurnal shape: 1 at night to 3 at midday."""
    return 2.0 - math.cos(2 * math.pi * (i % PER_DAY) / PER_DAY)


def _curve(levels: list[float], cv_of=lambda i: 2.0) -> RateCurve:
    """Days of the diurnal shape, day d at ``levels[d]`` times it."""
    windows = [
        RateWindow(600.0 * i, levels[i // PER_DAY] * _shape(i), cv_of(i))
        for i in range(PER_DAY * len(levels))
    ]
    return RateCurve(tuple(windows), 600.0, "test")


def _with_gap(curve: RateCurve, first: int, last: int) -> RateCurve:
    windows = [
        RateWindow(w.start_s, 0.0, 0.0) if first <= i <= last else w for i, w in enumerate(curve.windows)
    ]
    return RateCurve(tuple(windows), curve.window_s, curve.name)


def test_a_gap_in_a_day_of_one_level_is_filled_with_the_day_itself():
    truth = _curve([10.0, 10.0, 10.0])
    gapped = _with_gap(truth, PER_DAY + 30, PER_DAY + 70)  # day 1, 05:00 to 11:50
    filled = fill_collection_gaps(gapped)
    assert [w.rate_rps for w in filled.windows] == pytest.approx([w.rate_rps for w in truth.windows])
    assert [w.start_s for w in filled.windows] == [w.start_s for w in truth.windows]


def test_a_gap_keeps_the_days_shape_at_the_level_around_it():
    # Day 1 is at twice day 0's level: the fill follows day 0's shape times the neighbours' ratio (2).
    truth = _curve([5.0, 10.0], cv_of=lambda i: 1.0 + (i % PER_DAY) / 100)
    filled = fill_collection_gaps(_with_gap(truth, PER_DAY + 40, PER_DAY + 60))
    for i in range(PER_DAY + 40, PER_DAY + 61):
        assert filled.windows[i].rate_rps == pytest.approx(truth.windows[i].rate_rps)
        assert filled.windows[i].iat_cv == pytest.approx(truth.windows[i - PER_DAY].iat_cv)  # the day before


def test_a_gap_with_no_day_to_copy_is_filled_linearly_between_its_neighbours():
    truth = _curve([10.0])
    filled = fill_collection_gaps(_with_gap(truth, 50, 53))
    lo, hi = truth.windows[49].rate_rps, truth.windows[54].rate_rps
    assert [w.rate_rps for w in filled.windows[50:54]] == pytest.approx(
        [lo + (hi - lo) * k / 5 for k in range(1, 5)]
    )


def test_a_gap_at_the_start_takes_the_level_after_it():
    truth = _curve([10.0, 10.0])
    filled = fill_collection_gaps(_with_gap(truth, 0, 5))
    assert [w.rate_rps for w in filled.windows[:6]] == pytest.approx([w.rate_rps for w in truth.windows[:6]])


def test_a_curve_without_gaps_or_without_any_data_is_unchanged():
    full = _curve([10.0])
    assert fill_collection_gaps(full) is full
    empty = _with_gap(full, 0, PER_DAY - 1)
    assert fill_collection_gaps(empty) is empty


@pytest.mark.skipif(not M_SMALL.exists(), reason=f"shared traces not found at {TRACES}")
def test_the_m_small_trace_has_gaps_and_loads_without_them():
    raw = load_servegen(M_SMALL, fill_gaps=False)
    filled = load_servegen(M_SMALL)
    gaps = [i for i, w in enumerate(raw.windows) if w.rate_rps <= 0]
    assert gaps  # the trace's README: zero windows are collection gaps
    assert all(w.rate_rps > 0 for w in filled.windows)
    assert all(filled.windows[i] == w for i, w in enumerate(raw.windows) if w.rate_rps > 0)
    # the fill is at the level of the trace around it, not a spike or a trough
    for i in gaps:
        around = [raw.windows[j].rate_rps for j in range(i - 12, i + 13) if raw.windows[j].rate_rps > 0]
        assert 0.3 * min(around) < filled.windows[i].rate_rps < 3.0 * max(around)


@pytest.mark.skipif(not M_SMALL.exists(), reason=f"shared traces not found at {TRACES}")
def test_a_servegen_day_with_a_gap_has_arrivals_in_it_unless_gaps_is_zero():
    # m-small day 10 loses 06:00-07:10 (and more) to collection gaps
    hour = 3600.0
    filled = build_workload("servegen:m-small,day=10,peak=8,start_h=6", hour)
    assert len(filled) > 0.5 * 8 * hour / 3  # a few requests a second, not none
    with pytest.raises(WorkloadError, match="no traffic"):  # played as recorded: the hour is one gap
        build_workload("servegen:m-small,day=10,peak=8,start_h=6,gaps=zero", hour)
    rows, _ = history_rows(parse_workload_spec("servegen:m-small,day=11,peak=8"), 1, _midnight(), 24 * hour)
    day10 = [r for r in rows if r.at.hour == 6 and r.at.day == _midnight().day - 1]
    assert day10 and all(r.rps > 0 for r in day10)


def _midnight():
    from datetime import datetime, timezone

    return datetime(2026, 3, 3, tzinfo=timezone.utc)


def test_gaps_takes_fill_or_zero():
    assert parse_workload_spec("servegen:m-small,gaps=zero").params["gaps"] == "zero"
    with pytest.raises(WorkloadError, match="gaps must be fill or zero"):
        parse_workload_spec("servegen:m-small,gaps=skip")
    with pytest.raises(WorkloadError, match="unknown key"):
        parse_workload_spec("azure:conv,gaps=zero")


def test_load_servegen_reads_a_gap_file(tmp_path: Path):
    f = tmp_path / "g.csv"
    rows = ["window_start_s,total_rate_rps,active_clients,rate_weighted_iat_cv"]
    rows += [f"{600 * i},{0 if i == 2 else 10},3,{0 if i == 2 else 2}" for i in range(5)]
    f.write_text("\n".join(rows))
    assert [w.rate_rps for w in load_servegen(f).windows] == [10, 10, 10, 10, 10]
    assert [w.iat_cv for w in load_servegen(f).windows] == [2, 2, 2, 2, 2]
    assert load_servegen(f, fill_gaps=False).windows[2].rate_rps == 0
