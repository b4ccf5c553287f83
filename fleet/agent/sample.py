"""One period's sample, and the names and values it publishes (to CloudMonitor and Prometheus alike).

Instance-level names are the ones the service reads (issue 5 and the policy metric contract) plus the agent's
own health. Per-GPU values carry an extra ``gpu`` dimension *and* a distinct ``gpu_device_`` name: a query by
``instanceId`` alone must never mix a per-GPU series into an instance-level one (``gpu_throttle_reasons``).

Values absent this period (vLLM down, no request finished in the window, a field the GPU does not support)
are left out rather than published as zero: a missing point is honest, a zero would read as "idle".
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fleet.agent.clock import StampResult
from fleet.agent.nvml import THROTTLE_MASK, GpuReading, GpuSnapshot
from fleet.agent.vllm import VllmReading
from policies.metrics import xid_severity

# Instance-level custom metric names the service maps to policy metrics (keep them: issue 5, brief contract).
INSTANCE_METRICS_READ_BY_SERVICE = (
    "vllm_num_requests_waiting",
    "vllm_num_requests_running",
    "vllm_ttft_p99_ms",
    "vllm_tpot_p99_ms",
    "vllm_e2e_p99_ms",
    "vllm_e2e_p95_ms",
    "vllm_kv_cache_usage_pct",
    "gpu_throttle_reasons",
    "gpu_xid",
    "gpu_mem_bw_util",
    "gpu_sm_clock_ratio",
    "vllm_request_rate",
    "vllm_prompt_tokens_per_request",
    "vllm_output_tokens_per_request",
    "vllm_up",
    "gpu_row_remap",
)

# Per-GPU metric name -> GpuReading field.
GPU_DEVICE_METRICS: dict[str, str] = {
    "gpu_device_util_pct": "util_pct",
    "gpu_device_mem_used_pct": "mem_used_pct",
    "gpu_device_mem_bw_util_pct": "mem_bw_util_pct",
    "gpu_device_temperature_c": "temperature_c",
    "gpu_device_sm_clock_ratio": "sm_clock_ratio",
    "gpu_device_power_w": "power_w",
    "gpu_device_power_limit_w": "power_limit_w",
    "gpu_device_throttle_reasons": "clock_event_reasons_raw",
    "gpu_device_ecc_uncorrected": "ecc_uncorrected_volatile",
    "gpu_device_xid": "last_xid",
    "gpu_device_row_remap": "row_remap_state",
}


@dataclass(frozen=True)
class Point:
    """One value to publish: a name, its dimensions, the value and when it was taken (ms since the epoch)."""

    name: str
    dimensions: dict[str, str]
    value: float
    timestamp_ms: int


@dataclass
class PublishStatus:
    """What the CloudMonitor publisher did with this and earlier samples."""

    enabled: bool
    sent_points: int = 0  # this period, including backlog
    buffered_points: int = 0  # waiting for the next try
    dropped_points_total: int = 0  # oldest points dropped to keep the buffer bounded
    rejected_points_total: int = 0  # refused by CMS as invalid (never retried)
    last_error: str | None = None


@dataclass
class Sample:
    """Everything the agent learned in one period."""

    instance_id: str
    clock: StampResult
    gpu: GpuSnapshot
    vllm: VllmReading
    publish: PublishStatus = field(default_factory=lambda: PublishStatus(enabled=False))

    @property
    def timestamp_ms(self) -> int | None:
        return self.clock.timestamp_ms


def _max(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _min(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def instance_values(sample: Sample) -> dict[str, float]:
    """Instance-level values this period, by published name."""
    out: dict[str, float] = {}
    v = sample.vllm
    out["vllm_up"] = 1.0 if v.up else 0.0
    optional: dict[str, float | None] = {
        "vllm_num_requests_waiting": v.num_requests_waiting,
        "vllm_num_requests_running": v.num_requests_running,
        "vllm_kv_cache_usage_pct": v.kv_cache_usage_pct,
        "vllm_ttft_p50_ms": v.ttft.p50_ms,
        "vllm_ttft_p95_ms": v.ttft.p95_ms,
        "vllm_ttft_p99_ms": v.ttft.p99_ms,
        "vllm_tpot_p50_ms": v.tpot.p50_ms,
        "vllm_tpot_p95_ms": v.tpot.p95_ms,
        "vllm_tpot_p99_ms": v.tpot.p99_ms,
        "vllm_e2e_p50_ms": v.e2e.p50_ms,
        "vllm_e2e_p95_ms": v.e2e.p95_ms,
        "vllm_e2e_p99_ms": v.e2e.p99_ms,
        "vllm_request_rate_per_s": v.request_rate_per_s,
        # demand signals (issue 16): arrivals per second and the token mix of the window's requests
        "vllm_request_rate": v.arrival_rate_per_s,
        "vllm_prompt_tokens_per_request": v.prompt_tokens_per_request,
        "vllm_output_tokens_per_request": v.output_tokens_per_request,
        "vllm_prefix_cache_hit_ratio": v.prefix_cache_hit_ratio,
        "vllm_generation_tokens_per_s": v.generation_tokens_per_s,
        "vllm_preemptions": v.preemptions,
    }

    g = sample.gpu
    out["gpu_nvml_up"] = 1.0 if g.nvml_ok else 0.0
    if g.xid_events:
        # Published with NVML down too: the kernel log still reports XIDs then (a GPU off the bus can take
        # the driver's NVML side with it).
        # One value a period, the most severe: a hardware XID the default rules replace a node for (79 fallen
        # off the bus, 48 double-bit ECC), else a reset-class one they reboot it for (63 row remap pending,
        # 119 GSP timeout), else the last. An application XID logged after either would have hidden it.
        out["gpu_xid"] = float(max(reversed(g.xid_events), key=lambda e: xid_severity(e.xid)).xid)
    if g.nvml_ok:
        live = [r for r in g.gpus if not r.lost]
        out["gpu_count"] = float(len(g.gpus))
        out["gpu_lost"] = float(g.lost_count)
        masks = [r.clock_event_reasons_raw for r in live if r.clock_event_reasons_raw is not None]
        if masks:
            # Every bit as NVML reports it, OR-ed over GPUs (policies match named bits; GpuIdle is set on
            # any idle GPU, so "mask > 0" does not mean throttled: gpu_throttled does).
            combined = 0
            for mask in masks:
                combined |= mask
            out["gpu_throttle_reasons"] = float(combined)
            out["gpu_throttled"] = 1.0 if combined & THROTTLE_MASK else 0.0
        optional["gpu_mem_bw_util"] = _max([r.mem_bw_util_pct for r in live])
        optional["gpu_sm_clock_ratio"] = _min([r.sm_clock_ratio for r in live])
        optional["gpu_temperature_max_c"] = _max([r.temperature_c for r in live])
        # the worst GPU's row remapping: 2 failed, 1 pending (a reset spares the row), 0 neither
        optional["gpu_row_remap"] = _max([r.row_remap_state for r in live])
        ecc = [r.ecc_uncorrected_volatile for r in live if r.ecc_uncorrected_volatile is not None]
        if ecc:
            out["gpu_ecc_uncorrected"] = float(sum(ecc))
    out.update({name: float(value) for name, value in optional.items() if value is not None})
    return out


def gpu_values(reading: GpuReading) -> dict[str, float]:
    """Per-GPU values this period, by published name (a lost GPU publishes only ``gpu_device_lost``)."""
    out = {"gpu_device_lost": 1.0 if reading.lost else 0.0}
    if reading.lost:
        if reading.last_xid is not None:
            out["gpu_device_xid"] = float(reading.last_xid)
        return out
    for name, attr in GPU_DEVICE_METRICS.items():
        value = getattr(reading, attr)
        if value is not None:
            out[name] = float(value)
    return out


def to_points(sample: Sample) -> list[Point]:
    """Every value of the sample as points with CMS dimensions (``instanceId``, plus ``gpu`` per GPU).

    A sample without a trustworthy timestamp (see fleet.agent.clock) yields no points.
    """
    ts = sample.timestamp_ms
    if ts is None:
        return []
    base = {"instanceId": sample.instance_id}
    points = [Point(name, dict(base), value, ts) for name, value in instance_values(sample).items()]
    if sample.gpu.nvml_ok:
        for reading in sample.gpu.gpus:
            dims = {**base, "gpu": str(reading.index)}
            points += [Point(name, dict(dims), value, ts) for name, value in gpu_values(reading).items()]
    # a NaN or an infinity is no reading (a page's +Inf gauge), and PutCustomMetric's Values is JSON, which
    # has neither: left out, as any value the agent does not know
    return [p for p in points if math.isfinite(p.value)]


def sample_to_json(sample: Sample) -> dict[str, Any]:
    """The sample for ``--json``: readings, health, and the values as published."""
    ts = sample.timestamp_ms
    return {
        "instance_id": sample.instance_id,
        "timestamp_ms": ts,
        "time": datetime.fromtimestamp(ts / 1000, UTC).isoformat() if ts is not None else None,
        "clock": dataclasses.asdict(sample.clock),
        "nvml": {
            "ok": sample.gpu.nvml_ok,
            "error": sample.gpu.error,
            "xid_supported": sample.gpu.xid_supported,
            "xid_sources": [str(source) for source in sample.gpu.xid_sources],
            "gpus_lost": sample.gpu.lost_count,
        },
        "gpus": [dataclasses.asdict(r) for r in sample.gpu.gpus],
        "xid_events": [dataclasses.asdict(e) for e in sample.gpu.xid_events],
        "vllm": dataclasses.asdict(sample.vllm),
        "publish": dataclasses.asdict(sample.publish),
        "metrics": instance_values(sample),
        "gpu_metrics": {str(r.index): gpu_values(r) for r in sample.gpu.gpus} if sample.gpu.nvml_ok else {},
    }
