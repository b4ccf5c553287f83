"""Calibration from the user's own vLLM run: what one startup log (and optionally one ``vllm bench serve``
result) says, turned into corrections of the sizing model's terms for that (model, GPU, TP, vLLM version).

Pure: the shell reads the files and passes the text and the parsed JSON in; this module never touches a file.

Two scopes, because a log of *another* model on the same card still tells us about the card:

* ``gpu`` terms apply to every model on that GPU kind: the memory CUDA reports (``total_gpu_memory``), the
  non-torch memory at that TP (CUDA context, NCCL and custom all-reduce buffers), and the achievable
  memory-bandwidth share solved from a benchmark.
* ``deployment`` terms apply only to the same model, dtype and TP: the weights as loaded, the activation peak
  (as a ratio to the model's, so it still scales with the profiling batch), the rest of what vLLM kept
  outside the KV cache (V1 logs print no split), and the KV bytes per token vLLM allocated.

With a calibration of the same deployment the prediction at other ``max_model_len``,
``gpu_memory_utilization`` and ``max_num_seqs`` moves only by the model's *differences* between the
settings, so the calibrated terms are exact at the logged settings and the physics carries the rest.

Loader API (for ``fleet size``, ``fleet forecast`` and the service's capacity model)::

    cal = calibration_from_dict(yaml.safe_load(text))   # validated; SizingInputError names a bad field
    dep = apply_calibration(Deployment(model, gpu, tp), cal)
    plan, perf = plan_memory(dep), perf_for(dep, plan)
    calibration_to_dict(cal)                            # what ``fleet size calibrate`` writes
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from sizing.catalog import GIB, GPU, ModelShape
from sizing.errors import SizingInputError
from sizing.vllm_log import LogFacts

if TYPE_CHECKING:
    from sizing.memory import Deployment, MemoryPlan

SCHEMA = "fleet-sizing-calibration/1"
KV_BYTES_TOLERANCE = 0.02  # a logged KV bytes/token further than this from the model's replaces it
# Achievable share of datasheet bandwidth a benchmark may set for a GPU kind: STREAM-like copies reach about
# 0.8-0.93 on HBM and 0.75-0.9 on GDDR cards; outside this range the run measured something else.
BW_EFF_RANGE = (0.5, 0.95)
# What a startup log may leave between the usable memory and weights + KV cache before it is refused as a log
# of another card: below zero by more than the printed figures' rounding and the spread of one card's visible
# memory between drivers and variants (A10 22.07 / A10G 21.99, 48 GB cards 44.31-44.55 GiB: ~2 %), or more
# than vLLM's activation peak, non-torch memory and graphs ever take (a few GiB, a few times the model's).
OVERHEAD_SLACK_GIB = 0.1
OVERHEAD_SLACK_SHARE = 0.02
OVERHEAD_MAX_FACTOR = 3.0
OVERHEAD_MAX_EXTRA_GIB = 4.0
VISIBLE_MATCH = 0.05  # a catalog GPU whose visible memory is this close to what the figures imply "fits"
# A logged total_gpu_memory this far from the given GPU's visible memory is another card's (one card's figure
# varies by well under this between drivers and variants: see OVERHEAD_SLACK_SHARE).
VISIBLE_SPREAD = 0.1
# vLLM 0.11.0's release notes: "This release completes the removal of V0 engine."
V0_REMOVED_IN = (0, 11, 0)


class Scope(StrEnum):
    GPU = "gpu"
    DEPLOYMENT = "deployment"


@dataclass(frozen=True)
class Term:
    """One corrected term: what the log said, what the uncalibrated model predicted, in ``unit``."""

    name: str
    scope: Scope
    logged: float
    predicted: float
    unit: str

    @property
    def error_pct(self) -> float:
        """How far the uncalibrated prediction was from the log, percent of the logged value."""
        return (self.predicted / self.logged - 1.0) * 100.0 if self.logged else 0.0


@dataclass(frozen=True)
class Calibration:
    """Corrections for one (model, GPU, TP, vLLM version); ``None`` leaves a term to the physics."""

    model: str
    gpu: str
    tp: int
    dtype: str
    engine: str = "v1"
    vllm_version: str | None = None
    # gpu scope
    visible_gib: float | None = None
    non_torch_gib: float | None = None  # at ``tp``
    bw_eff: float | None = None
    # deployment scope
    weights_gib: float | None = None
    activation_scale: float | None = None  # on the profiling-run body
    sampler_scale: float | None = None  # on the sampler's logits buffers (0 for 0.6.4, which counts none)
    overhead_residual_gib: float | None = None
    kv_bytes_per_token: int | None = None
    decode_time_scale: float | None = None
    prefill_time_scale: float | None = None
    terms: tuple[Term, ...] = field(default=())
    source: str = ""

    def applies_to_gpu(self, gpu: GPU) -> bool:
        return gpu.name == self.gpu

    def applies_to(self, model: ModelShape, gpu: GPU, tp: int, dtype: str) -> bool:
        """Deployment-scope terms hold only for the same model, GPU kind, TP and weight format."""
        return self.applies_to_gpu(gpu) and tp == self.tp and model.name == self.model and dtype == self.dtype


# ------------------------------------------------------------------------------------------ application
def apply_calibration(dep: Deployment, cal: Calibration | None) -> Deployment:
    """``dep`` with the calibration attached: the card's logged total, and the engine and release of the vLLM
    that was logged (V0 and V1 profile memory differently; V1 0.21+ counts CUDA graphs inside util)."""
    if cal is None:
        return dep
    gpu = dep.gpu
    if cal.applies_to_gpu(gpu) and cal.visible_gib is not None:
        gpu = gpu.with_visible_gib(cal.visible_gib)
    version = dep.vllm_version or _readable_version(cal.vllm_version)
    return replace(dep, gpu=gpu, engine=cal.engine, calibration=cal, vllm_version=version)


def check_engine(engine: str, version: str | None) -> None:
    """Refuse the V0 engine with a release that no longer has it: a log or file saying both is of neither
    (V0 and V1 profile memory differently). A main-branch build's version says nothing and passes."""
    from sizing.memory import version_tuple

    release = version_tuple(_readable_version(version))
    if engine == "v0" and release is not None and release >= V0_REMOVED_IN:
        raise SizingInputError(
            f"engine v0 with vLLM {version}: vLLM removed the V0 engine in 0.11.0 (it runs V1 only)"
        )


def _readable_version(version: str | None) -> str | None:
    """A logged release the memory rules can read ("0.19.0"); a main-branch build ("0.1.dev20073+g...")
    is the current release (None)."""
    from sizing.memory import version_tuple

    if version is None:
        return None
    try:
        parsed = version_tuple(version)
        return version if parsed is not None and parsed[:2] != (0, 1) else None
    except SizingInputError:
        return None


# ------------------------------------------------------------------------------------------ derivation
@dataclass(frozen=True)
class BenchResult:
    """The fields of a ``vllm bench serve`` result JSON the calibration reads."""

    mean_tpot_ms: float
    mean_ttft_ms: float | None
    output_throughput: float | None
    mean_input_tokens: float
    mean_output_tokens: float
    max_concurrency: float | None


def bench_from_json(data: object) -> BenchResult:
    """Validate a ``vllm bench serve --save-result`` JSON (``benchmark_serving.py`` before 0.9)."""
    if not isinstance(data, Mapping):
        raise SizingInputError("not a vllm bench serve result: expected a JSON object")

    def num(key: str, required: bool = True) -> float | None:
        value = data.get(key)
        if value is None and not required:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise SizingInputError(f"not a vllm bench serve result: {key!r} missing or not a number")
        return float(value)

    completed = num("completed") or 0.0
    if completed < 1:
        raise SizingInputError("vllm bench serve result: no completed requests")
    tpot = num("mean_tpot_ms")
    if not tpot:
        raise SizingInputError("vllm bench serve result: 'mean_tpot_ms' is zero")
    return BenchResult(
        mean_tpot_ms=tpot,
        mean_ttft_ms=num("mean_ttft_ms", required=False),
        output_throughput=num("output_throughput", required=False),
        mean_input_tokens=(num("total_input_tokens") or 0.0) / completed,
        mean_output_tokens=max(1.0, (num("total_output_tokens") or 0.0) / completed),
        max_concurrency=num("max_concurrency", required=False),
    )


def calibrate(
    facts: LogFacts, dep: Deployment, bench: BenchResult | None = None, source: str = ""
) -> Calibration:
    """Corrections that make the model reproduce ``facts`` for ``dep`` (the deployment the log ran)."""
    from sizing.memory import plan_memory

    check_engine(dep.engine, facts.vllm_version)
    if facts.pp is not None and facts.pp > 1:
        raise SizingInputError(
            f"the log ran with pipeline_parallel_size={facts.pp}: each rank held some of the layers, and the "
            "model sizes tensor parallelism only; calibrate on a start with --pipeline-parallel-size 1"
        )
    if facts.kv_cache_memory_given:
        raise SizingInputError(
            "the log's KV cache was sized by --kv-cache-memory (vLLM skipped its memory profiling), so it "
            "says nothing of the memory vLLM needs besides: calibrate on a start without --kv-cache-memory"
        )
    version = dep.vllm_version or _readable_version(facts.vllm_version)
    base = replace(dep, calibration=None, vllm_version=version)
    plan = plan_memory(base)
    cal = Calibration(
        model=dep.model.name,
        gpu=dep.gpu.name,
        tp=dep.tp,
        dtype=plan.dtype,
        engine=dep.engine,
        vllm_version=facts.vllm_version,
        source=source,
    )
    for step in (_visible, _weights, _non_torch, _activation):
        cal = step(cal, facts, plan)
    cal = _kv_bytes(cal, facts, plan)
    cal = _overhead(cal, facts, base)
    if bench is not None:
        cal = _speed(cal, bench, apply_calibration(base, cal))
    return cal


def _add(cal: Calibration, term: Term, **changes: object) -> Calibration:
    return replace(cal, terms=(*cal.terms, term), **changes)  # type: ignore[arg-type]  # field values


def _visible(cal: Calibration, facts: LogFacts, plan: MemoryPlan) -> Calibration:
    if facts.total_gib is None:
        return cal
    if abs(facts.total_gib / plan.visible_gib - 1.0) > VISIBLE_SPREAD:
        raise SizingInputError(
            f"the log does not fit this GPU: it shows {facts.total_gib:.2f} GiB per GPU (total_gpu_memory), "
            f"the {cal.gpu} {plan.visible_gib:.2f} GiB{_fitting(facts.total_gib, cal.gpu)}; "
            "give the --gpu or --instance-type it ran on"
        )
    term = Term("visible_gib", Scope.GPU, facts.total_gib, plan.visible_gib, "GiB")
    return _add(cal, term, visible_gib=facts.total_gib)


def _weights(cal: Calibration, facts: LogFacts, plan: MemoryPlan) -> Calibration:
    if facts.weights_gib is None:
        return cal  # the residual then carries the model's weights error too
    term = Term("weights_gib", Scope.DEPLOYMENT, facts.weights_gib, plan.weights_gib, "GiB")
    return _add(cal, term, weights_gib=facts.weights_gib)


def _non_torch(cal: Calibration, facts: LogFacts, plan: MemoryPlan) -> Calibration:
    if facts.non_torch_gib is None:
        return cal
    term = Term("non_torch_gib", Scope.GPU, facts.non_torch_gib, plan.non_torch_gib, "GiB")
    return _add(cal, term, non_torch_gib=facts.non_torch_gib)


def _activation(cal: Calibration, facts: LogFacts, plan: MemoryPlan) -> Calibration:
    """The logged peak is the larger of forward pass and sampler run: the side the model has on top takes the
    correction, the other keeps the model's figure (so a change of max_num_seqs or of the batch still moves
    the right one). 0.6.4's profile counts no sampler (vllm#10517): the forward pass takes it all."""
    if facts.activation_gib is None or plan.activation_gib <= 0:
        return cal
    term = Term("activation_gib", Scope.DEPLOYMENT, facts.activation_gib, plan.activation_gib, "GiB")
    body = next(t.gib for t in plan.terms if t.name.startswith("activation"))
    sampler = next(t.gib for t in plan.terms if t.name.startswith("sampler"))
    if "v0-0.6.4" in facts.formats or sampler <= 0:
        return _add(cal, term, activation_scale=facts.activation_gib / body, sampler_scale=0.0)
    if body >= sampler:
        return _add(cal, term, activation_scale=facts.activation_gib / body)
    return _add(cal, term, sampler_scale=facts.activation_gib / sampler)


def _kv_bytes(cal: Calibration, facts: LogFacts, plan: MemoryPlan) -> Calibration:
    """vLLM's own KV bytes per token, where the log gives both the pool and its size in tokens or blocks."""
    tokens = facts.kv_cache_tokens or (facts.gpu_blocks * 16 if facts.gpu_blocks else None)
    if facts.kv_cache_gib is None or not tokens or plan.local is not None:
        return cal  # a hybrid model's logged tokens are derived (concurrency x max_model_len), not a pool
    implied = facts.kv_cache_gib * GIB / tokens
    if implied < 1.0:  # a corrupt or pasted line: a zero in the file divided every later sizing by zero
        raise SizingInputError(
            f"the log's KV cache of {facts.kv_cache_gib:g} GiB holds {tokens:,} tokens, under one byte a "
            "token: the two lines are not of one start; give the log as vLLM wrote it"
        )
    if abs(implied / plan.kv_bytes_per_token - 1.0) <= KV_BYTES_TOLERANCE:
        return cal  # within the rounding of the printed GiB: the model's own figure is exact
    term = Term("kv_bytes_per_token", Scope.DEPLOYMENT, implied, plan.kv_bytes_per_token, "bytes")
    return _add(cal, term, kv_bytes_per_token=round(implied))


def _logged_kv_gib(facts: LogFacts, kv_bytes_per_token: float, hybrid: bool = False) -> float | None:
    if facts.kv_cache_gib is not None:
        return facts.kv_cache_gib
    if hybrid:
        return None  # its logged tokens do not multiply out to the pool
    tokens = facts.kv_cache_tokens or (facts.gpu_blocks * 16 if facts.gpu_blocks else None)
    return tokens * kv_bytes_per_token / GIB if tokens else None


def _overhead(cal: Calibration, facts: LogFacts, base: Deployment) -> Calibration:
    """Whatever the split terms leave unexplained between the usable memory and the logged KV pool."""
    from sizing.memory import plan_memory

    plan = plan_memory(apply_calibration(base, replace(cal, overhead_residual_gib=None)))
    kv_logged = _logged_kv_gib(facts, plan.kv_bytes_per_token, plan.local is not None)
    if kv_logged is None:
        return cal
    util = facts.gpu_memory_utilization or base.gpu_memory_utilization
    overhead_logged = plan.visible_gib * util - plan.weights_gib - kv_logged
    overhead_model = plan.activation_gib + plan.non_torch_gib
    if plan.cuda_graphs_in_util:
        overhead_model += plan.cuda_graph_gib
    _check_fits(facts, plan, base.gpu.name, util, kv_logged, overhead_logged, overhead_model)
    residual = overhead_logged - overhead_model
    if abs(residual) < 0.005:  # the split terms already explain it to the log's printed precision
        return cal
    term = Term("overhead_gib", Scope.DEPLOYMENT, overhead_logged, overhead_model, "GiB")
    return _add(cal, term, overhead_residual_gib=residual)


def _check_fits(
    facts: LogFacts,
    plan: MemoryPlan,
    gpu_name: str,
    util: float,
    kv_gib: float,
    overhead_logged: float,
    overhead_model: float,
) -> None:
    """Refuse a log whose figures cannot come from the GPU given: its weights and KV cache more than the
    GPU's usable memory (a bigger card), or leaving far more unexplained than vLLM ever keeps outside them
    (a smaller one). Calibrating on it would write that difference into the overhead term and skew every
    later sizing of the card; the message names the cards the figures do fit."""
    low = overhead_logged < -max(OVERHEAD_SLACK_GIB, OVERHEAD_SLACK_SHARE * plan.visible_gib)
    most = max(OVERHEAD_MAX_FACTOR * overhead_model, overhead_model + OVERHEAD_MAX_EXTRA_GIB)
    high = overhead_logged > most
    if not (low or high):
        return
    usable = plan.visible_gib * util
    implied = (plan.weights_gib + kv_gib + overhead_model) / util
    where = f"{plan.visible_gib:.2f} GiB x {util:g} = {usable:.2f} GiB usable per GPU"
    said = f"the log's weights ({plan.weights_gib:.2f} GiB) and KV cache ({kv_gib:.2f} GiB)"
    if low:
        problem = f"{said} exceed the {where}: it ran on a GPU with more memory"
    else:
        problem = (
            f"{said} leave {overhead_logged:.2f} GiB of the {where} unexplained, where vLLM keeps about "
            f"{overhead_model:.2f} GiB: it ran on a GPU with less memory"
        )
    setting = "" if facts.gpu_memory_utilization is not None else " or --gpu-memory-utilization"
    raise SizingInputError(
        f"the log does not fit this GPU: {problem}{_fitting(implied, gpu_name)}; "
        f"give the --gpu or --instance-type{setting} it ran with"
    )


def _fitting(visible_gib: float, given: str) -> str:
    """`` (about N GiB visible: the catalog GPUs that size)``, other than ``given``; empty when none does."""
    from sizing.catalog import load_gpus

    fits = sorted(
        g.name
        for g in load_gpus().values()
        if abs(g.visible_gib / visible_gib - 1.0) <= VISIBLE_MATCH and g.name != given
    )
    return f" (about {visible_gib:.1f} GiB visible: {', '.join(fits)})" if fits else ""


def _speed(cal: Calibration, bench: BenchResult, dep: Deployment) -> Calibration:
    """Solve the achievable bandwidth share (a GPU term) so that the decode step at the benchmark's batch
    matches its mean TPOT; the TTFT of a one-at-a-time run scales prefill for this deployment."""
    from sizing.memory import plan_memory
    from sizing.perf import perf_for

    plan = plan_memory(dep)
    perf = perf_for(dep, plan)
    tpot_s = bench.mean_tpot_ms / 1000.0
    # Little's law: sequences decoding at once = output tokens/s x seconds per token
    batch = bench.max_concurrency or 1.0
    if bench.output_throughput:
        batch = max(1.0, min(batch if bench.max_concurrency else math.inf, bench.output_throughput * tpot_s))
    n = max(1, round(batch))
    context = bench.mean_input_tokens + bench.mean_output_tokens / 2.0
    predicted_s = perf.decode_step_s(n, context * n)
    read_s = perf.decode_read_s(n, context * n)
    fixed_s = predicted_s - read_s
    cal = _add(cal, Term("decode_tpot_ms", Scope.GPU, bench.mean_tpot_ms, predicted_s * 1000.0, "ms"))
    if read_s > 0 and tpot_s > fixed_s:
        # the card's share is kept physical (a run under --enforce-eager, or a slow host, would otherwise
        # charge its launch costs to the bandwidth of every model on this GPU): the rest is this deployment's
        bw_eff = min(BW_EFF_RANGE[1], max(BW_EFF_RANGE[0], perf.bw_eff * read_s / (tpot_s - fixed_s)))
        cal = replace(cal, bw_eff=bw_eff)
        solved = perf_for(apply_calibration(dep, cal), plan).decode_step_s(n, context * n)
        if abs(solved / tpot_s - 1.0) > 0.005:
            cal = replace(cal, decode_time_scale=tpot_s / solved)
    else:
        cal = replace(cal, decode_time_scale=tpot_s / predicted_s)
    if bench.mean_ttft_ms and n == 1:
        prefill_s = perf.prefill_s(max(1, round(bench.mean_input_tokens)), plan.max_num_batched_tokens)
        term = Term("ttft_ms", Scope.DEPLOYMENT, bench.mean_ttft_ms, prefill_s * 1000.0, "ms")
        cal = _add(cal, term, prefill_time_scale=bench.mean_ttft_ms / 1000.0 / prefill_s)
    return cal


# ------------------------------------------------------------------------------------------ file format
_GPU_TERMS = ("visible_gib", "non_torch_gib", "bw_eff")
_DEPLOYMENT_TERMS = (
    "weights_gib",
    "activation_scale",
    "sampler_scale",
    "overhead_residual_gib",
    "kv_bytes_per_token",
    "decode_time_scale",
    "prefill_time_scale",
)
# A scale on one of the model's terms outside this range corrects nothing the model gets wrong: the log
# measured something else (and 1e300 overflowed the decode step time, 1e-300 zeroed it).
SCALE_RANGE = (0.01, 100.0)


def calibration_to_dict(cal: Calibration) -> dict[str, object]:
    """The calibration file's content (YAML or JSON), with the per-term report for people."""
    out: dict[str, object] = {
        "schema": SCHEMA,
        "model": cal.model,
        "gpu": cal.gpu,
        "tp": cal.tp,
        "dtype": cal.dtype,
        "engine": cal.engine,
        "vllm_version": cal.vllm_version,
        "source": cal.source,
    }
    gpu_terms = {k: getattr(cal, k) for k in _GPU_TERMS}
    dep_terms = {k: getattr(cal, k) for k in _DEPLOYMENT_TERMS}
    out["gpu_terms"] = {k: _round(v) for k, v in gpu_terms.items() if v is not None}
    out["deployment_terms"] = {k: _round(v) for k, v in dep_terms.items() if v is not None}
    out["report"] = [
        {
            "term": t.name,
            "scope": t.scope.value,
            "logged": _round(t.logged),
            "predicted": _round(t.predicted),
            "unit": t.unit,
            "error_pct": round(t.error_pct, 2),
        }
        for t in cal.terms
    ]
    return out


def _round(value: float | int) -> float | int:
    return value if isinstance(value, int) else round(float(value), 6)


def calibration_from_dict(data: object) -> Calibration:
    """Validate a calibration file's parsed content; a bad one raises naming the field."""
    from sizing.catalog import find_gpu
    from sizing.memory import DTYPES

    if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
        raise SizingInputError(f"not a calibration file: expected 'schema: {SCHEMA}'")
    for key in ("model", "gpu", "dtype"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise SizingInputError(f"calibration file: {key!r} must be a non-empty string")
    try:
        # its terms are bounded by this card; a name it never matches would leave them unused without a word
        gpu = find_gpu(data["gpu"])
    except SizingInputError as exc:
        raise SizingInputError(f"calibration file: 'gpu': {exc}") from None
    if data["dtype"] not in DTYPES[1:]:  # the weight format the log ran, never "auto"
        raise SizingInputError(f"calibration file: 'dtype' must be one of {', '.join(DTYPES[1:])}")
    tp = data.get("tp")
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise SizingInputError("calibration file: 'tp' must be a positive integer")
    values: dict[str, float | int] = {}
    for group in ("gpu_terms", "deployment_terms"):
        terms = data.get(group) or {}
        if not isinstance(terms, Mapping):
            raise SizingInputError(f"calibration file: {group!r} must be a mapping")
        for key, value in terms.items():
            values[str(key)] = _term_value(group, str(key), value, gpu)
    engine = data.get("engine", "v1")
    if engine not in ("v0", "v1"):
        raise SizingInputError("calibration file: 'engine' must be v0 or v1")
    version = data.get("vllm_version")
    try:
        check_engine(engine, None if version is None else str(version))
    except SizingInputError as exc:
        raise SizingInputError(f"calibration file: {exc}") from None
    return Calibration(
        model=str(data["model"]),
        gpu=gpu.name,
        tp=tp,
        dtype=str(data["dtype"]),
        engine=str(engine),
        vllm_version=None if version is None else str(version),
        source=str(data.get("source") or ""),
        **values,  # type: ignore[arg-type]  # keys checked against the fields by _term_value
    )


def _term_value(group: str, key: str, value: object, gpu: GPU) -> float | int:
    """One term of the file, within what a startup log of ``gpu`` can give (see :func:`_term_range`)."""
    where = f"calibration file: {group}.{key}"
    if key not in (_GPU_TERMS if group == "gpu_terms" else _DEPLOYMENT_TERMS):
        if key in (*_GPU_TERMS, *_DEPLOYMENT_TERMS):
            other = "deployment_terms" if group == "gpu_terms" else "gpu_terms"
            raise SizingInputError(f"{where} belongs under {other}")
        raise SizingInputError(f"calibration file: unknown term {group}.{key}")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SizingInputError(f"{where} must be a finite number")
    if key == "kv_bytes_per_token":
        # vLLM allocates whole bytes; a fraction was cast to int 0 and divided by
        if value < 1 or not float(value).is_integer():
            raise SizingInputError(f"{where} must be a whole number of bytes, at least 1, got {value:g}")
        return int(value)
    low, high, why = _term_range(key, gpu)
    if key in ("non_torch_gib", "weights_gib") and value <= 0:
        raise SizingInputError(f"{where} must be positive, got {value:g}")
    if not low <= value <= high:
        raise SizingInputError(f"{where} must be in [{low:g}, {high:g}] ({why}), got {value:g}")
    return float(value)


def _term_range(key: str, gpu: GPU) -> tuple[float, float, str]:
    """The closed range a term may take on ``gpu``, and why: what ``fleet size calibrate`` can derive from
    a log of that card. A figure beyond it would size a card that does not exist (visible_gib 100000 on an A10
    gave 737 million KV tokens)."""
    card = round(gpu.visible_gib * (1 + VISIBLE_SPREAD), 2)
    if key == "visible_gib":
        low = round(gpu.visible_gib * (1 - VISIBLE_SPREAD), 2)
        return low, card, f"the {gpu.name} shows CUDA {gpu.visible_gib:g} GiB"
    if key in ("non_torch_gib", "weights_gib"):
        return 0.0, card, f"at most what the {gpu.name} holds"
    if key == "overhead_residual_gib":
        return -card, card, f"at most what the {gpu.name} holds, either way"
    if key == "bw_eff":
        return BW_EFF_RANGE[0], BW_EFF_RANGE[1], "the achievable share of datasheet bandwidth"
    if key == "sampler_scale":
        return 0.0, SCALE_RANGE[1], "0 for a release whose profile counts no sampler"
    return SCALE_RANGE[0], SCALE_RANGE[1], "a correction, not another measurement"
