"""The boundary check on metric samples: a value no real source can produce is dropped before it reaches the
snapshot, as if the instance had not reported it.

Any instance can publish custom metrics (``PutCustomMetric`` needs no more than the instance's own RAM role),
so one broken or hostile agent must not stop the fleet: a NaN, an infinity, a negative count or a value near
1e308 (whose sum over a group overflows to infinity) becomes *missing*, which the policies already treat as
unknown, never zero. Points dated too far in the future are dropped too: their age cannot be known, so
``stale_after`` could not refuse them. Each bad (instance, metric) pair is logged once, with the metric's
name, until that instance reports a good value again, so a stuck agent does not flood the log every tick.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from datetime import datetime, timedelta

from fleet.cloud.types import MetricPoint
from policies import metrics as pm

log = logging.getLogger("fleet.service.observe")

# Far above any real gauge (queue lengths, milliseconds, watts, percents), far below where a sum of a few
# thousand instances could overflow a float or the audit's integer columns.
MAX_GAUGE_VALUE = 1e12
# Bit masks and codes are integers. NVML's clock-event reason bits all lie below 2**9 (policies.metrics
# ThrottleReason), so a mask of 2**32 or more is no GPU's; XIDs are small numbers (the NVIDIA catalogue stops
# well below 1000), 2**31 leaves room for new codes.
# The demand metrics size the fleet: a rate near 1e12 passed the gauges' bound, summed into the group's
# demand, drove the forecast's target to max_size (held there for the scale-in window) and, kept in the
# demand log, raised the same hour's forecast the next day and the next week. One vLLM API server takes a
# few thousand small requests a second at most; no model's context window reaches 2**24 tokens (10M at most).
MAX_REQUEST_RATE_PER_INSTANCE = 1e4
MAX_TOKENS_PER_REQUEST = float(2**24)
MAX_VALUE: dict[str, float] = {
    pm.GPU_THROTTLE_REASONS: float(2**32 - 1),
    pm.GPU_XID: float(2**31),
    pm.REQUEST_RATE: MAX_REQUEST_RATE_PER_INSTANCE,
    pm.PROMPT_TOKENS_PER_REQUEST: MAX_TOKENS_PER_REQUEST,
    pm.OUTPUT_TOKENS_PER_REQUEST: MAX_TOKENS_PER_REQUEST,
}
INTEGRAL_METRICS = frozenset({pm.GPU_THROTTLE_REASONS, pm.GPU_XID})
# Replica and source clocks are kept by NTP within well under a second; CloudMonitor stamps a point with the
# start of its period, never later. More than this ahead of ``now`` is a wrong clock, not a fresh sample.
FUTURE_TOLERANCE_S = 30.0


def problem(canonical: str, value: float | None, at: datetime, now: datetime) -> str | None:
    """Why a point of ``canonical`` cannot be trusted, or None when it can (None values are simply absent)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"value {value!r} is not a number"
    v = float(value)
    if not math.isfinite(v):
        return f"value {v} is not finite"
    if v < 0:
        return f"value {v:g} is negative"
    if v > MAX_VALUE.get(canonical, MAX_GAUGE_VALUE):
        return f"value {v:g} is beyond any real reading"
    if canonical.endswith("_pct") and v > 100.0 + 1e-9:
        return f"value {v:g} is above 100 %"
    if canonical in INTEGRAL_METRICS and not v.is_integer():
        return f"value {v:g} is not an integer"
    if at > now + timedelta(seconds=FUTURE_TOLERANCE_S):
        return f"dated {at.isoformat()}, in the future (now {now.isoformat()})"
    return None


class SampleGuard:
    """Filters the points of each metric read; remembers which (instance, metric) pairs were reported bad."""

    def __init__(self) -> None:
        self._reported: set[tuple[str, str]] = set()

    def filter(
        self, group: str, canonical: str, source_name: str, points: Iterable[MetricPoint], now: datetime
    ) -> list[MetricPoint]:
        """The trustworthy points; each newly bad instance is logged once with the metric's source name."""
        good: list[MetricPoint] = []
        bad: dict[str, str] = {}
        for p in points:
            why = problem(canonical, p.value, p.timestamp, now)
            if why is None:
                good.append(p)
            elif p.instance_id is not None:
                bad.setdefault(p.instance_id, why)
        healthy = {p.instance_id for p in good if p.value is not None} - set(bad)
        self._reported -= {(iid, canonical) for iid in healthy}
        for iid, why in sorted(bad.items()):
            if (iid, canonical) in self._reported:
                continue
            self._reported.add((iid, canonical))
            log.warning(
                "group %s: instance %s sent a bad %s sample (%s, %s): ignored, the metric is unknown for it",
                group,
                iid,
                canonical,
                source_name,
                why,
                extra={"group": group, "instance_id": iid, "metric": canonical},
            )
        return good
