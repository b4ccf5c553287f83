"""Drain on scale-in: complete the lifecycle action of instances that have no request in flight.

Every scale-in of a group with the module's SCALE_IN lifecycle hook (terraform/main.tf) parks the instances in
``Removing:Wait`` until the hook's action is completed or times out (``drain_timeout_s``; CONTINUE). Without
this step every scale-in waited the whole timeout. Per tick and group with instances in ``Removing:Wait``:

1. read their in-flight requests, vLLM's running + waiting (``requests_running`` + ``queue_waiting``), through
   the group's metric source, one batched read per metric;
2. find the pending lifecycle action each waits in (DescribeLifecycleActions by the scale-in activity, which
   DescribeScalingInstances names per instance);
3. complete an action (CompleteLifecycleAction, CONTINUE) once every instance it holds has drained: both
   metrics read 0 in a sample taken after the scale-in began and no older than ``stale_after``.

An instance whose in-flight requests are unknown (no sample, a stale one, a failed read) is not drained: the
hook's timeout, not a guess, removes it. The completion carries a ClientToken derived from the action's token,
so a retry or a second replica never completes twice, and is audited like every write (kind ``drain``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from fleet.cloud.clients import CloudClients
from fleet.cloud.errors import CloudError
from fleet.cloud.types import LifecycleAction, MetricPoint
from fleet.service.actuate import ActionResult, client_token
from fleet.service.observe import GroupObservation, combine
from fleet.service.sanitize import problem
from fleet.service.sources import MetricSource
from policies import metrics as pm
from policies.spec import GroupSpec

log = logging.getLogger(__name__)

WAITING_STATE = "Removing:Wait"
IN_FLIGHT_METRICS = (pm.REQUESTS_RUNNING, pm.QUEUE_WAITING)
DRAIN_ACTION = "complete_lifecycle_action"


class DrainState(StrEnum):
    DRAINED = "drained"  # nothing running or waiting, measured after the scale-in began
    IN_FLIGHT = "in_flight"  # requests still running or waiting
    UNKNOWN = "unknown"  # no usable sample: left to the hook's timeout


@dataclass(frozen=True)
class InFlight:
    """An instance's running + waiting requests and when that was measured (None: not measured)."""

    requests: float | None
    at: datetime | None


def drain_state(
    reading: InFlight | None, *, since: datetime | None, now: datetime, stale_after_s: float
) -> DrainState:
    """Whether an instance has drained: 0 requests in flight in a sample taken after ``since`` (the scale-in's
    start, when known) and no older than ``stale_after_s``."""
    if reading is None or reading.requests is None or reading.at is None:
        return DrainState.UNKNOWN
    if (now - reading.at).total_seconds() > stale_after_s or (since is not None and reading.at < since):
        return DrainState.UNKNOWN
    return DrainState.DRAINED if reading.requests <= 0 else DrainState.IN_FLIGHT


def action_drained(action: LifecycleAction, states: Mapping[str, DrainState]) -> tuple[bool, str]:
    """Whether an action completes (every instance it holds that still waits has drained), and why."""
    waiting = [i for i in action.instance_ids if i in states]
    if not waiting:
        return False, "none of its instances waits in Removing:Wait"
    pending = {i: states[i].value for i in waiting if states[i] != DrainState.DRAINED}
    if pending:
        return False, ", ".join(f"{i}: {s}" for i, s in sorted(pending.items()))
    return True, f"drained: no request running or waiting on {', '.join(sorted(waiting))}"


def in_flight(source: MetricSource, ids: Sequence[str], now: datetime) -> dict[str, InFlight]:
    """Running + waiting per instance from one read per metric; an instance missing either is unknown.

    A point the sample guard would drop (``fleet.service.sanitize.problem``: a negative or NaN count, one
    dated ahead of ``now``) is missing here too: read as 0 requests, or as taken after the scale-in began,
    it would complete the lifecycle action of an instance that may still be serving."""
    readings: dict[str, dict[str, tuple[float, datetime]]] = {}
    for canonical in IN_FLIGHT_METRICS:
        grouped: dict[str, list[MetricPoint]] = {}
        for p in source.read_last(canonical, ids):
            if p.instance_id is None or p.instance_id not in ids or p.value is None:
                continue
            if problem(canonical, p.value, p.timestamp, now) is None:
                grouped.setdefault(p.instance_id, []).append(p)
        for iid, points in grouped.items():
            sample = combine(canonical, points)
            readings.setdefault(iid, {})[canonical] = (sample.value, sample.at)
    out: dict[str, InFlight] = {}
    for iid in ids:
        got = readings.get(iid, {})
        if len(got) < len(IN_FLIGHT_METRICS):
            out[iid] = InFlight(None, None)
            continue
        out[iid] = InFlight(sum(v for v, _ in got.values()), min(t for _, t in got.values()))
    return out


class Drainer:
    """Completes the lifecycle actions of drained instances; ``record`` audits each outcome."""

    def __init__(
        self,
        clients: CloudClients,
        sources: Mapping[str, MetricSource],
        *,
        service: str,
        record: Callable[[ActionResult, datetime, int | None], ActionResult],
        dry_run: bool = False,
    ) -> None:
        self.clients = clients
        self.sources = sources
        self.service = service
        self.record = record
        self.dry_run = dry_run
        self._reported: dict[str, tuple[str, str | None]] = {}  # decision id -> last (outcome, error) audited

    def complete(
        self,
        spec: GroupSpec,
        observed: GroupObservation,
        now: datetime,
        epoch: int | None,
        fence: Callable[[], bool],
    ) -> list[ActionResult]:
        waiting = [i for i in observed.instances if i.lifecycle_state == WAITING_STATE]
        source = self.sources.get(spec.name)
        if not waiting or observed.group is None or source is None:
            return []
        ids = [i.instance_id for i in waiting]
        try:
            readings = in_flight(source, ids, now)
        except CloudError as exc:
            log.warning("drain of %s: in-flight requests unreadable: %s", spec.name, exc)
            return []
        starts = {a.activity_id: a.start_time for a in observed.activities_in_progress}
        states = {
            i.instance_id: drain_state(
                readings.get(i.instance_id),
                since=starts.get(i.activity_id or ""),
                now=now,
                stale_after_s=spec.stabilization.stale_after_s,
            )
            for i in waiting
        }
        results: list[ActionResult] = []
        for activity_id in sorted({i.activity_id for i in waiting if i.activity_id}):
            for action in self._actions(spec, activity_id):
                res = self._complete_one(spec, action, states, readings, now, epoch, fence)
                if res is not None:
                    results.append(res)
                    if res.outcome == "fenced":
                        return results
        return results

    def _actions(self, spec: GroupSpec, activity_id: str) -> list[LifecycleAction]:
        try:
            return self.clients.ess.describe_lifecycle_actions(activity_id, status="Pending")
        except CloudError as exc:
            log.warning("drain of %s: lifecycle actions of %s unreadable: %s", spec.name, activity_id, exc)
            return []

    def _complete_one(
        self,
        spec: GroupSpec,
        action: LifecycleAction,
        states: Mapping[str, DrainState],
        readings: Mapping[str, InFlight],
        now: datetime,
        epoch: int | None,
        fence: Callable[[], bool],
    ) -> ActionResult | None:
        drained, reason = action_drained(action, states)
        if not drained:
            return None
        token = client_token(self.service, "drain", action.token)
        waiting = [i for i in action.instance_ids if i in states]
        base = ActionResult(
            group=spec.name,
            kind="drain",
            action=DRAIN_ACTION,
            decision_id=f"{spec.name}:drain:{action.token}",
            outcome="",
            reason=reason,
            instance_id=waiting[0] if len(waiting) == 1 else None,
            client_token=token,
            inputs={
                "lifecycle_hook_id": action.hook_id,
                "instances": {i: readings[i].requests for i in waiting if i in readings},
            },
        )
        if self.dry_run:
            return self._audit(replace(base, outcome="dry_run"), now, epoch)
        if not fence():
            return self.record(
                replace(base, outcome="fenced", error="lease lost before the write"), now, epoch
            )
        try:
            self.clients.ess.complete_lifecycle_action(
                action.hook_id, action.token, "CONTINUE", client_token=token
            )
        except CloudError as exc:
            failed = replace(base, outcome="error", error=str(exc), request_id=exc.request_id)
            return self._audit(failed, now, epoch)
        return self._audit(replace(base, outcome="applied"), now, epoch)

    def _audit(self, res: ActionResult, now: datetime, epoch: int | None) -> ActionResult | None:
        """Record an outcome once per action and change: a dry run or a failure that repeats every tick is
        audited once, not once per tick."""
        key = (res.outcome, res.error)
        if self._reported.get(res.decision_id) == key:
            return None
        self._reported[res.decision_id] = key
        return self.record(res, now, epoch)
