"""The actuator: idempotent writes with derived ClientTokens, conflicts retried next tick, guardrails and the
lease checked again right before the cloud."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fleet.service.actuate import client_token
from policies.model import BreakerState, GroupPlan, Incident, IsolationStep, ReasonCode, StepAction

SCALE = """\
min_size: 1
max_size: 20
warm_floor: 1
cold_start_s: 60
scale_out:
  - {metric: queue_waiting_per_instance, above: 2, for: 30s}
isolation: {enabled: false}
"""


def _queue(cloud, svc, per_instance):
    for inst in svc.observer.observe(cloud.now()).groups["chat"].instances:
        cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": inst.instance_id}, per_instance)


def _tick_until_scale(cloud, svc, ticks=5):
    for _ in range(ticks):
        _queue(cloud, svc, 3)
        svc.tick(cloud.now())
        cloud.advance(15)


def test_client_token_is_deterministic_ascii_and_short():
    a = client_token("fleet", "asg-1", 4, "chat:scale:0")
    assert a == client_token("fleet", "asg-1", 4, "chat:scale:0")
    assert a != client_token("fleet", "asg-1", 4, "chat:scale:1")
    assert a.isascii() and len(a) <= 64


def test_conflict_is_recorded_and_retried_next_tick_with_the_same_token(fake_world):
    cloud, svc, _ = fake_world(SCALE, in_service=2)
    cloud.inject_fault("ScaleWithAdjustment", code="ScalingActivityInProgress", status=400, count=3)
    _tick_until_scale(cloud, svc, ticks=4)
    records = list(reversed(svc.store.decisions(kind="scale")))
    outcomes = [d.outcome for d in records]
    assert outcomes[0] == "conflict" and "applied" in outcomes
    applied = next(d for d in records if d.outcome == "applied")
    assert applied.client_token == records[0].client_token


def test_a_write_failing_alike_on_every_retry_is_audited_once_though_each_has_its_own_request_id(fake_world):
    cloud, svc, _ = fake_world(SCALE, in_service=2)
    fault = cloud.inject_fault("ScaleWithAdjustment", code="ServiceUnavailable", status=503)
    _tick_until_scale(cloud, svc, ticks=6)
    errors = [d for d in svc.store.decisions(kind="scale") if d.outcome == "error"]
    calls = sum(1 for _, a in cloud.calls if a == "ScaleWithAdjustment")
    assert calls >= 4 and len(errors) == 1, (calls, [d.error for d in errors])  # one per tick before
    assert "ServiceUnavailable" in (errors[0].error or "") and "request id" in (errors[0].error or "")
    cloud.remove_fault(fault)
    _tick_until_scale(cloud, svc, ticks=1)
    outcomes = [d.outcome for d in reversed(svc.store.decisions(kind="scale"))]
    assert outcomes == ["error", "applied"]


def test_paused_group_is_decided_but_never_written(fake_world):
    cloud, svc, _ = fake_world(SCALE, in_service=2)
    svc.store.set_paused("chat", True, "alice", cloud.now())
    _tick_until_scale(cloud, svc)
    assert svc.last_tick.plan.group("chat") is not None
    assert not any(a == "ScaleWithAdjustment" for _, a in cloud.calls)


def test_a_lost_lease_fences_the_write(fake_world):
    cloud, svc, _ = fake_world(SCALE, in_service=2)
    svc.tick(cloud.now())
    obs = svc.observer.observe(cloud.now()).groups["chat"]
    gp = GroupPlan(group="chat", desired_capacity=5, target_capacity=5)
    res = svc.actuator.scale(gp, obs, cloud.now(), epoch=1, fence=lambda: False)
    assert res.outcome == "fenced"
    assert not any(a == "ScaleWithAdjustment" for _, a in cloud.calls)


def test_a_lease_lost_while_the_intent_is_recorded_fences_the_write(fake_world):
    """The lease held at the first check, then the process was stopped (SIGSTOP, a paused VM) past its TTL
    before the call: it resumed and wrote beside the new leader. The fence is asked again once the intent is
    on record, just before the call, and the intent is settled as fenced."""
    cloud, svc, _ = fake_world(SCALE, in_service=2)
    svc.tick(cloud.now())
    obs = svc.observer.observe(cloud.now()).groups["chat"]
    cloud.calls.clear()
    answers = iter([True, False])
    gp = GroupPlan(group="chat", desired_capacity=5, target_capacity=5)
    res = svc.actuator.scale(gp, obs, cloud.now(), epoch=1, fence=lambda: next(answers))
    assert res.outcome == "fenced"
    assert not any(a in ("ScaleWithAdjustment", "ModifyScalingGroup") for _, a in cloud.calls)
    (decision,) = [d for d in svc.store.decisions(kind="scale") if d.target == 5]
    assert decision.outcome == "fenced"  # the intent's row, settled: no "intended" left to reconcile


def _standby_step(incident_id, instance_id):
    return IsolationStep(
        step_id=f"{incident_id}:enter_standby:0",
        incident_id=incident_id,
        instance_id=instance_id,
        action=StepAction.ENTER_STANDBY,
        reason=ReasonCode.ENTER_STANDBY,
    )


@pytest.mark.parametrize("serves_nothing", [False, True])
def test_standby_that_would_break_the_floor_is_blocked_at_actuation(fake_world, serves_nothing):
    """...unless the policy read the instance's vLLM down (its step says so): out of traffic, it takes no
    serving capacity out."""
    cloud, svc, _ = fake_world(SCALE.replace("isolation: {enabled: false}", ""), in_service=3)
    obs = svc.observer.observe(cloud.now()).groups["chat"]
    target = obs.instances[0].instance_id
    step = _standby_step("inc-1", target)
    if serves_nothing:
        step = step.model_copy(update={"inputs": {"serves_nothing": True}})
    gp = GroupPlan(group="chat", floor=3, steps=[step])
    spec = svc.policy.group("chat")
    [res] = svc.actuator.steps(gp, spec, obs, None, cloud.now(), 1, lambda: True, False)
    if serves_nothing:
        assert res.outcome == "applied" and any(a == "EnterStandby" for _, a in cloud.calls)
        return
    assert res.outcome == "blocked" and "floor" in res.error
    assert not any(a == "EnterStandby" for _, a in cloud.calls)


def test_a_step_whose_retry_landed_is_not_sent_again_after_its_earlier_error(fake_world):
    cloud, svc, _ = fake_world(SCALE.replace("isolation: {enabled: false}", ""), in_service=3)
    obs = svc.observer.observe(cloud.now()).groups["chat"]
    target = obs.instances[0].instance_id
    step = IsolationStep(
        step_id="inc-3:reboot:0",
        incident_id="inc-3",
        instance_id=target,
        action=StepAction.REBOOT,
        reason=ReasonCode.REBOOT,
    )
    gp = GroupPlan(group="chat", floor=1, steps=[step])
    spec = svc.policy.group("chat")
    fault = cloud.inject_fault("RebootInstance", code="ServiceUnavailable", status=503)
    [failed] = svc.actuator.steps(gp, spec, obs, None, cloud.now(), 1, lambda: True, False)
    cloud.remove_fault(fault)
    [landed] = svc.actuator.steps(gp, spec, obs, None, cloud.now(), 1, lambda: True, False)
    assert (failed.outcome, landed.outcome) == ("error", "applied")
    reboots = sum(1 for _, a in cloud.calls if a == "RebootInstance")
    # asked again (the policy re-asks an unconfirmed reboot under the same id): its latest outcome counts
    assert svc.actuator.steps(gp, spec, obs, None, cloud.now(), 1, lambda: True, False) == []
    assert sum(1 for _, a in cloud.calls if a == "RebootInstance") == reboots


def _incident(iid, instance_id, now, admitted_at):
    return Incident(
        incident_id=iid,
        group="chat",
        instance_id=instance_id,
        rule="xid_hardware",
        kind="xid",
        action="replace",
        detected_at=now,
        respond_by=now + timedelta(minutes=15),
        isolate_by=now + timedelta(hours=4),
        admitted_at=admitted_at,
    )


def test_open_breaker_blocks_automatic_standby_at_actuation(fake_world):
    cloud, svc, _ = fake_world(SCALE.replace("isolation: {enabled: false}", ""), in_service=6)
    obs = svc.observer.observe(cloud.now()).groups["chat"]
    step = _standby_step("inc-2", obs.instances[0].instance_id)
    gp = GroupPlan(group="chat", floor=1, steps=[step])
    breaker = BreakerState(open=True, opened_at=cloud.now(), reason="4 isolations requested")
    [res] = svc.actuator.steps(
        gp, svc.policy.group("chat"), obs, breaker, cloud.now(), 1, lambda: True, False
    )
    assert res.outcome == "blocked" and "breaker" in res.error
    # admitted only after the breaker opened: blocked as well
    late = _incident("inc-2", step.instance_id, cloud.now(), cloud.now() + timedelta(seconds=15))
    gp = GroupPlan(group="chat", floor=1, steps=[step], incidents=[late])
    [res] = svc.actuator.steps(
        gp, svc.policy.group("chat"), obs, breaker, cloud.now(), 1, lambda: True, False
    )
    assert res.outcome == "blocked"
    assert not any(a == "EnterStandby" for _, a in cloud.calls)


def test_incident_admitted_before_the_breaker_tripped_still_leaves_traffic(fake_world):
    """The breaker trips on the incident past its limit in the tick that admits the ones within it: those
    go ahead (the policy keeps asking for their standby), they are not blocked at actuation every tick."""
    cloud, svc, _ = fake_world(SCALE.replace("isolation: {enabled: false}", ""), in_service=6)
    obs = svc.observer.observe(cloud.now()).groups["chat"]
    now = cloud.now()
    step = _standby_step("inc-5", obs.instances[0].instance_id)
    gp = GroupPlan(
        group="chat", floor=1, steps=[step], incidents=[_incident("inc-5", step.instance_id, now, now)]
    )
    breaker = BreakerState(open=True, opened_at=now, reason="4 isolations requested")
    [res] = svc.actuator.steps(gp, svc.policy.group("chat"), obs, breaker, now, 1, lambda: True, False)
    assert res.outcome == "applied", res.error
    assert sum(1 for _, a in cloud.calls if a == "EnterStandby") == 1


def test_a_launch_that_never_served_takes_no_room_under_max_isolated_at_actuation(fake_world):
    """The backstop counts what is out of traffic as the policy does: a dead launch's standby neither needs
    room under max_isolated (1 of 6 here) nor fills it; two serving nodes still meet the limit."""
    cloud, svc, _ = fake_world(SCALE.replace("isolation: {enabled: false}", ""), in_service=6)
    obs = svc.observer.observe(cloud.now()).groups["chat"]
    now = cloud.now()
    dead, first, second = (i.instance_id for i in obs.instances[:3])
    unserved = _incident("inc-d", dead, now, now).model_copy(update={"unserved": True})
    steps = [_standby_step("inc-d", dead), _standby_step("inc-a", first), _standby_step("inc-b", second)]
    incidents = [unserved, _incident("inc-a", first, now, now), _incident("inc-b", second, now, now)]
    gp = GroupPlan(group="chat", floor=1, steps=steps, incidents=incidents)
    results = svc.actuator.steps(gp, svc.policy.group("chat"), obs, None, now, 1, lambda: True, False)
    assert [r.outcome for r in results] == ["applied", "applied", "blocked"]
    assert "max_isolated reached (1 of 1" in (results[2].error or "")


def test_standby_step_is_applied_once_with_a_derived_token(fake_world):
    cloud, svc, _ = fake_world(SCALE.replace("isolation: {enabled: false}", ""), in_service=6)
    obs = svc.observer.observe(cloud.now()).groups["chat"]
    step = _standby_step("inc-3", obs.instances[0].instance_id)
    gp = GroupPlan(group="chat", floor=1, steps=[step])
    spec = svc.policy.group("chat")
    [res] = svc.actuator.steps(gp, spec, obs, None, cloud.now(), 1, lambda: True, False)
    again = svc.actuator.steps(gp, spec, obs, None, cloud.now(), 1, lambda: True, False)
    assert res.outcome == "applied" and res.client_token == client_token("fleet", step.step_id)
    assert again == []
    assert sum(1 for _, a in cloud.calls if a == "EnterStandby") == 1


def test_dry_run_step_touches_nothing(fake_world):
    cloud, svc, _ = fake_world(SCALE.replace("isolation: {enabled: false}", ""), in_service=6, dry_run=True)
    obs = svc.observer.observe(cloud.now()).groups["chat"]
    step = IsolationStep(
        step_id="inc-4:reboot:0",
        incident_id="inc-4",
        instance_id=obs.instances[0].instance_id,
        action=StepAction.REBOOT,
        reason=ReasonCode.REBOOT,
    )
    gp = GroupPlan(group="chat", floor=1, steps=[step])
    [res] = svc.actuator.steps(gp, svc.policy.group("chat"), obs, None, cloud.now(), 1, lambda: True, False)
    assert res.outcome == "dry_run"
    assert not any(a == "RebootInstance" for _, a in cloud.calls)


def test_a_step_blocked_for_many_ticks_is_audited_once(fake_world):
    cloud, svc, _ = fake_world(SCALE.replace("isolation: {enabled: false}", ""), in_service=3)
    obs = svc.observer.observe(cloud.now()).groups["chat"]
    step = _standby_step("inc-5", obs.instances[0].instance_id)
    gp = GroupPlan(group="chat", floor=3, steps=[step])
    for _ in range(5):
        svc.actuator.steps(gp, svc.policy.group("chat"), obs, None, cloud.now(), 1, lambda: True, False)
    assert [d.outcome for d in svc.store.decisions(kind="isolation")] == ["blocked"]


def _named_scale_in(fake_world, suspects: int):
    """A scale-in from 4 to 2 whose plan puts ``suspects`` of the instances first (open incidents)."""
    cloud, svc, group_id = fake_world(SCALE, in_service=4)
    svc.tick(cloud.now())
    obs = svc.observer.observe(cloud.now()).groups["chat"]
    # the plan's order: the newest first (ESS's removal policy, the module's OldestInstance, takes the oldest)
    by_age = sorted(obs.instances, key=lambda i: i.created_at)
    order = [i.instance_id for i in reversed(by_age)]
    gp = GroupPlan(
        group="chat", desired_capacity=2, target_capacity=2, scale_in_order=order, scale_in_suspects=suspects
    )
    res = svc.actuator.scale(gp, obs, cloud.now(), epoch=None, fence=lambda: True)
    cloud.advance(600)
    left = {i.instance_id for i in svc.observer.observe(cloud.now()).groups["chat"].instances}
    return res, order, left, cloud


def test_a_scale_in_with_suspects_among_its_victims_removes_them_by_name(fake_world):
    res, order, left, cloud = _named_scale_in(fake_world, suspects=1)
    assert res.outcome == "applied" and res.inputs["removed"] == order[:2]
    assert left == set(order[2:])  # the two newest, named, are gone
    assert any(a == "RemoveInstances" for _, a in cloud.calls)


def test_a_scale_in_without_suspects_leaves_the_victims_to_ess(fake_world):
    res, order, left, cloud = _named_scale_in(fake_world, suspects=0)
    assert res.outcome == "applied" and "removed" not in res.inputs
    assert not any(a == "RemoveInstances" for _, a in cloud.calls)
    assert left == set(order[:2])  # ESS chose: the oldest went, whatever the plan's order said
