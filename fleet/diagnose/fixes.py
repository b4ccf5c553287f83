"""Concrete numbers for the fixes, from the sizing performance model (pure: sizing only, no I/O).

Each helper answers one question a finding's fix needs ("how many instances at the SLO", "what does fp8 KV
cache buy", "which card has more bandwidth") for the group's model on its instance type. When the model or
the instance type is unknown to the catalog the helper returns ``None`` and the finding falls back to
arithmetic on what was measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleet.diagnose.model import GroupContext

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
    plan: object
    perf: object
    deployment: object


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
        perf_model,
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
        )
        if changes:
            dep = dep.with_(**changes)
        plan = plan_memory(dep)
        if not plan.fits:
            return None
        perf = perf_model(dep.model, dep.gpu, dep.tp, plan.dtype, plan.kv_cache_dtype)
    except (SizingInputError, ValueError, KeyError):
        return None
    return Deploy(
        model=ctx.model,
        instance_type=inst.name,
        gpu=inst.gpu,
        gpus=inst.gpus,
        kv_cache_tokens=plan.kv_cache_tokens,
        max_num_seqs=plan.max_num_seqs,
        max_model_len=plan.max_model_len,
        plan=plan,
        perf=perf,
        deployment=dep,
    )


def request_sizes(ctx: GroupContext, output_tokens: float | None = None) -> tuple[float, float]:
    """(prompt, output) tokens per request: the group's, else measured output, else the sizing defaults."""
    prompt = ctx.prompt_tokens_mean or DEFAULT_PROMPT_TOKENS
    output = output_tokens or ctx.output_tokens_mean or DEFAULT_OUTPUT_TOKENS
    return float(prompt), float(output)


def capacity_rps(ctx: GroupContext, output_tokens: float | None = None) -> tuple[float, int] | None:
    """Requests/s one instance sustains within the TPOT SLO (if any), and the batch it runs at."""
    d = deployment(ctx)
    if d is None:
        return None
    from sizing.latency import capacity_estimate

    prompt, output = request_sizes(ctx, output_tokens)
    rps, batch = capacity_estimate(
        d.plan,  # type: ignore[arg-type]
        d.perf,  # type: ignore[arg-type]
        prompt,
        output,
        slo_tpot_p99_ms=ctx.slo_tpot_p99_ms,
    )
    return (rps, batch) if rps > 0 else None


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
    a = base.perf.decode_tpot_s(1000)  # type: ignore[attr-defined]
    b = quant.perf.decode_tpot_s(1000)  # type: ignore[attr-defined]
    return b / a if a > 0 else None


def tpot_batch_limit(ctx: GroupContext, output_tokens: float | None = None) -> int | None:
    """The largest batch whose iterations keep P99 TPOT within the SLO (sizing's capacity estimate)."""
    if ctx.slo_tpot_p99_ms is None:
        return None
    cap = capacity_rps(ctx, output_tokens)
    return cap[1] if cap else None
