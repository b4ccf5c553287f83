"""Observe: read what the cloud says about each group and turn it into the policy engine's vocabulary.

Per tick and group: one DescribeScalingInstances, one DescribeScalingActivities, and per needed metric one
batched CloudMonitor read covering every instance of the group (the adapter packs up to 50 instances into the
``Dimensions`` list of one call); ECS full status with the active system events, 100 instances per call.
Groups are resolved in one DescribeScalingGroups for all of them. API calls per tick therefore grow with
groups and metrics, not with instances (beyond pagination).

Each group reads its metrics from its ``metrics_source`` (``fleet.service.sources``: CloudMonitor by
default, or Prometheus), always under the canonical names of ``policies.metrics``; the service never reads a
metric no rule needs. A failed read leaves that metric (or group) out: unknown, never zero, so the policies
can refuse to scale in on it. Staleness is tracked per group and metric as the age of the newest sample.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from fleet.cloud.clients import CloudClients
from fleet.cloud.errors import CloudError
from fleet.cloud.types import (
    InstanceHealth,
    MetricPoint,
    ScalingActivity,
    ScalingGroup,
    ScalingInstance,
)
from fleet.cloud.types import SystemEvent as CloudSystemEvent
from fleet.service.sanitize import SampleGuard
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


def needed_metrics(spec: GroupSpec) -> set[str]:
    """Canonical per-instance metrics a group's rules read (scale rules via their group aggregate)."""
    needed: set[str] = set()
    for rule in (*spec.scale_out, *spec.scale_in):
        needed.add(pm.GROUP_METRICS[rule.metric][0])
    if spec.predictive.mode != "off":
        # the demand, and what the online correction of the capacity model compares it with
        needed.update(pm.DEMAND_METRICS)
        needed.update({pm.TTFT_P99_MS, pm.KV_CACHE_USAGE_PCT})
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
    return needed & pm.INSTANCE_METRICS


@dataclass
class GroupObservation:
    """Everything read about one group in one tick; ``ok`` False: the group itself could not be read."""

    name: str
    ok: bool
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

    def count(self, *states: str) -> int:
        return sum(1 for i in self.instances if i.lifecycle_state in states)


@dataclass
class Observation:
    at: datetime
    groups: dict[str, GroupObservation]
    errors: list[CloudError] = field(default_factory=list)
    api_calls: int = 0


class Observer:
    """Reads the cloud for a set of group specs. Holds only the name -> group id resolution cache."""

    def __init__(
        self,
        clients: CloudClients,
        specs: Sequence[GroupSpec],
        *,
        on_error: Callable[[CloudError], None] | None = None,
        read_ecs: bool = True,
    ) -> None:
        self.clients = clients
        self.specs = list(specs)
        self.on_error = on_error
        self.read_ecs = read_ecs
        self._group_ids: dict[str, str] = {
            s.name: s.scaling_group_id for s in self.specs if s.scaling_group_id
        }
        # where each group's metrics come from (its metrics_source; CloudMonitor by default)
        self.sources: dict[str, MetricSource] = {s.name: source_for(s, clients) for s in self.specs}
        # drops (and logs once) samples no real source can produce: NaN, infinities, negatives, far futures
        self.guard = SampleGuard()

    def group_id(self, name: str) -> str | None:
        return self._group_ids.get(name)

    def observe(self, now: datetime) -> Observation:
        obs = Observation(at=now, groups={})
        groups = self._describe_groups(obs)
        for spec in self.specs:
            gid = self._group_ids.get(spec.name)
            group = groups.get(gid) if gid and groups else None
            if group is None:
                g = GroupObservation(name=spec.name, ok=False)
                wanted = spec.scaling_group_id or spec.scaling_group_name
                g.errors.append(
                    "scaling groups not readable" if groups is None else f"scaling group {wanted!r} not found"
                )
                obs.groups[spec.name] = g
                continue
            obs.groups[spec.name] = self._observe_group(spec, group, now, obs)
        return obs

    # -- internals ------------------------------------------------------------------------------------
    def _fail(self, obs: Observation, exc: CloudError, where: str) -> None:
        obs.errors.append(exc)
        log.warning("observe %s failed: %s", where, exc)
        if self.on_error is not None:
            self.on_error(exc)

    def _describe_groups(self, obs: Observation) -> dict[str, ScalingGroup] | None:
        """The configured groups by id; None when ESS could not be read (as opposed to found nothing)."""
        ids = sorted({s.scaling_group_id for s in self.specs if s.scaling_group_id})
        names = sorted(
            {s.scaling_group_name for s in self.specs if s.scaling_group_name and not s.scaling_group_id}
        )
        found: dict[str, ScalingGroup] = {}
        try:
            if ids:
                obs.api_calls += 1
                for g in self.clients.ess.describe_scaling_groups(group_ids=ids):
                    found[g.group_id] = g
            if names:
                obs.api_calls += 1
                for g in self.clients.ess.describe_scaling_groups(names=names):
                    found[g.group_id] = g
                    for spec in self.specs:
                        if spec.scaling_group_name == g.name and not spec.scaling_group_id:
                            self._group_ids[spec.name] = g.group_id
        except CloudError as exc:
            self._fail(obs, exc, "DescribeScalingGroups")
            return None
        return found

    def _observe_group(
        self, spec: GroupSpec, group: ScalingGroup, now: datetime, obs: Observation
    ) -> GroupObservation:
        g = GroupObservation(name=spec.name, ok=True, group=group)
        ess = self.clients.ess
        try:
            obs.api_calls += 2
            g.instances = ess.describe_scaling_instances(group.group_id)
            g.activities_in_progress = ess.describe_scaling_activities(
                group.group_id, status_code="InProgress", limit=10
            )
        except CloudError as exc:
            self._fail(obs, exc, f"{spec.name} instances")
            g.ok = False
            g.errors.append(str(exc))
            return g
        measured = [i.instance_id for i in g.instances if i.lifecycle_state not in _UNMEASURED_STATES]
        all_ids = [i.instance_id for i in g.instances]
        spot = spec.capacity_mix is not None and spec.capacity_mix.buys_spot  # reclaim notices are ECS events
        if self.read_ecs and all_ids and (spec.isolation.enabled or spot):
            self._read_ecs(g, all_ids, obs)
        for canonical in sorted(needed_metrics(spec)):
            self._read_metric(g, canonical, measured, now, obs)
        return g

    def _read_ecs(self, g: GroupObservation, ids: list[str], obs: Observation) -> None:
        # DescribeInstancesFullStatus takes up to 100 ids per call and carries each instance's active
        # (scheduled, executing, inquiring) system events; DescribeInstanceHistoryEvents takes one instance
        # per call, so it is left to diagnosis and never read per tick.
        try:
            obs.api_calls += 1
            for h in self.clients.ecs.describe_full_status(ids):
                g.health[h.instance_id] = h
                if h.events:
                    g.events.setdefault(h.instance_id, []).extend(h.events)
        except CloudError as exc:
            self._fail(obs, exc, f"{g.name} DescribeInstancesFullStatus")
            g.errors.append(str(exc))

    def _read_metric(
        self, g: GroupObservation, canonical: str, ids: list[str], now: datetime, obs: Observation
    ) -> None:
        if not ids:
            g.staleness_s[canonical] = None
            return
        source = self.sources[g.name]
        name = source.describe(canonical)
        try:
            obs.api_calls += 1
            points = source.read_last(canonical, ids)
        except CloudError as exc:
            self._fail(obs, exc, f"{g.name} {name}")
            g.errors.append(str(exc))
            g.staleness_s[canonical] = None
            return
        points = self.guard.filter(g.name, canonical, name, points, now)
        wanted = set(ids)
        by_instance: dict[str, list[MetricPoint]] = {}
        for p in points:
            if p.instance_id in wanted and p.value is not None:
                by_instance.setdefault(p.instance_id, []).append(p)
        newest: datetime | None = None
        for iid, pts in by_instance.items():
            if canonical == pm.GPU_XID:
                g.xids[iid] = [
                    XidEvent(
                        code=int(p.value),
                        at=p.timestamp,
                        gpu=p.dimensions.get("gpu") or p.dimensions.get("gpuId"),
                    )
                    for p in pts
                    if p.value
                ]
            sample = combine(canonical, pts)
            g.metrics.setdefault(iid, {})[canonical] = sample
            newest = sample.at if newest is None or sample.at > newest else newest
        g.staleness_s[canonical] = None if newest is None else max(0.0, (now - newest).total_seconds())


def combine(canonical: str, points: Iterable[MetricPoint]) -> MetricSample:
    """One sample per instance from its series (several for per-GPU custom metrics).

    Throttle reasons are OR-ed (any GPU throttled counts), the rest take the worst (highest) GPU: one hot or
    saturated card limits a tensor-parallel instance. The time is the newest point's.
    """
    pts = list(points)
    at = max(p.timestamp for p in pts)
    values = [float(p.value) for p in pts if p.value is not None]
    if canonical == pm.GPU_THROTTLE_REASONS:
        mask = 0
        for v in values:
            mask |= int(v)
        return MetricSample(value=float(mask), at=at)
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
