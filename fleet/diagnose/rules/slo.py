"""The last rule: P99 latency over its SLO that no earlier rule explains.

Every other rule names a cause it can see in the metrics (a queue, a full KV cache, a slow or broken node, a
cold start, saturated bandwidth). When the group's P99 TTFT or TPOT is over its SLO in most samples and none
of them fired, the time goes where these metrics do not look: the prompt itself, the API server, the network.
The report says so rather than "no problem found", with what the sizing model says an idle instance needs.
"""

from __future__ import annotations

from fleet.diagnose import fixes
from fleet.diagnose.model import Finding, InstanceWindow
from fleet.diagnose.rules.shared import (
    QUEUE_PER_INSTANCE,
    SUSTAINED,
    _after,
    _frac,
    _mean,
    _median,
    _r,
    _span,
    _State,
    _tokens_per_seq,
)
from policies import metrics as pm

# Findings that explain a group's high latency; node findings explain only their own instances.
GROUP_CAUSES = frozenset(
    {"cold_start", "kv_cache_pressure", "undersized_fleet", "queue_backlog", "memory_bandwidth_bound"}
)
MIN_SAMPLES = 4  # a latency "over the SLO" in fewer samples than this is noise
# A clear miss only: a P99 a little over its SLO is within a short window's noise and below what the other
# rules' thresholds see (the simulator's healthy control sits at ~1.15x its TTFT SLO); half again over it, in
# at least half the samples, is not.
SLO_MARGIN = 1.5
# Where the mean prompt's idle prefill is at least this share of the TTFT SLO, say whether the chunked-prefill
# budget (max_num_batched_tokens) is what makes it long.
PREFILL_SHARE_FOR_BUDGET = 0.5
# A budget four times larger that prefills the mean prompt less than 10% faster is not what limits TTFT.
BUDGET_GAIN = 0.9
# A measured P99 TPOT this many times what the sizing model expects at the measured batch is more than P99
# over mean and model error: the engine or the GPU runs slower than the hardware should.
SLOWER_THAN_MODEL = 2.0
PUBLISH_UTIL_FIRST = "Publish GPU utilization first (the metrics_missing finding), then diagnose again. "


def _slo_unexplained(st: _State, findings: list[Finding]) -> list[Finding]:
    """P99 TTFT (or TPOT, with a TPOT SLO) over :data:`SLO_MARGIN` x its SLO in at least half the samples of
    the instances no finding covers."""
    if any(f.kind in GROUP_CAUSES for f in findings):
        return []
    covered = st.explained | {i for f in findings if f.kind == "node_outlier" for i in f.scope}
    pool = [i for i in st.measured if i.instance_id not in covered]
    g = st.window.group
    over: dict[str, dict[str, float | None]] = {}
    for metric, slo in ((pm.TTFT_P99_MS, st.slo_ttft_ms), (pm.TPOT_P99_MS, g.slo_tpot_p99_ms)):
        values = [v for i in pool for v in _after(i.metrics.get(metric, ()), st.steady_from)]
        if slo is None or len(values) < MIN_SAMPLES:
            continue
        share = _frac(values, lambda v, s=slo: v > s)
        if _frac(values, lambda v, s=slo: v > SLO_MARGIN * s) >= SUSTAINED:
            over[metric] = {"slo_ms": slo, "median_ms": _r(_median(values)), "samples_over": round(share, 2)}
    if not over:
        return []
    idle = fixes.idle_latency_ms(g)
    evidence = {
        "window": _span(st.window),
        **over,
        "instances": sorted(i.instance_id for i in pool),
        "gpu_util_pct_mean": _r(_mean(v for i in pool for v in i.values(pm.GPU_UTIL_PCT))),
        "queue_waiting_mean": _r(_mean(v for i in pool for v in i.values(pm.QUEUE_WAITING))),
        "kv_cache_usage_pct_mean": _r(_mean(v for i in pool for v in i.values(pm.KV_CACHE_USAGE_PCT))),
        "idle_instance": {k: round(v, 1) for k, v in idle.items()} if idle else None,
    }
    at_batch = _tpot_at_batch(st, pool, over)
    if at_batch is not None:
        evidence["tpot_expected_at_batch"] = at_batch
    util_missing = any(
        f.kind == "metrics_missing" and pm.GPU_UTIL_PCT in (f.evidence.get("missing") or {}) for f in findings
    )
    queue = evidence["queue_waiting_mean"]
    blind = (
        f"; GPU utilization was not published, so whether the {queue:g} request(s) waiting per instance on "
        "average queued behind saturated GPUs (queue_backlog, undersized_fleet) could not be judged"
        if util_missing and isinstance(queue, float) and queue >= QUEUE_PER_INSTANCE
        else ""
    )
    said = " and ".join(
        f"P99 {m.split('_')[0].upper()} (median {v['median_ms']:g} ms) was over its {v['slo_ms']:g} ms SLO "
        f"in {100 * (v['samples_over'] or 0):.0f}% of the samples"
        for m, v in over.items()
    )
    return [
        Finding(
            "slo_violated_unexplained",
            "warning",
            [g.name],
            evidence,
            f"{said} on {len(pool)} instance(s), and no rule explains it (a queue over busy GPUs, a full KV "
            "cache, a throttled or broken GPU, a cold start, saturated memory bandwidth)"
            + (blind or _prompt_text(over, idle) or ": the time goes where these metrics do not look")
            + ".",
            (
                "Publish GPU utilization first (the metrics_missing finding), then diagnose again. "
                * bool(blind)
            )
            + _next_steps(over, idle, g.instance_type, at_batch),
        )
    ]


def _tpot_at_batch(
    st: _State, pool: list[InstanceWindow], over: dict[str, dict[str, float | None]]
) -> dict[str, float] | None:
    """With P99 TPOT over its SLO: what the sizing model expects per token at the pool's mean batch and
    measured context per sequence, and the measured median's multiple of it."""
    tpot = over.get(pm.TPOT_P99_MS)
    batch = _mean(v for i in pool for v in i.values(pm.REQUESTS_RUNNING))
    if tpot is None or tpot["median_ms"] is None or batch is None or batch < 1:
        return None
    tokens = _tokens_per_seq(st, pool)
    expected = fixes.expected_tpot_ms(st.window.group, round(batch), tokens)
    if expected is None or expected <= 0:
        return None
    return {
        "batch": round(batch),
        "tokens_per_seq": round(tokens),
        "tpot_ms_expected": round(expected, 1),
        "measured_over_expected": round(tpot["median_ms"] / expected, 2),
    }


def _next_steps(
    over: dict[str, dict[str, float | None]],
    idle: dict[str, float] | None,
    itype: str | None,
    at_batch: dict[str, float] | None = None,
) -> str:
    steps = []
    if pm.TTFT_P99_MS in over:
        slo = over[pm.TTFT_P99_MS]["slo_ms"] or 0.0
        if idle and idle["prefill_ms"] >= slo:
            steps.append(
                f"the sizing model prefills a mean {idle['prompt_tokens']:.0f}-token prompt in "
                f"{idle['prefill_ms']:.0f} ms on an idle {itype} ({100 * idle['prefill_ms'] / slo:.0f}% of "
                "the SLO), so such a prompt misses the SLO at any load: shorten prompts or reuse shared "
                "prefixes (vLLM's prefix caching), give each instance more compute (more GPUs, a faster "
                "card), or set a TTFT SLO these prompts can meet"
            )
        elif idle:
            steps.append(
                f"compare prompt lengths with the TTFT SLO: the sizing model prefills a mean "
                f"{idle['prompt_tokens']:.0f}-token prompt in {idle['prefill_ms']:.0f} ms on an idle {itype} "
                f"({100 * idle['prefill_ms'] / slo:.0f}% of the SLO), so only prompts that much longer reach "
                "the SLO on their own"
            )
        else:
            steps.append(
                "compare prompt lengths with the TTFT SLO (with the group's model and instance type known, "
                "the sizing model gives a mean prompt's prefill time on an idle instance)"
            )
        budget = _budget_text(idle) if idle and idle["prefill_ms"] >= PREFILL_SHARE_FOR_BUDGET * slo else None
        if budget:
            steps.append(budget)
    if at_batch is not None and at_batch["measured_over_expected"] >= SLOWER_THAN_MODEL:
        steps.append(
            f"the sizing model decodes a batch of {at_batch['batch']:.0f} at "
            f"{at_batch['tpot_ms_expected']:g} ms per token; a P99 {at_batch['measured_over_expected']:g}x "
            "that means the engine runs slower than this hardware allows: check vLLM's flags (CUDA graphs "
            "on, no --enforce-eager; the dtype, quantization and tensor-parallel size meant), the GPU clocks "
            "and power limit against their maximum (nvidia-smi -q -d CLOCK,POWER), and other processes on "
            "the GPUs"
        )
    elif pm.TPOT_P99_MS in over and idle:
        steps.append(f"the sizing model decodes one request alone at {idle['tpot_ms']:.1f} ms per token")
    steps.append(
        "check the tokenizer and API server (CPU on the host, vLLM's --api-server-count, detokenization of "
        "long outputs) and the network between the gateway and the instances: compare vLLM's own latency "
        "histograms with the gateway's"
    )
    long_prompt = (
        idle is not None
        and pm.TTFT_P99_MS in over
        and idle["prefill_ms"] >= (over[pm.TTFT_P99_MS]["slo_ms"] or 0.0)
    )
    lead = "Look at the prompts first: " if long_prompt else "Look at what these metrics do not show: "
    return lead + "; ".join(steps) + "."


def _prompt_text(over: dict[str, dict[str, float | None]], idle: dict[str, float] | None) -> str:
    """When the mean prompt's idle prefill alone is over the TTFT SLO, that is the explanation."""
    ttft = over.get(pm.TTFT_P99_MS)
    if ttft is None or idle is None or idle["prefill_ms"] < (ttft["slo_ms"] or 0.0):
        return ""
    return (
        f": by the sizing model the mean {idle['prompt_tokens']:.0f}-token prompt alone takes "
        f"{idle['prefill_ms']:.0f} ms to prefill on an idle instance, more than the {ttft['slo_ms']:g} ms "
        "SLO, so the prompts' length, not the load, sets this TTFT"
    )


def _budget_text(idle: dict[str, float]) -> str | None:
    """That a larger chunked-prefill budget would not shorten the mean prompt's prefill, when sizing's perf
    model says so (a long prompt makes people suspect max_num_batched_tokens)."""
    budget = idle["max_num_batched_tokens"]
    faster = idle["prefill_ms_budget_x4"]
    if faster < BUDGET_GAIN * idle["prefill_ms"]:
        return None
    return (
        "a larger chunked-prefill budget would not help: with max_num_batched_tokens "
        f"{fixes.PREFILL_BUDGET_FACTOR * budget:.0f} instead of {budget:.0f} the sizing model prefills the "
        f"mean prompt in {faster:.0f} ms (the prefill is bound by compute, not by the number of chunks)"
    )
