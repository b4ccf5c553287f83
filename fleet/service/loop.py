"""The control loop: each tick observes, decides, actuates and records, under the leader lease.

``Service.tick(now)`` is a plain function of the time it is given, so production (an APScheduler interval job,
``run_forever``) and simulation (a virtual clock) drive the same code. One tick:

1. take or renew the lease; a replica without it records nothing and touches nothing (standby);
2. load the policy history and the operator's controls and requests from the store (so a takeover or a
   restart resumes from exactly what the last leader persisted);
3. observe the cloud and build the ``policies.Snapshot``;
4. ``policies.decide`` -> Plan;
5. persist the new history (write-ahead), the incidents and their timeline, and mark handled requests;
6. mirror schedule floors as ESS scheduled tasks (at start and every ``schedule_sync_interval_s``);
7. actuate (each write fenced by the lease and carrying a derived ClientToken), auditing each write;
8. notify (SLA at risk or breached, breaker) and update the Prometheus metrics.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from fleet.cloud.clients import CloudClients
from fleet.cloud.errors import CloudError
from fleet.service.actuate import DONE_OUTCOMES, ActionResult, Actuator
from fleet.service.lease import Lease, LeaseManager
from fleet.service.metrics import RetriedErrorCounter, ServiceMetrics
from fleet.service.notify import Channel, Notification, Notifier
from fleet.service.observe import Observation, Observer, health_status, to_policy_events
from fleet.service.schedules import TaskChange, sync_group
from fleet.service.store import DecisionRecord, IncidentEvent, IncidentRecord, Store, open_store
from policies import decide
from policies.model import (
    GroupSnapshot,
    History,
    Incident,
    InstanceSnapshot,
    OperatorAction,
    Plan,
    Snapshot,
    StepOutcome,
    WarningCode,
)
from policies.model import Notification as PolicyNotification
from policies.spec import GroupSpec, PolicySpec

log = logging.getLogger("fleet.service")

Clock = Callable[[], datetime]
DRY_RUN_SUFFIX = "-dry-run"
# An operator request the policy has not applied within this time is closed as not applicable.
REQUEST_EXPIRY = timedelta(hours=1)


def wall_clock() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class ServiceSettings:
    """The service's own knobs, read from FleetConfig (with defaults where the config has none)."""

    service_name: str = "fleet"
    tick_interval_s: float = 15.0
    lease_ttl_s: float = 45.0
    schedule_sync_interval_s: float = 300.0
    notify_scale_min_change: int = 1
    api_host: str = "127.0.0.1"
    api_port: int = 8780
    api_token: str | None = field(default=None, repr=False)
    api_enabled: bool = True

    @classmethod
    def from_config(cls, config: Any, env: dict[str, str] | None = None) -> ServiceSettings:
        env = dict(os.environ if env is None else env)
        tick = float(_get(config, "tick_interval_s", 15.0) or 15.0)
        lease = _get(config, "lease", None)
        api = _get(config, "api", None)
        token = _get(api, "token", None) if api is not None else None
        if token is not None and hasattr(token, "get_secret_value"):
            token = token.get_secret_value()
        return cls(
            service_name=str(_get(lease, "name", None) or _get(config, "service_name", None) or "fleet"),
            tick_interval_s=tick,
            # A lease shorter than two ticks would lapse between renewals: every tick would be a takeover.
            lease_ttl_s=max(float(_get(lease, "ttl_s", None) or 3 * tick), 2 * tick + 1.0),
            schedule_sync_interval_s=float(_get(config, "schedule_sync_interval_s", 300.0) or 300.0),
            notify_scale_min_change=int(_get(config, "notify_scale_min_change", 1) or 1),
            api_host=str(_get(api, "host", "127.0.0.1") or "127.0.0.1"),
            api_port=int(_get(api, "port", 8780) if _get(api, "port", None) is not None else 8780),
            api_token=token or env.get("FLEET_API_TOKEN") or None,
            api_enabled=bool(_get(api, "enabled", True)),
        )


def _get(obj: Any, name: str, default: Any) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


@dataclass
class TickResult:
    """What one tick did: whether it led, what it decided, what it wrote, what went wrong."""

    at: datetime
    leader: bool
    lease_epoch: int | None = None
    plan: Plan | None = None
    actions: list[ActionResult] = field(default_factory=list)
    schedule_changes: list[TaskChange] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    observed_groups: list[str] = field(default_factory=list)
    api_calls: int = 0
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors


class Service:
    """One replica of the fleet service. Build with :func:`build_service`."""

    def __init__(
        self,
        *,
        specs: list[GroupSpec],
        clients: CloudClients,
        store: Store,
        settings: ServiceSettings,
        clock: Clock,
        dry_run: bool,
        notifier: Notifier | None,
        holder_id: str,
        metrics: ServiceMetrics,
    ) -> None:
        self.specs = specs
        self.policy = PolicySpec(groups=tuple(specs))
        self.clients = clients
        self.store = store
        self.settings = settings
        self.clock = clock
        self.dry_run = dry_run
        self.notifier = notifier
        self.holder_id = holder_id
        self.metrics = metrics
        self.lease = LeaseManager(store.engine, settings.service_name, holder_id, settings.lease_ttl_s)
        self.observer = Observer(clients, specs, on_error=self._count_error)
        self.actuator = Actuator(
            clients,
            store,
            service=settings.service_name,
            metrics=metrics,
            dry_run=dry_run,
            notify=self._notify,
            notify_scale_min_change=settings.notify_scale_min_change,
        )
        self._retried = RetriedErrorCounter(metrics)
        logging.getLogger("fleet.cloud").addHandler(self._retried)
        self.last_tick: TickResult | None = None
        self.last_observation: Observation | None = None
        self._last_schedule_sync: datetime | None = None
        self._lock = threading.Lock()  # one tick at a time, whoever calls

    # -- the tick -------------------------------------------------------------------------------------
    def tick(self, now: datetime) -> TickResult:
        """Observe -> decide -> actuate -> record, once, at ``now`` (aware)."""
        if now.tzinfo is None:
            raise ValueError("tick(now) needs a timezone-aware datetime")
        with self._lock:
            started = time.perf_counter()
            result = TickResult(at=now, leader=False)
            try:
                self._tick(now, result)
            except Exception as exc:  # a tick must never kill the loop; the next one starts clean
                log.exception("tick failed")
                result.errors.append(f"{type(exc).__name__}: {exc}")
            result.duration_s = time.perf_counter() - started
            self.metrics.tick_duration.observe(result.duration_s)
            outcome = "error" if result.errors else ("acted" if result.leader else "standby")
            self.metrics.ticks.labels(outcome=outcome).inc()
            self.metrics.leader.set(1 if result.leader else 0)
            self.last_tick = result
            return result

    def _tick(self, now: datetime, result: TickResult) -> None:
        lease = self.lease.acquire(now)
        if lease is None:
            return
        result.leader = True
        result.lease_epoch = lease.epoch
        history = self._load_history()
        paused = self.store.paused_groups()
        requests = self.store.pending_requests()
        observation = self.observer.observe(now)
        self.last_observation = observation
        result.api_calls = observation.api_calls
        result.observed_groups = [n for n, g in observation.groups.items() if g.ok]
        problems = [str(err) for err in observation.errors]
        for name, g in observation.groups.items():
            if not g.ok:
                problems += [f"group {name}: {e}" for e in g.errors if e not in problems]
        result.errors.extend(problems)
        snapshot, unmatched = self._snapshot(now, observation, paused, requests, history)
        plan = decide(snapshot, self.policy, history, now)
        result.plan = plan

        tick_started = time.monotonic()

        def fence() -> bool:
            # ``now`` may be virtual (simulation): advance it by the real time this tick has taken.
            elapsed = timedelta(seconds=time.monotonic() - tick_started)
            return self.lease.still_held(lease, now + elapsed)

        # Write-ahead: the new history (the intent, e.g. the new target) is persisted before any cloud write,
        # so a crash between the write and the end of the tick resumes from the intent, never from the state
        # before it (which would undo the write). Every write below is idempotent by its ClientToken.
        if not self._persist(plan, now, lease, requests, unmatched):
            result.errors.append("lease lost before the history was saved: nothing written")
            return
        if self._schedule_sync_due(now):
            result.schedule_changes = self._sync_schedules(now, observation, lease, fence)
        self._actuate(plan, observation, now, lease, fence, paused, result)
        self._after(plan, observation, now)

    # -- snapshot -------------------------------------------------------------------------------------
    def _load_history(self) -> History | None:
        raw = self.store.load_history()
        return None if raw is None else History.model_validate(raw)

    def _snapshot(
        self,
        now: datetime,
        observation: Observation,
        paused: set[str],
        requests: list,
        history: History | None,
    ) -> tuple[Snapshot, list]:
        groups: list[GroupSnapshot] = []
        where: dict[str, str] = {}  # instance -> group
        for name, g in observation.groups.items():
            for inst in g.instances:
                where[inst.instance_id] = name
        incident_group = {
            i.incident_id: gname
            for gname, gh in (history.groups.items() if history else [])
            for i in gh.incidents
        }
        ops: dict[str, list[OperatorAction]] = {}
        unmatched = []
        for req in requests:
            group = where.get(req.instance_id or "") or incident_group.get(req.incident_id or "")
            if group is None and req.incident_id:
                row = self.store.incident(req.incident_id)
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
        notified = self._notifications(history)
        outcomes = self._outcomes(history, now)
        for spec in self.specs:
            seen = observation.groups.get(spec.name)
            if seen is None or not seen.ok or seen.group is None:
                continue  # not observed: the policy holds the group (unknown is not zero)
            g, ess_group = seen, seen.group
            instances = []
            gh = history.groups.get(spec.name) if history else None
            seen_xids = {(x.instance_id, x.code, x.at) for x in gh.xids} if gh else set()
            for inst in g.instances:
                xids = [
                    x
                    for x in g.xids.get(inst.instance_id, [])
                    if (inst.instance_id, x.code, x.at) not in seen_xids
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
            groups.append(
                GroupSnapshot(
                    name=spec.name,
                    scaling_group_id=ess_group.group_id,
                    desired_capacity=ess_group.desired_capacity,
                    activity_in_progress=bool(g.activities_in_progress),
                    paused=spec.name in paused,
                    instances=instances,
                    notifications=notified.get(spec.name, []),
                    operator_actions=ops.get(spec.name, []),
                    outcomes=outcomes.get(spec.name, []),
                )
            )
        return Snapshot(taken_at=now, groups=groups), unmatched

    def _notifications(self, history: History | None) -> dict[str, list[PolicyNotification]]:
        """Human channels reached for incidents the policy has not yet seen acknowledged."""
        out: dict[str, list[PolicyNotification]] = {}
        if history is None:
            return out
        for gname, gh in history.groups.items():
            for inc in gh.incidents:
                if inc.acknowledged_at is not None or not inc.open:
                    continue
                row = self.store.incident(inc.incident_id)
                if row is not None and row.notified_at is not None:
                    channel = next(
                        (
                            e.detail
                            for e in self.store.incident_events(inc.incident_id)
                            if e.kind == "notified"
                        ),
                        "notification",
                    )
                    out.setdefault(gname, []).append(
                        PolicyNotification(incident_id=inc.incident_id, at=row.notified_at, channel=channel)
                    )
        return out

    def _outcomes(self, history: History | None, now: datetime) -> dict[str, list[StepOutcome]]:
        """Results of isolation steps done but not yet seen by the policy."""
        seen: set[str] = set()
        if history is not None:
            for gh in history.groups.values():
                seen.update(gh.seen_outcomes)
        out: dict[str, list[StepOutcome]] = {}
        recent = self.store.decisions(since=now - timedelta(days=1), kind="isolation", limit=2000)
        for d in reversed(recent):  # oldest first
            if d.decision_id in seen or d.outcome not in DONE_OUTCOMES or d.dry_run:
                continue
            seen.add(d.decision_id)
            out.setdefault(d.group_name, []).append(
                StepOutcome(
                    step_id=d.decision_id,
                    ok=d.outcome != "failed",
                    at=d.at,
                    detail=d.error or d.reason or d.outcome,
                )
            )
        return out

    # -- actuation ------------------------------------------------------------------------------------
    def _actuate(
        self,
        plan: Plan,
        observation: Observation,
        now: datetime,
        lease: Lease,
        fence: Callable[[], bool],
        paused: set[str],
        result: TickResult,
    ) -> None:
        for gp in plan.groups:
            spec = self.policy.group(gp.group)
            observed = observation.groups.get(gp.group)
            if spec is None or observed is None or not observed.ok:
                continue
            if gp.group in paused:
                continue  # operators paused it: decisions are still made and shown, nothing is written
            gh = plan.history.groups.get(gp.group)
            breaker_open = bool(gh and gh.breaker.open)
            has_channel = self.notifier is not None and self.notifier.has_channels
            steps = self.actuator.steps(
                gp, spec, observed, breaker_open, now, lease.epoch, fence, has_channel
            )
            result.actions.extend(steps)
            if any(s.outcome == "fenced" for s in steps):
                result.errors.append("lease lost before a write")
                return
            res = self.actuator.scale(gp, observed, now, lease.epoch, fence)
            if res is not None:
                result.actions.append(res)
                if res.outcome == "fenced":
                    result.errors.append("lease lost before a write")
                    return
            for a in result.actions:
                if a.outcome in ("error", "failed") and a.error:
                    result.errors.append(a.error)

    def _schedule_sync_due(self, now: datetime) -> bool:
        if self._last_schedule_sync is None:
            return True
        return (now - self._last_schedule_sync).total_seconds() >= self.settings.schedule_sync_interval_s

    def _sync_schedules(
        self, now: datetime, observation: Observation, lease: Lease, fence: Callable[[], bool]
    ) -> list[TaskChange]:
        changes: list[TaskChange] = []
        complete = True
        for spec in self.specs:
            g = observation.groups.get(spec.name)
            if g is None or not g.ok or g.group is None or not spec.schedules:
                complete = complete and (g is not None and g.ok)
                continue
            if not self.dry_run and not fence():
                return changes
            try:
                group_changes = sync_group(
                    self.clients.ess, spec, g.group.group_id, now, dry_run=self.dry_run
                )
            except CloudError as exc:
                self._count_error(exc)
                log.warning("schedule sync of %s failed: %s", spec.name, exc)
                complete = False
                continue
            for ch in group_changes:
                if ch.op == "error":
                    complete = False
                outcome = (
                    "dry_run"
                    if self.dry_run and ch.op != "skip"
                    else ("error" if ch.op == "error" else "applied")
                )
                if ch.op == "skip":
                    outcome = "skipped"
                self.store.record_decision(
                    DecisionRecord(
                        service=self.settings.service_name,
                        at=now,
                        group_name=spec.name,
                        kind="schedule",
                        action=f"task_{ch.op}",
                        decision_id=f"{spec.name}:task:{ch.name}",
                        outcome=outcome,
                        reason=ch.detail,
                        request_id=ch.task_id,
                        dry_run=self.dry_run,
                        lease_epoch=lease.epoch,
                    )
                )
            changes.extend(group_changes)
        if complete:
            self._last_schedule_sync = now
        return changes

    # -- recording ------------------------------------------------------------------------------------
    def _persist(self, plan: Plan, now: datetime, lease: Lease, requests: list, unmatched: list) -> bool:
        """Save the plan's history, incidents and handled requests in one transaction, fenced by the lease."""
        history = plan.history.model_dump(mode="json")
        applied_ops: set[str] = set()
        for gh in plan.history.groups.values():
            applied_ops.update(gh.applied_operator_actions)
        incidents: dict[str, tuple[str, Incident]] = {}
        for gname, gh in plan.history.groups.items():
            for inc in gh.incidents:
                incidents[inc.incident_id] = (gname, inc)
        for gp in plan.groups:
            for inc in gp.incidents:
                incidents[inc.incident_id] = (gp.group, inc)
        with self.store.begin() as conn:
            if not self.lease.still_held(lease, now, conn):
                return False
            self.store.save_history(history, now, lease.epoch, conn)
            for gname, inc in incidents.values():
                new = self.store.upsert_incident(
                    _incident_record(self.settings.service_name, gname, inc, now), conn
                )
                if new:
                    self.store.add_incident_event(
                        IncidentEvent(inc.incident_id, inc.detected_at, "detected", inc.rule), conn
                    )
            for req in requests:
                if f"req-{req.id}" in applied_ops:
                    self.store.mark_request(req.id, "applied", now, conn)
                elif now - req.created_at > REQUEST_EXPIRY:
                    # The policy never took it up (e.g. a release for an instance with no incident).
                    self.store.mark_request(req.id, "expired: not applicable", now, conn)
            for req in unmatched:
                what = req.instance_id or req.incident_id
                self.store.mark_request(req.id, f"refused: {what} is not in any configured group", now, conn)
        return True

    def _after(self, plan: Plan, observation: Observation, now: datetime) -> None:
        """Notifications for SLA risk and breaches (once each), and the Prometheus gauges."""
        for w in plan.warnings + [w for gp in plan.groups for w in gp.warnings]:
            kind = {
                WarningCode.SLA_RESPOND_AT_RISK: "sla_risk",
                WarningCode.SLA_ISOLATE_AT_RISK: "sla_risk",
                WarningCode.SLA_RESPOND_BREACHED: "sla_breach",
                WarningCode.SLA_ISOLATE_BREACHED: "sla_breach",
                WarningCode.BREAKER_OPEN: "breaker",
            }.get(w.code)
            if kind is None:
                continue
            key = w.incident_id or f"group:{w.group}"
            if any(e.kind == w.code.value for e in self.store.incident_events(key)):
                continue
            self.store.add_incident_event(IncidentEvent(key, now, w.code.value, w.detail))
            if kind == "sla_breach":
                self.metrics.sla_breaches.labels(
                    kind="respond" if "respond" in w.code.value else "isolate"
                ).inc()
            self._notify(
                Notification(
                    kind=kind,
                    title=f"{w.group}: {w.code.value.replace('_', ' ')}",
                    text=w.detail,
                    severity="critical" if kind != "sla_risk" else "warning",
                    group=w.group,
                    incident_id=w.incident_id,
                    fields={"instance": w.instance_id} if w.instance_id else {},
                )
            )
        # gauges
        self.metrics.incidents.clear()
        self.metrics.respond_by.clear()
        self.metrics.isolate_by.clear()
        by_state: dict[str, int] = {}
        for gp in plan.groups:
            for inc in gp.incidents:
                by_state[inc.state.value] = by_state.get(inc.state.value, 0) + 1
                labels = {"incident": inc.incident_id, "instance": inc.instance_id}
                if inc.acknowledged_at is None:
                    self.metrics.respond_by.labels(**labels).set((inc.respond_by - now).total_seconds())
                if inc.isolated_at is None:
                    self.metrics.isolate_by.labels(**labels).set((inc.isolate_by - now).total_seconds())
        for state, n in by_state.items():
            self.metrics.incidents.labels(state=state).set(n)
        paused = self.store.paused_groups()
        for name, g in observation.groups.items():
            self.metrics.paused.labels(group=name).set(1 if name in paused else 0)
            for metric, age in g.staleness_s.items():
                if age is not None:
                    self.metrics.metric_staleness.labels(group=name, metric=metric).set(age)
            if g.group is not None:
                self.metrics.desired.labels(group=name).set(
                    g.group.desired_capacity or g.group.total_capacity
                )
                self.metrics.in_service.labels(group=name).set(g.count("InService"))

    def _notify(self, note: Notification) -> None:
        if self.notifier is not None and self.notifier.has_channels:
            self.notifier.send(note)

    def _count_error(self, exc: CloudError) -> None:
        self.metrics.cloud_errors.labels(code=exc.code or "unknown").inc()

    def _delivered(self, note: Notification, channel: Channel) -> None:
        if note.kind == "incident" and note.incident_id:
            self.store.mark_notified(note.incident_id, channel.label, self.clock())

    # -- views ----------------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        last = self.last_tick
        return {
            "holder": self.holder_id,
            "leader": bool(last and last.leader),
            "last_tick_at": last.at.isoformat() if last else None,
            "dry_run": self.dry_run,
        }

    def status(self) -> dict[str, Any]:
        """The view behind GET /status and `fleet status`."""
        now = self.clock()
        view = status_from_store(self.store, now, [s.name for s in self.specs])
        view["replica"] = self.health()
        obs = self.last_observation
        plan = self.last_tick.plan if self.last_tick else None
        for g in view["groups"]:
            o = obs.groups.get(g["name"]) if obs else None
            if o is not None and o.group is not None:
                g.update(
                    group_id=o.group.group_id,
                    desired=o.group.desired_capacity,
                    total=o.group.total_capacity,
                    in_service=o.count("InService"),
                    pending=o.count("Pending", "Pending:Wait"),
                    standby=o.count("Standby"),
                    staleness_s=o.staleness_s,
                )
            gp = plan.group(g["name"]) if plan else None
            if gp is not None:
                g.update(
                    target=gp.target_capacity,
                    reason=gp.reason.value,
                    floor=gp.floor,
                    ceiling=gp.ceiling,
                    active_schedules=gp.active_schedules,
                    warnings=[w.model_dump(mode="json") for w in gp.warnings],
                )
        return view

    def close(self, release_lease: bool = True) -> None:
        if release_lease:
            try:
                self.lease.release(wall_clock())
            except Exception:  # the database may be gone at shutdown; the lease then simply expires
                log.warning("could not release the lease at shutdown")
        if self.notifier is not None:
            self.notifier.stop(timeout_s=5)
        logging.getLogger("fleet.cloud").removeHandler(self._retried)
        self.store.close()


def _incident_record(service: str, group: str, inc: Incident, now: datetime) -> IncidentRecord:
    by = inc.acknowledged_by
    cause = f"{inc.kind}: {inc.rule}"
    if inc.manual and inc.evidence.get("reason"):
        # the operator's own words are the cause people look for in `fleet incidents`
        cause = f"manual: {inc.evidence['reason']}"
    return IncidentRecord(
        id=inc.incident_id,
        service=service,
        group_name=group,
        instance_id=inc.instance_id,
        state=inc.state.value,
        detected_at=inc.detected_at,
        updated_at=now,
        cause=cause,
        respond_by=inc.respond_by,
        isolate_by=inc.isolate_by,
        acknowledged_at=inc.acknowledged_at,
        acknowledged_by=by,
        isolated_at=inc.isolated_at,
        closed_at=inc.closed_at,
        body=inc.model_dump(mode="json"),
    )


def status_from_store(store: Store, now: datetime, group_names: list[str]) -> dict[str, Any]:
    """What the store says: lease, paused groups, last decisions, incidents with their SLA timers."""
    lease = LeaseManager(store.engine, store.service, "-", 1.0).current()
    paused = store.paused_groups()
    decisions = store.decisions(limit=50)
    last_by_group: dict[str, DecisionRecord] = {}
    for d in decisions:
        if d.kind == "scale":
            last_by_group.setdefault(d.group_name, d)
    groups = []
    for name in group_names or sorted({d.group_name for d in decisions}):
        last = last_by_group.get(name)
        groups.append(
            {
                "name": name,
                "paused": name in paused,
                "last_scale": None
                if last is None
                else {"at": last.at.isoformat(), "target": last.target, "outcome": last.outcome},
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
        "groups": groups,
        "decisions": [decision_view(d) for d in decisions[:20]],
        "incidents": incidents,
    }


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
        if deadline is None or done is not None:
            return None
        return round((deadline - now).total_seconds(), 1)

    human = (inc.acknowledged_by or "").startswith("human:")
    return {
        "id": inc.id,
        "group": inc.group_name,
        "instance_id": inc.instance_id,
        "state": inc.state,
        "cause": inc.cause,
        "detected_at": inc.detected_at.isoformat(),
        "respond_by": inc.respond_by.isoformat() if inc.respond_by else None,
        "isolate_by": inc.isolate_by.isoformat() if inc.isolate_by else None,
        "respond_by_s_left": left(inc.respond_by, inc.acknowledged_at),
        "isolate_by_s_left": left(inc.isolate_by, inc.isolated_at),
        "acknowledged_at": inc.acknowledged_at.isoformat() if inc.acknowledged_at else None,
        "acknowledged_by": inc.acknowledged_by,
        "human_acknowledged": human,
        "notified_at": inc.notified_at.isoformat() if inc.notified_at else None,
        "isolated_at": inc.isolated_at.isoformat() if inc.isolated_at else None,
        "closed_at": inc.closed_at.isoformat() if inc.closed_at else None,
    }


def build_service(
    config: Any,
    clients: CloudClients,
    database_url: str = "sqlite://",
    clock: Clock | None = None,
    dry_run: bool = False,
    notifier: Notifier | None = None,
    *,
    holder_id: str | None = None,
    settings: ServiceSettings | None = None,
    metrics: ServiceMetrics | None = None,
) -> Service:
    """A ready Service: store migrated, lease manager, observer, actuator, notifier started.

    ``config`` is a FleetConfig (anything with ``groups`` of GroupSpec, plus optional service fields);
    ``notifier`` defaults to one built from ``config.notifications`` (none configured: no notifications).
    """
    settings = settings or ServiceSettings.from_config(config)
    if dry_run and not settings.service_name.endswith(DRY_RUN_SUFFIX):
        # A shadow run keeps its own lease, history and decisions: sharing them with the real service would
        # let it take the lease from the acting replica and overwrite the history the real one resumes from.
        settings = replace(settings, service_name=settings.service_name + DRY_RUN_SUFFIX)
    store = open_store(database_url, service=settings.service_name)
    specs = list(_get(config, "groups", []) or [])
    holder = holder_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    service = Service(
        specs=specs,
        clients=clients,
        store=store,
        settings=settings,
        clock=clock or wall_clock,
        dry_run=dry_run,
        notifier=None,
        holder_id=holder,
        metrics=metrics or ServiceMetrics(),
    )
    if notifier is None:
        channels = [Channel.from_config(c) for c in (_get(config, "notifications", None) or [])]
        notifier = Notifier(channels, on_delivered=service._delivered)
    elif notifier.on_delivered is None:
        notifier.on_delivered = service._delivered
    service.notifier = notifier.start()
    return service


def run_forever(
    service: Service,
    interval_s: float,
    *,
    stop: threading.Event | None = None,
    install_signals: bool = True,
) -> None:
    """Tick every ``interval_s`` with an APScheduler interval job until SIGTERM/SIGINT (or ``stop``).

    A signal lets the running tick finish (the job is never interrupted), then the scheduler shuts down and
    the lease is released so another replica can take over at once.
    """
    from apscheduler.schedulers.background import BackgroundScheduler

    stop = stop or threading.Event()
    if install_signals:

        def _on_signal(signum: int, _frame: Any) -> None:
            log.info("signal %s: finishing the current tick, then exiting", signum)
            stop.set()

        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)

    def job() -> None:
        if stop.is_set():
            return
        result = service.tick(service.clock())
        log.info(
            "tick leader=%s actions=%d errors=%d %.3fs",
            result.leader,
            len(result.actions),
            len(result.errors),
            result.duration_s,
            extra={"leader": result.leader, "epoch": result.lease_epoch},
        )

    scheduler = BackgroundScheduler(timezone=UTC)
    scheduler.add_job(
        job,
        "interval",
        seconds=interval_s,
        next_run_time=datetime.now(UTC),
        max_instances=1,
        coalesce=True,
        misfire_grace_time=max(1, int(interval_s)),
        id="fleet-tick",
    )
    scheduler.start()
    try:
        while not stop.wait(0.2):
            pass
    finally:
        scheduler.shutdown(wait=True)  # waits for a running tick to finish
        service.close(release_lease=True)
