"""Reading a group snapshot: instance classes by lifecycle state, fresh samples, group metric aggregates.

A sample older than ``stale_after_s`` is *unknown*, never zero (KEDA #3065 scaled a fleet to its minimum at
peak by reading an empty query as 0). Aggregates say how many InService instances they cover, so that a
partial view can still drive a scale-out but never a scale-in. One absence is known rather than unknown: an
instance with no latency percentile whose fresh queue and running requests both read 0 served nothing in the
window (``metrics.LATENCY_METRICS``); it is covered and adds no latency, and a group of idle instances reads
a latency of 0. Without that, a fleet with no traffic (a night, a weekend) never scaled in on rules that
include a latency: every instance's percentile was missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from policies import metrics as m
from policies.model import GroupSnapshot, InstanceSnapshot, LifecycleState, MetricSample

_L = LifecycleState
SERVING_STATES = frozenset({_L.IN_SERVICE, _L.PROTECTED})
PENDING_STATES = frozenset({_L.PENDING, _L.PENDING_WAIT})
STANDBY_STATES = frozenset({_L.STANDBY})
LEAVING_STATES = frozenset({_L.REMOVING, _L.REMOVING_WAIT, _L.STOPPED, _L.STOPPING})
KNOWN_STATES = SERVING_STATES | PENDING_STATES | STANDBY_STATES | LEAVING_STATES


@dataclass
class GroupView:
    serving: list[InstanceSnapshot]
    pending: list[InstanceSnapshot]
    standby: list[InstanceSnapshot]
    leaving: list[InstanceSnapshot]
    unknown: list[InstanceSnapshot]
    in_flight: int  # ordered through DesiredCapacity but not launched yet

    @property
    def current_serving(self) -> int:
        return len(self.serving) + len(self.pending) + self.in_flight

    @property
    def size(self) -> int:
        return len(self.serving) + len(self.pending) + len(self.standby)


def classify(group: GroupSnapshot) -> GroupView:
    serving, pending, standby, leaving, unknown = [], [], [], [], []
    for inst in sorted(group.instances, key=lambda i: i.instance_id):
        state = inst.lifecycle_state
        if state in SERVING_STATES:
            serving.append(inst)
        elif state in PENDING_STATES:
            pending.append(inst)
        elif state in STANDBY_STATES:
            standby.append(inst)
        elif state in LEAVING_STATES:
            leaving.append(inst)
        else:
            unknown.append(inst)
    counted = len(serving) + len(pending) + len(standby)
    in_flight = 0
    if group.desired_capacity is not None and group.desired_capacity > counted:
        # ESS accepted a higher DesiredCapacity but has not created the instances yet: capacity on the way
        in_flight = group.desired_capacity - counted
    return GroupView(serving, pending, standby, leaving, unknown, in_flight)


# How far ahead of ``now`` a sample may be dated and still count: replica and source clocks agree (NTP) within
# well under a second, and CloudMonitor dates a point at the start of its period. A sample from further ahead
# has an unknowable age, so ``stale_after`` could not refuse it: it is unknown, like a stale one.
FUTURE_TOLERANCE_S = 30.0


def fresh(sample: MetricSample | None, now: datetime, stale_after_s: float) -> bool:
    return _within(
        sample, now - timedelta(seconds=stale_after_s), now + timedelta(seconds=FUTURE_TOLERANCE_S)
    )


def freshness(now: datetime, stale_after_s: float) -> Callable[[MetricSample | None], bool]:
    """``fresh`` at one ``now`` for many samples: the window's bounds computed once."""
    oldest, newest = now - timedelta(seconds=stale_after_s), now + timedelta(seconds=FUTURE_TOLERANCE_S)
    return lambda sample: _within(sample, oldest, newest)


def _within(sample: MetricSample | None, oldest: datetime, newest: datetime) -> bool:
    return sample is not None and oldest <= sample.at <= newest and math.isfinite(sample.value)


@dataclass
class Aggregate:
    """A group metric as seen now: ``value`` is None when unknown."""

    metric: str
    value: float | None
    covered: int  # InService instances with a fresh sample (or all, for a direct group metric)
    expected: int  # InService instances
    missing: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.value is not None and self.covered >= self.expected


def aggregate(
    metric: str,
    aggregation: str,
    group: GroupSnapshot,
    serving: list[InstanceSnapshot],
    now: datetime,
    stale_after_s: float,
) -> Aggregate:
    direct = group.group_metrics.get(metric)
    if fresh(direct, now, stale_after_s):
        assert direct is not None
        return Aggregate(metric, direct.value, len(serving), len(serving))
    source = m.GROUP_METRICS[metric][0]
    values: list[float] = []
    missing: list[str] = []
    stale: list[str] = []
    idle_count = 0
    for inst in serving:
        sample = inst.metrics.get(source)
        if fresh(sample, now, stale_after_s):
            assert sample is not None
            values.append(sample.value)
        elif source in m.LATENCY_METRICS and idle(inst, now, stale_after_s):
            idle_count += 1
        elif sample is None:
            missing.append(inst.instance_id)
        else:
            stale.append(inst.instance_id)
    if direct is not None and not values and not idle_count:
        stale.append("<group>")
    value: float | None
    if not values:
        value = 0.0 if idle_count else None  # every instance known idle: no request waited
    elif aggregation in ("per_instance", "mean"):
        # per_instance: sum over InService / their count; with partial coverage the known mean stands in
        value = sum(values) / len(values)
    elif aggregation == "max":
        value = max(values)
    elif aggregation == "min":
        value = min(values)
    else:  # sum
        value = sum(values) * len(serving) / len(values)
    return Aggregate(metric, value, len(values) + idle_count, len(serving), missing, stale)


def idle(inst: InstanceSnapshot, now: datetime, stale_after_s: float) -> bool:
    """Fresh readings say the instance holds no request, waiting or running (a drain's end, too)."""
    samples = [inst.metrics.get(name) for name in m.IDLE_EVIDENCE]
    return all(s is not None and fresh(s, now, stale_after_s) and s.value <= 0 for s in samples)
