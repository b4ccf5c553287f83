"""How each canonical policy metric is computed in PromQL from DCGM exporter and vLLM series.

One table, ``PROMQL_MAPPINGS``, read by the Prometheus source (to build queries), by docs/prometheus.md (which
describes the same rows) and by the dashboard tests (the exporter metric names a dashboard may query are the
ones named here, in ``series``). Nothing here does I/O.

Expressions are templates: ``{by}`` is the label that holds the ECS instance id (config ``instance_label``),
``{sel}`` the label matchers of every selector (that label restricted to the group's instances, plus the
config's extra ``labels``), ``{window}`` the rate window of the latency histograms. Per-GPU rows keep the
``gpu`` label (DCGM exporter's GPU index label) and return one series per GPU; the Observer then reduces an
instance's GPUs as it does for CloudMonitor's per-GPU rows: the highest value, or a bitwise OR for the
throttle reasons (PromQL has no bitwise OR, so that one cannot be done in the query).

Where an exporter has renamed a metric, the row lists both and prefers the newer one per series with PromQL's
``or`` (which keeps a right-hand series only where the left-hand side has none with the same labels).
"""

from __future__ import annotations

from dataclasses import dataclass

from policies import metrics as pm

GPU_LABEL = "gpu"  # dcgm-exporter's GPU index label (the node agent's per-GPU label has the same name)

# vLLM histograms are cumulative counters, so a percentile needs a rate over a window; one minute holds at
# least two scrapes at the usual 15 s interval (Prometheus' rate() needs two samples in the window).
DEFAULT_RATE_WINDOW = "1m"


@dataclass(frozen=True)
class PromMapping:
    """One canonical metric: the PromQL that yields it, and the exporter series that PromQL reads."""

    canonical: str
    expr: str  # template with {by}, {sel}, {window}; result labels: {by} (and GPU_LABEL when per_gpu)
    series: tuple[str, ...]  # exporter metric names read (histograms as their _bucket series)
    per_gpu: bool
    source: str  # "dcgm" or "vllm": which exporter publishes the series
    note: str  # unit and semantics, for the docs

    def render(self, by: str, sel: str, window: str = DEFAULT_RATE_WINDOW) -> str:
        return self.expr.format(by=by, sel=sel, window=window)


def _quantile(q: float, *buckets: str) -> str:
    """Milliseconds at quantile ``q`` of a vLLM latency histogram, per instance, over the rate window.

    Several bucket names: the first one present wins per instance (a histogram renamed across vLLM versions).
    """
    one = "histogram_quantile({q}, sum by ({{by}}, le) (rate({b}{{sel}}[{{window}}])))"
    alternatives = " or ".join(one.format(q=q, b=b) for b in buckets)
    return f"1000 * ({alternatives})" if len(buckets) > 1 else f"1000 * {alternatives}"


# A hung engine (the node agent's stall check, docs/agent.md): requests in flight through the whole window and
# none of vLLM's progress counters moved in it. Every operand must be there: a counter that has fewer than two
# samples in the window (a fresh server) or that this vLLM does not export gives no series, hence no stall.
# Judged per data-parallel engine (vLLM labels each engine's series engine="0", engine="1"): one engine
# holding requests with its counters standing still beside a busy one moves the instance's sums. Series
# without the label group by the instance alone (an absent label groups as one), so a single-engine server
# reads as it did summed per instance; the instance is stalled where any of its engines is.
ENGINE_LABEL = "engine"
_PROGRESS = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total", "vllm:request_success_total")
_ENGINE = f"{{by}}, {ENGINE_LABEL}"
_STALLED = (
    f"max by ({{by}}) ((sum by ({_ENGINE}) (min_over_time(vllm:num_requests_running{{sel}}[{{window}}]))"
    f" + sum by ({_ENGINE}) (min_over_time(vllm:num_requests_waiting{{sel}}[{{window}}]))) > 0"
    + "".join(
        f" and on ({_ENGINE}) (sum by ({_ENGINE}) (increase({name}{{sel}}[{{window}}])) == 0)"
        for name in _PROGRESS
    )
    + ")"
)


def _per_gpu(metric: str) -> str:
    # max: the same GPU scraped twice (two Prometheus jobs) must still be one series per GPU
    return f"max by ({{by}}, {GPU_LABEL}) ({metric}{{sel}})"


_ROWS: tuple[PromMapping, ...] = (
    # ---- vLLM /metrics (one server per instance, or several whose queues add up) ------------------------
    PromMapping(
        pm.QUEUE_WAITING,
        "sum by ({by}) (vllm:num_requests_waiting{sel})",
        ("vllm:num_requests_waiting",),
        per_gpu=False,
        source="vllm",
        note="requests waiting in vLLM's queue, summed over the instance's vLLM servers",
    ),
    PromMapping(
        pm.REQUESTS_RUNNING,
        "sum by ({by}) (vllm:num_requests_running{sel})",
        ("vllm:num_requests_running",),
        per_gpu=False,
        source="vllm",
        note="requests in the running batch, summed over the instance's vLLM servers",
    ),
    PromMapping(
        pm.KV_CACHE_USAGE_PCT,
        # vLLM V1 renamed gpu_cache_usage_perc to kv_cache_usage_perc; both are fractions (1 = full)
        "100 * (max by ({by}) (vllm:kv_cache_usage_perc{sel})"
        " or max by ({by}) (vllm:gpu_cache_usage_perc{sel}))",
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        per_gpu=False,
        source="vllm",
        note="KV cache blocks in use, percent (vLLM reports a 0-1 fraction); the fuller server counts",
    ),
    PromMapping(
        pm.TTFT_P99_MS,
        _quantile(0.99, "vllm:time_to_first_token_seconds_bucket"),
        ("vllm:time_to_first_token_seconds_bucket",),
        per_gpu=False,
        source="vllm",
        note="P99 time to first token over the rate window, ms",
    ),
    PromMapping(
        pm.TPOT_P99_MS,
        # newer vLLM also names this histogram inter_token_latency_seconds (and will drop the old name)
        _quantile(
            0.99, "vllm:time_per_output_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket"
        ),
        ("vllm:time_per_output_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket"),
        per_gpu=False,
        source="vllm",
        note="P99 time per output token over the rate window, ms",
    ),
    PromMapping(
        pm.E2E_P99_MS,
        _quantile(0.99, "vllm:e2e_request_latency_seconds_bucket"),
        ("vllm:e2e_request_latency_seconds_bucket",),
        per_gpu=False,
        source="vllm",
        note="P99 end-to-end request latency over the rate window, ms",
    ),
    PromMapping(
        pm.LATENCY_P95_MS,
        _quantile(0.95, "vllm:e2e_request_latency_seconds_bucket"),
        ("vllm:e2e_request_latency_seconds_bucket",),
        per_gpu=False,
        source="vllm",
        note="P95 end-to-end request latency over the rate window, ms",
    ),
    # ---- demand (issue 16): the same three signals the node agent derives from vLLM's counters ----------
    PromMapping(
        pm.REQUEST_RATE,
        # vLLM counts a request when it finishes; arrivals = completions + the growth of what is in flight
        "sum by ({by}) (rate(vllm:request_success_total{sel}[{window}]))"
        " + sum by ({by}) (deriv(vllm:num_requests_running{sel}[{window}]))"
        " + sum by ({by}) (deriv(vllm:num_requests_waiting{sel}[{window}]))",
        ("vllm:request_success_total", "vllm:num_requests_running", "vllm:num_requests_waiting"),
        per_gpu=False,
        source="vllm",
        note="request arrivals per second over the rate window (completions + growth of waiting and running)",
    ),
    PromMapping(
        pm.PROMPT_TOKENS_PER_REQUEST,
        "sum by ({by}) (rate(vllm:request_prompt_tokens_sum{sel}[{window}]))"
        " / sum by ({by}) (rate(vllm:request_prompt_tokens_count{sel}[{window}]))",
        ("vllm:request_prompt_tokens_sum", "vllm:request_prompt_tokens_count"),
        per_gpu=False,
        source="vllm",
        note="mean prompt tokens per request finished in the rate window",
    ),
    PromMapping(
        pm.OUTPUT_TOKENS_PER_REQUEST,
        "sum by ({by}) (rate(vllm:request_generation_tokens_sum{sel}[{window}]))"
        " / sum by ({by}) (rate(vllm:request_generation_tokens_count{sel}[{window}]))",
        ("vllm:request_generation_tokens_sum", "vllm:request_generation_tokens_count"),
        per_gpu=False,
        source="vllm",
        note="mean output tokens per request finished in the rate window",
    ),
    PromMapping(
        pm.VLLM_UP,
        # 1 where vLLM's gauges are scraped and it makes progress; 0 where it is stalled (below), or where
        # only the node's GPUs are scraped (Prometheus drops a failed target's series at once, with
        # staleness markers): the node is up and its vLLM is not. Never Prometheus' own `up`, which is 0 as
        # well when only the DCGM exporter is down.
        f"((max by ({{by}}) (vllm:num_requests_running{{sel}}) * 0 + 1) unless on ({{by}}) ({_STALLED})) "
        f"or (({_STALLED}) * 0) "
        "or (max by ({by}) (DCGM_FI_DEV_GPU_TEMP{sel}) * 0)",
        ("vllm:num_requests_running", "DCGM_FI_DEV_GPU_TEMP", *_PROGRESS, "vllm:num_requests_waiting"),
        per_gpu=False,
        source="vllm",
        note="1 while the instance's vLLM is scraped and makes progress; 0 while only its GPUs are (vLLM "
        "down or loading) or while it is stalled (requests in flight through the whole rate window, and "
        "not one finished or token computed in it)",
    ),
    # ---- DCGM exporter (one series per GPU) -------------------------------------------------------------
    PromMapping(
        pm.GPU_TEMPERATURE_C,
        _per_gpu("DCGM_FI_DEV_GPU_TEMP"),
        ("DCGM_FI_DEV_GPU_TEMP",),
        per_gpu=True,
        source="dcgm",
        note="GPU core temperature, C; the instance reads its hottest GPU",
    ),
    PromMapping(
        pm.GPU_UTIL_PCT,
        _per_gpu("DCGM_FI_DEV_GPU_UTIL"),
        ("DCGM_FI_DEV_GPU_UTIL",),
        per_gpu=True,
        source="dcgm",
        note="GPU utilization, percent; the instance reads its busiest GPU",
    ),
    PromMapping(
        pm.GPU_MEM_BW_UTIL_PCT,
        # DRAM_ACTIVE (a profiling field, 0-1) measures bandwidth; MEM_COPY_UTIL is the coarser fallback
        f"(100 * {_per_gpu('DCGM_FI_PROF_DRAM_ACTIVE')}) or {_per_gpu('DCGM_FI_DEV_MEM_COPY_UTIL')}",
        ("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_DEV_MEM_COPY_UTIL"),
        per_gpu=True,
        source="dcgm",
        note="memory bandwidth utilization, percent: DRAM_ACTIVE x 100 where profiling metrics are on, "
        "else MEM_COPY_UTIL",
    ),
    PromMapping(
        pm.GPU_MEM_USED_PCT,
        f"100 * {_per_gpu('DCGM_FI_DEV_FB_USED')} / "
        f"({_per_gpu('DCGM_FI_DEV_FB_USED')} + {_per_gpu('DCGM_FI_DEV_FB_FREE')})",
        ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"),
        per_gpu=True,
        source="dcgm",
        note="framebuffer used / (used + free), percent (memory the driver reserves is in neither)",
    ),
    PromMapping(
        pm.GPU_THROTTLE_REASONS,
        # DCGM 3.2 renamed CLOCK_THROTTLE_REASONS (field 112) to CLOCKS_EVENT_REASONS; the bits are NVML's
        f"{_per_gpu('DCGM_FI_DEV_CLOCKS_EVENT_REASONS')} or {_per_gpu('DCGM_FI_DEV_CLOCK_THROTTLE_REASONS')}",
        ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
        per_gpu=True,
        source="dcgm",
        note="NVML clock event (throttle) reason bitmask per GPU; the instance ORs its GPUs' masks",
    ),
    PromMapping(
        pm.GPU_XID,
        _per_gpu("DCGM_FI_DEV_XID_ERRORS"),
        ("DCGM_FI_DEV_XID_ERRORS",),
        per_gpu=True,
        source="dcgm",
        note="the last XID error code per GPU (0: none); dated by when the value last changed",
    ),
    PromMapping(
        pm.GPU_ROW_REMAP,
        # 2 where a GPU's remapping failed, else 1 where one is pending, else 0 (DCGM fields 395 / 396)
        f"max by ({{by}}) ((2 * ({_per_gpu('DCGM_FI_DEV_ROW_REMAP_FAILURE')} > 0)) "
        f"or ({_per_gpu('DCGM_FI_DEV_ROW_REMAP_PENDING')} > 0) "
        f"or ({_per_gpu('DCGM_FI_DEV_ROW_REMAP_FAILURE')} * 0))",
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_PENDING"),
        per_gpu=False,
        source="dcgm",
        note="row remapping of the worst GPU: 2 failed, 1 pending (a GPU reset spares the row), 0 neither; "
        "needs DCGM_FI_DEV_ROW_REMAP_FAILURE and _PENDING exported",
    ),
    PromMapping(
        pm.GPU_SM_CLOCK_RATIO,
        # without the max clock there is no ratio: unknown, never a guess
        f"min by ({{by}}) ({_per_gpu('DCGM_FI_DEV_SM_CLOCK')} / {_per_gpu('DCGM_FI_DEV_MAX_SM_CLOCK')})",
        ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MAX_SM_CLOCK"),
        per_gpu=False,
        source="dcgm",
        note="SM clock / max SM clock (0-1); the slowest GPU counts; needs DCGM_FI_DEV_MAX_SM_CLOCK exported",
    ),
    PromMapping(
        pm.GPU_POWER_W,
        _per_gpu("DCGM_FI_DEV_POWER_USAGE"),
        ("DCGM_FI_DEV_POWER_USAGE",),
        per_gpu=True,
        source="dcgm",
        note="power draw, W; the instance reads its highest GPU",
    ),
)

PROMQL_MAPPINGS: dict[str, PromMapping] = {row.canonical: row for row in _ROWS}


def exporter_series(source: str | None = None) -> frozenset[str]:
    """Every exporter metric name the mappings read (of one exporter, ``dcgm`` or ``vllm``, if given)."""
    return frozenset(s for row in _ROWS if source in (None, row.source) for s in row.series)


def histogram_family(series: str) -> str | None:
    """The histogram's base name for a ``*_bucket`` series (its _sum and _count exist too), else None."""
    return series[: -len("_bucket")] if series.endswith("_bucket") else None
