"""Actuate: carry out a Plan through the adapters, idempotently, fenced by the lease, and audited.

Every write is compared with what was observed first (no write when the cloud already says so) and carries a
ClientToken derived from the decision, so a retry, a crash before the audit row, or a second replica never
applies it twice:

- scale: ``sha256(service | group id | target | group:scale:<n>)`` where n counts the scale writes already
  applied for the group (from the store). A lost answer or a restart re-derives the same token; the next,
  different decision gets n+1.
- isolation steps: ``sha256(service | step_id)``; the policy's step ids are stable per incident, action and
  attempt, and a step already recorded as done is never repeated.

ESS activity conflicts (``Conflict``) and transient failures are recorded and tried again next tick; only a
hard refusal is reported to the policy as a failed step. Guardrails are enforced again here (max isolated,
breaker, floor), as the last line before the cloud. Dry run records what would be done and touches nothing.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from fleet.cloud.clients import CloudClients
from fleet.cloud.errors import CloudError, Conflict, NetworkError, ServerError, Throttled
from fleet.cloud.types import ScalingActivity, ScalingGroup
from fleet.service.metrics import ServiceMetrics
from fleet.service.notify import Announcement
from fleet.service.observe import GroupObservation
from fleet.service.store import DecisionRecord, Outcome, Store
from policies.model import (
    BreakerState,
    GroupHistory,
    GroupPlan,
    Incident,
    IsolationStep,
    LifecycleState,
    Reason,
    ReasonCode,
    StepAction,
)
from policies.spec import GroupSpec

log = logging.getLogger(__name__)

# Outcomes after which a step is done for good (never repeated, reported to the policy).
DONE_OUTCOMES = frozenset({Outcome.APPLIED, Outcome.FAILED, Outcome.NOTIFIED, Outcome.RECORDED})
# Transient: nothing changed for sure; the next tick tries again with the same token.
RETRY_OUTCOMES = frozenset({Outcome.CONFLICT, Outcome.ERROR, Outcome.FENCED, Outcome.BLOCKED})
_SERVING = (LifecycleState.IN_SERVICE, LifecycleState.PROTECTED)
_PENDING = (LifecycleState.PENDING, LifecycleState.PENDING_WAIT)
_INFORMATIONAL = {StepAction.SURGE, StepAction.WAIT, StepAction.DRAIN}
# the steps with a cloud write (``Actuator._write_step``)
_WRITES = {StepAction.ENTER_STANDBY, StepAction.EXIT_STANDBY, StepAction.REMOVE, StepAction.REBOOT}
# Reconciling an interrupted write: how many recent activities of its group to read, and how far before the
# intent's time an activity may start (replica and ESS clocks differ by NTP's error, far below this).
RECONCILE_ACTIVITIES = 20
RECONCILE_SKEW = timedelta(minutes=2)
_CAUSE_TARGET = re.compile(r'to "(\d+)"')
# Steps that only tell people: no cloud call.
_NOTICES = {StepAction.ACKNOWLEDGE, StepAction.HOLD, StepAction.CLOSE}
# A write that has already landed (seen in the observed lifecycle state) before a restart, and what to say.
_LANDED: dict[tuple[StepAction, str | None], str] = {
    (StepAction.ENTER_STANDBY, LifecycleState.STANDBY): " (already Standby)",
    (StepAction.EXIT_STANDBY, LifecycleState.IN_SERVICE): " (already InService)",
    (StepAction.REMOVE, None): " (already gone)",
}


def _admitted_before(incident: Incident | None, opened_at: datetime | None) -> bool:
    """Whether an incident may still leave traffic under an open breaker: a human's, or one the policy
    admitted before the breaker opened (within its limit: the breaker trips on the incidents past it, in
    the same tick as it admits the ones before, and those go ahead)."""
    if incident is None:
        return False
    if incident.manual:
        return True
    admitted = incident.admitted_at
    return admitted is not None and opened_at is not None and admitted <= opened_at


def _already_landed(action: StepAction, state: str | None) -> str | None:
    """The note for a step whose effect the observation already shows, or None."""
    return _LANDED.get((action, state))


def client_token(*parts: object) -> str:
    """A ClientToken (ASCII, at most 64 characters, per ESS) derived from the decision's identity."""
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()
    return f"fleet-{digest[:40]}"


@dataclass(frozen=True)
class ActionResult:
    group: str
    kind: str
    action: str
    decision_id: str
    outcome: str
    reason: str = ""
    target: int | None = None
    instance_id: str | None = None
    incident_id: str | None = None
    client_token: str | None = None
    request_id: str | None = None
    error: str | None = None
    inputs: dict[str, Any] = field(default_factory=dict)


class Actuator:
    """Applies plans; ``fence()`` must say the lease is still ours right before each write."""

    def __init__(
        self,
        clients: CloudClients,
        store: Store,
        *,
        service: str,
        metrics: ServiceMetrics,
        dry_run: bool = False,
        notify: Callable[[Announcement], None] | None = None,
        notify_scale_min_change: int = 1,
    ) -> None:
        self.clients = clients
        self.store = store
        self.service = service
        self.metrics = metrics
        self.dry_run = dry_run
        self.notify = notify
        self.notify_scale_min_change = notify_scale_min_change
        self._dry_run_seen: set[tuple[str, str]] = set()
        # The last transient outcome per decision: a step blocked or in conflict for many ticks is audited
        # once per change, not once per tick.
        self._last_transient: dict[str, tuple[str, str | None]] = {}
        self._bounds_warned: set[tuple[str, int, int]] = set()  # (group, ESS MinSize, MaxSize) warned of

    # -- scaling --------------------------------------------------------------------------------------
    def scale(
        self,
        gp: GroupPlan,
        observed: GroupObservation,
        now: datetime,
        epoch: int | None,
        fence: Callable[[], bool],
    ) -> ActionResult | None:
        """Write the plan's desired capacity when it differs from what ESS has (within the ESS group's
        MinSize..MaxSize: ``clip_to_ess``, which the loop has already applied to the plan it records)."""
        if observed.group is None:
            return None
        group = observed.group
        gp = clip_to_ess(gp, group)  # a plan already clipped is returned as it is
        clip = next((r for r in gp.reasons if r.code == ReasonCode.CLIPPED_TO_ESS_BOUNDS), None)
        current = group.desired_capacity if group.desired_capacity is not None else group.total_capacity
        if clip is not None and clip.inputs.get("above_max_size"):
            self._warn_above_max(gp.group, current, group.max_size)
        target = gp.desired_capacity
        if target is None:
            return None  # ESS already has the clipped target (or removes the excess over MaxSize itself)
        inputs = {
            "observed_desired": current,
            "in_service": gp.in_service,
            "pending": gp.pending,
            "standby": gp.standby,
            "floor": gp.floor,
            "ceiling": gp.ceiling,
            "reasons": [r.model_dump(mode="json") for r in gp.reasons],
            **gp.predictive,  # demand_rps, forecast_rps, forecast_upper_rps, capacity_per_instance_rps, ...
        }
        reason = _reason_text(gp)
        if clip is not None:
            # fleet.yaml's bounds are wider than the ESS group's: ESS would clamp (or refuse) the write, so
            # ask for what it can do, and say so once instead of a failed write every tick
            planned = int(clip.inputs.get("planned_target") or target)
            self._warn_bounds(gp.group, planned, group.min_size, group.max_size)
            inputs["planned_target"] = planned
        if current == target:
            return None  # already there (a write that landed before a restart, or ESS reconciled)
        seq = self.store.applied_count(gp.group, "scale", "scale_to")
        decision_id = f"{gp.group}:scale:{seq}"
        token = client_token(self.service, group.group_id, target, decision_id)
        base = ActionResult(
            group=gp.group,
            kind="scale",
            action="scale_to",
            decision_id=decision_id,
            outcome="",
            reason=reason,
            target=target,
            client_token=token,
            inputs=inputs,
        )
        if self.dry_run:
            key = (gp.group, f"scale:{target}")
            if key in self._dry_run_seen:
                return None
            self._dry_run_seen = {k for k in self._dry_run_seen if k[0] != gp.group} | {key}
            return self._record(replace(base, outcome=Outcome.DRY_RUN), now, epoch)
        if observed.activities_in_progress and group.desired_capacity is None:
            # Without desired capacity ESS runs one activity at a time: ask again next tick.
            return self._record(
                replace(base, outcome=Outcome.CONFLICT, error="scaling activity in progress"), now, epoch
            )
        if not fence():
            return self._record(
                replace(base, outcome=Outcome.FENCED, error="lease lost before the write"), now, epoch
            )
        # The intent (with its ClientToken) is on record before the write is sent: a crash between the write
        # and its audit leaves an ``intended`` row that the next leader reconciles from the ESS activities.
        victims = _named_victims(gp, observed, current, target)
        if victims:
            base = replace(base, inputs={**inputs, "removed": victims})
        intent = self._intend(base, now, epoch)
        if not fence():
            return self._fenced_after_intent(base, now, epoch, intent)
        try:
            if victims:
                # a DesiredCapacity write lets ESS pick by its removal policy (the module's: the oldest
                # first), which keeps the suspects and removes healthy nodes
                activity_id = self.clients.ess.remove_instances(
                    group.group_id, victims, decrease_desired_capacity=True, client_token=token
                )
            else:
                activity_id = self.clients.ess.scale_to(group.group_id, target, token)
        except CloudError as exc:
            return self._failed(base, exc, now, epoch, intent)
        result = self._record(
            replace(base, outcome=Outcome.APPLIED, request_id=activity_id), now, epoch, intent=intent
        )
        change = abs(target - current)
        if self.notify is not None and change >= self.notify_scale_min_change:
            direction = "out" if target > current else "in"
            self.notify(
                Announcement(
                    kind="scale",
                    title=f"{gp.group}: scale {direction} {current} -> {target}",
                    text=reason,
                    group=gp.group,
                    fields={"activity": activity_id, "floor": gp.floor, "ceiling": gp.ceiling},
                )
            )
        return result

    def _warn_bounds(self, group: str, target: int, ess_min: int, ess_max: int) -> None:
        key = (group, ess_min, ess_max)
        if key in self._bounds_warned:
            return
        self._bounds_warned.add(key)
        log.warning(
            "group %s: the plan asks %d but the ESS group allows %d..%d (MinSize..MaxSize); fleet.yaml's "
            "min_size/max_size should fit the ESS group: the service writes within the ESS bounds",
            group,
            target,
            ess_min,
            ess_max,
        )

    def _warn_above_max(self, group: str, current: int, ess_max: int) -> None:
        key = (group, -current, ess_max)  # apart from _warn_bounds' keys (MinSize is never negative)
        if key in self._bounds_warned:
            return
        self._bounds_warned.add(key)
        log.warning(
            "group %s: the ESS group has %d instances desired, above its MaxSize %d (lowered in the "
            "console?): the service writes no scale-in for it; ESS removes the excess itself",
            group,
            current,
            ess_max,
        )

    # -- isolation ------------------------------------------------------------------------------------
    def steps(
        self,
        gp: GroupPlan,
        spec: GroupSpec,
        observed: GroupObservation,
        breaker: BreakerState | None,
        now: datetime,
        epoch: int | None,
        fence: Callable[[], bool],
        has_human_channel: bool,
    ) -> list[ActionResult]:
        results: list[ActionResult] = []
        incidents = {i.incident_id: i for i in gp.incidents}
        done: dict[str, str] = {}
        for d in self.store.decisions(group=gp.group, kind="isolation", limit=500):
            done.setdefault(d.decision_id, d.outcome)  # newest first: a step's latest outcome
        # out of service for isolation: an instance whose incident found it a launch that never served
        # (Incident.unserved), or serving nothing (Incident.served_nothing: its vLLM down), took no serving
        # capacity out, and max_isolated does not count it
        unserved = {i.instance_id for i in gp.incidents if i.took_no_capacity}
        standby_now = sum(
            1
            for i in observed.instances
            if i.lifecycle_state == LifecycleState.STANDBY and i.instance_id not in unserved
        )
        for step in gp.steps:
            if done.get(step.step_id) in DONE_OUTCOMES or done.get(step.step_id) == Outcome.DRY_RUN:
                continue
            res = self._step(
                step,
                gp,
                spec,
                observed,
                incidents.get(step.incident_id),
                breaker,
                standby_now,
                now,
                epoch,
                fence,
                has_human_channel,
            )
            if res is None:
                continue
            if (
                res.action == "enter_standby"
                and res.outcome in (Outcome.APPLIED, Outcome.DRY_RUN)
                and step.instance_id not in unserved
            ):
                standby_now += 1
            results.append(res)
            if res.outcome == Outcome.FENCED:
                break
        return results

    def _step(
        self,
        step: IsolationStep,
        gp: GroupPlan,
        spec: GroupSpec,
        observed: GroupObservation,
        incident: Incident | None,
        breaker: BreakerState | None,
        standby_now: int,
        now: datetime,
        epoch: int | None,
        fence: Callable[[], bool],
        has_human_channel: bool,
    ) -> ActionResult | None:
        base = ActionResult(
            group=gp.group,
            kind="isolation",
            action=step.action.value,
            decision_id=step.step_id,
            outcome="",
            reason=f"{step.reason.value}: {step.detail}".strip(": "),
            instance_id=step.instance_id,
            incident_id=step.incident_id,
            inputs=dict(step.inputs),
        )
        if step.action in _INFORMATIONAL:
            return None  # the target already carries the surge; waiting and draining need no call
        if step.action in _NOTICES:
            return self._notice(step, gp, incident, base, now, epoch, has_human_channel)

        group = observed.group
        if group is None:
            return None
        lifecycle = {i.instance_id: i.lifecycle_state for i in observed.instances}
        state = lifecycle.get(step.instance_id)
        token = client_token(self.service, step.step_id)
        base = replace(base, client_token=token)

        # Compare with what is observed before writing: the step may have landed before a restart.
        landed = _already_landed(step.action, state)
        if landed is not None:
            done_before = replace(base, outcome=Outcome.APPLIED, reason=base.reason + landed)
            return self._record(done_before, now, epoch)

        if step.action == StepAction.ENTER_STANDBY:
            dead = step.inputs.get("serves_nothing") is True
            blocked = self._guardrail(spec, gp, observed, incident, breaker, standby_now, dead)
            if blocked:
                log.warning("isolation of %s blocked at actuation: %s", step.instance_id, blocked)
                return self._record(replace(base, outcome=Outcome.BLOCKED, error=blocked), now, epoch)

        if self.dry_run:
            return self._record(replace(base, outcome=Outcome.DRY_RUN), now, epoch)
        if step.action not in _WRITES:
            log.warning("unknown isolation step %s for %s ignored", step.action.value, step.instance_id)
            return None
        if not fence():
            return self._record(
                replace(base, outcome=Outcome.FENCED, error="lease lost before the write"), now, epoch
            )
        # As for scale writes: the intent is on record before the call; a crash between the call and its
        # audit leaves an ``intended`` row that the next leader settles from the instance's observed state.
        intent = self._intend(base, now, epoch)
        if not fence():
            return self._fenced_after_intent(base, now, epoch, intent)
        try:
            _, rid = self._write_step(step, group.group_id, token)
        except CloudError as exc:
            return self._failed(base, exc, now, epoch, intent)
        return self._record(replace(base, outcome=Outcome.APPLIED, request_id=rid), now, epoch, intent=intent)

    def _notice(
        self,
        step: IsolationStep,
        gp: GroupPlan,
        incident: Incident | None,
        base: ActionResult,
        now: datetime,
        epoch: int | None,
        has_human_channel: bool,
    ) -> ActionResult:
        """An acknowledge, hold or close step: no cloud call, a notification and a record."""
        if self.dry_run:
            return self._record(replace(base, outcome=Outcome.DRY_RUN), now, epoch)
        self._notify_step(step, gp, incident)
        notified = has_human_channel and step.action == StepAction.ACKNOWLEDGE
        outcome = Outcome.NOTIFIED if notified else Outcome.RECORDED
        return self._record(replace(base, outcome=outcome), now, epoch)

    def _write_step(self, step: IsolationStep, group_id: str, token: str) -> tuple[bool, str | None]:
        """The one cloud write of an isolation step: (whether the action has a write, its request id)."""
        ess, ecs = self.clients.ess, self.clients.ecs
        if step.action == StepAction.ENTER_STANDBY:
            return True, ess.enter_standby(group_id, [step.instance_id], token)
        if step.action == StepAction.EXIT_STANDBY:
            return True, ess.exit_standby(group_id, [step.instance_id], token)
        if step.action == StepAction.REMOVE:
            # The policy counts the Standby node inside the desired capacity and has surged its
            # replacement already, so removing it lowers desired by one (its step says so); keeping
            # desired would make ESS launch a second replacement that the next plan scales in at random.
            decrease = bool(step.inputs.get("decrease_desired_capacity", True))
            return True, ess.remove_instances(
                group_id, [step.instance_id], decrease_desired_capacity=decrease, client_token=token
            )
        if step.action == StepAction.REBOOT:
            ecs.reboot_instance(step.instance_id)
            return True, None
        return False, None

    def _guardrail(
        self,
        spec: GroupSpec,
        gp: GroupPlan,
        observed: GroupObservation,
        incident: Incident | None,
        breaker: BreakerState | None,
        standby_now: int,
        serves_nothing: bool = False,
    ) -> str | None:
        """Why entering standby must not happen now, or None. The policy checked too; this is the backstop.
        ``serves_nothing``: the policy read the instance's vLLM down (the step says so): it takes no serving
        capacity out, so neither ``max_isolated`` nor the floor holds it back; the breaker still does."""
        if breaker is not None and breaker.open and not _admitted_before(incident, breaker.opened_at):
            return "circuit breaker open: automatic isolation paused until a human resets it"
        if serves_nothing:
            return None
        size = observed.count(*_SERVING, *_PENDING, LifecycleState.STANDBY)
        limit = spec.guardrails.max_isolated_for(size)
        if (incident is None or not incident.took_no_capacity) and standby_now + 1 > limit:
            return f"max_isolated reached ({standby_now} of {limit} already out of service)"
        serving_after = observed.count(*_SERVING, *_PENDING) - 1
        if serving_after < gp.floor:
            return f"would leave {serving_after} serving, below the floor of {gp.floor}: surge a replacement"
        return None

    def _notify_step(self, step: IsolationStep, gp: GroupPlan, incident: Incident | None) -> None:
        if self.notify is None:
            return
        titles = {
            StepAction.ACKNOWLEDGE: "incident detected",
            StepAction.HOLD: "held in Standby for diagnosis: a human decides",
            StepAction.CLOSE: "incident closed",
        }
        fields: dict[str, Any] = {"incident": step.incident_id}
        if incident is not None:
            fields.update(
                rule=incident.rule,
                action=incident.action,
                respond_by=incident.respond_by.isoformat(),
                isolate_by=incident.isolate_by.isoformat(),
            )
        self.notify(
            Announcement(
                kind="incident",
                title=f"{gp.group}/{step.instance_id}: {titles.get(step.action, step.action.value)}",
                text=step.detail or step.reason.value,
                severity="critical" if step.action == StepAction.ACKNOWLEDGE else "warning",
                group=gp.group,
                incident_id=step.incident_id,
                fields=fields,
            )
        )

    # -- plumbing -------------------------------------------------------------------------------------
    def record(self, res: ActionResult, now: datetime, epoch: int | None) -> ActionResult:
        """Audit a result of another writer (the drainer) as this actuator audits its own."""
        return self._record(res, now, epoch)

    def _cloud_error(self, exc: CloudError) -> None:
        self.metrics.cloud_errors.labels(code=exc.code or "unknown").inc()

    def _fenced_after_intent(
        self, base: ActionResult, now: datetime, epoch: int | None, intent: int
    ) -> ActionResult:
        """The fence asked again once the intent is on record, as near the cloud call as it can be: a process
        stopped between the first check and the call (SIGSTOP, a paused VM, a long GC) resumed past its lease
        and wrote beside the new leader. The tick's clock runs on through such a stop, so the lease reads
        expired here."""
        fenced = replace(base, outcome=Outcome.FENCED, error="lease lost before the write")
        return self._record(fenced, now, epoch, intent=intent)

    def _intend(self, res: ActionResult, now: datetime, epoch: int | None) -> int:
        """Record a write about to be sent (outcome ``intended``); returns the row to settle after it."""
        intended = replace(res, outcome=Outcome.INTENDED)
        return self.store.record_decision(self._decision_record(intended, now, epoch))

    def _decision_record(self, res: ActionResult, now: datetime, epoch: int | None) -> DecisionRecord:
        return DecisionRecord(
            service=self.service,
            at=now,
            group_name=res.group,
            kind=res.kind,
            action=res.action,
            decision_id=res.decision_id,
            outcome=res.outcome,
            reason=res.reason,
            target=res.target,
            instance_id=res.instance_id,
            incident_id=res.incident_id,
            inputs=res.inputs,
            client_token=res.client_token,
            request_id=res.request_id,
            error=res.error,
            dry_run=self.dry_run,
            lease_epoch=epoch,
        )

    def reconcile(
        self, group_ids: dict[str, str], states: Mapping[str, str] | None = None
    ) -> list[ActionResult]:
        """Settle the writes left ``intended`` by a crash: scale writes from the groups' recent ESS scaling
        activities, isolation steps from the instances' lifecycle states observed this tick (``states``:
        instance id -> state, every instance of the observed groups; without it isolation rows wait).

        A scale write: an activity that started after the intent (less a clock-skew allowance) and sets the
        intended capacity is the write having landed: the record becomes ``applied`` with its activity id.
        Without one the write never reached ESS: ``error``, and the next tick derives the same ClientToken and
        tries again. An isolation step whose effect the instance shows (Standby after EnterStandby, InService
        after ExitStandby, gone after RemoveInstances) is ``applied``; otherwise ``error``, and the step is
        tried again with its ClientToken (a reboot leaves nothing to compare with: it may run twice).
        ``group_ids`` maps configured group names to the ESS ids observed this tick.
        """
        settled: list[ActionResult] = []
        activities_of: dict[str, list[ScalingActivity]] = {}  # read once per group, however many rows
        for rec in self.store.intended_decisions():
            gid = group_ids.get(rec.group_name)
            if gid is None or rec.id is None:
                continue  # not observed this tick: left for a later one
            if rec.kind == "isolation":
                if states is None:
                    continue
                outcome, request_id, error, reason = _settle_step(rec, states)
            else:
                if gid not in activities_of:
                    activities_of[gid] = self.clients.ess.describe_scaling_activities(
                        gid, limit=RECONCILE_ACTIVITIES
                    )
                match = next((a for a in activities_of[gid] if _activity_sets(a, rec)), None)
                if match is not None:
                    outcome, request_id, error = Outcome.APPLIED, match.activity_id, None
                    reason = (
                        f"{rec.reason} (reconciled after an interruption: ESS activity {match.activity_id})"
                    )
                else:
                    outcome, request_id = Outcome.ERROR, None
                    error = (
                        "interrupted before ESS confirmed the write, and no ESS activity shows it: retried"
                    )
                    reason = rec.reason
            self.store.settle_decision(rec.id, outcome, request_id=request_id, error=error, reason=reason)
            log.warning(
                "%s %s %s left intended by an interruption: %s%s",
                rec.group_name,
                rec.action,
                rec.target if rec.target is not None else rec.instance_id,
                outcome.value,
                f" ({request_id})" if request_id else "",
                extra={"decision_id": rec.decision_id, "request_id": request_id, "outcome": outcome.value},
            )
            settled.append(
                ActionResult(
                    group=rec.group_name,
                    kind=rec.kind,
                    action=rec.action,
                    decision_id=rec.decision_id,
                    outcome=outcome,
                    reason=reason,
                    target=rec.target,
                    instance_id=rec.instance_id,
                    incident_id=rec.incident_id,
                    client_token=rec.client_token,
                    request_id=request_id,
                    error=error,
                )
            )
        return settled

    def _failed(
        self, base: ActionResult, exc: CloudError, now: datetime, epoch: int | None, intent: int
    ) -> ActionResult:
        self._cloud_error(exc)
        res = replace(base, outcome=_failure_outcome(exc), error=str(exc), request_id=exc.request_id)
        return self._record(res, now, epoch, intent=intent, failure=exc.failure)

    def _record(
        self,
        res: ActionResult,
        now: datetime,
        epoch: int | None,
        *,
        intent: int | None = None,
        failure: str | None = None,
    ) -> ActionResult:
        """Audit ``res``: a new row, or the ``intent`` row recorded before its write, settled. A transient
        outcome the same as the previous attempt's (``failure``: the error without its request id, which
        every retry changes) is audited once."""
        self.metrics.actions.labels(group=res.group, action=res.action, outcome=res.outcome).inc()
        if res.outcome in RETRY_OUTCOMES:
            same = (res.outcome, failure if failure is not None else res.error)
            if self._last_transient.get(res.decision_id) == same:
                if intent is not None:
                    self.store.delete_decision(intent)  # as the previous attempt ended: audited once
                return res
            self._last_transient[res.decision_id] = same
        else:
            self._last_transient.pop(res.decision_id, None)
        if intent is not None:
            self.store.settle_decision(intent, res.outcome, request_id=res.request_id, error=res.error)
        else:
            self.store.record_decision(self._decision_record(res, now, epoch))
        self.metrics.decisions.labels(group=res.group, kind=res.kind).inc()
        log.info(
            "%s %s %s -> %s%s",
            res.group,
            res.action,
            res.instance_id or res.target,
            res.outcome,
            f" ({res.error})" if res.error else "",
            extra={"decision_id": res.decision_id, "request_id": res.request_id, "outcome": res.outcome},
        )
        return res


def _settle_step(rec: DecisionRecord, states: Mapping[str, str]) -> tuple[Outcome, None, str | None, str]:
    """(outcome, request id, error, reason) of an isolation step left intended, from the observed state."""
    try:
        action: StepAction | None = StepAction(rec.action)
    except ValueError:
        action = None
    landed = None if action is None else _already_landed(action, states.get(rec.instance_id or ""))
    if landed is not None:
        return Outcome.APPLIED, None, None, f"{rec.reason}{landed} (reconciled after an interruption)"
    if action == StepAction.REBOOT:
        error = "interrupted before ECS confirmed the reboot, which leaves nothing to compare: retried"
    else:
        error = "interrupted before ESS confirmed the step, and the instance does not show it: retried"
    return Outcome.ERROR, None, error, rec.reason


def _activity_sets(activity: ScalingActivity, rec: DecisionRecord) -> bool:
    """Whether an ESS activity is the intended write of ``rec``: started after it, to its capacity."""
    if activity.start_time is None or activity.start_time < rec.at - RECONCILE_SKEW:
        return False
    # ESS describes a capacity change as '... changing the Total Capacity from "2" to "5".'
    said = _CAUSE_TARGET.findall(activity.cause or "")
    return (bool(said) and int(said[-1]) == rec.target) or activity.total_capacity == rec.target


def _failure_outcome(exc: CloudError) -> Outcome:
    if isinstance(exc, Conflict):
        return Outcome.CONFLICT
    if isinstance(exc, Throttled | ServerError | NetworkError):
        return Outcome.ERROR  # transient: the same token is used again next tick
    return Outcome.FAILED


def clip_to_ess(gp: GroupPlan, group: ScalingGroup | None) -> GroupPlan:
    """The plan with its target inside the ESS group's own MinSize..MaxSize (what ESS can be asked for).

    fleet.yaml's bounds wider than the ESS group's would have ESS clamp (or refuse) the write; the plan that
    is recorded, shown and written then says what is really asked: the clipped target, the write it needs
    (none when ESS already has it), and a ``clipped_to_ess_bounds`` reason naming the bound and what the
    policy wanted. The policy's own history keeps what it decided.

    A group above its own MaxSize (lowered in the console below the capacity it has) is never scaled in by
    the clip: the write would take out instances no policy decided to, all in one activity and past the
    scale-in's stabilization, and ESS brings a group outside its bounds within them by itself. The plan is
    then shown clipped and written only when the policy's own target is within MaxSize."""
    if group is None:
        return gp
    target = gp.target_capacity
    limited = max(group.min_size, min(group.max_size, target))
    if limited == target:
        return gp
    current = group.desired_capacity if group.desired_capacity is not None else group.total_capacity
    side = "MaxSize" if target > group.max_size else "MinSize"
    over_max = side == "MaxSize" and limited < current
    detail = f"clipped to the ESS group's {side} {limited} (the plan asks {target})"
    if over_max:
        detail += (
            f"; the group has {current}, above its MaxSize: ESS removes the excess, the service does not"
        )
    reason = Reason(
        code=ReasonCode.CLIPPED_TO_ESS_BOUNDS,
        detail=detail,
        inputs={
            "planned_target": target,
            "ess_min_size": group.min_size,
            "ess_max_size": group.max_size,
            "above_max_size": over_max,
        },
    )
    # as decide: no write while paused, nor when ESS already has the target
    paused = gp.reason == ReasonCode.PAUSED
    desired = None if paused or over_max or group.desired_capacity == limited else limited
    direction = "none" if desired is None or desired == current else ("up" if desired > current else "down")
    update = {
        "target_capacity": limited,
        "serving_target": max(0, gp.serving_target - (target - limited)),
        "desired_capacity": desired,
        "direction": direction,
        "reasons": [*gp.reasons, reason],
    }
    return gp.model_copy(update=update)


def with_fallback_count(gp: GroupPlan, size: int, why: str, group: ScalingGroup | None) -> GroupPlan:
    """The group plan with the count its capacity ladder's move needs (``CapacityManager.fall_back``): the
    group now orders a type of another capacity per instance, and only the part still missing is ordered on
    it. Folded in before the plan is recorded and written, so that the tick makes one capacity write and the
    decision says why (a ``capacity_fallback_count`` reason with the plan's own target). The policy's history
    takes the count too (``fallback_history``)."""
    delta = size - gp.target_capacity
    if delta == 0:
        return gp
    reason = Reason(
        code=ReasonCode.CAPACITY_FALLBACK_COUNT,
        detail=f"{why}: {size} instead of {gp.target_capacity}",
        inputs={"planned_target": gp.target_capacity, "fallback_count": size},
    )
    current = None if group is None else group.desired_capacity
    desired = None if gp.reason == ReasonCode.PAUSED or current == size else size
    if current is None:
        current = group.total_capacity if group is not None else gp.target_capacity
    direction = "none" if desired is None or desired == current else ("up" if desired > current else "down")
    return gp.model_copy(
        update={
            "target_capacity": size,
            "serving_target": max(0, gp.serving_target + delta),
            "desired_capacity": desired,
            "direction": direction,
            # the plan's own reason stays, unless it wrote nothing (a hold) and this is the write
            "reason": ReasonCode.CAPACITY_FALLBACK_COUNT if gp.desired_capacity is None else gp.reason,
            "reasons": [*gp.reasons, reason],
        }
    )


def fallback_history(gh: GroupHistory, gp: GroupPlan, size: int, now: datetime) -> GroupHistory:
    """The policy's history of a group whose plan ``gp`` a fallback count ``size`` replaced
    (``with_fallback_count``): the count is its last target, so that the next decision starts from it
    instead of writing the plan's count back over it; a count raised starts the scale-in cooldown again."""
    delta = size - gp.target_capacity
    if delta == 0:
        return gh
    base = gh.last_target if gh.last_target is not None else gp.target_capacity
    update: dict[str, object] = {"last_target": max(0, base + delta)}
    if delta > 0:
        update["last_scale_at"] = now
    return gh.model_copy(update=update)


def _reason_text(gp: GroupPlan) -> str:
    parts = [gp.reason.value]
    for r in gp.reasons:
        if r.detail:
            parts.append(r.detail)
    return "; ".join(dict.fromkeys(parts))


def _named_victims(gp: GroupPlan, observed: GroupObservation, current: int, target: int) -> list[str]:
    """The instances a scale-in removes by name: the plan's first ``current - target`` of its scale-in order,
    when a suspect is among them (an instance with an open incident, or unhealthy) and every one is
    InService (RemoveInstances takes no other); otherwise none, and the DesiredCapacity write lets ESS choose
    healthy victims by its removal policy."""
    count = current - target
    if count <= 0 or gp.scale_in_suspects <= 0 or len(gp.scale_in_order) < count:
        return []
    victims = gp.scale_in_order[:count]
    states = {i.instance_id: i.lifecycle_state for i in observed.instances}
    return victims if all(states.get(v) == LifecycleState.IN_SERVICE for v in victims) else []
