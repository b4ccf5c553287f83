"""The hindsight fleet: the lower bound on GPU-hours that no live controller can beat
(``../shared/reference/capacity-control.md``).

The oracle knows every arrival of the run. Each minute's arrivals need ``ceil(rate / capacity)`` instances at
the capacity one instance serves within the SLO (the same capacity test that sizes static provisioning), and
the oracle holds, at every moment ``t``, the most that any minute in ``[t, t + lead]`` needs, where ``lead``
is the group's ``cold_start_s`` plus the oracle's own tick and the world's sync period (the latest an order
can be seen). So every instance is ordered one cold start before the minute that needs it, and released as
soon as no minute within a cold start needs it (keeping it is cheaper than releasing it and ordering it
again). The group's ``[min_size, max_size]`` still bound it, as they bound every policy.

Minute means at a Poisson capacity are not enough where arrivals burst inside a minute, so the oracle also
uses what it knows of its own run: minutes that broke the SLO get more instances, and the run is repeated
until no minute breaks it (``REFINEMENTS`` times at most, ``scenario.simulate``). The reference defines the
oracle as the fleet that has what the load needs *within the SLO*: a plan that still breaks it is not yet
the floor that the other policies' GPU-hours are measured against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from fleet.sim.baselines import ControllerStats, _current_size, _scale

MINUTE_S = 60.0


def _counts(arrival_s: Sequence[float], bucket_s: float, buckets: int) -> list[int]:
    """Arrivals per bucket of ``bucket_s`` seconds, the first ``buckets`` of them."""
    counts = [0] * max(0, buckets)
    for t in arrival_s:
        b = int(t // bucket_s)
        if 0 <= b < len(counts):
            counts[b] += 1
    return counts


def minute_need(arrival_s: Sequence[float], capacity_rps: float, minutes: int) -> tuple[int, ...]:
    """Instances each minute's arrivals need at ``capacity_rps`` per instance (0 for a minute without any)."""
    return tuple(
        math.ceil(c / MINUTE_S / max(1e-9, capacity_rps)) for c in _counts(arrival_s, MINUTE_S, minutes)
    )


# ServeGen's windows: the rate curve moves every 10 minutes, the clumps come inside a window.
LEVEL_WINDOW_S = 600.0


def level_need(
    arrival_s: Sequence[float],
    capacity_rps: float,
    minutes: int,
    headroom: float,
    window_s: float = LEVEL_WINDOW_S,
) -> tuple[int, ...]:
    """The *level oracle*'s need: ``headroom`` times the instances each minute's window's mean rate needs.

    It knows the future level exactly (a perfect forecast of the rate curve) but not where the clumps fall
    inside a window: the best any controller blind to the clumps could hold with one uniform margin. Run at a
    few margins (``benchmarks/level_oracle.py``) it draws the frontier of SLO minutes against GPU-hours that
    separates what a better forecast can win from what only foresight of the clumps can.
    """
    windows = _counts(arrival_s, window_s, math.ceil(minutes * MINUTE_S / window_s - 1e-9))
    cap = max(1e-9, capacity_rps)
    return tuple(
        math.ceil(headroom * windows[int(m * MINUTE_S // window_s)] / window_s / cap - 1e-9)
        for m in range(max(0, minutes))
    )


# Hindsight corrections: minute means at the Poisson capacity leave the minutes whose arrivals burst inside
# the minute (ServeGen's recorded inter-arrival CV reaches 8) over the SLO. The oracle knows how its run went:
# each pass adds a fifth (at least one instance) to every minute over the SLO and the minute before it (where
# the queue built up), and runs again until no judged minute breaks the SLO, up to this many times. Measured
# on the ServeGen days: the minutes over the SLO roughly halve per pass (m-mid day 2: 841 at the minute means,
# 158 after three passes, 0 after ten), so three passes stopped at a plan that broke the SLO for hours
# (docs/simulator.md).
REFINEMENTS = 14
REFINE_SHARE = 0.2


def bump_need(need: Sequence[int], minutes: Sequence[int], share: float = REFINE_SHARE) -> tuple[int, ...]:
    """``need`` with ``share`` more (at least one) in each of ``minutes`` and the minute before each."""
    out = list(need)
    hit = {k for m in minutes for k in (m - 1, m) if 0 <= k < len(out)}
    for k in hit:
        out[k] += max(1, math.ceil(share * out[k]))
    return tuple(out)


def desired_at(need: Sequence[int], t_s: float, lead_s: float, min_size: int, max_size: int) -> int:
    """What the oracle holds at ``t_s``: the most any minute overlapping ``[t_s, t_s + lead_s]`` needs."""
    if not need:
        return min_size
    first = max(0, min(len(need) - 1, int(t_s // MINUTE_S)))
    last = max(first, min(len(need) - 1, int((t_s + lead_s) // MINUTE_S)))
    return min(max_size, max(min_size, max(need[first : last + 1])))


def plan_per_minute(need: Sequence[int], lead_s: float, min_size: int, max_size: int) -> list[int]:
    """The oracle's capacity at the start of every minute (the report draws it against the policy's)."""
    return [desired_at(need, m * MINUTE_S, lead_s, min_size, max_size) for m in range(len(need))]


class Oracle:
    """Writes the hindsight plan through ESS, one capacity change whenever the plan's count changes."""

    name = "oracle"
    period_s = 15.0

    def __init__(
        self,
        ess: Any,
        group_id: str,
        need: Sequence[int],
        *,
        start: datetime,
        lead_s: float,
        min_size: int,
        max_size: int,
    ) -> None:
        self.ess, self.group_id = ess, group_id
        self.need, self.start, self.lead_s = tuple(need), start, lead_s
        self.min_size, self.max_size = min_size, max_size
        self.stats = ControllerStats()

    def tick(self, now: datetime) -> None:
        t_s = (now - self.start).total_seconds()
        target = desired_at(self.need, t_s, self.lead_s, self.min_size, self.max_size)
        group = self.ess.describe_scaling_groups([self.group_id])[0]
        current = _current_size(group)
        if target == current:
            return
        _scale(self, now, target, "hindsight_up" if target > current else "hindsight_down")


def lead_s(cold_start_s: float, tick_s: float = Oracle.period_s, sync_s: float = 5.0) -> float:
    """How far ahead the oracle orders: the cold start, plus the delay before its order is seen."""
    return cold_start_s + tick_s + sync_s
