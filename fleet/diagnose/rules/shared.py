"""What the rules share: thresholds (each names its source), the state earlier rules leave for later
ones, small statistics over samples, and the ESS activity-cause parser the reader uses."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fleet.diagnose import fixes
from fleet.diagnose.model import (
    InstanceWindow,
    Window,
    isoformat,
)
from policies import metrics as pm

# ---- thresholds --------------------------------------------------------------------------------------------
HOT_C = 85.0  # issue 10 and the isolation rules' gpu_overheat; NVIDIA data-centre slowdown starts ~87-90 C
THROTTLED_CLOCK_RATIO = 0.9  # SM clock below 90% of its maximum is a real slowdown, not boost jitter
KV_FULL_PCT = 90.0  # "near full" (issue 10); vLLM preempts at 100%
BW_BOUND_PCT = 90.0  # memory-bandwidth utilization above ~90% (issue 10): the fallback threshold
# ... which is this share of a 100% ceiling. Where the sizing model knows the deployment, the threshold is
# this share of the busy share its bandwidth-limited decode iteration reaches (TP all-reduces leave memory
# idle, so a TP > 1 engine never reads 100%).
BW_NEAR_CEILING = 0.9
SATURATED_UTIL_PCT = 90.0  # "GPU utilization ~100%": nvidia-smi's busy share of time
QUEUE_PER_INSTANCE = 2.0  # waiting requests per instance that count as a queue (the example config's rule)
OUTLIER_FACTOR = 2.0  # an instance's P99 over twice its peers' median (the isolation rules' peer_factor)
OUTLIER_MIN_PEERS = 2
# A node whose SM clock runs at most this share of its peers' median clock (and below
# THROTTLED_CLOCK_RATIO) is slow for that reason; TPOT this many times its peers' then suffices (a decode
# step is partly memory-bound, so a clock at 55% makes it well under 2x slower): a card throttled without
# a published reason.
CLOCK_BELOW_PEERS = 0.85
CLOCK_OUTLIER_FACTOR = 1.3
SUSTAINED = 0.5  # share of an instance's samples a condition must hold in
STALE_PERIODS = 4  # an agent silent for this many periods at the window's end has stopped
DEFAULT_QUEUE_LIMIT = 64  # the simulator's and a typical gateway's max waiting per instance
DEFAULT_SLO_TTFT_MS = 2000.0  # when the config names no TTFT SLO (the example fleet's SLO)
LATENCY_WINDOW_S = 60.0  # the longest percentile window of a source: Prometheus' rate()[1m]

# Signals the node agent always publishes while it and vLLM run (fleet/agent/sample.py).
AGENT_METRICS = (pm.QUEUE_WAITING, pm.REQUESTS_RUNNING, pm.KV_CACHE_USAGE_PCT)
# Signals of CloudMonitor's own GPU monitoring (acs_ecs_dashboard, the CloudMonitor agent's GPU plugin).
DASHBOARD_METRICS = (pm.GPU_UTIL_PCT, pm.GPU_TEMPERATURE_C)

THERMAL_BITS = int(pm.ThrottleReason.SW_THERMAL | pm.ThrottleReason.HW_THERMAL)
POWER_BITS = int(pm.ThrottleReason.SW_POWER_CAP | pm.ThrottleReason.HW_POWER_BRAKE)
HW_SLOWDOWN_BIT = int(pm.ThrottleReason.HW_SLOWDOWN)

# Most important first: severity, then how much of the picture the kind explains. A hardware XID leads: the
# GPU is gone (its requests fail, its agent often stops), and it explains the node's other symptoms.
KIND_ORDER = (
    "gpu_xid_error",
    "metrics_missing",
    "undersized_fleet",
    "cold_start",
    "kv_cache_pressure",
    "queue_backlog",
    "thermal_throttling",
    "power_throttling",
    "node_outlier",
    "memory_bandwidth_bound",
    "slo_violated_unexplained",
)
KINDS = KIND_ORDER
_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


@dataclass
class _State:
    """What earlier rules established for later ones."""

    window: Window
    serving: list[InstanceWindow]
    measured: list[InstanceWindow]  # serving and publishing the agent's metrics
    # instances without vLLM's metrics from the agent: the last sample when they stopped, None when absent
    # (the node rules still read their samples: a node fault often stops the agent, and CloudMonitor's own
    # GPU metrics keep coming)
    agent_stopped: dict[str, datetime | None] = field(default_factory=dict)
    stopped_by_fault: set[str] = field(default_factory=set)  # ... because of a node fault: its consequence
    explained: set[str] = field(default_factory=set)  # instances whose slowness a node finding explains
    steady_from: datetime | None = None  # queue rules look from here (after cold starts)
    kv_bound: set[str] = field(default_factory=set)
    slo_ttft_ms: float = DEFAULT_SLO_TTFT_MS


# ---- small statistics --------------------------------------------------------------------------------------
def _frac(values: Sequence[float], pred: Any) -> float:
    return sum(1 for v in values if pred(v)) / len(values) if values else 0.0


def _median(values: Iterable[float]) -> float | None:
    vs = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(vs) if vs else None


def _mean(values: Iterable[float]) -> float | None:
    vs = [v for v in values if v is not None and math.isfinite(v)]
    return sum(vs) / len(vs) if vs else None


def _thirds(values: Sequence[float]) -> tuple[float, float]:
    """Mean of the first and of the last third of a series."""
    n = max(1, len(values) // 3)
    return sum(values[:n]) / n, sum(values[-n:]) / n


def _corr(xs: Sequence[float], ys: Sequence[float]) -> float:
    if len(xs) < 4:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx <= 0 or syy <= 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / math.sqrt(sxx * syy)


def _after(series: Sequence[tuple[datetime, float]], since: datetime | None) -> list[float]:
    return [v for t, v in series if since is None or t >= since]


def _span(w: Window) -> dict[str, str]:
    return {"start": isoformat(w.start), "end": isoformat(w.end)}


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)


def _by_time(inst: InstanceWindow, metric: str) -> dict[datetime, float]:
    return dict(inst.metrics.get(metric, ()))


def _max_num_seqs(st: _State) -> int | None:
    g = st.window.group
    if g.max_num_seqs:
        return g.max_num_seqs
    d = fixes.deployment(g)
    return d.max_num_seqs if d else None


def _tokens_per_seq(st: _State, insts: Sequence[InstanceWindow]) -> float:
    """Context tokens per running sequence: KV cache in use over the batch, else the request mix.

    A sample whose KV cache in use is less than one block per running sequence (0% with requests running: a
    gauge not updated yet, or a vLLM release publishing it wrong) is no reading of the context: each running
    sequence holds at least one block (:func:`fixes.kv_reading_plausible`). Such samples are left out; with
    none left, the request mix says."""
    d = fixes.deployment(st.window.group)
    ratios: list[float] = []
    if d is not None:
        for inst in insts:
            kv = _by_time(inst, pm.KV_CACHE_USAGE_PCT)
            for t, n in inst.metrics.get(pm.REQUESTS_RUNNING, ()):
                if n >= 1 and t in kv and fixes.kv_reading_plausible(d, kv[t], n):
                    ratios.append(kv[t] / 100.0 * d.kv_cache_tokens / n)
    if ratios:
        return statistics.median(ratios)
    prompt, output = fixes.request_sizes(st.window.group)
    return prompt + output / 2


_ACTIVITY_RE = re.compile(r'from "?(\d+)"? to "?(\d+)"?', re.IGNORECASE)


def parse_scale_out(cause: str | None) -> tuple[int, int] | None:
    """(from, to) of an ESS activity's cause when it raised the capacity (``... from "2" to "4"``)."""
    if not cause:
        return None
    m = _ACTIVITY_RE.search(cause)
    if not m:
        return None
    a, b = int(m.group(1)), int(m.group(2))
    return (a, b) if b > a else None
