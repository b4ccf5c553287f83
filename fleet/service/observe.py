"""Observe: read what the cloud says about the groups and turn it into the policy engine's vocabulary.

API calls per tick grow with metrics and regions, not with groups or instances:

- groups: one DescribeScalingGroups per 20 configured ids (or, for more than 20, the region's whole list in
  pages of 50, filtered here);
- instances: one DescribeScalingInstances per group, skipped while the group's capacity counts (from
  DescribeScalingGroups) are unchanged and its copy is younger than ``instances_refresh_s`` (0: every tick);
  activities in progress only for groups whose counts say something is in flight (or that have no desired
  capacity, which hides it);
- metrics: per metric and (account, region) one DescribeMetricLast over the instances of *all* groups that
  need it (the adapter packs 50 instances per call, or scans the namespace for large fleets), split by group;
- ECS health and active system events: 100 instances per DescribeInstancesFullStatus, or for large fleets
  the region's Impaired instances and those with an event (two filtered reads).

Calls that remain run concurrently through a bounded, rate-limited pool per product (``fleet.service.pool``).
Each group reads its metrics from its ``metrics_source`` (``fleet.service.sources``: CloudMonitor by
default, or Prometheus), always under the canonical names of ``policies.metrics``; the service never reads a
metric no rule needs. A failed read leaves that metric (or group) out: unknown, never zero, so the policies
can refuse to scale in on it. Staleness is tracked per group and metric as the age of the newest sample.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from fleet.cloud.clients import CloudClients
from fleet.cloud.ecs import MAX_IDS_PER_CALL
from fleet.cloud.errors import CloudError
from fleet.cloud.ess import MAX_GROUP_FILTER
from fleet.cloud.retry import count_calls
from fleet.cloud.types import (
    InstanceHealth,
    MetricPoint,
    ScalingActivity,
    ScalingGroup,
    ScalingInstance,
)
from fleet.cloud.types import SystemEvent as CloudSystemEvent
from fleet.service.logs import HeldBack
from fleet.service.pool import CallPools
from fleet.service.sanitize import FUTURE_TOLERANCE_S, SampleGuard
from fleet.service.sources import MetricSource, source_for
from policies import metrics as pm
from policies.model import LifecycleState, MetricSample, SystemEvent, XidEvent
from policies.spec import GroupSpec

log = logging.getLogger(__name__)

# Instances in these states have no workload to measure.
_UNMEASURED_STATES = frozenset(
    {LifecycleState.STOPPED, LifecycleState.REMOVING, LifecycleState.REMOVING_WAIT}
)
# ECS health codes that mean the instance cannot be trusted to serve (DescribeInstancesFullStatus).
_ECS_UNHEALTHY = frozenset({"Impaired"})
# Above this many instances ECS is read region-wide for its exceptions (two filtered reads) rather than in
# calls of 100 ids.
ECS_SCAN_MIN_IDS = 2 * MAX_IDS_PER_CALL
# How old the last instance list of a group may be for it to be watched while ESS cannot be read (its API
# down, throttled): its instances change only through ESS, and any that left meanwhile stop reporting, which
# a blind tick never reads as a fault, so an old list costs nothing but the instances ESS added, unseen either
# way. A day: at 4 h (the default isolate_within) a GPU that overheated 4.5 h into a 6-hour outage went
# unseen for the last 1.5 h; beyond a day the list is no longer taken for the group's.
BLIND_MAX_AGE_S = 24 * 3600.0


# Read at most every SLOW_REFRESH_S: the mean prompt and output tokens per request are themselves minute means
# (the node agent's), looked up rate-weighted over the last half hour in a capacity table that buckets them
# 15 % apart; so are the KV-cache use and the running and waiting requests where only the online correction
# reads them (its slack check and Little's law, both smoothed over minutes), not a rule or a drain. Every
# other metric is read every tick.
SLOW_METRICS = frozenset({pm.PROMPT_TOKENS_PER_REQUEST, pm.OUTPUT_TOKENS_PER_REQUEST})
CORRECTION_METRICS = frozenset({pm.KV_CACHE_USAGE_PCT, pm.REQUESTS_RUNNING, pm.QUEUE_WAITING})
SLOW_REFRESH_S = 60.0
# Read at most every SLOW_REFRESH_S by every group, predictive or not: row remapping is a GPU's memory wearing
# out, which a rule answers with a reboot or a replacement well within the 15-minute respond window either
# way, and every group on the default rules read it once more each tick (CloudMonitor's monthly call budget).
SLOW_ISOLATION_METRICS = frozenset({pm.GPU_ROW_REMAP})
# A slow read's points must not go stale before the next read: a point is up to one agent period (15 s) old
# when read, and the tick that reads again past the refresh comes up to one 15 s tick after it.
SLOW_READ_SLACK_S = 30.0
# The demand's request rate is the rate over one agent period (15 s). A service ticking less often than that
# reads every point since the last one it used (DescribeMetricList), so each tick's reading, and so each
# minute of the demand history, is the rate over the whole time since the last tick, not over one period.
SPANNED_METRICS = frozenset({pm.REQUEST_RATE})
SPAN_AFTER_S = 20.0  # a tick gap above this (a period and a third) reads the span
SPAN_MAX_S = 600.0  # never further back than this (a longer tick: the rate over its last 10 minutes)


# A read that keeps failing (a CloudMonitor outage: every metric, every tick) is logged when it starts to
# fail, then at most once per FAILURE_LOG_EVERY_S with the count of the failures in between; after a quiet
# spell of FAILURE_LOG_EVERY_S it is a new failure. A one-hour CloudMonitor outage logged 2,634 lines before.
FAILURE_LOG_EVERY_S = 300.0


class FailureLog:
    """Logs the failures of each read (``where``): the first one, then a line every ``every_s`` while it goes
    on failing, with how many failures it held back (``HeldBack``). Every failure still reaches the tick's
    errors; the adapters' retry lines are thinned on the way out (``RepeatedRetries``)."""

    def __init__(self, every_s: float = FAILURE_LOG_EVERY_S) -> None:
        self.held = HeldBack(every_s)

    def failed(self, where: str, exc: CloudError, now: datetime) -> None:
        verdict = self.held.seen(where, now.timestamp())
        if not verdict.write:
            log.debug("observe %s failed again: %s", where, exc)
        elif verdict.new:
            log.warning("observe %s failed: %s", where, exc)
        else:
            since = datetime.fromtimestamp(verdict.since, UTC).isoformat()
            log.warning(
                "observe %s still failing (%d failures since %s not logged): %s",
                where,
                verdict.held,
                since,
                exc,
            )

    def warned(self, where: str, warning: str, now: datetime) -> None:
        """A source's warning on a read it answered: logged when it starts, then as ``failed`` thins (it is
        shown in /status with the group's warnings every tick it goes on)."""
        verdict = self.held.seen((where, warning), now.timestamp())
        if verdict.write:
            held = f" ({verdict.held} more since the last line)" if verdict.held else ""
            log.warning("observe %s: the source warned: %s%s", where, warning, held)

    def crashed(self, where: str, exc: Exception, now: datetime) -> None:
        """A read that raised what no source should (a bug): one line at error, thinned as ``failed``
        thins, and the traceback at debug every time."""
        log.debug("observe %s raised", where, exc_info=exc)
        verdict = self.held.seen(where, now.timestamp())
        if verdict.write:
            held = f" ({verdict.held} more since the last line)" if verdict.held else ""
            log.error(
                "observe %s raised %s: %s%s; the metric is unknown, the tick goes on (traceback at debug)",
                where,
                type(exc).__name__,
                exc,
                held,
            )


def slow_metrics(spec: GroupSpec) -> frozenset[str]:
    """The metrics of ``needed_metrics(spec)`` that are read once a minute for this group."""
    if spec.predictive.mode == "off":
        return SLOW_ISOLATION_METRICS & needed_metrics(spec)
    ruled = {pm.GROUP_METRICS[rule.metric][0] for rule in (*spec.scale_out, *spec.scale_in)}
    ruled.update(iso.metric for iso in spec.isolation.rules if iso.metric is not None)
    if spec.isolation.enabled:
        ruled.update({pm.QUEUE_WAITING, pm.REQUESTS_RUNNING})  # a drain watches them
    # the GPUs' utilization, where only a dead engine's second reading needs it: once a minute
    seldom = SLOW_METRICS | SLOW_ISOLATION_METRICS | ((CORRECTION_METRICS | {pm.GPU_UTIL_PCT}) - ruled)
    return seldom & needed_metrics(spec)


def slow_refresh_s(spec: GroupSpec) -> float:
    """How long a group reuses a slow read: ``SLOW_REFRESH_S``, shorter where its ``stale_after`` would let
    the reused points go stale first (at 30 s or less, every tick reads them)."""
    return max(0.0, min(SLOW_REFRESH_S, float(spec.stabilization.stale_after_s) - SLOW_READ_SLACK_S))


def needed_metrics(spec: GroupSpec) -> set[str]:
    """Canonical per-instance metrics a group's rules read (scale rules via their group aggregate)."""
    needed: set[str] = set()
    for rule in (*spec.scale_out, *spec.scale_in):
        source = pm.GROUP_METRICS[rule.metric][0]
        needed.add(source)
        if source in pm.LATENCY_METRICS:
            needed.update(pm.IDLE_EVIDENCE)  # an idle instance has no latency: these tell it from a gap
    if spec.predictive.mode != "off":
        # the demand, and what the online correction of the capacity model compares it with
        needed.update(pm.DEMAND_METRICS)
        needed.update({pm.TTFT_P99_MS, *CORRECTION_METRICS})
    if spec.isolation.enabled:
        # Draining watches the isolated instance's queue and running requests.
        needed.update({pm.QUEUE_WAITING, pm.REQUESTS_RUNNING})
        for iso in spec.isolation.rules:
            if iso.kind == "throttle":
                needed.add(pm.GPU_THROTTLE_REASONS)
            elif iso.kind == "xid":
                needed.add(pm.GPU_XID)
            elif iso.metric is not None:
                needed.add(iso.metric)
        if any(iso.metric == pm.VLLM_UP for iso in spec.isolation.rules):
            # the second reading that a node whose vLLM reads down serves nothing: its GPUs idle, as
            # CloudMonitor's own agent reads them (policies.launch_verdicts.serves_nothing)
            needed.add(pm.GPU_UTIL_PCT)
    return needed & pm.INSTANCE_METRICS


@dataclass
class GroupObservation:
    """Everything read about one group in one tick; ``ok`` False: the group itself could not be read.

    ``blind``: ESS could not be read but the group's instances were, not long ago (``BLIND_MAX_AGE_S``):
    ``instances`` is that copy, and their ECS health, system events and metrics were read as usual, so that
    isolation can still detect and notify (nothing that needs ESS is done on it)."""

    name: str
    ok: bool
    blind: bool = False
    group: ScalingGroup | None = None
    instances: list[ScalingInstance] = field(default_factory=list)
    activities_in_progress: list[ScalingActivity] = field(default_factory=list)
    health: dict[str, InstanceHealth] = field(default_factory=dict)
    events: dict[str, list[CloudSystemEvent]] = field(default_factory=dict)
    metrics: dict[str, dict[str, MetricSample]] = field(
        default_factory=dict
    )  # instance -> canonical -> sample
    xids: dict[str, list[XidEvent]] = field(default_factory=dict)
    staleness_s: dict[str, float | None] = field(default_factory=dict)  # canonical -> newest sample's age
    errors: list[str] = field(default_factory=list)
    # ECS health and system events could not be read: an instance with no event listed may have one
    events_unread: bool = False
    # (canonical, what its source warned of) for reads that answered: shown with the plan's warnings
    source_warnings: list[tuple[str, str]] = field(default_factory=list)

    def count(self, *states: str) -> int:
        return sum(1 for i in self.instances if i.lifecycle_state in states)


# Scope of an observation: (account profile or None for the default, region or None for the fleet's).
Scope = tuple[str | None, str | None]


@dataclass
class Observation:
    at: datetime
    groups: dict[str, GroupObservation]
    errors: list[CloudError] = field(default_factory=list)
    api_calls: int = 0  # wire requests, retries and pages included
    calls_by_action: dict[str, int] = field(default_factory=dict)
    # the (account, region) a part of the observation covers, named in its failures; None: every scope
    scope: Scope | None = None


ClientsFor = Callable[[Scope], CloudClients]


def scope_of(spec: GroupSpec) -> Scope:
    """The (account, region) a group lives in; None parts mean the fleet's defaults."""
    return (getattr(spec, "account", None), getattr(spec, "region", None))


def instance_json(inst: ScalingInstance) -> dict[str, Any]:
    """A scaling instance as the store keeps it (``instance_lists``)."""
    out = dataclasses.asdict(inst)
    out["created_at"] = inst.created_at.isoformat() if inst.created_at else None
    return out


def instance_from_json(raw: Any) -> ScalingInstance | None:
    """The scaling instance a stored row describes; None for one that does not (a later version's, a
    damaged row): it is left out rather than watched wrong."""
    if not isinstance(raw, dict):
        return None
    try:
        created = raw.get("created_at")
        fields: dict[str, Any] = {f.name: raw.get(f.name) for f in dataclasses.fields(ScalingInstance)}
        fields["created_at"] = datetime.fromisoformat(created) if created else None
        inst = ScalingInstance(**fields)
    except (TypeError, ValueError):
        return None
    if not isinstance(inst.instance_id, str) or not isinstance(inst.lifecycle_state, str):
        return None
    return inst


# The signature of a list seeded from the store: it matches no group's counts, so the first tick that can
# read ESS reads the instances again, and a seeded list is never written back as this tick's read.
_SEEDED: tuple[object, ...] = ()


@dataclass(frozen=True)
class _Cached:
    """A group's scaling instances as last read, with the capacity counts they were read at."""

    signature: tuple[object, ...]
    read_at: datetime
    instances: list[ScalingInstance]


@dataclass
class _Metric:
    """One batched metric read: a source's canonical metric over every group of a scope that needs it."""

    source: MetricSource
    canonical: str
    groups: list[tuple[GroupObservation, list[str]]] = field(default_factory=list)
    slow: bool = True  # every group of the read reads it seldom (slow_metrics)
    refresh_s: float = SLOW_REFRESH_S  # a slow read is reused this long: the least of its groups'
    since: datetime | None = None  # a spanned read: every point after this, not the last one


class Observer:
    """Reads the cloud for a set of group specs. Holds the name -> group id resolution and instance caches.

    ``clients_for`` gives the clients of an (account, region) scope (default: ``clients`` for every scope);
    ``pools`` runs the per-group and per-metric reads concurrently (default: inline, one after another).
    """

    def __init__(
        self,
        clients: CloudClients,
        specs: Sequence[GroupSpec],
        *,
        on_error: Callable[[CloudError], None] | None = None,
        read_ecs: bool = True,
        pools: CallPools | None = None,
        instances_refresh_s: float = 0.0,
        clients_for: ClientsFor | None = None,
    ) -> None:
        self.clients = clients
        self.specs = list(specs)
        self.on_error = on_error
        self.read_ecs = read_ecs
        self.pools = pools or CallPools(workers=1)
        self.instances_refresh_s = float(instances_refresh_s)
        self.clients_for: ClientsFor = clients_for or (lambda _scope: clients)
        self._group_ids: dict[str, str] = {
            s.name: s.scaling_group_id for s in self.specs if s.scaling_group_id
        }
        # where each group's metrics come from (its metrics_source; CloudMonitor by default); groups of one
        # scope with the same source share one object, so their reads are batched together
        self.sources: dict[str, MetricSource] = {}
        shared: dict[tuple[object, ...], MetricSource] = {}
        for s in self.specs:
            key = (scope_of(s), *_source_key(s))
            if key not in shared:
                shared[key] = source_for(s, self.clients_for(scope_of(s)))
            self.sources[s.name] = shared[key]
        self._instances: dict[str, _Cached] = {}
        self._cache_lock = threading.Lock()
        # the token mix moves slowly: read once a minute per source; a slow metric's last read: when, and its
        # kept points as one sample per instance (combined once)
        self._slow: dict[tuple[int, str], tuple[datetime, dict[str, MetricSample]]] = {}
        # a spanned metric's last read: when, and the sample each instance was given (its newest point's time)
        self._spans: dict[tuple[int, str], tuple[datetime, dict[str, MetricSample]]] = {}
        # drops (and logs once) samples no real source can produce: NaN, infinities, negatives, far futures
        self.guard = SampleGuard()
        self.failures = FailureLog()

    def group_id(self, name: str) -> str | None:
        return self._group_ids.get(name)

    def seed(self, name: str, read_at: datetime, instances: list[ScalingInstance]) -> None:
        """A group's instance list kept from an earlier run (the store's): watched while ESS cannot be read,
        and read again at the first tick that can (its counts match nothing)."""
        with self._cache_lock:
            self._instances.setdefault(name, _Cached(_SEEDED, read_at, list(instances)))

    def read_at(self, now: datetime, names: Iterable[str]) -> dict[str, list[ScalingInstance]]:
        """The named groups' instance lists that were read from ESS at ``now`` (this tick)."""
        wanted = set(names)
        with self._cache_lock:
            return {
                name: list(c.instances)
                for name, c in self._instances.items()
                if name in wanted and c.read_at == now and c.signature != _SEEDED
            }

    def invalidate(self, name: str) -> None:
        """Forget a group's cached instances (after a write to it): the next tick reads them again."""
        with self._cache_lock:
            self._instances.pop(name, None)

    def observe(self, now: datetime, names: Iterable[str] | None = None) -> Observation:
        """Observe every configured group, or only those named (a replica's shards)."""
        wanted = None if names is None else set(names)
        specs = [s for s in self.specs if wanted is None or s.name in wanted]
        obs = Observation(at=now, groups={})
        with count_calls() as counts:
            by_scope: dict[Scope, list[GroupSpec]] = {}
            for spec in specs:
                by_scope.setdefault(scope_of(spec), []).append(spec)
            for part in self._observe_scopes(list(by_scope.items()), now):
                obs.groups.update(part.groups)
                obs.errors.extend(part.errors)
        obs.calls_by_action = dict(counts)
        obs.api_calls = sum(counts.values())
        obs.groups = {s.name: obs.groups[s.name] for s in specs}  # configuration order
        return obs

    # -- internals ------------------------------------------------------------------------------------
    def _observe_scopes(
        self, scopes: list[tuple[Scope, list[GroupSpec]]], now: datetime
    ) -> list[Observation]:
        """Each (account, region)'s observation, on a thread of its own when there are several: a region
        whose calls hang or are retried (a black-holed endpoint times out 5 times, a throttle honours
        Retry-After up to a minute per retry) delays the tick by its own wait, not by the sum of every
        region's, and the healthy regions' reads are not queued behind it. An unexpected exception (a
        malformed answer, a bug) fails its own scope's groups only; their other regions are decided as
        usual. Each scope writes into its own part, merged in order, so the result does not depend on
        which thread finished first."""
        parts = [Observation(at=now, groups={}, scope=scope) for scope, _ in scopes]

        def one(index: int) -> None:
            scope, specs = scopes[index]
            try:
                self._observe_scope(scope, specs, now, parts[index])
            except Exception as exc:  # one scope's failure must not blind the others
                log.exception(
                    "observing %s failed: its groups are not observed this tick", _scope_label(scope)
                )
                text = f"observation of {_scope_label(scope)} failed: {type(exc).__name__}: {exc}"
                for spec in specs:
                    parts[index].groups[spec.name] = GroupObservation(name=spec.name, ok=False, errors=[text])

        if len(scopes) <= 1:
            for index in range(len(scopes)):
                one(index)
            return parts
        with ThreadPoolExecutor(max_workers=len(scopes), thread_name_prefix="fleet-scope") as threads:
            # in a copy of this context each, so the per-tick call counters see the calls of every scope
            for future in [
                threads.submit(contextvars.copy_context().run, one, i) for i in range(len(scopes))
            ]:
                future.result()
        return parts

    def _observe_scope(self, scope: Scope, specs: list[GroupSpec], now: datetime, obs: Observation) -> None:
        clients = self.clients_for(scope)
        groups = self._describe_groups(clients, specs, obs)
        resolved: list[tuple[GroupSpec, ScalingGroup]] = []
        blind: list[tuple[GroupSpec, GroupObservation]] = []
        for spec in specs:
            gid = self._group_ids.get(spec.name)
            group = groups.get(gid) if gid and groups else None
            if group is None:
                g = GroupObservation(name=spec.name, ok=False)
                wanted = spec.scaling_group_id or spec.scaling_group_name
                g.errors.append(
                    f"scaling groups not readable: {obs.errors[-1]}"
                    if groups is None and obs.errors
                    else f"scaling group {wanted!r} not found"
                )
                obs.groups[spec.name] = g
                if groups is None and self._blind(g, now):
                    blind.append((spec, g))
                continue
            resolved.append((spec, group))
        # Only groups with something to read go through the (rate-limited) pool; the others are cached.
        needy = [job for job in resolved if any(self._reads_needed(job[0], job[1], now))]
        got_by_name = {
            spec.name: got
            for (spec, _), got in zip(
                needy,
                self.pools.run("ess", lambda job: self._read_group(clients, job[0], job[1], now), needy),
                strict=True,
            )
        }
        read = [
            got_by_name.get(spec.name) or self._read_group(clients, spec, group, now)
            for spec, group in resolved
        ]
        observed: list[tuple[GroupSpec, GroupObservation]] = []
        for (spec, _), got in zip(resolved, read, strict=True):
            if isinstance(got, Exception):
                # a bug in one group's read (anything but a CloudError) fails that group, as a failed call
                # does, never the region's other groups
                where = f"{spec.name} instances"
                failure = got if isinstance(got, CloudError) else self._unexpected(where, got, obs)
                self._fail(obs, failure, where, logged=failure is not got)
                got = GroupObservation(name=spec.name, ok=False, errors=[str(failure)])
                if self._blind(got, now):
                    blind.append((spec, got))
            obs.groups[spec.name] = got
            if got.ok:
                observed.append((spec, got))
        # a blind group is read for isolation alone: ECS health and events, and its metrics
        watched = observed + [(spec, g) for spec, g in blind if spec.isolation.enabled]
        if self.read_ecs:
            # isolation reads health and system events; a group buying spot reads its reclaim notices there
            ecs_groups = [g for spec, g in watched if spec.isolation.enabled or _buys_spot(spec)]
            self._read_ecs(clients, ecs_groups, obs)
        self._read_metrics(watched, now, obs)

    def _blind(self, g: GroupObservation, now: datetime) -> bool:
        """Give an unreadable group its last instance list, when that is recent enough to watch."""
        with self._cache_lock:
            cached = self._instances.get(g.name)
        if cached is None or (now - cached.read_at).total_seconds() > BLIND_MAX_AGE_S:
            return False
        g.blind, g.instances = True, list(cached.instances)
        return True

    def _fail(self, obs: Observation, exc: CloudError, where: str, *, logged: bool = False) -> None:
        if obs.scope is not None and obs.scope != (None, None):
            # Which region and account failed: two regions failing one Action are two failures, each
            # logged, never one held back behind the other's.
            where = f"{where} ({_scope_label(obs.scope)})"
        obs.errors.append(exc)
        if not logged:
            self.failures.failed(where, exc, obs.at)
        if self.on_error is not None:
            self.on_error(exc)

    def _unexpected(self, where: str, exc: Exception, obs: Observation) -> CloudError:
        """A source's read that raised no CloudError (a bug in it), logged, as the failure the tick records
        and counts (``Source.UnexpectedError``)."""
        if obs.scope is not None and obs.scope != (None, None):
            where = f"{where} ({_scope_label(obs.scope)})"
        self.failures.crashed(where, exc, obs.at)
        return CloudError("Source.UnexpectedError", f"{type(exc).__name__}: {exc}", action=where)

    def _describe_groups(
        self, clients: CloudClients, specs: list[GroupSpec], obs: Observation
    ) -> dict[str, ScalingGroup] | None:
        """The configured groups by id; None when ESS could not be read (as opposed to found nothing)."""
        ids = sorted({s.scaling_group_id for s in specs if s.scaling_group_id})
        names = sorted(
            {s.scaling_group_name for s in specs if s.scaling_group_name and not s.scaling_group_id}
        )
        found: dict[str, ScalingGroup] = {}
        try:
            if len(ids) + len(names) > MAX_GROUP_FILTER:
                # More than one filtered call: the region's list in pages of 50 costs fewer calls.
                listing = clients.ess.describe_scaling_groups()
                wanted_ids, wanted_names = set(ids), set(names)
                listed = [g for g in listing if g.group_id in wanted_ids or g.name in wanted_names]
            else:
                listed = clients.ess.describe_scaling_groups(group_ids=ids) if ids else []
                if names:
                    listed += clients.ess.describe_scaling_groups(names=names)
        except CloudError as exc:
            self._fail(obs, exc, "DescribeScalingGroups")
            return None
        by_name = {g.name: g for g in listed}
        for g in listed:
            found[g.group_id] = g
        for spec in specs:
            if spec.scaling_group_name and not spec.scaling_group_id and spec.scaling_group_name in by_name:
                self._group_ids[spec.name] = by_name[spec.scaling_group_name].group_id
        return found

    def _read_group(
        self, clients: CloudClients, spec: GroupSpec, group: ScalingGroup, now: datetime
    ) -> GroupObservation:
        """A group's instances (cached while its counts are unchanged) and its activities in progress."""
        g = GroupObservation(name=spec.name, ok=True, group=group)
        read_instances, read_activities = self._reads_needed(spec, group, now)
        if read_instances:
            g.instances = clients.ess.describe_scaling_instances(group.group_id)
            with self._cache_lock:
                self._instances[spec.name] = _Cached(_signature(group), now, list(g.instances))
        else:
            g.instances = list(self._instances[spec.name].instances)
        if read_activities:
            g.activities_in_progress = clients.ess.describe_scaling_activities(
                group.group_id, status_code="InProgress", limit=10
            )
        return g

    def _reads_needed(self, spec: GroupSpec, group: ScalingGroup, now: datetime) -> tuple[bool, bool]:
        """(read the instances, read the activities) for a group this tick."""
        with self._cache_lock:
            cached = self._instances.get(spec.name)
        changed = cached is None or cached.signature != _signature(group)
        # Each group's refresh falls due between half and all of instances_refresh_s after its read (by a
        # hash of its name), so the groups read together at start-up do not all fall due in the same tick.
        due_s = self.instances_refresh_s * (0.5 + 0.5 * _hash_fraction(spec.name))
        stale = cached is None or (now - cached.read_at).total_seconds() >= due_s
        # An activity shows in the counts (instances joining or leaving, or size short of desired); a refresh
        # that is only due by time, with counts unchanged and nothing in flight, need not read them.
        activities = changed or self.instances_refresh_s <= 0 or _in_flight(group)
        return changed or stale, activities

    def _read_ecs(self, clients: CloudClients, groups: list[GroupObservation], obs: Observation) -> None:
        # DescribeInstancesFullStatus takes up to 100 ids per call and carries each instance's active
        # (scheduled, executing, inquiring) system events; DescribeInstanceHistoryEvents takes one instance
        # per call, so it is left to diagnosis and never read per tick.
        owner = {i.instance_id: g for g in groups for i in g.instances}
        if not owner:
            return
        ids = list(owner)
        scan = getattr(clients.ecs, "describe_full_status_exceptions", None)
        try:
            if len(ids) > ECS_SCAN_MIN_IDS and scan is not None:
                healths = scan()
            else:
                chunks = [ids[i : i + MAX_IDS_PER_CALL] for i in range(0, len(ids), MAX_IDS_PER_CALL)]
                healths = []
                for got in self.pools.run("ecs", clients.ecs.describe_full_status, chunks):
                    if isinstance(got, Exception):
                        raise got
                    healths.extend(got)
        except CloudError as exc:
            self._fail(obs, exc, "DescribeInstancesFullStatus")
            for g in groups:
                g.errors.append(str(exc))
                g.events_unread = True
            return
        for h in healths:
            holder = owner.get(h.instance_id)
            if holder is None:
                continue  # another fleet's instance in a region-wide answer
            holder.health[h.instance_id] = h
            if h.events:
                holder.events.setdefault(h.instance_id, []).extend(h.events)

    def _read_metrics(
        self, observed: list[tuple[GroupSpec, GroupObservation]], now: datetime, obs: Observation
    ) -> None:
        """One read per (source, metric) over every group that needs it, then split by group."""
        reads: dict[tuple[int, str], _Metric] = {}
        for spec, g in observed:
            measured = [i.instance_id for i in g.instances if i.lifecycle_state not in _UNMEASURED_STATES]
            source = self.sources[spec.name]
            slow, refresh_s = slow_metrics(spec), slow_refresh_s(spec)
            for canonical in sorted(needed_metrics(spec)):
                if not measured:
                    g.staleness_s[canonical] = None
                    continue
                read = reads.setdefault((id(source), canonical), _Metric(source, canonical))
                read.groups.append((g, measured))
                read.slow = read.slow and canonical in slow
                read.refresh_s = min(read.refresh_s, refresh_s)
        reused = {
            key: self._slow[key][1]
            for key, read in reads.items()
            if read.slow and self._slow_fresh(key, now, read.refresh_s)
        }
        batches = [read for key, read in reads.items() if key not in reused]
        for read in batches:
            read.since = self._span_start((id(read.source), read.canonical), read, now)

        def fetch(read: _Metric) -> tuple[list[MetricPoint], list[str]]:
            ids = [iid for _, measured in read.groups for iid in measured]
            if read.since is not None:
                points = read.source.read_range(read.canonical, ids, read.since, now)
            else:
                points = read.source.read_last(read.canonical, ids)
            return points, read.source.take_warnings(read.canonical)  # in the thread that read

        for key, samples in reused.items():
            for g, measured in reads[key].groups:
                apply_samples(g, key[1], measured, samples, now)
        for read, got in zip(batches, self.pools.run("cms", fetch, batches), strict=True):
            if isinstance(got, Exception):
                # a source's bug (anything but a CloudError) fails its own read, never the scope's other
                # groups and metrics: unknown, like a failed call
                where = read.source.describe(read.canonical)
                failure = got if isinstance(got, CloudError) else self._unexpected(where, got, obs)
                self._fail(obs, failure, where, logged=failure is not got)
                for g, _ in read.groups:
                    g.errors.append(str(failure))
                    g.staleness_s[read.canonical] = None
                continue
            points, warnings = got
            for warning in warnings:
                self.failures.warned(read.source.describe(read.canonical), warning, now)
            for g, _ in read.groups:
                g.source_warnings += [(read.canonical, f"{read.source.kind}: {w}") for w in warnings]
            self._apply_read(read, points, now)

    def _apply_read(self, read: _Metric, got: list[MetricPoint], now: datetime) -> None:
        """A read's points, sanitized, to each of its groups; a slow or spanned metric's remembered."""
        name = read.source.describe(read.canonical)
        owner = {iid: g for g, measured in read.groups for iid in measured}
        got = self._drop_skewed(read, [p for p in got if p.instance_id in owner], name, now)
        by_group: dict[str, list[MetricPoint]] = {}
        for p in got:
            holder = owner.get(p.instance_id or "")
            if holder is not None:
                by_group.setdefault(holder.name, []).append(p)
        # the sanitizing step (issue 14): hostile values are dropped per group, logged once each
        filtered = [
            (g, measured, self.guard.filter(g.name, read.canonical, name, by_group.get(g.name, []), now))
            for g, measured in read.groups
        ]
        key = (id(read.source), read.canonical)
        spanned = self._spanned(key, read, filtered, now) if read.canonical in SPANNED_METRICS else None
        for g, measured, points in filtered:
            if spanned is None:
                apply_metric(g, read.canonical, measured, points, now)
            else:
                apply_samples(g, read.canonical, measured, spanned, now)
        if read.slow:
            kept = [p for _, _, points in filtered for p in points]
            self._slow[key] = (now, combine_by_instance(read.canonical, kept))

    def _drop_skewed(
        self, read: _Metric, got: list[MetricPoint], name: str, now: datetime
    ) -> list[MetricPoint]:
        """A read whose points of more than one instance are dated ahead of ``now`` says this host's clock is
        behind the source's (or the source's ahead): those points are dropped (unknown, as the guard would)
        and said in one line for every metric and instance, thinned as failures are, instead of one line
        per instance and metric (500 for 100 instances' five metrics). One instance alone ahead is its
        agent's clock: left to the guard, which names it."""
        limit = now + timedelta(seconds=FUTURE_TOLERANCE_S)
        ahead = [p for p in got if p.timestamp > limit and p.instance_id is not None]
        instances = {p.instance_id for p in ahead}
        if len(instances) < 2:
            return got
        ahead_s = max((p.timestamp - now).total_seconds() for p in ahead)
        verdict = self.failures.held.seen(("clock", read.source.kind), now.timestamp())
        if verdict.write:
            held = f" ({verdict.held} more reads since the last line)" if verdict.held else ""
            names = sorted(str(i) for i in instances)
            shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
            log.warning(
                "observe %s: points of %d instances (%s) are dated up to %.0f s ahead of this host's clock "
                "(now %s): ignored, their metrics are unknown; is this host's clock behind (NTP)?%s",
                name,
                len(instances),
                shown,
                ahead_s,
                now.isoformat(),
                held,
            )
        return [p for p in got if p.timestamp <= limit]

    def _span_start(self, key: tuple[int, str], read: _Metric, now: datetime) -> datetime | None:
        """Where a spanned metric's read starts: the oldest newest-point given to its instances at the last
        read, when that read was more than ``SPAN_AFTER_S`` ago, and never more than ``SPAN_MAX_S`` back;
        None: read the last point only (the first read, a tick no longer than the agent's period, or instances
        all new)."""
        if read.canonical not in SPANNED_METRICS or key not in self._spans:
            return None
        read_at, given = self._spans[key]
        if (now - read_at).total_seconds() <= SPAN_AFTER_S:
            return None
        ats = [given[iid].at for _, measured in read.groups for iid in measured if iid in given]
        if not ats:
            return None
        return max(min(ats), now - timedelta(seconds=SPAN_MAX_S))

    def _spanned(
        self,
        key: tuple[int, str],
        read: _Metric,
        filtered: list[tuple[GroupObservation, list[str], list[MetricPoint]]],
        now: datetime,
    ) -> dict[str, MetricSample]:
        """One sample per instance of a spanned metric, remembered for the next read: the mean of the points
        newer than the one it was last given (each the rate over one agent period, so their mean is the rate
        since then), dated by the newest; the last sample again when nothing newer came (as the last point
        would be). On a last-point read, the last point."""
        given = self._spans[key][1] if key in self._spans else {}
        out: dict[str, MetricSample] = {}
        for _, measured, points in filtered:
            by_instance = _by_instance(points)
            for iid in measured:
                pts = by_instance.get(iid, [])
                last = given.get(iid)
                if read.since is None or last is None:
                    newest = max((p.timestamp for p in pts), default=None)
                    pts = [p for p in pts if p.timestamp == newest]
                else:
                    pts = [p for p in pts if p.timestamp > last.at]
                if pts:
                    out[iid] = mean_over_time(read.canonical, pts)
                elif last is not None and read.since is not None:
                    out[iid] = last
        self._spans[key] = (now, out)
        return out

    def _slow_fresh(self, key: tuple[int, str], now: datetime, refresh_s: float) -> bool:
        """A slow metric read less than ``refresh_s`` ago (its points are reused, never past staleness)."""
        if key not in self._slow:
            return False
        age_s = (now - self._slow[key][0]).total_seconds()
        return 0 <= age_s < refresh_s


def _scope_label(scope: Scope) -> str:
    account, region = scope
    if account is None and region is None:
        return "the default account and region"
    return f"region {region or '(default)'}, account {account or '(default)'}"


def _buys_spot(spec: GroupSpec) -> bool:
    return spec.capacity_mix is not None and spec.capacity_mix.buys_spot


def apply_metric(
    g: GroupObservation, canonical: str, ids: Sequence[str], points: Iterable[MetricPoint], now: datetime
) -> None:
    """Keep the points of this group's instances, one sample per instance, and the metric's staleness."""
    wanted = set(ids)
    points = [p for p in points if p.instance_id in wanted]
    if canonical == pm.GPU_XID:
        for iid, pts in _by_instance(points).items():
            g.xids[iid] = [
                XidEvent(
                    code=int(p.value),
                    at=p.timestamp,
                    gpu=p.dimensions.get("gpu") or p.dimensions.get("gpuId"),
                )
                for p in pts
                if p.value
            ]
    apply_samples(g, canonical, ids, combine_by_instance(canonical, points), now)


def apply_samples(
    g: GroupObservation,
    canonical: str,
    ids: Sequence[str],
    samples: Mapping[str, MetricSample],
    now: datetime,
) -> None:
    """Keep the samples of this group's instances (``ids``) and the metric's staleness."""
    newest: datetime | None = None
    for iid in ids:
        sample = samples.get(iid)
        if sample is None:
            continue
        g.metrics.setdefault(iid, {})[canonical] = sample
        newest = sample.at if newest is None or sample.at > newest else newest
    g.staleness_s[canonical] = None if newest is None else max(0.0, (now - newest).total_seconds())


def mean_over_time(canonical: str, points: Sequence[MetricPoint]) -> MetricSample:
    """The mean over time of one instance's points (``combine`` at each time), dated by the newest."""
    by_time: dict[datetime, list[MetricPoint]] = {}
    for p in points:
        by_time.setdefault(p.timestamp, []).append(p)
    if len(by_time) == 1:
        return combine(canonical, points)
    values = [combine(canonical, pts).value for pts in by_time.values()]
    return MetricSample(value=sum(values) / len(values), at=max(by_time))


def combine_by_instance(canonical: str, points: Iterable[MetricPoint]) -> dict[str, MetricSample]:
    """One sample per instance that has a point with a value (``combine`` over its points)."""
    return {iid: combine(canonical, pts) for iid, pts in _by_instance(points).items()}


def _by_instance(points: Iterable[MetricPoint]) -> dict[str, list[MetricPoint]]:
    """The points with a value, by instance."""
    by_instance: dict[str, list[MetricPoint]] = {}
    for p in points:
        if p.instance_id is not None and p.value is not None:
            by_instance.setdefault(p.instance_id, []).append(p)
    return by_instance


def _source_key(spec: GroupSpec) -> tuple[object, ...]:
    """Groups whose metrics_source is configured alike read through one source."""
    config: Any = getattr(spec, "metrics_source", None)
    kind = getattr(config, "type", None) or "cloudmonitor"
    if kind == "prometheus":
        labels = tuple(sorted((getattr(config, "labels", None) or {}).items()))
        token_env = getattr(config, "bearer_token_env", None)
        limits = (getattr(config, "timeout_s", None), getattr(config, "max_answer_mib", None))
        return (kind, str(config.url), labels, getattr(config, "instance_label", None), token_env, limits)
    return (kind,)


def _hash_fraction(name: str) -> float:
    """A stable number in [0, 1) from a group's name."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") / 2**32


def _signature(group: ScalingGroup) -> tuple[object, ...]:
    """What DescribeScalingGroups says about a group's instances: unchanged counts, unchanged instances."""
    return (
        group.lifecycle_state,
        group.desired_capacity,
        group.total_capacity,
        group.active_capacity,
        group.pending_capacity,
        group.removing_capacity,
        group.standby_capacity,
        group.protected_capacity,
        group.stopped_capacity,
    )


def _in_flight(group: ScalingGroup) -> bool:
    """Whether an activity may be running: instances joining or leaving, or the size not yet at desired.

    A group without desired capacity shows no target to compare with, so it is always read."""
    if group.desired_capacity is None:
        return True
    return bool(
        group.pending_capacity or group.removing_capacity or group.desired_capacity != group.total_capacity
    )


def combine(canonical: str, points: Iterable[MetricPoint]) -> MetricSample:
    """One sample per instance from its series (several for per-GPU custom metrics).

    Throttle reasons are OR-ed (any GPU throttled counts), the SM clock ratio takes the slowest GPU, the rest
    the worst (highest): one hot, saturated or slow card limits a tensor-parallel instance. The time is the
    newest point's.
    """
    pts = list(points)
    at = max(p.timestamp for p in pts)
    values = [float(p.value) for p in pts if p.value is not None]
    if canonical == pm.GPU_THROTTLE_REASONS:
        mask = 0
        for v in values:
            mask |= int(v)
        return MetricSample(value=float(mask), at=at)
    if canonical == pm.GPU_SM_CLOCK_RATIO:
        return MetricSample(value=min(values), at=at)
    return MetricSample(value=max(values), at=at)


def to_policy_events(events: Iterable[CloudSystemEvent]) -> list[SystemEvent]:
    return [
        SystemEvent(code=e.code, cycle_status=e.cycle_status, event_id=e.event_id, not_before=e.not_before)
        for e in events
    ]


def health_status(instance: ScalingInstance, health: InstanceHealth | None) -> str:
    """ESS health, downgraded to Unhealthy when ECS reports the instance Impaired."""
    if health is not None and (health.health_status or "") in _ECS_UNHEALTHY:
        return "Unhealthy"
    return instance.health_status or "Healthy"
