"""GPU memory the way vLLM spends it: weights, activation peak, non-torch memory, and the KV cache left.

Follows vllm-sizing.md section 1 (vLLM's ``determine_available_memory`` and ``get_kv_cache_config``):

    usable     = visible_total x gpu_memory_utilization          (a share of the whole device)
    kv_avail   = usable - weights/rank - activation peak - non-torch
    blocks     = floor(kv_avail / (16 x kv_bytes_per_token_per_rank)); the minimum over ranks
    tokens     = 16 x blocks                                       ("GPU KV cache size")

and the startup check that one request of ``max_model_len`` tokens fits, with the largest length that would.
A model mixing sliding-window and full-attention layers (Gemma 2/3, gpt-oss) follows V1's hybrid KV cache
manager instead (``LocalAttention``): groups of layers share a pool, a sliding layer keeps only its window.

What is calibrated, and on which public log (docs/sizing-accuracy.md has every row; the tests re-check them):

* activation peak: the larger of the forward pass, ACT_BUFFERS x T x (hidden + 2 x intermediate / TP) x 2
  bytes (T the profiling batch; fitted on vllm#10517, 0.6.4, T 20000/29000), and the sampler run, the hidden
  states plus fp32 copies of seqs x vocab logits (V0: SAMPLER_V0_FP32_COPIES, fitted on PR#10511 and
  vllm#15360; V1: SAMPLER_V1_FP32_COPIES, fitted on llm-d-planner's v0.19 H100 sweep). Before 0.6.5 the
  profile left the sampler out (vllm#10517).
* non-torch memory: NON_TORCH_TP1_GIB at TP1, plus at TP >= 2 NCCL's NVLS buffers on Hopper NVLink parts or
  small all-reduce buffers elsewhere (llm-d-planner TP1-4 on H100, vllm#16570, vllm#13061).
* CUDA graphs: outside gpu_memory_utilization until vLLM 0.21, inside it (taken before the KV cache) since
  (gpustack/runner#251); Deployment.vllm_version picks the rule, None being the current release.
* weights need no constant: parameter count x bytes, plus AWQ/GPTQ group scales, embeddings unquantised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from sizing.calibration import Calibration
from sizing.catalog import GIB, GPU, ModelShape
from sizing.errors import SizingInputError

BLOCK_SIZE = 16  # vLLM's default KV block, tokens (vllm-sizing.md 1.1 step 4)
# A start that fits with less KV to spare than this is flagged: the KV prediction's 80th-percentile error out
# of sample (docs/sizing-accuracy.md); allenai/wildguard#2 was refused at 30,448 tokens, predicted 32,944.
REFUSAL_MARGIN = 0.10

# ACT_BUFFERS from vllm#10517's RTX 3090 series (Llama-3.1-8B, vLLM 0.6.4, no chunked prefill): the peak grew
# 2.07 -> 2.99 GiB from T = 20000 to 29000 tokens, 0.102 GiB per 1000 tokens of a 65,536-wide buffer; 0.6.4
# counts no sampler (its 35K row, chunked at 512 tokens, peaks at 0.06 GiB: 0.053 predicted).
ACT_BUFFERS = 1.70  # live (hidden + 2 x intermediate)-wide bf16 buffers per token at the peak

# The profiling run's forward pass and its sampler do not peak together: the forward pass frees its
# activations before the sampler runs on the last hidden states, so the profiled peak is the larger of the
# two, not their sum. The sampler side is the hidden states (T x hidden, 16-bit) plus fp32 copies of
# (seqs x vocab) logits: logits, probabilities, log-probabilities, sorted values and indices, noise.
# V0 (0.6.5-0.10, 256 dummy sequences): 9.68 copies, fitted on PR#10511 (Llama-3-8B, 1.26 GiB: 9.79) and
# vllm#15360 (Qwen2.5-7B, 1.43 GiB: 9.56); checked on PR#10511 at TP2 (1.26 GiB again: the forward pass
# halves, the sampler does not, 1.25 predicted), vllm#13882 (Qwen2.5-7B 4-bit, 1.42 logged, 1.43 predicted)
# and vllm#13061 at TP2, whose driver rank alone samples (its worker logs 0.19 GiB; the engine's KV pool is
# the driver's, smaller by the sampler's 1.2 GiB: 81,536 tokens logged, 82,560 predicted). The sum rule
# (3.6 copies held with the forward pass) fits the two fit rows too but gives 0.92 GiB at TP2 and 1.06 on
# vllm#13882, 25% low.
SAMPLER_V0_FP32_COPIES = 9.68
SAMPLER_V1_FP32_COPIES = 3.72

# Non-torch memory (CUDA context, cuBLAS workspaces, NCCL and custom all-reduce buffers), per GPU.
# TP1: 0.25 GiB, llm-d-planner v0.19.0 on H100 (Llama-3.1-8B 0.25, Qwen2.5-7B 0.24); other TP1 logs range
# 0.03-0.35 (vllm#13882 0.03, vllm#15360 0.06, PR#14447 0.20, vllm#10517 0.35).
NON_TORCH_TP1_GIB = 0.25
# TP >= 2 on Hopper NVLink/NVSwitch parts (H100, H800, H200, H20): NCCL's NVLink-SHARP (NVLS) buffers add a
# near-constant ~1.85 GiB, not a growth per rank: llm-d-planner v0.19.0 H100 logs 2.06-2.07 GiB at TP2 and
# 2.13 at TP4 (Llama-3.1-8B, Qwen2.5-7B); vllm PR#10511 (0.6.5, H100) grew 1.79 -> 3.58 GiB from TP1 to TP2.
NON_TORCH_NVLS_GIB = 1.85
# TP >= 2 on PCIe cards and pre-Hopper NVLink (no NVLS): only small NCCL/custom all-reduce buffers. Fitted as
# the mean increment of vllm#16570 (A100-40GB TP4, V0 0.8.3: 0.34-0.43 GiB on its ranks, +0.18 over 0.25 for
# the largest) and vllm#13061 (2x RTX 4090 TP2, V0 0.7: 0.25 GiB, +0.0).
NON_TORCH_NO_NVLS_GIB = 0.09
# Older logs (vLLM 0.6.x, late 2024) show far more at high TP: Open-Reasoner-Zero#23 5.24 GiB at TP4 and
# vllm#10702 5.2-7.7 GiB at TP8. The model follows 2025-2026 vLLM; a calibration from the user's own log
# replaces this term (gpu_terms.non_torch_gib).

# vLLM 0.21 made CUDA-graph memory profiling the default: the graph pool estimate is taken out of
# gpu_memory_utilization before the KV cache (gpustack/runner#251, vLLM 0.27: "The current
# --gpu-memory-utilization=0.8200 is equivalent to --gpu-memory-utilization=0.8048 without CUDA graph memory
# profiling"; akiyax/kvcache-lab docs/phase1-baseline.md, vLLM 0.26: 0.48 GiB of CUDA graphs inside 0.90).
# Before 0.21 the graphs were captured afterwards, outside util (llm-d-planner v0.19.0: KV = util x total -
# weights - activation - non-torch to 0.01 GiB).
GRAPHS_INSIDE_UTIL_SINCE = (0, 21, 0)
# Before vLLM 0.6.5 (PR#10511 rewrote the profiler) the profiled peak left the sampler out: vllm#10517's
# 0.6.4 logs peak at 0.06 GiB over the weights with 512-token chunks, where 256 sequences' logits alone are
# 0.44 GiB; its 20K/29K rows fit the forward pass alone (ACT_BUFFERS).
SAMPLER_COUNTED_SINCE = (0, 6, 5)
# V1's hybrid KV cache manager (vllm#11382, built over 0.9) keeps only the window of a sliding-window layer
# beside the full-attention ones; taken as on by default from 0.10. Before, or under V0, every layer of such
# a model is sized as full attention.
HYBRID_KV_SINCE = (0, 10, 0)
# vLLM 0.8.0 made the V1 engine the default (VLLM_USE_V1=1); a release before it runs V0 unless told.
V1_DEFAULT_SINCE = (0, 8, 0)

# CUDA graphs are captured after the KV cache is allocated, out of the (1 - util) headroom.
# V0 (0.5-0.10, 35 captured batch sizes up to 256): 0.5 GiB plus 0.03 GiB per layer, matched to vllm#7553
# (2464 MiB per RTX 4090 for the 60-layer Yi-34B at TP4, v0.5.4).
CUDA_GRAPH_BASE_GIB = 0.5
CUDA_GRAPH_PER_LAYER_GIB = 0.03
# V1 (piecewise graphs through torch.compile share one memory pool): a base plus a share per captured batch
# size. Fitted on vllm PR#39559 (51 sizes up to 512: 0.73 GiB) and gpustack/runner#251 (16 sizes: 0.36 GiB);
# checked on generative-computing/granite-switch#128 (0.64 GiB, sizes not printed; 51 assumed: +14%).
CUDA_GRAPH_V1_BASE_GIB = 0.19
CUDA_GRAPH_V1_PER_SIZE_GIB = 0.0106
# vLLM V1's default capture sizes (1, 2, 4, then steps of 8 to 256, then 16 to 512), capped at
# min(2 x max_num_seqs, 512) (vllm/config/compilation.py).
V1_CAPTURE_SIZES = (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))

# Bytes per weight by --dtype. awq/gptq store 4-bit weights with one fp16 scale and a 4-bit zero point per
# group of 128 weights (+2.5/128 bytes per weight, about 4%; vllm-sizing.md 1.4 says 3-6%).
WEIGHT_BYTES = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "awq": 0.5 + 2.5 / 128,
    "gptq": 0.5 + 2.5 / 128,
    # MXFP4 (OCP microscaling: 4-bit e2m1 values and one 8-bit e8m0 scale per 32); gpt-oss's checkpoints
    # quantize the routed experts alone, attention and routers stay 16-bit (weight_bytes_per_rank)
    "mxfp4": 0.5 + 1.0 / 32,
}
DTYPES = ("auto", "bf16", "fp16", "fp8", "int8", "awq", "gptq", "mxfp4")
KV_CACHE_DTYPES = ("auto", "fp8")

# Minimum compute capability per weight format in vLLM (quantization configs' get_min_capability).
# MXFP4 runs natively on Blackwell, elsewhere from 8.0 as weight-only FP4 through Marlin (vLLM warns "Your GPU
# does not have native support for FP4 computation ... leveraging the Marlin kernel")
_MIN_CAPABILITY = {"bf16": 8.0, "fp8": 8.0, "int8": 7.5, "awq": 7.5, "gptq": 6.0, "fp16": 6.0, "mxfp4": 8.0}


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
    calibration: Calibration | None = None  # from ``fleet size calibrate``; see sizing.calibration
    # The vLLM release being sized, "0.19.0"; None is the current release. Only V1's CUDA-graph accounting
    # depends on it (inside gpu_memory_utilization from 0.21); everything else follows the engine.
    vllm_version: str | None = None

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
    terms: tuple[MemoryTerm, ...] = field(default=())  # the breakdown, term by term, with sources
    cuda_graphs_fit: bool = True  # False: no room outside util for CUDA graphs (run with --enforce-eager)
    cuda_graphs_in_util: bool = False  # V1 0.21+: the graph estimate is taken out of util before the KV cache
    # Sliding-window or linear-attention layers in their own KV cache groups (vLLM's hybrid manager), or
    # None. Then kv_cache_tokens is vLLM's derived figure (max_concurrency x max_model_len) and
    # kv_bytes_per_token covers every layer as if it attended in full; the engine's capacity is
    # ``kv_context_tokens``, of which a sequence holds its context plus ``local.local_tokens``.
    local: LocalAttention | None = None

    @property
    def prefix_caching(self) -> bool:
        """Whether vLLM caches prompt prefixes here: not for a linear-attention hybrid, whose recurrent
        state is not kept per block (vLLM runs it without prefix caching)."""
        return self.local is None or not self.local.recurrent

    def computed_share(self, prefix_hit: float) -> float:
        """The share of a prompt vLLM computes when ``prefix_hit`` of it is in the prefix cache: the rest,
        or all of it where nothing is cached here."""
        return 1.0 - prefix_hit if self.prefix_caching else 1.0

    @property
    def kv_context_tokens(self) -> int:
        """The KV cache in tokens of context as sequences spend it (a hybrid's local groups aside)."""
        return self.local.context_tokens if self.local else self.kv_cache_tokens


@dataclass(frozen=True)
class LocalAttention:
    """How vLLM's hybrid KV cache manager lays out a model whose local layers (a sliding window, or a
    linear-attention state) sit beside full-attention ones (``kv_cache_utils``'s uniform-page-size grouping):
    the layers of each kind are split into groups of ``group_size`` (padded), every group has its own block
    table, and one pool block holds a page for each of the ``group_size`` slots. A sequence of ``n`` tokens
    holds ``cdiv(n, block_size)`` blocks in every full-attention group and in every local group at most
    ``window_tokens`` worth (a sliding window), or exactly one block (a linear layer's recurrent state,
    vLLM's MambaSpec without prefix caching, the attention block enlarged until its page holds the state; a
    Mamba layer's state alike)."""

    kind: str  # "sliding", "linear" (Gated DeltaNet) or "mamba"
    window: int  # the sliding window, tokens (0 for linear attention)
    window_tokens: int  # what a local group keeps per sequence: (cdiv(window - 1, bs) + 1) blocks, or one
    block_size: int
    local_layers: int
    full_layers: int
    group_size: int
    full_groups: int
    local_groups: int
    pool_tokens: int  # pool blocks x block_size
    read_per_held: float  # a decode step's local read per token it holds, in full-attention context tokens
    model_layers: int = 0  # the model's layers (0: full + local), what kv_bytes_per_token counts

    @property
    def recurrent(self) -> bool:
        """Whether the local layers keep a recurrent state (linear attention or Mamba), not a window."""
        return self.kind in ("linear", "mamba")

    @property
    def context_tokens(self) -> int:
        """The pool in tokens of context as the full-attention groups spend them (the engine's capacity)."""
        return self.pool_tokens // self.full_groups

    @property
    def kv_ratio(self) -> float:
        """A local group's token against the full-attention groups' (both per group count)."""
        return self.local_groups / self.full_groups

    @property
    def full_share(self) -> float:
        """Share of the model's layers that read the whole context."""
        return self.full_layers / (self.model_layers or self.full_layers + self.local_layers)

    def local_blocks_max(self, max_model_len: int, batched_tokens: int) -> int:
        """Blocks a local layer (or group) holds at most for one ``max_model_len`` request (vLLM's
        ``max_memory_usage_bytes``): a sliding window's window - 1 tokens plus one step's chunk, and a block
        more; a linear layer's state, one block."""
        if self.recurrent:
            return 1
        return math.ceil(min(self.window - 1 + batched_tokens, max_model_len) / self.block_size) + 1

    def local_tokens(self, tokens: int) -> float:
        """What the local groups of a sequence of ``tokens`` hold, in the full-attention groups' tokens."""
        held = self.window_tokens if self.recurrent else min(tokens, self.window_tokens)
        return self.kv_ratio * held


def hybrid_kv(dep: Deployment) -> bool:
    """Whether vLLM gives ``dep``'s local layers their own KV cache groups: V1, a model mixing full
    attention (MLA included: Kimi-Linear) with linear attention, or with a sliding window from
    HYBRID_KV_SINCE (no MLA)."""
    model = dep.model
    if dep.engine != "v1":
        return False
    if model.state_layers and model.full_attention_layers > 0:
        return True
    if model.mla:
        return False
    if not 0 < model.sliding_layers < model.layers:
        return False
    version = version_tuple(dep.vllm_version)
    return version is None or version >= HYBRID_KV_SINCE


def _attn_token_bytes(dep: Deployment) -> int:
    """One full-attention layer's KV for one token on one rank (every layer alike; an MLA layer's latent)."""
    return kv_bytes_per_token(dep.model, dep.tp, dep.kv_cache_dtype, dep.dtype) // dep.model.layers


def linear_state_bytes(model: ModelShape, tp: int) -> int:
    """One linear-attention layer's recurrent state for one sequence on one rank (16-bit, as vLLM's
    ``mamba_ssm_cache_dtype: auto``): the convolution's last kernel - 1 inputs and the value_heads x
    key_dim x value_dim delta-rule matrix (``gated_delta_net_state_shape``)."""
    # lightning attention (MiniMax): no convolution, kernel 1; the same heads x dim x dim state
    conv = model.linear_conv_dim // tp * (model.linear_conv_kernel - 1)
    ssm = model.linear_value_heads // tp * model.linear_key_head_dim * model.linear_value_head_dim
    # Kimi Delta Attention keeps its recurrent state in fp32 (vLLM's kda_state_dtype)
    return 2 * conv + (4 if model.kda else 2) * ssm


def mamba_state_bytes(model: ModelShape, tp: int) -> int:
    """One Mamba layer's state for one sequence on one rank, 16-bit (``mamba_cache_dtype`` and
    ``mamba_ssm_cache_dtype`` auto). Mamba2 (``mamba2_state_shape``): the convolution's last kernel - 1 inputs
    over x, B and C (the groups padded to the TP size where it does not divide them) and the heads x head_dim
    x d_state SSM state; Mamba1 (``mamba1_state_shape``): kernel - 1 inputs and d_state per inner channel."""
    keep = model.mamba_conv_kernel - 1
    if model.mamba_version == 1:
        return 2 * (model.mamba_inner // tp) * (keep + model.mamba_d_state)
    groups = model.mamba_groups
    groups += 0 if groups % tp == 0 else tp - groups
    conv = (model.mamba_inner + 2 * groups * model.mamba_d_state) // tp * keep
    ssm = model.mamba_heads // tp * model.mamba_head_dim * model.mamba_d_state
    return 2 * (conv + ssm)


def state_bytes(model: ModelShape, tp: int) -> int:
    """One recurrent layer's state (linear attention or Mamba) for one sequence on one rank."""
    return mamba_state_bytes(model, tp) if model.mamba_layers else linear_state_bytes(model, tp)


def hybrid_block_size(dep: Deployment) -> int:
    """The block size vLLM runs a hybrid model at: the configured one, or for linear attention and Mamba the
    smallest multiple of 16 tokens whose attention page holds a layer's state
    (``HybridAttentionMambaModelConfig`` without prefix caching: Qwen3-Next at TP 1 gets 544)."""
    if not dep.model.state_layers:
        return dep.block_size
    per_token = _attn_token_bytes(dep)
    need = math.ceil(state_bytes(dep.model, dep.tp) / (16 * per_token)) * 16
    return max(dep.block_size, need)


def _local_layout(dep: Deployment, kv_avail_bytes: float) -> LocalAttention:
    """vLLM's grouping for a hybrid model: the group size is the smaller layer count, or the larger where it
    is under 1.5 times the smaller (fewer padding layers); blocks = available // (page x group size)."""
    model = dep.model
    bs = hybrid_block_size(dep)
    linear = model.state_layers > 0
    local = model.state_layers if linear else model.sliding_layers
    full = model.full_attention_layers if linear else model.layers - local
    small, large = min(full, local), max(full, local)
    group = large if large < small * 1.5 else small
    per_token = _attn_token_bytes(dep)
    page = bs * per_token
    blocks = max(0, math.floor(kv_avail_bytes / (page * group))) if kv_avail_bytes > 0 else 0
    full_groups, local_groups = math.ceil(full / group), math.ceil(local / group)
    if linear:
        window_tokens = bs
        # a step reads and writes every linear or Mamba layer's state once per sequence
        read = 2.0 * local * state_bytes(model, dep.tp) / (full * per_token)
        read_per_held = read / (local_groups / full_groups * bs)
    else:
        window_tokens = (math.ceil((model.sliding_window - 1) / bs) + 1) * bs
        read_per_held = (local / full) / (local_groups / full_groups)
    return LocalAttention(
        kind=("mamba" if model.mamba_layers else "linear") if linear else "sliding",
        window=0 if linear else model.sliding_window,
        window_tokens=window_tokens,
        block_size=bs,
        local_layers=local,
        full_layers=full,
        group_size=group,
        full_groups=full_groups,
        local_groups=local_groups,
        pool_tokens=blocks * bs,
        read_per_held=read_per_held,
        model_layers=model.layers,
    )


def _local_need_blocks(local: LocalAttention, max_model_len: int, batched_tokens: int) -> int:
    """Pool blocks one ``max_model_len`` request may hold: every block of it in each full-attention group, a
    local group's most (``local_blocks_max``) in each local one."""
    full = math.ceil(max_model_len / local.block_size)
    return local.full_groups * full + local.local_groups * local.local_blocks_max(
        max_model_len, batched_tokens
    )


@dataclass(frozen=True)
class MemoryTerm:
    """One line of the memory breakdown (per GPU), and where its figure comes from."""

    name: str
    gib: float
    source: str
    calibrated: bool = False


def resolve_dtype(model: ModelShape, gpu: GPU, dtype: str = "auto") -> str:
    """The weight format vLLM would run: ``auto`` is the checkpoint's own, fp16 on GPUs without bf16."""
    if dtype not in DTYPES:
        raise SizingInputError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if dtype == "auto":
        dtype = model.quantization or model.dtype
        if dtype == "bf16" and not gpu.supports_bf16:
            if model.no_fp16:
                raise SizingInputError(
                    f"{gpu.name} has no bf16 and vLLM refuses float16 for {model.name}'s architecture: it "
                    "would run in float32, which is not sized here; choose a GPU with bf16 (compute "
                    "capability 8.0+)"
                )
            dtype = "fp16"  # vLLM casts bf16 checkpoints to fp16 on pre-Ampere GPUs (with a warning)
    elif dtype == "fp16" and model.no_fp16:
        raise SizingInputError(
            f"vLLM refuses float16 for {model.name}'s architecture (Gemma 2/3, GLM-4): use bf16"
        )
    elif model.quantization is not None and dtype != model.quantization:
        fmt = model.quantization.upper()
        raise SizingInputError(
            f"{model.name}'s checkpoint is {fmt} and vLLM serves it so (it loads {fmt} weights whatever "
            f"--dtype says and refuses another --quantization): leave the dtype auto, or size a {dtype} "
            "checkpoint"
        )
    elif dtype == "mxfp4" and model.quantization != "mxfp4":
        raise SizingInputError(
            f"dtype mxfp4 needs an MXFP4 checkpoint (gpt-oss publishes its weights so); {model.name}'s is "
            f"{model.quantization or model.dtype}, and vLLM does not quantize to MXFP4 online"
        )
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
    mamba = _mamba_split(model, tp)
    if mamba:
        raise SizingInputError(
            f"tensor parallel size {tp} does not split {model.name}'s Mamba layers evenly ({mamba}), which "
            "vLLM refuses"
        )
    split = _split_group(model, tp)
    if split:
        valid = [t for t in (1, 2, 4, 8, 16) if not _split_group(model, t) and model.heads % t == 0]
        raise SizingInputError(
            f"tensor parallel size {tp} cuts {model.name}'s {split}-wide MLP into slices of {split / tp:g} "
            f"weights, not whole {model.quant_group}-weight groups of its {model.quantization} checkpoint "
            f"(vLLM refuses to load it); valid: {', '.join(map(str, valid)) or 'none'}"
        )


def _mamba_split(model: ModelShape, tp: int) -> str:
    """What a TP of ``tp`` cannot split in a model's Mamba layers (vLLM's MambaMixer2 checks: the heads, and
    the groups unless there is one; MambaMixer: the inner width); "" when it splits."""
    if not model.mamba_layers:
        return ""
    if model.mamba_version == 1:
        return "" if model.mamba_inner % tp == 0 else f"{model.mamba_inner} inner channels"
    if model.mamba_heads % tp:
        return f"{model.mamba_heads} heads"
    if model.mamba_groups % tp and model.mamba_groups != 1:
        return f"{model.mamba_groups} groups"
    return ""


def _split_group(model: ModelShape, tp: int) -> int:
    """The MLP width (dense, routed expert or shared expert) a TP of ``tp`` cuts across the checkpoint's
    quantization groups (vLLM's per-partition checks of block FP8 and grouped 4-bit weights); 0: none."""
    if not model.quant_group:
        return 0
    widths = [model.moe_intermediate, model.shared_expert_intermediate] if model.experts else []
    if not model.experts or model.dense_layers:
        widths.append(model.intermediate)
    return next((w for w in widths if w and (w % tp or (w // tp) % model.quant_group)), 0)


def _kv_ok(model: ModelShape, tp: int) -> bool:
    return model.kv_heads % tp == 0 or tp % model.kv_heads == 0


def weight_bytes_per_rank(model: ModelShape, dtype: str, tp: int) -> float:
    """Weights one rank holds: linear layers in ``dtype``, embeddings/lm_head and norms in 16 bit."""
    if dtype == "mxfp4":  # the routed experts in MXFP4, the rest of the linear layers 16-bit
        linear = model.expert_params * WEIGHT_BYTES[dtype] + (model.linear_params - model.expert_params) * 2.0
    else:
        linear = model.linear_params * WEIGHT_BYTES[dtype]
    # embedding and lm_head are vocab-parallel (split over TP); norms are replicated; vision and audio
    # encoders stay in 16 bit (quantized checkpoints leave them out) and are split over TP like the language
    # model
    return (linear + (model.embedding_params + model.encoder_params) * 2.0) / tp + model.norm_params * 2.0


def kv_bytes_per_token(model: ModelShape, tp: int, kv_cache_dtype: str, dtype: str) -> int:
    """KV cache bytes one token takes on one rank (KV heads replicated when TP exceeds them; an MLA model's
    latent and rotary key whole on every rank)."""
    kv_elem = (
        1 if kv_cache_dtype == "fp8" else 2
    )  # fp8 KV cache is one byte; auto follows the 16-bit activations
    del dtype  # weights' format does not change the KV dtype under "auto"
    if model.mla:
        return model.layers * mla_token_bytes(model, kv_cache_dtype)
    return 2 * model.layers * max(1, model.kv_heads // tp) * model.head_dim * kv_elem


def mla_token_bytes(model: ModelShape, kv_cache_dtype: str) -> int:
    """One MLA layer's cache for one token (whole on every rank): the latent and rotary key, 16-bit, or one
    byte each in FP8; with DeepSeek V3.2's indexer, FP8 is vLLM's ``fp8_ds_mla`` record (the latent in FP8
    with an fp32 scale per 128 values and the rotary key left 16-bit: 656 bytes for V3.2) and the indexer's
    own key cache comes beside it (128 FP8 values and a 4-byte scale per 128: 132 bytes), both pages in the
    same block (vLLM's UniformTypeKVCacheSpecs sums them)."""
    latent, rope = model.kv_lora_rank, model.qk_rope_head_dim
    if not model.index_heads:
        return (latent + rope) * (1 if kv_cache_dtype == "fp8" else 2)
    fp8 = kv_cache_dtype == "fp8"
    mla = latent + latent // 128 * 4 + 2 * rope if fp8 else 2 * (latent + rope)
    return mla + indexer_token_bytes(model)


def indexer_token_bytes(model: ModelShape) -> int:
    """One layer's lightning-indexer key for one token (DeepSeek V3.2; 0 without an indexer): the
    ``index_head_dim`` FP8 values and an fp32 scale per 128 of them, whole on every rank."""
    return model.index_head_dim + model.index_head_dim // 128 * 4 if model.index_heads else 0


def default_batch_limits(gpu: GPU, visible_gib: float) -> tuple[int, int]:
    """vLLM V1 ``vllm serve`` defaults (max_num_batched_tokens, max_num_seqs) by GPU class (ref 1.3):
    8192/1024 on >= 70 GiB cards whose name lacks "a100" (vllm PR#17885), else 2048/256."""
    if visible_gib >= 70 and "a100" not in gpu.device_name.lower():
        return 8192, 1024
    return 2048, 256


def activation_body_gib(model: ModelShape, tp: int, profile_tokens: int) -> float:
    """The model's part of the profiling run's torch peak: live activations of a ``profile_tokens`` batch."""
    width = model.hidden + 2 * model.activation_intermediate / tp
    return ACT_BUFFERS * profile_tokens * width * 2.0 / GIB


def sampler_gib(model: ModelShape, profile_tokens: int, profile_seqs: int, engine: str = "v1") -> float:
    """The dummy sampler run: the last hidden states plus the fp32 logits copies of ``profile_seqs`` dummy
    requests, gathered to the full vocabulary (so not shrinking with TP). See SAMPLER_*_FP32_COPIES."""
    copies = SAMPLER_V1_FP32_COPIES if engine == "v1" else SAMPLER_V0_FP32_COPIES
    hidden = profile_tokens * model.hidden * 2.0
    return (hidden + copies * profile_seqs * model.vocab * 4.0) / GIB


def activation_gib(
    model: ModelShape, tp: int, profile_tokens: int, profile_seqs: int, engine: str = "v1"
) -> float:
    """Torch activation peak of vLLM's profiling run: the larger of the forward pass and the sampler run
    (see the constants for the fits)."""
    body = activation_body_gib(model, tp, profile_tokens)
    return max(body, sampler_gib(model, profile_tokens, profile_seqs, engine))


def has_nvls(gpu: GPU) -> bool:
    """NCCL's NVLink SHARP buffers: Hopper (compute capability 9.x) parts on NVLink/NVSwitch."""
    return gpu.interconnect.kind == "nvlink" and gpu.compute_capability >= 9.0


def non_torch_gib(tp: int, gpu: GPU | None = None) -> float:
    """CUDA/NCCL/cuBLAS memory outside torch's allocator, per GPU; at TP >= 2 the all-reduce buffers, large
    only where NCCL uses NVLink SHARP (see the constants for the fits)."""
    if tp <= 1:
        return NON_TORCH_TP1_GIB
    extra = NON_TORCH_NVLS_GIB if gpu is not None and has_nvls(gpu) else NON_TORCH_NO_NVLS_GIB
    return NON_TORCH_TP1_GIB + extra


def version_tuple(version: str | None) -> tuple[int, int, int] | None:
    """``"0.19.0"`` -> (0, 19, 0) (``"0.8.5.dev169+g..."`` -> (0, 8, 5)); None (the current release) stays
    None. An unreadable version is refused."""
    if version is None:
        return None
    parts = version.lstrip("v").split(".")
    try:
        patch = int("".join(c for c in parts[2].split("+")[0] if c.isdigit()) or 0) if len(parts) > 2 else 0
        return int(parts[0]), int(parts[1]), patch
    except (IndexError, ValueError):
        raise SizingInputError(f"vLLM version {version!r} is not of the form 0.19.0") from None


def default_engine(vllm_version: str | None) -> str:
    """The engine a vLLM release runs by default: V1 from V1_DEFAULT_SINCE (VLLM_USE_V1=1), V0 before."""
    version = version_tuple(vllm_version)
    return "v0" if version is not None and version < V1_DEFAULT_SINCE else "v1"


def sampler_counted(dep: Deployment) -> bool:
    """Whether the profile counts the sampler's buffers: not before vLLM 0.6.5 (see SAMPLER_COUNTED_SINCE)."""
    version = version_tuple(dep.vllm_version)
    return version is None or version >= SAMPLER_COUNTED_SINCE


def graphs_inside_util(dep: Deployment) -> bool:
    """Whether vLLM takes its CUDA-graph estimate out of gpu_memory_utilization (V1 from 0.21)."""
    if dep.engine != "v1":
        return False
    version = version_tuple(dep.vllm_version)
    return version is None or version >= GRAPHS_INSIDE_UTIL_SINCE


def cuda_graph_gib(model: ModelShape, engine: str = "v0", max_num_seqs: int = 256) -> float:
    """Memory CUDA graphs take outside ``gpu_memory_utilization`` (see the constants for the fits)."""
    if engine == "v1":
        cap = min(2 * max_num_seqs, 512)
        sizes = sum(1 for s in V1_CAPTURE_SIZES if s <= cap)
        return CUDA_GRAPH_V1_BASE_GIB + CUDA_GRAPH_V1_PER_SIZE_GIB * sizes
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


# The compute capability vLLM's sparse MLA kernels (DeepSeek V3.2's FlashMLA sparse backend) start at
SPARSE_MLA_SINCE = 9.0


def _validate(dep: Deployment) -> None:
    check_tp(dep.model, dep.tp)
    if dep.engine not in ("v0", "v1"):
        raise SizingInputError(f"engine must be v0 or v1, got {dep.engine!r}")
    if dep.block_size < 1:
        raise SizingInputError(f"block_size must be positive, got {dep.block_size}")
    if not 0.0 < dep.gpu_memory_utilization <= 1.0:
        raise SizingInputError(f"gpu_memory_utilization must be in (0, 1], got {dep.gpu_memory_utilization}")
    if dep.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise SizingInputError(f"unknown kv-cache-dtype {dep.kv_cache_dtype!r}; choose auto or fp8")
    if dep.kv_cache_dtype == "fp8" and dep.gpu.compute_capability < 8.0:
        raise SizingInputError(
            f"an fp8 KV cache needs compute capability 8.0, {dep.gpu.name} has {dep.gpu.compute_capability}"
        )
    if dep.model.index_heads and dep.gpu.compute_capability < SPARSE_MLA_SINCE:
        # vLLM's sparse MLA backends (FlashMLA sparse) run on Hopper and Blackwell data-centre GPUs only
        raise SizingInputError(
            f"DeepSeek V3.2's sparse attention needs compute capability {SPARSE_MLA_SINCE} (Hopper) in vLLM, "
            f"{dep.gpu.name} has {dep.gpu.compute_capability}"
        )


def _max_model_len(dep: Deployment) -> int:
    model = dep.model
    max_model_len = dep.max_model_len or model.max_position
    if max_model_len < 1:
        raise SizingInputError(f"max_model_len must be positive, got {max_model_len}")
    if max_model_len > model.max_position:
        raise SizingInputError(
            f"max_model_len {max_model_len} is above {model.name}'s limit of {model.max_position} "
            f"(max_position_embeddings); use at most {model.max_position}"
        )
    return max_model_len


def _check_budgets(tokens: int, seqs: int, chunked: bool, max_model_len: int) -> None:
    if tokens < 1 or seqs < 1:
        raise SizingInputError("max_num_batched_tokens and max_num_seqs must be positive")
    if tokens < seqs:  # vLLM's SchedulerConfig refuses this at start-up
        raise SizingInputError(f"max_num_batched_tokens ({tokens}) must be at least max_num_seqs ({seqs})")
    if not chunked and tokens < max_model_len:
        raise SizingInputError(
            f"max_num_batched_tokens {tokens} is below max_model_len {max_model_len} without chunked prefill"
        )


_SRC_WEIGHTS = (
    "parameters from config.json x bytes of the dtype; AWQ/GPTQ group scales; MXFP4 experts with per-32"
    " scales; embeddings 16-bit"
)
_SRC_ACT = (
    "1.70 x T x (hidden + 2 x intermediate / TP) x 2 B; fitted on vllm#10517 (20K/29K), checked on its 35K"
)
_SRC_SAMPLER = (
    "V0: hidden states + 9.68 fp32 copies of max_num_seqs x vocab, held after the forward pass (the peak is "
    "the larger of the two); fitted on PR#10511 + vllm#15360, checked on PR#10511 TP2, vllm#13882, #13061"
)
_SRC_SAMPLER_V1 = (
    "V1: hidden states + 3.72 fp32 copies of max_num_seqs x vocab, held after the forward pass (the peak is "
    "the larger of the two); fitted on llm-d-planner v0.19 Llama-3.1-8B + Qwen2.5-7B, checked on its Qwen3"
)
_SRC_NON_TORCH = (
    "0.25 GiB at TP1 + at TP>=2 1.85 GiB of NCCL NVLS buffers on Hopper NVLink, else 0.09; fitted on "
    "llm-d-planner v0.19 H100 TP1-4, vllm#16570, vllm#13061"
)
_SRC_GRAPHS_V1_IN = (
    "inside util (vLLM 0.21+ default): 0.19 + 0.0106 GiB per captured size, fitted on PR#39559 + "
    "gpustack/runner#251"
)
_SRC_GRAPHS_V0 = "outside util: 0.5 + 0.03 GiB/layer, fitted on vllm#7553"
_SRC_GRAPHS_V1 = "outside util: 0.19 + 0.0106 GiB per captured size, fitted on PR#39559 + gpustack/runner#251"


def _calibrated(dep: Deployment, dtype: str) -> tuple[Calibration | None, Calibration | None]:
    """(calibration whose GPU terms apply, calibration whose deployment terms apply)."""
    cal = dep.calibration
    if cal is None or not cal.applies_to_gpu(dep.gpu):
        return None, None
    return cal, (cal if cal.applies_to(dep.model, dep.gpu, dep.tp, dtype) else None)


def _memory_terms(dep: Deployment, dtype: str, tokens: int, seqs: int) -> tuple[list[MemoryTerm], int]:
    """weights, activation body, sampler, non-torch and residual terms per GPU; and KV bytes per token."""
    model, tp = dep.model, dep.tp
    gpu_cal, dep_cal = _calibrated(dep, dtype)
    weights = weight_bytes_per_rank(model, dtype, tp) / GIB
    body = activation_body_gib(model, tp, tokens)
    sampler = sampler_gib(model, tokens, min(tokens, seqs), dep.engine) if sampler_counted(dep) else 0.0
    non_torch = non_torch_gib(tp, dep.gpu)
    terms = [
        MemoryTerm("weights", weights, _SRC_WEIGHTS),
        MemoryTerm("activation peak (profiling run)", body, _SRC_ACT),
        MemoryTerm(
            "sampler logits buffers", sampler, _SRC_SAMPLER_V1 if dep.engine == "v1" else _SRC_SAMPLER
        ),
        MemoryTerm("non-torch (CUDA context, NCCL buffers)", non_torch, _SRC_NON_TORCH),
    ]
    per_token = kv_bytes_per_token(model, tp, dep.kv_cache_dtype, dtype)
    if gpu_cal is not None and gpu_cal.non_torch_gib is not None and gpu_cal.tp == tp:
        terms[3] = MemoryTerm(terms[3].name, gpu_cal.non_torch_gib, f"calibrated: {gpu_cal.source}", True)
    if dep_cal is None:
        return terms, per_token
    src = f"calibrated: {dep_cal.source}"
    if dep_cal.weights_gib is not None:
        terms[0] = MemoryTerm(terms[0].name, dep_cal.weights_gib, src, True)
    if dep_cal.activation_scale is not None:
        k = dep_cal.activation_scale
        terms[1] = MemoryTerm(terms[1].name, body * k, f"{_SRC_ACT}; x {k:.3f} {src}", True)
    if dep_cal.sampler_scale is not None:
        k = dep_cal.sampler_scale
        terms[2] = MemoryTerm(terms[2].name, sampler * k, f"{_SRC_SAMPLER}; x {k:.3f} {src}", True)
    if dep_cal.overhead_residual_gib is not None:
        terms.append(MemoryTerm("residual (logged, unexplained)", dep_cal.overhead_residual_gib, src, True))
    if dep_cal.kv_bytes_per_token is not None and dep.kv_cache_dtype == "auto":
        per_token = dep_cal.kv_bytes_per_token
    return terms, per_token


def plan_memory(dep: Deployment) -> MemoryPlan:
    """vLLM's startup memory arithmetic for ``dep``; raises :class:`SizingInputError` for impossible input."""
    model, gpu = dep.model, dep.gpu
    _validate(dep)
    dtype = resolve_dtype(model, gpu, dep.dtype)
    max_model_len = _max_model_len(dep)
    tokens, seqs, chunked = _budgets(dep, max_model_len)
    _check_budgets(tokens, seqs, chunked, max_model_len)

    usable = gpu.visible_gib * dep.gpu_memory_utilization
    terms, per_token = _memory_terms(dep, dtype, tokens, seqs)
    weights = terms[0].gib
    act = max(terms[1].gib, terms[2].gib)  # forward pass and sampler run peak one after the other
    non_torch = sum(t.gib for t in terms[3:])
    graphs = cuda_graph_gib(model, dep.engine, seqs)
    inside = graphs_inside_util(dep)
    kv_avail = usable - weights - act - non_torch - (graphs if inside else 0.0)
    block_bytes = dep.block_size * per_token
    local = None
    if hybrid_kv(dep):
        local = _local_layout(dep, kv_avail * GIB)
        blocks = local.pool_tokens // local.block_size
        max_concurrency = blocks / _local_need_blocks(local, max_model_len, tokens)
        kv_tokens = int(max_concurrency * max_model_len)  # vLLM's own report for a hybrid model
    else:
        blocks = max(0, math.floor(kv_avail * GIB / block_bytes)) if kv_avail > 0 else 0
        kv_tokens = blocks * dep.block_size
        max_concurrency = kv_tokens / max_model_len
    kv_src = "the rest of util x visible; 16-token blocks"
    if local is not None:
        groups = local.full_groups + local.local_groups
        kv_src = (
            f"the rest of util x visible; vLLM's hybrid layout: {groups} groups of {local.group_size} layers"
            f" ({local.full_groups} full-attention, {local.local_groups} {local.kind}),"
            f" {local.block_size}-token blocks"
        )
    terms.append(MemoryTerm("KV cache", max(0.0, kv_avail), kv_src))
    graph_src = _SRC_GRAPHS_V0 if dep.engine != "v1" else (_SRC_GRAPHS_V1_IN if inside else _SRC_GRAPHS_V1)
    terms.append(MemoryTerm("CUDA graphs", graphs, graph_src))
    warnings: list[str] = []
    headroom = gpu.visible_gib * (1 - dep.gpu_memory_utilization)
    if not inside and headroom < graphs:
        warnings.append(
            f"CUDA graphs need about {graphs:.1f} GiB outside gpu_memory_utilization but only "
            f"{headroom:.1f} GiB is left: lower --gpu-memory-utilization or add --enforce-eager"
        )
    graphs_fit = not warnings
    need_gib = _need_gib(dep, local, block_bytes, max_model_len, tokens)
    fits = blocks > 0 and need_gib <= max(0.0, kv_avail)
    if fits and kv_tokens < max_model_len * (1 + REFUSAL_MARGIN):
        warnings.append(
            f"one {max_model_len}-token request fits with under {REFUSAL_MARGIN:.0%} to spare "
            f"({kv_tokens:,} tokens of KV cache): within this model's error, vLLM may refuse to start; "
            "lower --max-model-len or raise --gpu-memory-utilization"
        )
    if model.index_heads:
        warnings.append(
            f"DeepSeek V3.2 sparse attention: each token keeps the {model.index_head_dim}-wide FP8 key of "
            f"the lightning indexer beside its latent ({mla_token_bytes(model, dep.kv_cache_dtype)} bytes a "
            f"token and layer in all); a decode step reads at most {model.index_topk:,} latents a sequence "
            "(the tokens the indexer picks) and scans every token's indexer key, so past that context the "
            "step grows with the indexer's scan alone"
        )
    if model.mla:
        latent = model.kv_lora_rank + model.qk_rope_head_dim
        warnings.append(
            f"MLA attention: the KV cache holds one {latent}-wide latent per token and layer, whole on every "
            "rank, as vLLM's MLA cache does; the step time rests on three public single-request decode "
            "rates, not on a calibration: measure with `vllm bench serve` and correct it with "
            "`fleet size calibrate --bench`"
        )
    if dtype == "mxfp4":
        warnings.append(
            "MXFP4 weights: the step time rests on the generic bandwidth model (no public gpt-oss row "
            "calibrates it; its expert kernels dequantize on the fly below Blackwell): measure with "
            "`vllm bench serve` and correct it with `fleet size calibrate --bench`"
        )
    if model.vision_params:
        warnings.append(
            f"vision encoder: its {model.vision_params / 1e9:.2f}B parameters are counted in the weights; "
            "the memory vLLM's profiling run spends encoding the largest images a prompt may carry is not: "
            "leave headroom, or bound it with --limit-mm-per-prompt"
        )
    if model.audio_params:
        warnings.append(
            f"audio encoder: its {model.audio_params / 1e9:.2f}B parameters are counted in the weights; the "
            "memory vLLM's profiling run spends encoding the longest audio a prompt may carry is not: leave "
            "headroom, or bound it with --limit-mm-per-prompt"
        )
    warnings += _layer_warnings(model, local, dep.tp)
    fit_len = (
        _longest_fit(dep, local, block_bytes, tokens, kv_avail)
        if local
        else min(model.max_position, kv_tokens)
    )
    if kv_avail <= 0:
        graph_part = f" + CUDA graphs {graphs:.2f}" if inside else ""
        reason = (
            f"does not fit: weights {weights:.2f} GiB + activations {act:.2f} + non-torch {non_torch:.2f}"
            f"{graph_part} exceed the usable {usable:.2f} GiB per GPU "
            f"({gpu.visible_gib:.2f} x {dep.gpu_memory_utilization:g})"
        )
        fit_len = 0
    elif not fits:
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
        max_concurrency=max_concurrency,
        cuda_graph_gib=graphs,
        fits=fits,
        reason=reason,
        max_model_len_that_fits=fit_len,
        warnings=tuple(warnings),
        terms=tuple(terms),
        cuda_graphs_fit=graphs_fit,
        cuda_graphs_in_util=inside,
        local=local,
    )


def _layer_warnings(model: ModelShape, local: LocalAttention | None, tp: int = 1) -> list[str]:
    """What the sizing says about a model's local, linear and state-space layers: how the hybrid KV cache
    manager lays them out, or that they are sized as full attention and the KV capacity is a lower bound."""
    out: list[str] = []
    if local is not None and local.kind == "mamba":
        out.append(
            f"Mamba{model.mamba_version} state-space layers on {local.local_layers} of {model.layers} "
            f"layers: each keeps a fixed {state_bytes(model, tp) / 2**20:.2f} MiB state per "
            f"sequence (one {local.block_size}-token block, vLLM's hybrid KV cache manager without prefix "
            f"caching: a prefix hit does not apply), so a token of context costs the {local.full_layers} "
            "attention layers' KV; the KV tokens shown are vLLM's own derived figure (max concurrency x "
            "max_model_len)"
        )
    elif local is not None and local.kind == "linear":
        out.append(
            f"linear attention on {local.local_layers} of {model.layers} layers: each keeps a fixed state "
            f"per sequence (one {local.block_size}-token block, vLLM's hybrid KV cache manager without "
            f"prefix caching: a prefix hit does not apply), so a token of context costs the "
            f"{local.full_layers} full-attention layers' "
            "KV; the KV tokens shown are vLLM's own derived figure (max concurrency x max_model_len)"
        )
    elif local is not None:
        out.append(
            f"sliding-window attention on {local.local_layers} of {model.layers} layers "
            f"({local.window:,} tokens): vLLM's hybrid KV cache manager keeps only the window for them, so "
            f"a token of context costs the {local.full_layers} full-attention layers' KV; the KV tokens "
            "shown are vLLM's own derived figure (max concurrency x max_model_len)"
        )
    if model.state_space:
        out.append(
            "state-space (Mamba), lightning-attention or Kimi Delta Attention layers are not modelled: "
            "every layer is sized as "
            "attention, so the KV capacity here is a lower bound and the weights an estimate; calibrate from "
            "your own vLLM log"
        )
    if local is None and model.mamba_layers:
        out.append(
            f"Mamba layers ({model.mamba_layers} of {model.layers}) are sized as full attention under the V0 "
            "engine (whose separate Mamba cache is not modelled): the KV capacity here is a lower bound"
        )
    if local is None and model.linear_layers:
        out.append(
            f"linear attention on {model.linear_layers} of {model.layers} layers is sized as full attention "
            "under the V0 engine (which does not run such models): the KV capacity here is a lower bound"
        )
    if local is None and model.sliding_window and not model.sliding_layers:
        # Llama 4: vLLM turned the hybrid manager off for chunked attention by default in 0.10.1
        # (vllm#21761) and on in a later release (vllm#29627), the switch named below
        out.append(
            f"chunked local attention ({model.sliding_window:,}-token chunks) is sized as full attention on "
            "every layer, as vLLM runs it with VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0 (its "
            "default from 0.10.1 until a later release turned it on); with it on, the chunked layers keep "
            "only each request's current chunk, and the KV capacity and concurrency here are a lower bound"
        )
    elif local is None and model.sliding_window:
        out.append(
            f"sliding-window or chunked local attention ({model.sliding_window:,} tokens) is not modelled: "
            "every layer is sized as if it attended over the whole context, so the KV capacity and "
            "concurrency here are a lower bound (vLLM keeps only the window for those layers)"
        )
    return out


def _need_gib(
    dep: Deployment, local: LocalAttention | None, block_bytes: float, max_model_len: int, batched_tokens: int
) -> float:
    """KV cache one ``max_model_len`` request needs (vLLM's ``check_enough_kv_cache_memory``: the layers'
    ``max_memory_usage_bytes`` summed, each local layer of a hybrid its ``local_blocks_max``)."""
    if local is None:
        return math.ceil(max_model_len / dep.block_size) * block_bytes / GIB
    page = local.block_size * _attn_token_bytes(dep)
    full = local.full_layers * math.ceil(max_model_len / local.block_size)
    return (full + local.local_layers * local.local_blocks_max(max_model_len, batched_tokens)) * page / GIB


def _longest_fit(
    dep: Deployment, local: LocalAttention | None, block_bytes: float, batched_tokens: int, kv_avail: float
) -> int:
    """The largest max_model_len whose request fits ``kv_avail`` GiB (vLLM's ``estimate_max_model_len``)."""
    lo, hi = 0, dep.model.max_position
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _need_gib(dep, local, block_bytes, mid, batched_tokens) <= kv_avail:
            lo = mid
        else:
            hi = mid - 1
    return lo
