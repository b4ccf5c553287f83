"""The policies teams run today, as the benchmark's baselines, each at its documented defaults.

They read the same CloudMonitor metrics and write through the same ESS adapter as the service, so the only
difference in a run is the decision logic. None of them is tuned against ours: every number below is the
product's default as documented (sources in ../shared/reference/autoscaling-anchors.md), and the only inputs
taken from the fleet's config are those a team would set anyway (the group's min and max, the queue target).

* :class:`StaticPeak` -- provision for the peak and never change (the capacity plan most teams start from).
* :class:`EssAlarmRule` -- ESS alarm tasks on CloudMonitor GPU utilization: group average >= 80 % for 3
  periods of 60 s adds one instance, <= 30 % for 15 periods removes one; simple rules honour the 300 s group
  cooldown.
* :class:`TargetTracking` -- the Kubernetes HPA algorithm (as KEDA drives it) on waiting requests per
  instance: 15 s sync, 10 % tolerance, scale-down stabilization 300 s (highest recommendation in the window),
  scale-up limited to max(100 %, 4 instances) per period, no schedule.
"""

from __future__ import annotations

import hashlib
import math
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

GPU_UTIL_METRIC = "instance_gpu_gpu_usedutilization"
ECS_NAMESPACE = "acs_ecs_dashboard"
QUEUE_METRIC = "vllm_num_requests_waiting"


def _token(*parts: object) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:32]


@dataclass
class ControllerStats:
    scale_actions: int = 0
    decisions: list[dict[str, Any]] = field(default_factory=list)


def _current_size(group: Any) -> int:
    """The group's desired capacity, or its total when ESS reports no desired value (as a rule would read)."""
    return group.desired_capacity if group.desired_capacity is not None else group.total_capacity


def _scale(ctrl: Any, now: datetime, target: int, reason: str, **detail: Any) -> None:
    """Writes ``target`` through ESS with an idempotent token and records the decision in ``ctrl.stats``."""
    ctrl.ess.scale_to(ctrl.group_id, target, _token(ctrl.name, ctrl.group_id, now.isoformat(), target))
    ctrl.stats.scale_actions += 1
    ctrl.stats.decisions.append({"at": now.isoformat(), "desired": target, **detail, "reason": reason})


class StaticPeak:
    """Pins the group at ``size`` (min = max = desired) once, then does nothing."""

    name = "static-peak"
    period_s = 60.0  # nothing to do after the first tick

    def __init__(self, ess: Any, group_id: str, size: int) -> None:
        self.ess, self.group_id, self.size = ess, group_id, size
        self.stats = ControllerStats()
        self._done = False

    def tick(self, now: datetime) -> None:
        if self._done:
            return
        self.ess.modify_scaling_group(
            self.group_id, min_size=self.size, max_size=self.size, desired_capacity=self.size
        )
        self._done = True
        self.stats.scale_actions += 1
        self.stats.decisions.append({"at": now.isoformat(), "desired": self.size, "reason": "static_peak"})


@dataclass(frozen=True)
class EssAlarmParams:
    # ESS alarm task defaults as documented (autoscaling-anchors.md section 7): 60 s period (the finest),
    # average
    # statistic, 3 evaluations to scale out, 15 to scale in, simple rules under the 300 s default cooldown.
    period_s: int = 60
    high_pct: float = 80.0
    high_count: int = 3
    low_pct: float = 30.0
    low_count: int = 15
    cooldown_s: float = 300.0


class EssAlarmRule:
    """Two CloudMonitor alarms on the group's average GPU utilization, each running a +1 / -1 simple rule."""

    name = "ess-alarm"

    def __init__(
        self,
        ess: Any,
        cms: Any,
        group_id: str,
        min_size: int,
        max_size: int,
        params: EssAlarmParams | None = None,
    ) -> None:
        self.ess, self.cms, self.group_id = ess, cms, group_id
        self.min_size, self.max_size = min_size, max_size
        self.p = params or EssAlarmParams()
        self.period_s = float(self.p.period_s)
        self.stats = ControllerStats()
        self._next_eval: datetime | None = None
        self._high = 0
        self._low = 0
        self._last_action: datetime | None = None

    def tick(self, now: datetime) -> None:
        if self._next_eval is None:
            self._next_eval = now + timedelta(seconds=self.p.period_s)
            return
        if now < self._next_eval:
            return
        self._next_eval += timedelta(seconds=self.p.period_s)
        group = self.ess.describe_scaling_groups([self.group_id])[0]
        ids = [i.instance_id for i in self.ess.describe_scaling_instances(self.group_id, ["InService"])]
        points = (
            self.cms.metric_list(
                ECS_NAMESPACE,
                GPU_UTIL_METRIC,
                ids,
                now - timedelta(seconds=self.p.period_s),
                now,
                period_s=self.p.period_s,
            )
            if ids
            else []
        )
        values = [p.value for p in points if p.value is not None]
        if not values:  # INSUFFICIENT_DATA: neither alarm fires, and their consecutive counts restart
            self._high = self._low = 0
            return
        avg = sum(values) / len(values)
        self._high = self._high + 1 if avg >= self.p.high_pct else 0
        self._low = self._low + 1 if avg <= self.p.low_pct else 0
        step = 0
        if self._high >= self.p.high_count:
            step = 1
        elif self._low >= self.p.low_count:
            step = -1
        if step == 0:
            return
        if self._last_action is not None and (now - self._last_action).total_seconds() < self.p.cooldown_s:
            return  # the group's cooldown rejects simple-rule executions
        current = _current_size(group)
        target = min(self.max_size, max(self.min_size, current + step))
        if target == current:
            return
        _scale(self, now, target, "alarm_high" if step > 0 else "alarm_low", gpu_util_avg=round(avg, 1))
        self._last_action = now


@dataclass(frozen=True)
class TargetTrackingParams:
    # Kubernetes HPA defaults (autoscaling-anchors.md section 5): 15 s sync, 0.1 tolerance, scale-down
    # stabilization 300 s, scale-up max(100 %, 4 pods) per 15 s, scale-down 100 % per 15 s.
    sync_s: int = 15
    tolerance: float = 0.1
    scale_down_window_s: float = 300.0
    scale_up_pct: float = 100.0
    scale_up_pods: int = 4


class TargetTracking:
    """The HPA replica calculation on average waiting requests per instance against ``target``."""

    name = "target-tracking"

    def __init__(
        self,
        ess: Any,
        cms: Any,
        group_id: str,
        min_size: int,
        max_size: int,
        target: float,
        params: TargetTrackingParams | None = None,
    ) -> None:
        self.ess, self.cms, self.group_id = ess, cms, group_id
        self.min_size, self.max_size, self.target = min_size, max_size, target
        self.p = params or TargetTrackingParams()
        self.period_s = float(self.p.sync_s)
        self.stats = ControllerStats()
        self._next_sync: datetime | None = None
        self._recs: deque[tuple[datetime, int]] = deque()

    def tick(self, now: datetime) -> None:
        if self._next_sync is not None and now < self._next_sync:
            return
        self._next_sync = now + timedelta(seconds=self.p.sync_s)
        group = self.ess.describe_scaling_groups([self.group_id])[0]
        current = _current_size(group)
        members = self.ess.describe_scaling_instances(self.group_id)
        pods = [i.instance_id for i in members if i.lifecycle_state in ("InService", "Pending")]
        in_service = [i.instance_id for i in members if i.lifecycle_state == "InService"]
        points = (
            self.cms.metric_last(self.cms.custom_namespace, QUEUE_METRIC, in_service) if in_service else []
        )
        fresh = {
            p.instance_id: p.value
            for p in points
            if p.value is not None and (now - p.timestamp).total_seconds() <= 2 * self.p.sync_s
        }
        if not fresh:
            return  # no metric at all: the HPA does not scale
        total = sum(fresh.values())
        ready = len(fresh)
        missing = max(0, len(pods) - ready)
        ratio = total / ready / self.target
        desired = current
        if ratio > 1 + self.p.tolerance:
            # Scale-up: instances without metrics (still starting) count as using nothing.
            ratio2 = total / (ready + missing) / self.target
            if ratio2 > 1 + self.p.tolerance:
                desired = math.ceil(ratio2 * (ready + missing))
        elif ratio < 1 - self.p.tolerance:
            # Scale-down: instances without metrics count as exactly at target.
            ratio2 = (total + missing * self.target) / (ready + missing) / self.target
            if ratio2 < 1 - self.p.tolerance:
                desired = math.ceil(ratio2 * (ready + missing))
        # Behaviour: rate limits per period, then the scale-down stabilization window.
        up_limit = max(math.ceil(current * (1 + self.p.scale_up_pct / 100.0)), current + self.p.scale_up_pods)
        desired = min(desired, up_limit)
        desired = min(self.max_size, max(self.min_size, desired))
        self._recs.append((now, desired))
        while self._recs and (now - self._recs[0][0]).total_seconds() > self.p.scale_down_window_s:
            self._recs.popleft()
        if desired < current:
            desired = min(current, max(r for _, r in self._recs))
        if desired == current:
            return
        reason = "scale_up" if desired > current else "scale_down"
        _scale(self, now, desired, reason, metric=round(total / ready, 2))
