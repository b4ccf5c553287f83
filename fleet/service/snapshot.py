"""Building the policy's input: what was observed, what the store remembers and what operators asked, as a
``policies.Snapshot``.

The store is read in batches (one query for all the incidents a tick needs, one for their events), never once
per incident: a tick's cost must not grow with the number of open incidents.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from fleet.service.actuate import DONE_OUTCOMES
from fleet.service.observe import GroupObservation, Observation, health_status, to_policy_events
from fleet.service.store import OperatorRequest, Outcome, Store
from policies.model import (
    GroupHistory,
    GroupSnapshot,
    History,
    InstanceSnapshot,
    OperatorAction,
    Snapshot,
    StepOutcome,
)
from policies.model import Notification as PolicyNotification
from policies.spec import GroupSpec

# the operator requests a group ESS cannot be read for takes all the same: none of them writes to ESS
WITHOUT_ESS = frozenset({"ack", "reset_breaker"})


def build_snapshot(
    store: Store,
    specs: Sequence[GroupSpec],
    now: datetime,
    observation: Observation,
    paused: set[str],
    requests: list[OperatorRequest],
    history: History | None,
) -> tuple[Snapshot, list[OperatorRequest]]:
    """The snapshot the policy decides on, and the operator requests naming nothing in any group."""
    ops, unmatched = operator_actions(store, observation, requests, history)
    notified = notifications(store, history)
    outcomes = step_outcomes(store, history, now)
    groups: list[GroupSnapshot] = []
    for spec in specs:
        seen = observation.groups.get(spec.name)
        gh = history.groups.get(spec.name) if history else None
        if seen is not None and seen.blind:
            # ESS unreadable, its last instance list watched: isolation detects and notifies, nothing scales
            groups.append(
                GroupSnapshot(
                    name=spec.name,
                    scaling_group_id=spec.scaling_group_id,
                    blind=True,
                    events_unread=seen.events_unread,
                    instances=_instances(seen, gh),
                    notifications=notified.get(spec.name, []),
                    # an ack or a breaker reset needs no ESS: taken at once (a human's ack stops the respond
                    # clock); isolate, release and replace wait for ESS to answer
                    operator_actions=[op for op in ops.get(spec.name, []) if op.kind in WITHOUT_ESS],
                    outcomes=outcomes.get(spec.name, []),
                )
            )
            continue
        if seen is None or not seen.ok or seen.group is None:
            continue  # not observed: the policy holds the group (unknown is not zero)
        groups.append(
            GroupSnapshot(
                name=spec.name,
                scaling_group_id=seen.group.group_id,
                desired_capacity=seen.group.desired_capacity,
                activity_in_progress=bool(seen.activities_in_progress),
                paused=spec.name in paused,
                ess_state=seen.group.disabled,
                events_unread=seen.events_unread,
                instances=_instances(seen, gh),
                notifications=notified.get(spec.name, []),
                operator_actions=ops.get(spec.name, []),
                outcomes=outcomes.get(spec.name, []),
            )
        )
    return Snapshot(taken_at=now, groups=groups), unmatched


def _instances(g: GroupObservation, gh: GroupHistory | None) -> list[InstanceSnapshot]:
    """The group's instances, each with the XIDs the policy has not seen yet."""
    seen_xids = {(x.instance_id, x.code, x.at) for x in gh.xids} if gh else set()
    instances = []
    listed: set[str] = set()
    for inst in g.instances:
        if inst.instance_id in listed:
            continue  # ESS pages shifting under a listing can repeat an instance: count it once
        listed.add(inst.instance_id)
        xids = [
            x for x in g.xids.get(inst.instance_id, []) if (inst.instance_id, x.code, x.at) not in seen_xids
        ]
        instances.append(
            InstanceSnapshot(
                instance_id=inst.instance_id,
                lifecycle_state=inst.lifecycle_state,
                health_status=health_status(inst, g.health.get(inst.instance_id)),
                created_at=inst.created_at,
                zone_id=inst.zone_id,
                metrics=g.metrics.get(inst.instance_id, {}),
                xids=xids,
                events=to_policy_events(g.events.get(inst.instance_id, [])),
            )
        )
    return instances


def operator_actions(
    store: Store,
    observation: Observation,
    requests: list[OperatorRequest],
    history: History | None,
) -> tuple[dict[str, list[OperatorAction]], list[OperatorRequest]]:
    """Pending operator requests as policy actions by group, and those that name nothing in any group."""
    where: dict[str, str] = {}  # instance -> group
    for name, g in observation.groups.items():
        for inst in g.instances:
            where[inst.instance_id] = name
    incident_group = {
        i.incident_id: gname
        for gname, gh in (history.groups.items() if history else [])
        for i in gh.incidents
    }
    stored = store.incidents_by_id(
        req.incident_id
        for req in requests
        if req.incident_id
        and where.get(req.instance_id or "") is None
        and req.incident_id not in incident_group
    )
    ops: dict[str, list[OperatorAction]] = {}
    unmatched = []
    for req in requests:
        if req.group_name is not None:  # a request on a group (reset_breaker) names it
            group = req.group_name if req.group_name in observation.groups else None
        else:
            group = where.get(req.instance_id or "") or incident_group.get(req.incident_id or "")
        if group is None and req.incident_id and req.group_name is None:
            row = stored.get(req.incident_id)
            group = row.group_name if row else None
        if group is None:
            # Refuse only when every group was seen: an unreadable group may well hold the instance.
            if all(g.ok for g in observation.groups.values()):
                unmatched.append(req)
            continue
        ops.setdefault(group, []).append(
            OperatorAction(
                action_id=f"req-{req.id}",
                kind=req.kind,
                at=req.created_at,
                instance_id=req.instance_id,
                incident_id=req.incident_id,
                reason=req.reason,
                by=req.actor or "operator",
            )
        )
    return ops, unmatched


def notifications(store: Store, history: History | None) -> dict[str, list[PolicyNotification]]:
    """Human channels reached for incidents the policy has not yet seen acknowledged."""
    out: dict[str, list[PolicyNotification]] = {}
    if history is None:
        return out
    waiting = [
        (gname, inc)
        for gname, gh in history.groups.items()
        for inc in gh.incidents
        if inc.acknowledged_at is None and inc.open
    ]
    rows = store.incidents_by_id(inc.incident_id for _, inc in waiting)
    notified = {i: r for i, r in rows.items() if r.notified_at is not None}
    events = store.incident_events_by_incident(notified, kind="notified")
    for gname, inc in waiting:
        row = notified.get(inc.incident_id)
        if row is None or row.notified_at is None:
            continue
        first = events.get(inc.incident_id)
        channel = first[0].detail if first else "notification"
        out.setdefault(gname, []).append(
            PolicyNotification(incident_id=inc.incident_id, at=row.notified_at, channel=channel)
        )
    return out


def step_outcomes(store: Store, history: History | None, now: datetime) -> dict[str, list[StepOutcome]]:
    """Results of isolation steps done but not yet seen by the policy."""
    seen: set[str] = set()
    if history is not None:
        for gh in history.groups.values():
            seen.update(gh.seen_outcomes)
    out: dict[str, list[StepOutcome]] = {}
    recent = store.decisions(since=now - timedelta(days=1), kind="isolation", limit=2000)
    for d in reversed(recent):  # oldest first
        if d.decision_id in seen or d.outcome not in DONE_OUTCOMES or d.dry_run:
            continue
        seen.add(d.decision_id)
        out.setdefault(d.group_name, []).append(
            StepOutcome(
                step_id=d.decision_id,
                ok=d.outcome != Outcome.FAILED,
                at=d.at,
                detail=d.error or d.reason or d.outcome,
            )
        )
    return out


def unplaced_requests(
    store: Store, requests: list[OperatorRequest], configured: set[str], waited: timedelta
) -> list[tuple[OperatorRequest, str]]:
    """Of ``requests`` (ones no shard took up within ``waited``), those naming nothing in any configured
    group as the store last saw them (every shard's last instance lists, the incidents), each with the
    outcome that ends it. With several shards no leader observes every group, so the store stands in for
    the observation a single replica refuses such a request on."""
    held = {
        row.get("instance_id")
        for name, (_, rows) in store.instance_lists().items()
        if name in configured
        for row in rows
        if isinstance(row, dict)
    }
    incidents = store.incidents_by_id(r.incident_id for r in requests if r.incident_id)
    minutes = int(waited.total_seconds() // 60)
    out = []
    for req in requests:
        if req.group_name is not None:
            if req.group_name in configured:
                continue
            what = f"group {req.group_name} is not configured"
        else:
            inc = incidents.get(req.incident_id or "")
            if req.instance_id in held or (
                inc is not None and inc.service == store.service and inc.group_name in configured
            ):
                continue
            what = f"{req.instance_id or req.incident_id} is in none of the configured groups"
        out.append((req, f"expired: no shard took it in {minutes} min: {what}"))
    return out
