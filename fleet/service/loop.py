"""The control loop: each tick observes, decides, actuates and records, under the leader lease.

``Service.tick(now)`` is a plain function of the time it is given, so production (an APScheduler interval job,
``run_forever``) and simulation (a virtual clock) drive the same code. One tick:

1. take or renew the lease; a replica without it records nothing and touches nothing (standby);
2. load the policy history and the operator's controls and requests from the store (so a takeover or a
   restart resumes from exactly what the last leader persisted);
3. observe the cloud and build the ``policies.Snapshot`` (a group renamed in fleet.yaml, first seen, takes
   over its former name's demand, forecasts and capacity memory first: ``fleet.service.renames``);
4. ``policies.decide`` -> Plan, its targets clipped to the ESS group's own MinSize..MaxSize;
5. persist the new history (write-ahead), the incidents and their timeline, and mark handled requests;
6. mirror schedule floors as ESS scheduled tasks (at start and every ``schedule_sync_interval_s``);
7. actuate (each write fenced by the lease and carrying a derived ClientToken), auditing each write;
8. notify (SLA at risk or breached, breaker, scale writes that keep failing) and update the Prometheus
   metrics;
9. prune demand minutes and forecasts past their retention (at most once per ``prune_interval_s``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import Gauge
from sqlalchemy import Connection

from fleet.cloud.clients import CloudClients
from fleet.cloud.errors import CloudError
from fleet.cloud.retry import count_calls
from fleet.cloud.types import ScalingGroup
from fleet.service.actuate import (
    ActionResult,
    Actuator,
    clip_to_ess,
    fallback_history,
    with_fallback_count,
)
from fleet.service.capacity import CapacityManager
from fleet.service.capacity_store import view as capacity_view
from fleet.service.capacity_table import CapacityTable, learned_floors, served_context
from fleet.service.demand import DemandLog, DemandReading, prune, record_forecasts, retention_s, stored_groups
from fleet.service.demand import read_demand as read_group_demand
from fleet.service.drain import Drainer
from fleet.service.ess_reach import EssReach, Unreadable
from fleet.service.lease import Lease, LeaseKeeper
from fleet.service.metrics import RetriedErrorCounter, ServiceMetrics
from fleet.service.notify import Announcement, Channel, Notifier
from fleet.service.observe import (
    ClientsFor,
    GroupObservation,
    Observation,
    Observer,
    Scope,
    instance_from_json,
    instance_json,
    scope_of,
)
from fleet.service.pool import CallPools
from fleet.service.pseudo_incidents import record_once
from fleet.service.renames import Identity, adopt, record_identity
from fleet.service.schedules import LEARNED_REFRESH_S, TaskChange, sync_group
from fleet.service.settings import NowFn, ServiceSettings
from fleet.service.shards import ShardCoordinator, history_key, shard_of
from fleet.service.snapshot import build_snapshot, unplaced_requests
from fleet.service.store import (
    DecisionRecord,
    IncidentEvent,
    IncidentRecord,
    OperatorRequest,
    Outcome,
    Store,
    StoreFileGone,
)
from fleet.service.views import replica_health, service_status
from fleet.service.write_alerts import ScaleWriteAlerts
from policies import decide
from policies.launch_verdicts import load_time_s
from policies.model import (
    DemandInputs,
    ForecastState,
    GroupPlan,
    History,
    Incident,
    LifecycleState,
    Plan,
    PlanWarning,
    Reason,
    ReasonCode,
    Snapshot,
    WarningCode,
)
from policies.spec import GroupSpec, PolicySpec, Predictive

log = logging.getLogger("fleet.service")

# An operator request the policy has not applied within this time is closed as not applicable.
REQUEST_EXPIRY = timedelta(hours=1)
# One that waits for ESS to answer (its group unreadable) waits up to a day, as long as the last instance list
# read is watched (observe.BLIND_MAX_AGE_S): an isolation asked a day before is not applied out of the blue.
REQUEST_WAIT_MAX = timedelta(days=1)
QUOTA_NOTE_S = 3600.0  # a full scheduled-task quota is audited once an hour while it lasts


class RequestWithdrawn(Exception):
    """An operator request the plan applies was cancelled after the tick read it: the plan's transaction is
    rolled back and nothing is written (the next tick decides without it)."""

    def __init__(self, request_id: int) -> None:
        super().__init__(f"request {request_id} was cancelled")
        self.request_id = request_id


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
    fatal: str | None = None  # the service cannot go on (its database file is gone): run_forever stops
    observed_groups: list[str] = field(default_factory=list)
    api_calls: int = 0
    calls_by_action: dict[str, int] = field(default_factory=dict)
    shard_epochs: dict[int, int] = field(default_factory=dict)  # shard -> epoch, for the shards it led
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors


class Service:
    """One replica of the fleet service. Build with :func:`fleet.service.app.build_service`."""

    def __init__(
        self,
        *,
        specs: list[GroupSpec],
        clients: CloudClients,
        store: Store,
        settings: ServiceSettings,
        clock: NowFn,
        dry_run: bool,
        notifier: Notifier | None,
        holder_id: str,
        metrics: ServiceMetrics,
        clients_for: ClientsFor | None = None,
    ) -> None:
        self.specs = specs
        # Clients per (account, region) of the groups (fleet.yaml's region/account); default: one set.
        self.clients_for: ClientsFor = clients_for or (lambda _scope: clients)
        self.policy = PolicySpec(groups=tuple(specs))
        self.clients = clients
        self.store = store
        self.settings = settings
        self.clock = clock
        self.dry_run = dry_run
        self.notifier = notifier
        self.holder_id = holder_id
        self.metrics = metrics
        self.shards = ShardCoordinator(
            store.engine, settings.service_name, holder_id, settings.lease_ttl_s, settings.lease_shards
        )
        self.lease = self.shards.managers[0]  # with one shard: the service's single leader lease
        self.owned: dict[int, int] = {}  # shard -> epoch held at the last tick
        self.shard_ticks: dict[int, datetime] = {}  # shard -> when this replica last ticked it
        self.pools = CallPools(workers=settings.observe_workers, rate_limited=settings.call_rate_limit)
        self.observer = Observer(
            clients,
            specs,
            on_error=self._count_error,
            pools=self.pools,
            instances_refresh_s=settings.instances_refresh_s,
            clients_for=self.clients_for,
        )
        # the instance lists an earlier run read: watched for isolation while ESS cannot be read
        configured = {s.name for s in specs}
        for name, (read_at, body) in store.instance_lists().items():
            if name in configured:
                kept = [i for i in map(instance_from_json, body) if i is not None]
                self.observer.seed(name, read_at, kept)
        self._actuators: dict[Scope, Actuator] = {}
        self.actuator = self.actuator_for((None, None))
        # Capacity fallbacks and reclaims (issue 17), one manager per (account, region) writing through its
        # clients; drains (issue 21) likewise, built on first use like the actuators.
        scopes: dict[Scope, list[GroupSpec]] = {}
        for spec in specs:
            scopes.setdefault(scope_of(spec), []).append(spec)
        self.capacity_managers = {
            scope: CapacityManager(
                self.clients_for(scope).ess,
                store,
                scoped,
                service=settings.service_name,
                dry_run=dry_run,
                notify=self._notify,
            )
            for scope, scoped in scopes.items()
        }
        self._drainers: dict[Scope, Drainer] = {}
        # each group's ESS reach, kept for the commands: why an operator request waits
        self.ess_reach = EssReach(store)
        # a scale write that keeps failing pages the notification channels (fleet/service/write_alerts.py)
        self.write_alerts = ScaleWriteAlerts(
            store,
            self._notify,
            after_attempts=settings.scale_failure_notify_after_attempts,
            after_s=settings.scale_failure_notify_after_s,
            repeat_s=settings.scale_failure_renotify_s,
        )
        self._retried = RetriedErrorCounter(metrics)
        logging.getLogger("fleet.cloud").addHandler(self._retried)
        self.last_tick: TickResult | None = None
        self.last_observation: Observation | None = None
        self._last_schedule_sync: dict[int, datetime] = {}  # per shard: its last complete schedule sync
        self._quota_noted: dict[str, datetime] = {}  # per group: when a full task quota was last audited
        self._learned_refreshed: dict[str, datetime] = {}  # per group: the last sync that rewrote far floors
        # (group, task, writer) of the tasks under a group's prefix that another service wrote: warned once
        self._foreign_noted: set[tuple[str, str, str | None]] = set()
        # per (shard, group), until the shard's first complete sync: whether the store says its tasks were
        # ever written (read once, not at every tick a failing first sync is tried again)
        self._mirrored: dict[tuple[int, str], bool] = {}
        # the (shard lease, epoch) pairs whose interrupted writes were settled
        self._reconciled: set[tuple[str, int]] = set()
        # predictive scaling: the demand history (store-backed) and the capacity table (cached per mix)
        self.demand = DemandLog(store, {s.name: float(s.predictive.history_s) for s in specs})
        self.capacity_table = CapacityTable()
        self._capacity_rps: dict[str, float] = {}  # per group, the capacity per instance last looked up
        self._context: dict[str, int | None] = {}  # per group, the most tokens a request can hold
        self._mix_refused: dict[str, set[str]] = {}  # per group, instances whose token mix is left out
        self._last_prune: dict[int, datetime] = {}  # shard -> when this replica last pruned its groups
        self._identities: dict[str, Identity] = {}  # per group, the scaling group this replica recorded
        self._lock = threading.Lock()  # one tick at a time, whoever calls

    def actuator_for(self, scope: Scope) -> Actuator:
        """The actuator writing through the clients of one (account, region)."""
        if scope not in self._actuators:
            self._actuators[scope] = Actuator(
                self.clients_for(scope),
                self.store,
                service=self.settings.service_name,
                metrics=self.metrics,
                dry_run=self.dry_run,
                notify=self._notify,
                notify_scale_min_change=self.settings.notify_scale_min_change,
            )
        return self._actuators[scope]

    def drainer_for(self, scope: Scope) -> Drainer:
        """Completes drained instances' lifecycle actions through the clients of one (account, region)."""
        if scope not in self._drainers:
            self._drainers[scope] = Drainer(
                self.clients_for(scope),
                self.observer.sources,
                service=self.settings.service_name,
                record=self.actuator_for(scope).record,
                dry_run=self.dry_run,
            )
        return self._drainers[scope]

    # -- the tick -------------------------------------------------------------------------------------
    def tick(self, now: datetime) -> TickResult:
        """Observe -> decide -> actuate -> record, once, at ``now`` (aware)."""
        if now.tzinfo is None:
            raise ValueError("tick(now) needs a timezone-aware datetime")
        with self._lock:
            started = time.perf_counter()
            result = TickResult(at=now, leader=False)
            try:
                with count_calls() as counts:
                    try:
                        self._tick(now, result)
                    finally:
                        result.calls_by_action = dict(counts)
                        result.api_calls = sum(counts.values())
            except Exception as exc:  # a tick must never kill the loop; the next one starts clean
                log.exception("tick failed")
                result.errors.append(f"{type(exc).__name__}: {exc}")
            result.duration_s = time.perf_counter() - started
            self.metrics.tick_duration.observe(result.duration_s)
            outcome = "error" if result.errors else ("acted" if result.leader else "standby")
            self.metrics.ticks.labels(outcome=outcome).inc()
            self.metrics.leader.set(1 if result.leader else 0)
            self._export_tick(result)
            self.last_tick = result
            return result

    def _tick(self, now: datetime, result: TickResult) -> None:
        try:
            self.store.check_file()
        except StoreFileGone as exc:
            log.critical("%s: stopping", exc)
            result.fatal = str(exc)
            result.errors.append(str(exc))
            return
        tick_started = time.monotonic()

        def tick_now() -> datetime:
            # ``now`` may be virtual (simulation): advance it by the real time this tick has taken since it
            # started (not since the observation ended: a lease that ran out during a slow observe must fail).
            return now + timedelta(seconds=time.monotonic() - tick_started)

        held = self.shards.acquire(now)
        for spec in self.specs:
            # a shard taken (back) under a new epoch: another replica may have led it meanwhile, so its
            # groups' demand is read from the store again, not from this replica's memory of before
            k = shard_of(spec.name, self.shards.shards)
            if k in held and self.owned.get(k) != held[k].epoch:
                self.demand.forget(spec.name)
        self.owned = {k: lease.epoch for k, lease in held.items()}
        # a shard taken (again) is synced at once: another replica may have changed its tasks meanwhile
        self._last_schedule_sync = {k: t for k, t in self._last_schedule_sync.items() if k in held}
        self._mirrored = {k: v for k, v in self._mirrored.items() if k[0] in held}
        if not held:
            return
        result.leader = True
        result.lease_epoch = held[min(held)].epoch
        result.shard_epochs = dict(self.owned)
        with ExitStack() as stack:
            # Renewed in the background while the tick runs, so a tick longer than the TTL keeps its leases.
            renew_s = self.settings.lease_renew_interval_s
            keepers = {
                k: stack.enter_context(LeaseKeeper(self.shards.managers[k], lease, tick_now, renew_s))
                for k, lease in held.items()
            }
            names = [s.name for s in self.specs if shard_of(s.name, self.shards.shards) in held]
            paused = self.store.paused_groups()
            requests = self.store.pending_requests()
            observation = self.observer.observe(now, names)
            self.last_observation = observation
            result.observed_groups = [n for n, g in observation.groups.items() if g.ok]
            problems = [str(err) for err in observation.errors]
            for name, g in observation.groups.items():
                if not g.ok:
                    problems += [f"group {name}: {e}" for e in g.errors if e not in problems]
            result.errors.extend(problems)
            for k in sorted(held):
                if not keepers[k].renew_now():  # the observation may have been slow: renew, or stop here
                    result.errors.append(f"shard {k}: lease lost during the observation: nothing written")
                    continue
                specs = [s for s in self.specs if shard_of(s.name, self.shards.shards) == k]
                part = _part(observation, [s.name for s in specs], first=k == min(held))
                self._tick_shard(k, keepers[k], specs, part, now, paused, requests, result)
                self.shard_ticks[k] = now

    def _tick_shard(
        self,
        shard: int,
        keeper: LeaseKeeper,
        specs: list[GroupSpec],
        observation: Observation,
        now: datetime,
        paused: set[str],
        requests: list,
        result: TickResult,
    ) -> None:
        """Decide, persist and actuate one shard's groups, every write fenced by that shard's lease."""
        key = history_key(self.settings.service_name, shard, self.shards.shards)
        # before the history is read and the demand recorded (or pruned): a renamed group takes its rows over
        if self._follow_renames(keeper, specs, observation, now):
            paused = self.store.paused_groups()  # a pause moved to its group's new name holds it at once
        history = self._load_history(key)
        snapshot, unmatched = build_snapshot(self.store, specs, now, observation, paused, requests, history)
        self._add_demand(snapshot, observation, now, specs, history)
        self.ess_reach.update(observation, [s.name for s in specs], now)
        taken = {op.action_id for g in snapshot.groups for op in g.operator_actions}
        waiting = self._waiting(requests, taken, unmatched, observation, specs)
        orphaned: list[tuple[OperatorRequest, str]] = []
        if self.shards.shards > 1:
            # A request naming another shard's group is that shard's to apply or expire; those naming no
            # configured group are shard 0's to end.
            requests, orphaned = self._shard_requests(shard, requests, taken, observation, specs, now)
            unmatched = []
        plan = self._decide(snapshot, history, now, keeper.lease, result, specs)
        plan.groups = [clip_to_ess(gp, _ess_group(observation, gp.group)) for gp in plan.groups]
        _add_source_warnings(plan, observation)
        fence = keeper.held  # re-checked against the store immediately before each cloud write
        # written to by nobody this tick: paused by operators, or disabled in ESS (decided and shown only)
        held = {name for name, g in observation.groups.items() if _held(g, name, paused)}
        # Capacity that does not arrive (issue 17): fall back along the ladder now, and fold the count the
        # new rung needs into the plan, so that this tick's one capacity write carries it.
        self._fall_back(plan, observation, now, fence, held, result)
        result.plan = plan if result.plan is None else _merged(result.plan, plan)
        # Write-ahead: the new history (the intent, e.g. the new target) is persisted before any cloud write,
        # so a crash between the write and the end of the tick resumes from the intent, never from the state
        # before it (which would undo the write). Every write below is idempotent by its ClientToken.
        try:
            persisted = self._persist(plan, keeper, requests, unmatched, now, key, waiting, orphaned)
        except RequestWithdrawn as gone:
            result.errors.append(
                f"request {gone.request_id} was cancelled while this tick decided on it: nothing written; "
                "the next tick decides without it"
            )
            return
        if not persisted:
            result.errors.append("lease lost before the history was saved: nothing written")
            return
        if self._schedule_sync_due(shard, now):
            result.schedule_changes += self._sync_schedules(
                shard, now, observation, keeper.lease, fence, plan.history, specs
            )
        self._reconcile(observation, keeper.lease, result, specs)
        self._actuate(plan, observation, now, keeper.lease, fence, held, result)
        # Capacity this tick's write found sold out, and spot capacity reclaimed (issue 17): the fallback
        # and the reclaim's replacement in this same tick.
        targets = {gp.group: gp.target_capacity for gp in plan.groups}
        raised = {gp.group for gp in plan.groups if gp.desired_capacity is not None and gp.direction == "up"}
        for manager in self.capacity_managers.values():
            result.errors.extend(
                manager.fall_back(observation, targets, now, fence, held, written=raised).errors
            )
            result.errors.extend(manager.reclaims(observation, now, fence, held).errors)
        self._announce_disabled(history, plan)
        self._after(plan, observation, now, held)
        self._prune(shard, specs, now, fence)

    def _fall_back(
        self,
        plan: Plan,
        observation: Observation,
        now: datetime,
        fence: Callable[[], bool],
        held: set[str],
        result: TickResult,
    ) -> None:
        targets = {gp.group: gp.target_capacity for gp in plan.groups}
        counts: dict[str, tuple[int, str]] = {}
        for manager in self.capacity_managers.values():
            moved = manager.fall_back(observation, targets, now, fence, held)
            result.errors.extend(moved.errors)
            counts.update(moved.counts)
        folded = []
        for gp in plan.groups:
            if gp.group in counts:
                size, why = counts[gp.group]
                gh = plan.history.groups.get(gp.group)
                if gh is not None:
                    plan.history.groups[gp.group] = fallback_history(gh, gp, size, now)
                gp = with_fallback_count(gp, size, why, _ess_group(observation, gp.group))
            folded.append(gp)
        plan.groups = folded

    # -- snapshot -------------------------------------------------------------------------------------
    def _add_demand(
        self,
        snapshot: Snapshot,
        observation: Observation,
        now: datetime,
        specs: list[GroupSpec],
        history: History | None = None,
    ) -> None:
        """Record each predictive group's demand and give the policy its history and capacity table value."""
        for spec in specs:
            if spec.predictive.mode == "off":
                continue
            g = observation.groups.get(spec.name)
            gs = snapshot.group(spec.name)
            if g is None or gs is None or gs.blind:
                continue
            serving = LifecycleState.IN_SERVICE
            in_service = [i for i in g.instances if i.lifecycle_state == serving]
            stale_s = spec.stabilization.stale_after_s
            # still loading its weights, as the policy counts it: younger than a launch takes here
            gh = history.groups.get(spec.name) if history is not None else None
            load_s = load_time_s(gh.launches, spec.cold_start_s) if gh is not None else spec.cold_start_s
            loading = [
                i.instance_id
                for i in in_service
                if i.created_at is not None and 0 <= (now - i.created_at).total_seconds() < load_s + stale_s
            ]
            ids = [i.instance_id for i in in_service]
            if spec.name not in self._context:
                self._context[spec.name] = served_context(spec)
            context = self._context[spec.name]
            reading = read_group_demand(ids, g.metrics, now, stale_s, loading, context)
            self._note_refused_mix(spec.name, reading, context)
            if reading is not None:
                per_instance = self._capacity_rps.get(spec.name)  # the last tick's: no lookup of its own
                serves = None if per_instance is None else per_instance * len(ids)
                self.demand.record(spec.name, reading, serves)
            prompt, output = self.demand.mix(spec.name, now)
            fields = self.capacity_table.demand_fields(spec, prompt, output)
            cap = fields["capacity_rps"]
            if isinstance(cap, float | int) and cap > 0:
                self._capacity_rps[spec.name] = float(cap)
            gs.demand = DemandInputs.model_validate(
                {
                    "history": self.demand.series(spec.name, now),
                    "week_share": self.demand.week_share(
                        spec.name, now, spec.predictive.seasonal_zone, spec.calendar, spec.calendar_zone
                    ),
                    "recent_rps": self.demand.recent(spec.name, now),
                    **fields,
                }
            )

    def _follow_renames(
        self, keeper: LeaseKeeper, specs: list[GroupSpec], observation: Observation, now: datetime
    ) -> bool:
        """Record the scaling group each of the shard's groups is observed as, once per replica (and again
        should it change), and, for a group so seen for the first time, take over the rows of its former
        name (``fleet.service.renames``): one transaction, fenced by the shard's lease. A failure is logged
        and tried again at the next tick; it never fails the tick. True when an operator's pause (or
        resume) moved to a new name."""
        todo: dict[str, Identity] = {}
        for spec in specs:
            g = observation.groups.get(spec.name)
            if g is None or not g.ok or g.blind or g.group is None:
                continue
            account, region = scope_of(spec)
            identity = Identity(g.group.group_id, account or "", region or "")
            if self._identities.get(spec.name) != identity:
                todo[spec.name] = identity
        if not todo:
            return False
        configured = {s.name for s in self.specs}
        lease = keeper.lease
        service, shards = self.settings.service_name, self.shards.shards

        def key_of(name: str) -> str:
            return history_key(service, shard_of(name, shards), shards)

        try:
            with self.store.begin() as conn:
                if keeper.lost or not keeper.manager.still_held(lease, keeper.now(), conn):
                    return False
                adopted = []
                for name, identity in todo.items():
                    if name not in self._identities:  # seen first by this replica: at start or a reload
                        done = adopt(
                            self.store,
                            name,
                            identity,
                            configured,
                            conn,
                            history_key=key_of,
                            now=now,
                            epoch=lease.epoch,
                        )
                        if done is not None:
                            adopted.append(done)
                    record_identity(self.store, name, identity, now, conn)
        except Exception:
            log.warning("following the groups renamed in fleet.yaml failed", exc_info=True)
            return False
        self._identities.update(todo)
        for done in adopted:
            self.demand.forget(done.group)
            log.info(done.describe(), extra={"group": done.group})
        return any("group_controls" in done.rows for done in adopted)

    def _note_refused_mix(self, group: str, reading: DemandReading | None, context: int | None) -> None:
        """Warn once of each instance whose token mean is left out of the group's mix, until it is back."""
        refused = set(reading.refused_mix) if reading is not None else set()
        for iid in sorted(refused - self._mix_refused.get(group, set())):
            log.warning(
                "group %s: instance %s reports requests longer than the %d tokens one can hold: its token "
                "mix is left out of the capacity model",
                group,
                iid,
                context,
                extra={"group": group, "instance_id": iid},
            )
        self._mix_refused[group] = refused

    def _prune(self, shard: int, specs: list[GroupSpec], now: datetime, fence: Callable[[], bool]) -> None:
        """At most once per ``prune_interval_s`` per shard, after the tick's writes: delete the shard's
        groups' demand minutes and forecasts older than their retention (``predictive.history`` plus a
        day), in bounded batches. Those of groups no longer configured (renamed or removed in fleet.yaml),
        whose shard this is by their name, after the longest retention of any group (the default history's
        at the least); kept for good, a removed group's rows grew without end. A failure is logged and
        tried again at the next interval; it never fails the tick."""
        last = self._last_prune.get(shard)
        if last is not None and (now - last).total_seconds() < self.settings.prune_interval_s:
            return
        self._last_prune[shard] = now
        todo = [(spec.name, retention_s(float(spec.predictive.history_s))) for spec in specs]
        configured = {s.name for s in self.specs}
        longest = max(
            [retention_s(float(Predictive.model_fields["history_s"].default))]
            + [retention_s(float(s.predictive.history_s)) for s in self.specs]
        )
        try:
            gone = sorted(stored_groups(self.store) - configured)
        except Exception:
            log.warning("listing the groups of the demand history failed", exc_info=True)
            gone = []
        todo += [(name, longest) for name in gone if shard_of(name, self.shards.shards) == shard]
        for name, keep_s in todo:
            before = now - timedelta(seconds=keep_s)
            try:
                done = prune(self.store, name, before, fence)
            except Exception:
                log.warning("pruning the demand history of group %s failed", name, exc_info=True)
                continue
            if any(done.values()):
                log.info(
                    "group %s: pruned %d demand minutes and %d forecasts before %s",
                    name,
                    done["demand_samples"],
                    done["forecasts"],
                    before.isoformat(),
                )

    def _load_history(self, key: str | None = None) -> History | None:
        raw = self.store.load_history(key)
        return None if raw is None else History.model_validate(raw)

    # -- reconciling ----------------------------------------------------------------------------------
    def _reconcile(
        self, observation: Observation, lease: Lease, result: TickResult, specs: list[GroupSpec]
    ) -> None:
        """Once per leadership of a shard (a restart or a takeover): settle writes a crash left ``intended``.

        Before this tick's writes, so that a write which landed is counted (its ClientToken sequence moves
        on) and one which did not is retried with the same token. Each group's activities are read through
        the clients of its own (account, region).
        """
        if self.dry_run or (lease.name, lease.epoch) in self._reconciled:
            return
        by_scope: dict[Scope, dict[str, str]] = {}
        states: dict[str, str] = {}  # every instance of the observed groups: isolation steps settle on it
        for spec in specs:
            g = observation.groups.get(spec.name)
            if g is not None and g.ok and g.group is not None:
                by_scope.setdefault(scope_of(spec), {})[spec.name] = g.group.group_id
                states.update({i.instance_id: i.lifecycle_state for i in g.instances})
        try:
            for scope, ids in by_scope.items():
                result.actions.extend(self.actuator_for(scope).reconcile(ids, states))
        except CloudError as exc:
            self._count_error(exc)
            log.warning("reconciling interrupted writes failed: %s; tried again next tick", exc)
            return
        if sum(len(ids) for ids in by_scope.values()) == len(specs):
            self._reconciled.add((lease.name, lease.epoch))

    # -- deciding -------------------------------------------------------------------------------------
    def _decide(
        self,
        snapshot: Snapshot,
        history: History | None,
        now: datetime,
        lease: Lease,
        result: TickResult,
        specs: Sequence[GroupSpec] | None = None,
    ) -> Plan:
        """``policies.decide`` group by group: the blast radius of a failure is one group.

        An exception while deciding a group is logged and recorded as that group's failed decision; the group
        holds (its history is kept as it was, nothing is written for it) and every other group is decided
        and actuated as usual.
        """
        old = history or History()
        # model_copy keeps any history field beyond ``groups`` as it was
        merged = old.model_copy(update={"updated_at": now, "groups": dict(old.groups)})
        plan = Plan(at=now, history=merged)
        observed = {g.name: g for g in snapshot.groups}  # one lookup per group, not a scan
        # groups the config no longer names (renamed in fleet.yaml): each decision sees them, so that a group
        # now holding one of their open incidents' instances takes the incident over (policies.decide)
        configured = {s.name for s in self.specs}
        orphans = [name for name in old.groups if name not in configured]
        for spec in self.specs if specs is None else specs:  # a shard's groups, or all
            one = PolicySpec(groups=(spec,))
            own = {name: merged.groups[name] for name in orphans}
            if spec.name in old.groups:
                own[spec.name] = old.groups[spec.name]
            mine = old.model_copy(update={"groups": own})
            seen = [observed[spec.name]] if spec.name in observed else []
            part: Plan | None
            try:
                part = decide(Snapshot(taken_at=snapshot.taken_at, groups=seen), one, mine, now)
            except Exception as exc:
                part = self._decision_failed(spec.name, one, mine, now, exc, lease, result)
            else:
                merged.groups[spec.name] = part.history.groups[spec.name]
                merged.groups.update({name: part.history.groups[name] for name in orphans})
            if part is None:
                continue
            plan.groups.extend(part.groups)
            plan.warnings.extend(part.warnings)
        return plan

    def _decision_failed(
        self,
        group: str,
        one: PolicySpec,
        mine: History,
        now: datetime,
        exc: Exception,
        lease: Lease,
        result: TickResult,
    ) -> Plan | None:
        """Log and record a group's failed decision; the hold plan of an unobserved group stands in."""
        log.exception("deciding group %s failed: the group holds this tick", group)
        self._record_failure(group, "decide", now, exc, lease, result)
        try:
            held = decide(Snapshot(taken_at=now, groups=[]), one, mine, now)
        except Exception:  # even its bounds cannot be computed: nothing is planned for it
            log.exception("group %s: no hold plan either", group)
            return None
        detail = f"the decision failed ({type(exc).__name__}: {exc}): nothing changes"
        reasons = [Reason(code=ReasonCode.DECISION_FAILED, detail=detail)]
        update = {"reason": ReasonCode.DECISION_FAILED, "reasons": reasons}
        held.groups = [gp.model_copy(update=update) for gp in held.groups]
        return held

    def _record_failure(
        self, group: str, stage: str, now: datetime, exc: Exception, lease: Lease, result: TickResult
    ) -> None:
        """A failed decision or actuation of one group, in the tick's errors and the audit."""
        error = f"{type(exc).__name__}: {exc}"
        result.errors.append(f"group {group}: {stage} failed: {error}")
        try:
            self.store.record_decision(
                DecisionRecord(
                    service=self.settings.service_name,
                    at=now,
                    group_name=group,
                    kind=stage,
                    action=stage,
                    decision_id=f"{group}:{stage}:{now.isoformat()}",
                    outcome=Outcome.FAILED,
                    reason=f"{stage} of the group failed; the other groups went on",
                    error=error[:2000],
                    dry_run=self.dry_run,
                    lease_epoch=lease.epoch,
                )
            )
        except Exception:  # the store failing too must not stop the other groups either
            log.exception("could not record the failed %s of group %s", stage, group)

    def _announce_disabled(self, before: History | None, plan: Plan) -> None:
        """A log line and a notification when a group is found disabled in ESS (someone ran
        DisableScalingGroup: the service then writes nothing to it) and when it is Active again: its ESS
        state in the history the tick decided from against the one it decided (a group not decided this
        tick keeps its state, and a restart reads the last one from the store)."""
        for name, gh in plan.history.groups.items():
            old = before.groups.get(name) if before is not None else None
            state, was = gh.ess_state, old.ess_state if old is not None else None
            if state == was:
                continue
            if state is None:
                title, text, severity = f"{name}: scaling group Active again", "scaling writes resume", "info"
            else:
                title = f"{name}: scaling group {state} in ESS"
                text = (
                    f"ESS refuses every scaling write on a group that is not Active: the service observes "
                    f"and decides but writes nothing to {name} until it is enabled (EnableScalingGroup)"
                )
                severity = "warning"
            log.warning("%s: %s", title, text, extra={"group": name})
            self._notify(Announcement(kind="group", title=title, text=text, severity=severity, group=name))

    # -- actuation ------------------------------------------------------------------------------------
    def _actuate(
        self,
        plan: Plan,
        observation: Observation,
        now: datetime,
        lease: Lease,
        fence: Callable[[], bool],
        held: set[str],
        result: TickResult,
    ) -> None:
        for gp in plan.groups:
            observed = observation.groups.get(gp.group)
            if observed is None or not (observed.ok or observed.blind) or gp.group in held:
                continue  # unread, or paused (operators, ESS): decided and shown, not written
            try:
                actions = self._actuate_group(gp, plan, observed, now, lease, fence)
            except Exception as exc:  # one group's failure must not keep the others from their writes
                log.exception("actuating group %s failed: the other groups go on", gp.group)
                self._record_failure(gp.group, "actuate", now, exc, lease, result)
                continue
            result.actions.extend(actions)
            self.write_alerts.observe(gp.group, actions, now)
            if any(a.outcome == Outcome.FENCED for a in actions):
                result.errors.append("lease lost before a write")
                return
            for a in actions:
                if a.outcome in (Outcome.ERROR, Outcome.FAILED) and a.error:
                    result.errors.append(a.error)

    def _actuate_group(
        self,
        gp: GroupPlan,
        plan: Plan,
        observed: GroupObservation,
        now: datetime,
        lease: Lease,
        fence: Callable[[], bool],
    ) -> list[ActionResult]:
        """One group's isolation steps, then its scale write, then its drains (none after a fenced write)."""
        spec = self.policy.group(gp.group)
        if spec is None:
            return []
        gh = plan.history.groups.get(gp.group)
        breaker = gh.breaker if gh is not None else None
        has_channel = self.notifier is not None and self.notifier.has_channels
        actuator = self.actuator_for(scope_of(spec))  # the clients of the group's (account, region)
        actions = actuator.steps(gp, spec, observed, breaker, now, lease.epoch, fence, has_channel)
        if observed.blind or any(a.outcome == Outcome.FENCED for a in actions):
            return actions  # blind (ESS unreadable): the plan's notifications, and no write
        res = actuator.scale(gp, observed, now, lease.epoch, fence)
        if res is not None:
            actions = [*actions, res]
            if res.outcome == Outcome.FENCED:
                return actions
        # scale-in: complete the lifecycle action of instances that have drained (fleet/service/drain.py)
        drainer = self.drainer_for(scope_of(spec))
        actions = [*actions, *drainer.complete(spec, observed, now, lease.epoch, fence)]
        if any(a.outcome == Outcome.APPLIED for a in actions):
            self.observer.invalidate(gp.group)  # written to: read its instances afresh next tick
        return actions

    def _export_tick(self, result: TickResult) -> None:
        """Calls per Action and shard ownership of the tick just run (``/metrics``)."""
        self.metrics.calls_per_tick.clear()
        for action, n in result.calls_by_action.items():
            self.metrics.calls_per_tick.labels(action=action).set(n)
        for k in range(self.shards.shards):
            self.metrics.shard_owned.labels(shard=str(k)).set(1 if k in self.owned else 0)
        self.metrics.shard_epoch.clear()
        for k, epoch in self.owned.items():
            self.metrics.shard_epoch.labels(shard=str(k)).set(epoch)

    def _schedule_sync_due(self, shard: int, now: datetime) -> bool:
        last = self._last_schedule_sync.get(shard)
        return last is None or (now - last).total_seconds() >= self.settings.schedule_sync_interval_s

    def _sync_schedules(
        self,
        shard: int,
        now: datetime,
        observation: Observation,
        lease: Lease,
        fence: Callable[[], bool],
        history: History,
        specs: list[GroupSpec],
    ) -> list[TaskChange]:
        """Mirror the shard's groups' schedules and learned floors to their ESS scheduled tasks. ``history``
        is the shard's, as this tick's plan left it: its forecast record sets the learned floors' band."""
        changes: list[TaskChange] = []
        complete = True
        for spec in specs:
            g = observation.groups.get(spec.name)
            learned = None
            if spec.predictive.mirrors_learned_floors:
                gh = history.groups.get(spec.name)
                state = gh.forecast if gh is not None else ForecastState()
                learned = learned_floors(spec, self.demand, self.capacity_table, state, now)
            # with no schedule, no learned floor this time (or none at all) there is nothing to write, unless
            # an older config's tasks are left from before the start
            mirrors = spec.schedules or learned is not None or self._mirrored_before(shard, spec.name)
            if g is None or not g.ok or g.group is None or not mirrors:
                complete = complete and (g is not None and g.ok)
                continue
            if not self.dry_run and not fence():
                return changes
            last = self._learned_refreshed.get(spec.name)
            refresh_far = last is None or (now - last).total_seconds() >= LEARNED_REFRESH_S
            try:
                group_changes = sync_group(
                    self.clients_for(scope_of(spec)).ess,
                    spec,
                    g.group.group_id,
                    now,
                    dry_run=self.dry_run,
                    learned=learned,
                    refresh_far=refresh_far,
                    service=self.settings.service_name,
                )
            except CloudError as exc:
                self._count_error(exc)
                log.warning("schedule sync of %s failed: %s", spec.name, exc)
                complete = False
                continue
            for ch in self._without_foreign(group_changes):
                if ch.quota_full:
                    # not transient: tried again at the next sync, and audited (and logged) once an hour
                    noted = self._quota_noted.get(spec.name)
                    if noted is not None and (now - noted).total_seconds() < QUOTA_NOTE_S:
                        continue
                    self._quota_noted[spec.name] = now
                    log.warning("schedule sync of %s: %s", spec.name, ch.detail)
                elif ch.op == "error":
                    complete = False
                outcome = (
                    Outcome.DRY_RUN
                    if self.dry_run and ch.op != "skip"
                    else (Outcome.ERROR if ch.op == "error" else Outcome.APPLIED)
                )
                if ch.op == "skip":
                    outcome = Outcome.SKIPPED
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
            if not any(ch.quota_full for ch in group_changes):
                self._quota_noted.pop(spec.name, None)
            changes.extend(group_changes)
            if group_changes:
                self._mirrored[(shard, spec.name)] = True
            if refresh_far and learned is not None:
                self._learned_refreshed[spec.name] = now
        if complete:
            self._last_schedule_sync[shard] = now
        return changes

    def _without_foreign(self, changes: list[TaskChange]) -> list[TaskChange]:
        """The changes less the tasks under a group's prefix that another service wrote (left alone, never
        audited): each is logged once."""
        for ch in changes:
            key = (ch.group, ch.name, ch.writer)
            if ch.op != "foreign" or key in self._foreign_noted:
                continue
            self._foreign_noted.add(key)
            log.warning(
                "schedule sync of %s: scheduled task %s %s (another service mirrors a group of this name on "
                "the same scaling group?)",
                ch.group,
                ch.name,
                ch.detail,
            )
        return [ch for ch in changes if ch.op != "foreign"]

    def _mirrored_before(self, shard: int, group: str) -> bool:
        """At the shard's first sync only: whether this service ever wrote the group's scheduled tasks (its
        store says so), so that a group whose config no longer mirrors anything is synced once and an older
        config's ``fleet-<group>-`` tasks are deleted. Groups that never had any cost no cloud read, and the
        store is read once per group while the shard's first sync has not completed."""
        key = (shard, group)
        if shard in self._last_schedule_sync:
            self._mirrored.pop(key, None)
            return False
        if key not in self._mirrored:
            self._mirrored[key] = bool(self.store.decisions(group=group, kind="schedule", limit=1))
        return self._mirrored[key]

    # -- recording ------------------------------------------------------------------------------------
    def _waiting(
        self,
        requests: list[OperatorRequest],
        taken: set[str],
        unmatched: list[OperatorRequest],
        observation: Observation,
        specs: list[GroupSpec],
    ) -> dict[int, list[Unreadable]]:
        """Why each request the policy was not given this tick waits: its group (or, for an instance in
        no group read, any of the shard's groups) could not be read from ESS."""
        down = [o for s in specs if (o := self.ess_reach.outage(s.name)) is not None]
        if not down:
            return {}
        where = {i.instance_id: n for n, g in observation.groups.items() for i in g.instances}
        refused = {r.id for r in unmatched}
        out: dict[int, list[Unreadable]] = {}
        for req in requests:
            if f"req-{req.id}" in taken or req.id in refused:
                continue
            group = req.group_name or where.get(req.instance_id or "")
            mine = [o for o in down if o.group == group] or down
            out[req.id] = mine
        return out

    def _persist(
        self,
        plan: Plan,
        keeper: LeaseKeeper,
        requests: list[OperatorRequest],
        unmatched: list[OperatorRequest],
        now: datetime,
        key: str,
        waiting: dict[int, list[Unreadable]] | None = None,
        orphaned: Sequence[tuple[OperatorRequest, str]] = (),
    ) -> bool:
        """Save the plan's history, incidents and handled requests in one transaction, fenced by the lease."""
        lease = keeper.lease
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
            if keeper.lost or not keeper.manager.still_held(lease, keeper.now(), conn):
                return False
            self.store.save_history(history, now, lease.epoch, conn, key=key)
            for name, instances in self.observer.read_at(now, [gp.group for gp in plan.groups]).items():
                self.store.save_instance_list(name, now, [instance_json(i) for i in instances], conn)
            record_forecasts(self.store, plan.history.groups, now, conn)
            for gname, inc in incidents.values():
                new = self.store.upsert_incident(
                    _incident_record(self.settings.service_name, gname, inc, now), conn
                )
                if new:
                    self.store.add_incident_event(
                        IncidentEvent(inc.incident_id, inc.detected_at, "detected", inc.rule), conn
                    )
            self._settle_requests(requests, unmatched, applied_ops, waiting or {}, now, conn)
            for req, why in orphaned:
                self.store.mark_request(req.id, why, now, conn)
        return True

    def _shard_requests(
        self,
        shard: int,
        requests: list[OperatorRequest],
        taken: set[str],
        observation: Observation,
        specs: list[GroupSpec],
        now: datetime,
    ) -> tuple[list[OperatorRequest], list[tuple[OperatorRequest, str]]]:
        """With several shards, the requests this shard settles: those its policy took and those naming one
        of its groups (expired as with one replica); and, for shard 0 only, those older than REQUEST_EXPIRY
        that name nothing in any configured group as the store last saw them, each with why it ends.

        No shard can refuse such a request at once as one replica does (the instance may be in another
        shard's group, read by another replica): it waits REQUEST_EXPIRY, as long as one the policy never
        takes up, and shard 0's leader (one replica at a time) ends it."""
        names = {s.name for s in specs}
        where = {i.instance_id: n for n, g in observation.groups.items() if n in names for i in g.instances}
        mine: list[OperatorRequest] = []
        rest: list[OperatorRequest] = []
        for req in requests:
            group = req.group_name or where.get(req.instance_id or "")
            (mine if f"req-{req.id}" in taken or group in names else rest).append(req)
        # one noted as waiting for ESS is its shard's, waiting up to REQUEST_WAIT_MAX
        old = [r for r in rest if now - r.created_at > REQUEST_EXPIRY and r.outcome is None]
        if shard != 0 or not old:
            return mine, []
        return mine, unplaced_requests(self.store, old, {s.name for s in self.specs}, REQUEST_EXPIRY)

    def _settle_requests(
        self,
        requests: list[OperatorRequest],
        unmatched: list[OperatorRequest],
        applied_ops: set[str],
        waits: dict[int, list[Unreadable]],
        now: datetime,
        conn: Connection,
    ) -> None:
        """Mark the requests the policy applied, expired or refused; note why the others wait."""
        for req in requests:
            if f"req-{req.id}" in applied_ops:
                if not self.store.mark_request(req.id, "applied", now, conn):
                    raise RequestWithdrawn(req.id)  # cancelled since it was read: this plan is void
            elif req.id in waits and now - req.created_at <= REQUEST_WAIT_MAX:
                # ESS cannot be read for its group: it waits, and says why
                note = "; ".join(o.why() for o in waits[req.id])[:2000]
                if req.outcome != note:
                    self.store.note_request(req.id, note, conn)
            elif req.id in waits:
                groups = ", ".join(o.group for o in waits[req.id])
                why = (
                    f"expired: ESS could not be read for group {groups} for a day: ask again once it answers"
                )
                self.store.mark_request(req.id, why, now, conn)
            elif now - req.created_at > REQUEST_EXPIRY:
                # The policy never took it up (e.g. a release for an instance with no incident).
                self.store.mark_request(req.id, "expired: not applicable", now, conn)
            elif req.outcome is not None:
                self.store.note_request(req.id, None, conn)  # ESS answers again: no longer waiting
        for req in unmatched:
            if req.group_name is not None:
                why = f"refused: group {req.group_name} is not configured"
            else:
                why = f"refused: {req.instance_id or req.incident_id} is not in any configured group"
            self.store.mark_request(req.id, why, now, conn)

    def _after(self, plan: Plan, observation: Observation, now: datetime, held: set[str]) -> None:
        """Notifications for SLA risk and breaches (once each), and the Prometheus gauges (``held``: the
        groups nothing is written to this tick)."""
        for w in plan.warnings + [w for gp in plan.groups for w in gp.warnings]:
            kind = {
                WarningCode.SLA_RESPOND_AT_RISK: "sla_risk",
                WarningCode.SLA_ISOLATE_AT_RISK: "sla_risk",
                WarningCode.SLA_RESPOND_BREACHED: "sla_breach",
                WarningCode.SLA_ISOLATE_BREACHED: "sla_breach",
                WarningCode.BREAKER_OPEN: "breaker",
                WarningCode.LAUNCHES_FAILING: "launch",
            }.get(w.code)
            if kind is None:
                continue
            # once per incident, or per group (and instance: a run of failed launches is named by its first)
            key = w.incident_id or f"group:{w.group}" + (f":{w.instance_id}" if w.instance_id else "")
            if not record_once(self.store, key, w.code.value, now, w.detail):
                continue
            if kind == "sla_breach":
                self.metrics.sla_breaches.labels(
                    kind="respond" if "respond" in w.code.value else "isolate"
                ).inc()
            self._notify(
                Announcement(
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
        self._predictive_gauges(plan)
        for name, g in observation.groups.items():
            self.metrics.paused.labels(group=name).set(1 if name in held else 0)
            for metric, age in g.staleness_s.items():
                if age is not None:
                    self.metrics.metric_staleness.labels(group=name, metric=metric).set(age)
            if g.group is not None:
                self.metrics.desired.labels(group=name).set(
                    g.group.desired_capacity or g.group.total_capacity
                )
                self.metrics.in_service.labels(group=name).set(g.count(LifecycleState.IN_SERVICE))

    def _predictive_gauges(self, plan: Plan) -> None:
        """Each predictive input of the plan on ``/metrics``; one that is unknown this tick (the demand
        unknown, no forecast yet, predictive scaling turned off) is removed, not left at its last value:
        a dashboard or an alert read an hour-old demand and target as the current ones."""
        for gp in plan.groups:
            inputs = gp.predictive or {}
            for key in PREDICTIVE_GAUGE_FIELDS:
                _set_or_remove(self.metrics.predictive, inputs.get(key), group=gp.group, field=key)
            _set_or_remove(self.metrics.forecast_mape, inputs.get("forecast_mape_pct"), group=gp.group)
            _set_or_remove(self.metrics.forecast_coverage, inputs.get("forecast_coverage"), group=gp.group)

    def _notify(self, note: Announcement) -> None:
        if self.notifier is not None and self.notifier.has_channels:
            self.notifier.send(note)

    def _count_error(self, exc: CloudError) -> None:
        self.metrics.cloud_errors.labels(code=exc.code or "unknown").inc()

    def _delivered(self, note: Announcement, channel: Channel) -> None:
        if note.kind == "incident" and note.incident_id:
            self.store.mark_notified(note.incident_id, channel.label, self.clock())

    # -- views ----------------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        last = self.last_tick
        at = last.at if last else None
        return replica_health(self.holder_id, at, bool(last and last.leader), self.dry_run)

    def status(self) -> dict[str, Any]:
        """The view behind GET /status and `fleet status`."""
        plan = self.last_tick.plan if self.last_tick else None
        names = [s.name for s in self.specs]
        view = service_status(self.store, self.clock(), names, self.health(), self.last_observation, plan)
        view["capacity"] = capacity_view(self.store)
        return view

    def close(self, release_lease: bool = True) -> None:
        if release_lease:
            try:
                self.shards.release(self.clock())
            except Exception:  # the database may be gone at shutdown; the lease then simply expires
                log.warning("could not release the lease at shutdown")
        if self.notifier is not None:
            self.notifier.stop(timeout_s=5)
        logging.getLogger("fleet.cloud").removeHandler(self._retried)
        self.pools.close()
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


def _held(observed: GroupObservation, name: str, paused: set[str]) -> bool:
    """Whether nothing is written to the group this tick: paused by operators, or disabled in ESS (which
    refuses every scaling write on a group that is not Active)."""
    return name in paused or (observed.group is not None and observed.group.disabled is not None)


def _ess_group(observation: Observation, name: str) -> ScalingGroup | None:
    """The ESS group as observed this tick (None when it was not read)."""
    g = observation.groups.get(name)
    return g.group if g is not None and g.ok else None


PREDICTIVE_GAUGE_FIELDS = (
    "demand_rps",
    "forecast_rps",
    "forecast_upper_rps",
    "forecast_lower_rps",
    "capacity_per_instance_rps",
    "capacity_correction",
    "capacity_speed",
    "predictive_target",
    "burstiness",
)


def _set_or_remove(gauge: Gauge, value: object, **labels: str) -> None:
    """The gauge's series at ``value``, or gone when it is not a number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        gauge.labels(**labels).set(value)
        return
    with suppress(KeyError):  # never exported
        gauge.remove(*labels.values())


def _add_source_warnings(plan: Plan, observation: Observation) -> None:
    """What a metric source warned of while answering (Prometheus' ``warnings``), with each group's plan
    warnings: where /status shows an operator its stale and missing metrics."""
    for gp in plan.groups:
        g = observation.groups.get(gp.group)
        if g is None:
            continue
        for canonical, text in dict.fromkeys(g.source_warnings):
            gp.warnings.append(
                PlanWarning(
                    code=WarningCode.METRIC_SOURCE_WARNING, group=gp.group, metric=canonical, detail=text
                )
            )


def _part(observation: Observation, names: Sequence[str], *, first: bool) -> Observation:
    """The part of a tick's observation that concerns one shard's groups (its errors go with the first)."""
    return Observation(
        at=observation.at,
        groups={n: observation.groups[n] for n in names if n in observation.groups},
        errors=list(observation.errors) if first else [],
        api_calls=observation.api_calls if first else 0,
    )


def _merged(a: Plan, b: Plan) -> Plan:
    """Two shards' plans as one, for the tick's result and the status view (histories stay per shard)."""
    groups = {**a.history.groups, **b.history.groups}
    return a.model_copy(
        update={
            "groups": [*a.groups, *b.groups],
            "warnings": [*a.warnings, *b.warnings],
            "history": a.history.model_copy(update={"groups": groups}),
        }
    )
