"""MoE families whose config.json names its mixture in its own words (ERNIE 4.5, Hunyuan, MiniMax):
parameter counts by hand from the config's fields, against the model cards, and `fleet size --config`."""

from __future__ import annotations

import json

import pytest

from fleet.cli import main
from sizing import Deployment, SizingInputError, find_gpu, model_from_hf_config, plan_memory
from sizing.memory import hybrid_block_size, kv_bytes_per_token, linear_state_bytes

# baidu/ERNIE-4.5-300B-A47B-PT config.json: experts on layers 3 to 53, none shared
ERNIE_300B = {
    "architectures": ["Ernie4_5_MoeForCausalLM"],
    "model_type": "ernie4_5_moe",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "max_position_embeddings": 131072,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 54,
    "vocab_size": 103424,
    "moe_num_experts": 64,
    "moe_k": 8,
    "moe_intermediate_size": 3584,
    "moe_layer_start_index": 3,
    "moe_layer_end_index": 53,
    "moe_layer_interval": 1,
    "moe_num_shared_experts": 0,
    "tie_word_embeddings": False,
    "use_bias": False,
    "torch_dtype": "bfloat16",
}
# baidu/ERNIE-4.5-21B-A3B-PT: the first layer dense, two shared experts, tied embeddings, no end index
ERNIE_21B = {
    **ERNIE_300B,
    "hidden_size": 2560,
    "intermediate_size": 12288,
    "num_attention_heads": 20,
    "num_key_value_heads": 4,
    "num_hidden_layers": 28,
    "moe_k": 6,
    "moe_intermediate_size": 1536,
    "moe_layer_start_index": 1,
    "moe_layer_end_index": None,
    "moe_num_shared_experts": 2,
    "tie_word_embeddings": True,
}
# tencent/Hunyuan-A13B-Instruct: the MoE fields listed once per layer, one shared MLP beside 64 experts
HUNYUAN_A13B = {
    "architectures": ["HunYuanMoEV1ForCausalLM"],
    "model_type": "hunyuan_v1_moe",
    "hidden_size": 4096,
    "intermediate_size": 3072,
    "attention_head_dim": 128,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 128167,
    "num_experts": 64,
    "moe_topk": [8] * 32,
    "moe_intermediate_size": [3072] * 32,
    "num_shared_expert": [1] * 32,
    "use_mixed_mlp_moe": True,
    "use_cla": False,
    "use_qk_norm": True,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
# MiniMaxAI/MiniMax-M2: full attention on all 62 layers (attn_type_list all 1), 256 experts, none shared
MINIMAX_M2 = {
    "architectures": ["MiniMaxM2ForCausalLM"],
    "model_type": "minimax_m2",
    "hidden_size": 3072,
    "head_dim": 128,
    "intermediate_size": 1536,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    "num_hidden_layers": 62,
    "num_local_experts": 256,
    "num_experts_per_tok": 8,
    "shared_intermediate_size": 0,
    "attn_type_list": [1] * 62,
    "max_position_embeddings": 196608,
    "vocab_size": 200064,
    "rotary_dim": 64,
    "use_qk_norm": True,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "fmt": "float8_e4m3fn"},
}


def _attention(hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    return 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim


def _by_hand(cfg: dict, layers_moe: int, shared: int, topk: int, heads_dim: int) -> tuple[int, int]:
    """(total, active without embeddings) of a GQA MoE config: attention and norms on every layer, a dense
    SwiGLU MLP on the others, a router, ``shared`` wide shared MLP and the experts on ``layers_moe``."""
    h, layers, experts = cfg["hidden_size"], cfg["num_hidden_layers"], cfg.get("moe_num_experts") or 0
    experts = experts or cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts")
    width = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]  # MiniMax: the experts' width
    width = width[0] if isinstance(width, list) else width
    attention = layers * _attention(h, cfg["num_attention_heads"], cfg["num_key_value_heads"], heads_dim)
    dense = (layers - layers_moe) * 3 * h * cfg["intermediate_size"]
    always = layers_moe * (h * experts + 3 * h * shared)
    routed = layers_moe * experts * 3 * h * width
    embed = cfg["vocab_size"] * h * (1 if cfg["tie_word_embeddings"] else 2)
    norms = (2 * layers + 1) * h
    active = attention + dense + always + layers_moe * topk * 3 * h * width
    return attention + dense + always + routed + embed + norms, active


@pytest.mark.parametrize(
    ("config", "layers_moe", "shared", "topk", "total_b", "active_b"),
    [
        # the cards: 300B total, 47B activated; 21B and 3B
        (ERNIE_300B, 51, 0, 8, 300.0, 47.0),
        (ERNIE_21B, 27, 2 * 1536, 6, 21.8, 3.0),
        # 80B total, 13B active (one shared MLP of intermediate_size beside 8 of 64 experts)
        (HUNYUAN_A13B, 32, 3072, 8, 80.0, 13.0),
        # 230B total, 10B activated
        (MINIMAX_M2, 62, 0, 8, 230.0, 10.0),
    ],
)
def test_moe_configs_in_their_own_words_count_the_published_parameters(
    config, layers_moe, shared, topk, total_b, active_b
):
    model = model_from_hf_config(config, "moe")
    head_dim = config.get("head_dim") or config.get("attention_head_dim") or 128
    total, active = _by_hand(config, layers_moe, shared, topk, head_dim)
    assert model.params == total and model.active_linear_params == active
    assert model.params / 1e9 == pytest.approx(total_b, rel=0.02)
    # the cards count the lm_head a token multiplies, or not (MiniMax); within 10 % either way
    assert model.active_linear_params / 1e9 == pytest.approx(active_b, rel=0.10)


def test_a_per_layer_list_whose_layers_differ_is_refused_naming_the_field():
    with pytest.raises(SizingInputError, match="'moe_topk' differs between layers"):
        model_from_hf_config({**HUNYUAN_A13B, "moe_topk": [8] * 31 + [4]}, "bad")
    with pytest.raises(SizingInputError, match="'use_cla'"):
        model_from_hf_config({**HUNYUAN_A13B, "use_cla": True}, "bad")


def test_minimax_m2_caches_keys_and_values_per_kv_head_on_every_layer():
    model = model_from_hf_config(MINIMAX_M2, "m2")
    assert not model.state_space and model.quantization == "fp8"
    assert kv_bytes_per_token(model, 1, "auto", "fp8") == 2 * 62 * 8 * 128 * 2


@pytest.mark.parametrize("config", [ERNIE_21B, HUNYUAN_A13B, MINIMAX_M2])
def test_their_config_files_are_sized_not_refused(config, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code = main(["size", "--config", str(path), "--gpu", "H20", "--tp", "4", "--max-model-len", "8192"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "Traceback" not in out.err and "not modelled" not in out.out


# MiniMaxAI/MiniMax-Text-01 config.json: lightning attention on seven layers in eight (attn_type_list 0),
# softmax attention on the eighth (1); 32 experts, two a token. MiniMax-M1 has the same shape.
MINIMAX_TEXT_01 = {
    "architectures": ["MiniMaxText01ForCausalLM"],
    "model_type": "minimax_text_01",
    "hidden_size": 6144,
    "head_dim": 128,
    "intermediate_size": 9216,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 80,
    "num_local_experts": 32,
    "num_experts_per_tok": 2,
    "shared_intermediate_size": 0,
    "attn_type_list": [0, 0, 0, 0, 0, 0, 0, 1] * 10,
    "max_position_embeddings": 10240000,
    "vocab_size": 200064,
    "rotary_dim": 64,
    "postnorm": True,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def test_minimax_text_01_counts_its_lightning_layers_and_the_published_parameters():
    model = model_from_hf_config(MINIMAX_TEXT_01, "text01")
    h, width = 6144, 64 * 128
    # a lightning layer: qkv_proj (3 x 64 heads x 128), output_gate and out_proj, the norm over the heads
    lightning = 5 * h * width + width
    softmax = 2 * h * width + 2 * h * 8 * 128
    experts = 32 * 3 * h * 9216
    total = 70 * lightning + 10 * softmax + 80 * (h * 32 + experts) + 2 * 200064 * h + (2 * 80 + 1) * h
    assert model.params == total
    assert model.linear_layers == 70 and model.full_attention_layers == 10 and not model.state_space
    # the card: 456B total, 45.9B activated per token
    assert model.params / 1e9 == pytest.approx(456.0, rel=0.01)
    active = 70 * lightning + 10 * softmax + 80 * (h * 32 + 2 * 3 * h * 9216)
    assert model.active_linear_params == active
    assert active / 1e9 == pytest.approx(45.9, rel=0.01)


@pytest.mark.parametrize("tp", [1, 8])
def test_a_lightning_layer_keeps_a_head_dim_square_state_per_head(tp):
    from sizing.memory import state_bytes

    model = model_from_hf_config(MINIMAX_TEXT_01, "text01")
    # vLLM's linear_attention_state_shape: (heads / TP, head_dim, head_dim), 16-bit, no convolution
    assert state_bytes(model, tp) == 64 // tp * 128 * 128 * 2


def test_minimax_text_01_is_sized_with_its_hybrid_cache_not_as_attention(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MINIMAX_TEXT_01))
    argv = ["size", "--config", str(path), "--gpu", "H20", "--tp", "8", "--dtype", "fp8"]
    assert main([*argv, "--max-model-len", "131072", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["candidates"][0]
    assert best["fits"]
    assert any("linear attention on 70 of 80 layers" in w for w in best["warnings"])
    assert not any("not modelled" in w for w in best["warnings"])


def test_an_attn_type_list_that_is_not_one_flag_a_layer_is_refused_naming_it():
    with pytest.raises(SizingInputError, match="'attn_type_list'"):
        model_from_hf_config({**MINIMAX_TEXT_01, "attn_type_list": [0, 1] * 10}, "bad")


# moonshotai/Kimi-Linear-48B-A3B-Instruct config.json: MLA on 7 layers, Kimi Delta Attention on 20
# (1-based in linear_attn_config), 8 of 256 experts a token and one shared (Kimi's own field names)
KIMI_LINEAR = {
    "architectures": ["KimiLinearForCausalLM"],
    "model_type": "kimi_linear",
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "moe_intermediate_size": 1024,
    "num_experts": 256,
    "num_experts_per_token": 8,
    "num_shared_experts": 1,
    "first_k_dense_replace": 1,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "num_hidden_layers": 27,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "head_dim": 72,
    "vocab_size": 163840,
    "max_position_embeddings": 1048576,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "linear_attn_config": {
        "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
        "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
        "head_dim": 128,
        "num_heads": 32,
        "short_conv_kernel_size": 4,
    },
}


def test_kimi_linear_routes_its_published_top_k_and_counts_its_kda_layers():
    model = model_from_hf_config(KIMI_LINEAR, "kimi")
    assert (model.experts_per_token, model.shared_expert_intermediate) == (8, 1024)
    # active beyond attention: the dense first layer, then 26 layers of router, shared and 8 routed experts
    h = 2304
    mlp = 3 * h * 9216 + 26 * (h * 256 + 3 * h * 1024 + 8 * 3 * h * 1024)
    assert model.active_linear_params - model._attention_params == mlp
    assert (model.linear_layers, model.full_attention_layers, model.kda) == (20, 7, True)
    assert not model.state_space and not model.lightning
    # a KDA layer as vLLM's KimiDeltaAttention holds it: q/k/v/o (32 heads of 128), three 4-tap short
    # convolutions, f_a/f_b and g_a/g_b gates through head_dim, dt_bias per channel, b_proj and A_log per
    # head, the output norm
    width, dim, heads = 32 * 128, 128, 32
    kda = 4 * h * width + 3 * width * 4 + 2 * (h * dim + dim * width) + width + h * heads + heads + dim
    assert model.linear_attention_params_per_layer == kda
    mla = model.attention_params_per_layer
    assert model._attention_params == 7 * mla + 20 * kda
    # the card says 48B total, 3B activated: the routed experts alone are 26 x 256 x 3 x 2304 x 1024 = 47.1B
    # and the embeddings 0.75B, so its 48B is a round figure; the fields sum to 49.1B
    assert model.params / 1e9 == pytest.approx(49.1, abs=0.05)
    assert (model.active_linear_params + model.embedding_params) / 1e9 == pytest.approx(3.0, rel=0.20)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_a_kda_layers_state_is_vllms_shape_with_an_fp32_recurrent_state(tp):
    model = model_from_hf_config(KIMI_LINEAR, "kimi")
    # kda_state_shape: q, k and v convolutions of 32 x 128 channels keep kernel - 1 = 3 inputs each (16-bit);
    # kda_state_dtype: the 32 heads' 128 x 128 recurrent state in fp32
    conv = 3 * (32 * 128 // tp) * 3 * 2
    recurrent = (32 // tp) * 128 * 128 * 4
    assert linear_state_bytes(model, tp) == conv + recurrent


def test_kimi_linear_is_sized_with_its_hybrid_cache_not_as_attention(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(KIMI_LINEAR))
    argv = ["size", "--config", str(path), "--gpu", "H20", "--tp", "2", "--max-model-len", "65536"]
    assert main([*argv, "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["candidates"][0]
    assert best["fits"]
    assert any("linear attention on 20 of 27 layers" in w for w in best["warnings"])
    assert not any("not modelled" in w for w in best["warnings"])
    model = model_from_hf_config(KIMI_LINEAR, "kimi")
    dep = Deployment(model=model, gpu=find_gpu("H20"), tp=2, max_model_len=65536)
    # the attention block grows until one MLA layer's page (576 16-bit values a token) holds a KDA state
    assert hybrid_block_size(dep) == -(-linear_state_bytes(model, 2) // (16 * 576 * 2)) * 16
    plan = plan_memory(dep)
    assert plan.local is not None and plan.local.kind == "linear" and plan.local.full_layers == 7


def test_qwen3_omni_is_sized_from_its_thinker():
    # Qwen/Qwen3-Omni-30B-A3B-Instruct: vLLM serves the thinker, whose language model is Qwen3-30B-A3B's MoE
    text = {
        "hidden_size": 2048,
        "intermediate_size": 768,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "num_hidden_layers": 48,
        "vocab_size": 152064,
        "max_position_embeddings": 65536,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    }
    omni = {
        "architectures": ["Qwen3OmniMoeForConditionalGeneration"],
        "model_type": "qwen3_omni_moe",
        "thinker_config": {"model_type": "qwen3_omni_moe_thinker", "text_config": text},
        "talker_config": {"text_config": {"num_hidden_layers": 20}},
        "torch_dtype": "bfloat16",
    }
    model = model_from_hf_config(omni, "omni")
    assert (model.layers, model.experts, model.max_position) == (48, 128, 65536)
    h = 2048
    per_layer = 2 * h * 32 * 128 + 2 * h * 4 * 128 + h * 128 + 128 * 3 * h * 768
    assert model.params == 48 * per_layer + 2 * 152064 * h + (2 * 48 + 1) * h


# Qwen/Qwen3-Omni-30B-A3B-Instruct's thinker_config audio_config (the AuT encoder) and vision_config
QWEN3_OMNI_AUDIO = {
    "model_type": "qwen3_omni_moe_audio_encoder",
    "d_model": 1280,
    "encoder_layers": 32,
    "encoder_attention_heads": 20,
    "encoder_ffn_dim": 5120,
    "downsample_hidden_size": 480,
    "num_mel_bins": 128,
    "output_dim": 2048,
}
QWEN3_OMNI_VISION = {
    "model_type": "qwen3_omni_moe_vision_encoder",
    "depth": 27,
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "hidden_act": "gelu_pytorch_tanh",
    "num_heads": 16,
    "in_channels": 3,
    "patch_size": 16,
    "temporal_patch_size": 2,
    "spatial_merge_size": 2,
    "out_hidden_size": 2048,
    "num_position_embeddings": 2304,
    "deepstack_visual_indexes": [8, 16, 24],
}


def test_qwen3_omni_counts_its_audio_and_vision_encoders_in_16_bit():
    from sizing.memory import weight_bytes_per_rank

    text = {"hidden_size": 2048, "intermediate_size": 768, "moe_intermediate_size": 768, "num_experts": 128}
    text |= {"num_experts_per_tok": 8, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128}
    text |= {"num_hidden_layers": 48, "vocab_size": 152064, "max_position_embeddings": 65536}
    thinker = {"text_config": text, "audio_config": QWEN3_OMNI_AUDIO, "vision_config": QWEN3_OMNI_VISION}
    omni = {"model_type": "qwen3_omni_moe", "thinker_config": thinker, "torch_dtype": "bfloat16"}
    model = model_from_hf_config(omni, "omni")
    bare = model_from_hf_config({**omni, "thinker_config": {"text_config": text}}, "bare")
    assert model.params == bare.params  # the language model: what a decode step reads
    # the audio tower as transformers lists its modules: 32 layers of q/k/v/out (with biases), fc1/fc2 and two
    # LayerNorms; ln_post; conv2d1-3 (3x3, 480 channels); conv_out from 480 x 16 mel bins; proj1 and proj2
    d, ffn, c = 1280, 5120, 480
    layer = 4 * (d * d + d) + (d * ffn + ffn) + (ffn * d + d) + 2 * 2 * d
    convs = (9 * c + c) + 2 * (9 * c * c + c) + c * 16 * d
    assert model.audio_params == 32 * layer + 2 * d + convs + (d * d + d) + (d * 2048 + 2048)
    assert model.audio_params / 1e9 == pytest.approx(0.65, abs=0.01)
    # the vision tower: 27 blocks (qkv, proj, fc1, fc2 with biases, two LayerNorms), the Conv3d patch
    # embedding, a 2,304-entry position table, the merger and three DeepStack mergers (LayerNorm, 4608 -> 4608
    # -> 2048); the shape leaves the biases and norms out, under 0.2 % of it
    w, mlp, m = 1152, 4304, 4 * 1152
    block = (w * 3 * w + 3 * w) + (w * w + w) + (w * mlp + mlp) + (mlp * w + w) + 4 * w
    merger = 2 * m + (m * m + m) + (m * 2048 + 2048)
    listed = 27 * block + 3 * 2 * 16 * 16 * w + 2304 * w + 4 * merger
    assert model.vision_params == pytest.approx(listed, rel=0.002)
    assert model.vision_params / 1e9 == pytest.approx(0.54, abs=0.01)
    extra = weight_bytes_per_rank(model, "bf16", 2) - weight_bytes_per_rank(bare, "bf16", 2)
    assert extra == pytest.approx((model.audio_params + model.vision_params) * 2.0 / 2)


def test_gemma_3n_is_refused_naming_what_is_not_modelled():
    gemma3n = {
        "model_type": "gemma3n",
        "text_config": {
            "model_type": "gemma3n_text",
            "hidden_size": 2048,
            "intermediate_size": [16384] * 35,
            "num_hidden_layers": 35,
            "num_attention_heads": 8,
            "vocab_size": 262400,
            "max_position_embeddings": 32768,
        },
    }
    with pytest.raises(
        SizingInputError, match="model_type 'gemma3n_text' is not modelled: .*per-layer embed"
    ):
        model_from_hf_config(gemma3n, "gemma3n")


def test_a_list_where_a_count_belongs_is_refused_in_one_short_line():
    with pytest.raises(SizingInputError) as err:
        model_from_hf_config({**ERNIE_300B, "intermediate_size": [28672] * 54}, "bad")
    assert "'intermediate_size' must be a positive integer" in str(err.value) and len(str(err.value)) < 160


def test_an_absurd_layer_count_is_refused_at_once_not_walked_layer_by_layer():
    with pytest.raises(SizingInputError, match="gives 1000000000000 layers; at most 10000"):
        model_from_hf_config({**ERNIE_300B, "num_hidden_layers": 10**12}, "typo")


# zai-org/GLM-4.5 config.json (GLM-4.6: the same with max_position_embeddings 202752): 160 experts and one
# shared on all but the first three layers, query/key/value biases, half the head rotated
GLM_45 = {
    "architectures": ["Glm4MoeForCausalLM"],
    "model_type": "glm4_moe",
    "attention_bias": True,
    "first_k_dense_replace": 3,
    "head_dim": 128,
    "hidden_size": 5120,
    "intermediate_size": 12288,
    "max_position_embeddings": 131072,
    "moe_intermediate_size": 1536,
    "n_routed_experts": 160,
    "n_shared_experts": 1,
    "num_attention_heads": 96,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 92,
    "num_key_value_heads": 8,
    "num_nextn_predict_layers": 1,
    "partial_rotary_factor": 0.5,
    "use_qk_norm": True,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 151552,
}


@pytest.mark.parametrize("context", [131072, 202752])
def test_glm_45_and_46_count_the_published_parameters_and_cache_gqa_keys(context):
    model = model_from_hf_config({**GLM_45, "max_position_embeddings": context}, "glm")
    h = 5120
    attention = 2 * h * 96 * 128 + 2 * h * 8 * 128 + (96 + 2 * 8) * 128  # q/k/v/o and the q/k/v biases
    total, active = _by_hand(GLM_45, 89, 1536, 8, 128)
    bias = 92 * (96 + 2 * 8) * 128
    assert model.params == total + bias and model.active_linear_params == active + bias
    assert model.attention_params_per_layer == attention and model.max_position == context
    # the card: 355B total, 32B active (its multi-token-prediction layer, which vLLM loads only to
    # speculate, left out here)
    assert model.params / 1e9 == pytest.approx(355.0, rel=0.02)
    assert model.active_linear_params / 1e9 == pytest.approx(32.0, rel=0.02)
    # partial rotary changes nothing in the cache: keys and values of 8 heads of 128 on all 92 layers
    assert kv_bytes_per_token(model, 1, "auto", "bf16") == 2 * 92 * 8 * 128 * 2
