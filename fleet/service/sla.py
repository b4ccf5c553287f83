"""The SLA report over a window: time to respond and to isolate per incident, breaches and medians.

One function shared by `fleet sla-report` and the console's Incidents page, so both count
a breach the same way.
Nothing here reads the clock: ``now`` and ``since`` are arguments.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fleet.service.store import IncidentRecord, Store


def sla_report(store: Store, since: datetime, now: datetime) -> dict[str, Any]:
    """``{"summary": {...}, "incidents": [...]}`` for incidents detected since ``since``, newest first."""
    rows = [incident_sla(inc, now) for inc in store.incidents(since=since)]
    summary = {
        "since": since.isoformat(),
        "incidents": len(rows),
        "respond_breaches": sum(r["respond_breached"] for r in rows),
        "isolate_breaches": sum(r["isolate_breached"] for r in rows),
        "median_time_to_respond_s": median([r["time_to_respond_s"] for r in rows]),
        "median_time_to_isolate_s": median([r["time_to_isolate_s"] for r in rows]),
    }
    return {"summary": summary, "incidents": rows}


def incident_sla(inc: IncidentRecord, now: datetime) -> dict[str, Any]:
    """One incident's response and isolation times and whether each clock was breached."""
    # A manual isolation is acknowledged when the operator asked, before the leader opened the
    # incident: that is a response time of zero, never a negative one.
    respond_s = (
        max(0.0, (inc.acknowledged_at - inc.detected_at).total_seconds()) if inc.acknowledged_at else None
    )
    isolate_s = (inc.isolated_at - inc.detected_at).total_seconds() if inc.isolated_at else None
    respond_breach = breached(inc.respond_by, inc.acknowledged_at, now)
    # An incident closed without isolation (released, resolved) cannot breach the isolation clock.
    closed_unisolated = inc.closed_at is not None and inc.isolated_at is None
    isolate_breach = False if closed_unisolated else breached(inc.isolate_by, inc.isolated_at, now)
    return {
        "id": inc.id,
        "group": inc.group_name,
        "instance_id": inc.instance_id,
        "state": inc.state,
        "cause": inc.cause,
        "detected_at": inc.detected_at.isoformat(),
        "time_to_respond_s": respond_s,
        "time_to_isolate_s": isolate_s,
        "respond_breached": respond_breach,
        "isolate_breached": isolate_breach,
        "human_acknowledged": (inc.acknowledged_by or "").startswith("human:"),
    }


def breached(deadline: datetime | None, done: datetime | None, now: datetime) -> bool:
    if deadline is None:
        return False
    return (done or now) > deadline


def median(values: list[float | None]) -> float | None:
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
