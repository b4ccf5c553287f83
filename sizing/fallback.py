"""Fallbacks for GPU capacity that is sold out or reclaimed: which other instance types serve the same model
within the SLO and how many of each, spot cost beside on-demand, and whether a type can hold a model at all.

Pure: it reads the search's own verdicts (``sizing.search.SearchResult``) and the catalog; no I/O.

- The ladder is the search's other options that meet the SLOs, one per instance type (its cheapest), in order
  of cost: the count each needs is the search's own, so it is adjusted for each type's capacity per instance.
- Spot prices are not published per type; ``DEFAULT_SPOT_FRACTION`` of on-demand is the estimate used (Alibaba
  advertises preemptible discounts of up to 90%; 30% of on-demand is a conservative middle, to be replaced by
  ``DescribePrice`` with ``SpotStrategy`` for real figures).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sizing.catalog import GPU, InstanceType, ModelShape, find_gpu
from sizing.errors import SizingInputError
from sizing.memory import check_tp, resolve_dtype, weight_bytes_per_rank
from sizing.search import Candidate, SearchResult, Verdict

DEFAULT_SPOT_FRACTION = 0.3
GPU_MEMORY_UTILIZATION = 0.90  # vLLM's default share of each GPU it may use


@dataclass(frozen=True)
class Rung:
    instance_type: str
    instances: int
    tp: int
    cost_cny_per_hour: float | None
    cost_cny_per_million_tokens: float | None
    spot_cost_cny_per_million_tokens: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type,
            "instances": self.instances,
            "tp": self.tp,
            "cost_cny_per_hour": _round(self.cost_cny_per_hour),
            "cost_cny_per_million_tokens": _round(self.cost_cny_per_million_tokens),
            "spot_cost_cny_per_million_tokens": _round(self.spot_cost_cny_per_million_tokens),
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def spot_cost(cost: float | None, spot_fraction: float = DEFAULT_SPOT_FRACTION) -> float | None:
    return None if cost is None else cost * spot_fraction


# the search's verdicts on options that serve the load within the SLOs
_SERVES = (Verdict.BEST, Verdict.DEARER, Verdict.SAME_COST)


def _serves(c: Candidate) -> bool:
    return c.verdict in _SERVES and c.instances is not None


def fallback_ladder(
    result: SearchResult, spot_fraction: float = DEFAULT_SPOT_FRACTION, limit: int = 5
) -> list[Rung]:
    """The other instance types that serve the load within the SLOs, cheapest first (at most ``limit``),
    with their counts."""
    best = result.best
    if best is None:
        return []
    seen = {best.instance_type}
    rungs: list[Rung] = []
    for c in result.candidates[1:]:
        if c.instance_type in seen or not _serves(c) or c.meets_slo is False:
            continue
        seen.add(c.instance_type)
        rungs.append(
            Rung(
                instance_type=c.instance_type or c.gpu,
                instances=c.instances or 0,
                tp=c.tp,
                cost_cny_per_hour=c.cost_cny_per_hour,
                cost_cny_per_million_tokens=c.cost_cny_per_million_tokens,
                spot_cost_cny_per_million_tokens=spot_cost(c.cost_cny_per_million_tokens, spot_fraction),
            )
        )
    rungs.sort(key=lambda r: (r.cost_cny_per_hour is None, r.cost_cny_per_hour or 0.0, r.instance_type))
    return rungs[:limit]


def relative_capacity(instance: InstanceType, gpu: GPU | None = None) -> float:
    """Decode throughput per instance, up to a constant: GPUs x memory bandwidth (decode is
    bandwidth-bound)."""
    the_gpu = gpu or find_gpu(instance.gpu)
    return instance.gpus * the_gpu.bandwidth_gbps / 1000.0


def cannot_hold(model: ModelShape, instance: InstanceType) -> str | None:
    """Why ``instance`` cannot serve ``model`` (None when some tensor parallel size over its GPUs holds the
    weights in the GPU memory vLLM may use)."""
    gpu = find_gpu(instance.gpu)
    usable_gib = gpu.visible_gib * GPU_MEMORY_UTILIZATION
    reason = f"{instance.name} has no tensor parallel size that {model.name} allows"
    for tp in sorted((t for t in range(1, instance.gpus + 1) if instance.gpus % t == 0), reverse=True):
        try:
            check_tp(model, tp)
            dtype = resolve_dtype(model, gpu)
        except SizingInputError as exc:
            reason = str(exc)
            continue
        weights_gib = weight_bytes_per_rank(model, dtype, tp) / 2**30
        if weights_gib < usable_gib:
            return None
        reason = (
            f"{model.name} needs {weights_gib:.1f} GiB of {dtype} weights per GPU at TP {tp}; "
            f"{instance.name} has {usable_gib:.1f} GiB usable per {gpu.name} "
            f"(gpu_memory_utilization {GPU_MEMORY_UTILIZATION})"
        )
        break
    return reason


def instance_type_problems(model_name: str | None, instance_types: tuple[str, ...] | list[str]) -> list[str]:
    """What is wrong with a group's ``instance_types``: a type the catalog does not know, or one that cannot
    hold the group's ``model`` (with the reason)."""
    from sizing.catalog import find_instance, find_model

    problems: list[str] = []
    model: ModelShape | None = None
    if model_name is not None:
        try:
            model = find_model(model_name)
        except SizingInputError as exc:
            return [f"model: {exc}"]
    for name in instance_types:
        try:
            instance = find_instance(name)
        except SizingInputError as exc:
            problems.append(f"instance_types: {exc}")
            continue
        why = None if model is None else cannot_hold(model, instance)
        if why is not None:
            problems.append(f"instance_types: {name} cannot hold {model_name}: {why}")
    return problems
