"""Advancing an incident by one tick: one handler per ``IncidentState``, dispatched from ``HANDLERS``.

Before its state's handler, every open incident passes the same gate: an instance gone (or being removed)
closes it; an unacknowledged one asks for a human's attention; a release by a human returns the instance; an
incident not admitted by the guardrails waits.

- detected / acknowledged / capacity_protected: take the instance out of traffic only while the floor holds
  (else surge a replacement and wait for it to be InService), then ESS EnterStandby;
- isolated: drain in-flight requests (or time out), then start the remediation: reboot, replace or hold;
- remediating: follow the remediation (reboot -> health check -> ExitStandby, escalating to a replacement
  when the reboot keeps failing or the health check times out);
- remediated: nothing; the incident closes in the same tick as it gets here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from policies import metrics as m
from policies.isolation.health import healthy_again, unmended_by_reboot
from policies.isolation.shared import (
    DAY_S,
    MAX_STEP_FAILURES,
    REMOVING_STATES,
    SERVING_STATES,
    Tick,
    close,
    enter,
    note,
)
from policies.launch_verdicts import failed_run, serves_nothing
from policies.model import (
    OPEN_STATES,
    PRE_ISOLATION_STATES,
    Incident,
    IncidentState,
    InstanceSnapshot,
    LifecycleState,
    ReasonCode,
    StepAction,
)
from policies.observe import fresh, idle

Handler = Callable[[Tick, Incident, InstanceSnapshot], None]


def advance_all(t: Tick) -> None:
    """Advance each open incident, in detection order; then a CLOSE step for each incident closed now."""
    for inc in t.open_in_detection_order():
        _advance(t, inc)
    for inc in t.gh.incidents:
        if inc.closed_at == t.now:
            last = inc.timeline[-1]
            t.steps.add(inc, StepAction.CLOSE, last.reason, inc.outcome or "", outcome=inc.outcome)


def notify_only(t: Tick) -> None:
    """A blind tick's advance (ESS unreadable, the instance list the last one read): the notification of
    each open incident not yet acknowledged, and nothing else; the incidents wait for ESS where they are."""
    for inc in t.open_in_detection_order():
        if inc.instance_id in t.by_id:
            _notify(t, inc)


def _notify(t: Tick, inc: Incident) -> None:
    if inc.acknowledged_at is None:
        t.steps.add(
            inc,
            StepAction.ACKNOWLEDGE,
            ReasonCode.NOTIFY_HUMAN,
            f"{inc.rule}: notify a human channel",
            respond_by=inc.respond_by.isoformat(),
        )


def _advance(t: Tick, inc: Incident) -> None:
    if inc.state not in OPEN_STATES:
        return
    inst = t.by_id.get(inc.instance_id)
    if inst is None or inst.lifecycle_state in REMOVING_STATES:
        how = "replaced" if inc.remove_requested_at is not None else "instance_gone"
        close(inc, t.now, ReasonCode.REMEDIATED if how == "replaced" else ReasonCode.INSTANCE_GONE, how)
        return
    _notify(t, inc)
    if inc.incident_id in t.released:
        _released_now(t, inc, inst)
    elif inc.outcome == "released":
        _returning(t, inc, inst)
    elif inc.admitted_at is not None:  # else waiting: guardrail or breaker (the wait step is in the plan)
        HANDLERS[inc.state](t, inc, inst)


# ---- a human's release -------------------------------------------------------------------------------------


def _released_now(t: Tick, inc: Incident, inst: InstanceSnapshot) -> None:
    if inst.lifecycle_state != LifecycleState.STANDBY:
        close(inc, t.now, ReasonCode.RELEASED, "released")
        return
    inc.exit_requested_at = inc.exit_requested_at or t.now
    inc.outcome = "released"
    t.steps.add(inc, StepAction.EXIT_STANDBY, ReasonCode.RELEASED, "released by a human")
    if inc.state in PRE_ISOLATION_STATES:
        enter(inc, IncidentState.REMEDIATING, t.now, ReasonCode.RELEASED)


def _returning(t: Tick, inc: Incident, inst: InstanceSnapshot) -> None:
    """Released earlier: ExitStandby until the instance serves again."""
    if inst.lifecycle_state in SERVING_STATES:
        close(inc, t.now, ReasonCode.RELEASED, "released")
        t.result.returned += 1
    else:
        t.steps.add(inc, StepAction.EXIT_STANDBY, ReasonCode.RELEASED, "released by a human")


# ---- detected, acknowledged, capacity_protected: out of traffic while the floor holds ----------------------


def _take_out_of_traffic(t: Tick, inc: Incident, inst: InstanceSnapshot) -> None:
    state = inst.lifecycle_state
    if state == LifecycleState.STANDBY:
        inc.isolated_at = t.now
        enter(inc, IncidentState.ISOLATED, t.now, ReasonCode.ENTER_STANDBY, "observed in Standby")
        return
    if state not in SERVING_STATES:
        return  # Pending instances wait until they are InService
    in_service = len(t.view.serving)
    if serves_nothing(inst, t.now, t.stale_after_s):
        # out of traffic, it takes no serving capacity out: no floor to keep, no replacement to wait for
        # (its place in the desired capacity is filled once it is in Standby)
        remaining = in_service - t.result.leaving_serving - 1
        why = "it serves nothing (vLLM down): no capacity leaves"
        _to_standby(t, inc, in_service, remaining, why, serves_nothing=True)
        return
    # it serves: admitted as serving nothing, it was judged again this tick (``admission._judge_again``), and
    # counts toward max_isolated, or waits for room and does not get here
    t.result.leaving_serving += 1
    remaining = in_service - t.result.leaving_serving
    if remaining < t.floor:
        # checked every tick, also after capacity_protected: a schedule may have raised the floor
        _surge(t, inc, in_service, remaining)
        return
    replaced = " (replacement InService)" if inc.surge_requested_at is not None else ""
    _to_standby(t, inc, in_service, remaining, f"{remaining} InService remain, floor {t.floor}{replaced}")


def _to_standby(
    t: Tick, inc: Incident, in_service: int, remaining: int, why: str, serves_nothing: bool = False
) -> None:
    if inc.state != IncidentState.CAPACITY_PROTECTED:
        inc.capacity_protected_at = t.now
        enter(inc, IncidentState.CAPACITY_PROTECTED, t.now, ReasonCode.FLOOR_HOLDS, why)
    if inc.standby_requested_at is None:
        inc.standby_requested_at = t.now
    t.steps.add(
        inc,
        StepAction.ENTER_STANDBY,
        ReasonCode.ENTER_STANDBY,
        "take the instance out of traffic (ESS EnterStandby)",
        in_service=in_service,
        remaining=remaining,
        floor=t.floor,
        **({"serves_nothing": True} if serves_nothing else {}),
    )


def _surge(t: Tick, inc: Incident, in_service: int, remaining: int) -> None:
    """Taking the instance out would break the floor: order a replacement and wait for it to be InService."""
    if inc.surge_requested_at is None:
        inc.surge_requested_at = t.now
        note(
            inc,
            t.now,
            ReasonCode.FLOOR_WOULD_BREAK,
            f"{remaining} InService would remain, floor {t.floor}: surge a replacement",
        )
    t.steps.add(
        inc,
        StepAction.SURGE,
        ReasonCode.FLOOR_WOULD_BREAK
        if inc.surge_requested_at == t.now
        else ReasonCode.WAITING_FOR_REPLACEMENT,
        "replacement ordered; waiting for it to be InService",
        in_service=in_service,
        remaining=remaining,
        floor=t.floor,
    )


# ---- isolated: drain, then start the remediation -----------------------------------------------------------


def _isolated(t: Tick, inc: Incident, inst: InstanceSnapshot) -> None:
    if inst.lifecycle_state in SERVING_STATES and inc.exit_requested_at is None:
        # someone took it out of Standby behind our back: treat as released
        close(inc, t.now, ReasonCode.RELEASED, "left Standby outside the workflow")
        t.result.returned += 1
        return
    if inc.drained_at is None and not _drained(t, inc, inst):
        return
    _remediate(t, inc)


def _drained(t: Tick, inc: Incident, inst: InstanceSnapshot) -> bool:
    """No request running or waiting (both known), no engine left to finish any (``vllm_up`` 0 since the
    isolation), or the drain timeout passed; else a DRAIN step."""
    now, timeout_s = t.now, t.iso.drain_timeout_s
    up = inst.metrics.get(m.VLLM_UP)
    isolated_at = inc.isolated_at or now
    dead = (
        up is not None
        and fresh(up, now, t.stale_after_s)
        and up.at >= isolated_at
        and up.value < m.ENGINE_DOWN_BELOW
    )
    since_isolated = (now - isolated_at).total_seconds()
    if idle(inst, now, t.stale_after_s):
        inc.drained_at = now
        note(inc, now, ReasonCode.DRAINED, "no requests running or waiting")
    elif dead:
        # its vLLM is not running: nothing in flight there can finish, so waiting out the timeout only
        # delays the reboot that starts it again
        inc.drained_at = now
        note(inc, now, ReasonCode.DRAINED, "vLLM is down: nothing in flight to finish")
    elif since_isolated >= timeout_s:
        inc.drained_at = now
        note(inc, now, ReasonCode.DRAIN_TIMEOUT, f"drain timeout {timeout_s:g}s")
    else:
        t.steps.add(
            inc,
            StepAction.DRAIN,
            ReasonCode.DRAINING,
            "waiting for in-flight requests",
            drain_deadline=(inc.isolated_at or now).isoformat(),
        )
        return False
    return True


def _remediate(t: Tick, inc: Incident) -> None:
    """Start the remediation: reboot (a replacement after too many reboots in a day), replace or hold."""
    now = t.now
    inst = t.by_id.get(inc.instance_id)
    moved = unmended_by_reboot(t.rule_of(inc), inst) if inst is not None else []
    if inc.action == "reboot" and moved:
        inc.action = "replace"
        note(inc, now, ReasonCode.ESCALATED, f"{', '.join(moved)}: a reboot does not end it: replace")
    if inc.action == "reboot":
        reboots = _reboots_today(t, inc)
        if reboots >= t.iso.max_reboots:
            inc.action = "replace"
            enter(
                inc,
                IncidentState.REMEDIATING,
                now,
                ReasonCode.REPEATED_FAULT,
                f"{reboots} reboots within a day: replace",
            )
            inc.remove_requested_at = now
            t.steps.add(
                inc,
                StepAction.REMOVE,
                ReasonCode.REPEATED_FAULT,
                "RemoveInstances (release)",
                decrease_desired_capacity=_decrease(t),
                reboots_today=reboots,
            )
            return
        enter(inc, IncidentState.REMEDIATING, now, ReasonCode.REBOOT)
        inc.reboot_requested_at = now
        inc.reboot_attempts += 1
        t.steps.add(inc, StepAction.REBOOT, ReasonCode.REBOOT, "ECS RebootInstance")
    elif inc.action == "replace":
        enter(inc, IncidentState.REMEDIATING, now, ReasonCode.REPLACE)
        inc.remove_requested_at = now
        t.steps.add(
            inc,
            StepAction.REMOVE,
            ReasonCode.REPLACE,
            "RemoveInstances (release)",
            decrease_desired_capacity=_decrease(t),
        )
    else:
        enter(inc, IncidentState.REMEDIATING, now, ReasonCode.HOLD_FOR_HUMAN)
        t.steps.add(inc, StepAction.HOLD, ReasonCode.HOLD_FOR_HUMAN, "kept in Standby for diagnosis")


def _reboots_today(t: Tick, inc: Incident) -> int:
    """Other incidents of the same instance detected within a day that rebooted it."""
    day_ago = t.now - timedelta(seconds=DAY_S)
    return sum(
        1
        for i in t.gh.incidents
        if i.instance_id == inc.instance_id
        and i.incident_id != inc.incident_id
        and i.reboot_attempts > 0
        and i.detected_at > day_ago
    )


# ---- remediating: follow the remediation -------------------------------------------------------------------


def _remediating(t: Tick, inc: Incident, inst: InstanceSnapshot) -> None:
    if inc.action == "replace":
        if inc.remove_requested_at is None:
            inc.remove_requested_at = t.now
        t.steps.add(
            inc,
            StepAction.REMOVE,
            ReasonCode.REPLACE,
            "RemoveInstances (release)",
            decrease_desired_capacity=_decrease(t),
        )
    elif inc.action == "hold":
        t.steps.add(inc, StepAction.HOLD, ReasonCode.HOLD_FOR_HUMAN, "kept in Standby for diagnosis")
    elif inc.exit_requested_at is not None:
        _returning_from_reboot(t, inc, inst)
    elif inc.reboot_requested_at is None:
        _reboot_again(t, inc)
    else:
        _health_check(t, inc, inst)


def _returning_from_reboot(t: Tick, inc: Incident, inst: InstanceSnapshot) -> None:
    if inst.lifecycle_state in SERVING_STATES:
        inc.remediated_at = t.now
        enter(inc, IncidentState.REMEDIATED, t.now, ReasonCode.REMEDIATED, "back InService")
        close(inc, t.now, ReasonCode.REMEDIATED, "rebooted")
        t.result.returned += 1
    else:
        t.steps.add(inc, StepAction.EXIT_STANDBY, ReasonCode.HEALTH_CHECK_PASSED, "back to service")


def _reboot_again(t: Tick, inc: Incident) -> None:
    """The reboot failed (its request was cleared): ask again, or escalate after MAX_STEP_FAILURES."""
    if inc.failures.get(StepAction.REBOOT.value, 0) >= MAX_STEP_FAILURES:
        inc.action = "replace"
        note(inc, t.now, ReasonCode.ESCALATED, "reboot failed repeatedly: replace")
        return
    inc.reboot_requested_at = t.now
    inc.reboot_attempts += 1
    t.steps.add(inc, StepAction.REBOOT, ReasonCode.REBOOT, "ECS RebootInstance")


def _health_check(t: Tick, inc: Incident, inst: InstanceSnapshot) -> None:
    """After the reboot: ExitStandby once healthy; replace when the health check times out; else wait."""
    now = t.now
    requested_at = inc.reboot_requested_at
    assert requested_at is not None  # _remediating asks for a reboot first
    timeout_s = t.spec.health_check_timeout_after(t.load_s)
    if inc.rebooted_at is None:
        # no outcome of the reboot yet: its write errored (ECS unreachable) and is tried again, or its record
        # is on its way. Until then the node has not been rebooted, and one resting in Standby cools down and
        # clears its throttling without a reboot: judged now, it would pass and return unmended. The step is
        # asked again under the same id (the service sends it once; a write that errored is retried).
        if (now - requested_at).total_seconds() >= timeout_s:
            _replace_unhealthy(t, inc, "the reboot was never confirmed")
        else:
            t.steps.add(inc, StepAction.REBOOT, ReasonCode.REBOOT, "ECS RebootInstance (not confirmed yet)")
        return
    ok, why = healthy_again(t.rule_of(inc), inst, t.gh, inc.rebooted_at, now, t.stale_after_s)
    if ok:
        inc.exit_requested_at = now
        note(inc, now, ReasonCode.HEALTH_CHECK_PASSED, why)
        t.steps.add(inc, StepAction.EXIT_STANDBY, ReasonCode.HEALTH_CHECK_PASSED, why)
    elif (now - requested_at).total_seconds() >= timeout_s:
        _replace_unhealthy(t, inc, why)
    else:
        t.steps.add(inc, StepAction.WAIT, ReasonCode.AWAITING_HEALTH, why)


def _decrease(t: Tick) -> bool:
    """Whether removing an isolated instance lowers the desired capacity with it: yes while the instances
    serving, starting and ordered meet the floor without it (its replacement was surged, or is not needed),
    or while launches keep failing (a replacement would be launched the same way); no otherwise (a node
    serving nothing taken out without a surge, in a group at its max_size): ESS then launches its
    replacement in its place."""
    return t.view.current_serving >= t.floor or bool(failed_run(t.gh.launches))


def _replace_unhealthy(t: Tick, inc: Incident, why: str) -> None:
    inc.action = "replace"
    note(inc, t.now, ReasonCode.HEALTH_CHECK_TIMEOUT, f"{why}: replace")
    inc.remove_requested_at = t.now
    t.steps.add(
        inc, StepAction.REMOVE, ReasonCode.HEALTH_CHECK_TIMEOUT, why, decrease_desired_capacity=_decrease(t)
    )


def _nothing(t: Tick, inc: Incident, inst: InstanceSnapshot) -> None:
    """Remediated: the incident closes in the tick it got here; nothing is left to do."""


# One handler per open state (OPEN_STATES); the pre-isolation states share one.
HANDLERS: dict[IncidentState, Handler] = {
    IncidentState.DETECTED: _take_out_of_traffic,
    IncidentState.ACKNOWLEDGED: _take_out_of_traffic,
    IncidentState.CAPACITY_PROTECTED: _take_out_of_traffic,
    IncidentState.ISOLATED: _isolated,
    IncidentState.REMEDIATING: _remediating,
    IncidentState.REMEDIATED: _nothing,
}
