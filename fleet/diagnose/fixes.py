"""Concrete numbers for the fixes, from the sizing performance model (pure: sizing only, no I/O).

Each helper answers one question a finding's fix needs ("how many instances at the SLO", "what does fp8 KV
cache buy", "which card has more bandwidth") for the group's model on its instance type. When the model or
the instance type is unknown to the catalog the helper returns ``None`` and the finding falls back to
arithmetic on what was measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleet.diagnose.model import GroupContext

if TYPE_CHECKING:  # sizing loads its catalog on first use: imported where it runs, named here for the types
    from sizing import Candidate, Deployment, MemoryPlan, PerfModel

# The sizing model's default request mix (sizing.latency.Workload): used when the group names none.
DEFAULT_PROMPT_TOKENS = 1000
DEFAULT_OUTPUT_TOKENS = 200
# Keep the fleet below this share of its capacity at the SLO, so a burst does not put it over the knee.
TARGET_LOAD_FRACTION = 0.8


@dataclass(frozen=True)
class Deploy:
    """The group's deployment as the sizing model sees it."""

    model: str
    instance_type: str
    gpu: str
    gpus: int
    kv_cache_tokens: int
    max_num_seqs: int
    max_model_len: int
    plan: MemoryPlan
    perf: PerfModel
    deployment: Deployment


def deployment(ctx: GroupContext, **changes: object) -> Deploy | None:
    """The sizing model's plan for the group's model on its instance type (tensor parallel over all its
    GPUs), with ``changes`` applied to the vLLM settings; ``None`` when it cannot be worked out."""
    if not ctx.model or not ctx.instance_type:
        return None
    from sizing import (
        Deployment,
        SizingInputError,
        find_gpu,
        find_instance,
        find_model,
        perf_for,
        plan_memory,
    )

    try:
        inst = find_instance(ctx.instance_type)
        dep = Deployment(
            find_model(ctx.model),
            find_gpu(inst.gpu),
            tp=inst.gpus,
            max_model_len=ctx.max_model_len,
            max_num_seqs=ctx.max_num_seqs,
            max_num_batched_tokens=ctx.max_num_batched_tokens,
        )
        if changes:
            dep = dep.with_(**changes)
        plan = plan_memory(dep)
        if not plan.fits:
            return None
        perf = perf_for(dep, plan)  # no calibration here: the catalog's own figures
    except (SizingInputError, ValueError, KeyError):
        return None
    return Deploy(
        model=ctx.model,
        instance_type=inst.name,
        gpu=inst.gpu,
        gpus=inst.gpus,
        kv_cache_tokens=plan.kv_context_tokens,  # a hybrid model's in context tokens, as sequences spend it
        max_num_seqs=plan.max_num_seqs,
        max_model_len=plan.max_model_len,
        plan=plan,
        perf=perf,
        deployment=dep,
    )


def kv_reading_plausible(d: Deploy | None, kv_pct: float, running: float) -> bool:
    """Whether a KV cache usage reading (percent) can be true with ``running`` sequences running: each holds
    at least one block, so a reading under one block per running sequence (0% while requests run: a gauge not
    updated yet, or a vLLM release publishing it wrong) is no reading of the cache. Without the sizing model's
    plan (``d`` is ``None``: no block or cache size known) only 0% with requests running is ruled out."""
    if running < 1:
        return True
    if d is None:
        return kv_pct > 0
    return kv_pct / 100.0 * d.kv_cache_tokens / running >= d.deployment.block_size


def request_sizes(ctx: GroupContext, output_tokens: float | None = None) -> tuple[float, float]:
    """(prompt, output) tokens per request: the group's, else measured output, else the sizing defaults."""
    prompt = ctx.prompt_tokens_mean or DEFAULT_PROMPT_TOKENS
    output = output_tokens or ctx.output_tokens_mean or DEFAULT_OUTPUT_TOKENS
    return float(prompt), float(output)


def instances_for(demand_rps: float, per_instance_rps: float) -> int:
    """Instances to serve ``demand_rps`` at :data:`TARGET_LOAD_FRACTION` of each one's capacity."""
    return max(1, math.ceil(demand_rps / max(1e-9, per_instance_rps * TARGET_LOAD_FRACTION)))


def kv_options(ctx: GroupContext) -> dict[str, object]:
    """What the KV cache holds now, with an fp8 KV cache, and at half the max_model_len."""
    base = deployment(ctx)
    if base is None:
        return {}
    out: dict[str, object] = {
        "kv_cache_tokens": base.kv_cache_tokens,
        "max_model_len": base.max_model_len,
        "max_num_seqs": base.max_num_seqs,
    }
    fp8 = deployment(ctx, kv_cache_dtype="fp8")
    if fp8 is not None:
        out["kv_cache_tokens_fp8"] = fp8.kv_cache_tokens
    return out


def more_bandwidth_cards(ctx: GroupContext, limit: int = 2) -> list[dict[str, object]]:
    """Instance types whose GPU has more memory bandwidth than the group's and that fit the model."""
    base = deployment(ctx)
    if base is None:
        return []
    from sizing import find_gpu, load_instances

    mine = find_gpu(base.gpu).bandwidth_gbps
    seen: set[str] = set()
    found: list[tuple[float, str, str]] = []
    for inst in load_instances().values():
        gpu = find_gpu(inst.gpu)
        if gpu.bandwidth_gbps <= mine * 1.2 or gpu.name in seen:
            continue
        probe = GroupContext(name=ctx.name, model=ctx.model, instance_type=inst.name)
        if deployment(probe) is None:
            continue
        seen.add(gpu.name)
        found.append((gpu.bandwidth_gbps, inst.name, gpu.name))
    found.sort()
    return [{"instance_type": n, "gpu": g, "bandwidth_gbps": bw} for bw, n, g in found[:limit]]


def quantized_tpot_ratio(ctx: GroupContext, dtype: str = "int8") -> float | None:
    """Batch-1 decode time with ``dtype`` weights over today's (< 1: faster), at a 1k-token context."""
    base = deployment(ctx)
    quant = deployment(ctx, dtype=dtype)
    if base is None or quant is None:
        return None
    a = base.perf.decode_tpot_s(1000)
    b = quant.perf.decode_tpot_s(1000)
    return b / a if a > 0 else None


# Steady decode iterations vary little, so P99 TPOT sits close above the mean iteration; keep the mean at 90%
# of a P99 target (sizing's capacity estimate keeps 80%, a margin for mixed prefill that a measured batch has
# already shown).
TPOT_MEAN_SHARE = 0.9


def _tpot_ms(d: Deploy, n: int, tokens_per_seq: float) -> float:
    """Mean time per output token with ``n`` sequences of ``tokens_per_seq`` context decoding together: the
    sizing model's decode step itself. (Its affine form, ``decode_affine``, is anchored at an empty context:
    where a batch that large is compute-bound there, its slope is the attention's FLOPs, not the KV reads, and
    the time per token fell as the batch grew past that point.)"""
    return 1000.0 * d.perf.decode_step_s(n, n * tokens_per_seq)


def batch_for_tpot(ctx: GroupContext, limit_ms: float, tokens_per_seq: float) -> int | None:
    """The largest batch whose decode iterations keep P99 TPOT within ``limit_ms`` (the mean kept at
    :data:`TPOT_MEAN_SHARE` of it); ``None`` when one sequence misses it or the model is unknown."""
    d = deployment(ctx)
    if d is None or _tpot_ms(d, 1, tokens_per_seq) > TPOT_MEAN_SHARE * limit_ms:
        return None
    lo, hi = 1, 1024
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _tpot_ms(d, mid, tokens_per_seq) <= TPOT_MEAN_SHARE * limit_ms:
            lo = mid
        else:
            hi = mid - 1
    return lo


def expected_tpot_ms(ctx: GroupContext, batch: int, tokens_per_seq: float) -> float | None:
    """The sizing model's mean time per output token with ``batch`` sequences of ``tokens_per_seq`` context
    decoding together; ``None`` when the deployment is unknown."""
    d = deployment(ctx)
    return None if d is None or batch < 1 else _tpot_ms(d, batch, tokens_per_seq)


KNEE_TPOT_FACTOR = 1.5  # the decode "knee": past this multiple of batch-1 TPOT, a bigger batch costs latency


def knee_batch(ctx: GroupContext, tokens_per_seq: float) -> int | None:
    """The batch at which TPOT reaches :data:`KNEE_TPOT_FACTOR` x its batch-1 value (sizing's perf model)."""
    d = deployment(ctx)
    if d is None:
        return None
    return batch_for_tpot(
        ctx, _tpot_ms(d, 1, tokens_per_seq) * KNEE_TPOT_FACTOR / TPOT_MEAN_SHARE, tokens_per_seq
    )


@dataclass(frozen=True)
class BusyCeiling:
    """The memory-busy share a bandwidth-limited decode iteration reaches (sizing's decode step model)."""

    share: float  # 0..1: the iteration's weight and KV reads over the whole iteration
    batch: int
    tokens_per_seq: float
    read_ms: float  # streaming the weights and the batch's KV at the effective bandwidth
    comm_ms: float  # the tensor-parallel all-reduces (0 at TP 1)
    other_ms: float  # per-layer kernel cost
    tp: int
    interconnect: str  # "pcie" or "nvlink"

    def to_json(self) -> dict[str, object]:
        return {
            "ceiling_pct": round(100.0 * self.share, 1),
            "batch": self.batch,
            "tokens_per_seq": round(self.tokens_per_seq),
            "read_ms": round(self.read_ms, 2),
            "allreduce_ms": round(self.comm_ms, 2),
            "other_ms": round(self.other_ms, 2),
            "tp": self.tp,
            "interconnect": self.interconnect,
        }


def decode_busy_ceiling(ctx: GroupContext, batch: float, tokens_per_seq: float) -> BusyCeiling | None:
    """The share of a decode iteration of ``batch`` sequences of ``tokens_per_seq`` context that device
    memory is busy when the iteration is limited by bandwidth: what a memory-busy metric reads at most on a
    deployment that decodes back to back. The rest of the iteration is the tensor-parallel all-reduces (over
    the instance's PCIe or NVLink) and the per-layer kernel cost, which stream no weights or KV.

    ``None`` when the deployment is unknown, or when the sizing model says such an iteration is not limited by
    bandwidth (compute bounds it, or the host's per-step work outlasts the GPU's)."""
    d = deployment(ctx)
    if d is None or batch <= 0 or tokens_per_seq < 0:
        return None
    n = max(1, round(batch))
    p = d.perf
    context = n * tokens_per_seq
    if p.decode_read_s(n, context) <= 0:
        return None
    read = p.read_s(n, context)
    comm = p.comm_latency_s + p.comm_s_per_token * n
    gpu = p.overhead_s + read + comm
    if gpu < p.floor_s or gpu <= 0:
        return None
    return BusyCeiling(
        share=read / gpu,
        batch=n,
        tokens_per_seq=tokens_per_seq,
        read_ms=1000.0 * read,
        comm_ms=1000.0 * comm,
        other_ms=1000.0 * p.overhead_s,
        tp=d.deployment.tp,
        interconnect=d.deployment.gpu.interconnect.kind if d.deployment.tp > 1 else "none",
    )


def kv_batch_limit(ctx: GroupContext, tokens_per_seq: float, full_share: float = 0.9) -> int | None:
    """The most sequences of ``tokens_per_seq`` context the KV cache holds while staying ``full_share`` full
    (the sizing model's KV tokens per instance); ``None`` when the deployment is unknown."""
    d = deployment(ctx)
    if d is None or tokens_per_seq <= 0:
        return None
    return max(1, math.floor(d.kv_cache_tokens * full_share / tokens_per_seq))


def search_recommendation(ctx: GroupContext, demand_rps: float) -> dict[str, object] | None:
    """The sizing search for ``demand_rps`` at the group's SLOs: the cheapest option on the group's own
    instance type and across the catalog (each: type, count, max_num_seqs, cost)."""
    if not ctx.model or demand_rps <= 0:
        return None
    from sizing import SLO, SizingInputError, Workload, find_instance, find_model, price_book, search

    prompt, output = request_sizes(ctx)
    try:
        model = find_model(ctx.model)
        workload = Workload(qps=demand_rps, prompt_tokens=int(prompt), output_tokens=int(output))
        slo = SLO(ttft_p99_ms=ctx.slo_ttft_p99_ms, tpot_p99_ms=ctx.slo_tpot_p99_ms)
        prices = price_book()
        out: dict[str, object] = {}
        if ctx.instance_type:
            same = search(
                model,
                workload=workload,
                slo=slo,
                prices=prices,
                region=ctx.region,
                instances=[find_instance(ctx.instance_type)],
                top=1,
            ).best
            if same is not None and same.instances:
                out["same_type"] = _option(same)
        best = search(model, workload=workload, slo=slo, prices=prices, region=ctx.region, top=1).best
        if best is not None and best.instances:
            out["best"] = _option(best)
    except (SizingInputError, ValueError, KeyError):
        return None
    return out or None


def _option(c: Candidate) -> dict[str, object]:
    return {
        "instance_type": c.instance_type,
        "instances": c.instances,
        "max_num_seqs": c.max_num_seqs,
        "cost_cny_per_hour": None if c.cost_cny_per_hour is None else round(c.cost_cny_per_hour, 1),
    }


def idle_latency_ms(ctx: GroupContext) -> dict[str, float] | None:
    """What the sizing model says one request of the group's mean size takes on an idle instance: the prompt's
    prefill (``prefill_ms``, the floor of TTFT), batch-1 time per output token (``tpot_ms``, of TPOT), and the
    prefill with :data:`PREFILL_BUDGET_FACTOR` x the chunked-prefill budget (``prefill_ms_budget_x4``)."""
    d = deployment(ctx)
    if d is None:
        return None
    prompt, _ = request_sizes(ctx)
    tokens = max(1, round(prompt))
    budget = d.plan.max_num_batched_tokens
    return {
        "prompt_tokens": float(tokens),
        "prefill_ms": d.perf.prefill_s(tokens, budget) * 1000,
        "tpot_ms": d.perf.decode_tpot_s(tokens) * 1000,
        # the chunked-prefill budget, and the same prefill with four times it (fewer, larger chunks)
        "max_num_batched_tokens": float(budget),
        "prefill_ms_budget_x4": d.perf.prefill_s(tokens, PREFILL_BUDGET_FACTOR * budget) * 1000,
    }


PREFILL_BUDGET_FACTOR = 4  # a "larger" chunked-prefill budget, to say whether the budget is what limits TTFT
