"""The baselines' decisions at their documented defaults, against stub adapters (no cloud)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from fleet.sim.baselines import EssAlarmRule, StaticPeak, TargetTracking
from fleet.sim.invariants import InvariantChecker

T0 = datetime(2026, 3, 2, tzinfo=UTC)


class StubEss:
    def __init__(self, desired: int, states: dict[str, str]) -> None:
        self.desired = desired
        self.states = states
        self.writes: list[int] = []
        self.modified: list[dict] = []

    def describe_scaling_groups(self, ids):
        return [SimpleNamespace(desired_capacity=self.desired, total_capacity=len(self.states))]

    def describe_scaling_instances(self, gid, states=None):
        return [
            SimpleNamespace(instance_id=i, lifecycle_state=s)
            for i, s in self.states.items()
            if states is None or s in states
        ]

    def scale_to(self, gid, n, token):
        self.writes.append(n)
        self.desired = n
        return "act"

    def modify_scaling_group(self, gid, **kw):
        self.modified.append(kw)


class StubCms:
    custom_namespace = "acs_customMetric_1"

    def __init__(self) -> None:
        self.value = 0.0
        self.at = T0

    def metric_list(self, ns, metric, ids, start, end, period_s=60, statistic="Average"):
        return [SimpleNamespace(instance_id=i, value=self.value, timestamp=end) for i in ids]

    def metric_last(self, ns, metric, ids, statistic="Average"):
        return [SimpleNamespace(instance_id=i, value=self.value, timestamp=self.at) for i in ids]


def fleet(n: int) -> dict[str, str]:
    return {f"i-{k}": "InService" for k in range(n)}


def run_minutes(ctl, cms, minutes: int, value: float, start: datetime) -> datetime:
    t = start
    for _ in range(minutes):
        cms.value = value
        ctl.tick(t)
        t += timedelta(seconds=60)
    return t


def test_static_peak_pins_min_max_and_desired_once():
    ess = StubEss(2, fleet(2))
    ctl = StaticPeak(ess, "g", 7)
    ctl.tick(T0)
    ctl.tick(T0 + timedelta(hours=1))
    assert ess.modified == [{"min_size": 7, "max_size": 7, "desired_capacity": 7}]


def test_ess_alarm_adds_one_after_three_hot_minutes():
    ess, cms = StubEss(4, fleet(4)), StubCms()
    ctl = EssAlarmRule(ess, cms, "g", 2, 10)
    ctl.tick(T0)  # arms the first evaluation period
    run_minutes(ctl, cms, 2, 90.0, T0 + timedelta(seconds=60))
    assert ess.writes == []
    run_minutes(ctl, cms, 1, 90.0, T0 + timedelta(seconds=180))
    assert ess.writes == [5]


def test_ess_alarm_cooldown_blocks_a_second_step_for_300_s():
    ess, cms = StubEss(4, fleet(4)), StubCms()
    ctl = EssAlarmRule(ess, cms, "g", 2, 10)
    ctl.tick(T0)
    run_minutes(
        ctl, cms, 7, 90.0, T0 + timedelta(seconds=60)
    )  # fires at minute 3, then again at minute 8 only
    assert ess.writes == [5]
    run_minutes(ctl, cms, 2, 90.0, T0 + timedelta(seconds=480))
    assert ess.writes == [5, 6]


def test_ess_alarm_removes_one_after_fifteen_cold_minutes_not_before():
    ess, cms = StubEss(5, fleet(5)), StubCms()
    ctl = EssAlarmRule(ess, cms, "g", 2, 10)
    ctl.tick(T0)
    t = run_minutes(ctl, cms, 14, 10.0, T0 + timedelta(seconds=60))
    assert ess.writes == []
    run_minutes(ctl, cms, 1, 10.0, t)
    assert ess.writes == [4]


def test_ess_alarm_without_data_does_nothing():
    ess, cms = StubEss(4, {}), StubCms()
    ctl = EssAlarmRule(ess, cms, "g", 2, 10)
    ctl.tick(T0)
    run_minutes(ctl, cms, 20, 95.0, T0 + timedelta(seconds=60))
    assert ess.writes == []


def test_target_tracking_sets_ceil_of_total_over_target():
    ess, cms = StubEss(4, fleet(4)), StubCms()
    cms.value = 5.0  # 20 waiting over 4 instances, target 2 -> 10
    TargetTracking(ess, cms, "g", 2, 20, target=2.0).tick(T0)
    assert ess.writes == [8]  # scale-up limited to max(+100 %, +4) per period: 4 -> 8


def test_target_tracking_ignores_changes_within_tolerance():
    ess, cms = StubEss(4, fleet(4)), StubCms()
    cms.value = 2.15  # 7.5 % above target
    TargetTracking(ess, cms, "g", 2, 20, target=2.0).tick(T0)
    assert ess.writes == []


def test_target_tracking_scale_down_waits_out_the_stabilization_window():
    ess, cms = StubEss(8, fleet(8)), StubCms()
    ctl = TargetTracking(ess, cms, "g", 2, 20, target=2.0)
    cms.value = 2.0
    ctl.tick(T0)  # recommendation 8
    t = T0
    for _ in range(19):  # 285 s of an idle queue: the 8 is still in the 300 s window
        t += timedelta(seconds=15)
        cms.at, cms.value = t, 0.0
        ctl.tick(t)
    assert ess.writes == []
    for _ in range(2):
        t += timedelta(seconds=15)
        cms.at = t
        ctl.tick(t)
    assert ess.writes == [2]


def test_checker_flags_floor_ceiling_guardrail_and_double_actions():
    chk = InvariantChecker(min_size=2, max_size=10, warm_floor=2, max_isolated=1)
    chk.check(T0, 1, {}, [])
    chk.check(T0, 11, {}, [])
    chk.check(T0, 4, {"i-1": "Standby", "i-2": "Standby"}, [])
    chk.check(T0, 4, {}, ["a-1", "a-2"])
    kinds = [v["kind"] for v in chk.violations]
    assert (
        kinds.count("floor") == 2 and "ceiling" in kinds and "guardrail" in kinds and "double_action" in kinds
    )


def test_checker_leaves_launches_that_never_served_out_of_the_guardrail():
    # a broken launch out for replacement took no serving capacity: beside one isolated node, within the limit
    states = {"i-1": "Standby", "i-2": "Standby"}
    chk = InvariantChecker(min_size=2, max_size=10, max_isolated=1)
    chk.check(T0, 4, states, [], never_served=frozenset({"i-2"}))
    assert chk.violations == []
    chk.check(T0, 4, states, [], never_served=frozenset({"i-3"}))
    assert [v["kind"] for v in chk.violations] == ["guardrail"]


def test_checker_accepts_a_healthy_tick():
    chk = InvariantChecker(min_size=2, max_size=10, warm_floor=2, max_isolated=1, floor_at=lambda _t: 6)
    chk.check(T0, 6, {"i-1": "InService", "i-2": "Standby"}, ["a-1"])
    assert chk.violations == []


def test_checker_does_not_count_activities_from_before_the_first_tick():
    # the start fleet's creation beside the first tick's write is one write in that tick, not two
    chk = InvariantChecker(min_size=2, max_size=10)
    chk.known(frozenset({"a-prewarm"}))
    chk.check(T0, 4, {}, ["a-prewarm", "a-1"])
    assert chk.violations == []
