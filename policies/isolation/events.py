"""System events ECS scheduled ahead: recorded at once, isolated as their window nears.

ECS announces maintenance (``SystemMaintenance.Reboot``, ``.Redeploy``, an expiry's stop) with a NotBefore,
often days or weeks ahead. Taking the node out at once would lose its capacity for all that time; waiting for
NotBefore would let ECS act on a node in traffic. The incident opens and is notified at once (the respond
clock runs from detection), and its isolation falls due ``isolate_within`` before the earliest NotBefore
(``Incident.due_at``): its isolate clock runs from then, and ``isolate_by`` is the NotBefore itself, so that
the node is out of traffic before ECS acts. Until then admission holds it with an ``event_scheduled`` wait
step; neither the breaker nor ``max_isolated`` counts it.

It falls due at once when any other finding concerns the instance (an overheat, an XID: those do not wait),
or when ECS moves the event within ``isolate_within`` of now or starts executing it; a NotBefore moved
further out (the event rescheduled, or announced again under a new id) moves the due time with it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from policies.isolation.shared import Tick, note
from policies.model import Incident, ReasonCode


def schedule_events(t: Tick) -> None:
    """Set or move the due time of each open, not yet admitted incident from this tick's findings."""
    within = timedelta(seconds=t.iso.isolate_within_s)
    for inc in t.open_in_detection_order():
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
