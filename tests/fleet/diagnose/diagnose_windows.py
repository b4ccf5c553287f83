"""Synthetic diagnosis windows: a healthy fleet of four instances over eight minutes, changed per test."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from fleet.diagnose.model import GroupContext, InstanceWindow, Window

T0 = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)
PERIOD_S = 15
SAMPLES = 32  # eight minutes at the agent's 15 s period
IDS = ("i-a", "i-b", "i-c", "i-d")

# What a healthy instance of the simulator's default fleet reports at ~40% load (see healthy-steady).
HEALTHY: dict[str, float] = {
    "queue_waiting": 0.0,
    "requests_running": 8.0,
    "kv_cache_usage_pct": 25.0,
    "gpu_util_pct": 96.0,
    "gpu_mem_bw_util_pct": 63.0,
    "ttft_p99_ms": 1300.0,
    "tpot_p99_ms": 70.0,
    "e2e_p99_ms": 15000.0,
    "latency_p95_ms": 12000.0,
    "gpu_temperature_c": 73.0,
    "gpu_sm_clock_ratio": 1.0,
    "gpu_throttle_reasons": 0.0,
    "gpu_power_w": 250.0,
    "gpu_mem_used_pct": 88.0,
    "gpu_xid": 0.0,
    "request_rate_rps": 0.8,
}

Value = float | Callable[[int], float | None]


def times(n: int = SAMPLES, start: datetime = T0) -> list[datetime]:
    return [start + timedelta(seconds=PERIOD_S * (k + 1)) for k in range(n)]


def make_window(
    changes: dict[str, dict[str, Value]] | None = None,
    *,
    ids: tuple[str, ...] = IDS,
    group: dict[str, Any] | None = None,
    drop: dict[str, tuple[str, ...]] | None = None,
    created: dict[str, datetime] | None = None,
    first_sample: dict[str, int] | None = None,
    scale_outs: list[tuple[datetime, int, int]] | None = None,
    errors: list[str] | None = None,
) -> Window:
    """A window of ``ids`` reporting :data:`HEALTHY`, with per-instance ``changes`` (a constant or a function
    of the sample index; None leaves the sample out; a metric not in HEALTHY is reported where named),
    ``drop``ped metrics, and late first samples."""
    changes = changes or {}
    drop = drop or {}
    ts = times()
    instances = []
    for iid in ids:
        metrics: dict[str, list[tuple[datetime, float]]] = {}
        # metrics a healthy instance does not report (preemptions, say) appear where a change names them
        named = {n: 0.0 for c in (changes.get(iid, {}), changes.get("*", {})) for n in c if n not in HEALTHY}
        for name, base in {**HEALTHY, **named}.items():
            if name in drop.get(iid, ()) or name in drop.get("*", ()):
                continue
            value = changes.get(iid, changes.get("*", {})).get(name, base)
            if iid in changes and "*" in changes and name not in changes[iid]:
                value = changes["*"].get(name, base)
            series = []
            for k, t in enumerate(ts):
                if k < (first_sample or {}).get(iid, 0):
                    continue
                v = value(k) if callable(value) else value
                if v is not None:
                    series.append((t, float(v)))
            metrics[name] = series
        instances.append(
            InstanceWindow(iid, "InService", (created or {}).get(iid, T0 - timedelta(hours=1)), metrics)
        )
    ctx = GroupContext(name="chat", cold_start_s=240.0, slo_ttft_p99_ms=2000.0, **(group or {}))
    return Window(
        group=ctx,
        start=T0,
        end=ts[-1],
        instances=instances,
        scale_outs=scale_outs or [],
        errors=errors or [],
    )
