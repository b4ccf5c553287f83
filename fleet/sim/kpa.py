"""The Knative Pod Autoscaler (KPA) as AIBrix runs it, on concurrency per instance: the strongest reactive
baseline for LLM serving (``../shared/reference/autoscaling-anchors.md`` section 1, ``capacity-control.md``).

Every ``tick_s`` it reads each InService instance's running and waiting requests (the node agent's
``vllm_num_requests_running`` + ``vllm_num_requests_waiting``: Knative's "concurrency"), sums them, and keeps
the sums of the last ``stable_window_s``. Then, as Knative's ``autoscaler.go`` does:

* ``desired_stable = ceil(mean over the stable window / target)``, ``desired_panic`` the same over the panic
  window, both clamped to ``[floor(ready / max_scale_down_rate), ceil(ready * max_scale_up_rate)]``;
* panic starts when ``desired_panic / ready >= panic_threshold`` and ends once it has not held for a whole
  stable window; while panicking the count follows the panic window and never goes down;
* otherwise it follows the stable window, and a scale-down takes the highest recommendation of the last
  ``scale_down_delay_s`` (AIBrix's 300 s down-cooldown).

The target (concurrency per instance) comes from the same capacity test as static provisioning: the requests
in flight on one instance at the highest Poisson rate it serves within the SLO, at Knative's default 70 %
target utilization. Nothing here is tuned against ours.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fleet.sim.baselines import ControllerStats, _current_size, _scale

RUNNING_METRIC = "vllm_num_requests_running"
WAITING_METRIC = "vllm_num_requests_waiting"


@dataclass(frozen=True)
class KpaParams:
    # AIBrix's KPA defaults (autoscaling-anchors.md section 1): reconcile every 10 s, stable window 180 s,
    # panic window 60 s, panic threshold 2.0 (panic / ready), scale-up and scale-down rates 2, down cooldown
    # 300 s. (Knative's own: stable 60 s, panic 10 % of it, scale-up rate 1000, scale-down delay 0.)
    tick_s: float = 10.0
    stable_window_s: float = 180.0
    panic_window_s: float = 60.0
    panic_threshold: float = 2.0
    max_scale_up_rate: float = 2.0
    max_scale_down_rate: float = 2.0
    scale_down_delay_s: float = 300.0
    # A metric older than this is not the instance's concurrency now (the agent publishes every 15 s).
    stale_s: float = 45.0


@dataclass(frozen=True)
class KpaDecision:
    """One recommendation, with what it was made from."""

    desired: int
    stable: float
    panic: float
    ready: int
    panicking: bool


class KpaState:
    """The autoscaler's memory: the concurrency samples, the panic start and its highest count, the last
    recommendations (all explicit, as the shell would persist them)."""

    def __init__(self) -> None:
        self.samples: deque[tuple[datetime, float]] = deque()
        self.panic_since: datetime | None = None
        self.max_panic = 0
        self.recs: deque[tuple[datetime, int]] = deque()
        self.first_sample: datetime | None = None


def _window_mean(samples: deque[tuple[datetime, float]], now: datetime, window_s: float) -> float:
    vals = [v for at, v in samples if (now - at).total_seconds() < window_s]
    return sum(vals) / len(vals) if vals else 0.0


def recommend(
    state: KpaState, now: datetime, total: float, ready: int, current: int, target: float, p: KpaParams
) -> KpaDecision:
    """One KPA step: records ``total`` concurrency and returns the desired count (before min/max)."""
    state.samples.append((now, total))
    if state.first_sample is None:
        state.first_sample = now
    while state.samples and (now - state.samples[0][0]).total_seconds() >= p.stable_window_s:
        state.samples.popleft()
    stable = _window_mean(state.samples, now, p.stable_window_s)
    panic = _window_mean(state.samples, now, p.panic_window_s)
    ready = max(1, ready)
    up = math.ceil(ready * p.max_scale_up_rate)
    down = math.floor(ready / p.max_scale_down_rate)
    want_stable = min(up, max(down, math.ceil(stable / target)))
    want_panic = min(up, max(down, math.ceil(panic / target)))
    over = want_panic / ready >= p.panic_threshold
    if over:
        state.panic_since = now  # panic starts, or (as Knative does) its clock restarts while it holds
    elif state.panic_since is not None and (now - state.panic_since).total_seconds() >= p.stable_window_s:
        state.panic_since, state.max_panic = None, 0
    if state.panic_since is not None:
        desired = max(want_panic, state.max_panic, current)  # never down while panicking
        state.max_panic = desired
    else:
        desired = want_stable
    state.recs.append((now, desired))
    while state.recs and (now - state.recs[0][0]).total_seconds() > p.scale_down_delay_s:
        state.recs.popleft()
    if desired < current:
        desired = min(current, max(r for _, r in state.recs))
    if (now - state.first_sample).total_seconds() < p.stable_window_s:
        # A window not yet full is not the stable demand: a fresh autoscaler does not scale in on it.
        desired = max(desired, current)
    return KpaDecision(desired, stable, panic, ready, state.panic_since is not None)


class Kpa:
    """The KPA on the group's concurrency, writing through the same ESS adapter as every policy."""

    name = "kpa"

    def __init__(
        self,
        ess: Any,
        cms: Any,
        group_id: str,
        min_size: int,
        max_size: int,
        target: float,
        params: KpaParams | None = None,
    ) -> None:
        if not target > 0:
            raise ValueError(f"KPA target must be positive, got {target}")
        self.ess, self.cms, self.group_id = ess, cms, group_id
        self.min_size, self.max_size, self.target = min_size, max_size, target
        self.p = params or KpaParams()
        self.period_s = float(self.p.tick_s)
        self.stats = ControllerStats()
        self.state = KpaState()

    def _concurrency(self, now: datetime, ids: list[str]) -> dict[str, float]:
        fresh: dict[str, float] = {}
        for metric in (RUNNING_METRIC, WAITING_METRIC):
            for pt in self.cms.metric_last(self.cms.custom_namespace, metric, ids):
                age_s = (now - pt.timestamp).total_seconds()
                if pt.value is not None and age_s <= self.p.stale_s:
                    fresh[pt.instance_id] = fresh.get(pt.instance_id, 0.0) + pt.value
        return fresh

    def tick(self, now: datetime) -> None:
        group = self.ess.describe_scaling_groups([self.group_id])[0]
        current = _current_size(group)
        ids = [i.instance_id for i in self.ess.describe_scaling_instances(self.group_id, ["InService"])]
        fresh = self._concurrency(now, ids) if ids else {}
        if not fresh:
            return  # no metric: the autoscaler holds (Knative keeps the last scale)
        d = recommend(self.state, now, sum(fresh.values()), len(fresh), current, self.target, self.p)
        desired = min(self.max_size, max(self.min_size, d.desired))
        if desired == current:
            return
        _scale(
            self,
            now,
            desired,
            ("panic_" if d.panicking else "stable_") + ("up" if desired > current else "down"),
            concurrency_stable=round(d.stable, 1),
            concurrency_panic=round(d.panic, 1),
            ready=d.ready,
            target_concurrency=round(self.target, 2),
        )


__all__ = ["Kpa", "KpaParams", "KpaState", "recommend"]
