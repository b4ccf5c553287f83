"""The catalogs the sizing model reads: GPUs, Alibaba Cloud instance types, model shapes and prices.

The data ship as YAML package data under ``sizing/data``; each entry names its source there. Loaders take no
ambient state (they read only the package's own files, and cache the result). Models not in the catalog come
from a Hugging Face ``config.json`` the shell has read and parsed: :func:`model_from_hf_config` takes
the dict.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any

import yaml

from sizing.errors import SizingInputError, unknown

GIB = 1024**3


def _load_yaml(name: str) -> Any:  # Any: parsed YAML; the readers below check each row
    text = resources.files("sizing").joinpath("data", name).read_text(encoding="utf-8")
    return yaml.safe_load(text)


def _key(name: str) -> str:
    """Lookup key: case- and punctuation-insensitive, organisation prefix dropped."""
    name = name.strip().rsplit("/", 1)[-1].lower()
    return "".join(ch for ch in name if ch.isalnum() or ch == ".")


# ----------------------------------------------------------------------------------------------------- GPUs
@dataclass(frozen=True)
class Interconnect:
    """What tensor-parallel all-reduce runs over inside one instance."""

    kind: str  # "pcie" or "nvlink"
    bus_gbps: float  # per direction, GB/s
    latency_us: float  # fixed cost of one small all-reduce


@dataclass(frozen=True)
class GPU:
    name: str
    device_name: str
    memory_gb: float
    visible_gib: float
    bandwidth_gbps: float
    fp16_tflops: float
    int8_tops: float
    fp8_tflops: float | None
    compute_capability: float
    interconnect: Interconnect
    source: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def supports_bf16(self) -> bool:
        return self.compute_capability >= 8.0

    @property
    def native_fp8(self) -> bool:
        return self.fp8_tflops is not None and self.compute_capability >= 8.9

    def with_visible_gib(self, visible_gib: float) -> GPU:
        """The same card reporting a different total (``--gpu-memory-gib``)."""
        return replace(self, visible_gib=visible_gib)


@functools.cache
def load_gpus() -> dict[str, GPU]:
    """The GPU catalog, keyed by canonical name."""
    out: dict[str, GPU] = {}
    for row in _load_yaml("gpus.yaml")["gpus"]:
        ic = row["interconnect"]
        out[row["name"]] = GPU(
            name=row["name"],
            device_name=row["device_name"],
            memory_gb=float(row["memory_gb"]),
            visible_gib=float(row["visible_gib"]),
            bandwidth_gbps=float(row["bandwidth_gbps"]),
            fp16_tflops=float(row["fp16_tflops"]),
            int8_tops=float(row["int8_tops"]),
            fp8_tflops=None if row.get("fp8_tflops") is None else float(row["fp8_tflops"]),
            compute_capability=float(row["compute_capability"]),
            interconnect=Interconnect(ic["kind"], float(ic["bus_gbps"]), float(ic["latency_us"])),
            source=row.get("source", ""),
            aliases=tuple(str(a) for a in row.get("aliases", ())),
        )
    return out


def find_gpu(name: str) -> GPU:
    """A GPU by name or alias (case-insensitive); unknown names raise with the nearest valid ones."""
    gpus = load_gpus()
    want = _key(name)
    for gpu in gpus.values():
        if want in {_key(gpu.name), *(_key(a) for a in gpu.aliases)}:
            return gpu
    raise unknown("GPU", name, gpus)


# ------------------------------------------------------------------------------------------ instance types
@dataclass(frozen=True)
class InstanceType:
    name: str
    family: str
    gpu: str  # canonical GPU name
    gpus: int
    vcpu: int
    ram_gib: float
    source: str = ""


@functools.cache
def load_instances() -> dict[str, InstanceType]:
    """Alibaba Cloud GPU instance types, keyed by full name (``ecs.gn7i-c8g1.2xlarge``)."""
    data = _load_yaml("instances.yaml")
    families = data["families"]
    out: dict[str, InstanceType] = {}
    for name, (family, vcpu, ram_gib, gpus) in data["types"].items():
        fam = families[family]
        out[name] = InstanceType(
            name, family, fam["gpu"], int(gpus), int(vcpu), float(ram_gib), fam["source"]
        )
    return out


def find_instance(name: str) -> InstanceType:
    """An instance type by name, with or without the ``ecs.`` prefix."""
    instances = load_instances()
    full = name if name.startswith("ecs.") else f"ecs.{name}"
    if full in instances:
        return instances[full]
    raise unknown("instance type", name, instances)


# ---------------------------------------------------------------------------------------------------- models
@dataclass(frozen=True)
class ModelShape:
    """What vLLM sizes memory and speed from: the config.json fields of a decoder-only transformer."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_position: int
    tie: bool = False
    dtype: str = "bf16"  # config.json torch_dtype
    qkv_bias: bool = False
    experts: int = 0  # 0: dense
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_expert_intermediate: int = 0
    dense_layers: int = 0  # a MoE's layers with a dense MLP (DeepSeek's leading ones, Llama 4 Maverick's odd)
    # Multi-head latent attention (DeepSeek V2/V3/R1, Kimi K2): kv_lora_rank > 0. The KV cache holds one
    # compressed latent (kv_lora_rank) plus the rotary key (qk_rope_head_dim) per token and layer, the same on
    # every TP rank (vLLM's MLAAttentionSpec), instead of keys and values per KV head.
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek V3.2's sparse attention (DSA): a lightning indexer per MLA layer picks the top index_topk
    # context tokens each query attends to. It keeps its own key cache beside the latent, one
    # ``index_head_dim``-wide key per token and layer in FP8 with an fp32 scale per 128 values
    # (vLLM's DeepseekV32IndexerCache, whatever --kv-cache-dtype says), and adds its query, key and
    # head-weight projections (``index_heads`` heads) to the attention weights. 0: no indexer
    index_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    # Local attention on some or all layers (Gemma 2/3, gpt-oss and Mistral v0.1's sliding window, Llama 4's
    # chunks): the span in tokens, 0 when none; and how many layers attend within a sliding window (0 for
    # chunks, which vLLM sizes as full attention by default). vLLM's hybrid KV cache manager keeps only the
    # window for those layers (sizing.memory).
    sliding_window: int = 0
    sliding_layers: int = 0
    # Linear-attention layers (Qwen3-Next's Gated DeltaNet, three in four layers): a fixed recurrent state
    # per sequence instead of a KV cache: conv state (key/query/value channels x (kernel - 1)) and the
    # delta rule's value_heads x key_dim x value_dim matrix (vLLM's gated_delta_net_state_shape).
    linear_layers: int = 0
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0
    # The linear layers are MiniMax-Text-01/M1's lightning attention (``attn_type_list`` 0), not Gated
    # DeltaNet: heads x head_dim x head_dim state and no convolution (vLLM's linear_attention_state_shape);
    # q/k/v, output gate and output projections (linear_key_heads = linear_value_heads = heads)
    lightning: bool = False
    # The linear layers are Kimi-Linear's Kimi Delta Attention (``linear_attn_config``), beside MLA layers:
    # queries, keys and values of ``linear_value_heads`` heads alike, each with its short convolution; a
    # low-rank forget gate and output gate per channel, a beta per head; the recurrent state
    # heads x head_dim x head_dim in fp32 (vLLM's kda_state_shape and kda_state_dtype)
    kda: bool = False
    # State-space (Mamba) layers (Nemotron-H, Granite 4.0-H and Falcon-H1's Mamba2, Jamba's Mamba1): a
    # fixed state per sequence, the convolution's last kernel - 1 inputs and the SSM state (vLLM's
    # mamba2_state_shape, mamba1_state_shape), instead of a KV cache. Mamba2: ``mamba_heads`` heads of
    # ``mamba_head_dim`` in ``mamba_groups`` groups; Mamba1: ``mamba_dt_rank``. ``attention_layers`` counts
    # the attention layers where they are not the rest of the layers (Nemotron-H's MLP-only blocks,
    # Falcon-H1's attention beside Mamba on every layer), ``mlp_layers`` the layers with an MLP where not
    # all have one (Nemotron-H), 0 otherwise.
    mamba_layers: int = 0
    mamba_version: int = 0  # 1 or 2
    mamba_inner: int = 0  # the mixer's intermediate width (d_inner)
    mamba_heads: int = 0
    mamba_head_dim: int = 0
    mamba_groups: int = 0
    mamba_d_state: int = 0
    mamba_conv_kernel: int = 0
    mamba_dt_rank: int = 0
    attention_layers: int = 0
    mlp_layers: int = 0
    mlp_gated: bool = True  # False: up and down projections only (Nemotron-H's squared ReLU)
    # State-space or lightning-attention layers of a variant not modelled (a Nemotron-H with MoE blocks, a
    # pure Mamba model, MiniMax): every layer sized as attention, with a warning
    state_space: bool = False
    quantization: str | None = None  # from config.json quantization_config (awq, gptq, fp8, int8, mxfp4)
    # vLLM refuses float16 for this architecture (_FLOAT16_NOT_SUPPORTED_MODELS: Gemma 2 and 3, GLM-4,
    # PLaMo 2): on a GPU without bf16 it runs in float32
    no_fp16: bool = False
    # The checkpoint's quantization group (AWQ/GPTQ/compressed-tensors group_size) or block (FP8's
    # weight_block_size) along the MLP's width: a tensor-parallel slice of it must hold whole groups. 0: none
    quant_group: int = 0
    # A multimodal model's vision encoder and projector (config.json vision_config): weights held in 16 bit
    # beside the language model's, never read by a decode step
    vision_params: int = 0
    # A multimodal model's audio encoder (config.json audio_config: Qwen3-Omni's AuT, Qwen2-Audio's and
    # Qwen2.5-Omni's Whisper encoder), held in 16 bit like the vision encoder and never read by a decode step
    audio_params: int = 0
    hf_id: str = ""
    source: str = ""
    params_b_reference: float | None = None
    aliases: tuple[str, ...] = field(default=())
    checkpoints: tuple[tuple[str, str], ...] = field(default=())  # (dtype, HF repo) published quantizations

    def checkpoint(self, dtype: str) -> str | None:
        """The published Hugging Face repo of this model quantized to ``dtype``, if one is known."""
        return dict(self.checkpoints).get(dtype)

    @property
    def encoder_params(self) -> int:
        """The multimodal encoders' weights (vision and audio), beside the language model's."""
        return self.vision_params + self.audio_params

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is the routed experts (0 for a dense model)."""
        return self.layers - self.dense_layers if self.experts else 0

    # Parameter counts (GQA or MLA attention + SwiGLU MLP or experts).
    @property
    def linear_conv_dim(self) -> int:
        """Channels of a linear-attention layer's short convolution: queries, keys and values."""
        return (
            2 * self.linear_key_heads * self.linear_key_head_dim
            + self.linear_value_heads * self.linear_value_head_dim
        )

    @property
    def linear_attention_params_per_layer(self) -> int:
        """A Gated DeltaNet layer: q/k/v/z and the b/a gates in, the short convolution, the output out."""
        value = self.linear_value_heads * self.linear_value_head_dim
        if self.lightning:  # qkv_proj, output_gate, out_proj and the norm over the heads
            return 5 * self.hidden * value + value
        if self.kda:
            return self._kda_params_per_layer
        inp = self.hidden * (self.linear_conv_dim + value + 2 * self.linear_value_heads)
        return inp + self.linear_conv_dim * self.linear_conv_kernel + value * self.hidden

    @property
    def _kda_params_per_layer(self) -> int:
        """A Kimi Delta Attention layer as vLLM's KimiDeltaAttention holds it: q/k/v and o projections, the
        three short convolutions, the forget gate (f_a to head_dim, f_b back, dt_bias per channel), beta
        (b_proj, one a head), A_log per head, the output gate (g_a, g_b) and the output norm."""
        hidden, dim, heads = self.hidden, self.linear_value_head_dim, self.linear_value_heads
        width = heads * dim
        gates = 2 * (hidden * dim + dim * width) + width + hidden * heads + heads + dim
        return 4 * hidden * width + self.linear_conv_dim * self.linear_conv_kernel + gates

    @property
    def full_attention_layers(self) -> int:
        """Layers that attend over the whole context (a KV cache), beside the linear or Mamba ones."""
        return self.attention_layers or self.layers - self.linear_layers - self.mamba_layers

    @property
    def state_layers(self) -> int:
        """Layers that keep a fixed recurrent state per sequence (linear attention or Mamba)."""
        return self.linear_layers + self.mamba_layers

    @property
    def mamba_conv_dim(self) -> int:
        """Channels of a Mamba layer's short convolution: x (and Mamba2's B and C of every group)."""
        if self.mamba_version == 1:
            return self.mamba_inner
        return self.mamba_inner + 2 * self.mamba_groups * self.mamba_d_state

    @property
    def mamba_params_per_layer(self) -> int:
        """A Mamba layer's weights as vLLM's mixers hold them. Mamba2 (MambaMixer2): in_proj to z, x, B, C
        and dt; the convolution and its bias; dt_bias, A and D per head; the gated norm; out_proj. Mamba1
        (MambaMixer): in_proj to x and z; the convolution; x_proj to dt, B and C; dt_proj; A and D per
        channel; Jamba's dt/B/C norms; out_proj."""
        inner, hidden, conv = self.mamba_inner, self.hidden, self.mamba_conv_dim
        conv_weights = conv * self.mamba_conv_kernel + conv
        if self.mamba_version == 1:
            rank, state = self.mamba_dt_rank, self.mamba_d_state
            inp = hidden * 2 * inner + inner * (rank + 2 * state) + rank * inner + inner
            return inp + conv_weights + inner * state + inner + (rank + 2 * state) + inner * hidden
        inp = hidden * (inner + conv + self.mamba_heads)
        return inp + conv_weights + 3 * self.mamba_heads + inner + inner * hidden

    @property
    def _attention_params(self) -> int:
        """Every layer's attention (or linear-attention, or Mamba) weights."""
        full = self.full_attention_layers * self.attention_params_per_layer
        mamba = self.mamba_layers * self.mamba_params_per_layer if self.mamba_layers else 0
        return full + self.linear_layers * self.linear_attention_params_per_layer + mamba

    @property
    def attention_params_per_layer(self) -> int:
        if self.mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (
                self.hidden * self.q_lora_rank + self.q_lora_rank * self.heads * qk
                if self.q_lora_rank
                else self.hidden * self.heads * qk
            )
            kv_a = self.hidden * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv_b = self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
            return (
                q + kv_a + kv_b + self.heads * self.v_head_dim * self.hidden + self.indexer_params_per_layer
            )
        q = self.hidden * self.heads * self.head_dim
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * self.hidden
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        return q + kv + o + bias

    @property
    def indexer_params_per_layer(self) -> int:
        """DeepSeek V3.2's lightning indexer in one layer: queries from the compressed query (``wq_b``), one
        key from the hidden state (``wk``) and its LayerNorm, and a weight per head (``weights_proj``)."""
        if not self.index_heads:
            return 0
        width = self.index_heads * self.index_head_dim
        query_in = self.q_lora_rank or self.hidden
        return (
            query_in * width
            + self.hidden * self.index_head_dim
            + 2 * self.index_head_dim
            + self.hidden * self.index_heads
        )

    @property
    def expert_params_per_layer(self) -> int:
        """All routed experts' weights in one layer (0 for a dense model)."""
        return self.experts * 3 * self.hidden * self.moe_intermediate if self.experts else 0

    @property
    def dense_mlp_params_per_layer(self) -> int:
        """MLP weights every token reads: the dense MLP, or a MoE's router and shared expert."""
        if self.experts:
            return self.hidden * self.experts + 3 * self.hidden * self.shared_expert_intermediate
        return (3 if self.mlp_gated else 2) * self.hidden * self.intermediate

    @property
    def expert_params(self) -> int:
        """Every routed expert's weights in the model (0 for a dense model)."""
        return self.moe_layers * self.expert_params_per_layer

    @property
    def _always_read_mlp_params(self) -> int:
        """MLP weights every token reads in the whole model: the dense MLPs, routers and shared experts."""
        if not self.experts:
            return (self.mlp_layers or self.layers) * self.dense_mlp_params_per_layer
        leading = self.dense_layers * 3 * self.hidden * self.intermediate
        return leading + self.moe_layers * self.dense_mlp_params_per_layer

    @property
    def embedding_params(self) -> int:
        """Input embedding plus the lm_head when untied: vLLM keeps both unquantised."""
        return self.vocab * self.hidden * (1 if self.tie else 2)

    @property
    def norm_params(self) -> int:
        """Two norms a layer and the final one; one a block where a layer is one mixer or one MLP
        (Nemotron-H)."""
        return ((1 if self.mlp_layers else 2) * self.layers + 1) * self.hidden

    @property
    def linear_params(self) -> int:
        """Weights of the quantisable linear layers (attention, MLP, experts)."""
        attention = self._attention_params
        return attention + self._always_read_mlp_params + self.expert_params

    @property
    def params(self) -> int:
        return self.linear_params + self.embedding_params + self.norm_params

    @property
    def active_linear_params(self) -> int:
        """Linear weights one token multiplies through (top-k experts only)."""
        active_experts = self.moe_layers * self.experts_per_token * 3 * self.hidden * self.moe_intermediate
        return self._attention_params + self._always_read_mlp_params + active_experts

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs of one query token against one context token, all layers and heads (QK^T and AV). MLA
        attends in the latent (the absorbed form vLLM decodes with): keys kv_lora_rank + rope wide, values
        kv_lora_rank."""
        if self.mla:
            return 2.0 * self.layers * self.heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim)
        return 4.0 * self.layers * self.heads * self.head_dim

    @property
    def indexer_flops_per_pair(self) -> float:
        """FLOPs of DeepSeek V3.2's lightning indexer scoring one context token for one query token, all
        layers: every indexer head's dot product with the token's key (vLLM replicates the indexer on every
        TP rank). 0 without an indexer."""
        return 2.0 * self.layers * self.index_heads * self.index_head_dim

    @property
    def activation_intermediate(self) -> int:
        """Width of the widest MLP intermediate one token produces (for the activation peak)."""
        if self.experts:
            widest = max(self.experts_per_token * self.moe_intermediate, self.shared_expert_intermediate)
            return max(widest, self.intermediate) if self.dense_layers else widest
        return self.intermediate


def _model_from_row(row: dict[str, Any]) -> ModelShape:
    return ModelShape(
        name=row["name"],
        layers=int(row["layers"]),
        hidden=int(row["hidden"]),
        heads=int(row["heads"]),
        kv_heads=int(row["kv_heads"]),
        head_dim=int(row["head_dim"]),
        intermediate=int(row["intermediate"]),
        vocab=int(row["vocab"]),
        max_position=int(row["max_position"]),
        tie=bool(row.get("tie", False)),
        dtype=str(row.get("dtype", "bf16")),
        qkv_bias=bool(row.get("qkv_bias", False)),
        experts=int(row.get("experts", 0)),
        experts_per_token=int(row.get("experts_per_token", 0)),
        moe_intermediate=int(row.get("moe_intermediate", 0)),
        shared_expert_intermediate=int(row.get("shared_expert_intermediate", 0)),
        dense_layers=int(row.get("dense_layers", 0)),
        quantization=row.get("quantization"),
        no_fp16=bool(row.get("no_fp16", False)),
        sliding_window=int(row.get("sliding_window", 0)),
        sliding_layers=int(row.get("sliding_layers", 0)),
        linear_layers=int(row.get("linear_layers", 0)),
        linear_key_heads=int(row.get("linear_key_heads", 0)),
        linear_value_heads=int(row.get("linear_value_heads", 0)),
        linear_key_head_dim=int(row.get("linear_key_head_dim", 0)),
        linear_value_head_dim=int(row.get("linear_value_head_dim", 0)),
        linear_conv_kernel=int(row.get("linear_conv_kernel", 0)),
        lightning=bool(row.get("lightning", False)),
        kda=bool(row.get("kda", False)),
        mamba_layers=int(row.get("mamba_layers", 0)),
        mamba_version=int(row.get("mamba_version", 0)),
        mamba_inner=int(row.get("mamba_inner", 0)),
        mamba_heads=int(row.get("mamba_heads", 0)),
        mamba_head_dim=int(row.get("mamba_head_dim", 0)),
        mamba_groups=int(row.get("mamba_groups", 0)),
        mamba_d_state=int(row.get("mamba_d_state", 0)),
        mamba_conv_kernel=int(row.get("mamba_conv_kernel", 0)),
        mamba_dt_rank=int(row.get("mamba_dt_rank", 0)),
        attention_layers=int(row.get("attention_layers", 0)),
        mlp_layers=int(row.get("mlp_layers", 0)),
        mlp_gated=bool(row.get("mlp_gated", True)),
        vision_params=int(row.get("vision_params", 0)),
        audio_params=int(row.get("audio_params", 0)),
        kv_lora_rank=int(row.get("kv_lora_rank", 0)),
        q_lora_rank=int(row.get("q_lora_rank", 0)),
        qk_nope_head_dim=int(row.get("qk_nope_head_dim", 0)),
        qk_rope_head_dim=int(row.get("qk_rope_head_dim", 0)),
        v_head_dim=int(row.get("v_head_dim", 0)),
        index_heads=int(row.get("index_heads", 0)),
        index_head_dim=int(row.get("index_head_dim", 0)),
        index_topk=int(row.get("index_topk", 0)),
        hf_id=str(row.get("hf_id", "")),
        source=str(row.get("source", "")),
        params_b_reference=row.get("params_b"),
        aliases=tuple(str(a) for a in row.get("aliases", ())),
    )


@functools.cache
def load_models() -> dict[str, ModelShape]:
    """The model catalog (vllm-sizing.md section 4), keyed by canonical name."""
    data = _load_yaml("models.yaml")
    published = data.get("checkpoints") or {}
    out = {}
    for row in data["models"]:
        model = _model_from_row(row)
        repos = published.get(model.name) or {}
        pairs = tuple(sorted((str(k), str(v)) for k, v in repos.items()))
        out[model.name] = replace(model, checkpoints=pairs)
    return out


# Suffixes that name a fine-tune or a packaging of the same shape; a trailing quantisation tag sets the dtype.
_VARIANT_SUFFIXES = ("instruct", "chat", "hf", "it", "base")
_QUANT_SUFFIXES = {
    "awq": "awq",
    "gptqint4": "gptq",
    "gptq": "gptq",
    "fp8": "fp8",
    "int8": "int8",
    "w8a8": "int8",
}


def find_model(name: str) -> ModelShape:
    """A catalog model by name, alias or HF id; ``-Instruct``/``-Chat`` variants and ``-AWQ``/``-GPTQ``
    packagings of a catalog model resolve to its shape (the packaging sets ``quantization``), and so does
    every published quantized checkpoint the catalog names (``Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4``)."""
    models = load_models()
    index: dict[str, ModelShape] = {}
    published: dict[str, tuple[ModelShape, str, str]] = {}
    for m in models.values():
        for alias in (m.name, m.hf_id, *m.aliases):
            if alias:
                index[_key(alias)] = m
        for dtype, repo in m.checkpoints:
            published[_key(repo)] = (m, dtype, repo)
    if _key(name) in published:  # a name the tool itself prints in a vllm serve line resolves back
        found, dtype, repo = published[_key(name)]
        return replace(found, quantization=dtype, hf_id=name.strip() if "/" in name else repo)
    parts = [p for p in name.strip().rsplit("/", 1)[-1].split("-") if p]
    quant: str | None = None
    while parts:
        key = _key("-".join(parts))
        if key in index:
            found = index[key]
            if not quant:
                return found
            # a packaging names its own repo: vLLM must load that one, not the 16-bit original
            repo = name.strip() if "/" in name else (found.checkpoint(quant) or "")
            return replace(found, quantization=quant, hf_id=repo)
        tail = _key(parts[-1])
        pair = _key("".join(parts[-2:])) if len(parts) > 2 else ""
        if pair in _QUANT_SUFFIXES and quant is None:  # a tag of two parts: -GPTQ-Int4
            quant = _QUANT_SUFFIXES[pair]
            parts.pop()
        elif tail in _QUANT_SUFFIXES and quant is None:
            quant = _QUANT_SUFFIXES[tail]
        elif tail not in _VARIANT_SUFFIXES and not tail.startswith("v0") and not tail.isdigit():
            break
        parts.pop()
    raise unknown("model", name, models)


# Any: parsed JSON from the user's file, checked below
def model_from_hf_config(config: Any, name: str = "custom") -> ModelShape:
    """A model shape from a parsed Hugging Face ``config.json`` (the dict); bad or missing fields raise."""
    cfg = _language_model(config, name)
    vision, audio = cfg.get("vision_config"), cfg.get("audio_config")
    model_type = str(cfg.get("model_type", ""))

    def pick(*keys: str, required: bool = True, default: Any = None) -> Any:  # Any: a config.json value
        for k in keys:
            if cfg.get(k) is not None:
                value = cfg[k]
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
                    raise SizingInputError(
                        f"{name}: config.json field {k!r} must be a positive integer, got {shown}"
                    )
                return value
        if required:
            raise SizingInputError(f"{name}: config.json lacks {' / '.join(repr(k) for k in keys)}")
        return default

    layers = pick("num_hidden_layers", "num_layers", "n_layer")
    if layers > MAX_LAYERS:  # the layer plans below walk every layer: a typo of 10**12 would never return
        raise SizingInputError(f"{name}: config.json gives {layers} layers; at most {MAX_LAYERS} are sized")
    hidden = pick("hidden_size", "n_embd", "d_model")
    heads = pick("num_attention_heads", "n_head")
    kv_heads = pick("num_key_value_heads", "multi_query_group_num", required=False, default=heads)
    if cfg.get("multi_query_attention") is False:
        kv_heads = heads
    head_dim = pick("head_dim", "attention_head_dim", "kv_channels", required=False, default=hidden // heads)
    intermediate = pick("intermediate_size", "ffn_hidden_size", "n_inner", required=False, default=4 * hidden)
    vocab = pick("vocab_size", "padded_vocab_size")
    max_position = pick("max_position_embeddings", "seq_length", "model_max_length", "n_positions")
    # Gemma 3 states its context already scaled (vLLM skips its factor)
    rope = None if "gemma3" in model_type else cfg.get("rope_scaling")
    context = _scaled_context(rope, max_position, name)
    experts, moe_intermediate, shared, intermediate = _moe_widths(cfg, pick, intermediate)
    kv_lora, q_lora, qk_nope, qk_rope, v_dim = _mla_fields(cfg, pick)
    indexer = _indexer(cfg, name, pick) if kv_lora else (0, 0, 0)
    kda = () if cfg.get("linear_num_value_heads") else _kda(cfg, name, layers)
    linear = (
        _linear_attention(cfg, name, layers, pick) or kda or _lightning(cfg, name, layers, heads, head_dim)
    )
    mamba = _mamba(cfg, name, layers, hidden, pick)
    if str(cfg.get("model_type", "")) == "granitemoehybrid" and not cfg.get("num_local_experts"):
        # Granite 4.0's dense models: the MLP is the "shared" one, as wide as shared_intermediate_size
        intermediate = pick("shared_intermediate_size", required=False, default=intermediate)
    window, sliding = _local_attention(cfg, name, layers, max_position)
    if kv_lora:
        head_dim = qk_nope + qk_rope  # a query head's width (DeepSeek's config has no head_dim)
    dtype_raw = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").lower()
    # vLLM serves a float32 checkpoint in the platform's first 16-bit type: bf16 where the GPU has it
    dtype = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "bf16"}.get(dtype_raw)
    if dtype is None:
        raise SizingInputError(
            f"{name}: config.json torch_dtype {dtype_raw!r} is not bfloat16/float16/float32"
        )
    quantization, quant_group = _quantization(cfg.get("quantization_config"), name)
    if quantization == "mxfp4" and not experts:
        raise SizingInputError(f"{name}: an mxfp4 checkpoint is modelled for MoE models (gpt-oss) only")
    qkv_bias = bool(cfg.get("attention_bias") or cfg.get("add_qkv_bias")) or model_type in {
        "qwen2",
        "qwen2_moe",
        "qwen2_vl",
        "qwen2_5_vl",
    }
    if cfg.get("use_cla"):
        raise SizingInputError(
            f"{name}: config.json field 'use_cla' (Hunyuan's cross-layer attention, layers sharing one KV "
            "cache) is not modelled"
        )
    if kv_heads > heads or heads % kv_heads:
        raise SizingInputError(
            f"{name}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )
    return ModelShape(
        name=name,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=vocab,
        max_position=context,
        tie=bool(cfg.get("tie_word_embeddings", False)),
        dtype=dtype,
        qkv_bias=qkv_bias,
        experts=experts,
        experts_per_token=pick(
            "num_experts_per_tok",
            "num_experts_per_token",  # Kimi-Linear
            "moe_topk",
            "moe_k",
            required=False,
            default=2 if experts else 0,
        ),
        moe_intermediate=moe_intermediate,
        shared_expert_intermediate=shared,
        dense_layers=_dense_layers(cfg, name, layers) if experts else 0,
        sliding_window=window,
        sliding_layers=sliding,
        linear_layers=linear[0],
        linear_key_heads=linear[1],
        linear_value_heads=linear[2],
        linear_key_head_dim=linear[3],
        linear_value_head_dim=linear[4],
        linear_conv_kernel=linear[5],
        lightning=bool(linear[0]) and not cfg.get("linear_num_value_heads") and not kda,
        kda=bool(kda),
        state_space=_state_space(cfg) if mamba is None and not kda else False,
        **(mamba or {}),
        kv_lora_rank=kv_lora,
        q_lora_rank=q_lora,
        qk_nope_head_dim=qk_nope,
        qk_rope_head_dim=qk_rope,
        v_head_dim=v_dim,
        index_heads=indexer[0],
        index_head_dim=indexer[1],
        index_topk=indexer[2],
        quantization=quantization,
        quant_group=quant_group,
        no_fp16=bool(_NO_FP16 & {model_type, str(config.get("model_type", ""))}),
        vision_params=_vision_params(vision, hidden, str(config.get("model_type", ""))) if vision else 0,
        audio_params=_audio_params(audio, hidden) if isinstance(audio, dict) else 0,
        hf_id=str(cfg.get("_name_or_path") or name),
        source="config.json",
    )


def _language_model(config: Any, name: str) -> dict[str, Any]:  # Any: parsed JSON, checked here
    """The fields of a config.json's language model: a multimodal wrapper's ``text_config`` (and Qwen3-Omni's
    ``thinker_config``, the part vLLM serves) laid over the outer fields, with per-layer lists of one value
    taken as that value; a family not modelled is refused by name."""
    if not isinstance(config, dict):
        raise SizingInputError(f"{name}: config.json must be a JSON object, got {type(config).__name__}")
    cfg = dict(config)
    thinker = cfg.get("thinker_config")
    if isinstance(thinker, dict):
        cfg = {**cfg, **thinker}
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the language model here
        cfg = {**cfg, **cfg["text_config"]}
    model_type = str(cfg.get("model_type", ""))
    for family, what in _NOT_MODELLED.items():
        if model_type.startswith(family):
            raise SizingInputError(f"{name}: model_type {model_type!r} is not modelled: {what}")
    cfg.update(_per_layer_values(cfg, name))
    return cfg


def _count(cfg: dict[str, Any], key: str, name: str, below: int) -> int:
    """A config.json count that may be 0 (absent: 0), under ``below``."""
    value = cfg.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < below:
        raise SizingInputError(
            f"{name}: config.json field {key!r} must be an integer from 0 to {below - 1}, got {value!r}"
        )
    return value


def _moe_widths(
    cfg: dict[str, Any], pick: Callable[..., Any], intermediate: int
) -> tuple[int, int, int, int]:
    """(experts, routed expert width, shared experts' width, dense MLP width) of a config.json; a dense
    model's first three are 0."""
    # a dense model of a MoE family may say 0 experts (Granite 4.0's dense models: num_local_experts 0)
    names = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
    keys = [k for k in names if cfg.get(k) is not False]
    keys = [k for k in keys if not (isinstance(cfg.get(k), int) and cfg.get(k) == 0)]
    experts = pick(*keys, required=False, default=0) if keys else 0
    if not experts:
        return 0, 0, 0, intermediate
    moe_intermediate = pick("moe_intermediate_size", required=False, default=intermediate)
    # 0 says none (MiniMax's shared_intermediate_size)
    widths = [k for k in ("shared_expert_intermediate_size", "shared_intermediate_size") if cfg.get(k) != 0]
    shared = pick(*widths, required=False, default=0) if widths else 0
    counts = [
        k for k in ("n_shared_experts", "moe_num_shared_experts", "num_shared_experts") if cfg.get(k) != 0
    ]
    if not shared and counts:  # DeepSeek and ERNIE count their shared experts, each as wide as a routed one
        shared = pick(*counts, required=False, default=0) * moe_intermediate
    if str(cfg.get("model_type", "")).startswith("hunyuan") and cfg.get("use_mixed_mlp_moe"):
        # Hunyuan: num_shared_expert MLPs as wide as intermediate_size (vLLM's HunYuanSparseMoeBlock)
        shared = pick("num_shared_expert", required=False, default=0) * intermediate
    if str(cfg.get("model_type", "")).startswith("llama4"):
        # Llama 4: one shared expert as wide as a routed one beside them; its dense layers (Maverick's every
        # other one) have their own, wider MLP
        shared = shared or moe_intermediate
        intermediate = pick("intermediate_size_mlp", required=False, default=intermediate)
    return experts, moe_intermediate, shared, intermediate


def _vision_params(vision: Any, text_hidden: int, family: str = "") -> int:  # Any: a config.json value
    """A vision encoder's weights from its config.json ``vision_config`` (a ViT: attention and MLP per block,
    the patch embedding and the projector to the language model), or 0 where its shape cannot be read.

    The MLP is gated (three matrices) where the activation is SiLU (Qwen2.5-VL), else two (GELU: Qwen2-VL,
    Llama 4, InternViT); the projector merges ``spatial_merge_size``^2 patches (Qwen) or maps one (LLaVA),
    and Qwen3-VL's and Qwen3-Omni's DeepStack keeps one more such merger for each of its
    ``deepstack_visual_indexes``; a learned position table (``num_position_embeddings``) is counted where
    the config gives one. GLM-4.1V and GLM-4.5V (``family`` glm4v...) are laid out otherwise
    (_glm4v_vision)."""
    if not isinstance(vision, dict):
        return 0
    whole = _whole_of(vision)
    layers = whole("depth", "num_hidden_layers", "num_layers")
    width = whole("hidden_size", "embed_dim", "width")
    if not layers or not width:
        return 0
    ratio = vision.get("mlp_ratio")
    ratio = ratio if isinstance(ratio, int | float) and not isinstance(ratio, bool) and ratio > 0 else 4
    mlp = whole("intermediate_size") or int(width * ratio)
    gated = str(vision.get("hidden_act", "")).lower() in {"silu", "swiglu"}
    blocks = layers * (4 * width * width + (3 if gated else 2) * width * mlp)
    patch = whole("patch_size", "spatial_patch_size") or 14
    channels = (whole("in_chans", "num_channels") or 3) * (whole("temporal_patch_size") or 1)
    embed = channels * patch * patch * width
    out = whole("out_hidden_size", "projection_dim", "vision_output_dim") or text_hidden
    if family.startswith("glm4v") or str(vision.get("model_type", "")).startswith("glm4v"):
        return embed + _glm4v_vision(whole, layers, width, out, patch)
    merged = width * (whole("spatial_merge_size") or 1) ** 2
    projector = merged * merged + merged * out if merged > width else width * out + out * out
    deepstack = vision.get("deepstack_visual_indexes")
    mergers = 1 + (len(deepstack) if isinstance(deepstack, list) else 0)
    return blocks + embed + mergers * projector + whole("num_position_embeddings") * width


def _glm4v_vision(whole: Callable[..., int], layers: int, width: int, out: int, patch: int) -> int:
    """GLM-4.1V's and GLM-4.5V's vision encoder past its patch embedding, as vLLM's ``glm4_1v.py`` builds it:
    each block's gated MLP is ``out_hidden_size`` wide (not ``intermediate_size``); a Conv2d merges
    ``spatial_merge_size``^2 patches into ``out_hidden_size``; the merger is a square projection and a gated
    MLP ``intermediate_size`` wide; a position table covers (``image_size`` / ``patch_size``)^2 patches."""
    merge = whole("spatial_merge_size") or 1
    blocks = layers * (4 * width * width + 3 * width * out)
    side = whole("image_size") // patch
    merger = out * out + 3 * out * whole("intermediate_size")
    return blocks + width * out * merge * merge + merger + side * side * width


def _whole_of(config: dict[str, Any]) -> Callable[..., int]:
    """A reader of an encoder config's sizes: the first of ``keys`` that is a positive integer, else 0."""

    def whole(*keys: str) -> int:
        for key in keys:
            value = config.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return 0

    return whole


def _audio_params(audio: dict[str, Any], text_hidden: int) -> int:
    """An audio encoder's weights from its config.json ``audio_config``, or 0 where its shape cannot be read.

    Whisper-style blocks (``encoder_layers`` of ``d_model``): q/k/v/out projections with biases, a two-matrix
    GELU MLP ``encoder_ffn_dim`` wide, two LayerNorms; a final LayerNorm. The front end and the head are
    Qwen3-Omni's AuT where the config gives ``downsample_hidden_size`` (three stride-2 3x3 Conv2d of that
    many channels over the mel bins, a linear from channels x bins / 8 to ``d_model``, then ``d_model`` to
    ``d_model`` and to ``output_dim``), else Whisper's (two kernel-3 Conv1d, mel bins to ``d_model`` and
    ``d_model`` to ``d_model``, and one projection to ``output_dim``: Qwen2-Audio, Qwen2.5-Omni)."""
    whole = _whole_of(audio)
    width = whole("d_model", "hidden_size")
    layers = whole("encoder_layers", "num_hidden_layers")
    if not width or not layers:
        return 0
    ffn = whole("encoder_ffn_dim", "intermediate_size") or 4 * width
    blocks = layers * (4 * width * width + 4 * width + 2 * width * ffn + ffn + width + 4 * width)
    mels = whole("num_mel_bins") or 128
    out = whole("output_dim") or text_hidden
    channels = whole("downsample_hidden_size")
    if channels:
        bins = mels
        for _ in range(3):
            bins = (bins + 1) // 2
        front = 10 * channels + 2 * (9 * channels * channels + channels) + channels * bins * width
        head = width * width + width + width * out + out
    else:
        front = 3 * mels * width + width + 3 * width * width + width
        head = width * out + out
    return blocks + front + head + 2 * width


def _dense_layers(cfg: dict[str, Any], name: str, layers: int) -> int:
    """How many layers of a MoE config.json have a dense MLP instead of the experts, from the fields the
    modelling code places them by: an explicit ``moe_layers`` list; else every
    ``interleave_moe_layer_step``-th (Llama 4) or ``decoder_sparse_step``-th (Qwen MoE) layer is sparse,
    less the leading ``first_k_dense_replace`` (DeepSeek) and the ``mlp_only_layers`` (Qwen MoE); or every
    ``expert_layer_period``-th from ``expert_layer_offset`` (Jamba)."""
    listed = cfg.get("moe_layers")
    if isinstance(listed, list) and listed:
        if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in listed):
            raise SizingInputError(
                f"{name}: config.json field 'moe_layers' must list layer indices from 0 to {layers - 1}"
            )
        return layers - len(set(listed))
    if cfg.get("moe_layer_start_index") is not None:  # ERNIE 4.5: every interval-th layer from start to end
        start = _count(cfg, "moe_layer_start_index", name, below=layers)
        end = layers - 1 if cfg.get("moe_layer_end_index") is None else cfg.get("moe_layer_end_index")
        end = _count({"moe_layer_end_index": end}, "moe_layer_end_index", name, below=layers)
        interval = max(1, _count(cfg, "moe_layer_interval", name, below=layers + 1))
        return layers - sum(1 for i in range(start, end + 1) if (i + 1) % interval == 0)
    if cfg.get("expert_layer_period") is not None:  # Jamba: the experts on every period-th layer from offset
        period = _count(cfg, "expert_layer_period", name, below=layers + 1)
        offset = _count(cfg, "expert_layer_offset", name, below=layers)
        return layers - len(range(offset, layers, max(1, period)))
    step = max(
        1,
        _count(cfg, "interleave_moe_layer_step", name, below=layers + 1),
        _count(cfg, "decoder_sparse_step", name, below=layers + 1),
    )
    first = _count(cfg, "first_k_dense_replace", name, below=layers)
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise SizingInputError(f"{name}: config.json field 'mlp_only_layers' must list layer indices")
    sparse = [i for i in range(first, layers) if (i + 1) % step == 0 and i not in set(only)]
    return layers - len(sparse)


# config.json fields some families give once per layer (Hunyuan's MoE): one value when every layer has it
_PER_LAYER_FIELDS = ("moe_topk", "moe_intermediate_size", "num_shared_expert", "moe_k")


def _per_layer_values(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """The fields of _PER_LAYER_FIELDS a config.json lists per layer, each as its one value; a list whose
    layers differ is refused naming it (the shape holds one width and top-k for all MoE layers)."""
    out: dict[str, Any] = {}
    for key in _PER_LAYER_FIELDS:
        value = cfg.get(key)
        if not isinstance(value, list) or not value:
            continue
        if len({repr(v) for v in value}) > 1:
            raise SizingInputError(
                f"{name}: config.json field {key!r} differs between layers "
                f"({', '.join(sorted(set(map(repr, value))))}): "
                "layers of different widths or top-k are not modelled"
            )
        out[key] = value[0]
    return out


def _layer_types(cfg: dict[str, Any], name: str, layers: int) -> list[Any] | None:
    """A config.json's ``layer_types``: one entry per layer, or None where it has none."""
    types = cfg.get("layer_types")
    if types is not None and (not isinstance(types, list) or len(types) != layers):
        raise SizingInputError(f"{name}: config.json field 'layer_types' must list one type per layer")
    return types


# The most layers a config.json may give (the deepest open models have about 100)
MAX_LAYERS = 10_000

# Families whose layers the shape cannot hold: refused by name rather than sized wrong
_NOT_MODELLED = {
    "gemma3n": "Gemma 3n's per-layer embeddings, AltUp streams and KV cache shared across layers",
}

# Architectures vLLM refuses to run in float16 (vllm/config: _FLOAT16_NOT_SUPPORTED_MODELS)
_NO_FP16 = frozenset({"gemma2", "gemma3", "gemma3_text", "glm4", "plamo2"})

# (bits, type) of a checkpoint's weights -> the weight format sized: 4-bit integers with group scales as
# GPTQ/AWQ, 8-bit integers as int8, 8-bit floats as FP8
_QUANT_BY_BITS = {(4, "int"): "gptq", (8, "int"): "int8", (8, "float"): "fp8"}


def _quantization(quant: Any, name: str) -> tuple[str | None, int]:  # Any: a config.json value
    """The weight format of a config.json's ``quantization_config`` (None: not quantized), from its method and
    where the method has several, its bit width: GPTQ's ``bits``, compressed-tensors' ``config_groups``
    weights (``num_bits``, ``type``); ModelOpt's ``quant_algo``. One that is not modelled raises. With it,
    the quantization group or block along a weight's input (0: per tensor or per channel)."""
    if not quant:
        return None, 0
    if not isinstance(quant, dict) or not quant.get("quant_method"):
        raise SizingInputError(
            f"{name}: config.json quantization_config must be an object with a quant_method"
        )
    method = str(quant["quant_method"]).lower()
    if method == "fp8":
        return "fp8", _group(quant.get("weight_block_size"))
    if method == "mxfp4":
        return "mxfp4", 0
    if method == "modelopt" and str(quant.get("quant_algo", "")).upper() == "FP8":
        return "fp8", 0
    if method in ("awq", "gptq"):
        bits = quant.get("bits", quant.get("w_bit", 4))
        fmt = (
            {4: method, 8: "int8" if method == "gptq" else None}.get(bits) if isinstance(bits, int) else None
        )
        if fmt is None:
            raise SizingInputError(
                f"{name}: {method} with {bits!r}-bit weights is not modelled (4-bit, or GPTQ 8-bit)"
            )
        return fmt, _group(quant.get("group_size", quant.get("q_group_size")))
    if method == "compressed-tensors":
        groups = quant.get("config_groups")
        if not isinstance(groups, dict) or not groups:
            return "int8", 0  # the W8A8 default of llm-compressor's older checkpoints
        shapes: set[tuple[Any, str]] = set()
        sizes = set()
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, dict) else None
            if isinstance(weights, dict):
                shapes.add((weights.get("num_bits"), str(weights.get("type", "int")).lower()))
                sizes.add(_group(weights.get("group_size")) or _group(weights.get("block_structure")))
        fmts = {_QUANT_BY_BITS.get(shape) for shape in shapes}
        if len(fmts) != 1 or None in fmts:
            found = ", ".join(f"{b}-bit {t}" for b, t in sorted(shapes, key=str)) or "no weights"
            raise SizingInputError(
                f"{name}: compressed-tensors weights of {found} are not modelled "
                "(4-bit int, 8-bit int or float)"
            )
        return fmts.pop(), max(sizes, default=0)
    raise SizingInputError(
        f"{name}: quantization method {method!r} is not one of awq, gptq, fp8, compressed-tensors, modelopt "
        "(FP8), mxfp4"
    )


def _group(value: Any) -> int:  # Any: a config.json value
    """A quantization group size (``128``) or block (``[128, 128]``: its larger side) as a positive int; 0 for
    none (-1, null, per tensor)."""
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        value = max(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


# RoPE scalings whose factor vLLM does not apply to the context limit (their configs state the scaled one)
_UNSCALED_ROPE = ("su", "longrope", "llama3")


def _scaled_context(rope: Any, max_position: int, name: str) -> int:  # Any: a config.json value
    """The longest context vLLM allows (``_get_and_verify_max_len``): ``max_position_embeddings`` times a
    ``rope_scaling`` factor (linear, dynamic, YaRN: YaRN from its ``original_max_position_embeddings``, as
    Qwen's long-context recipe sets it), except for the scalings in _UNSCALED_ROPE and mRoPE (no factor)."""
    if not isinstance(rope, dict):
        return max_position
    kind = str(rope.get("rope_type", rope.get("type", "default")))
    if kind in _UNSCALED_ROPE or kind == "mrope":
        return max_position
    factor = rope.get("factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor < 1e4:
        raise SizingInputError(
            f"{name}: config.json rope_scaling factor must be a positive number, got {factor!r}"
        )
    base = max_position
    if kind == "yarn" and rope.get("original_max_position_embeddings") is not None:
        base = rope["original_max_position_embeddings"]
        if isinstance(base, bool) or not isinstance(base, int) or base <= 0:
            raise SizingInputError(
                f"{name}: config.json rope_scaling original_max_position_embeddings must be a positive "
                f"integer, got {base!r}"
            )
    return int(base * factor)


def _local_attention(cfg: dict[str, Any], name: str, layers: int, max_position: int) -> tuple[int, int]:
    """(span, sliding layers) of a config.json's local attention; (0, 0) without one.

    A sliding window (Qwen2's configs name one they switch off with ``use_sliding_window: false``; one as long
    as the context, or on no layer that ``layer_types`` lists, is none) slides on the layers ``layer_types``
    names ``sliding_attention`` (gpt-oss, newer Gemma and Qwen2 configs), else all but every
    ``sliding_window_pattern``-th (Gemma 3), the even ones (Gemma 2), those from ``max_window_layers`` on
    (Qwen2 with ``use_sliding_window``), else all of them (Mistral v0.1). Without one, Llama 4's chunks
    (``attention_chunk_size``) give the span on no sliding layer: vLLM sizes them as full attention."""
    window = cfg.get("sliding_window")
    raw_types = cfg.get("layer_types")
    if (
        cfg.get("use_sliding_window") is False
        or isinstance(window, bool)
        or not isinstance(window, int)
        or not 0 < window < max_position
        or (isinstance(raw_types, list) and "sliding_attention" not in raw_types)
    ):
        chunk = cfg.get("attention_chunk_size")
        if isinstance(chunk, int) and not isinstance(chunk, bool) and 0 < chunk < max_position:
            return chunk, 0
        return 0, 0
    types = _layer_types(cfg, name, layers)
    if types is not None:
        return window, sum(1 for t in types if t == "sliding_attention")
    pattern = cfg.get("sliding_window_pattern", cfg.get("_sliding_window_pattern"))
    if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:
        return window, layers - layers // pattern  # every pattern-th layer attends globally
    if str(cfg.get("model_type", "")) == "gemma2":
        return window, (layers + 1) // 2  # layers 0, 2, 4, ... slide
    if cfg.get("use_sliding_window") is True and "max_window_layers" in cfg:
        return window, layers - min(layers, _count(cfg, "max_window_layers", name, below=layers + 1))
    return window, layers


_SSM_KEYS = (
    "mamba_d_state",
    "ssm_state_size",
    "mamba_n_heads",
    "hybrid_override_pattern",
    "layers_block_type",
)


def _state_space(cfg: dict[str, Any]) -> bool:
    """Whether a config.json has state-space or linear-attention layers other than Gated DeltaNet (Mamba,
    MiniMax's lightning attention: sized as attention, warned)."""
    if cfg.get("linear_num_value_heads"):
        return False
    types = cfg.get("layer_types")
    named = isinstance(types, list) and any(str(t) in ("mamba", "linear_attention", "mamba2") for t in types)
    attn = cfg.get("attn_type_list")  # MiniMax: 0 marks a lightning layer; with no 1, no attention at all
    lightning = isinstance(attn, list) and 0 in attn and 1 not in attn
    kda = cfg.get("linear_attn_config")  # Kimi-Linear: Kimi Delta Attention layers beside MLA
    kimi = isinstance(kda, dict) and bool(kda.get("kda_layers") or kda.get("num_heads"))
    return named or lightning or kimi or any(cfg.get(k) for k in _SSM_KEYS)


# Nemotron-H's block kinds: hybrid_override_pattern's characters, or layers_block_type's names
_NEMOTRON_BLOCKS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def _nemotron_blocks(cfg: dict[str, Any], name: str, layers: int) -> str | None:
    """A Nemotron-H config.json's blocks, one character a layer (M Mamba2, * attention, - MLP, E MoE), from
    ``hybrid_override_pattern`` or ``layers_block_type``; None for another model."""
    pattern = cfg.get("hybrid_override_pattern")
    listed = cfg.get("layers_block_type")
    if isinstance(pattern, str):
        blocks = pattern
    elif str(cfg.get("model_type", "")) == "nemotron_h" and isinstance(listed, list):
        blocks = "".join(_NEMOTRON_BLOCKS.get(str(t), "?") for t in listed)
    else:
        return None
    if len(blocks) != layers or set(blocks) - set("M*-E"):
        raise SizingInputError(
            f"{name}: config.json hybrid_override_pattern / layers_block_type must name one block a layer "
            "(M, *, - or E; mamba, attention, mlp or moe)"
        )
    return blocks


def _mamba(
    cfg: dict[str, Any], name: str, layers: int, hidden: int, pick: Callable[..., Any]
) -> dict[str, Any] | None:
    """The Mamba layers of a state-space hybrid vLLM runs with its hybrid KV cache manager, as ModelShape
    fields, from each family's own config.json names (vLLM's ``get_mamba_state_shape_from_config``):

    * Nemotron-H (``hybrid_override_pattern``): Mamba2 blocks (M), attention blocks (*) and MLP blocks (-),
      ``mamba_num_heads`` x ``mamba_head_dim`` wide, ``n_groups``, ``ssm_state_size``, ``conv_kernel``;
    * Granite 4.0-H (``granitemoehybrid``): ``layer_types`` mamba or attention, every layer with its MLP;
      ``mamba_expand`` x hidden wide, ``mamba_n_heads``, ``mamba_d_head``, ``mamba_n_groups``,
      ``mamba_d_state``, ``mamba_d_conv``;
    * Falcon-H1 (``falcon_h1``): attention and Mamba2 side by side on every layer, ``mamba_d_ssm`` (else
      ``mamba_expand`` x hidden) wide, the Granite names otherwise;
    * Jamba (``jamba``): attention on every ``attn_layer_period``-th layer from ``attn_layer_offset``, Mamba1
      on the others, ``mamba_expand`` x hidden wide, ``mamba_d_state``, ``mamba_d_conv``, ``mamba_dt_rank``.

    {} for a config of such a family without Mamba layers (Granite 4.0 Micro); None for any other model, and
    for a variant not modelled (Nemotron-H with MoE blocks, a model without attention layers): it keeps
    ``state_space``'s warning."""
    model_type = str(cfg.get("model_type", ""))
    blocks = _nemotron_blocks(cfg, name, layers)
    if blocks is not None:
        if "E" in blocks or not blocks.count("M") or not blocks.count("*"):
            return None
        heads, head_dim = pick("mamba_num_heads"), pick("mamba_head_dim")
        return {
            "mamba_layers": blocks.count("M"),
            "attention_layers": blocks.count("*"),
            "mlp_layers": blocks.count("-"),
            "mlp_gated": False,
            "mamba_version": 2,
            "mamba_inner": heads * head_dim,
            "mamba_heads": heads,
            "mamba_head_dim": head_dim,
            "mamba_groups": pick("n_groups"),
            "mamba_d_state": pick("ssm_state_size"),
            "mamba_conv_kernel": pick("conv_kernel"),
        }
    if model_type in ("granitemoehybrid", "falcon_h1"):
        if model_type == "granitemoehybrid":
            types = _layer_types(cfg, name, layers)
            if types is None:
                return None
            mamba_layers = sum(1 for t in types if t == "mamba")
            if not mamba_layers:
                return {}
            attention = 0
        else:
            mamba_layers = attention = layers
        inner = pick("mamba_d_ssm", required=False) or int(_expand(cfg, name) * hidden)
        return {
            "mamba_layers": mamba_layers,
            "attention_layers": attention,
            "mamba_version": 2,
            "mamba_inner": inner,
            "mamba_heads": pick("mamba_n_heads"),
            "mamba_head_dim": pick("mamba_d_head"),
            "mamba_groups": pick("mamba_n_groups"),
            "mamba_d_state": pick("mamba_d_state"),
            "mamba_conv_kernel": pick("mamba_d_conv"),
        }
    if model_type == "jamba":
        period = _count(cfg, "attn_layer_period", name, below=layers + 1) or 1
        offset = _count(cfg, "attn_layer_offset", name, below=layers)
        attention = len(range(offset, layers, period))
        if not attention or attention == layers:
            return None
        rank = cfg.get("mamba_dt_rank", "auto")
        return {
            "mamba_layers": layers - attention,
            "mamba_version": 1,
            "mamba_inner": int(_expand(cfg, name) * hidden),
            "mamba_d_state": pick("mamba_d_state"),
            "mamba_conv_kernel": pick("mamba_d_conv"),
            "mamba_dt_rank": math.ceil(hidden / 16) if rank == "auto" else pick("mamba_dt_rank"),
        }
    return None


def _expand(cfg: dict[str, Any], name: str) -> float:
    """A config.json's ``mamba_expand``: the Mamba mixer's width over the hidden size."""
    value = cfg.get("mamba_expand")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 64:
        raise SizingInputError(
            f"{name}: config.json field 'mamba_expand' must be a positive number, got {value!r}"
        )
    return float(value)


def _lightning(
    cfg: dict[str, Any], name: str, layers: int, heads: int, head_dim: int
) -> tuple[int, int, int, int, int, int]:
    """MiniMax-Text-01/M1's lightning-attention layers, those ``attn_type_list`` marks 0 beside full
    attention (1), in _linear_attention's terms: every attention head keeps a head_dim x head_dim state and
    there is no convolution (kernel 1 keeps no input). All 0 for other models, and for a config without a
    full-attention layer (``_state_space`` warns of it)."""
    types = cfg.get("attn_type_list")
    if not isinstance(types, list) or not types:
        return 0, 0, 0, 0, 0, 0
    if len(types) != layers or not all(t in (0, 1) and not isinstance(t, bool) for t in types):
        raise SizingInputError(
            f"{name}: config.json field 'attn_type_list' must give 0 (lightning) or 1 (full attention) for "
            f"each of the {layers} layers"
        )
    linear = types.count(0)
    if not linear or linear == layers:
        return 0, 0, 0, 0, 0, 0
    return linear, heads, heads, head_dim, head_dim, 1


def _kda(cfg: dict[str, Any], name: str, layers: int) -> tuple[int, ...]:
    """Kimi-Linear's Kimi Delta Attention layers, those ``linear_attn_config`` lists in ``kda_layers``
    (numbered from 1) beside its MLA layers, in _linear_attention's terms: ``num_heads`` heads of
    ``head_dim`` for queries, keys and values alike, and the ``short_conv_kernel_size`` convolution. Empty
    for other models, and for a config without a full-attention layer (``_state_space`` warns of it)."""
    config = cfg.get("linear_attn_config")
    if not isinstance(config, dict) or not config.get("kda_layers"):
        return ()
    listed = config["kda_layers"]
    if not isinstance(listed, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 1 <= i <= layers for i in listed
    ):
        raise SizingInputError(
            f"{name}: config.json field 'linear_attn_config.kda_layers' must list layer numbers from 1 to "
            f"{layers}"
        )
    linear = len(set(listed))
    if linear == layers:
        return ()

    def whole(key: str) -> int:
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SizingInputError(
                f"{name}: config.json field 'linear_attn_config.{key}' must be a positive integer, got "
                f"{value!r}"
            )
        return value

    heads, dim = whole("num_heads"), whole("head_dim")
    return linear, heads, heads, dim, dim, whole("short_conv_kernel_size")


def _linear_attention(
    cfg: dict[str, Any], name: str, layers: int, pick: Callable[..., Any]
) -> tuple[int, ...]:
    """A Gated DeltaNet hybrid's (Qwen3-Next) linear-attention layers, those ``layer_types`` names
    ``linear_attention``, else all but every ``full_attention_interval``-th; and their key heads, value
    heads, key and value head widths and convolution kernel. Empty for other models."""
    if not cfg.get("linear_num_value_heads"):
        return ()
    types = _layer_types(cfg, name, layers)
    if types is not None:
        linear = sum(1 for t in types if t == "linear_attention")
    else:
        if cfg.get("full_attention_interval") is None:
            raise SizingInputError(
                f"{name}: a linear-attention config.json needs layer_types or full_attention_interval"
            )
        interval = _count(cfg, "full_attention_interval", name, below=layers + 1)
        if interval < 1:
            raise SizingInputError(f"{name}: config.json field 'full_attention_interval' must be at least 1")
        linear = layers - layers // interval
    return (
        linear,
        pick("linear_num_key_heads"),
        pick("linear_num_value_heads"),
        pick("linear_key_head_dim"),
        pick("linear_value_head_dim"),
        pick("linear_conv_kernel_dim"),
    )


def _mla_fields(cfg: dict[str, Any], pick: Callable[..., Any]) -> tuple[int, int, int, int, int]:
    """Multi-head latent attention's (kv_lora_rank, q_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
    v_head_dim) from a DeepSeek V2/V3 config.json; all 0 for GQA/MHA."""
    if not cfg.get("kv_lora_rank"):
        return 0, 0, 0, 0, 0
    return (
        pick("kv_lora_rank"),
        pick("q_lora_rank", required=False, default=0),  # null: the queries are not compressed
        pick("qk_nope_head_dim"),
        pick("qk_rope_head_dim"),
        pick("v_head_dim"),
    )


def _indexer(cfg: dict[str, Any], name: str, pick: Callable[..., Any]) -> tuple[int, int, int]:
    """DeepSeek V3.2's lightning indexer: (``index_n_heads``, ``index_head_dim``, ``index_topk``); zeros for
    an MLA model without one. vLLM quantizes the indexer's keys in blocks of 128 values."""
    if cfg.get("index_n_heads") is None and cfg.get("index_head_dim") is None:
        return 0, 0, 0
    heads, width, topk = pick("index_n_heads"), pick("index_head_dim"), pick("index_topk")
    if width % 128:
        raise SizingInputError(
            f"{name}: config.json field 'index_head_dim' must be a multiple of 128 (vLLM's FP8 indexer cache "
            f"quantizes in blocks of 128), got {width}"
        )
    return heads, width, topk


# ---------------------------------------------------------------------------------------------------- prices
@dataclass(frozen=True)
class Price:
    cny_per_hour: float
    estimate: bool
    source: str


@dataclass(frozen=True)
class PriceBook:
    """Pay-as-you-go prices: listed per type, else composed from per-GPU, per-vCPU and per-GiB rates."""

    currency: str
    default_region: str
    cny_per_vcpu_hour: float
    cny_per_gib_hour: float
    gpu_cny_per_hour: dict[str, tuple[float, bool]]
    types: dict[str, Price]
    region_multipliers: dict[str, float]

    def price(self, instance: InstanceType, region: str | None = None) -> Price | None:
        """The hourly price of ``instance`` in ``region``; None when no rate covers its GPU."""
        region = region or self.default_region
        if region not in self.region_multipliers:
            raise unknown("region", region, self.region_multipliers)
        mult = self.region_multipliers[region]
        if instance.name in self.types:
            p = self.types[instance.name]
            return Price(round(p.cny_per_hour * mult, 4), p.estimate, p.source)
        if instance.gpu not in self.gpu_cny_per_hour:
            return None
        gpu_rate, estimate = self.gpu_cny_per_hour[instance.gpu]
        value = (
            instance.gpus * gpu_rate
            + instance.vcpu * self.cny_per_vcpu_hour
            + instance.ram_gib * self.cny_per_gib_hour
        )
        return Price(round(value * mult, 4), estimate, "composed from per-GPU/vCPU/GiB rates (prices.yaml)")


# The one currency prices.yaml documents (its header: "CNY per instance-hour"); every figure prints as CNY.
CURRENCY = "CNY"


def _replace_entries(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """The shipped data with a user's file laid over it: a section's entries are replaced whole (as the
    shipped prices.yaml says: "a file's entries replace these"), so a user's price is never left marked
    with the shipped estimate's flag and source."""
    out = dict(base)
    for k, v in override.items():
        out[k] = {**out[k], **v} if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _number(value: Any, where: str, source_name: str, *, positive: bool = False) -> float:
    """A price, rate or multiplier: a YAML number (not true/false, not text), finite, >= 0 (> 0 when
    ``positive``). ``true`` would read as 1.0 and ``.nan`` would print as CNY nan."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SizingInputError(f"{source_name}: {where} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        what = "finite and positive" if positive else "finite and non-negative"
        raise SizingInputError(f"{source_name}: {where} must be {what}, got {value}")
    return float(value)


def _fields(entry: dict[str, Any], allowed: tuple[str, ...], where: str, source_name: str) -> None:
    """An entry's keys: a misspelt one (``multiplyer``, ``estimated``) would be ignored without a word."""
    extra = sorted(str(k) for k in entry if k not in allowed)
    if extra:
        raise SizingInputError(
            f"{source_name}: {where}: unknown key(s) {', '.join(extra)}; valid keys: {', '.join(allowed)}"
        )


def _flag(entry: dict[str, Any], where: str, source_name: str) -> bool:
    value = entry.get("estimate", False)
    if not isinstance(value, bool):
        raise SizingInputError(f"{source_name}: {where}.estimate must be true or false, got {value!r}")
    return value


def _section(data: dict[str, Any], key: str, source_name: str) -> dict[Any, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise SizingInputError(f"{source_name}: {key} must be a mapping, got {type(value).__name__}")
    return value


def _canonical_keys(override: dict[str, Any], source_name: str) -> dict[str, Any]:
    """A user's file with its GPU and instance type keys under their catalog names: a misspelt one (``t4``
    for T4 resolves; ``H200`` is not in the catalog) would otherwise be a price nothing ever reads."""
    out = dict(override)
    for key, find in (("gpu_cny_per_hour", find_gpu), ("types", find_instance)):
        if key not in override:
            continue
        entries: dict[str, Any] = {}
        for name, value in _section(override, key, source_name).items():
            try:
                canonical = find(str(name)).name
            except SizingInputError as exc:
                raise SizingInputError(f"{source_name}: {key}: {exc}") from None
            if canonical in entries:
                raise SizingInputError(f"{source_name}: {key}: two entries name {canonical}")
            entries[canonical] = value
        out[key] = entries
    return out


def _gpu_rates(data: dict[str, Any], source_name: str) -> dict[str, tuple[float, bool]]:
    rates: dict[str, tuple[float, bool]] = {}
    for gpu, rate in _section(data, "gpu_cny_per_hour", source_name).items():
        where = f"gpu_cny_per_hour.{gpu}"
        rates[str(gpu)] = _priced(rate, where, ("value", "basis"), "a value (CNY per GPU-hour)", source_name)
    return rates


def _priced(
    raw: Any, where: str, keys: tuple[str, str], needs: str, source_name: str
) -> tuple[float, bool]:  # Any: a YAML value
    """(figure, estimate) of a price entry: a bare number, or a mapping of ``keys`` (the figure's key and a
    note's) and ``estimate``; one line naming the entry for anything else."""
    if not isinstance(raw, dict):
        return _number(raw, where, source_name), False
    _fields(raw, (keys[0], "estimate", keys[1]), where, source_name)
    if keys[0] not in raw:
        raise SizingInputError(f"{source_name}: {where} needs {needs}")
    return _number(raw[keys[0]], f"{where}.{keys[0]}", source_name), _flag(raw, where, source_name)


def _type_prices(data: dict[str, Any], source_name: str) -> dict[str, Price]:
    types: dict[str, Price] = {}
    for name, p in _section(data, "types", source_name).items():
        full = name if str(name).startswith("ecs.") else f"ecs.{name}"
        where = f"types.{full}"
        value, estimate = _priced(p, where, ("cny_per_hour", "source"), "cny_per_hour", source_name)
        types[full] = Price(value, estimate, str(p.get("source", "")) if isinstance(p, dict) else source_name)
    return types


def _region_multipliers(data: dict[str, Any], source_name: str) -> dict[str, float]:
    regions: dict[str, float] = {}
    for region, v in _section(data, "regions", source_name).items():
        where = f"regions.{region}.multiplier"
        if isinstance(v, dict):
            _fields(v, ("multiplier",), f"regions.{region}", source_name)
        value = v.get("multiplier", 1.0) if isinstance(v, dict) else 1.0 if v is None else v
        regions[str(region)] = _number(value, where, source_name, positive=True)
    return regions


# Any: parsed YAML from the user's prices file, checked before use
def price_book(override: Any = None, source_name: str = "prices file") -> PriceBook:
    """The shipped price list, with ``override`` (a parsed prices.yaml of the same shape) laid over it."""
    data = _load_yaml("prices.yaml")
    if override is not None:
        if not isinstance(override, dict):
            raise SizingInputError(f"{source_name}: must be a mapping like the shipped prices.yaml")
        unknown = sorted(str(k) for k in override if k not in data)
        if unknown:
            # a misspelt section would otherwise be ignored and the shipped estimates used without a word
            raise SizingInputError(
                f"{source_name}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(data)}"
            )
        data = _replace_entries(data, _canonical_keys(override, source_name))
    currency = data.get("currency", CURRENCY)
    if currency != CURRENCY:
        # nothing converts: a USD file would be printed as CNY
        raise SizingInputError(f"{source_name}: currency must be {CURRENCY}, got {currency!r}")
    region = data.get("default_region", "cn-hangzhou")
    if not isinstance(region, str):
        raise SizingInputError(f"{source_name}: default_region must be a region name, got {region!r}")
    return PriceBook(
        currency=CURRENCY,
        default_region=region,
        cny_per_vcpu_hour=_number(data.get("cny_per_vcpu_hour", 0.0), "cny_per_vcpu_hour", source_name),
        cny_per_gib_hour=_number(data.get("cny_per_gib_hour", 0.0), "cny_per_gib_hour", source_name),
        gpu_cny_per_hour=_gpu_rates(data, source_name),
        types=_type_prices(data, source_name),
        region_multipliers=_region_multipliers(data, source_name),
    )
