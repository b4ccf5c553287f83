"""What the service and its store show people: the status view (GET /status, `fleet status`), decisions,
incidents with their SLA timers, and the SLA report (`fleet sla-report`). Plain dicts, ready for JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from fleet.service.ess_reach import Unreadable, outages
from fleet.service.lease import LeaseManager
from fleet.service.observe import Observation
from fleet.service.shards import SHARD_INFIX
from fleet.service.store import (
    CancelOutcome,
    DecisionRecord,
    IncidentRecord,
    OperatorRequest,
    Store,
    is_human,
    leases,
    policy_state,
)
from policies.isolation.sla import isolate_breached, respond_breached
from policies.model import LifecycleState, Plan


def replica_health(
    holder_id: str, last_tick_at: datetime | None, leader: bool, dry_run: bool
) -> dict[str, Any]:
    """One replica's own view of itself (GET /healthz)."""
    return {
        "holder": holder_id,
        "leader": leader,
        "last_tick_at": last_tick_at.isoformat() if last_tick_at else None,
        "dry_run": dry_run,
    }


def service_status(
    store: Store,
    now: datetime,
    group_names: list[str],
    replica: dict[str, Any],
    observation: Observation | None,
    plan: Plan | None,
) -> dict[str, Any]:
    """The view behind GET /status and `fleet status`: the store's view plus this replica's last tick."""
    view = status_from_store(store, now, group_names)
    view["replica"] = replica
    for g in view["groups"]:
        o = observation.groups.get(g["name"]) if observation else None
        if o is not None and o.group is not None:
            g.update(
                group_id=o.group.group_id,
                desired=o.group.desired_capacity,
                total=o.group.total_capacity,
                in_service=o.count(LifecycleState.IN_SERVICE),
                pending=o.count(LifecycleState.PENDING, LifecycleState.PENDING_WAIT),
                standby=o.count(LifecycleState.STANDBY),
                staleness_s=o.staleness_s,
            )
        gp = plan.group(g["name"]) if plan else None
        if gp is not None:
            g.update(
                target=gp.target_capacity,
                reason=gp.reason.value,
                floor=gp.floor,
                floor_source=gp.floor_source,
                ceiling=gp.ceiling,
                ceiling_source=gp.ceiling_source,
                active_schedules=gp.active_schedules,
                warnings=[w.model_dump(mode="json") for w in gp.warnings],
            )
    return view


def status_from_store(store: Store, now: datetime, group_names: list[str]) -> dict[str, Any]:
    """What the store says: lease, paused groups, last decisions, incidents with their SLA timers."""
    lease = LeaseManager(store.engine, store.service, "-", 1.0).current()
    paused = store.paused_groups()
    decisions = store.decisions(limit=50)
    last_by_group: dict[str, DecisionRecord] = {}
    for d in decisions:
        if d.kind == "scale":
            last_by_group.setdefault(d.group_name, d)
    shards = shard_views(store, now)
    decided = {name: gh for s in shards for name, gh in s.pop("histories").items()}
    groups = []
    names = group_names or sorted({d.group_name for d in decisions} | set(decided))
    down = outages(store, names)
    # the groups a tick decided (its history) as well as those with decisions: a group that has not scaled
    # yet is listed too, with whether its metrics were ever complete
    for name in names:
        last = last_by_group.get(name)
        gh = decided.get(name) or {}
        groups.append(
            {
                "name": name,
                "paused": name in paused,
                "ess_state": gh.get("ess_state"),  # not Active in ESS at the last tick: nothing written
                "last_scale": None
                if last is None
                else {
                    "at": last.at.isoformat(),
                    "target": last.target,
                    "outcome": last.outcome,
                    "error": last.error,
                    "reason": last.reason,  # why: a floor's names the calendar's day where that is why
                },
                "serving_target": gh.get("last_target"),
                "metrics_known_since": gh.get("known_since"),
                # ESS could not be read for it at the leader's last tick: nothing written, requests wait
                "ess_unreadable": _outage_view(down.get(name)),
            }
        )
    incidents = []
    for inc in store.incidents(open_only=True):
        incidents.append(incident_view(inc, now))
    return {
        "service": store.service,
        "at": now.isoformat(),
        "lease": None
        if lease is None
        else {
            "holder": lease.holder,
            "epoch": lease.epoch,
            "expires_at": lease.expires_at.isoformat(),
            "valid": lease.valid_at(now),
        },
        "shards": shards,
        "groups": groups,
        "decisions": [decision_view(d) for d in decisions[:20]],
        "incidents": incidents,
        "requests": [request_view(r) for r in store.pending_requests()],
    }


def request_view(req: OperatorRequest) -> dict[str, Any]:
    """A queued operator request, and why it waits (``waiting``: None when the next tick takes it)."""
    return {
        "id": req.id,
        "kind": req.kind,
        "instance_id": req.instance_id,
        "incident_id": req.incident_id,
        "group": req.group_name,
        "by": req.actor,
        "queued_at": req.created_at.isoformat(),
        "waiting": req.outcome,
    }


# What a queued request's ``waiting`` (None) means, in the words of every rendering (CLI and console).
NEXT_TICK = "the leader takes it on its next tick"


def request_target(view: Mapping[str, Any]) -> str:
    """What a request's view (``request_view``) names: its instance, incident or group; ``-`` for none."""
    return str(view["instance_id"] or view["incident_id"] or view["group"] or "-")


def request_waits(view: Mapping[str, Any]) -> str:
    """Why a queued request's view waits: the leader's note, or that its next tick takes it."""
    return str(view["waiting"] or NEXT_TICK)


def queued_request_line(view: Mapping[str, Any]) -> str:
    """A queued request in one line, as ``fleet status`` and ``fleet requests`` print it: id, what, by whom,
    when it was queued (UTC, to the second) and why it waits."""
    return (
        f"request {view['id']} ({view['kind']} {request_target(view)}, by {view['by'] or '-'}, "
        f"queued {view['queued_at'][:19]}): {request_waits(view)}"
    )


# How many requests GET /requests and the console's Incidents page list by default, and at most.
REQUEST_LOG_ROWS = 50
MAX_REQUEST_LOG_ROWS = 500


def request_limit_problem(raw: str) -> str | None:
    """Why ``raw`` is no count of requests to list (GET /requests' ``limit``, ``fleet requests --limit``)."""
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_REQUEST_LOG_ROWS:
        return f"limit must be a number from 1 to {MAX_REQUEST_LOG_ROWS}, not {raw[:40]!r}"
    return None


def request_log_view(req: OperatorRequest) -> dict[str, Any]:
    """A request queued or handled (GET /requests): ``waiting`` while it is queued, then when it was handled
    and its ``outcome`` (applied, refused, expired, ``cancelled by NAME``)."""
    handled = req.handled_at is not None
    return {
        **request_view(req),
        "waiting": None if handled else req.outcome,
        "handled_at": req.handled_at.isoformat() if req.handled_at else None,
        "outcome": req.outcome if handled else None,
    }


# operator_requests.id is an INTEGER: PostgreSQL refuses a larger number in the query itself.
MAX_REQUEST_ID = 2**31 - 1


def request_id_problem(raw: str) -> str | None:
    """Why ``raw`` names no request id, or None."""
    text = raw.strip()
    if not text.isascii() or not text.isdigit() or int(text) > MAX_REQUEST_ID:
        return f"request id must be a request's number, e.g. 7, not {raw[:40]!r}"
    return None


def request_what(req: OperatorRequest) -> str:
    """A request in a few words: its kind and what it names."""
    return f"{req.kind} {req.instance_id or req.incident_id or req.group_name or ''}".strip()


def cancel_refusal(found: CancelOutcome, req: OperatorRequest | None, request_id: int, service: str) -> str:
    """Why a cancel wrote nothing, in one line (the CLI's and the API's refusal)."""
    if req is None or found == CancelOutcome.UNKNOWN:
        return f"request {request_id}: no such request (fleet status lists the queued ones)"
    if found == CancelOutcome.OTHER_SERVICE:
        return f"request {request_id} belongs to service {req.service!r}, not {service!r}"
    if found == CancelOutcome.ACK:
        return f"request {request_id} is an acknowledgment: it was recorded when it was made and stays"
    at = req.handled_at.isoformat(timespec="seconds") if req.handled_at else "?"
    return f"request {request_id} ({request_what(req)}) was already handled at {at}: {req.outcome}"


def _outage_view(outage: Unreadable | None) -> dict[str, Any] | None:
    return None if outage is None else {"since": outage.since.isoformat(), "error": outage.error}


def _shard_no(store: Store, name: str) -> int | None:
    """The shard a lease or history row under ``name`` is of: 0 for the service's own, ``k`` for
    ``<service>/shard-<k>``, None for another service's."""
    if name == store.service:
        return 0
    prefix = f"{store.service}{SHARD_INFIX}"
    tail = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else None


def _of_service(column: Any, store: Store) -> Any:
    return sa.or_(column == store.service, column.like(f"{store.service}{SHARD_INFIX}%"))


def shard_leases(store: Store) -> list[tuple[int, str, int, datetime]]:
    """Each shard's lease as ``(shard, holder, epoch, expires_at)``, without reading any history."""
    with store.engine.connect() as c:
        rows = c.execute(
            sa.select(leases.c.name, leases.c.holder, leases.c.epoch, leases.c.expires_at).where(
                _of_service(leases.c.name, store)
            )
        ).all()
    return [
        (k, holder, int(epoch), expires_at)
        for name, holder, epoch, expires_at in rows
        if (k := _shard_no(store, name)) is not None
    ]


def shard_views(store: Store, now: datetime) -> list[dict[str, Any]]:
    """Each shard's lease (holder, epoch, expiry) and last tick (its history's save), with its groups and
    (``histories``) their persisted policy history.

    One shard (the default) is the service's own lease and history; sharded services keep
    ``<service>/shard-<k>`` for both (``fleet.service.shards``)."""
    lease_rows = shard_leases(store)
    with store.engine.connect() as c:
        state_rows = c.execute(
            sa.select(policy_state.c.service, policy_state.c.updated_at, policy_state.c.history).where(
                _of_service(policy_state.c.service, store)
            )
        ).all()
    out: dict[int, dict[str, Any]] = {}
    for k, holder, epoch, expires_at in lease_rows:
        out[k] = {
            "shard": k,
            "holder": holder,
            "epoch": epoch,
            "expires_at": expires_at.isoformat(),
            "valid": now < expires_at,
            "last_tick": None,
            "groups": [],
            "histories": {},
        }
    for name, updated_at, history in state_rows:
        no = _shard_no(store, name)
        shard = None if no is None else out.get(no)  # None: another service's, or a shard without a lease
        if shard is not None:
            shard["last_tick"] = updated_at.isoformat() if updated_at else None
            shard["groups"] = sorted((history or {}).get("groups", {}))
            shard["histories"] = dict((history or {}).get("groups", {}))
    return [out[k] for k in sorted(out)]


def decision_view(d: DecisionRecord) -> dict[str, Any]:
    return {
        "at": d.at.isoformat(),
        "group": d.group_name,
        "kind": d.kind,
        "action": d.action,
        "target": d.target,
        "instance_id": d.instance_id,
        "incident_id": d.incident_id,
        "outcome": d.outcome,
        "reason": d.reason,
        "request_id": d.request_id,
        "client_token": d.client_token,
        "error": d.error,
        "dry_run": d.dry_run,
        "lease_epoch": d.lease_epoch,
        "inputs": d.inputs,
    }


def incident_view(inc: IncidentRecord, now: datetime) -> dict[str, Any]:
    def left(deadline: datetime | None, done: datetime | None) -> float | None:
        # a closed incident's clocks stopped, whatever ended it
        if deadline is None or done is not None or inc.closed_at is not None:
            return None
        return round((deadline - now).total_seconds(), 1)

    due = _due_at(inc)
    return {
        "id": inc.id,
        "group": inc.group_name,
        "instance_id": inc.instance_id,
        "state": inc.state,
        "cause": inc.cause,
        "detected_at": inc.detected_at.isoformat(),
        # a system event ECS scheduled ahead: the isolation is deferred until then (None: due at detection)
        "due_at": due.isoformat() if due is not None else None,
        "due_in_s": left(due, inc.isolated_at) if due is not None and due > now else None,
        "respond_by": inc.respond_by.isoformat() if inc.respond_by else None,
        "isolate_by": inc.isolate_by.isoformat() if inc.isolate_by else None,
        "respond_by_s_left": left(inc.respond_by, inc.acknowledged_at),
        "isolate_by_s_left": left(inc.isolate_by, inc.isolated_at),
        "acknowledged_at": inc.acknowledged_at.isoformat() if inc.acknowledged_at else None,
        "acknowledged_by": inc.acknowledged_by,
        "human_acknowledged": is_human(inc.acknowledged_by),
        "notified_at": inc.notified_at.isoformat() if inc.notified_at else None,
        "isolated_at": inc.isolated_at.isoformat() if inc.isolated_at else None,
        "closed_at": inc.closed_at.isoformat() if inc.closed_at else None,
        "outcome": inc.outcome,
    }


def sla_report(store: Store, since: datetime, now: datetime) -> dict[str, Any]:
    """Incidents detected since ``since``: time to respond, time to isolate, SLA breaches, and a summary."""
    rows = [sla_row(inc, now) for inc in store.incidents(since=since)]
    summary = {
        "since": since.isoformat(),
        "incidents": len(rows),
        "respond_breaches": sum(r["respond_breached"] for r in rows),
        "isolate_breaches": sum(r["isolate_breached"] for r in rows),
        "median_time_to_respond_s": _median([r["time_to_respond_s"] for r in rows]),
        "median_time_to_isolate_s": _median([r["time_to_isolate_s"] for r in rows]),
    }
    return {"summary": summary, "incidents": rows}


def sla_row(inc: IncidentRecord, now: datetime) -> dict[str, Any]:
    """One incident's line of the SLA report."""
    # A manual isolation is acknowledged when the operator asked, before the leader opened the
    # incident: that is a response time of zero, never a negative one.
    respond_s = (
        max(0.0, (inc.acknowledged_at - inc.detected_at).total_seconds()) if inc.acknowledged_at else None
    )
    # the isolate clock starts when the isolation fell due: at detection, or for a system event ECS
    # scheduled ahead, isolate_within before its NotBefore (the incident's ``due_at``)
    isolate_s = (inc.isolated_at - _isolate_from(inc)).total_seconds() if inc.isolated_at else None
    # An incident that closed before its respond deadline (recovered, its instance gone) needed no response:
    # unacknowledged, it breaches only if it was still open when the deadline passed.
    respond_breach = inc.respond_by is not None and respond_breached(
        inc.respond_by, inc.acknowledged_at, inc.closed_at, now
    )
    # As the live clock: one closed without isolation (recovered, released) breached only if it was still open
    # and in traffic when the deadline passed.
    isolate_breach = inc.isolate_by is not None and isolate_breached(
        inc.isolate_by, inc.isolated_at, inc.closed_at, now
    )
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
        "human_acknowledged": is_human(inc.acknowledged_by),
    }


def _isolate_from(inc: IncidentRecord) -> datetime:
    due = _due_at(inc)
    return due if due is not None else inc.detected_at


def _due_at(inc: IncidentRecord) -> datetime | None:
    """When a deferred isolation falls due (the incident's ``due_at``: a system event ECS scheduled ahead),
    or None when it was due at detection."""
    due = (inc.body or {}).get("due_at")
    if not isinstance(due, str):
        return None
    try:
        at = datetime.fromisoformat(due)
    except ValueError:
        return None
    return at if at.tzinfo is not None and at > inc.detected_at else None


def _median(values: Sequence[float | None]) -> float | None:
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
