"""State-space (Mamba) hybrids under vLLM V1's hybrid KV cache manager: the Mamba layers' weights, the state a
sequence keeps in each (vLLM's mamba2_state_shape / mamba1_state_shape), the block size that makes a page hold
it, the layer groups, and what the engine and the step time charge for them. One hand-written config.json a
family, with each family's own field names."""

from __future__ import annotations

import json
import math

import pytest

from fleet.cli import main
from sizing import Deployment, SizingInputError, find_gpu, model_from_hf_config, perf_for, plan_memory
from sizing.catalog import GIB
from sizing.memory import hybrid_block_size, mamba_state_bytes

# nvidia/Nemotron-H-8B-Base-8K's fields: 52 blocks, 24 Mamba2 (M), 4 attention (*), 24 MLP (-)
NEMOTRON_H_8B = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "num_hidden_layers": 52,
    "hidden_size": 4096,
    "intermediate_size": 21504,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "attention_head_dim": 128,
    "mamba_num_heads": 128,
    "mamba_head_dim": 64,
    "n_groups": 8,
    "ssm_state_size": 128,
    "conv_kernel": 4,
    "vocab_size": 131072,
    "tie_word_embeddings": False,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
}

# ibm-granite/granite-4.0-h-small's fields: 36 Mamba2 and 4 attention layers, a MoE (72 experts, 10 a
# token, a shared expert) on every layer; the attention layers' places are hand-written
GRANITE_4_H_SMALL = {
    "architectures": ["GraniteMoeHybridForCausalLM"],
    "model_type": "granitemoehybrid",
    "num_hidden_layers": 40,
    "layer_types": (["mamba"] * 9 + ["attention"]) * 4,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 72,
    "num_experts_per_tok": 10,
    "intermediate_size": 768,
    "shared_intermediate_size": 1536,
    "mamba_n_heads": 128,
    "mamba_d_head": 64,
    "mamba_n_groups": 1,
    "mamba_d_state": 128,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "vocab_size": 100352,
    "tie_word_embeddings": True,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}

# Falcon-H1 7B's published shape (44 layers of 3072, 12 attention heads, 2 KV, 24 Mamba heads of 128,
# d_state 256): attention and Mamba2 side by side on every layer; MLP width and vocabulary hand-written
FALCON_H1 = {
    "architectures": ["FalconH1ForCausalLM"],
    "model_type": "falcon_h1",
    "num_hidden_layers": 44,
    "hidden_size": 3072,
    "intermediate_size": 12288,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "mamba_d_ssm": 3072,
    "mamba_n_heads": 24,
    "mamba_d_head": 128,
    "mamba_n_groups": 1,
    "mamba_d_state": 256,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "vocab_size": 130048,
    "max_position_embeddings": 262144,
    "torch_dtype": "bfloat16",
}

# ai21labs/AI21-Jamba-Mini-1.5's shape (Jamba v0.1's): attention on every eighth layer from layer 4, Mamba1
# on the rest, 16 experts (2 a token) on every other layer
JAMBA = {
    "architectures": ["JambaForCausalLM"],
    "model_type": "jamba",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "attn_layer_period": 8,
    "attn_layer_offset": 4,
    "expert_layer_period": 2,
    "expert_layer_offset": 1,
    "num_experts": 16,
    "num_experts_per_tok": 2,
    "mamba_d_state": 16,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_dt_rank": 256,
    "vocab_size": 65536,
    "tie_word_embeddings": False,
    "max_position_embeddings": 262144,
    "torch_dtype": "bfloat16",
}


def _mamba2_state(tp, inner, groups, heads, head_dim, d_state, kernel):
    """vLLM's mamba2_state_shape, written out: groups padded to the TP size where it does not divide them;
    (kernel - 1) x conv_dim / TP and heads / TP x head_dim x d_state elements, 16-bit."""
    if groups % tp:
        groups = tp
    conv = (kernel - 1) * ((inner + 2 * groups * d_state) // tp)
    return 2 * (conv + heads // tp * head_dim * d_state)


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize(
    ("config", "shape"),
    [
        (NEMOTRON_H_8B, (8192, 8, 128, 64, 128, 4)),
        (GRANITE_4_H_SMALL, (8192, 1, 128, 64, 128, 4)),
        (FALCON_H1, (3072, 1, 24, 128, 256, 4)),
    ],
)
def test_a_mamba2_layers_state_is_vllms_shape_split_over_tp(config, shape, tp):
    model = model_from_hf_config(config)
    assert model.mamba_version == 2
    assert mamba_state_bytes(model, tp) == _mamba2_state(tp, *shape)


def test_nemotron_h_8b_keeps_2_mib_a_layer_and_runs_at_528_token_blocks():
    model = model_from_hf_config(NEMOTRON_H_8B)
    # (3 x (8192 + 2 x 8 x 128) + 128 x 64 x 128) x 2 bytes
    assert mamba_state_bytes(model, 1) == 2_158_592
    # one attention layer's K and V of a token: 2 x 8 x 128 x 2 = 4096 bytes; 2,158,592 / 4096 = 527.0
    dep = Deployment(model=model, gpu=find_gpu("H20"), tp=1)
    assert hybrid_block_size(dep) == 528
    assert hybrid_block_size(dep.with_(kv_cache_dtype="fp8")) == 1056  # half the page: twice the tokens


# nvidia/NVIDIA-Nemotron-Nano-9B-v2's fields: 56 blocks, 27 Mamba2 of 128 heads x 80, 4 attention, 25 MLP
NEMOTRON_NANO_9B_V2 = {
    **NEMOTRON_H_8B,
    "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
    "num_hidden_layers": 56,
    "hidden_size": 4480,
    "intermediate_size": 15680,
    "num_attention_heads": 40,
    "head_dim": 128,
    "mamba_head_dim": 80,
    "max_position_embeddings": 131072,
}


def test_nemotron_nano_9b_v2_gets_the_672_token_blocks_vllm_gives_it():
    # vllm#24280: "large attention page sizes (672 tokens for nvidia/NVIDIA-Nemotron-Nano-9B-v2)"
    model = model_from_hf_config(NEMOTRON_NANO_9B_V2)
    assert (model.mamba_layers, model.full_attention_layers, model.mlp_layers) == (27, 4, 25)
    assert hybrid_block_size(Deployment(model=model, gpu=find_gpu("H100"), tp=1)) == 672
    assert model.params / 1e9 == pytest.approx(9, rel=0.02)  # the card's 9B


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_a_mamba1_layers_state_is_vllms_shape_split_over_tp(tp):
    model = model_from_hf_config(JAMBA)
    assert (model.mamba_version, model.mamba_inner, model.mamba_d_state) == (1, 8192, 16)
    # mamba1_state_shape: inner / TP x (kernel - 1) and inner / TP x d_state, 16-bit
    assert mamba_state_bytes(model, tp) == 2 * (8192 // tp) * (3 + 16)


def test_each_familys_layers_are_read_from_its_own_fields():
    nemotron = model_from_hf_config(NEMOTRON_H_8B)
    assert (nemotron.mamba_layers, nemotron.full_attention_layers, nemotron.mlp_layers) == (24, 4, 24)
    granite = model_from_hf_config(GRANITE_4_H_SMALL)
    assert (granite.mamba_layers, granite.full_attention_layers, granite.moe_layers) == (36, 4, 40)
    falcon = model_from_hf_config(FALCON_H1)
    assert (falcon.mamba_layers, falcon.full_attention_layers) == (44, 44)  # side by side on every layer
    jamba = model_from_hf_config(JAMBA)
    assert (jamba.mamba_layers, jamba.full_attention_layers, jamba.moe_layers) == (28, 4, 16)
    listed = {**NEMOTRON_H_8B, "hybrid_override_pattern": None}
    names = {"M": "mamba", "*": "attention", "-": "mlp"}
    listed["layers_block_type"] = [names[c] for c in NEMOTRON_H_8B["hybrid_override_pattern"]]
    assert model_from_hf_config(listed).params == nemotron.params
    for model in (nemotron, granite, falcon, jamba):
        assert not model.state_space


def test_the_weights_match_the_model_cards():
    # Nemotron-H-8B: 8,100,852,736 parameters by two public counts of its tensors (Mamba in_proj 18560 x
    # 4096, out_proj 4096 x 8192, conv, A, D, dt_bias, gated norm; squared-ReLU MLP blocks; one norm a block)
    assert model_from_hf_config(NEMOTRON_H_8B).params == 8_100_852_736
    granite = model_from_hf_config(GRANITE_4_H_SMALL)  # the card: 32B total, 9B active
    assert granite.params / 1e9 == pytest.approx(32, rel=0.02)
    active = granite.active_linear_params + granite.embedding_params + granite.norm_params
    assert active / 1e9 == pytest.approx(9, rel=0.05)
    jamba = model_from_hf_config(JAMBA)  # the card: 52B total, 12B active
    assert jamba.params / 1e9 == pytest.approx(52, rel=0.02)
    active = jamba.active_linear_params + jamba.embedding_params + jamba.norm_params
    assert active / 1e9 == pytest.approx(12, rel=0.02)


@pytest.mark.parametrize(
    ("config", "groups"),
    [
        (NEMOTRON_H_8B, (4, 1, 6)),  # 4 attention, 24 Mamba: groups of 4
        (GRANITE_4_H_SMALL, (4, 1, 9)),
        (FALCON_H1, (44, 1, 1)),  # 44 and 44: one group of each
        (JAMBA, (4, 1, 7)),
    ],
)
def test_the_layers_are_grouped_and_the_pool_laid_out_as_kv_cache_utils_does(config, groups):
    model = model_from_hf_config(config)
    dep = Deployment(model=model, gpu=find_gpu("H20"), tp=2, max_model_len=8192)
    plan = plan_memory(dep)
    local = plan.local
    assert local is not None and local.kind == "mamba"
    assert (local.group_size, local.full_groups, local.local_groups) == groups
    token = 2 * max(1, model.kv_heads // 2) * model.head_dim * 2  # one attention layer, one token, a rank
    block = 16 * math.ceil(mamba_state_bytes(model, 2) / (16 * token))
    assert local.block_size == block
    blocks = math.floor(plan.kv_cache_gib * GIB / (block * token * groups[0]))
    assert plan.kv_cache_blocks == blocks
    # a request holds its context in each attention group and one block in each Mamba group
    assert plan.max_concurrency == pytest.approx(blocks / (math.ceil(8192 / block) + groups[2]))
    assert not plan.prefix_caching
    assert not any("lower bound" in w or "not modelled" in w for w in plan.warnings)
    assert any(f"Mamba{model.mamba_version} state-space layers on" in w for w in plan.warnings)


def test_the_step_reads_the_attention_layers_kv_and_the_states_and_prefill_skips_mamba_pairs():
    model = model_from_hf_config(NEMOTRON_H_8B)
    dep = Deployment(model=model, gpu=find_gpu("H20"), tp=1, max_model_len=8192)
    plan = plan_memory(dep)
    perf = perf_for(dep, plan)
    assert perf.kv_bytes_per_token == pytest.approx(4 * 2 * 8 * 128 * 2)  # the 4 attention layers alone
    assert perf.attn_flops_per_pair == pytest.approx(4 * 4 * 32 * 128)
    # every step reads and writes the 24 states once a sequence: in context tokens of the attention layers
    read = 2 * 24 * mamba_state_bytes(model, 1) / (4 * 2 * 8 * 128 * 2)
    assert plan.local.read_per_held * plan.local.local_tokens(100) == pytest.approx(read)


def test_variants_not_modelled_keep_the_lower_bound_warning():
    moe = {
        **NEMOTRON_H_8B,
        "hybrid_override_pattern": NEMOTRON_H_8B["hybrid_override_pattern"].replace("-", "E"),
    }
    plan = plan_memory(Deployment(model=model_from_hf_config(moe), gpu=find_gpu("H20"), max_model_len=8192))
    assert plan.local is None and any("not modelled" in w and "lower bound" in w for w in plan.warnings)
    v0 = Deployment(model=model_from_hf_config(NEMOTRON_H_8B), gpu=find_gpu("H20"), engine="v0")
    assert any("Mamba layers (24 of 52)" in w and "lower bound" in w for w in plan_memory(v0).warnings)


def test_a_granite_config_without_mamba_layers_is_plain_attention():
    micro = {**GRANITE_4_H_SMALL, "layer_types": ["attention"] * 40, "num_local_experts": 0}
    model = model_from_hf_config(micro)
    assert not model.state_space and not model.mamba_layers
    assert model.intermediate == 1536  # the dense model's MLP is its shared one
    plan = plan_memory(Deployment(model=model, gpu=find_gpu("H20"), max_model_len=8192))
    assert plan.local is None and not any("state-space" in w for w in plan.warnings)


def test_a_tp_that_does_not_split_the_mamba_groups_is_refused():
    model = model_from_hf_config(NEMOTRON_H_8B)
    with pytest.raises(SizingInputError, match="Mamba layers evenly .8 groups"):
        plan_memory(Deployment(model=model, gpu=find_gpu("H20"), tp=16))
    odd = model_from_hf_config({**FALCON_H1, "mamba_n_heads": 18, "mamba_d_ssm": 18 * 128})
    with pytest.raises(SizingInputError, match="18 heads"):
        plan_memory(Deployment(model=odd, gpu=find_gpu("H20"), tp=4))  # 12 attention heads split, 18 do not


def test_fleet_size_on_a_nemotron_h_config_shows_the_mamba_layout_without_the_lower_bound(tmp_path, capsys):
    path = tmp_path / "Nemotron-H-8B" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(NEMOTRON_H_8B))
    code = main(["size", "--config", str(path), "--gpu", "H20", "--max-model-len", "8192", "--json"])
    assert code == 0
    [c] = json.loads(capsys.readouterr().out)["candidates"]
    assert c["kv_layout"]["kind"] == "mamba" and c["kv_layout"]["block_size"] == 528
    assert not any("lower bound" in w for w in c["warnings"])


def test_the_catalogs_nemotron_h_8b_is_the_same_shape_as_its_config():
    from sizing import find_model

    catalog = find_model("nvidia/Nemotron-H-8B-Base-8K")
    config = model_from_hf_config(NEMOTRON_H_8B, name=catalog.name)
    assert catalog.params == config.params == 8_100_852_736
    assert (catalog.mamba_layers, catalog.full_attention_layers, catalog.mlp_gated) == (24, 4, False)
    dep = Deployment(model=catalog, gpu=find_gpu("H20"), tp=2, max_model_len=8192)
    assert plan_memory(dep).local == plan_memory(dep.with_(model=config)).local
