"""Launches that never serve (policies/scaling/launches.py): judged once each; two failed in a row hold the
scale-out that would only launch more of them."""

from __future__ import annotations

from datetime import timedelta

from policies import History, decide
from policies.launch_verdicts import LAUNCH_GRACE_S, REMOVE_AFTER_S, load_time_s
from policies.model import GroupHistory, LaunchRecord, ReasonCode, WarningCode
from policies.scaling.launches import RETRY_S
from tests.policies.policy_builders import GROUP, MONDAY_10_SHANGHAI, instance, policy, snapshot

NOW = MONDAY_10_SHANGHAI
COLD_S = 180  # policy_builders' cold_start_s
PAST_GRACE = timedelta(seconds=COLD_S + LAUNCH_GRACE_S + 60)


def _fleet(dead: int, dead_age: timedelta = PAST_GRACE, serving: int = 6, waiting: float = 3.0) -> list:
    """``serving`` instances a day old, queued and serving; ``dead`` launched ``dead_age`` ago whose agent
    reports vLLM down."""
    live = [instance(i, NOW, metrics={"queue_waiting": waiting, "vllm_up": 1.0}) for i in range(serving)]
    down = [
        instance(100 + i, NOW, metrics={"queue_waiting": 0.0, "requests_running": 0.0, "vllm_up": 0.0})
        for i in range(dead)
    ]
    for i, inst in enumerate(down):
        inst.created_at = NOW - dead_age + timedelta(seconds=i)
    return live + down


def _decide(instances: list, gh: GroupHistory | None = None):
    hist = History(groups={GROUP: gh or GroupHistory(last_target=len(instances))})
    spec = policy(max_size=40, scale_out=[{"metric": "queue_waiting_per_instance", "above": 2, "for": "0s"}])
    return decide(snapshot(NOW, instances), spec, hist, NOW)


def _aged(gh: GroupHistory, by: timedelta) -> GroupHistory:
    """The history with its launch verdicts made ``by`` earlier (the instances' samples stay fresh)."""
    for r in gh.launches:
        r.judged_at -= by
    return gh


def test_two_launches_that_never_served_hold_the_scale_out():
    plan = _decide(_fleet(dead=2))
    gp = plan.groups[0]
    assert gp.reason == ReasonCode.LAUNCHES_FAILING
    assert gp.serving_target == 8  # the hold: no more instances launched the same way
    held = next(r for r in gp.reasons if r.code == ReasonCode.LAUNCHES_FAILING)
    assert held.inputs["wanted"] > 8 and "i-100" in held.detail and "i-101" in held.detail
    warning = next(w for w in gp.warnings if w.code == WarningCode.LAUNCHES_FAILING)
    assert warning.instance_id == "i-100"  # the run's first names it: one notification per run
    verdicts = {r.instance_id: r.served for r in plan.history.groups[GROUP].launches}
    assert verdicts == {"i-100": False, "i-101": False}  # the day-old serving ones are no launches


def test_dead_launches_still_down_after_their_verdict_are_removed_by_name():
    gh = _decide(_fleet(dead=2)).history.groups[GROUP]
    almost = _decide(_fleet(dead=2), _aged(gh.model_copy(deep=True), timedelta(seconds=REMOVE_AFTER_S - 60)))
    assert almost.groups[0].serving_target == 8  # a launch only slow to load may still serve
    plan = _decide(_fleet(dead=3), _aged(gh, timedelta(seconds=REMOVE_AFTER_S)))
    gp = plan.groups[0]
    # the hold less the dead ones but the newest: they serve nothing, and no replacement would; the newest
    # (judged this tick here) stays, the one that tells a slow load from a dead one
    assert gp.reason == ReasonCode.LAUNCHES_FAILING and gp.serving_target == 7
    assert gp.scale_in_order[:2] == ["i-100", "i-101"] and gp.scale_in_suspects == 2  # removed by name
    # the tick after: ESS has not removed them yet (still InService), and the target already left them out
    again = _decide(_fleet(dead=3), plan.history.groups[GROUP]).groups[0]
    assert again.serving_target == 7  # the six that serve and the newest dead one, not five
    assert again.scale_in_order[:2] == ["i-100", "i-101"]


def test_the_newest_dead_launch_is_kept():
    gh = _decide(_fleet(dead=2)).history.groups[GROUP]
    gp = _decide(_fleet(dead=2), _aged(gh, timedelta(seconds=REMOVE_AFTER_S))).groups[0]
    assert gp.serving_target == 7 and gp.scale_in_order[:1] == ["i-100"]  # i-101 stays


def test_a_launch_judged_failed_that_serves_late_ends_the_run_and_warns_of_the_cold_start():
    gh = _decide(_fleet(dead=2)).history.groups[GROUP]
    slow = _fleet(dead=2)
    slow[-1].metrics["vllm_up"] = slow[-1].metrics["vllm_up"].model_copy(update={"value": 1.0})
    plan = _decide(slow, _aged(gh, timedelta(seconds=REMOVE_AFTER_S)))
    gp = plan.groups[0]
    (late,) = [r for r in plan.history.groups[GROUP].launches if r.late_at is not None]
    assert late.instance_id == "i-101" and late.served
    assert gp.reason != ReasonCode.LAUNCHES_FAILING and gp.serving_target > 8  # the run ended: scale-out
    warning = next(w for w in gp.warnings if w.code == WarningCode.COLD_START_EXCEEDED)
    assert warning.instance_id == "i-101" and "raise cold_start_s" in warning.detail


def test_one_dead_launch_is_a_bad_host_and_the_rule_scales_out():
    gp = _decide(_fleet(dead=1)).groups[0]
    assert gp.reason == ReasonCode.RULE_SCALE_OUT
    assert gp.serving_target > 7


def test_launches_still_within_the_grace_are_not_judged():
    plan = _decide(_fleet(dead=2, dead_age=timedelta(seconds=COLD_S + LAUNCH_GRACE_S - 60)))
    assert plan.groups[0].reason == ReasonCode.RULE_SCALE_OUT
    assert plan.history.groups[GROUP].launches == []


def test_an_old_instance_whose_engine_died_is_not_a_failed_launch():
    plan = _decide(_fleet(dead=2, dead_age=timedelta(days=1)))
    assert plan.groups[0].reason == ReasonCode.RULE_SCALE_OUT
    assert plan.history.groups[GROUP].launches == []


def test_without_the_engine_metric_no_launch_is_judged():
    instances = _fleet(dead=2)
    for inst in instances[-2:]:
        inst.metrics.pop("vllm_up")
    plan = _decide(instances)
    assert plan.groups[0].reason == ReasonCode.RULE_SCALE_OUT
    assert plan.history.groups[GROUP].launches == []


def _failed(n: int, judged_ago: timedelta) -> list[LaunchRecord]:
    return [
        LaunchRecord(
            instance_id=f"i-9{i}",
            launched_at=NOW - timedelta(hours=2, seconds=-i),
            served=False,
            judged_at=NOW - judged_ago,
        )
        for i in range(n)
    ]


def test_a_launch_that_serves_ends_the_hold():
    instances = _fleet(dead=0)
    young = instance(200, NOW, metrics={"queue_waiting": 3.0, "vllm_up": 1.0})
    young.created_at = NOW - timedelta(minutes=5)  # launched after the two failed ones, and serving
    gh = GroupHistory(last_target=7, launches=_failed(2, timedelta(minutes=5)))
    held = _decide(instances, GroupHistory(last_target=6, launches=_failed(2, timedelta(minutes=5))))
    assert held.groups[0].reason == ReasonCode.LAUNCHES_FAILING
    plan = _decide([*instances, young], gh)
    assert plan.groups[0].reason == ReasonCode.RULE_SCALE_OUT
    assert plan.history.groups[GROUP].launches[-1].served


def test_after_a_while_the_hold_retries_one_launch_at_a_time():
    gh = GroupHistory(last_target=6, launches=_failed(2, timedelta(seconds=RETRY_S)))
    gp = _decide(_fleet(dead=0), gh).groups[0]
    assert gp.reason == ReasonCode.LAUNCHES_FAILING and gp.serving_target == 7  # a probe, not the rule's step
    held = next(r for r in gp.reasons if r.code == ReasonCode.LAUNCHES_FAILING)
    assert held.inputs["retry"] is True and held.inputs["wanted"] > 7


def test_a_dead_engine_is_a_known_zero_for_the_demand():
    # predictive on: the dead instance's missing request rate no longer makes the demand partial
    from tests.policies.test_predictive import snap, spec

    s = snap(6, 6.0, days=0.5)
    dead = instance(300, s.taken_at, metrics={"vllm_up": 0.0})
    s.groups[0].instances.append(dead)
    s.groups[0].desired_capacity = 7
    hist = History(groups={GROUP: GroupHistory(last_target=7)})
    assert decide(s, spec(), hist, s.taken_at).groups[0].predictive["demand_complete"] is True
    dead.metrics.pop("vllm_up")  # silent: unknown, so partial, and nothing scales in
    hist = History(groups={GROUP: GroupHistory(last_target=7)})
    assert decide(s, spec(), hist, s.taken_at).groups[0].predictive["demand_complete"] is False


def test_a_launch_that_serves_late_this_tick_counts_for_the_demand_at_once():
    # one launch judged failed 10 minutes ago serves this tick, 20 minutes after its order: launches here load
    # that slowly, and an instance ordered 8 minutes ago that has reported nothing yet is still loading, for
    # the demand as for everything else this tick (it waited by the cold start before the verdict was made)
    from policies.launch_verdicts import slowest_launch
    from policies.model import LaunchRecord
    from tests.policies.test_predictive import snap, spec

    s = snap(6, 6.0, days=0.5)
    now = s.taken_at
    late = instance(300, now, metrics={"vllm_up": 1.0, "request_rate": 1.0, "queue_waiting": 0.0})
    late.created_at = now - timedelta(minutes=20)
    young = instance(301, now, metrics={"queue_waiting": None, "requests_running": None})
    young.created_at = now - timedelta(minutes=8)
    s.groups[0].instances += [late, young]
    s.groups[0].desired_capacity = 8
    record = LaunchRecord(
        instance_id=late.instance_id,
        launched_at=late.created_at,
        served=False,
        judged_at=now - timedelta(minutes=10),
    )
    gh = GroupHistory(last_target=8, launches=[record])
    plan = decide(s, spec(), History(groups={GROUP: gh}), now)
    learned = slowest_launch(plan.history.groups[GROUP].launches, COLD_S)
    assert learned is not None and learned.load_s == 20 * 60  # the verdict of this tick
    assert plan.groups[0].predictive["demand_complete"] is True


def test_with_the_breaker_open_scale_in_still_removes_dead_suspects():
    from policies import GroupSnapshot, Snapshot
    from policies.model import BreakerState, DemandInputs, Incident
    from tests.policies.test_forecast import NOW as T
    from tests.policies.test_forecast import series
    from tests.policies.test_predictive import fleet, spec

    dead = [instance(500 + i, T, metrics={"queue_waiting": 0.0, "vllm_up": 0.0}) for i in range(3)]
    instances = fleet(17, 2.0) + dead
    group = GroupSnapshot(
        name=GROUP,
        desired_capacity=20,
        instances=instances,
        demand=DemandInputs(history=series(2, fn=lambda m: 2.0)),
    )

    def incidents(on):
        return [
            Incident(
                incident_id=f"inc-{inst.instance_id}",
                group=GROUP,
                instance_id=inst.instance_id,
                rule="engine_down",
                kind="metric",
                action="reboot",
                detected_at=T - timedelta(minutes=5),
                respond_by=T + timedelta(minutes=10),
                isolate_by=T + timedelta(hours=4),
            )
            for inst in on
        ]

    breaker = BreakerState(open=True, opened_at=T - timedelta(minutes=5), reason="4 isolations")

    def plan(open_incidents):
        gh = GroupHistory(last_target=20, breaker=breaker, incidents=open_incidents)
        return decide(Snapshot(taken_at=T, groups=[group]), spec(), History(groups={GROUP: gh}), T).groups[0]

    gp = plan(incidents(dead))
    assert gp.reason == ReasonCode.PREDICTIVE_SCALE_IN
    assert gp.serving_target == 18  # one bounded step (10 %), no more than the 3 dead
    assert set(gp.scale_in_order[:2]) <= {i.instance_id for i in dead}  # they go first
    held = plan(incidents(instances[:3]))  # dead but not suspects: the victims could be anyone, so it waits
    assert held.serving_target == 20
    assert any("breaker" in r.detail for r in held.reasons)
    # every incident closed (remediated, gone or recovered): the open breaker no longer holds scale-in
    free = plan([])
    assert free.serving_target == 18
    assert not any("breaker" in r.detail for r in free.reasons)
    # nor while the only open ones were found on launches that never served: no fault of serving nodes
    unserved = [i.model_copy(update={"unserved": True}) for i in incidents(instances[:3])]
    free = plan(unserved)
    assert free.serving_target == 18
    assert not any("breaker" in r.detail for r in free.reasons)


def test_the_retry_waits_for_its_probe_to_be_judged():
    gh = GroupHistory(last_target=7, launches=_failed(2, timedelta(seconds=RETRY_S)))
    probe = instance(400, NOW, metrics={"queue_waiting": 3.0, "vllm_up": 0.0})
    probe.created_at = NOW - timedelta(minutes=2)  # the retry's launch, still loading
    gp = _decide([*_fleet(dead=0), probe], gh).groups[0]
    assert gp.reason == ReasonCode.LAUNCHES_FAILING and gp.serving_target == 7  # no second probe meanwhile


def test_a_launch_first_seen_serving_long_after_its_order_teaches_no_slow_load():
    # The service was down (or the metrics were) while a launch loaded: it is judged served 35 minutes after
    # its order, on the first look. That says when the service looked, not how long the launch took: the
    # load time stays the cold start and nothing warns.
    fleet = _fleet(dead=0)
    fleet.append(instance(200, NOW, metrics={"queue_waiting": 3.0, "vllm_up": 1.0}))
    fleet[-1].created_at = NOW - timedelta(minutes=35)
    plan = _decide(fleet)
    (record,) = plan.history.groups[GROUP].launches
    assert record.served and record.load_s == 35 * 60 and not record.shows_slow
    assert load_time_s(plan.history.groups[GROUP].launches, COLD_S) == COLD_S
    assert not [w for w in plan.groups[0].warnings if w.code == WarningCode.COLD_START_EXCEEDED]


def test_a_failing_run_under_a_learned_slow_load_says_how_long_it_waited():
    """Launches here were seen to take 20 minutes (one judged failed served then): the hold's reason says
    the launches were waited for that long past, not the cold start that no longer applies."""
    slow = LaunchRecord(
        instance_id="i-80",
        launched_at=NOW - timedelta(hours=3),
        served=True,
        judged_at=NOW - timedelta(hours=3) + timedelta(seconds=COLD_S + LAUNCH_GRACE_S),
        late_at=NOW - timedelta(hours=3) + timedelta(minutes=20),
    )
    failed = _failed(2, timedelta(minutes=5))
    assert load_time_s([slow, *failed], COLD_S) == 20 * 60
    for launches, waited in (
        ([slow, *failed], "past the 1200s launches here"),
        (failed, "past the cold start"),
    ):
        gp = _decide(_fleet(dead=0), GroupHistory(last_target=6, launches=launches)).groups[0]
        held = next(r for r in gp.reasons if r.code == ReasonCode.LAUNCHES_FAILING)
        assert waited in held.detail


def test_every_launch_still_within_the_judging_window_keeps_its_verdict():
    """More launches at once than the record keeps (24 against KEEP = 20): each keeps its verdict while it is
    young enough to be judged. Trimmed to the newest 20, four were judged afresh every tick, and one whose
    engine crashed right after it had served read as a launch that never served."""
    from policies.scaling.launches import KEEP

    n = KEEP + 4
    young = timedelta(seconds=COLD_S + 60)

    def fleet(crashed: int | None) -> list:
        out = []
        for i in range(n):
            up = 0.0 if i == crashed else 1.0
            inst = instance(i, NOW, metrics={"queue_waiting": 0.5, "requests_running": 2.0, "vllm_up": up})
            inst.created_at = NOW - young
            out.append(inst)
        return out

    gh = _decide(fleet(crashed=None)).history.groups[GROUP]
    assert len(gh.launches) == n and all(r.served for r in gh.launches)
    plan = _decide(fleet(crashed=0), gh)  # the lowest id: the one trimmed first by (launched_at, id)
    verdicts = {r.instance_id: r.served for r in plan.history.groups[GROUP].launches}
    assert verdicts.get("i-000") is True  # it served: a crash now is the engine rules' business
    assert plan.groups[0].reason != ReasonCode.LAUNCHES_FAILING
