"""GPU memory the way vLLM spends it: weights, activation peak, non-torch memory, and the KV cache left.

Follows vllm-sizing.md section 1 (vLLM's ``determine_available_memory`` and ``get_kv_cache_config``):

    usable     = visible_total x gpu_memory_utilization          (a share of the whole device)
    kv_avail   = usable - weights/rank - activation peak - non-torch
    blocks     = floor(kv_avail / (16 x kv_bytes_per_token_per_rank)); the minimum over ranks
    tokens     = 16 x blocks                                       ("GPU KV cache size")

and the startup check that one request of ``max_model_len`` tokens fits, with the largest length that would.

What is calibrated, and on which calibration row of vllm-sizing.md section 2 (the tests check all four rows):

* activation peak = sampler + ACT_BUFFERS x T x (hidden + 2 x intermediate / TP) x 2 bytes, with T the
  profiling batch (max_num_batched_tokens) and the sampler SAMPLER_FP32_COPIES x seqs x vocab x 4 bytes.
  The two constants are solved from the two Llama-3-8B-shaped rows, which differ only in T: PR#10511 (T 8192,
  1.26 GiB) and vllm#10517 (T 20000, ~2.07 GiB). Rows vllm#15360 and vllm#16141 are out of sample.
* non-torch memory = 0.2 GiB at TP1 (the reference's range 0.03-0.35 GiB at TP1) plus 0.9 GiB per extra rank
  (vllm#10702: 5.2-7.7 GiB at TP8; midpoint 6.45 = 0.2 + 7 x 0.89). It is not fitted on the section-2 rows.
* weights need no constant: parameter count x bytes, plus AWQ/GPTQ group scales, embeddings unquantised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from sizing.catalog import GIB, GPU, ModelShape
from sizing.errors import SizingInputError

BLOCK_SIZE = 16  # vLLM's default KV block, tokens (vllm-sizing.md 1.1 step 4)

# Solved from PR#10511 and vllm#10517 (module docstring): 1.26 = s + c x 0.5 GiB, 2.07 = s + c x 1.22 GiB.
ACT_BUFFERS = 1.124  # live (hidden + 2 x intermediate)-wide bf16 buffers per token at the peak
SAMPLER_FP32_COPIES = 5.71  # fp32 copies of the (seqs x vocab) logits the dummy sampler run holds

NON_TORCH_TP1_GIB = 0.2  # vllm-sizing.md 1.4: 0.03-0.35 GiB at TP1
NON_TORCH_PER_EXTRA_RANK_GIB = 0.9  # vllm#10702: 5.2-7.7 GiB at TP8

# CUDA graphs are captured after the KV cache is allocated, out of the (1 - util) headroom. Estimate: 0.5 GiB
# plus 0.03 GiB per layer, matched to vllm#7553 (2464 MiB per RTX 4090 for the 60-layer Yi-34B at TP4).
CUDA_GRAPH_BASE_GIB = 0.5
CUDA_GRAPH_PER_LAYER_GIB = 0.03

# Bytes per weight by --dtype. awq/gptq store 4-bit weights with one fp16 scale and a 4-bit zero point per
# group of 128 weights (+2.5/128 bytes per weight, about 4%; vllm-sizing.md 1.4 says 3-6%).
WEIGHT_BYTES = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "awq": 0.5 + 2.5 / 128,
    "gptq": 0.5 + 2.5 / 128,
}
DTYPES = ("auto", "bf16", "fp16", "fp8", "int8", "awq", "gptq")
KV_CACHE_DTYPES = ("auto", "fp8")

# Minimum compute capability per weight format in vLLM (quantization configs' get_min_capability).
_MIN_CAPABILITY = {"bf16": 8.0, "fp8": 8.0, "int8": 7.5, "awq": 7.5, "gptq": 6.0, "fp16": 6.0}


@dataclass(frozen=True)
class Deployment:
    """One vLLM instance (engine): a model on ``tp`` GPUs of one kind, with vLLM's settings.

    ``None`` means "vLLM's default" and is resolved by :func:`plan_memory` exactly as vLLM would.
    """

    model: ModelShape
    gpu: GPU
    tp: int = 1
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.90
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    engine: str = "v1"  # "v1" (default since vLLM 0.8) or "v0" (0.6-0.10), which profiles differently
    enable_chunked_prefill: bool | None = None
    block_size: int = BLOCK_SIZE

    def with_(self, **changes: object) -> Deployment:
        # ignored: replace() cannot check **changes against the fields; it raises TypeError on a wrong name
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class MemoryPlan:
    """vLLM's memory arithmetic for one deployment, per GPU unless named otherwise."""

    dtype: str
    kv_cache_dtype: str
    visible_gib: float
    usable_gib: float
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    kv_cache_gib: float
    kv_bytes_per_token: int  # per rank
    kv_cache_blocks: int
    kv_cache_tokens: int  # engine-wide, as "GPU KV cache size"
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    max_concurrency: float  # at max_model_len
    cuda_graph_gib: float
    fits: bool
    reason: str
    max_model_len_that_fits: int
    warnings: tuple[str, ...] = field(default=())


def resolve_dtype(model: ModelShape, gpu: GPU, dtype: str = "auto") -> str:
    """The weight format vLLM would run: ``auto`` is the checkpoint's own, fp16 on GPUs without bf16."""
    if dtype not in DTYPES:
        raise SizingInputError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if dtype == "auto":
        dtype = model.quantization or model.dtype
        if dtype == "bf16" and not gpu.supports_bf16:
            dtype = "fp16"  # vLLM casts bf16 checkpoints to fp16 on pre-Ampere GPUs (with a warning)
    need = _MIN_CAPABILITY.get(dtype, 0.0)
    if gpu.compute_capability < need:
        raise SizingInputError(
            f"dtype {dtype} needs compute capability {need}, {gpu.name} has {gpu.compute_capability}"
        )
    return dtype


def check_tp(model: ModelShape, tp: int) -> None:
    """vLLM's own parallelism checks: heads divide evenly, and KV heads split or replicate evenly."""
    if tp < 1:
        raise SizingInputError(f"tensor parallel size must be at least 1, got {tp}")
    if model.heads % tp:
        valid = [t for t in (1, 2, 4, 8, 16) if model.heads % t == 0 and _kv_ok(model, t)]
        raise SizingInputError(
            f"tensor parallel size {tp} does not divide {model.name}'s {model.heads} attention heads; "
            f"valid: {', '.join(map(str, valid))}"
        )
    if not _kv_ok(model, tp):
        raise SizingInputError(
            f"tensor parallel size {tp} neither divides nor is a multiple of "
            f"{model.name}'s {model.kv_heads} KV heads"
        )


def _kv_ok(model: ModelShape, tp: int) -> bool:
    return model.kv_heads % tp == 0 or tp % model.kv_heads == 0


def weight_bytes_per_rank(model: ModelShape, dtype: str, tp: int) -> float:
    """Weights one rank holds: linear layers in ``dtype``, embeddings/lm_head and norms in 16 bit."""
    linear = model.linear_params * WEIGHT_BYTES[dtype]
    # embedding and lm_head are vocab-parallel (split over TP); norms are replicated
    return (linear + model.embedding_params * 2.0) / tp + model.norm_params * 2.0


def kv_bytes_per_token(model: ModelShape, tp: int, kv_cache_dtype: str, dtype: str) -> int:
    """KV cache bytes one token takes on one rank (KV heads replicated when TP exceeds them)."""
    kv_elem = (
        1 if kv_cache_dtype == "fp8" else 2
    )  # fp8 KV cache is one byte; auto follows the 16-bit activations
    del dtype  # weights' format does not change the KV dtype under "auto"
    return 2 * model.layers * max(1, model.kv_heads // tp) * model.head_dim * kv_elem


def default_batch_limits(gpu: GPU, visible_gib: float) -> tuple[int, int]:
    """vLLM V1 ``vllm serve`` defaults (max_num_batched_tokens, max_num_seqs) by GPU class (ref 1.3):
    8192/1024 on >= 70 GiB cards whose name lacks "a100" (vllm PR#17885), else 2048/256."""
    if visible_gib >= 70 and "a100" not in gpu.device_name.lower():
        return 8192, 1024
    return 2048, 256


def activation_gib(model: ModelShape, tp: int, profile_tokens: int, profile_seqs: int) -> float:
    """Torch activation peak of vLLM's profiling run (see the module docstring for the calibration)."""
    width = model.hidden + 2 * model.activation_intermediate / tp
    body = ACT_BUFFERS * profile_tokens * width * 2.0
    # logits are gathered to the full vocabulary on the sampling rank, so this term does not shrink with TP
    sampler = SAMPLER_FP32_COPIES * profile_seqs * model.vocab * 4.0
    return (body + sampler) / GIB


def non_torch_gib(tp: int) -> float:
    """CUDA/NCCL/cuBLAS memory outside torch's allocator; grows with TP (all-reduce buffers)."""
    return NON_TORCH_TP1_GIB + NON_TORCH_PER_EXTRA_RANK_GIB * (tp - 1)


def cuda_graph_gib(model: ModelShape) -> float:
    return CUDA_GRAPH_BASE_GIB + CUDA_GRAPH_PER_LAYER_GIB * model.layers


def _budgets(dep: Deployment, max_model_len: int) -> tuple[int, int, bool]:
    """(max_num_batched_tokens, max_num_seqs, chunked_prefill) as vLLM resolves them."""
    default_tokens, default_seqs = default_batch_limits(dep.gpu, dep.gpu.visible_gib)
    if dep.engine != "v1":
        default_seqs = 256  # V0 had one default for every GPU
    seqs = dep.max_num_seqs or default_seqs
    if dep.engine == "v1":
        chunked = True if dep.enable_chunked_prefill is None else dep.enable_chunked_prefill
    else:  # V0 switched chunked prefill on by itself above 32K context (vllm-sizing.md 1.2)
        chunked = max_model_len > 32768 if dep.enable_chunked_prefill is None else dep.enable_chunked_prefill
    if dep.max_num_batched_tokens:
        tokens = dep.max_num_batched_tokens
    elif chunked:
        tokens = default_tokens if dep.engine == "v1" else 2048
    else:
        tokens = max(max_model_len, 2048)  # without chunking one whole prompt must fit a step
    return tokens, seqs, chunked


def plan_memory(dep: Deployment) -> MemoryPlan:
    """vLLM's startup memory arithmetic for ``dep``; raises :class:`SizingInputError` for impossible input."""
    model, gpu, tp = dep.model, dep.gpu, dep.tp
    check_tp(model, tp)
    if dep.engine not in ("v0", "v1"):
        raise SizingInputError(f"engine must be v0 or v1, got {dep.engine!r}")
    if dep.block_size < 1:
        raise SizingInputError(f"block_size must be positive, got {dep.block_size}")
    if not 0.0 < dep.gpu_memory_utilization <= 1.0:
        raise SizingInputError(f"gpu_memory_utilization must be in (0, 1], got {dep.gpu_memory_utilization}")
    if dep.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise SizingInputError(f"unknown kv-cache-dtype {dep.kv_cache_dtype!r}; choose auto or fp8")
    if dep.kv_cache_dtype == "fp8" and gpu.compute_capability < 8.0:
        raise SizingInputError(
            f"an fp8 KV cache needs compute capability 8.0, {gpu.name} has {gpu.compute_capability}"
        )
    dtype = resolve_dtype(model, gpu, dep.dtype)
    max_model_len = dep.max_model_len or model.max_position
    if max_model_len < 1:
        raise SizingInputError(f"max_model_len must be positive, got {max_model_len}")
    if max_model_len > model.max_position:
        raise SizingInputError(
            f"max_model_len {max_model_len} is above {model.name}'s limit of {model.max_position} "
            f"(max_position_embeddings); use at most {model.max_position}"
        )
    tokens, seqs, chunked = _budgets(dep, max_model_len)
    if tokens < 1 or seqs < 1:
        raise SizingInputError("max_num_batched_tokens and max_num_seqs must be positive")
    if tokens < seqs:  # vLLM's SchedulerConfig refuses this at start-up
        raise SizingInputError(f"max_num_batched_tokens ({tokens}) must be at least max_num_seqs ({seqs})")
    if not chunked and tokens < max_model_len:
        raise SizingInputError(
            f"max_num_batched_tokens {tokens} is below max_model_len {max_model_len} without chunked prefill"
        )

    usable = gpu.visible_gib * dep.gpu_memory_utilization
    weights = weight_bytes_per_rank(model, dtype, tp) / GIB
    act = activation_gib(model, tp, tokens, min(tokens, seqs))
    non_torch = non_torch_gib(tp)
    kv_avail = usable - weights - act - non_torch
    per_token = kv_bytes_per_token(model, tp, dep.kv_cache_dtype, dtype)
    block_bytes = dep.block_size * per_token
    blocks = max(0, math.floor(kv_avail * GIB / block_bytes)) if kv_avail > 0 else 0
    kv_tokens = blocks * dep.block_size
    graphs = cuda_graph_gib(model)
    warnings: list[str] = []
    headroom = gpu.visible_gib * (1 - dep.gpu_memory_utilization)
    if headroom < graphs:
        warnings.append(
            f"CUDA graphs need about {graphs:.1f} GiB outside gpu_memory_utilization but only "
            f"{headroom:.1f} GiB is left: lower --gpu-memory-utilization or add --enforce-eager"
        )
    need_blocks = math.ceil(max_model_len / dep.block_size)
    fits = blocks >= need_blocks and blocks > 0
    fit_len = min(model.max_position, kv_tokens)
    if kv_avail <= 0:
        reason = (
            f"does not fit: weights {weights:.2f} GiB + activations {act:.2f} + non-torch {non_torch:.2f} "
            f"exceed the usable {usable:.2f} GiB per GPU "
            f"({gpu.visible_gib:.2f} x {dep.gpu_memory_utilization:g})"
        )
        fit_len = 0
    elif not fits:
        need_gib = need_blocks * block_bytes / GIB
        reason = (
            f"does not fit: one {max_model_len}-token request needs {need_gib:.2f} GiB of KV cache but "
            f"{kv_avail:.2f} GiB is left; the largest max_model_len that fits is {fit_len}"
        )
    else:
        reason = ""
    return MemoryPlan(
        dtype=dtype,
        kv_cache_dtype=dep.kv_cache_dtype,
        visible_gib=gpu.visible_gib,
        usable_gib=usable,
        weights_gib=weights,
        activation_gib=act,
        non_torch_gib=non_torch,
        kv_cache_gib=max(0.0, kv_avail),
        kv_bytes_per_token=per_token,
        kv_cache_blocks=blocks,
        kv_cache_tokens=kv_tokens,
        max_model_len=max_model_len,
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        chunked_prefill=chunked,
        max_concurrency=kv_tokens / max_model_len,
        cuda_graph_gib=graphs,
        fits=fits,
        reason=reason,
        max_model_len_that_fits=fit_len,
        warnings=tuple(warnings),
    )
