"""Admission under the guardrails, in detection order: the breaker, then ``max_isolated``.

An admitted incident may take its instance out of traffic. One whose isolation is not due yet (a system
event ECS scheduled ahead, ``events.py``) waits for it and counts toward neither guardrail. Automatic
incidents wait while the breaker is
open, and trip it when more of them opened within its window than it allows (only a human resets it); any
incident, manual ones included, waits while ``max_isolated`` instances are already out. Waiting incidents
get a WAIT step every tick, so the plan says why nothing happens.

Both guardrails ration serving capacity. An incident found on a launch that never served
(``Incident.unserved``: a dead launch, a GPU fault before the engine came up) takes none out, so it counts
toward neither: a run of broken launches must not trip the breaker and hold a real fault on a serving node
behind it until a human resets it. It still waits while the breaker is open, and while launches keep
failing (``policies.launch_verdicts.failed_run``): its replacement would be launched the same way, and
the launches' scaling step removes the instance instead (``policies/scaling/launches.py``).

Taking no capacity is judged on each tick's evidence, not once: an incident admitted as such (a dead launch,
a node serving nothing) whose node serves again before it left traffic (a supervisor restarted its engine)
needs room like any other, and without room is not taken out; one out already whose engine runs again
counts from then on (``_judge_again``). So the serving nodes out never outnumber ``max_isolated`` whatever
the order in which engines die and come back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from policies import metrics as m
from policies.isolation.shared import SERVING_STATES, Tick, close, note
from policies.launch_verdicts import (
    REMOVE_AFTER_S,
    engine_up,
    failed_run,
    judged_by,
    late_launch,
    serves_nothing,
    verdict,
)
from policies.model import (
    PRE_ISOLATION_STATES,
    Incident,
    InstanceSnapshot,
    LaunchRecord,
    LifecycleState,
    PlanWarning,
    ReasonCode,
    StepAction,
    WarningCode,
)
from policies.spec import resolve_count

# How long past its due time a launch's verdict is waited for: the judge needs a fresh engine reading, and a
# launch that no reading judges (its agent silent) is not waited for beyond this.
_VERDICT_SLACK = timedelta(minutes=5)


@dataclass
class _Limits:
    max_isolated: int
    breaker_limit: int
    # rank of each automatic incident opened within the breaker's window, 1 = the oldest
    rank: dict[str, int]


def admit(t: Tick) -> None:
    """Admit the open incidents the guardrails allow, and judge again those admitted as taking no capacity;
    warn while the breaker is open."""
    limits = _limits(t)
    ordered = t.open_in_detection_order()
    # what is out of traffic: an admitted incident on a launch that never served took no capacity out
    admitted = [i for i in ordered if i.admitted_at is not None and not i.took_no_capacity]
    failed = failed_run(t.gh.launches)
    for inc in ordered:
        if inc.incident_id in t.released or inc.instance_id not in t.by_id:
            continue  # released: its handler returns the instance; gone: its handler closes it
        if inc.admitted_at is None and _out_already(t, inc):
            # held back after it was asked out of traffic, but its EnterStandby (in flight) landed: it is out,
            # and counts as any node out is judged (``_judge_again``, below)
            inc.admitted_at = t.now
            if not inc.took_no_capacity:
                admitted.append(inc)
        if inc.admitted_at is not None:
            if inc.took_no_capacity:
                _judge_again(t, inc, admitted, limits)
            continue
        _admit_held(t, inc, admitted, limits, failed)
    if t.gh.breaker.open:
        t.result.warnings.append(
            PlanWarning(code=WarningCode.BREAKER_OPEN, group=t.group.name, detail=t.gh.breaker.reason)
        )


def _admit_held(
    t: Tick, inc: Incident, admitted: list[Incident], limits: _Limits, failed: list[LaunchRecord]
) -> None:
    """Admit one incident not admitted yet, if the guardrails allow; else it waits, with a WAIT step."""
    if inc.scheduled_ahead(t.now):
        _wait_for_event(t, inc)
        return
    if not inc.manual and _held_by_breaker(t, inc, limits):
        return
    if inc.unserved and _closed_as_served(t, inc):
        return
    if inc.unserved:  # (still: a launch that has since served makes it one of serving capacity)
        if _launch_waits(t, inc, failed):
            return
        if not _serves_again(t, inc, t.by_id[inc.instance_id]):
            inc.admitted_at = t.now
            return
        # no verdict says it served (none yet, or judged failed before the engine came up), but its engine
        # no longer reads down: taken out, it may take serving capacity, so it needs room (below)
    elif _dead(t, inc):
        # its node serves nothing: taking it out takes no serving capacity, so it needs no room and takes
        # none (a dead node waiting behind a live one that cannot be spared would be billed for nothing)
        inc.admitted_at, inc.served_nothing = t.now, True
        return
    if len(admitted) >= limits.max_isolated:
        _wait_for_room(t, inc, len(admitted), limits.max_isolated)
        return
    inc.admitted_at = t.now
    if inc.took_no_capacity:  # it serves now: it counts
        inc.unserved = inc.served_nothing = False
        note(inc, t.now, ReasonCode.SERVES_AGAIN, "it serves now: max_isolated counts it")
    admitted.append(inc)


def _judge_again(t: Tick, inc: Incident, admitted: list[Incident], limits: _Limits) -> None:
    """An incident admitted as taking no capacity (``Incident.took_no_capacity``), judged again on this tick's
    evidence: its admission holds only as long as what it was admitted on. A node that serves again (its
    engine restarted by its supervisor, a launch loaded after all) before it left traffic needs room like any
    node that serves: with none, it is not taken out, and waits for room as if never admitted (the next tick
    judges it afresh; one on a launch stays ``unserved``, so that a launch judged served after all closes as
    before). A node out
    already, in Standby, whose engine runs again is serving capacity held out: it counts from now on, room
    or not (what is out is out), so that no further serving node is taken out beside it. Once counted, an
    incident counts until it closes."""
    inst = t.by_id[inc.instance_id]
    state = inst.lifecycle_state
    if state == LifecycleState.STANDBY:
        out, serves = True, engine_up(inst, t.now, t.stale_after_s) is True
    elif state in SERVING_STATES and inc.state in PRE_ISOLATION_STATES:
        out, serves = False, _serves_again(t, inc, inst)
    else:
        return  # starting, stopped, on its way out, or back in traffic after its remediation
    if not serves:
        return
    if out or len(admitted) < limits.max_isolated:
        inc.unserved = inc.served_nothing = False
        why = "out of traffic, its engine runs again" if out else "it serves again"
        note(inc, t.now, ReasonCode.SERVES_AGAIN, f"{why}: max_isolated counts it")
        admitted.append(inc)
        return
    inc.admitted_at, inc.served_nothing = None, False
    note(inc, t.now, ReasonCode.SERVES_AGAIN, "it serves again before it left traffic: it needs room")
    _wait_for_room(t, inc, len(admitted), limits.max_isolated)


def _out_already(t: Tick, inc: Incident) -> bool:
    """Whether a held incident's instance is in Standby because we asked for it: ``_judge_again`` held it back
    while its EnterStandby was in flight."""
    inst = t.by_id[inc.instance_id]
    return inc.standby_requested_at is not None and inst.lifecycle_state == LifecycleState.STANDBY


def _serves_again(t: Tick, inc: Incident, inst: InstanceSnapshot) -> bool:
    """Whether the node of an incident taking no capacity may serve, in traffic: a launch's engine no longer
    reads down on a fresh sample (what found it unserved read it down; a launch gone silent may have loaded
    since, and is taken out as one that serves), any other node no longer ``serves_nothing``."""
    if inc.unserved:
        return engine_up(inst, t.now, t.stale_after_s) is not False
    return not serves_nothing(inst, t.now, t.stale_after_s)


def _dead(t: Tick, inc: Incident) -> bool:
    """Whether the incident's instance serves nothing now (``serves_nothing``): it counts toward no room."""
    inst = t.by_id.get(inc.instance_id)
    return inst is not None and serves_nothing(inst, t.now, t.stale_after_s)


def _limits(t: Tick) -> _Limits:
    guard = t.spec.guardrails
    size = t.view.size
    window_start = t.now - timedelta(seconds=guard.breaker.window_s)
    # an incident counts from when its isolation fell due (a system event ECS scheduled ahead: ``due_at``)
    recent_auto = sorted(
        (
            i
            for i in t.gh.incidents
            if not i.manual and not i.unserved and window_start < i.isolate_from <= t.now
        ),
        key=lambda i: (i.isolate_from, i.incident_id),
    )
    return _Limits(
        max_isolated=guard.max_isolated_for(size),
        breaker_limit=max(1, resolve_count(guard.breaker.max_isolations, size)),
        rank={inc.incident_id: n + 1 for n, inc in enumerate(recent_auto)},
    )


def _held_by_breaker(t: Tick, inc: Incident, limits: _Limits) -> bool:
    """An automatic incident waits while the breaker is open; one past the breaker's limit trips it."""
    breaker = t.gh.breaker
    if breaker.open:
        t.wait(inc, ReasonCode.BREAKER_OPEN, breaker.reason)
        return True
    rank = limits.rank.get(inc.incident_id, 0)
    if rank <= limits.breaker_limit:
        return False
    breaker.open = True
    breaker.opened_at = t.now
    breaker.reason = (
        f"{rank} isolations requested within "
        f"{t.spec.guardrails.breaker.window_s:g}s (limit {limits.breaker_limit}); "
        "automatic isolation paused until a human resets the breaker"
    )
    note(inc, t.now, ReasonCode.BREAKER_TRIPPED, breaker.reason)
    t.wait(inc, ReasonCode.BREAKER_TRIPPED, breaker.reason)
    return True


def _closed_as_served(t: Tick, inc: Incident) -> bool:
    """A held incident found on a launch that has since served (slow to load, not dead): one of the engine's
    health closes as recovered, before any action (what it was opened for is gone; without this it would be
    admitted once its wait ran out, and a node just come into service rebooted). Any other (a GPU's fault
    found while the engine loaded) is a fault of serving capacity from now on, which the guardrails count."""
    record = verdict(t.gh.launches, inc.instance_id)
    if record is None or not record.served:
        return False
    rule = t.rule_of(inc)
    if rule is None or rule.metric not in m.ENGINE_HEALTH_METRICS:
        inc.unserved = False
        note(inc, t.now, ReasonCode.UNSERVED_LAUNCH, "its launch serves now: the guardrails count it")
        return False
    note(inc, t.now, ReasonCode.RECOVERED, "its launch served after all: slow to load, not dead")
    close(inc, t.now, ReasonCode.RECOVERED, "recovered")
    return True


def _launch_waits(t: Tick, inc: Incident, failed: list[LaunchRecord]) -> bool:
    """Whether an incident on a launch that never served waits: for its launch's verdict, which comes while
    the instance still runs in the group (a dead launch taken out first would never be judged, and the run of
    failures that stops more launches would never be seen); while launches here are known to be slower than
    the cold start (one judged failed served after all), for as long as a failing run's dead launch would be
    kept (a reboot would only start the slow load over); then while launches keep failing."""
    inst = t.by_id[inc.instance_id]
    due = judged_by(inst, t.load_s)
    if verdict(t.gh.launches, inc.instance_id) is None and due is not None and t.now < due + _VERDICT_SLACK:
        detail = f"waits for its launch's verdict (due {due:%H:%M}Z): a dead launch is the launches' business"
        t.wait(inc, ReasonCode.UNSERVED_LAUNCH, detail)
        return True
    late = late_launch(t.gh.launches, t.now)
    if late is not None and due is not None and t.now < due + timedelta(seconds=REMOVE_AFTER_S):
        until = due + timedelta(seconds=REMOVE_AFTER_S)
        detail = (
            f"launches here take longer than cold_start_s ({late.instance_id} served "
            f"{late.load_s or 0.0:.0f}s after it was ordered): waits for this one to load until "
            f"{until:%H:%M}Z"
        )
        t.wait(inc, ReasonCode.UNSERVED_LAUNCH, detail)
        return True
    if failed:
        detail = (
            f"the {len(failed)} newest launches never served: a replacement would be launched the same way; "
            "the instance is removed instead (it serves nothing)"
        )
        t.wait(inc, ReasonCode.LAUNCHES_FAILING, detail, failed_in_a_row=len(failed))
        return True
    return False


def _wait_for_event(t: Tick, inc: Incident) -> None:
    """A system event ECS scheduled ahead (``events.py``): nothing is done to the node until it is due."""
    assert inc.due_at is not None
    detail = f"isolation due at {inc.due_at.isoformat()}, before ECS acts at {inc.isolate_by.isoformat()}"
    # the timeline has it once already (``events.py``): a step only, for the plan to say why nothing happens
    t.steps.add(inc, StepAction.WAIT, ReasonCode.EVENT_SCHEDULED, detail, due_at=inc.due_at.isoformat())


def _wait_for_room(t: Tick, inc: Incident, isolated: int, max_isolated: int) -> None:
    detail = f"{isolated} of at most {max_isolated} instances already out for isolation"
    t.wait(inc, ReasonCode.GUARDRAIL_MAX_ISOLATED, detail, isolated=isolated, max_isolated=max_isolated)
    t.warn_about(WarningCode.GUARDRAIL_MAX_ISOLATED, inc, detail)
