"""Multi-head latent attention (DeepSeek V2/V3/R1) and MoE models whose leading layers are dense: shapes from
config.json, parameter counts, the KV cache vLLM's MLA layout gives, and `fleet size` end to end."""

from __future__ import annotations

import json

import pytest

from fleet.cli import main
from sizing import SizingInputError, find_model, model_from_hf_config
from sizing.memory import kv_bytes_per_token

# deepseek-ai/DeepSeek-V3 config.json, the fields the calculator reads
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "num_attention_heads": 128,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 163840,
    "vocab_size": 129280,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}
# deepseek-ai/DeepSeek-V2-Lite-Chat: queries not compressed (q_lora_rank null), one dense layer
DEEPSEEK_V2_LITE = {
    **{k: v for k, v in DEEPSEEK_V3.items() if k != "quantization_config"},
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_experts_per_tok": 6,
    "first_k_dense_replace": 1,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_hidden_layers": 27,
    "q_lora_rank": None,
    "vocab_size": 102400,
}


@pytest.mark.parametrize(
    ("config", "total_b", "active_b"),
    # the model cards: 671B total, 37B activated per token; 15.7B and 2.4B (embeddings included there)
    [(DEEPSEEK_V3, 671.0, 37.0), (DEEPSEEK_V2_LITE, 15.7, 2.4)],
)
def test_deepseek_configs_count_their_published_parameters(config, total_b, active_b):
    model = model_from_hf_config(config, "deepseek")
    assert model.mla and model.params / 1e9 == pytest.approx(total_b, rel=0.01)
    active = (model.active_linear_params + model.hidden * model.vocab) / 1e9  # + the lm_head it multiplies
    assert active == pytest.approx(active_b, rel=0.06)


def test_the_catalog_rows_are_the_config_shapes():
    from_config = model_from_hf_config(DEEPSEEK_V3, "v3")
    for name in ("DeepSeek-V3", "DeepSeek-R1"):
        row = find_model(name)
        assert (row.params, row.active_linear_params) == (
            from_config.params,
            from_config.active_linear_params,
        )
        assert row.quantization == "fp8" and row.hf_id == f"deepseek-ai/{name}" and row.head_dim == 192
    lite = find_model("DeepSeek-V2-Lite-Chat")
    assert lite.params == model_from_hf_config(DEEPSEEK_V2_LITE, "lite").params


@pytest.mark.parametrize("tp", [1, 8])
def test_the_mla_cache_is_one_latent_per_token_and_layer_whole_on_every_rank(tp):
    model = model_from_hf_config(DEEPSEEK_V3, "v3")
    assert kv_bytes_per_token(model, tp, "auto", "fp8") == 61 * (512 + 64) * 2
    assert kv_bytes_per_token(model, tp, "fp8", "fp8") == 61 * (512 + 64)
    # keys and values per head, as multi-head attention with these heads would cache: 2 x 128 x 192 a layer
    mha_config = {k: v for k, v in DEEPSEEK_V3.items() if k != "kv_lora_rank"}
    mha = model_from_hf_config({**mha_config, "head_dim": 192}, "mha")
    assert kv_bytes_per_token(mha, 1, "auto", "bf16") == 61 * 2 * 128 * 192 * 2


def test_a_dense_moe_without_leading_dense_layers_is_counted_as_before():
    # Mixtral: every layer routed, no shared expert; the catalog's reference count still holds
    mixtral = find_model("Mixtral-8x7B")
    assert mixtral.dense_layers == 0 and mixtral.moe_layers == mixtral.layers
    assert mixtral.params / 1e9 == pytest.approx(46.7, rel=0.01)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"qk_rope_head_dim": None}, "qk_rope_head_dim"),
        ({"v_head_dim": 0}, "'v_head_dim' must be a positive integer"),
        ({"first_k_dense_replace": 61}, "'first_k_dense_replace' must be an integer from 0 to 60, got 61"),
        ({"first_k_dense_replace": -1}, "'first_k_dense_replace' must be an integer from 0 to 60"),
    ],
)
def test_an_mla_config_missing_or_misstating_a_dimension_is_refused_naming_it(change, message):
    with pytest.raises(SizingInputError, match=message):
        model_from_hf_config({**DEEPSEEK_V3, **change}, "bad")


def test_fleet_size_sizes_deepseek_r1_on_eight_h20_with_the_latent_cache(capsys):
    argv = ["size", "--model", "DeepSeek-R1", "--instance-type", "ecs.gn8v-8x.48xlarge", "--tp", "8"]
    assert main([*argv, "--max-model-len", "32768", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["candidates"][0]
    assert best["fits"] and best["vllm_args"]["model"] == "deepseek-ai/DeepSeek-R1"
    per_token = 61 * (512 + 64) * 2
    blocks = int(best["kv_cache_gib"] * 2**30 // (16 * per_token))
    assert abs(best["kv_cache_tokens"] - 16 * blocks) <= 16
    assert any("MLA attention" in w and "fleet size calibrate --bench" in w for w in best["warnings"])


def test_deepseek_decodes_one_request_at_the_public_rate_not_at_the_bandwidth_bound(capsys):
    # about 30 tokens/s at one request on 8 x H20 (vllm#30832) and on H100s; the reads alone gave 3.3 ms
    argv = ["size", "--model", "DeepSeek-R1", "--instance-type", "ecs.gn8v-8x.48xlarge", "--tp", "8"]
    assert main([*argv, "--max-model-len", "32768", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["candidates"][0]
    assert 25.0 <= best["decode_tpot_ms"] <= 40.0


def test_a_deepseek_config_file_is_sized_not_refused(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DEEPSEEK_V2_LITE))
    assert main(["size", "--config", str(path), "--gpu", "A100-80G", "--max-model-len", "32768"]) == 0
    out = capsys.readouterr().out
    assert "MLA attention" in out and "not supported" not in out


# deepseek-ai/DeepSeek-V3.2-Exp config.json: DeepSeek-V3's shape with the lightning indexer of its sparse
# attention (64 heads of 128, each query attending to the top 2,048 tokens it scores)
DEEPSEEK_V32 = {
    **DEEPSEEK_V3,
    "architectures": ["DeepseekV32ForCausalLM"],
    "model_type": "deepseek_v32",
    "index_n_heads": 64,
    "index_head_dim": 128,
    "index_topk": 2048,
}


def test_deepseek_v32_counts_its_indexer_and_the_published_parameters():
    v3, v32 = model_from_hf_config(DEEPSEEK_V3, "v3"), model_from_hf_config(DEEPSEEK_V32, "v32")
    # per layer: wq_b (q_lora_rank -> 64 x 128), wk (hidden -> 128), the key's LayerNorm (weight and bias),
    # weights_proj (hidden -> 64), on each of the 61 layers
    indexer = 61 * (1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64)
    assert v32.params - v3.params == indexer
    assert v32.active_linear_params - v3.active_linear_params == indexer
    # the card's 685B holds the 14B multi-token-prediction layer, which vLLM loads only to speculate
    assert v32.params / 1e9 == pytest.approx(685.0 - 14.0, rel=0.01)


@pytest.mark.parametrize("tp", [1, 8])
def test_deepseek_v32_caches_the_indexer_key_beside_the_latent(tp):
    model = model_from_hf_config(DEEPSEEK_V32, "v32")
    indexer = 128 + 128 // 128 * 4  # FP8 values and one fp32 scale per 128, whatever the KV dtype
    assert kv_bytes_per_token(model, tp, "auto", "fp8") == 61 * ((512 + 64) * 2 + indexer)
    # FP8: vLLM's fp8_ds_mla record, the latent in FP8 with four fp32 scales and the rotary key in 16 bit
    assert kv_bytes_per_token(model, tp, "fp8", "fp8") == 61 * (512 + 4 * 4 + 64 * 2 + indexer)
    assert 512 + 4 * 4 + 64 * 2 == 656  # the record's size as vLLM's FlashMLA sparse backend states it


def test_a_deepseek_v32_config_file_is_sized_with_the_indexer_cache(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DEEPSEEK_V32))
    argv = ["size", "--config", str(path), "--instance-type", "ecs.gn8v-8x.48xlarge", "--tp", "8"]
    assert main([*argv, "--max-model-len", "16384", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["candidates"][0]
    per_token = 61 * ((512 + 64) * 2 + 132)
    blocks = int(best["kv_cache_gib"] * 2**30 // (16 * per_token))
    assert abs(best["kv_cache_tokens"] - 16 * blocks) <= 16
    assert any("lightning indexer" in w for w in best["warnings"])


def test_an_indexer_config_with_a_width_vllm_cannot_quantize_is_refused_naming_it():
    with pytest.raises(SizingInputError, match="'index_head_dim' must be a multiple of 128"):
        model_from_hf_config({**DEEPSEEK_V32, "index_head_dim": 96}, "bad")
    with pytest.raises(SizingInputError, match="'index_topk'"):
        model_from_hf_config({k: v for k, v in DEEPSEEK_V32.items() if k != "index_topk"}, "bad")


def test_the_catalogs_deepseek_v32_is_its_config_shape_with_the_indexer():
    row, from_config = find_model("DeepSeek-V3.2"), model_from_hf_config(DEEPSEEK_V32, "v32")
    assert row.name == "DeepSeek-V3.2-Exp" and row.hf_id == "deepseek-ai/DeepSeek-V3.2-Exp"
    assert (row.params, row.active_linear_params) == (from_config.params, from_config.active_linear_params)
    assert kv_bytes_per_token(row, 8, "fp8", "fp8") == kv_bytes_per_token(from_config, 8, "fp8", "fp8")


def test_deepseek_v32_is_impossible_below_hopper_and_the_search_says_why(capsys):
    from sizing import find_gpu
    from sizing.memory import Deployment, plan_memory

    model = model_from_hf_config(DEEPSEEK_V32, "v32")
    with pytest.raises(SizingInputError, match="sparse attention needs compute capability 9.0.*A100"):
        plan_memory(Deployment(model=model, gpu=find_gpu("A100-80G"), tp=8, max_model_len=8192))
    assert plan_memory(Deployment(model=model, gpu=find_gpu("H20"), tp=8, max_model_len=8192)).fits
    # the dense MLA of V3 still runs on an A100
    v3 = model_from_hf_config(DEEPSEEK_V3, "v3")
    plan_memory(Deployment(model=v3, gpu=find_gpu("A100-80G"), tp=8, max_model_len=8192))
    code = main(
        ["size", "--model", "DeepSeek-V3.2", "--gpu", "A100-80G", "--tp", "8", "--max-model-len", "8192"]
    )
    assert code == 2 and "compute capability 9.0" in capsys.readouterr().err


def _v32_on_h20(**kw):
    from sizing import Deployment, find_gpu

    base = dict(model=find_model("DeepSeek-V3.2"), gpu=find_gpu("H20"), tp=8, max_model_len=16384)
    base.update(kw)
    return Deployment(**base)


def test_deepseek_v32_decode_reads_the_top_k_latents_and_scans_only_the_indexer_keys_past_them():
    from sizing.perf import perf_model

    model, gpu = find_model("DeepSeek-V3.2"), _v32_on_h20().gpu
    perf = perf_model(model, gpu, 8, "fp8")
    index = 61 * (128 + 4)  # the indexer's FP8 key and its scale, every layer
    latent = 61 * (512 + 64) * 2
    assert perf.kv_bytes_per_token == index and perf.sparse_kv_bytes_per_token == latent
    # below top-k every token's latent is read; past it each step reads 2,048 latents and scans every key
    short = perf.decode_tpot_s(2048) - perf.decode_tpot_s(1024)
    assert short == pytest.approx(1024 * (index + latent) / perf.bandwidth_bps, rel=1e-6)
    long = perf.decode_tpot_s(65536) - perf.decode_tpot_s(32768)
    assert long == pytest.approx(32768 * index / perf.bandwidth_bps, rel=1e-6)
    # a batch of n: the knee is n x top-k in all, and each piece of the affine cost is the step's own
    for n, context in ((4, 4000.0), (4, 8192.0), (4, 50_000.0), (32, 1e6)):
        a, b = perf.decode_affine(n, context)
        assert a + b * context == pytest.approx(perf.decode_step_s(n, context), rel=1e-9)


def test_deepseek_v32_engine_jumps_across_the_top_k_knee_as_it_steps(monkeypatch):
    import random

    from sizing import InstanceEngine

    fast, slow = InstanceEngine(_v32_on_h20()), InstanceEngine(_v32_on_h20())
    monkeypatch.setattr(slow, "_try_jump", lambda until_s, done: False)
    for engine in (fast, slow):
        rng = random.Random(3)
        for i in range(12):  # contexts that start under 2,048 tokens and grow past it
            engine.submit(i, 0.2 * i, rng.randint(1500, 2000), rng.randint(600, 1500))
    a = sorted(fast.advance(1e6), key=lambda r: r.request_id)
    b = sorted(slow.advance(1e6), key=lambda r: r.request_id)
    assert len(a) == len(b) == 12
    for x, y in zip(a, b, strict=True):
        assert x.e2e_s == pytest.approx(y.e2e_s, rel=1e-6)
