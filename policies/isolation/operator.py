"""What humans did: operator actions (ack, isolate, release, replace, reset the breaker), once each, and
notifications to a human channel, which count as the acknowledgment.

One handler per ``OperatorAction.kind``. ``reset_breaker`` and ``isolate`` act on the group; the others on an
open incident (named by id, or the instance's open one) and are ignored when there is none.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from policies.isolation.shared import REMEMBERED_IDS, Tick, enter, note
from policies.model import (
    OPEN_STATES,
    Incident,
    IncidentState,
    OperatorAction,
    PlanWarning,
    ReasonCode,
    WarningCode,
)


def apply_operator_actions(t: Tick) -> None:
    """Apply the operator actions not applied before, in the order they were taken."""
    gh = t.gh
    applied = set(gh.applied_operator_actions)
    for op in sorted(t.group.operator_actions, key=lambda o: (o.at, o.action_id)):
        if op.action_id in applied:
            continue
        applied.add(op.action_id)
        gh.applied_operator_actions.append(op.action_id)
        _HANDLERS[op.kind](t, op)
    gh.applied_operator_actions = gh.applied_operator_actions[-REMEMBERED_IDS:]


def acknowledge_notified(t: Tick) -> None:
    """A notification to a human channel acknowledges its incident; acknowledged ones leave ``detected``."""
    for notification in t.group.notifications:
        inc = t.incident(notification.incident_id)
        if inc is not None and inc.acknowledged_at is None:
            inc.acknowledged_at, inc.acknowledged_by = notification.at, notification.channel
            note(inc, t.now, ReasonCode.ACKNOWLEDGED, f"notified {notification.channel}")
    for inc in t.gh.incidents:
        if inc.state == IncidentState.DETECTED and inc.acknowledged_at is not None:
            enter(inc, IncidentState.ACKNOWLEDGED, t.now, ReasonCode.ACKNOWLEDGED, inc.acknowledged_by or "")


def _target(t: Tick, op: OperatorAction) -> Incident | None:
    """The incident an action names: by id, else the instance's open incident."""
    if op.incident_id:
        return t.incident(op.incident_id)
    if op.instance_id:
        return t.open_incident(op.instance_id)
    return None


def _reset_breaker(t: Tick, op: OperatorAction) -> None:
    breaker = t.gh.breaker
    breaker.open = False
    breaker.opened_at = None
    breaker.reason = f"reset by {op.by} at {op.at.isoformat()}: {op.reason}".rstrip(": ")
    for waiting in t.gh.incidents:
        if waiting.state in OPEN_STATES and waiting.admitted_at is None:
            note(waiting, t.now, ReasonCode.BREAKER_RESET, breaker.reason)


def _isolate(t: Tick, op: OperatorAction) -> None:
    if op.instance_id not in t.by_id:
        t.result.warnings.append(
            PlanWarning(
                code=WarningCode.UNKNOWN_INSTANCE,
                group=t.group.name,
                instance_id=op.instance_id,
                detail=f"isolate requested by {op.by} for an instance not in the group: ignored",
            )
        )
    elif (open_one := _target(t, op)) is not None:
        if open_one.scheduled_ahead(t.now):
            # its system event was scheduled ahead (``events.py``): a human asks for it now
            open_one.due_at = t.now
            open_one.isolate_by = t.now + timedelta(seconds=t.iso.isolate_within_s)
            note(open_one, t.now, ReasonCode.EVENT_SCHEDULED, f"isolation requested now by {op.by}")
    elif op.instance_id:
        inc = t.new_incident(
            op.instance_id,
            "manual",
            "manual",
            "hold",
            True,
            op.reason or "manual isolation",
            {"by": op.by, "reason": op.reason},
            ReasonCode.MANUAL_ISOLATION,
        )
        inc.acknowledged_at, inc.acknowledged_by = op.at, op.by  # a human asked: responded
        enter(inc, IncidentState.ACKNOWLEDGED, t.now, ReasonCode.ACKNOWLEDGED, f"by {op.by}")


def _on_open_incident(
    act: Callable[[Tick, OperatorAction, Incident], None],
) -> Callable[[Tick, OperatorAction], None]:
    """An action on an incident: applied when it names an open one, ignored otherwise."""

    def handler(t: Tick, op: OperatorAction) -> None:
        target = _target(t, op)
        if target is not None and target.state in OPEN_STATES:
            act(t, op, target)

    return handler


def _ack(t: Tick, op: OperatorAction, target: Incident) -> None:
    if target.acknowledged_at is None:
        target.acknowledged_at, target.acknowledged_by = op.at, op.by
        note(target, t.now, ReasonCode.ACKNOWLEDGED, f"by {op.by}")


def _release(t: Tick, op: OperatorAction, target: Incident) -> None:
    t.released.add(target.incident_id)
    note(target, t.now, ReasonCode.RELEASED, f"by {op.by}: {op.reason}".rstrip(": "))
    target.evidence["released_by"] = op.by


def _replace(t: Tick, op: OperatorAction, target: Incident) -> None:
    target.action = "replace"
    note(target, t.now, ReasonCode.ESCALATED, f"replace requested by {op.by}")


_HANDLERS: dict[str, Callable[[Tick, OperatorAction], None]] = {
    "reset_breaker": _reset_breaker,
    "isolate": _isolate,
    "ack": _on_open_incident(_ack),
    "release": _on_open_incident(_release),
    "replace": _on_open_incident(_replace),
}
