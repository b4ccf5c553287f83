"""The shipped catalogs (GPUs, instance types, models, prices) and the lookups over them."""

from __future__ import annotations

import pytest

from sizing import (
    SizingInputError,
    find_gpu,
    find_instance,
    find_model,
    load_gpus,
    load_instances,
    load_models,
    model_from_hf_config,
    price_book,
)

REQUIRED_GPUS = [
    "T4",
    "V100-16G",
    "V100-32G",
    "A10",
    "A10G",
    "L4",
    "L20",
    "L40S",
    "A30",
    "A100-40G",
    "A100-80G",
    "A800",
    "H100",
    "H800",
    "H20",
    "RTX3090",
    "RTX4090",
]
REQUIRED_FAMILIES = [
    "gn6i",
    "gn6v",
    "gn6e",
    "gn7i",
    "gn7",
    "gn7e",
    "gn7s",
    "gn8is",
    "gn8v",
    "ebmgn7e",
    "ebmgn8v",
]


def test_every_required_gpu_is_in_the_catalog_with_a_source():
    gpus = load_gpus()
    for name in REQUIRED_GPUS:
        assert name in gpus
        assert gpus[name].source and gpus[name].visible_gib < gpus[name].memory_gb


def test_only_ampere_and_newer_support_bf16():
    assert not find_gpu("T4").supports_bf16 and not find_gpu("V100-32G").supports_bf16
    assert find_gpu("A10").supports_bf16 and find_gpu("H20").supports_bf16


def test_every_instance_family_is_present_and_every_type_names_a_catalog_gpu():
    instances = load_instances()
    families = {i.family for i in instances.values()}
    assert set(REQUIRED_FAMILIES) <= families
    gpus = load_gpus()
    assert all(i.gpu in gpus and i.gpus >= 1 for i in instances.values())


def test_instance_types_resolve_with_or_without_the_ecs_prefix():
    assert find_instance("gn7i-c8g1.2xlarge") is find_instance("ecs.gn7i-c8g1.2xlarge")
    assert find_instance("ecs.gn8v-8x.48xlarge").gpus == 8


@pytest.mark.parametrize("name", [m for m in load_models()])
def test_derived_parameter_counts_match_the_reference_table(name):
    model = load_models()[name]
    assert model.params / 1e9 == pytest.approx(model.params_b_reference, rel=0.01)


def test_moe_active_parameters_match_the_reference():
    assert find_model("Mixtral-8x7B").active_linear_params / 1e9 == pytest.approx(12.9 - 0.26, rel=0.02)


def test_instruct_and_hf_names_resolve_to_the_catalog_shape():
    assert find_model("Qwen/Qwen2.5-7B-Instruct").name == "Qwen2.5-7B"
    assert find_model("meta-llama/Llama-3.1-8B-Instruct").name == "Llama-3.1-8B"
    assert find_model("qwen2.5-7b").name == "Qwen2.5-7B"


def test_a_quantisation_suffix_sets_the_checkpoint_format():
    model = find_model("Qwen2.5-0.5B-Instruct-AWQ")
    assert model.name == "Qwen2.5-0.5B" and model.quantization == "awq"


def test_an_unknown_model_names_the_nearest_ones():
    with pytest.raises(SizingInputError, match=r"unknown model 'Qwen2.5-8B'; nearest: .*Qwen2\.5-"):
        find_model("Qwen2.5-8B")


def test_an_unknown_gpu_names_the_nearest_ones():
    with pytest.raises(SizingInputError, match="unknown GPU 'A101'; nearest: .*A10"):
        find_gpu("A101")


def test_gpu_aliases_are_case_and_punctuation_insensitive():
    assert find_gpu("rtx 4090").name == "RTX4090"
    assert find_gpu("a100_80gb").name == "A100-80G"


QWEN2_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("rope", "model_type", "context"),
    [
        # Qwen2.5's long-context recipe: YaRN x4 from 32,768 (vLLM's default max_model_len becomes 131,072)
        ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, "qwen2", 131072),
        ({"rope_type": "linear", "factor": 2.0}, "qwen2", 65536),
        ({"rope_type": "dynamic", "factor": 2.0}, "qwen2", 65536),
        ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, "qwen2", 32768),
        ({"rope_type": "longrope", "factor": 4.0}, "qwen2", 32768),
        ({"type": "mrope", "mrope_section": [16, 24, 24]}, "qwen2_vl", 32768),  # Qwen2-VL: no factor
        ({"rope_type": "linear", "factor": 8.0}, "gemma3_text", 32768),  # Gemma 3 states the scaled length
    ],
)
def test_rope_scaling_sets_the_context_limit_as_vllm_derives_it(rope, model_type, context):
    config = {**QWEN2_CONFIG, "model_type": model_type, "rope_scaling": rope}
    assert model_from_hf_config(config).max_position == context


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "linear", "factor": "x"},
        {"type": "yarn", "factor": 4, "original_max_position_embeddings": 0},
    ],
)
def test_a_malformed_rope_scaling_is_refused_in_one_line(rope):
    with pytest.raises(SizingInputError, match="rope_scaling"):
        model_from_hf_config({**QWEN2_CONFIG, "rope_scaling": rope}, name="cfg")


def test_a_hf_config_gives_the_same_shape_as_the_catalog():
    custom = model_from_hf_config(QWEN2_CONFIG, name="my-qwen")
    assert custom.params == find_model("Qwen2.5-7B").params
    assert custom.head_dim == 128 and custom.qkv_bias


def test_a_config_missing_a_field_is_refused_naming_it():
    bad = {k: v for k, v in QWEN2_CONFIG.items() if k != "num_hidden_layers"}
    with pytest.raises(SizingInputError, match="num_hidden_layers"):
        model_from_hf_config(bad)


def test_a_config_with_a_non_integer_field_is_refused():
    with pytest.raises(SizingInputError, match="hidden_size"):
        model_from_hf_config({**QWEN2_CONFIG, "hidden_size": "big"})


def test_a_config_that_is_not_an_object_is_refused():
    with pytest.raises(SizingInputError, match="JSON object"):
        model_from_hf_config([1, 2, 3])


def _ct(*weights):
    """A compressed-tensors quantization_config with one config group per (num_bits, type) of weights."""
    groups = {
        f"group_{i}": {"targets": ["Linear"], "weights": {"num_bits": b, "type": t}}
        for i, (b, t) in enumerate(weights)
    }
    return {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": groups}


@pytest.mark.parametrize(
    ("quant", "fmt"),
    [
        ({"quant_method": "awq", "bits": 4}, "awq"),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "gptq"),
        ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "int8"),  # was sized as 4-bit
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8"),
        ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8"),
        (_ct((4, "int")), "gptq"),  # W4A16 (Kimi-K2-Thinking's INT4): was sized as 8-bit
        (_ct((8, "int")), "int8"),  # W8A8
        (_ct((8, "float")), "fp8"),  # FP8 dynamic: needs FP8 hardware, not int8's
        ({"quant_method": "compressed-tensors"}, "int8"),  # no config groups: llm-compressor's W8A8 default
    ],
)
def test_a_quantized_config_sets_the_format_from_its_method_and_bits(quant, fmt):
    cfg = {**QWEN2_CONFIG, "quantization_config": quant}
    assert model_from_hf_config(cfg).quantization == fmt


@pytest.mark.parametrize(
    ("quant", "named"),
    [
        ({"quant_method": "gptq", "bits": 3}, "3-bit"),
        (_ct((4, "float")), "4-bit float"),  # NVFP4
        (_ct((4, "int"), (8, "float")), "4-bit int, 8-bit float"),
        ({"quant_method": "bitsandbytes"}, "'bitsandbytes'"),
        ("awq", "must be an object"),
        ({"bits": 4}, "quant_method"),
    ],
)
def test_a_quantization_that_is_not_modelled_is_refused_naming_it(quant, named):
    with pytest.raises(SizingInputError, match="cfg: .*") as err:
        model_from_hf_config({**QWEN2_CONFIG, "quantization_config": quant}, name="cfg")
    assert named in str(err.value)


# Qwen3-30B-A3B-FP8's config.json: 128 experts 768 wide, FP8 in 128 x 128 blocks
QWEN3_MOE_FP8 = {
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_hidden_layers": 48,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
        "activation_scheme": "dynamic",
    },
}


def _grouped(config, quant, group):
    """``config`` with ``quant`` (awq, or compressed-tensors W4A16) in groups of ``group`` weights."""
    if quant == "awq":
        return {**config, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": group}}
    ct = _ct((4, "int"))
    ct["config_groups"]["group_0"]["weights"].update(group_size=group, strategy="group")
    return {**config, "quantization_config": ct}


@pytest.mark.parametrize(
    ("config", "tp", "width"),
    [
        (QWEN3_MOE_FP8, 4, 768),  # 192 weights a GPU: vllm#25292
        (_grouped({**QWEN2_CONFIG, "intermediate_size": 29568}, "awq", 128), 2, 29568),  # vllm#13640
        (_grouped({**QWEN2_CONFIG, "intermediate_size": 11008}, "ct", 128), 4, 11008),
    ],
)
def test_a_tp_that_cuts_the_checkpoints_quantization_groups_is_refused_with_the_valid_sizes(
    config, tp, width
):
    from sizing.memory import check_tp

    model = model_from_hf_config(config, name="cfg")
    with pytest.raises(SizingInputError, match=f"cuts cfg's {width}-wide MLP") as err:
        check_tp(model, tp)
    valid = [int(t) for t in str(err.value).rsplit("valid: ", 1)[1].split(", ")]
    for ok in valid:
        check_tp(model, ok)  # each size it names is one vLLM loads
    assert tp not in valid and 1 in valid


def test_a_tp_is_not_checked_against_groups_a_checkpoint_does_not_have():
    from sizing.memory import check_tp

    per_tensor = {**QWEN3_MOE_FP8, "quantization_config": {"quant_method": "fp8"}}
    check_tp(model_from_hf_config(per_tensor), 4)  # online or per-tensor FP8: no blocks to cut
    check_tp(find_model("Qwen2.5-72B-Instruct-AWQ"), 2)  # the published AWQ pads its width for TP


@pytest.mark.parametrize("model_type", ["gemma2", "gemma3_text", "glm4"])
def test_float16_is_never_chosen_for_an_architecture_vllm_refuses_it_for(model_type):
    from sizing.memory import resolve_dtype

    model = model_from_hf_config({**QWEN2_CONFIG, "model_type": model_type}, name="cfg")
    assert resolve_dtype(model, find_gpu("H20")) == "bf16"
    with pytest.raises(SizingInputError, match="refuses float16"):
        resolve_dtype(model, find_gpu("V100-32G"))  # no bf16: vLLM would run it in float32
    with pytest.raises(SizingInputError, match="refuses float16"):
        resolve_dtype(model, find_gpu("H20"), "fp16")
    qwen = model_from_hf_config(QWEN2_CONFIG)
    assert resolve_dtype(qwen, find_gpu("V100-32G")) == "fp16"  # the others are cast, as before
    assert find_model("gemma-3-27b").no_fp16


def test_a_float32_checkpoint_is_served_in_bf16_where_the_gpu_has_it():
    from sizing.memory import resolve_dtype

    model = model_from_hf_config({**QWEN2_CONFIG, "torch_dtype": "float32"})
    assert resolve_dtype(model, find_gpu("H20")) == "bf16"
    assert resolve_dtype(model, find_gpu("T4")) == "fp16"


def test_a_compressed_tensors_fp8_checkpoint_is_refused_on_a_t4():
    from sizing.memory import Deployment, plan_memory

    model = model_from_hf_config({**QWEN2_CONFIG, "quantization_config": _ct((8, "float"))})
    with pytest.raises(SizingInputError, match="7.5"):
        plan_memory(Deployment(model=model, gpu=find_gpu("T4"), max_model_len=4096))


@pytest.mark.parametrize(
    ("extra", "window"),
    [
        ({"sliding_window": 4096}, 4096),  # Gemma 2, Mistral v0.1
        ({"sliding_window": 131072, "use_sliding_window": False}, 0),  # Qwen2.5's configs: named, off
        ({"sliding_window": None}, 0),  # Mistral v0.2
        ({"sliding_window": 32768}, 0),  # a window as long as the context is none
        ({"attention_chunk_size": 8192}, 8192),  # Llama 4's chunked local attention
    ],
)
def test_a_sliding_window_is_read_only_where_the_config_uses_one(extra, window):
    assert model_from_hf_config({**QWEN2_CONFIG, **extra}).sliding_window == window


def test_a_sliding_window_model_is_sized_with_a_warning_that_its_kv_capacity_is_a_lower_bound():
    from sizing.memory import Deployment, plan_memory

    def warnings(config):
        model = model_from_hf_config(config)
        return plan_memory(Deployment(model=model, gpu=find_gpu("L20"), max_model_len=8192)).warnings

    assert any(
        "sliding-window or chunked local attention (4,096 tokens)" in w
        for w in warnings({**QWEN2_CONFIG, "sliding_window": 4096})
    )
    assert not any("sliding" in w for w in warnings(QWEN2_CONFIG))


def test_llama4s_chunked_attention_is_sized_as_full_with_the_vllm_switch_named():
    from sizing.memory import Deployment, plan_memory

    model = model_from_hf_config(LLAMA4_SCOUT)
    plan = plan_memory(Deployment(model=model, gpu=find_gpu("H20"), tp=4, max_model_len=131072))
    [warning] = [w for w in plan.warnings if "chunk" in w]
    assert "8,192-token chunks" in warning and "sized as full attention" in warning
    assert "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE" in warning and "lower bound" in warning
    assert "sliding-window" not in warning


# Llama 4 Scout's config.json (meta-llama/Llama-4-Scout-17B-16E-Instruct): the language model in text_config
LLAMA4_SCOUT = {
    "model_type": "llama4",
    "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "llama4_text",
        "hidden_size": 5120,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "num_hidden_layers": 48,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
        "vocab_size": 202048,
        "max_position_embeddings": 10485760,
        "attention_chunk_size": 8192,
        "tie_word_embeddings": False,
    },
}
# Maverick: 128 experts on every other layer, the rest dense with the wider MLP
LLAMA4_MAVERICK = {
    **LLAMA4_SCOUT,
    "text_config": {
        **LLAMA4_SCOUT["text_config"],
        "num_local_experts": 128,
        "interleave_moe_layer_step": 2,
        "max_position_embeddings": 1048576,
    },
}


@pytest.mark.parametrize(
    ("config", "total_b", "dense_layers"),
    [
        # Meta's model cards: 109B and 400B total (the ~1B vision encoder is not the language model's)
        (LLAMA4_SCOUT, (107.0, 109.0), 0),
        (LLAMA4_MAVERICK, (399.0, 402.0), 24),
    ],
)
def test_llama4_counts_its_shared_expert_and_its_interleaved_dense_layers(config, total_b, dense_layers):
    model = model_from_hf_config(config)
    assert total_b[0] < model.params / 1e9 < total_b[1]
    assert model.dense_layers == dense_layers and model.moe_layers == 48 - dense_layers
    assert model.shared_expert_intermediate == 8192 and model.intermediate == 16384
    assert 14.0 < model.active_linear_params / 1e9 < 17.0  # "17B active" with the embeddings


@pytest.mark.parametrize(
    ("extra", "dense_layers"),
    [
        ({}, 0),
        ({"first_k_dense_replace": 3}, 3),  # DeepSeek V3: the first three layers dense
        ({"decoder_sparse_step": 2}, 14),  # Qwen MoE: every second layer sparse
        ({"mlp_only_layers": [0, 27]}, 2),  # Qwen MoE: these layers dense
        ({"moe_layers": list(range(0, 28, 4))}, 21),  # an explicit list wins
        ({"expert_layer_period": 2, "expert_layer_offset": 1}, 14),  # Jamba: experts on the odd layers
        ({"expert_layer_period": 4}, 21),
    ],
)
def test_the_dense_layers_of_a_moe_follow_its_config(extra, dense_layers):
    moe = {**QWEN2_CONFIG, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 1024}
    assert model_from_hf_config({**moe, **extra}).dense_layers == dense_layers


def test_a_moe_layer_list_out_of_range_is_refused_naming_the_field():
    moe = {**QWEN2_CONFIG, "num_experts": 8, "moe_layers": [0, 99]}
    with pytest.raises(SizingInputError, match="moe_layers"):
        model_from_hf_config(moe)


# Qwen2.5-VL-7B-Instruct's config.json: Qwen2.5-7B's language model with a vision_config beside it
QWEN25_VL_7B = {
    **QWEN2_CONFIG,
    "model_type": "qwen2_5_vl",
    "vision_config": {
        "depth": 32,
        "hidden_act": "silu",
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "in_chans": 3,
        "out_hidden_size": 3584,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
}


def test_a_vision_encoder_is_counted_in_the_weights_in_16_bit_with_a_warning():
    from sizing.memory import Deployment, plan_memory, weight_bytes_per_rank

    vl, text = model_from_hf_config(QWEN25_VL_7B), find_model("Qwen2.5-7B")
    assert vl.params == text.params  # the language model: what a decode step reads
    assert 8.2 < (vl.params + vl.vision_params) / 1e9 < 8.4  # the model card's 8.29B in all
    for dtype, tp in (("bf16", 1), ("awq", 2)):
        extra = weight_bytes_per_rank(vl, dtype, tp) - weight_bytes_per_rank(text, dtype, tp)
        assert extra == pytest.approx(vl.vision_params * 2.0 / tp)
    plan = plan_memory(Deployment(model=vl, gpu=find_gpu("L20"), max_model_len=8192))
    assert any(w.startswith("vision encoder: its 0.68B parameters") for w in plan.warnings)
    assert not any("vision" in w for w in plan_memory(Deployment(model=text, gpu=find_gpu("L20"))).warnings)


def test_a_vision_config_without_a_readable_shape_adds_nothing():
    odd = {**QWEN2_CONFIG, "vision_config": {"depth": "deep"}}
    assert model_from_hf_config(odd).vision_params == 0


def test_a_listed_price_is_used_as_is_and_marked_an_estimate():
    price = price_book().price(find_instance("gn7i-c8g1.2xlarge"))
    assert price is not None and price.cny_per_hour == 12.0 and price.estimate


def test_an_unlisted_type_is_priced_from_its_gpus_vcpus_and_memory():
    book = price_book()
    inst = find_instance("gn7i-4x.16xlarge")
    gpu_rate = book.gpu_cny_per_hour["A10"][0]
    expected = 4 * gpu_rate + 64 * book.cny_per_vcpu_hour + 256 * book.cny_per_gib_hour
    assert book.price(inst).cny_per_hour == pytest.approx(expected)


def test_a_user_price_file_overrides_the_shipped_estimate():
    book = price_book({"types": {"gn7i-c8g1.2xlarge": 9.9}})
    price = book.price(find_instance("gn7i-c8g1.2xlarge"))
    assert price.cny_per_hour == 9.9 and not price.estimate


def test_a_regional_multiplier_scales_prices():
    book = price_book({"regions": {"cn-test": {"multiplier": 2.0}}})
    inst = find_instance("gn7i-c8g1.2xlarge")
    assert book.price(inst, "cn-test").cny_per_hour == 2 * book.price(inst).cny_per_hour


def test_an_unknown_region_names_the_nearest_ones():
    with pytest.raises(SizingInputError, match="unknown region 'cn-hangzou'; nearest: cn-hangzhou"):
        price_book().price(find_instance("gn7i-c8g1.2xlarge"), "cn-hangzou")


def test_a_malformed_price_file_is_refused():
    with pytest.raises(SizingInputError, match="prices"):
        price_book({"types": {"gn7i-c8g1.2xlarge": {"cny": 1}}}, "prices")


def test_a_price_override_with_a_misspelt_section_is_refused():
    with pytest.raises(SizingInputError, match=r"prices.yaml: unknown key\(s\) type; valid keys: .*types"):
        price_book({"type": {"gn7i-c8g1.2xlarge": 9.9}}, "prices.yaml")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"cny_per_vcpu_hour": -5}, "cny_per_vcpu_hour must be finite and non-negative, got -5"),
        ({"cny_per_gib_hour": float("nan")}, "cny_per_gib_hour must be finite and non-negative, got nan"),
        (
            {"types": {"ecs.gn7i-c8g1.2xlarge": {"cny_per_hour": True}}},
            "types.ecs.gn7i-c8g1.2xlarge.cny_per_hour must be a number, got True",
        ),
        ({"gpu_cny_per_hour": {"A10": "9.5"}}, "gpu_cny_per_hour.A10 must be a number"),
        (
            {"gpu_cny_per_hour": {"A10": {"value": 9.5, "estimate": "no"}}},
            "gpu_cny_per_hour.A10.estimate must be true or false",
        ),
        (
            {"regions": {"cn-hangzhou": {"multiplier": 0}}},
            "regions.cn-hangzhou.multiplier must be finite and positive, got 0",
        ),
        ({"regions": {"cn-hangzhou": {"multiplyer": 2}}}, "regions.cn-hangzhou: unknown key.s. multiplyer"),
        (
            {"types": {"gn7i-c8g1.2xlarge": {"cny_per_hour": 1, "estimated": True}}},
            "types.ecs.gn7i-c8g1.2xlarge: unknown key.s. estimated",
        ),
        ({"currency": "USD"}, "currency must be CNY, got 'USD'"),
    ],
)
def test_a_price_file_with_a_value_the_book_cannot_use_is_refused_naming_the_field(override, message):
    with pytest.raises(SizingInputError, match=f"^prices.yaml: {message}"):
        price_book(override, "prices.yaml")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            {"types": {"ecs.gn7i-c8g1.2xlarg": 3}},
            "types: unknown instance type .*nearest: ecs.gn7i-c8g1.2xlarge",
        ),
        ({"gpu_cny_per_hour": {"H200": 30}}, "gpu_cny_per_hour: unknown GPU 'H200'; nearest: H20"),
    ],
)
def test_a_price_for_an_unknown_instance_type_or_gpu_is_refused_with_the_nearest_names(override, message):
    with pytest.raises(SizingInputError, match=f"^prices.yaml: {message}"):
        price_book(override, "prices.yaml")


def test_a_gpu_price_keyed_by_an_alias_or_another_case_prices_the_catalog_gpu():
    book = price_book({"gpu_cny_per_hour": {"t4": 1.0}})
    assert book.gpu_cny_per_hour["T4"] == (1.0, False) and "t4" not in book.gpu_cny_per_hour


def test_a_user_price_entry_replaces_the_shipped_one_whole():
    # the shipped entry is an estimate with a third-party source; the user's figure is neither
    price = price_book({"types": {"ecs.gn7i-c8g1.2xlarge": {"cny_per_hour": 5.0}}}).price(
        find_instance("gn7i-c8g1.2xlarge")
    )
    assert price is not None and price.cny_per_hour == 5.0 and not price.estimate and price.source == ""


@pytest.mark.parametrize(
    ("model", "dtype", "repo"),
    [(m.name, dtype, repo) for m in load_models().values() for dtype, repo in m.checkpoints],
)
def test_every_published_checkpoint_the_catalog_prints_resolves_back_to_its_model(model, dtype, repo):
    # the vllm serve line names these repos: Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4 was an unknown model
    for name in (repo, repo.rsplit("/", 1)[-1]):
        found = find_model(name)
        assert (found.name, found.quantization, found.hf_id) == (model, dtype, repo)


def test_a_two_part_quantization_tag_of_another_publisher_resolves_to_the_catalog_shape():
    found = find_model("someone/Qwen2.5-14B-Instruct-GPTQ-Int4")
    assert (found.name, found.quantization, found.hf_id) == (
        "Qwen2.5-14B",
        "gptq",
        "someone/Qwen2.5-14B-Instruct-GPTQ-Int4",
    )


def test_glm_4v_vision_blocks_are_out_hidden_size_wide_and_its_merger_intermediate_size():
    # transformers' Glm4vConfig defaults, GLM-4.1V-9B-Thinking's shape
    text = {"model_type": "glm4v_text", "vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 13696}
    text |= {"num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 2}
    text |= {"max_position_embeddings": 65536, "attention_bias": True}
    vision = {"depth": 24, "hidden_size": 1536, "hidden_act": "silu", "num_heads": 12, "image_size": 336}
    vision |= {"patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 4096}
    vision |= {"intermediate_size": 13696}
    model = model_from_hf_config({"model_type": "glm4v", "text_config": text, "vision_config": vision})
    # vLLM's glm4_1v.py: 24 blocks of qkv and proj and a gated MLP 4,096 wide; the Conv3d patch embedding; a
    # 2 x 2 Conv2d down to 4,096; the merger's 4,096-square projection and gated MLP 13,696 wide; a position
    # table of (336 / 14)^2 patches
    w, out = 1536, 4096
    blocks = 24 * (4 * w * w + 3 * w * out)
    expected = blocks + 3 * 2 * 14 * 14 * w + w * out * 4 + out * out + 3 * out * 13696 + 24 * 24 * w
    assert model.vision_params == expected
    assert (model.params + model.vision_params) / 1e9 == pytest.approx(10.29, abs=0.01)
