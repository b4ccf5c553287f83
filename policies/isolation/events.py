"""System events ECS scheduled ahead: recorded at once, isolated as their window nears.

ECS announces maintenance (``SystemMaintenance.Reboot``, ``.Redeploy``, an expiry's stop) with a NotBefore,
often days or weeks ahead. Taking the node out at once would lose its capacity for all that time; waiting for
NotBefore would let ECS act on a node in traffic. The incident opens and is notified at once (the respond
clock runs from detection), and its isolation falls due ``isolate_within`` before the earliest NotBefore
(``Incident.due_at``): its isolate clock runs from then, and ``isolate_by`` is the NotBefore itself, so that
the node is out of traffic before ECS acts. Until then admission holds it with an ``event_scheduled`` wait
step; neither the breaker nor ``max_isolated`` counts it.

An event that leaves the instance's active events while it was last seen ``Scheduled`` was canceled by ECS
(or avoided: a reboot by someone else inside its window) before it ran: its incident ends with an
``event_ended`` entry. Nothing was done to the node, or it was only asked out of traffic for the event: one
never asked out closes as ``event_ended``; one in Standby is released back to service as a human's release
would be (``advance.py``); one whose remediation has begun (a reboot or removal asked, or held for a human)
goes on as it was. Only an incident its event rule alone found ends so, and only on a tick whose ECS read
answered (``GroupSnapshot.events_unread``) with ESS readable. An event last seen executing has been acted on
by ECS: its incident goes on as before (the handlers, or a human).

A failure (``SystemFailure.*``, ``InstanceFailure.*``) is a fault found now, whatever its NotBefore: it is
never deferred. A deferred one falls due at once when any other finding concerns the instance (an overheat,
an XID: those do not wait), or when ECS moves the event within ``isolate_within`` of now or starts executing
it; a NotBefore moved further out (the event rescheduled, or announced again under a new id) moves the due
time with it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from policies.isolation.shared import Tick, close, note, one_finding
from policies.model import PRE_ISOLATION_STATES, Incident, IncidentState, LifecycleState, ReasonCode

# The evidence key of an event incident: the cycle statuses of its events, as last seen active.
EVENT_STATUS = "event_status"
SCHEDULED = "Scheduled"


def schedule_events(t: Tick) -> None:
    """Set or move the due time of each open, not yet admitted incident from this tick's findings; end the
    incidents of events ECS canceled."""
    within = timedelta(seconds=t.iso.isolate_within_s)
    for inc in t.open_in_detection_order():
        if inc.kind == "event" and not inc.manual:
            _follow_status(t, inc)
        if inc.manual or inc.admitted_at is not None or inc.instance_id not in t.found:
            continue
        not_before = t.found[inc.instance_id]
        due = max(t.now, not_before - within) if not_before is not None else t.now
        if inc.detected_at == t.now:
            if due > t.now and not_before is not None:
                _defer(t, inc, due, not_before, "recorded now, the respond clock runs")
        elif inc.scheduled_ahead(t.now) and due != inc.due_at:
            if due == t.now:
                why = "ECS acts sooner" if not_before is not None else "another finding does not wait"
                inc.due_at, inc.isolate_by = t.now, t.now + within
                note(inc, t.now, ReasonCode.EVENT_SCHEDULED, f"isolation due now: {why}")
            else:
                assert not_before is not None
                _defer(t, inc, due, not_before, "ECS rescheduled it")


def _defer(t: Tick, inc: Incident, due: datetime, not_before: datetime, why: str) -> None:
    inc.due_at, inc.isolate_by = due, not_before
    note(
        inc,
        t.now,
        ReasonCode.EVENT_SCHEDULED,
        f"ECS acts not before {not_before.isoformat()}: {why}; isolation from {due.isoformat()}",
    )


def _follow_status(t: Tick, inc: Incident) -> None:
    """Remember the statuses of the incident's events while they are active; end it once ECS canceled them."""
    inst, rule = t.by_id.get(inc.instance_id), t.rule_of(inc)
    if inst is None or rule is None or t.group.events_unread:
        return
    mine = [e for e in inst.events if e.active and rule.matches_event(e.code)]
    if mine:
        inc.evidence[EVENT_STATUS] = ",".join(sorted({e.cycle_status for e in mine}))
        ids = ",".join(sorted({e.event_id for e in mine if e.event_id}))
        if ids and inc.evidence.get("event_ids") != ids:  # announced again under a new id: named as it is
            inc.evidence["event_ids"] = ids
        return
    if inc.evidence.get(EVENT_STATUS) != SCHEDULED or t.group.blind or not one_finding(inc):
        return
    if inc.incident_id in t.released or inc.outcome == "released":
        return
    begun = inc.reboot_requested_at is not None or inc.remove_requested_at is not None
    if begun or inc.state not in (*PRE_ISOLATION_STATES, IncidentState.ISOLATED):
        if not begun:
            note(inc, t.now, ReasonCode.EVENT_ENDED, f"{_events(inc)} no longer active: {inc.action} goes on")
        return
    what = f"{_events(inc)} no longer active before it ran (ECS canceled or avoided it)"
    if inst.lifecycle_state == LifecycleState.STANDBY:
        note(inc, t.now, ReasonCode.EVENT_ENDED, f"{what}: back to service")
        t.released.add(inc.incident_id)
    elif inc.standby_requested_at is None:
        note(inc, t.now, ReasonCode.EVENT_ENDED, f"{what}: nothing was done to the instance")
        close(inc, t.now, ReasonCode.EVENT_ENDED, "event_ended")
    # else asked out of traffic and not yet seen in Standby: released once it is (the next tick)


def _events(inc: Incident) -> str:
    ids = inc.evidence.get("event_ids")
    return f"ECS system event {inc.evidence.get('events', '')}" + (f" ({ids})" if ids else "")
