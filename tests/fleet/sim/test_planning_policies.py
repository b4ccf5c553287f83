"""The oracle's hindsight plan, the KPA's recommendation, the model-error draw and the sweep's statistics:
pure functions, tested on their own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleet.sim.kpa import KpaParams, KpaState, recommend
from fleet.sim.modelerror import ModelError
from fleet.sim.oracle import desired_at, lead_s, minute_need, plan_per_minute
from fleet.sim.sweep import distribution

T0 = datetime(2026, 3, 2, tzinfo=UTC)


def test_minute_need_is_the_ceiling_of_each_minutes_rate_over_the_capacity():
    # 120 arrivals in minute 0 (2 req/s), 300 in minute 1 (5 req/s), none in minute 2
    arrivals = [i * 0.5 for i in range(120)] + [60 + i * 0.1 for i in range(300)]
    assert minute_need(arrivals, 1.5, 3) == (2, 4, 0)


def test_oracle_orders_one_cold_start_ahead_and_releases_at_once():
    need = (2, 2, 2, 2, 8, 8, 2, 2, 2, 2)
    lead = 120.0  # two minutes
    plan = plan_per_minute(need, lead, min_size=1, max_size=40)
    # minute 4 needs 8: ordered at minute 2 (4 - 2); released when no minute within the lead needs it
    assert plan == [2, 2, 8, 8, 8, 8, 2, 2, 2, 2]


@pytest.mark.parametrize(("lo", "hi", "expected"), [(3, 40, 3), (1, 5, 5)])
def test_oracle_stays_inside_min_and_max(lo, hi, expected):
    need = (0, 0, 9)
    assert desired_at(need, 0.0 if expected == 3 else 120.0, 0.0, lo, hi) == expected


def test_oracle_lead_is_the_cold_start_plus_the_order_delay():
    assert lead_s(240.0, tick_s=15.0, sync_s=5.0) == 260.0


def _run(state, totals, ready, current, target=2.0, p=KpaParams(), start=T0):
    d = None
    for i, total in enumerate(totals):
        d = recommend(state, start + timedelta(seconds=10 * i), total, ready, current, target, p)
    return d


def test_kpa_stable_mode_follows_the_window_mean_over_the_target():
    state = KpaState()
    d = _run(state, [20.0] * 30, ready=10, current=10)
    assert d.desired == 10 and not d.panicking
    d = _run(state, [28.0] * 30, ready=10, current=10, start=T0 + timedelta(seconds=300))
    assert d.desired == 14 and not d.panicking


def test_kpa_panics_at_twice_the_capacity_and_is_bounded_by_the_scale_up_rate():
    state = KpaState()
    _run(state, [8.0] * 20, ready=4, current=4)
    d = _run(state, [100.0] * 3, ready=4, current=4, start=T0 + timedelta(seconds=200))
    assert d.panicking
    assert d.desired == 8  # ceil(4 x max_scale_up_rate 2)


def test_kpa_never_scales_down_while_panicking():
    state = KpaState()
    _run(state, [8.0] * 20, ready=4, current=4)
    _run(state, [100.0] * 6, ready=4, current=8, start=T0 + timedelta(seconds=200))
    d = _run(state, [4.0], ready=8, current=8, start=T0 + timedelta(seconds=270))
    assert d.panicking and d.desired >= 8


def test_kpa_scale_down_waits_for_the_down_delay_and_halves_at_most():
    state = KpaState()
    _run(state, [40.0] * 30, ready=20, current=20)
    d = _run(state, [2.0] * 6, ready=20, current=20, start=T0 + timedelta(seconds=300))
    assert d.desired == 20  # the higher recommendations of the last 300 s hold
    d = _run(state, [2.0] * 40, ready=20, current=20, start=T0 + timedelta(seconds=360))
    assert d.desired == 10  # floor(20 / max_scale_down_rate 2)


def test_kpa_does_not_scale_in_before_its_stable_window_has_filled():
    state = KpaState()
    d = _run(state, [0.0] * 5, ready=6, current=6)
    assert d.desired == 6


def test_model_error_draw_is_seeded_and_bounded():
    a, b = ModelError.draw(20.0, 7), ModelError.draw(20.0, 7)
    assert a == b
    speeds = [a.speed(i) for i in range(200)]
    assert speeds == [b.speed(i) for i in range(200)]
    assert all(0.8 - 1e-9 <= s <= 1.2 + 1e-9 for s in speeds)
    assert len(set(speeds)) > 100  # each instance draws its own
    biases = {ModelError.draw(20.0, seed).bias for seed in range(20)}
    assert len(biases) == 20 and all(-0.2 <= x <= 0.2 for x in biases)


def test_model_error_refuses_a_range_outside_0_to_90():
    with pytest.raises(ValueError, match="between 0 and 90"):
        ModelError.draw(95.0, 0)


def test_sweep_distribution_summarises_ratios_and_violation_minutes_per_policy():
    def s(minutes: int, ratio: float) -> dict:
        return {"slo_violation_minutes": minutes, "gpu_hours_vs_oracle": ratio}

    results = {f"d{i}": {"ours": s(i % 2, 1.0 + i / 10), "oracle": s(0, 1.0)} for i in range(5)}
    dist = distribution(results)
    assert dist["ours"]["days"] == 5
    assert dist["ours"]["gpu_hours_vs_oracle"]["median"] == 1.2
    assert dist["ours"]["gpu_hours_vs_oracle"]["max"] == 1.4
    assert dist["ours"]["days_with_violations"] == 2
    assert dist["oracle"]["slo_violation_minutes"]["max"] == 0
    assert "unconverged_days" not in dist["ours"]  # only a policy whose runs say whether they converged


def test_sweep_names_the_days_where_the_oracle_stopped_at_its_cap_and_the_table_says_so():
    from io import StringIO

    from rich.console import Console

    from fleet.commands.simulate import print_sweep_table

    def oracle(converged: bool) -> dict:
        return {"slo_violation_minutes": 0 if converged else 3, "oracle_converged": converged}

    results = {f"d{i}": {"oracle": oracle(i != 1)} for i in range(3)}
    dist = distribution(results)
    assert dist["oracle"]["unconverged_days"] == ["d1"]
    buf = StringIO()
    print_sweep_table(dist, out=Console(file=buf, width=140))
    assert "oracle still breaks the SLO after the cap of passes on d1" in buf.getvalue()


def test_hindsight_correction_adds_a_fifth_to_each_late_minute_and_the_one_before():
    from fleet.sim.oracle import bump_need

    assert bump_need((10, 10, 3, 3, 3), [1, 2]) == (12, 12, 4, 3, 3)
    assert bump_need((0, 2), [0]) == (1, 2)


def test_level_oracle_holds_its_margin_over_each_windows_mean_and_ignores_where_the_clumps_fall():
    from fleet.sim.oracle import level_need

    # window 0 (minutes 0-9): 600 arrivals all in its first second, a clump; window 1: 1,200 spread out
    arrivals = [0.001 * i for i in range(600)] + [600.0 + 0.5 * i for i in range(1200)]
    need = level_need(arrivals, 0.5, 20, headroom=1.5)
    assert need[:10] == (3,) * 10  # 1 req/s over the window: 2 instances at 0.5 req/s, x1.5
    assert need[10:] == (6,) * 10  # 2 req/s: 4 instances, x1.5
    assert level_need(arrivals, 0.5, 20, headroom=1.0)[0] == 2
    assert level_need([], 0.5, 3, headroom=2.0) == (0, 0, 0)
