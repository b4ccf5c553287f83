"""The SLO-aware search: which instance type, tensor parallelism, max_num_seqs and count carry a load
cheapest while meeting the latency SLOs, and why every other option lost.

Method, per option (instance type x TP x max_num_seqs):

1. Memory: :func:`plan_memory`; an option whose weights or one max_model_len request do not fit is rejected.
2. Estimate: :func:`capacity_estimate` gives the requests/s one engine sustains within the TPOT SLO; the
   instance count follows (an instance of G GPUs runs G / TP engines behind a balancer), and its price.
3. Verify: in order of estimated cost, the simulator runs one engine's share of the load at that count;
   if it misses an SLO the count grows, if it meets them with room a smaller count is tried. Options that
   share a GPU, TP and batch size share simulations. Verification stops once the cheapest ``top`` verified
   options cannot be beaten by the remaining estimates (with a margin for the estimate's error).
4. The winners get their headroom (the highest per-engine load that still meets the SLOs, by bisection) and
   a queue limit (how many waiting requests one engine clears within the TTFT SLO; beyond it, fail fast).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from sizing.calibration import Calibration
from sizing.capacity import largest_passing
from sizing.catalog import GPU, InstanceType, ModelShape, PriceBook, find_gpu, load_instances
from sizing.errors import SizingInputError
from sizing.latency import (
    LatencyReport,
    Workload,
    capacity_estimate,
    kv_held_requests,
    simulate,
    single_stream_step_s,
    tpot_floor_s,
)
from sizing.memory import Deployment, MemoryPlan, check_tp, default_engine, plan_memory
from sizing.perf import PerfModel, perf_for

TP_CHOICES = (1, 2, 4, 8)
SEQ_CHOICES = (16, 32, 64, 128, 256, 512)  # smaller batches than vLLM's default trade throughput for TPOT
ESTIMATE_MARGIN = 1.25  # keep verifying while an estimate is within this factor of the k-th verified cost
MAX_SIMULATIONS = 60  # bound on the search's simulations (the catalog search must stay under 1 s)
MAX_INSTANCES = 2000  # ESS caps a scaling group at 2000 instances; beyond it no count is offered
FLOOR_LOAD_DIVISOR = 16.0  # "idle": a sixteenth of the per-engine load at the verified count
FLOOR_OVERLAP = 0.001  # "idle": also at most this many requests in service at once, on average
FLOOR_MARGIN = 0.9  # an SLO within 10% of the idle latency is met only by idling engines
HOURS_PER_MONTH = 730.0  # 8760 h / 12, the month cloud price lists use
DEFAULT_QUEUE_WINDOW_S = 10.0  # queue limit horizon when no TTFT SLO is given
QUEUE_REJECT_SHARE = 0.01  # a queue limit may turn away at most this share of the sized load (its bursts)
QUEUE_LIMIT_STEPS = 4  # doublings of the queue limit tried against that share
IDLE_BUSY_SHARE = 0.25  # engines busy less than this share of the time at the sized load are mostly idle
LOOSER_SLO_FACTOR = 2.0  # the looser value of a binding SLO the idle-fleet warning prices


@dataclass(frozen=True)
class SLO:
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None

    def __post_init__(self) -> None:
        for v in (self.ttft_p99_ms, self.tpot_p99_ms):
            if v is not None and not v > 0:
                raise SizingInputError(f"SLOs must be positive milliseconds, got {v}")

    @property
    def given(self) -> bool:
        """Whether any latency target was set (without one the search ranks on cost at the load alone)."""
        return self.ttft_p99_ms is not None or self.tpot_p99_ms is not None


@dataclass(frozen=True)
class Settings:
    """The user's fixed choices; ``None`` leaves the choice to vLLM's defaults or to the search."""

    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    tp: int | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.90
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_gib: float | None = None
    calibration: Calibration | None = None
    search_quantized: bool = False  # with dtype "auto": also FP8 (native-FP8 GPUs) and AWQ (sm75+) weights
    vllm_version: str | None = None  # the release being sized ("0.19.0"); None: the current one

    def dtypes(self, model: ModelShape, gpu: GPU) -> list[str]:
        """The weight formats to try on ``gpu``: the checkpoint's own, and the quantized ones it supports."""
        if self.dtype != "auto" or not self.search_quantized or model.quantization is not None:
            return [self.dtype]
        out = ["auto"]
        if gpu.native_fp8:
            out.append("fp8")  # vLLM quantizes a 16-bit checkpoint to FP8 online (--quantization fp8)
        if gpu.compute_capability >= 7.5:
            out.append("awq")  # needs a pre-quantized checkpoint: vllm_args names it or asks for one
        return out

    def deployment(self, model: ModelShape, gpu: GPU, tp: int, dtype: str | None = None) -> Deployment:
        if self.gpu_memory_gib is not None:
            if not self.gpu_memory_gib > 0:
                raise SizingInputError(f"--gpu-memory-gib must be positive, got {self.gpu_memory_gib}")
            gpu = gpu.with_visible_gib(self.gpu_memory_gib)
        elif self.calibration is not None and self.calibration.applies_to_gpu(gpu):
            gpu = gpu.with_visible_gib(self.calibration.visible_gib or gpu.visible_gib)
        return Deployment(
            model=model,
            gpu=gpu,
            tp=tp,
            dtype=dtype or self.dtype,
            kv_cache_dtype=self.kv_cache_dtype,
            max_model_len=self.max_model_len,
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            # a calibration describes the vLLM the user runs: its engine profiles memory its own way; else
            # the release's default engine (V0 before 0.8)
            engine=self.calibration.engine
            if self.calibration is not None
            else default_engine(self.vllm_version),
            calibration=self.calibration,
            vllm_version=self.vllm_version,
        )


class Verdict(StrEnum):
    """Where an option ranks and why, in one word (``fleet size --json``'s ``verdict``): ``reason`` says it in
    full, ``brief`` in a few words for the table. Scripts, the table and the fallback ladder read this, never
    the wording of the reason."""

    BEST = "best"
    DEARER = "dearer"  # serves within the SLOs, costs more than the best
    SAME_COST = "same_cost"  # serves within the SLOs at the best's cost and lost the tie
    NOT_VERIFIED = "not_verified"  # the simulation budget ran out before it
    SLO_MISSED = "slo_missed"
    SLO_FLOOR = "slo_floor"  # the SLO sits at the latency of an idle engine
    TOO_MANY_INSTANCES = "too_many_instances"  # more than one scaling group holds
    KV_TOO_SMALL = "kv_too_small"  # the weights fit, one max_model_len request does not
    WEIGHTS_DO_NOT_FIT = "weights_do_not_fit"
    IMPOSSIBLE = "impossible"  # no such deployment (a TP the GPUs or the heads do not allow, ...)
    NO_PRICE = "no_price"
    UNRANKED = "unranked"  # fits, not ranked (yet)


@dataclass
class Candidate:
    """One option and its verdict. ``to_json`` gives the documented ``fleet size --json`` fields."""

    instance_type: str | None
    gpu: str
    gpus: int  # per instance (or TP with --gpu)
    tp: int
    deployment: Deployment | None = None
    plan: MemoryPlan | None = None
    perf: PerfModel | None = None
    fits: bool = False
    reason: str = ""
    price_cny_per_hour: float | None = None
    price_estimate: bool = True
    max_num_seqs: int | None = None
    # with a load
    instances: int | None = None
    replicas: int | None = None
    report: LatencyReport | None = None
    estimated: bool = False  # instances/cost from the closed-form estimate only (not simulated)
    meets_slo: bool | None = None
    capacity_rps: float | None = None  # per engine, highest load meeting the SLOs
    headroom_pct: float | None = None
    queue_limit: int | None = None
    cost_cny_per_hour: float | None = None
    cost_cny_per_million_tokens: float | None = None
    floor_bound: bool = False  # the SLO sits at the latency of an idle engine
    slo_bound: SloBound | None = None  # mostly idle engines: a latency SLO, not the load, sets the count
    warnings: list[str] = field(default_factory=list)
    verdict: Verdict = Verdict.UNRANKED
    brief: str = ""  # the verdict in a few words

    def rule(self, verdict: Verdict, reason: str, brief: str | None = None) -> None:
        """Set the verdict, its reason in full and in a few words (by default the reason itself)."""
        self.verdict, self.reason, self.brief = verdict, reason, reason if brief is None else brief

    @property
    def cost_cny_per_month(self) -> float | None:
        return None if self.cost_cny_per_hour is None else self.cost_cny_per_hour * HOURS_PER_MONTH

    @property
    def replicas_per_instance(self) -> int:
        return max(1, self.gpus // self.tp)

    def vllm_args(self) -> dict[str, Any]:
        if self.plan is None or self.deployment is None:
            return {}
        return vllm_args(self.deployment, self.plan, self.max_num_seqs, self.replicas_per_instance)

    def to_json(self, workload: Workload | None = None) -> dict[str, Any]:
        p = self.plan
        out: dict[str, Any] = {
            "instance_type": self.instance_type,
            "gpu": self.gpu,
            "gpus": self.gpus,
            "tp": self.tp,
            "dtype": p.dtype if p else None,
            "fits": self.fits,
            "weights_gib": _r(p.weights_gib if p else None),
            "kv_cache_gib": _r(p.kv_cache_gib if p else None),
            "kv_cache_tokens": p.kv_cache_tokens if p else None,
            "activation_gib": _r(p.activation_gib if p else None),
            "non_torch_gib": _r(p.non_torch_gib if p else None),
            "max_concurrency": _r(p.max_concurrency if p else None),
            "max_model_len": p.max_model_len if p else None,
            "decode_tpot_ms": None,
            "prefill_tokens_per_s": None,
            "vllm_args": self.vllm_args(),
            "verdict": self.verdict.value,
            "reason": self.reason,
            "brief": self.brief,
            "max_model_len_that_fits": p.max_model_len_that_fits if p else None,
            "kv_layout": _kv_layout(p),
        }
        if p is not None and self.perf is not None and self.fits:
            ctx = int(workload.mean_prompt_tokens) if workload else 0
            out["decode_tpot_ms"] = _r(self.perf.decode_tpot_s(ctx) * 1000)
            budget = p.max_num_batched_tokens
            out["prefill_tokens_per_s"] = round(budget / self.perf.prefill_s(budget, budget))
        if workload is not None and workload_has_load(workload):
            rep = self.report
            out.update(
                {
                    "instances": self.instances,
                    "p99_ttft_ms": _r(rep.ttft_p99_ms if rep else None),
                    "p99_tpot_ms": _r(rep.tpot_p99_ms if rep else None),
                    "cost_cny_per_hour": _r(self.cost_cny_per_hour),
                    "cost_cny_per_month": _r(self.cost_cny_per_month, 0),
                    "cost_cny_per_million_tokens": _r(self.cost_cny_per_million_tokens),
                    "replicas": self.replicas,
                    "max_num_seqs": self.max_num_seqs,
                    "meets_slo": self.meets_slo,
                    "estimated": self.estimated,
                    "headroom_pct": _r(self.headroom_pct),
                    "queue_limit": self.queue_limit,
                    "p50_ttft_ms": _r(rep.ttft_p50_ms if rep else None),
                    "p95_ttft_ms": _r(rep.ttft_p95_ms if rep else None),
                    "p50_tpot_ms": _r(rep.tpot_p50_ms if rep else None),
                    "p99_e2e_ms": _r(rep.e2e_p99_ms if rep else None),
                    "p99_queue_ms": _r(rep.queue_p99_ms if rep else None),
                }
            )
        out["price_cny_per_hour"] = _r(self.price_cny_per_hour)
        out["price_estimate"] = self.price_estimate
        out["vllm_command"] = vllm_command(out["vllm_args"]) if out["vllm_args"] else None
        out["warnings"] = list(self.warnings)
        out["slo_bound"] = self.slo_bound.to_json() if self.slo_bound is not None else None
        return out


@dataclass(frozen=True)
class SloBound:
    """A latency SLO, not the load, sets an option's count: its engines are mostly idle at the sized load,
    and the count (and cost) the same option needs at a looser value of that SLO."""

    slo: str  # "ttft_p99_ms" or "tpot_p99_ms"
    slo_ms: float
    busy_fraction: float
    looser_slo_ms: float
    looser_instances: int
    looser_cost_cny_per_hour: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "slo": self.slo,
            "slo_ms": self.slo_ms,
            "busy_fraction": _r(self.busy_fraction),
            "looser_slo_ms": self.looser_slo_ms,
            "looser_instances": self.looser_instances,
            "looser_cost_cny_per_hour": _r(self.looser_cost_cny_per_hour),
        }


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(float(x), nd)


def _kv_layout(plan: MemoryPlan | None) -> dict[str, Any] | None:
    """A hybrid model's KV cache layout for ``--json`` (vLLM's hybrid manager); None for a uniform one."""
    local = plan.local if plan else None
    if local is None:
        return None
    return {
        "kind": local.kind,
        "block_size": local.block_size,
        "full_attention_layers": local.full_layers,
        "local_layers": local.local_layers,
        "window_tokens": local.window or None,
        "group_size": local.group_size,
        "context_tokens": local.context_tokens,
    }


def workload_has_load(workload: Workload | None) -> bool:
    return workload is not None and (workload.qps is not None or bool(workload.trace))


_DTYPE_ARGS = {"bf16": ("dtype", "bfloat16"), "fp16": ("dtype", "float16")}
_QUANT_ARGS = {"awq": "awq", "gptq": "gptq", "fp8": "fp8", "int8": "compressed-tensors"}


_NEEDS_CHECKPOINT = ("awq", "gptq", "int8")  # vLLM cannot make these from a 16-bit checkpoint


def serving_checkpoint(model: ModelShape, dtype: str) -> tuple[str, bool]:
    """(the repo ``vllm serve`` must load for ``dtype``, whether it is the checkpoint's own format).

    A 4-bit or int8 deployment of a 16-bit model needs a quantized checkpoint: the publisher's where one is
    known, else a placeholder the user must fill in. FP8 is made online from the 16-bit repo."""
    own = model.hf_id or model.name
    if dtype not in _NEEDS_CHECKPOINT or model.quantization == dtype:
        return own, model.quantization == dtype
    repo = model.checkpoint(dtype)
    if repo:
        return repo, True
    return f"<{dtype.upper()} checkpoint of {own}>", False


def checkpoint_note(model: ModelShape, dtype: str) -> str:
    """A warning when the user must supply the quantized checkpoint themselves ('' when none is needed)."""
    if dtype not in _NEEDS_CHECKPOINT or model.quantization == dtype or model.checkpoint(dtype):
        return ""
    return (
        f"{dtype.upper()} weights need a quantized checkpoint of {model.hf_id or model.name}: none is "
        "published that we know of; supply one (e.g. quantize it with AutoAWQ or llm-compressor) as the model"
    )


def vllm_args(
    dep: Deployment, plan: MemoryPlan, max_num_seqs: int | None = None, engines: int = 1
) -> dict[str, Any]:
    """The ``vllm serve`` arguments of a deployment (snake_case keys, as in vLLM's EngineArgs). ``engines``
    above 1: the instance's other GPUs serve as more engines of the same server (vLLM's data parallel
    deployment), one command and one /metrics for them all, as the count and the node agent assume."""
    repo, prequantized = serving_checkpoint(dep.model, plan.dtype)
    args: dict[str, Any] = {"model": repo}
    if plan.dtype in _DTYPE_ARGS:
        args["dtype"] = _DTYPE_ARGS[plan.dtype][1]
    elif not prequantized:
        args["quantization"] = _QUANT_ARGS[plan.dtype]  # a quantized checkpoint says so in its config
    args["tensor_parallel_size"] = dep.tp
    if engines > 1 and dep.engine == "v1":  # V0 has no data parallel serving: see v0_engines_note
        args["data_parallel_size"] = engines
    args["max_model_len"] = plan.max_model_len
    args["gpu_memory_utilization"] = dep.gpu_memory_utilization
    args["max_num_seqs"] = max_num_seqs or plan.max_num_seqs
    args["max_num_batched_tokens"] = plan.max_num_batched_tokens
    if plan.kv_cache_dtype == "fp8":
        args["kv_cache_dtype"] = "fp8"
    if not plan.cuda_graphs_fit:
        args["enforce_eager"] = True  # no room for CUDA graphs outside gpu_memory_utilization
    return args


def v0_engines_note(dep: Deployment, engines: int) -> str | None:
    """How to run an instance's several engines where the engine is V0: ``vllm serve --data-parallel-size``
    serves them on V1 only (vLLM issue 18702), and releases before 0.8 do not know the flag."""
    if engines <= 1 or dep.engine == "v1":
        return None
    return (
        f"V0 engine: vLLM serves data parallel on V1 only, so run the command {engines} times on the "
        f"instance, each on its own {dep.tp} GPU(s) (CUDA_VISIBLE_DEVICES) and --port, and give the node "
        "agent one --vllm-url per server"
    )


def vllm_command(args: dict[str, Any]) -> str:
    parts = ["vllm", "serve", str(args["model"])]
    for k, v in args.items():
        if k == "model":
            continue
        flag = "--" + k.replace("_", "-")
        parts.append(flag if v is True else f"{flag} {v}")
    return " ".join(parts)


# --------------------------------------------------------------------------------------------- options
@dataclass(frozen=True)
class _Impossible:
    """Why a deployment cannot exist, in full and in brief (``Candidate.rule``)."""

    reason: str
    brief: str


# per (GPU, TP, weight format): the deployment, its memory plan and its speed, or why it cannot exist
_Plans = dict[tuple[str, int, str], tuple[Deployment, MemoryPlan, PerfModel] | _Impossible]


def _option(
    model: ModelShape,
    gpu: GPU,
    tp: int,
    settings: Settings,
    instance: InstanceType | None,
    plans: _Plans,
    dtype: str | None = None,
) -> Candidate:
    gpus = instance.gpus if instance else tp
    cand = Candidate(instance.name if instance else None, gpu.name, gpus, tp)
    if instance is not None and (tp > instance.gpus or instance.gpus % tp):
        cand.rule(
            Verdict.IMPOSSIBLE,
            f"impossible TP: {tp} does not divide the {instance.gpus} GPUs of {instance.name}",
            "impossible TP",
        )
        return cand
    key = (gpu.name, tp, dtype or settings.dtype)
    if key not in plans:
        plans[key] = _plan(model, gpu, tp, settings, dtype)
    got = plans[key]
    if isinstance(got, _Impossible):
        cand.rule(Verdict.IMPOSSIBLE, got.reason, got.brief)
        return cand
    cand.deployment, cand.plan, cand.perf = got
    cand.fits = cand.plan.fits
    if not cand.fits:
        if cand.plan.max_model_len_that_fits > 0:
            brief = f"KV too small; max_model_len <= {cand.plan.max_model_len_that_fits}"
            cand.rule(Verdict.KV_TOO_SMALL, cand.plan.reason, brief)
        else:
            # the verdict keeps its name for scripts; the brief says what does not fit where the weights do
            plan = cand.plan
            alone = plan.weights_gib < plan.usable_gib
            brief = "weights + activations do not fit" if alone else "weights do not fit"
            cand.rule(Verdict.WEIGHTS_DO_NOT_FIT, plan.reason, brief)
    cand.max_num_seqs = cand.plan.max_num_seqs
    cand.warnings = list(cand.plan.warnings)
    for note in (
        checkpoint_note(model, cand.plan.dtype),
        v0_engines_note(cand.deployment, cand.replicas_per_instance),
    ):
        if note:
            cand.warnings.append(note)
    if dtype is not None and dtype != settings.dtype:
        cand.warnings.append(
            f"{cand.plan.dtype.upper()} weights, chosen by the search: check output quality on your own "
            "evaluation, or pin --dtype"
        )
    return cand


def _plan(
    model: ModelShape, gpu: GPU, tp: int, settings: Settings, dtype: str | None
) -> tuple[Deployment, MemoryPlan, PerfModel] | _Impossible:
    """The deployment, its memory plan and its speed; or why it cannot exist, in full and in brief."""
    try:
        check_tp(model, tp)
    except SizingInputError as exc:
        return _Impossible(f"impossible: {exc}", "impossible TP")
    try:
        dep = settings.deployment(model, gpu, tp, dtype)
        plan = plan_memory(dep)
    except SizingInputError as exc:
        return _Impossible(f"impossible: {exc}", f"impossible: {exc}")
    return dep, plan, perf_for(dep, plan)


def _seq_choices(plan: MemoryPlan, settings: Settings) -> list[int]:
    if settings.max_num_seqs:
        return [settings.max_num_seqs]
    return [plan.max_num_seqs] + [s for s in reversed(SEQ_CHOICES) if s < plan.max_num_seqs]


@dataclass
class _Sim:
    """Simulations shared by every option with the same GPU, TP and batch size."""

    workload: Workload
    slo: SLO
    seed: int
    count: int = 0
    cache: dict[tuple[str, int, str, int, float], LatencyReport] = field(default_factory=dict)

    def run(self, cand: Candidate, per_engine_rps: float) -> LatencyReport:
        assert cand.deployment is not None and cand.plan is not None and cand.max_num_seqs is not None
        key = (cand.gpu, cand.tp, cand.plan.dtype, cand.max_num_seqs, round(per_engine_rps, 9))
        if key not in self.cache:
            self.count += 1
            dep = replace(cand.deployment, max_num_seqs=cand.max_num_seqs)
            plan = replace(cand.plan, max_num_seqs=cand.max_num_seqs)
            # a trace is split round-robin over engines; Poisson arrivals split into Poisson arrivals
            replicas = max(1, round(self.workload.rate / per_engine_rps)) if self.workload.trace else 1
            wl = self.workload.with_qps(per_engine_rps * replicas)
            self.cache[key] = simulate(dep, wl, replicas=replicas, seed=self.seed, plan=plan, perf=cand.perf)
        return self.cache[key]


def _estimate(cand: Candidate, workload: Workload, slo: SLO, settings: Settings) -> None:
    """Closed-form count and cost of a fitting option, picking its max_num_seqs."""
    assert cand.plan is not None and cand.perf is not None
    best: tuple[float, int, int, float] | None = None  # (cost, -seqs, replicas, rate)
    p, o = workload.mean_prompt_tokens, workload.mean_output_tokens
    for seqs in _seq_choices(cand.plan, settings):
        rate, _ = capacity_estimate(cand.plan, cand.perf, p, o, slo.tpot_p99_ms, seqs, workload.prefix_hit)
        if rate <= 0:
            continue
        replicas = max(1, math.ceil(workload.rate / rate))
        instances = math.ceil(replicas / cand.replicas_per_instance)
        cost = instances * (cand.price_cny_per_hour or 0.0)
        key = (cost if cand.price_cny_per_hour is not None else float(instances), -seqs, replicas, rate)
        if best is None or key < best:
            best = key
    if best is None:
        assert slo.tpot_p99_ms is not None  # without a TPOT SLO every fitting option sustains some load
        best = _near_idle_estimate(cand, workload, slo.tpot_p99_ms)
    if best is None:
        assert slo.tpot_p99_ms is not None
        why, brief = _no_batch_meets_tpot(cand, workload, slo.tpot_p99_ms)
        cand.rule(Verdict.SLO_MISSED, f"SLO missed: {why}", f"misses SLO: {brief}")
        cand.meets_slo = False
        return
    if slo.ttft_p99_ms is not None:
        # a mean prompt's prefill on an idle engine, its cached share skipped: a TTFT SLO under it is a floor
        # no count meets (the simulation would only say so after spending the budget on it)
        computed = max(1, round(p * cand.plan.computed_share(workload.prefix_hit)))
        idle_ms = cand.perf.prefill_s(computed, cand.plan.max_num_batched_tokens) * 1000
        if idle_ms >= slo.ttft_p99_ms:
            why = f"a mean {p:,.0f}-token prompt prefills in {idle_ms:.0f} ms on an idle engine"
            cand.rule(
                Verdict.SLO_FLOOR,
                f"SLO at the no-load floor: {why} vs the TTFT SLO {slo.ttft_p99_ms:g} ms: more instances "
                "cannot meet it; relax the SLO, shorten prompts, or pick a faster GPU or higher TP",
                "SLO at the idle-engine floor: more instances cannot meet it",
            )
            cand.meets_slo = False
            cand.floor_bound = True
            return
    _, neg_seqs, replicas, _rate = best
    if replicas > MAX_INSTANCES * cand.replicas_per_instance:
        cand.rule(
            Verdict.TOO_MANY_INSTANCES,
            f"needs more than {MAX_INSTANCES} instances (the most one ESS scaling group holds) for "
            f"{workload.rate:.3g} req/s",
        )
        cand.meets_slo = False
        return
    cand.max_num_seqs = -neg_seqs
    _set_count(cand, replicas, workload)
    cand.estimated = True


def _near_idle_estimate(
    cand: Candidate, workload: Workload, slo_tpot_ms: float
) -> tuple[float, int, int, float] | None:
    """Where even a saturated batch of one misses the TPOT SLO, a mostly idle engine may still meet it: the
    per-engine load whose TPOT floor (:func:`tpot_floor_s`) stays under the SLO, as ``_estimate``'s (cost,
    -seqs, replicas, rate); None when the floor at the least load ``MAX_INSTANCES`` instances give is over
    it (no count serves it). Lengths that vary, or a trace's arrivals, leave the floor one decode step."""
    assert cand.plan is not None and cand.perf is not None
    p, o, hit = workload.mean_prompt_tokens, workload.mean_output_tokens, workload.prefix_hit
    poisson = not workload.trace and workload.length_cv == 0
    limit = slo_tpot_ms / 1000.0

    plan, perf = cand.plan, cand.perf

    def floor_s(rate: float) -> float:
        return tpot_floor_s(plan, perf, p, o, hit, rate if poisson else 0.0)

    lo = workload.rate / (MAX_INSTANCES * cand.replicas_per_instance)
    if floor_s(lo) > limit:
        return None
    rate = largest_passing(lambda r: floor_s(r) <= limit, lo, max(lo, workload.rate), iterations=30)
    replicas = max(1, math.ceil(workload.rate / rate))
    instances = math.ceil(replicas / cand.replicas_per_instance)
    cost = instances * cand.price_cny_per_hour if cand.price_cny_per_hour is not None else float(instances)
    return cost, -cand.plan.max_num_seqs, replicas, rate


def _no_batch_meets_tpot(cand: Candidate, workload: Workload, slo_tpot_ms: float) -> tuple[str, str]:
    """Why no count meets the TPOT SLO, in full and in brief: one request's own decode step, or that step
    with the prefills that land in its decode even at the least load ``MAX_INSTANCES`` instances give."""
    assert cand.plan is not None and cand.perf is not None
    p, o = workload.mean_prompt_tokens, workload.mean_output_tokens
    decode_s, _ = single_stream_step_s(cand.plan, cand.perf, p, o, workload.prefix_hit)
    decode_ms = decode_s * 1000
    if decode_ms > slo_tpot_ms:
        why = f"even one request decodes at {decode_ms:.1f} ms per token > {slo_tpot_ms:g} ms"
        return why, why
    least = workload.rate / (MAX_INSTANCES * cand.replicas_per_instance)
    floor_ms = tpot_floor_s(cand.plan, cand.perf, p, o, workload.prefix_hit, least) * 1000
    return (
        f"one request decodes at {decode_ms:.1f} ms per token, and even at {MAX_INSTANCES} instances "
        f"({least:.3g} req/s each) other {p:,.0f}-token prompts' prefill lands in one request's decode in "
        f"fifty: {floor_ms:.1f} ms per token > {slo_tpot_ms:g} ms",
        f"decode with other prompts' prefill at {floor_ms:.1f} ms per token > {slo_tpot_ms:g} ms "
        f"even at {MAX_INSTANCES} instances",
    )


def _set_count(cand: Candidate, replicas: int, workload: Workload) -> None:
    cand.instances = math.ceil(replicas / cand.replicas_per_instance)
    cand.replicas = cand.instances * cand.replicas_per_instance  # a bought instance runs all its engines
    if cand.price_cny_per_hour is not None:
        cand.cost_cny_per_hour = cand.instances * cand.price_cny_per_hour
        tokens_per_hour = workload.rate * 3600 * (workload.mean_prompt_tokens + workload.mean_output_tokens)
        cand.cost_cny_per_million_tokens = cand.cost_cny_per_hour / (tokens_per_hour / 1e6)


def _verify(cand: Candidate, sim: _Sim, workload: Workload, slo: SLO, settings: Settings) -> None:
    """Verify the estimate; when bursts forced a larger count than estimated and a TPOT SLO binds, also try
    the next smaller max_num_seqs (a capped batch keeps TPOT flat under bursts) and keep the cheaper."""
    estimated_instances = cand.instances
    _verify_count(cand, sim, workload, slo)
    if slo.tpot_p99_ms is None or settings.max_num_seqs or cand.instances is None:
        return
    if cand.meets_slo and cand.instances <= (estimated_instances or 0):
        return
    assert cand.plan is not None
    smaller = [s for s in _seq_choices(cand.plan, settings) if s < (cand.max_num_seqs or 0)]
    if not smaller:
        return
    alt = replace(cand, max_num_seqs=smaller[0], instances=estimated_instances, report=None)
    _verify_count(alt, sim, workload, slo)
    better = alt.meets_slo and (not cand.meets_slo or (alt.instances or 0) < (cand.instances or 0))
    if better:
        for name in (
            "max_num_seqs",
            "instances",
            "replicas",
            "report",
            "meets_slo",
            "reason",
            "cost_cny_per_hour",
            "cost_cny_per_million_tokens",
        ):
            setattr(cand, name, getattr(alt, name))


def _verify_count(cand: Candidate, sim: _Sim, workload: Workload, slo: SLO, max_steps: int = 14) -> None:
    """The smallest count whose simulation meets the SLOs: bracket it around the estimate (doubling up when
    the estimate misses), then bisect. Bisection, because the closed-form estimate can be several times too
    high when a TPOT SLO sits near the decode floor (issue 21: x138 where x19 suffices)."""
    assert cand.replicas is not None and cand.instances is not None
    rpi = cand.replicas_per_instance

    def run(n: int) -> LatencyReport:
        return sim.run(cand, workload.rate / (n * rpi))

    def ok(rep: LatencyReport) -> bool:
        return rep.meets(slo.ttft_p99_ms, slo.tpot_p99_ms)

    good, report = cand.instances, run(cand.instances)
    bad, steps = 0, 0  # zero instances never meet an SLO
    if not ok(report) and _floor_check(cand, sim, workload, slo, good):
        return  # more instances cannot help: do not grow the count to the ESS limit to find that out
    while not ok(report) and steps < max_steps and good < MAX_INSTANCES:
        bad, good = good, min(MAX_INSTANCES, good * 2)
        report, steps = run(good), steps + 1
    if ok(report) and bad == 0 and good > 1:
        # bracket from above: one fewer first (the estimate is usually right), then halving
        probe = good - 1
        while probe > bad and steps < max_steps:
            rep, steps = run(probe), steps + 1
            if not ok(rep):
                bad = probe
                break
            good, report = probe, rep
            probe = good // 2
    if ok(report):
        while good - bad > 1 and steps < max_steps:
            mid = (good + bad) // 2
            rep, steps = run(mid), steps + 1
            if ok(rep):
                good, report = mid, rep
            else:
                bad = mid
    _set_count(cand, good * rpi, workload)
    cand.report = report
    cand.estimated = False
    cand.meets_slo = ok(report)
    if not cand.meets_slo:
        missed = report.missed(slo.ttft_p99_ms, slo.tpot_p99_ms)
        cand.rule(Verdict.SLO_MISSED, f"SLO missed at {good} instances: {missed}", f"misses SLO: {missed}")
    _floor_check(cand, sim, workload, slo, good)


def _floor_check(cand: Candidate, sim: _Sim, workload: Workload, slo: SLO, instances: int) -> bool:
    """An SLO at (or under) what one request sees on an idle engine cannot be bought with more instances:
    the count that 'meets' it only idles engines until queueing vanishes. Say so instead of buying them.
    Returns whether the candidate is floor-bound (then it has no count and no cost)."""
    rpi = cand.replicas_per_instance
    load = workload.rate / (instances * rpi)
    # idle: a sixteenth of the load, and rare enough that a request seldom arrives while another is in
    # service; a sixteenth alone is no idle engine where a long prompt's prefill takes a good part of the
    # gap between arrivals (the floor would then include queueing that more instances do remove)
    service_s = sim.run(cand, load).in_service_mean_s
    idle_rps = load / FLOOR_LOAD_DIVISOR
    if service_s > 0:
        idle_rps = min(idle_rps, FLOOR_OVERLAP / service_s)
    idle = sim.run(cand, idle_rps)
    worst: list[str] = []
    for name, slo_ms, floor_ms in (
        ("TTFT", slo.ttft_p99_ms, idle.ttft_p99_ms),
        ("TPOT", slo.tpot_p99_ms, idle.tpot_p99_ms),
    ):
        if slo_ms is not None and floor_ms >= FLOOR_MARGIN * slo_ms:
            worst.append(f"P99 {name} {floor_ms:.0f} ms on an idle engine vs the SLO {slo_ms:g} ms")
    if not worst:
        return False
    cand.meets_slo = False
    cand.floor_bound = True
    cand.estimated = False
    cand.report = idle
    cand.instances = cand.replicas = None
    cand.cost_cny_per_hour = cand.cost_cny_per_million_tokens = None
    cand.rule(
        Verdict.SLO_FLOOR,
        "SLO at the no-load floor: " + "; ".join(worst) + ": more instances cannot meet it; relax the SLO, "
        "shorten prompts, or pick a faster GPU or higher TP",
        "SLO at the idle-engine floor: more instances cannot meet it",
    )
    return True


def _n_plus_one(cand: Candidate, sim: _Sim, workload: Workload, slo: SLO) -> None:
    """Warn when losing one instance breaks the SLO, and what N+1 costs."""
    if cand.instances is None or cand.report is None or not cand.meets_slo:
        return
    n, rpi = cand.instances, cand.replicas_per_instance
    if n > 1:
        fewer = sim.run(cand, workload.rate / ((n - 1) * rpi))
        if fewer.meets(slo.ttft_p99_ms, slo.tpot_p99_ms):
            return
        miss = fewer.missed(slo.ttft_p99_ms, slo.tpot_p99_ms)
        lost = f"with one of the {n} instances lost the SLO is missed ({miss})"
    else:
        lost = "the single instance is a single point of failure"
    hourly = cand.price_cny_per_hour
    price = f" at CNY {(n + 1) * hourly:.2f}/h" if hourly is not None else ""
    cand.warnings.append(f"N+1: {lost}; {n + 1} instances{price} keep it through a loss")


def _slo_bound_note(cand: Candidate, sim: _Sim, workload: Workload, slo: SLO) -> None:
    """Say so when the sized engines are mostly idle because a latency SLO, not the load, sets the count:
    which SLO (the one one instance fewer misses by the larger share) and the count and cost of the same
    option at ``LOOSER_SLO_FACTOR`` times it (the same count search, its simulations mostly cached)."""
    rep, n = cand.report, cand.instances
    if rep is None or n is None or n < 2 or not cand.meets_slo or rep.busy_fraction >= IDLE_BUSY_SHARE:
        return
    fewer = sim.run(cand, workload.rate / ((n - 1) * cand.replicas_per_instance))
    over = {
        name: seen / limit
        for name, seen, limit in (
            ("ttft_p99_ms", fewer.ttft_p99_ms, slo.ttft_p99_ms),
            ("tpot_p99_ms", fewer.tpot_p99_ms, slo.tpot_p99_ms),
        )
        if limit is not None and seen > limit
    }
    if not over:
        return  # one fewer misses on stability alone (or meets): the load, not a latency SLO, binds
    name = max(over, key=lambda k: over[k])
    limit_ms = getattr(slo, name)
    looser = replace(slo, **{name: limit_ms * LOOSER_SLO_FACTOR})
    alt = replace(cand, report=None, warnings=[], slo_bound=None)
    _verify_count(alt, sim, workload, looser)
    if not alt.meets_slo or alt.instances is None or alt.instances >= n:
        return  # a looser SLO buys nothing: it does not set the count
    cand.slo_bound = SloBound(
        name, limit_ms, rep.busy_fraction, limit_ms * LOOSER_SLO_FACTOR, alt.instances, alt.cost_cny_per_hour
    )
    what = "TTFT" if name == "ttft_p99_ms" else "TPOT"
    cost = (
        f" (CNY {alt.cost_cny_per_hour:.2f}/h instead of CNY {cand.cost_cny_per_hour:.2f}/h)"
        if alt.cost_cny_per_hour is not None and cand.cost_cny_per_hour is not None
        else ""
    )
    cand.warnings.append(
        f"SLO-bound: the engines are busy {rep.busy_fraction:.0%} of the time at {workload.rate:.3g} req/s: "
        f"the P99 {what} SLO of {limit_ms:g} ms, not the load, sets the count of {n}; one of "
        f"{limit_ms * LOOSER_SLO_FACTOR:g} ms would take {alt.instances}{cost}"
    )


def _preemption_note(cand: Candidate, workload: Workload) -> None:
    """Say so when the sized load preempts requests: max_num_seqs above what the KV cache holds lets vLLM
    admit more than it can keep as their outputs grow, and it evicts and recomputes some."""
    rep, plan = cand.report, cand.plan
    if rep is None or plan is None or rep.preemptions == 0:
        return
    held = workload.mean_prompt_tokens + workload.mean_output_tokens / 2
    kv = max(1, math.floor(kv_held_requests(plan, held)))
    cand.warnings.append(
        f"preemption: {rep.preemptions} among {rep.requests} simulated requests at this load (the P99s "
        f"include their recompute): the KV cache holds {kv} requests at {held:,.0f} tokens and "
        f"max_num_seqs is {cand.max_num_seqs}; at or under {kv} (or with --kv-cache-dtype fp8, twice the "
        "tokens) vLLM seldom needs to preempt"
    )


def _headroom(cand: Candidate, sim: _Sim, workload: Workload, slo: SLO, iterations: int = 5) -> None:
    """Highest per-engine load that still meets the SLOs (bisection), as headroom and a queue limit."""
    assert cand.replicas is not None
    lo = workload.rate / cand.replicas
    hi = lo * 2.0
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if sim.run(cand, mid).meets(slo.ttft_p99_ms, slo.tpot_p99_ms):
            lo = mid
        else:
            hi = mid
    cand.capacity_rps = lo
    cand.headroom_pct = (lo * cand.replicas / workload.rate - 1.0) * 100.0
    cand.queue_limit = _queue_limit(cand, sim, workload, slo, lo)


def _queue_limit(cand: Candidate, sim: _Sim, workload: Workload, slo: SLO, capacity_rps: float) -> int:
    """Waiting requests per engine beyond which a gateway should fail fast: those a full batch clears within
    the TTFT SLO (Little's law at its throughput limit; waiting requests leave as the batch finishes them,
    faster than the load that meets the SLOs arrives), raised until the sized load's own bursts pass (at most
    ``QUEUE_REJECT_SHARE`` of its requests turned away in the simulation)."""
    assert cand.deployment is not None and cand.plan is not None and cand.replicas is not None
    assert cand.max_num_seqs is not None
    window_s = slo.ttft_p99_ms / 1000.0 if slo.ttft_p99_ms else DEFAULT_QUEUE_WINDOW_S
    drain_rps = sim.run(cand, capacity_rps).throughput_limit_rps
    limit = max(1, math.floor(max(capacity_rps, drain_rps if math.isfinite(drain_rps) else 0.0) * window_s))
    dep = replace(cand.deployment, max_num_seqs=cand.max_num_seqs)
    plan = replace(cand.plan, max_num_seqs=cand.max_num_seqs)
    load = workload.with_qps(workload.rate / cand.replicas) if not workload.trace else workload
    replicas = cand.replicas if workload.trace else 1
    for _ in range(QUEUE_LIMIT_STEPS):
        sim.count += 1
        rep = simulate(
            dep, load, replicas=replicas, seed=sim.seed, max_waiting=limit, plan=plan, perf=cand.perf
        )
        if rep.rejected <= QUEUE_REJECT_SHARE * max(rep.requests, 1):
            break
        limit *= 2
    return limit


# ---------------------------------------------------------------------------------------------- entry
@dataclass
class SearchResult:
    candidates: list[Candidate]
    workload: Workload | None
    slo: SLO
    simulations: int = 0
    region: str | None = None

    @property
    def best(self) -> Candidate | None:
        """The winning option, or None when nothing fits (or nothing meets the SLOs)."""
        first = self.candidates[0] if self.candidates else None
        return first if first is not None and first.verdict is Verdict.BEST else None

    def to_json(self, top: int | None = None) -> dict[str, Any]:
        cands = self.candidates if top is None else self.candidates[:top]
        wl = self.workload
        return {
            "candidates": [c.to_json(wl) for c in cands],
            "region": self.region,
            "slo": {"ttft_p99_ms": self.slo.ttft_p99_ms, "tpot_p99_ms": self.slo.tpot_p99_ms},
            "workload": None
            if wl is None
            else {
                "qps": wl.rate if workload_has_load(wl) else None,
                "prompt_tokens": round(wl.mean_prompt_tokens, 1),
                "output_tokens": round(wl.mean_output_tokens, 1),
                "trace_requests": len(wl.trace) or None,
                "prefix_hit": wl.prefix_hit,
                "trace_prefix_share": _r(wl.trace_prefix_share),
            },
            "simulations": self.simulations,
        }


ProgressFn = Callable[[int, int], None]


def search(
    model: ModelShape,
    *,
    settings: Settings = Settings(),
    workload: Workload | None = None,
    slo: SLO = SLO(),
    prices: PriceBook | None = None,
    region: str | None = None,
    instances: Sequence[InstanceType] | None = None,
    gpu: GPU | None = None,
    top: int = 3,
    seed: int = 0,
    progress: ProgressFn | None = None,
) -> SearchResult:
    """Rank deployment options for ``model``; the best first, every other with the reason it lost.

    ``gpu`` evaluates bare GPUs (no instance type, no price) at ``settings.tp`` (default 1); otherwise the
    options are ``instances`` (default: the whole catalog) x TP (``settings.tp`` or every TP that fits an
    instance) x max_num_seqs (``settings.max_num_seqs`` or vLLM's default and smaller batches).
    """
    plans: _Plans = {}
    if gpu is not None:
        cands = [_bare_gpu_candidate(model, gpu, settings, plans)]
    else:
        cands = _instance_candidates(model, settings, prices, region, instances, plans)
    single = settings.tp is not None and gpu is None and instances is not None and len(cands) == 1
    if single and cands[0].verdict is Verdict.IMPOSSIBLE:
        raise SizingInputError(cands[0].reason)  # the one deployment asked for cannot exist
    fitting = [c for c in cands if c.fits and c.verdict is Verdict.UNRANKED]
    if workload_has_load(workload) and workload is not None:
        best, sim_count = _rank_under_load(fitting, workload, slo, settings, top, seed, progress)
        cands.sort(key=lambda c: _rank_key(c, best))
    else:
        cheapest = _rank_by_price(fitting)
        cands.sort(key=lambda c: _rank_key(c, cheapest))
        sim_count = 0
    return SearchResult(cands, workload, slo, sim_count, region)


def _bare_gpu_candidate(model: ModelShape, gpu: GPU, settings: Settings, plans: _Plans) -> Candidate:
    """The one option on a bare GPU (no instance type, no price) at ``settings.tp`` (default 1)."""
    tp = settings.tp or 1
    check_tp(model, tp)
    c = _option(model, gpu, tp, settings, None, plans)
    if c.verdict is Verdict.IMPOSSIBLE:
        raise SizingInputError(c.reason)
    return c


def _instance_candidates(
    model: ModelShape,
    settings: Settings,
    prices: PriceBook | None,
    region: str | None,
    instances: Sequence[InstanceType] | None,
    plans: _Plans,
) -> list[Candidate]:
    """Every instance type x TP x weight format option, priced from ``prices`` (an option without a price
    does not fit)."""
    if settings.tp is not None:
        check_tp(model, settings.tp)
    cands: list[Candidate] = []
    pool = list(instances) if instances is not None else list(load_instances().values())
    for inst in pool:
        g = find_gpu(inst.gpu)
        tps = [settings.tp] if settings.tp else [t for t in TP_CHOICES if t <= inst.gpus]
        for tp in tps:
            for dtype in settings.dtypes(model, g):
                c = _option(model, g, tp, settings, inst, plans, dtype)
                if dtype != settings.dtype and c.plan is None:
                    continue  # a quantized variant this GPU cannot run is no option, not a loss
                _price(c, inst, prices, region)
                cands.append(c)
    return cands


def _rank_under_load(
    fitting: list[Candidate],
    workload: Workload,
    slo: SLO,
    settings: Settings,
    top: int,
    seed: int,
    progress: ProgressFn | None,
) -> tuple[Candidate | None, int]:
    """Estimate every fitting option, simulate the cheapest until ``top`` pass the SLO (or the budget runs
    out), and say why each other option lost: (the best, simulations run)."""
    for c in fitting:
        _estimate(c, workload, slo, settings)
    viable = [c for c in fitting if c.verdict is Verdict.UNRANKED]
    viable.sort(key=_cost_key)
    sim = _Sim(workload, slo, seed)
    verified = _verify_cheapest(viable, sim, workload, slo, settings, top, progress)
    winners = sorted((v for v in verified if v.meets_slo), key=_cost_key)
    for c in winners[:top]:
        _headroom(c, sim, workload, slo)
        _n_plus_one(c, sim, workload, slo)
        _preemption_note(c, workload)
    best = winners[0] if winners else None
    if best is not None:
        _slo_bound_note(best, sim, workload, slo)
    if best is not None:
        best.rule(Verdict.BEST, "", "best")
    for c in viable:
        if c is best or c.meets_slo is False:
            continue
        if best is None or (c.estimated and _cost_key(c) < _cost_key(best)):
            c.rule(
                Verdict.NOT_VERIFIED,
                "not verified: the search's simulation budget ran out before this option",
            )
        else:
            _lost_to(c, best)
    return best, sim.count


def _verify_cheapest(
    viable: list[Candidate],
    sim: _Sim,
    workload: Workload,
    slo: SLO,
    settings: Settings,
    top: int,
    progress: ProgressFn | None,
) -> list[Candidate]:
    """Simulate ``viable`` (cheapest first) until ``top`` pass and the rest cost clearly more, or the
    simulation budget is spent; the options simulated."""
    verified: list[Candidate] = []
    total = len(viable)
    for i, c in enumerate(viable):
        if progress:
            progress(i, total)
        passed = [v for v in verified if v.meets_slo]
        if len(passed) >= top:
            kth = sorted(_cost_key(v) for v in passed)[top - 1]
            if _cost_key(c)[0] > kth[0] * ESTIMATE_MARGIN or sim.count >= MAX_SIMULATIONS:
                break
        elif sim.count >= MAX_SIMULATIONS:
            break
        _verify(c, sim, workload, slo, settings)
        verified.append(c)
    if progress:
        progress(total, total)
    return verified


def _rank_by_price(fitting: list[Candidate]) -> Candidate | None:
    """No load to simulate: the cheapest fitting option wins (then the fewest GPUs, then the checkpoint's own
    weights before quantized ones, as under load); the rest are dearer or lost the tie."""
    cheapest = min(
        (c for c in fitting),
        key=lambda c: (
            c.price_cny_per_hour if c.price_cny_per_hour is not None else math.inf,
            c.gpus,
            _weights_rank(c),
        ),
        default=None,
    )
    if cheapest is None:
        return None
    for c in fitting:
        if c is cheapest:
            c.rule(Verdict.BEST, "", "best")
        else:
            _lost_to(c, cheapest)
    return cheapest


def _price(c: Candidate, inst: InstanceType, prices: PriceBook | None, region: str | None) -> None:
    if prices is None:
        return
    price = prices.price(inst, region)
    if price is not None:
        c.price_cny_per_hour, c.price_estimate = price.cny_per_hour, price.estimate
    elif c.fits:
        c.rule(Verdict.NO_PRICE, f"no price for {inst.name} in the price list")
        c.fits = False


def _cost_key(c: Candidate) -> tuple[float, int, int, int, str]:
    """Cheapest first; at the same cost the fewest GPUs, then the checkpoint's own weights before quantized
    ones (``_weights_rank``), then the most instances (the same GPUs in more, smaller instances lose less to
    one instance's loss), then the name."""
    cost = c.cost_cny_per_hour if c.cost_cny_per_hour is not None else math.inf
    if c.cost_cny_per_hour is None and c.instances is not None:
        cost = float(c.instances) * 1e6  # unpriced (bare GPUs): rank by count
    gpus = c.gpus * (c.instances or 1)
    return (cost, gpus, _weights_rank(c), -(c.instances or 1), c.instance_type or c.gpu)


def _weights_rank(c: Candidate) -> int:
    """0: the checkpoint's own weights; 1: quantized weights vLLM makes online (FP8) or from a published
    checkpoint; 2: quantized weights from a checkpoint nobody publishes (the user must make one). A
    quantized option also asks for a quality check the own weights do not. A format the user pinned ranks
    every option alike."""
    d = c.deployment
    if d is None or d.dtype == "auto":
        return 0
    return 2 if checkpoint_note(d.model, d.dtype) else 1


# Costs closer than half a fen an hour are the same cost: the option lost a tie, not on price.
SAME_COST_CNY = 0.005


def _lost_to(c: Candidate, best: Candidate) -> None:
    """Rule an option that serves but ranks after ``best``: the same cost (and what lost it the tie), or
    dearer by how much."""
    what = best.instance_type or best.gpu
    tie = _same_cost(c, best)
    if tie is not None:
        lost, why = _tie_break(c, best)
        c.rule(
            Verdict.SAME_COST,
            f"same cost as the best (CNY {tie:.2f}/h for {best.instances or 1} x {what}): {lost}, {why}",
            f"same cost: {lost}",
        )
    elif c.cost_cny_per_hour is not None and best.cost_cny_per_hour is not None:
        how = "estimated " if c.estimated else ""
        c.rule(
            Verdict.DEARER,
            f"dearer: {how}{c.instances} x {c.instance_type} at CNY {c.cost_cny_per_hour:.2f}/h vs "
            f"CNY {best.cost_cny_per_hour:.2f}/h for {best.instances} x {what}",
            f"dearer by CNY {c.cost_cny_per_hour - best.cost_cny_per_hour:.2f}/h",
        )
    elif c.price_cny_per_hour is not None and best.price_cny_per_hour is not None:
        c.rule(
            Verdict.DEARER,
            f"dearer: CNY {c.price_cny_per_hour:.2f}/h vs CNY {best.price_cny_per_hour:.2f}/h for {what}",
            f"dearer by CNY {c.price_cny_per_hour - best.price_cny_per_hour:.2f}/h",
        )
    else:
        c.rule(Verdict.DEARER, f"lost to {what}")


def _same_cost(c: Candidate, best: Candidate) -> float | None:
    """The hourly cost both options share (with a load: the fleet's; without: one instance's), else None."""
    for mine, theirs in (
        (c.cost_cny_per_hour, best.cost_cny_per_hour),
        (c.price_cny_per_hour, best.price_cny_per_hour),
    ):
        if mine is not None and theirs is not None:
            return theirs if abs(mine - theirs) < SAME_COST_CNY else None
    return None


def _tie_break(c: Candidate, best: Candidate) -> tuple[str, str]:
    """Why the best won a tie on cost, as (what lost it, in a few words; the rest of the sentence):
    ``_cost_key``'s GPUs, weights, instances and name, then the search's order, which tries the checkpoint's
    own weights before quantized ones and the smaller TP first."""
    (_, gpus, weights, fewer, _), (_, best_gpus, best_weights, best_fewer, _) = _cost_key(c), _cost_key(best)
    mine = c.plan.dtype if c.plan else None
    theirs = best.plan.dtype if best.plan else None
    if gpus != best_gpus:
        return f"{gpus} GPUs", f"where the best needs {best_gpus} at that cost"
    if weights != best_weights:
        unpublished = f"; no {mine} checkpoint of it is published" if weights == 2 else ""
        return f"{mine} weights", f"where the best keeps {theirs} at that cost{unpublished}"
    if fewer != best_fewer:  # the key holds minus the instance count: more instances first
        n, best_n = -fewer, -best_fewer
        return (
            f"in {n} instance{'s' if n > 1 else ''}",
            f"where the best spreads the same GPUs over {best_n} (one instance's loss takes less)",
        )
    if mine != theirs:
        return f"{mine} weights", f"where the best keeps {theirs} at that cost"
    if c.tp != best.tp:
        return f"TP {c.tp}", f"where the best runs TP {best.tp} at that cost"
    return f"the same deployment on {c.instance_type or c.gpu}", "after the best by name"


def _rank_key(c: Candidate, best: Candidate | None) -> tuple[int, float, float, int, str]:
    """Best first; then the other fitting options by cost; then SLO misses; then those whose weights fit but
    not one max_model_len request, the longest context first (the nearest misses); then the rest."""
    context = 0.0
    if c is best:
        group = 0
    elif c.fits and c.meets_slo is not False:
        group = 1 if not c.estimated else 2
    elif c.fits:
        group = 3
    elif c.plan is not None and c.plan.max_model_len_that_fits > 0:
        group, context = 4, -float(c.plan.max_model_len_that_fits)
    elif c.plan is not None:
        group = 5
    else:
        group = 6
    cost = c.cost_cny_per_hour if c.cost_cny_per_hour is not None else (c.price_cny_per_hour or math.inf)
    return (group, context, cost, c.gpus, c.instance_type or c.gpu)
