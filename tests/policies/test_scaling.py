"""Scaling decisions, one rule per test: triggers, floors, stale data, pending capacity, stabilization."""

from datetime import timedelta

from policy_builders import GROUP, MONDAY_10_SHANGHAI, fleet, instance, policy, snapshot

from policies import History, ReasonCode, WarningCode, decide

T0 = MONDAY_10_SHANGHAI + timedelta(hours=14)  # Monday 00:00 Shanghai: no schedule in most tests


def run(spec, make_instances, seconds, history=None, start=T0, **snap_kw):
    """Decide every 15 s over ``seconds``; ``make_instances(at)`` builds each observation."""
    plan = None
    for s in range(0, seconds + 1, 15):
        at = start + timedelta(seconds=s)
        plan = decide(snapshot(at, make_instances(at), **snap_kw), spec, history, at)
        history = plan.history
    return plan, history


def gp(plan):
    return plan.group(GROUP)


def test_scale_out_waits_for_the_rule_duration():
    spec = policy()
    early, hist = run(spec, lambda at: fleet(at, 4, waiting=3), 15)
    assert gp(early).serving_target == 4
    late, _ = run(spec, lambda at: fleet(at, 4, waiting=3), 0, history=hist, start=T0 + timedelta(seconds=30))
    assert gp(late).serving_target == 6  # ceil(4 * 3 / 2)
    assert gp(late).reason == ReasonCode.RULE_SCALE_OUT


def test_a_calm_sample_resets_the_breach():
    spec = policy()
    _, hist = run(spec, lambda at: fleet(at, 4, waiting=3), 15)
    _, hist = run(spec, lambda at: fleet(at, 4, waiting=1), 0, history=hist, start=T0 + timedelta(seconds=30))
    plan, _ = run(
        spec, lambda at: fleet(at, 4, waiting=3), 15, history=hist, start=T0 + timedelta(seconds=45)
    )
    assert gp(plan).serving_target == 4


def test_target_form_sizes_to_total_waiting_over_the_target():
    spec = policy(scale_out=[{"metric": "queue_waiting_per_instance", "above": 2, "target": 1.5}])
    plan, _ = run(spec, lambda at: fleet(at, 5, waiting=3), 0)
    assert gp(plan).serving_target == 10  # ceil(15 / 1.5)


def test_ratio_form_scales_with_the_latency_excess():
    spec = policy(scale_out=[{"metric": "ttft_p99_ms", "above": 800}], scale_in=[])
    plan, _ = run(spec, lambda at: fleet(at, 4, ttft_p99_ms=1200), 0)
    assert gp(plan).serving_target == 6  # ceil(4 * 1200 / 800)


def test_triggers_combine_as_the_max_of_their_desires():
    spec = policy(
        scale_out=[
            {"metric": "queue_waiting_per_instance", "above": 2},
            {"metric": "ttft_p99_ms", "above": 800},
        ],
        stabilization={"panic_threshold": 10, "max_step_up": "300%"},
    )
    plan, _ = run(spec, lambda at: fleet(at, 4, waiting=2.5, ttft_p99_ms=2000), 0)
    assert gp(plan).serving_target == 10  # ttft wants 10, the queue 5


def test_schedule_floor_composes_as_max_of_floor_and_metric_desire():
    spec = policy(schedules=[{"name": "biz", "days": "mon-fri", "start": "09:00", "end": "18:00", "min": 6}])
    low, _ = run(spec, lambda at: fleet(at, 3, waiting=2.5), 0, start=MONDAY_10_SHANGHAI)
    assert gp(low).serving_target == 6 and gp(low).reason == ReasonCode.FLOOR_SCHEDULE
    high, _ = run(spec, lambda at: fleet(at, 6, waiting=3), 30, start=MONDAY_10_SHANGHAI)
    assert gp(high).serving_target == 9


def test_pending_instances_count_so_the_same_need_is_not_ordered_twice():
    spec = policy()

    def instances(at):
        return fleet(at, 4, waiting=3) + [instance(10 + i, at, state="Pending", metrics={}) for i in range(2)]

    plan, _ = run(spec, instances, 45)
    assert gp(plan).serving_target == 6
    assert gp(plan).desired_capacity is None  # ESS already has 6
    assert gp(plan).reason == ReasonCode.PENDING_CAPACITY_COVERS


def test_capacity_ordered_but_not_yet_launched_counts_as_in_flight():
    spec = policy()
    plan, _ = run(spec, lambda at: fleet(at, 4, waiting=3), 45, desired=6)
    assert gp(plan).current_serving == 6
    assert gp(plan).serving_target == 6


def test_max_step_up_limits_one_decision():
    spec = policy(stabilization={"max_step_up": 2, "panic_threshold": 100})
    plan, _ = run(spec, lambda at: fleet(at, 4, waiting=6), 30)
    assert gp(plan).serving_target == 6
    assert ReasonCode.STEP_LIMITED_UP in [r.code for r in gp(plan).reasons]


def test_panic_fires_without_waiting_and_without_the_step_limit():
    spec = policy(stabilization={"max_step_up": 1})
    plan, hist = run(spec, lambda at: fleet(at, 4, waiting=5), 0)  # 5 >= 2 x 2
    assert gp(plan).reason == ReasonCode.PANIC
    assert gp(plan).serving_target == 10
    assert hist.groups[GROUP].panic_until is not None


def test_never_above_max_size():
    spec = policy(max_size=7)
    plan, _ = run(spec, lambda at: fleet(at, 5, waiting=10), 0)
    assert gp(plan).serving_target == 7
    assert gp(plan).reason == ReasonCode.CEILING_MAX_SIZE


def test_never_above_a_schedule_ceiling():
    spec = policy(schedules=[{"name": "cap", "days": "daily", "start": "00:00", "end": "24:00", "max": 5}])
    plan, _ = run(spec, lambda at: fleet(at, 4, waiting=10), 0)
    assert gp(plan).serving_target == 5
    assert gp(plan).reason == ReasonCode.CEILING_SCHEDULE


def test_never_below_the_warm_floor_even_when_idle():
    spec = policy(min_size=0, warm_floor=2)
    _, hist = run(spec, lambda at: fleet(at, 1, waiting=0), 0)
    assert hist.groups[GROUP].last_target == 2


def _quiet_then(spec, n, minutes, **snap_kw):
    return run(spec, lambda at: fleet(at, n, waiting=0), minutes * 60, **snap_kw)


def test_scale_in_after_its_rule_duration_and_one_step_at_a_time():
    spec = policy()
    early, _ = _quiet_then(spec, 6, 9)
    assert gp(early).serving_target == 6
    due, _ = _quiet_then(spec, 6, 10)
    assert gp(due).serving_target == 5
    assert gp(due).reason == ReasonCode.RULE_SCALE_IN
    later, _ = _quiet_then(spec, 6, 11)
    assert gp(later).serving_target == 5  # the next step waits for the scale-in cooldown


def test_scale_in_uses_the_highest_recommendation_of_the_window():
    spec = policy(stabilization={"scale_in_window": "10m", "max_step_down": 10})
    # 6 instances: busy (queue 1.9 each, wants ceil(11.4/2) = 6) then idle for 10 minutes
    _, hist = run(spec, lambda at: fleet(at, 6, waiting=1.9), 0)
    plan, _ = run(
        spec, lambda at: fleet(at, 6, waiting=0), 9 * 60 + 45, history=hist, start=T0 + timedelta(seconds=15)
    )
    assert gp(plan).serving_target == 6  # the busy recommendation is still inside the window
    plan, _ = run(
        spec, lambda at: fleet(at, 6, waiting=0), 60, history=plan.history, start=T0 + timedelta(minutes=10)
    )
    assert gp(plan).serving_target == 2


def test_stale_metrics_never_scale_in_and_are_reported():
    spec = policy()
    _, hist = _quiet_then(spec, 6, 11)  # would scale in with fresh data
    stale_at = T0 + timedelta(minutes=11, seconds=15)
    plan = decide(
        snapshot(
            stale_at, [instance(i, stale_at, metrics={"queue_waiting": 0}, age_s=600) for i in range(5)]
        ),
        spec,
        hist,
        stale_at,
    )
    assert gp(plan).serving_target >= hist.groups[GROUP].last_target
    assert any(w.code == WarningCode.METRIC_STALE for w in plan.warnings)


def test_missing_metrics_are_unknown_not_zero():
    spec = policy()
    plan, _ = run(
        spec, lambda at: [instance(i, at, metrics={"queue_waiting": None}) for i in range(6)], 15 * 60
    )
    assert gp(plan).serving_target == 6
    assert any(
        w.code == WarningCode.METRIC_MISSING and w.metric == "queue_waiting_per_instance"
        for w in gp(plan).warnings
    )


def test_partial_metrics_allow_scale_out_but_not_scale_in():
    spec = policy()

    def partial(waiting):
        return lambda at: fleet(at, 4, waiting=waiting) + [instance(9, at, metrics={"queue_waiting": None})]

    out, _ = run(spec, partial(4), 30)
    assert gp(out).serving_target > 5
    quiet, _ = run(spec, partial(0), 15 * 60)
    assert gp(quiet).serving_target == 5
    assert any(w.code == WarningCode.METRIC_PARTIAL for w in gp(quiet).warnings)


def test_tolerance_ignores_small_changes_of_large_groups():
    spec = policy(
        scale_out=[{"metric": "ttft_p99_ms", "above": 800}], scale_in=[], stabilization={"tolerance": 0.1}
    )
    # 20 instances wanting 19 (5% less): held
    plan, _ = run(spec, lambda at: fleet(at, 20, ttft_p99_ms=760), 15 * 60)
    assert gp(plan).serving_target == 20


def test_scale_in_cooldown_spaces_scale_in_steps():
    spec = policy(stabilization={"scale_in_cooldown": "5m"})
    plan, hist = _quiet_then(spec, 6, 11)
    assert gp(plan).serving_target == 5
    plan, _ = run(
        spec,
        lambda at: fleet(at, 5, waiting=0),
        60,
        history=hist,
        start=T0 + timedelta(minutes=11, seconds=15),
    )
    assert gp(plan).serving_target == 5 and gp(plan).reason == ReasonCode.SCALE_IN_COOLDOWN


def test_paused_group_writes_nothing():
    spec = policy()
    plan, _ = run(spec, lambda at: fleet(at, 4, waiting=5), 0, paused=True)
    assert gp(plan).desired_capacity is None and gp(plan).reason == ReasonCode.PAUSED


def test_a_group_disabled_in_ess_is_held_like_a_paused_one_and_says_so():
    spec = policy()
    plan, hist = run(spec, lambda at: fleet(at, 4, waiting=5), 60, ess_state="Inactive")
    assert gp(plan).desired_capacity is None and gp(plan).reason == ReasonCode.PAUSED
    assert "Inactive" in gp(plan).reasons[0].detail
    assert [w.code for w in gp(plan).warnings] == [WarningCode.GROUP_DISABLED]
    assert hist.groups[GROUP].last_target is None  # nothing was decided to be written
    # enabled again: the same backlog is scaled out at once
    plan, _ = run(spec, lambda at: fleet(at, 4, waiting=5), 0, history=hist, start=T0 + timedelta(minutes=2))
    assert gp(plan).desired_capacity is not None and gp(plan).desired_capacity > 4


def test_group_missing_from_the_snapshot_changes_nothing():
    spec = policy()
    from policies import Snapshot

    plan = decide(Snapshot(taken_at=T0, groups=[]), spec, History(), T0)
    assert gp(plan).desired_capacity is None
    assert gp(plan).reason == ReasonCode.GROUP_NOT_OBSERVED


def test_without_rules_the_target_follows_the_schedule_floor_down():
    spec = policy(
        scale_out=[],
        scale_in=[],
        schedules=[{"name": "biz", "days": "mon-fri", "start": "09:00", "end": "18:00", "min": 6}],
        stabilization={"scale_in_window": "5m", "max_step_down": 10},
    )
    evening = MONDAY_10_SHANGHAI + timedelta(hours=8)  # 18:00 Shanghai
    plan, _ = run(spec, lambda at: fleet(at, 6), 6 * 60, start=evening - timedelta(minutes=1))
    assert gp(plan).floor == 2
    assert gp(plan).serving_target == 2


def test_scale_in_order_puts_unhealthy_instances_first():
    spec = policy()
    plan, _ = run(spec, lambda at: fleet(at, 3) + [instance(7, at, health_status="Unhealthy")], 0)
    assert gp(plan).scale_in_order[0] == "i-007"


def test_desired_capacity_counts_standby_instances():
    spec = policy(isolation={"rules": []})
    plan, _ = run(spec, lambda at: fleet(at, 4) + [instance(8, at, state="Standby")], 0)
    assert gp(plan).target_capacity == gp(plan).serving_target + 1


def test_a_fresh_history_does_not_scale_in_before_the_window_is_covered():
    # A new service (no history) pointed at a live fleet above its floor must not shrink it on the first tick.
    spec = policy(scale_out=[], scale_in=[], stabilization={"scale_in_window": "10m", "max_step_down": 10})
    first = decide(snapshot(T0, fleet(T0, 5)), spec, None, T0)
    assert gp(first).serving_target == 5
    assert gp(first).reason == ReasonCode.SCALE_IN_STABILIZING
    covered, _ = run(spec, lambda at: fleet(at, 5), 10 * 60)
    assert gp(covered).serving_target == gp(covered).floor < 5


def test_a_metrics_outage_restarts_the_scale_in_window():
    spec = policy(stabilization={"scale_in_window": "10m", "max_step_down": 10, "scale_in_cooldown": "0s"})
    outage = lambda at: [instance(i, at, metrics={"queue_waiting": None}) for i in range(6)]  # noqa: E731
    _, hist = run(spec, outage, 15 * 60)
    back = T0 + timedelta(minutes=15, seconds=15)
    plan, hist = run(spec, lambda at: fleet(at, 6, waiting=0), 9 * 60, history=hist, start=back)
    assert gp(plan).serving_target == 6  # quiet again, but only for 9 minutes of the 10-minute window
    assert hist.groups[GROUP].known_since == back
    later = back + timedelta(minutes=9, seconds=15)
    plan, _ = run(spec, lambda at: fleet(at, 6, waiting=0), 75, history=hist, start=later)
    assert gp(plan).serving_target < 6


_LATENCY_RULES = {
    "scale_in": [
        {"metric": "queue_waiting_per_instance", "below": 0.5, "for": "10m"},
        {"metric": "ttft_p99_ms", "below": 2000, "for": "10m"},
    ]
}


def test_an_idle_fleet_scales_in_on_a_latency_rule():
    # no request in the window: no TTFT percentile from any instance, but every queue and running count reads
    # 0, so the fleet is known idle; before, the missing latencies blocked scale-in for as long as it stayed
    # idle (a night without traffic kept the whole fleet)
    spec = policy(**_LATENCY_RULES)
    idle = lambda at: fleet(at, 6, waiting=0, requests_running=0)  # noqa: E731
    plan, _ = run(spec, idle, 10 * 60)
    assert gp(plan).serving_target == 5 and gp(plan).reason == ReasonCode.RULE_SCALE_IN
    assert not any(w.metric == "ttft_p99_ms" for w in gp(plan).warnings)


def test_a_missing_latency_without_idle_evidence_stays_unknown():
    spec = policy(**_LATENCY_RULES)
    cases = {
        "busy": lambda at: fleet(at, 6, waiting=0, requests_running=3),  # serving, its percentile missing
        "no running count": lambda at: fleet(at, 6, waiting=0, requests_running=None),
        "stale running count": lambda at: (
            [instance(i, at, metrics={"queue_waiting": 0}) for i in range(5)]
            + [instance(5, at, metrics={"queue_waiting": 0, "requests_running": 0}, age_s=600)]
        ),
    }
    for name, make in cases.items():
        plan, _ = run(spec, make, 15 * 60)
        assert gp(plan).serving_target == 6, name
        assert any(w.metric == "ttft_p99_ms" for w in gp(plan).warnings), name


def test_idle_instances_add_no_latency_to_the_busy_ones():
    # two instances serve at 5 s P99 TTFT, four are idle: the group reads 5 s (not a mean diluted by zeros)
    spec = policy(scale_out=[{"metric": "ttft_p99_ms", "above": 3000, "for": "30s"}])

    def mixed(at):
        busy = [instance(i, at, metrics={"queue_waiting": 0, "ttft_p99_ms": 5000.0}) for i in range(2)]
        idle = {"queue_waiting": 0, "requests_running": 0}
        return busy + [instance(i, at, metrics=idle) for i in range(2, 6)]

    plan, _ = run(spec, mixed, 45)
    assert gp(plan).serving_target == 10  # ceil(6 x 5000 / 3000)


def test_an_idle_group_without_a_floor_keeps_its_last_instance():
    # min_size 0 and no warm floor: the metrics take the group down to one instance, never to none (its
    # node agents are the only demand signal: with none left nothing would scale it out again)
    spec = policy(min_size=0, warm_floor=0, stabilization={"scale_in_window": "10m", "max_step_down": 10})
    plan, _ = _quiet_then(spec, 3, 10)
    assert gp(plan).floor == 0
    assert gp(plan).serving_target == 1
    assert gp(plan).reason == ReasonCode.FLOOR_LAST_INSTANCE
    assert ReasonCode.RULE_SCALE_IN in [r.code for r in gp(plan).reasons]


def test_an_empty_group_without_a_floor_gets_one_instance_back():
    spec = policy(min_size=0, warm_floor=0)
    plan, _ = run(spec, lambda at: [], 0, desired=0)
    assert gp(plan).serving_target == 1
    assert gp(plan).desired_capacity == 1
    assert gp(plan).reason == ReasonCode.FLOOR_LAST_INSTANCE


def test_a_schedule_ceiling_of_zero_empties_the_group():
    night = {"name": "night", "days": "daily", "start": "00:00", "end": "06:00", "max": 0}
    spec = policy(min_size=0, warm_floor=0, schedules=[night])
    plan, _ = run(spec, lambda at: fleet(at, 2, waiting=0), 0)  # T0 is 00:00 Shanghai
    assert gp(plan).serving_target == 0
    assert gp(plan).reason == ReasonCode.CEILING_SCHEDULE
