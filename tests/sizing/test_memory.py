"""vLLM's memory arithmetic, checked against the calibration rows of vllm-sizing.md section 2.

Expected values are the numbers the vLLM logs printed (copied from the reference table), not outputs of the
model. Which rows set a constant: the activation model's two constants are solved from rows PR#10511 and
vllm#10517 (in sample for the activation term); rows vllm#15360 and vllm#16141 are out of sample. Non-torch
memory and the weights use no constant fitted on any row.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sizing import Deployment, SizingInputError, find_gpu, find_model, plan_memory
from sizing.catalog import GIB
from sizing.memory import (
    NON_TORCH_NO_NVLS_GIB,
    NON_TORCH_NVLS_GIB,
    NON_TORCH_TP1_GIB,
    activation_body_gib,
    default_batch_limits,
    kv_bytes_per_token,
    non_torch_gib,
    sampler_gib,
)

# (source, model, gpu, visible GiB, tp, max_model_len, util, max_num_batched_tokens, max_num_seqs, engine,
#  logged weights GiB, logged KV GiB, logged KV tokens or None (then derived from the KV GiB by
#  16-token blocks))
CALIBRATION_ROWS = [
    (
        "vllm#15360",
        "Qwen2.5-7B-Instruct",
        "A10G",
        21.99,
        1,
        6600,
        0.90,
        None,
        None,
        "v0",
        14.25,
        4.05,
        round(11.49 * 6600),
    ),  # "max concurrency 11.49x" at 6600 tokens
    ("PR#10511", "Meta-Llama-3-8B", "H100", 79.22, 1, 8192, 0.90, 8192, None, "v0", 14.96, 53.29, None),
    (
        "vllm#10517",
        "Llama-3.1-8B-Instruct",
        "RTX3090",
        23.58,
        1,
        20000,
        0.90,
        None,
        None,
        "v0",
        14.99,
        3.81,
        1952 * 16,
    ),  # "1952 blocks"
    (
        "vllm#16141",
        "Qwen2.5-0.5B-Instruct-AWQ",
        "L40S",
        44.55,
        1,
        512,
        0.10,
        None,
        1,
        "v1",
        0.43,
        3.88,
        314_272,
    ),  # "V1: 314,272 tokens"
]


def _plan(row):
    _, model, gpu, visible, tp, mml, util, mnbt, mns, engine, *_ = row
    dep = Deployment(
        find_model(model),
        find_gpu(gpu).with_visible_gib(visible),
        tp,
        max_model_len=mml,
        gpu_memory_utilization=util,
        max_num_batched_tokens=mnbt,
        max_num_seqs=mns,
        engine=engine,
    )
    return plan_memory(dep)


@pytest.mark.parametrize("row", CALIBRATION_ROWS, ids=[r[0] for r in CALIBRATION_ROWS])
def test_weights_match_the_logged_weights_within_3_percent(row):
    logged = row[10]
    assert _plan(row).weights_gib == pytest.approx(logged, rel=0.03)


@pytest.mark.parametrize("row", CALIBRATION_ROWS, ids=[r[0] for r in CALIBRATION_ROWS])
def test_kv_cache_tokens_match_the_logged_capacity_within_10_percent(row):
    plan = _plan(row)
    logged_tokens = row[12]
    if logged_tokens is None:  # the log gave GiB: vLLM's own arithmetic turns it into 16-token blocks
        logged_tokens = math.floor(row[11] * GIB / (16 * plan.kv_bytes_per_token)) * 16
    assert plan.kv_cache_tokens == pytest.approx(logged_tokens, rel=0.10)


def test_the_worked_check_of_vllm_15360_gives_56_kib_per_token():
    # vllm-sizing.md 1.4: Qwen2.5-7B is 56 KiB/token, 896 KiB per 16-token block
    assert kv_bytes_per_token(find_model("Qwen2.5-7B"), 1, "auto", "bf16") == 56 * 1024


def test_kv_heads_are_replicated_when_tp_exceeds_them():
    model = find_model("Qwen2.5-7B")  # 4 KV heads
    assert kv_bytes_per_token(model, 8, "auto", "bf16") == kv_bytes_per_token(model, 4, "auto", "bf16")
    assert kv_bytes_per_token(model, 2, "auto", "bf16") == 2 * kv_bytes_per_token(model, 4, "auto", "bf16")


def test_an_fp8_kv_cache_holds_twice_the_tokens_per_byte():
    model = find_model("Llama-3.1-8B")
    assert kv_bytes_per_token(model, 1, "fp8", "bf16") * 2 == kv_bytes_per_token(model, 1, "auto", "bf16")


def test_vllm_default_budgets_follow_the_gpu_class_and_the_a100_exclusion():
    assert default_batch_limits(find_gpu("H100"), 79.11) == (8192, 1024)
    assert default_batch_limits(find_gpu("A100-80G"), 79.15) == (2048, 256)
    assert default_batch_limits(find_gpu("A800"), 79.15) == (8192, 1024)  # its name lacks "a100"
    assert default_batch_limits(find_gpu("L20"), 44.39) == (2048, 256)


def test_gpu_memory_utilization_is_a_share_of_the_whole_device():
    plan = plan_memory(
        Deployment(find_model("Qwen2.5-7B"), find_gpu("A10"), gpu_memory_utilization=0.8, max_model_len=4096)
    )
    assert plan.usable_gib == pytest.approx(22.07 * 0.8)
    graphs = plan.cuda_graph_gib if plan.cuda_graphs_in_util else 0.0
    assert plan.kv_cache_gib == pytest.approx(
        plan.usable_gib - plan.weights_gib - plan.activation_gib - plan.non_torch_gib - graphs
    )


def _l8b(gpu: str = "H100", **kw: object) -> Deployment:
    return Deployment(find_model("Llama-3.1-8B"), find_gpu(gpu), max_model_len=8192, **kw)  # type: ignore[arg-type]


def test_v1_takes_cuda_graphs_out_of_util_from_vllm_0_21_and_not_before():
    current, v027, v019 = (plan_memory(_l8b(vllm_version=v)) for v in (None, "0.27.1", "0.19.0"))
    assert current.cuda_graphs_in_util and v027.cuda_graphs_in_util and not v019.cuda_graphs_in_util
    assert v019.kv_cache_gib - current.kv_cache_gib == pytest.approx(current.cuda_graph_gib)
    v0 = plan_memory(_l8b(engine="v0", vllm_version=None))
    assert not v0.cuda_graphs_in_util  # V0 captured its graphs after the KV cache, outside util


def test_the_peak_is_the_larger_of_forward_pass_and_sampler_run_in_both_engines():
    model = find_model("Llama-3.1-8B")
    body = activation_body_gib(model, 1, 8192)
    one = plan_memory(_l8b(max_num_seqs=1))
    many = plan_memory(_l8b(max_num_seqs=1024))
    assert one.activation_gib == pytest.approx(body)  # one sequence: the forward pass is the peak
    assert many.activation_gib == pytest.approx(sampler_gib(model, 8192, 1024, "v1"))  # 1024: the sampler
    # V0 keeps ~2.6x more fp32 copies per sequence (PR#10511, vllm#15360), but 256 sequences by default
    v0 = plan_memory(_l8b(engine="v0", max_num_batched_tokens=8192, max_num_seqs=256))
    assert v0.activation_gib == pytest.approx(max(body, sampler_gib(model, 8192, 256, "v0")))
    assert sampler_gib(model, 8192, 256, "v0") > sampler_gib(model, 8192, 256, "v1")


def test_before_vllm_0_6_5_the_profile_counts_no_sampler():
    old = plan_memory(_l8b("RTX3090", engine="v0", vllm_version="0.6.4"))
    new = plan_memory(_l8b("RTX3090", engine="v0", vllm_version="0.6.5"))
    assert {t.name: t.gib for t in old.terms}["sampler logits buffers"] == 0.0
    assert new.activation_gib > old.activation_gib


def test_non_torch_memory_at_tp_is_nvls_buffers_on_hopper_nvlink_and_small_elsewhere():
    assert non_torch_gib(1, find_gpu("H100")) == NON_TORCH_TP1_GIB
    for tp in (2, 4, 8):  # NVLS buffers do not grow with the rank count
        assert non_torch_gib(tp, find_gpu("H100")) == pytest.approx(NON_TORCH_TP1_GIB + NON_TORCH_NVLS_GIB)
        assert non_torch_gib(tp, find_gpu("H20")) == pytest.approx(NON_TORCH_TP1_GIB + NON_TORCH_NVLS_GIB)
        assert non_torch_gib(tp, find_gpu("A100-80G")) == pytest.approx(
            NON_TORCH_TP1_GIB + NON_TORCH_NO_NVLS_GIB
        )
        assert non_torch_gib(tp, find_gpu("L20")) == pytest.approx(NON_TORCH_TP1_GIB + NON_TORCH_NO_NVLS_GIB)


def test_an_unreadable_vllm_version_is_refused_in_one_line():
    with pytest.raises(SizingInputError, match="not of the form"):
        plan_memory(_l8b(vllm_version="latest"))


def test_a_bf16_checkpoint_runs_as_fp16_on_a_t4():
    plan = plan_memory(Deployment(find_model("Qwen2.5-1.5B"), find_gpu("T4"), max_model_len=4096))
    assert plan.dtype == "fp16"


def test_asking_for_bf16_on_a_v100_is_refused():
    with pytest.raises(SizingInputError, match="bf16"):
        plan_memory(Deployment(find_model("Qwen2.5-1.5B"), find_gpu("V100-32G"), dtype="bf16"))


def test_awq_weights_are_about_a_quarter_of_bf16_plus_the_unquantised_embeddings():
    model = find_model("Qwen2.5-7B")
    bf16 = plan_memory(Deployment(model, find_gpu("A10"), max_model_len=4096)).weights_gib
    awq = plan_memory(Deployment(model, find_gpu("A10"), dtype="awq", max_model_len=4096)).weights_gib
    embed_gib = model.embedding_params * 2 / GIB
    assert awq == pytest.approx((bf16 - embed_gib) * (0.5 + 2.5 / 128) / 2 + embed_gib, rel=0.01)


def test_max_model_len_above_the_models_limit_is_refused():
    with pytest.raises(SizingInputError, match="above .* limit of 32768"):
        plan_memory(Deployment(find_model("Qwen2.5-7B"), find_gpu("A100-80G"), max_model_len=65536))


def test_tp_that_does_not_divide_the_heads_is_refused_with_the_valid_sizes():
    with pytest.raises(SizingInputError, match="valid: 1, 2, 4"):
        plan_memory(Deployment(find_model("Qwen2.5-7B"), find_gpu("A10"), tp=8))


def test_a_model_too_big_for_the_card_does_not_fit_and_says_why():
    plan = plan_memory(Deployment(find_model("Llama-3.1-70B"), find_gpu("A10"), max_model_len=4096))
    assert not plan.fits and plan.max_model_len_that_fits == 0
    assert "weights" in plan.reason


def test_non_torch_memory_grows_with_tp():
    model, gpu = find_model("Llama-3.1-70B"), find_gpu("H100")
    nt = [plan_memory(Deployment(model, gpu, tp, max_model_len=4096)).non_torch_gib for tp in (1, 2, 4, 8)]
    assert nt == sorted(nt) and nt[0] < nt[-1]


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=4096, max_value=131072))
def test_the_suggested_max_model_len_really_fits(max_model_len):
    model, gpu = find_model("Llama-3.1-8B"), find_gpu("A10")
    plan = plan_memory(Deployment(model, gpu, max_model_len=max_model_len))
    if not plan.fits:
        smaller = plan_memory(Deployment(model, gpu, max_model_len=plan.max_model_len_that_fits))
        assert smaller.fits
        assert plan.max_model_len_that_fits < max_model_len


@settings(max_examples=25, deadline=None)
@given(st.floats(min_value=0.5, max_value=0.94), st.floats(min_value=0.005, max_value=0.05))
def test_more_memory_utilization_never_shrinks_the_kv_cache(util, extra):
    model, gpu = find_model("Qwen2.5-7B"), find_gpu("L20")
    low = plan_memory(Deployment(model, gpu, gpu_memory_utilization=util))
    high = plan_memory(Deployment(model, gpu, gpu_memory_utilization=util + extra))
    assert high.kv_cache_tokens >= low.kv_cache_tokens


def test_a_token_budget_below_max_num_seqs_is_refused_like_vllm_does():
    dep = Deployment(find_model("Qwen2.5-7B"), find_gpu("A10"), max_num_seqs=4096, max_model_len=4096)
    with pytest.raises(SizingInputError, match=r"max_num_batched_tokens \(2048\) must be at least"):
        plan_memory(dep)
