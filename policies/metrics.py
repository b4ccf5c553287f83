"""Canonical metric names the policies speak, and where each one comes from in the cloud.

The service maps CloudMonitor and custom metric names to these before calling ``decide``; the policies
never see a cloud name. Per-instance metrics arrive in ``InstanceSnapshot.metrics``; group metrics are
aggregated here from the per-instance ones (or given directly, e.g. by a Prometheus source).
"""

from __future__ import annotations

import math
from enum import IntFlag

# ---- per-instance metrics --------------------------------------------------------------------------------
QUEUE_WAITING = "queue_waiting"
REQUESTS_RUNNING = "requests_running"
TTFT_P99_MS = "ttft_p99_ms"
TPOT_P99_MS = "tpot_p99_ms"
E2E_P99_MS = "e2e_p99_ms"
LATENCY_P95_MS = "latency_p95_ms"
KV_CACHE_USAGE_PCT = "kv_cache_usage_pct"
GPU_THROTTLE_REASONS = "gpu_throttle_reasons"
GPU_XID = "gpu_xid"
GPU_MEM_BW_UTIL_PCT = "gpu_mem_bw_util_pct"
GPU_SM_CLOCK_RATIO = "gpu_sm_clock_ratio"
GPU_UTIL_PCT = "gpu_util_pct"
GPU_MEM_USED_PCT = "gpu_mem_used_pct"
GPU_TEMPERATURE_C = "gpu_temperature_c"
GPU_POWER_W = "gpu_power_w"
# Row remapping, the worst GPU of the instance (NVML nvmlDeviceGetRemappedRows; DCGM ROW_REMAP_PENDING and
# ROW_REMAP_FAILURE): 0 neither, 1 a remap pending (the spare row is used from the next GPU reset: NVIDIA's
# A100/H100 memory error management guide says reset the GPU), 2 remapping failed (no spare left: service the
# board). Read whatever the XIDs said: 63 and 64 are raised once, and a pending remap waits until a reset.
GPU_ROW_REMAP = "gpu_row_remap"
ROW_REMAP_PENDING = 1.0
ROW_REMAP_FAILURE = 2.0
# 1 while the node agent can scrape the instance's vLLM server, 0 when it cannot (the process died, hung, or
# is still loading its weights): the instance's GPUs may read healthy while it serves nothing.
VLLM_UP = "vllm_up"
# Metrics that read "down" while an instance loads its weights, so rules on them wait out its cold start.
ENGINE_HEALTH_METRICS: frozenset[str] = frozenset({VLLM_UP})
# vllm_up below this is down: a period's average, so a server that answered only part of it reads between.
ENGINE_DOWN_BELOW = 0.5
# demand (issue 16): arrivals per second and the mean token mix of the requests, per instance
REQUEST_RATE = "request_rate"
PROMPT_TOKENS_PER_REQUEST = "prompt_tokens_per_request"
OUTPUT_TOKENS_PER_REQUEST = "output_tokens_per_request"
DEMAND_METRICS: tuple[str, ...] = (REQUEST_RATE, PROMPT_TOKENS_PER_REQUEST, OUTPUT_TOKENS_PER_REQUEST)

# Custom metrics published by the node agent (PutCustomMetric, GroupId 0, dimension instanceId).
CUSTOM_METRIC_NAMES: dict[str, str] = {
    QUEUE_WAITING: "vllm_num_requests_waiting",
    REQUESTS_RUNNING: "vllm_num_requests_running",
    TTFT_P99_MS: "vllm_ttft_p99_ms",
    TPOT_P99_MS: "vllm_tpot_p99_ms",
    E2E_P99_MS: "vllm_e2e_p99_ms",
    LATENCY_P95_MS: "vllm_e2e_p95_ms",
    KV_CACHE_USAGE_PCT: "vllm_kv_cache_usage_pct",
    GPU_THROTTLE_REASONS: "gpu_throttle_reasons",
    GPU_XID: "gpu_xid",
    GPU_MEM_BW_UTIL_PCT: "gpu_mem_bw_util",
    GPU_SM_CLOCK_RATIO: "gpu_sm_clock_ratio",
    REQUEST_RATE: "vllm_request_rate",
    PROMPT_TOKENS_PER_REQUEST: "vllm_prompt_tokens_per_request",
    OUTPUT_TOKENS_PER_REQUEST: "vllm_output_tokens_per_request",
    VLLM_UP: "vllm_up",
    GPU_ROW_REMAP: "gpu_row_remap",
}

# CloudMonitor namespace acs_ecs_dashboard, per instance; the statistic the service should read.
CMS_NAMESPACE = "acs_ecs_dashboard"
CMS_METRIC_NAMES: dict[str, tuple[str, str]] = {
    GPU_UTIL_PCT: ("instance_gpu_gpu_usedutilization", "Average"),
    GPU_MEM_USED_PCT: ("instance_gpu_memory_usedutilization", "Average"),
    # the hottest GPU decides: a single overheating card throttles a tensor-parallel instance
    GPU_TEMPERATURE_C: ("instance_gpu_gpu_temperature", "Maximum"),
    GPU_POWER_W: ("instance_gpu_power_readings_power_draw", "Average"),
}

INSTANCE_METRICS: frozenset[str] = frozenset(CUSTOM_METRIC_NAMES) | frozenset(CMS_METRIC_NAMES)

# ---- group metrics (what scaling rules name) ---------------------------------------------------------------
QUEUE_WAITING_PER_INSTANCE = "queue_waiting_per_instance"
GPU_UTIL_AVG = "gpu_util_avg"
GPU_MEM_BW_UTIL = "gpu_mem_bw_util"

# group metric -> (instance metric it aggregates, default aggregation over InService instances)
# queue_waiting_per_instance is sum(queue_waiting) / number of InService instances, as issue 5 defines it.
# Latency percentiles: an instance that served no request in the window has none to report (the agent leaves
# the point out). With its queue and running requests reading 0 it is *idle*, which is known: it counts as
# covered and adds no latency (``policies.observe.aggregate``); without that evidence it stays unknown.
LATENCY_METRICS: frozenset[str] = frozenset({TTFT_P99_MS, TPOT_P99_MS, E2E_P99_MS, LATENCY_P95_MS})
IDLE_EVIDENCE: tuple[str, ...] = (QUEUE_WAITING, REQUESTS_RUNNING)

GROUP_METRICS: dict[str, tuple[str, str]] = {
    QUEUE_WAITING_PER_INSTANCE: (QUEUE_WAITING, "per_instance"),
    TTFT_P99_MS: (TTFT_P99_MS, "mean"),
    TPOT_P99_MS: (TPOT_P99_MS, "mean"),
    E2E_P99_MS: (E2E_P99_MS, "mean"),
    LATENCY_P95_MS: (LATENCY_P95_MS, "mean"),
    KV_CACHE_USAGE_PCT: (KV_CACHE_USAGE_PCT, "mean"),
    GPU_UTIL_AVG: (GPU_UTIL_PCT, "mean"),
    GPU_MEM_BW_UTIL: (GPU_MEM_BW_UTIL_PCT, "mean"),
}

AGGREGATIONS = ("per_instance", "mean", "max", "min", "sum")

# The values a working sensor can report. A GPU temperature sensor that failed answers 0 or 255 (0xFF) and
# NVML passes it on as a reading; no running GPU sits at 0 C and none passes its shutdown temperature (about
# 90-100 C) without switching off. Memory "used" above "total" comes from MIG and some vGPU profiles, where
# reserved memory counts as used but not in the total. A rule reads a value outside its range as unknown
# (neither a breach nor a clear), so a dead sensor neither isolates a node nor hides a real fault for long:
# the track of unbroken evidence starts again with the next plausible sample.
PLAUSIBLE_RANGE: dict[str, tuple[float, float]] = {
    GPU_TEMPERATURE_C: (1.0, 150.0),
    GPU_MEM_USED_PCT: (0.0, 100.0),
    GPU_UTIL_PCT: (0.0, 100.0),
}


def plausible(metric: str, value: float) -> bool:
    """Whether ``value`` is a reading a working sensor of ``metric`` can give (any, for one not listed)."""
    low, high = PLAUSIBLE_RANGE.get(metric, (-math.inf, math.inf))
    return low <= value <= high


# Metrics that are a share in percent (0-100): a threshold at or beyond 100 never holds (above) or always does
PERCENT_METRICS: frozenset[str] = frozenset(
    name for name in (*INSTANCE_METRICS, *GROUP_METRICS) if name.endswith("_pct")
) | frozenset({GPU_UTIL_AVG, GPU_MEM_BW_UTIL})


class ThrottleReason(IntFlag):
    """NVML clock-event (throttle) reason bits, as nvmlDeviceGetCurrentClocksEventReasons reports them."""

    GPU_IDLE = 0x1
    APP_CLOCKS = 0x2
    SW_POWER_CAP = 0x4
    HW_SLOWDOWN = 0x8
    SYNC_BOOST = 0x10
    SW_THERMAL = 0x20
    HW_THERMAL = 0x40
    HW_POWER_BRAKE = 0x80
    DISPLAY_CLOCKS = 0x100


# Names accepted in isolation rules' ``throttle_reasons`` lists.
THROTTLE_REASON_NAMES: dict[str, ThrottleReason] = {
    "gpu_idle": ThrottleReason.GPU_IDLE,
    "app_clocks": ThrottleReason.APP_CLOCKS,
    "power_cap": ThrottleReason.SW_POWER_CAP,
    "hw_slowdown": ThrottleReason.HW_SLOWDOWN,
    "sync_boost": ThrottleReason.SYNC_BOOST,
    "sw_thermal": ThrottleReason.SW_THERMAL,
    "hw_thermal": ThrottleReason.HW_THERMAL,
    "hw_power_brake": ThrottleReason.HW_POWER_BRAKE,
    "display_clocks": ThrottleReason.DISPLAY_CLOCKS,
}

# XID classes, from NVIDIA's XID catalogue ("Xid Errors", docs.nvidia.com/deploy/xid-errors/, the Ampere+
# catalogue's "Resolution Bucket (Immediate Action)" column) and its memory error documents (A100/H100 GPU
# memory error management: row remapping; dynamic page retirement). docs/policies.md has the table with each
# code's recommended action and why the product maps it as it does. On ECS a GPU reset is a reboot of the
# instance (nvidia-smi -r needs every process off the GPU), and a replacement lands on other hardware.
#
# Replace: the GPU is broken, or NVIDIA's action ends in servicing the board (RMA).
#   48 double-bit ECC error (DBE), 64 row remapping / page retirement failure (the row cannot be spared:
#   RMA), 74 NVLink error, 79 GPU fallen off the bus (restart the machine, then check the mechanics: the
#   board, the riser, power), 92 high single-bit ECC error rate, 95 uncontained ECC error (every process on
#   the GPU is hit).
HARDWARE_XIDS: tuple[int, ...] = (48, 64, 74, 79, 92, 95)
# Reboot at once: a GPU reset clears the condition, and a node that shows it again after the reboot fails
# its health check and is replaced (max_reboots). NVIDIA's catalogue: RESET_GPU.
#   61 / 62 internal micro-controller breakpoint / halt, 63 row remapping (or page retirement) pending: the
#   spare row is used only after a reset, 94 contained ECC error (the process that hit it is killed; the
#   row is remapped at the next reset), 119 GSP RPC timeout, 120 GSP error, 140 unrecovered ECC error, 154
#   the driver's own "GPU recovery action changed ... to GPU Reset Required / Node Reboot Required / Drain
#   and Reset" (the agent drops a 154 whose new action is None: the GPU recovered), 143 GPU initialization
#   error, 156 resource retirement event (the retirement takes effect at the reset, as 63's remap does), 158
#   GPU fatal timeout.
# Not here: the NVLink5 codes of B100 / GB200 (144 SAW, 145 RLW, 146 TLW, 147 TREX, 148 NVLPW_CTRL, 149 NETIR,
# 150 MSE). The catalogue's action for them is WORKFLOW_NVLINK5_ERR: it depends on the error's sub-code and
# status (some RESET_GPU, many IGNORE), which the code alone does not carry; where a reset is needed the
# driver raises 154 beside them ("XID_154_EVAL"), and 154 is here.
RESET_XIDS: tuple[int, ...] = (61, 62, 63, 94, 119, 120, 140, 143, 154, 156, 158)
# Application XIDs: raised by what the process did (an illegal address, a bad instruction), the GPU is
# fine; NVIDIA's action is RESTART_APP (13 graphics engine exception, 31 MMU fault / GPU memory page fault,
# 43 GPU stopped processing: the channel of a faulting process was reset), or IGNORE for 45 (preemptive
# cleanup: channels torn down because their process was killed or an earlier XID ended it). No default rule
# isolates a node for them: a vLLM that keeps crashing on them is what engine_restarting catches.
APPLICATION_XIDS: tuple[int, ...] = (13, 31, 43, 45)


def xid_severity(code: int) -> int:
    """2 for a hardware XID, 1 for a reset-class one, 0 for any other: which of a period's XIDs to report."""
    if code in HARDWARE_XIDS:
        return 2
    return 1 if code in RESET_XIDS else 0


def throttle_mask(names: list[str] | tuple[str, ...]) -> int:
    """The bitmask for a list of throttle reason names (names are validated by the spec)."""
    mask = 0
    for name in names:
        mask |= int(THROTTLE_REASON_NAMES[name])
    return mask
