"""A simulated day under the example policy: morning ramp, a spike, a metrics outage and an overheating node.

``decide`` runs every 30 s on a virtual clock against the small simulated group of policy_world.py, with the
history fed back each tick, exactly as the service does. Times are Asia/Shanghai (UTC+8).
"""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from policy_builders import GROUP
from policy_world import World

from policies import GroupSpec, PolicySpec, WarningCode, decide
from policies.schedule import bounds

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml"
TICK_S = 30
DAY = datetime(2026, 12, 7, 0, 0, tzinfo=UTC) - timedelta(hours=8)  # Monday 00:00 in Shanghai


def local(hour: float) -> datetime:
    return DAY + timedelta(hours=hour)


def example_spec() -> PolicySpec:
    raw = yaml.safe_load(EXAMPLE.read_text())["groups"][0]
    raw.pop("metrics_source", None)
    return PolicySpec(groups=(GroupSpec.model_validate({**raw, "name": GROUP}),))


def demand(at: datetime) -> float:
    """Traffic in instances' worth: quiet night, ramp 08:00-10:00 to 8, a 10-minute spike to 16 at 14:00."""
    h = (at - DAY).total_seconds() / 3600
    if h < 8:
        return 1.5
    if h < 10:
        return 1.5 + (h - 8) / 2 * 6.5
    if 14 <= h < 14 + 10 / 60:
        return 16.0
    if h < 18:
        return 8.0
    if h < 19:
        return 8.0 - (h - 18) * 6.5
    return 1.5


@pytest.fixture(scope="module")
def day():
    spec = example_spec()
    world = World(DAY, 2, cold_start_s=180, demand=demand)
    world.outage = (local(20), local(20 + 20 / 60))
    hist = None
    log = []
    hot_from = local(11)
    while world.now < DAY + timedelta(days=1):
        if world.now == hot_from:
            victim = sorted(n.instance_id for n in world.serving())[0]
            world.nodes[victim].hot = True
        plan = decide(world.observe(), spec, hist, world.now)
        hist = plan.history
        log.append((world.now, len(world.serving()), plan))
        world.apply(plan)
        world.advance(TICK_S)
    return spec, world, hist, log


def at_or_after(log, when):
    return next(entry for entry in log if entry[0] >= when)


def test_business_hours_floor_is_serving_when_the_window_opens(day):
    _, _, _, log = day
    _, in_service, _ = at_or_after(log, local(9))
    assert in_service >= 6


def test_morning_ramp_scales_out_beyond_the_floor(day):
    _, _, _, log = day
    late_morning = [n for at, n, _ in log if local(10) <= at < local(11)]
    assert max(late_morning) >= 8  # demand is 8 instances' worth: the rules add to the floor of 6
    assert min(late_morning) >= 7


def test_spike_is_answered_within_a_cold_start_and_never_above_max(day):
    spec, _, _, log = day
    during = [(at, n, p) for at, n, p in log if local(14) <= at < local(14 + 10 / 60)]
    assert max(p.group(GROUP).serving_target for _, _, p in during) >= 14
    assert max(n for _, n, _ in during) >= 12  # new instances serve a cold start after the order
    assert all(p.group(GROUP).target_capacity <= spec.groups[0].max_size for _, _, p in log)


def test_the_group_never_falls_below_its_floor_once_reached(day):
    spec, _, _, log = day
    g = spec.groups[0]
    checked = 0
    for at, in_service, _ in log:
        # a floor is owed once it has been in force for a cold start (plus a tick to order)
        settled = at - timedelta(seconds=g.cold_start_s + TICK_S)
        if settled >= DAY and bounds(g, settled).floor == bounds(g, at).floor:
            assert in_service >= bounds(g, at).floor
            checked += 1
    assert checked > len(log) * 0.9


def test_metrics_outage_never_scales_in_and_is_reported(day):
    _, _, _, log = day
    during = [(at, p) for at, _, p in log if local(20) <= at < local(20 + 20 / 60)]
    targets = [p.history.groups[GROUP].last_target for _, p in during]
    assert targets == sorted(targets)  # never down while blind
    assert all(
        any(w.code in (WarningCode.METRIC_STALE, WarningCode.METRIC_MISSING) for w in p.warnings)
        for at, p in during
        if at >= local(20) + timedelta(minutes=3)
    )


def test_overheating_node_is_isolated_and_rebooted_within_sla_with_the_floor_kept(day):
    _, world, hist, log = day
    (inc,) = [i for i in hist.groups[GROUP].incidents if i.rule == "gpu_overheat"]
    assert inc.outcome == "rebooted"
    assert inc.acknowledged_at <= inc.respond_by
    assert inc.isolated_at <= inc.isolate_by
    assert inc.isolated_at - inc.detected_at < timedelta(minutes=15)
    during = [n for at, n, _ in log if inc.detected_at <= at <= inc.closed_at]
    assert min(during) >= 6


def test_evening_scales_back_in_one_step_at_a_time(day):
    spec, _, _, log = day
    cooldown = timedelta(seconds=spec.groups[0].stabilization.scale_in_cooldown_s)
    evening = [(at, p.history.groups[GROUP].last_target) for at, _, p in log if local(18) <= at < local(23)]
    downs = [
        (at, prev - cur) for (_, prev), (at, cur) in zip(evening, evening[1:], strict=False) if cur < prev
    ]
    assert downs and all(step == 1 for _, step in downs)
    assert all(b - a >= cooldown for (a, _), (b, _) in zip(downs, downs[1:], strict=False))
    assert evening[-1][1] <= 3
