"""Sliding-window models under vLLM's hybrid KV cache manager: which layers slide (from config.json), the
pool vLLM lays out for them, its startup check, and what a running sequence holds in the engine; and
gpt-oss's MXFP4 checkpoints (routed experts in 4 bits, the rest 16-bit)."""

from __future__ import annotations

import math

import pytest

from sizing import (
    Deployment,
    InstanceEngine,
    SizingInputError,
    find_gpu,
    model_from_hf_config,
    perf_for,
    plan_memory,
)
from sizing.catalog import GIB
from sizing.latency import capacity_estimate
from sizing.memory import hybrid_block_size, weight_bytes_per_rank
from sizing.search import vllm_args
from tests.sizing.test_catalog import QWEN2_CONFIG

# Gemma 3 27B's config.json (google/gemma-3-27b-it): the language model in text_config, every sixth layer
# global
GEMMA3_27B = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_attention_heads": 32,
        "num_hidden_layers": 62,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "sliding_window": 1024,
        "sliding_window_pattern": 6,
    },
}
# gpt-oss-20b's attention (openai/gpt-oss-20b): layer_types alternate a 128-token window with full attention
GPT_OSS_LAYERS = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(24)]
GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "torch_dtype": "bfloat16",
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "num_hidden_layers": 24,
    "num_local_experts": 32,
    "num_experts_per_tok": 4,
    "vocab_size": 201088,
    "max_position_embeddings": 131072,
    "sliding_window": 128,
    "layer_types": GPT_OSS_LAYERS,
}
DENSE = QWEN2_CONFIG


@pytest.mark.parametrize(
    ("config", "sliding"),
    [
        (GEMMA3_27B, 52),  # 62 layers, every sixth global: 10 global
        (GPT_OSS_20B, 12),
        ({**DENSE, "model_type": "gemma2", "num_hidden_layers": 46, "sliding_window": 4096}, 23),
        (
            {**DENSE, "sliding_window": 4096, "use_sliding_window": True, "max_window_layers": 20},
            8,  # Qwen2: the layers from max_window_layers on slide
        ),
        ({**DENSE, "sliding_window": 4096}, 28),  # Mistral v0.1: every layer
        ({**DENSE, "attention_chunk_size": 8192}, 0),  # Llama 4's chunks: sized as full attention
        ({**DENSE, "sliding_window": 4096, "use_sliding_window": False}, 0),
        ({**DENSE, "sliding_window": 4096, "layer_types": ["full_attention"] * 28}, 0),
    ],
)
def test_the_sliding_layers_are_read_from_the_config(config, sliding):
    model = model_from_hf_config(config)
    assert model.sliding_layers == sliding
    if "layer_types" in config and not sliding:
        assert model.sliding_window == 0  # a window no layer uses is none


def test_layer_types_that_do_not_name_every_layer_are_refused():
    with pytest.raises(SizingInputError, match="layer_types"):
        model_from_hf_config({**GPT_OSS_20B, "layer_types": GPT_OSS_LAYERS[:-1]})


def _plan(config, **kw):
    base = dict(model=model_from_hf_config(config), gpu=find_gpu("L20"), max_model_len=32768)
    base.update(kw)
    return plan_memory(Deployment(**base))


def _vllm_layout(plan, model, max_model_len):
    """vLLM's arithmetic for a hybrid model, written out from kv_cache_utils: groups of the smaller layer
    count, a pool block of one page per group slot, a sliding layer needing window - 1 + the step's tokens."""
    full, sliding = model.layers - model.sliding_layers, model.sliding_layers
    group = min(full, sliding) if max(full, sliding) >= 1.5 * min(full, sliding) else max(full, sliding)
    page = 16 * plan.kv_bytes_per_token / model.layers
    blocks = math.floor(plan.kv_cache_gib * GIB / (page * group))
    window_tokens = min(model.sliding_window - 1 + plan.max_num_batched_tokens, max_model_len)
    window_blocks = math.ceil(window_tokens / 16) + 1
    full_blocks = math.ceil(max_model_len / 16)
    per_request = math.ceil(full / group) * full_blocks + math.ceil(sliding / group) * window_blocks
    need_bytes = (full * full_blocks + sliding * window_blocks) * page
    return blocks, blocks / per_request, need_bytes


@pytest.mark.parametrize("config", [GEMMA3_27B, GPT_OSS_20B])
def test_a_hybrid_model_gets_vllms_pool_concurrency_and_startup_check(config):
    plan = _plan(config, dtype="fp8")
    blocks, concurrency, need_bytes = _vllm_layout(plan, model_from_hf_config(config), 32768)
    assert plan.local is not None
    assert plan.kv_cache_blocks == blocks
    assert plan.max_concurrency == pytest.approx(concurrency)
    assert plan.kv_cache_tokens == int(concurrency * 32768)
    assert plan.fits == (need_bytes <= plan.kv_cache_gib * GIB)


def test_gemma3_27b_in_fp8_fits_32k_on_one_l20_only_with_the_hybrid_manager():
    hybrid = _plan(GEMMA3_27B, dtype="fp8")
    full = _plan(GEMMA3_27B, dtype="fp8", vllm_version="0.9.2")  # before the hybrid manager: every layer full
    assert hybrid.fits and hybrid.max_concurrency > 1.5
    assert not full.fits and full.local is None
    assert full.max_model_len_that_fits < 32768 < hybrid.max_model_len_that_fits
    assert any("52 of 62 layers" in w for w in hybrid.warnings)
    assert any("lower bound" in w for w in full.warnings)


def test_the_longest_max_model_len_that_fits_is_the_last_one_the_check_passes():
    plan = _plan(GEMMA3_27B, dtype="fp8", max_model_len=131072)
    longest = plan.max_model_len_that_fits
    assert not plan.fits and 32768 < longest < 131072
    assert _plan(GEMMA3_27B, dtype="fp8", max_model_len=longest).fits
    assert not _plan(GEMMA3_27B, dtype="fp8", max_model_len=longest + 16).fits


def test_every_layer_sliding_or_the_v0_engine_is_sized_as_full_attention():
    mistral = {**DENSE, "sliding_window": 4096}
    assert _plan(mistral).local is None
    assert _plan(GEMMA3_27B, dtype="fp8", engine="v0", max_model_len=16384).local is None


def test_a_running_sequence_holds_its_context_and_the_window_in_the_sliding_groups():
    plan = _plan(GEMMA3_27B, dtype="fp8")
    model = model_from_hf_config(GEMMA3_27B)
    dep = Deployment(model=model, gpu=find_gpu("L20"), dtype="fp8", max_model_len=32768)
    engine = InstanceEngine(dep)
    engine.submit("long", 0.0, 8000, 400)
    engine.advance(5.0)  # prefilled, decoding
    assert engine.num_running == 1
    local = plan.local
    held = engine.kv_usage * plan.kv_context_tokens
    # the context so far (8,000 prompt tokens and some output) plus six sliding groups' 1,040-token windows
    window = local.kv_ratio * local.window_tokens
    assert 8000 + window < held < 8400 + window + 16


def test_long_prompts_batch_more_and_decode_faster_under_the_hybrid_manager():
    def served(version):
        dep = Deployment(
            model=model_from_hf_config(GEMMA3_27B),
            gpu=find_gpu("H20"),
            max_model_len=32768,
            vllm_version=version,
        )
        plan = plan_memory(dep)
        return capacity_estimate(plan, perf_for(dep, plan), 16000, 400)

    (rate_hybrid, batch_hybrid), (rate_full, batch_full) = served(None), served("0.9.2")
    assert batch_hybrid > 2 * batch_full
    assert rate_hybrid > rate_full


GPT_OSS_20B_MXFP4 = {
    **GPT_OSS_20B,
    "quantization_config": {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "lm_head"],
    },
}


def test_an_mxfp4_checkpoint_holds_its_experts_in_four_bits_and_the_rest_in_sixteen():
    model = model_from_hf_config(GPT_OSS_20B_MXFP4)
    assert model.quantization == "mxfp4"
    weights = weight_bytes_per_rank(model, "mxfp4", 1)
    dense = (model.linear_params - model.expert_params + model.embedding_params + model.norm_params) * 2.0
    assert weights == pytest.approx(model.expert_params * (4 + 8 / 32) / 8 + dense)
    # OpenAI's model card gives gpt-oss-20b's checkpoint as 12.8 GiB
    assert weights / GIB == pytest.approx(12.8, rel=0.02)


def test_an_mxfp4_model_is_served_from_its_own_checkpoint_on_ampere_and_later():
    model = model_from_hf_config(GPT_OSS_20B_MXFP4, name="gpt-oss-20b")
    dep = Deployment(model=model, gpu=find_gpu("A10"), max_model_len=32768)
    plan = plan_memory(dep)
    assert plan.fits and plan.dtype == "mxfp4"
    assert any("MXFP4 weights: the step time rests on the generic" in w for w in plan.warnings)
    args = vllm_args(dep, plan)
    assert "quantization" not in args and "dtype" not in args  # the checkpoint's config says mxfp4
    with pytest.raises(SizingInputError, match="compute capability 8.0"):
        plan_memory(dep.with_(gpu=find_gpu("T4")))


@pytest.mark.parametrize("dtype", ["bf16", "fp8", "awq"])
def test_an_mxfp4_checkpoint_is_not_sized_in_another_format(dtype):
    model = model_from_hf_config(GPT_OSS_20B_MXFP4)
    with pytest.raises(SizingInputError, match="checkpoint is MXFP4"):
        plan_memory(Deployment(model=model, gpu=find_gpu("H20"), dtype=dtype, max_model_len=8192))


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (DENSE, "needs an MXFP4 checkpoint"),  # --dtype mxfp4 on a 16-bit model
        ({**DENSE, "quantization_config": {"quant_method": "mxfp4"}}, "MoE models"),
    ],
)
def test_mxfp4_where_there_is_no_moe_checkpoint_in_it_is_refused(config, match):
    with pytest.raises(SizingInputError, match=match):
        plan_memory(Deployment(model=model_from_hf_config(config), gpu=find_gpu("L20"), dtype="mxfp4"))


def test_the_catalogs_gpt_oss_models_are_mxfp4_with_alternating_windows():
    from sizing import find_model

    big = find_model("openai/gpt-oss-120b")
    assert big.name == "gpt-oss-120b" and big.quantization == "mxfp4"
    assert (big.sliding_window, big.sliding_layers) == (128, big.layers // 2)
    # OpenAI's model card: the 120b checkpoint is 60.8 GiB, so it fits one 80 GB GPU
    assert weight_bytes_per_rank(big, "mxfp4", 1) / GIB == pytest.approx(60.8, rel=0.02)
    plan = plan_memory(Deployment(model=big, gpu=find_gpu("A100-80G"), max_model_len=32768))
    assert plan.fits and plan.local is not None and plan.local.group_size == 18


# Qwen3-Next-80B-A3B's config.json (Qwen/Qwen3-Next-80B-A3B-Instruct): Gated DeltaNet linear attention on
# three layers in four, full attention on every fourth
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "torch_dtype": "bfloat16",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "intermediate_size": 5120,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "vocab_size": 151936,
    "max_position_embeddings": 262144,
    "full_attention_interval": 4,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
}


def test_a_gated_deltanet_hybrid_has_its_linear_layers_and_its_published_size():
    model = model_from_hf_config(QWEN3_NEXT)
    listed = model_from_hf_config(
        {
            **QWEN3_NEXT,
            "layer_types": ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(48)],
        }
    )
    assert model.linear_layers == listed.linear_layers == 36
    # the model card: 80B parameters in total, 3B activated (its multi-token-prediction layer left out)
    assert model.params / 1e9 == pytest.approx(80, rel=0.015)
    assert model.active_linear_params / 1e9 == pytest.approx(3, rel=0.1)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"full_attention_interval": 0}, "full_attention_interval' must be at least 1"),
        ({"full_attention_interval": None}, "needs layer_types or full_attention_interval"),
        ({"layer_types": "linear"}, "layer_types"),
    ],
)
def test_a_linear_hybrid_whose_layers_cannot_be_told_apart_is_refused(change, match):
    with pytest.raises(SizingInputError, match=match):
        model_from_hf_config({**QWEN3_NEXT, **change})


@pytest.mark.parametrize("tp", [2, 4])
def test_linear_attention_state_sets_the_block_size_and_takes_one_block_a_sequence(tp):
    plan = _plan(QWEN3_NEXT, gpu=find_gpu("H20"), tp=tp, max_model_len=65536)
    local = plan.local
    assert local is not None and local.kind == "linear"
    token = 2 * max(1, 2 // tp) * 256 * 2  # one full-attention layer's K and V on a rank, bf16, one token
    conv = (2 * 16 * 128 + 32 * 128) // tp * 3  # the convolution's last kernel - 1 inputs
    state = 2 * (conv + 32 // tp * 128 * 128)  # and the delta rule's matrix per value head
    block = 16 * math.ceil(state / (16 * token))
    assert local.block_size == block
    assert (local.group_size, local.full_groups, local.local_groups) == (12, 1, 3)
    blocks = math.floor(plan.kv_cache_gib * GIB / (block * token * 12))
    assert plan.kv_cache_blocks == blocks
    assert plan.max_concurrency == pytest.approx(blocks / (math.ceil(65536 / block) + 3))
    assert any("linear attention on 36 of 48 layers" in w for w in plan.warnings)


def test_a_linear_hybrid_under_v0_is_sized_as_full_attention_and_says_so():
    plan = _plan(QWEN3_NEXT, gpu=find_gpu("H20"), tp=2, max_model_len=16384, engine="v0")
    assert plan.local is None
    assert any("linear attention on 36 of 48 layers is sized as full attention" in w for w in plan.warnings)


def test_qwen3_next_runs_at_vllms_544_token_blocks_on_one_gpu():
    dep = Deployment(model=model_from_hf_config(QWEN3_NEXT), gpu=find_gpu("H20"), tp=1)
    assert hybrid_block_size(dep) == 544  # vLLM logs "Setting attention block size to 544 tokens"


def test_a_sequence_of_a_linear_hybrid_holds_its_context_and_three_state_blocks():
    dep = Deployment(model=model_from_hf_config(QWEN3_NEXT), gpu=find_gpu("H20"), tp=2, max_model_len=65536)
    plan = plan_memory(dep)
    engine = InstanceEngine(dep)
    engine.submit("short", 0.0, 200, 400)  # a short one still holds a whole state block per linear group
    engine.advance(0.5)
    assert engine.num_running == 1
    held = engine.kv_usage * plan.kv_context_tokens
    states = 3 * plan.local.block_size
    assert 200 + states < held < 600 + states + plan.local.block_size


def test_other_state_space_hybrids_are_sized_as_attention_with_a_warning():
    jamba_like = {**DENSE, "layers_block_type": ["mamba", "attention"] * 14, "mamba_d_state": 16}
    plan = _plan(jamba_like, max_model_len=8192)
    assert plan.local is None
    assert any(
        "state-space (Mamba), lightning-attention or Kimi Delta Attention layers are not modelled" in w
        for w in plan.warnings
    )
    assert not any("state-space" in w for w in _plan(DENSE, max_model_len=8192).warnings)
    # lightning attention on every layer, no softmax layer to hold the context: still sized as attention
    # (MiniMax-Text-01's seven lightning layers in eight are modelled: tests/sizing/test_moe_families.py)
    lightning_only = {**DENSE, "attn_type_list": [0] * DENSE["num_hidden_layers"]}
    assert any("lightning-attention" in w for w in _plan(lightning_only, max_model_len=8192).warnings)


def test_the_catalogs_qwen3_next_is_the_same_shape_as_its_config():
    from sizing import find_model

    catalog = find_model("Qwen/Qwen3-Next-80B-A3B-Instruct")
    config = model_from_hf_config(QWEN3_NEXT, name=catalog.name)
    assert catalog.params == config.params and catalog.linear_layers == config.linear_layers
    dep = Deployment(model=catalog, gpu=find_gpu("H20"), tp=2, max_model_len=65536)
    assert plan_memory(dep).local == plan_memory(dep.with_(model=config)).local


def test_the_simulated_world_and_the_capacity_test_read_a_hybrids_kv_as_fleet_size_does():
    from fleet.sim.engine import make_engine_factory, resolve_hardware
    from sizing import find_model
    from sizing.capacity import capacity_rps

    hw = resolve_hardware("gpt-oss-20b", "ecs.gn7i-c8g1.2xlarge")
    engine = make_engine_factory(hw)(0.0, 64)
    dep = Deployment(
        model=find_model("gpt-oss-20b"), gpu=find_gpu("A10"), tp=1, max_model_len=hw.max_model_len
    )
    plan = plan_memory(dep)
    assert engine.perf == perf_for(dep, plan)  # the full-attention layers' KV per context token
    assert engine.perf.kv_bytes_per_token == pytest.approx(plan.kv_bytes_per_token / 2)
    # the capacity test runs the same engine: at long prompts it serves what the hybrid's reads allow
    full = dep.with_(vllm_version="0.9.2")  # every layer sized and read as full attention
    assert capacity_rps(dep, 6000, 300, 3000, num_requests=300) > capacity_rps(
        full, 6000, 300, 3000, num_requests=300
    )


def test_the_catalogs_gemma_3_is_the_same_shape_as_its_config():
    from sizing import find_model

    catalog = find_model("google/gemma-3-27b-it")
    vision = {  # its SigLIP tower, as google/gemma-3-27b-it's vision_config gives it
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "patch_size": 14,
        "image_size": 896,
    }
    config = model_from_hf_config(
        {**GEMMA3_27B, "tie_word_embeddings": True, "vision_config": vision}, name=catalog.name
    )
    assert catalog.params == config.params and catalog.vision_params == config.vision_params
    assert (catalog.sliding_window, catalog.sliding_layers) == (config.sliding_window, config.sliding_layers)
    # the card's 27.4B: the language model and its vision encoder
    assert (catalog.params + catalog.vision_params) / 1e9 == pytest.approx(27.4, rel=0.01)
