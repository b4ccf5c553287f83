"""Calibration from a user's own vLLM log: exact at the logged settings, carried by the physics to others.

The expected values are vLLM's own numbers from the public logs in tests/sizing/vllm_logs.py.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sizing import Deployment, SizingInputError, find_gpu, find_model, plan_memory
from sizing.calibration import (
    Scope,
    apply_calibration,
    bench_from_json,
    calibrate,
    calibration_from_dict,
    calibration_to_dict,
)
from sizing.memory import NON_TORCH_TP1_GIB
from sizing.perf import BW_EFF, perf_for
from sizing.vllm_log import LogFacts, parse_startup_log


def _load_logs():
    spec = importlib.util.spec_from_file_location("vllm_logs", Path(__file__).with_name("vllm_logs.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


logs = _load_logs()


def _rtx3090(max_model_len: int) -> Deployment:
    # vllm#10517: Llama-3.1-8B-Instruct on an RTX 3090, vLLM 0.6.4 (V0, no chunked prefill below 32K)
    return Deployment(
        find_model("Llama-3.1-8B"), find_gpu("RTX3090"), 1, max_model_len=max_model_len, engine="v0"
    )


def _cal_20k():
    return calibrate(parse_startup_log(logs.V0_064_20K), _rtx3090(20000), source="vllm#10517")


def test_calibrated_prediction_reproduces_the_logged_kv_cache():
    plan = plan_memory(apply_calibration(_rtx3090(20000), _cal_20k()))
    assert plan.kv_cache_tokens == pytest.approx(1952 * 16, rel=0.005)  # "GPU blocks: 1952"
    assert plan.kv_cache_gib == pytest.approx(3.81, abs=0.01)


def test_calibrated_on_20k_predicts_the_29k_start_within_3_percent_and_its_refusal():
    # the same deployment at --max-model-len 29000: vLLM logged 2.89 GiB (1478 blocks) and refused to start,
    # the largest length that fit being 23,648 tokens. Without calibration the model is 9.5% low.
    plan = plan_memory(apply_calibration(_rtx3090(29000), _cal_20k()))
    assert plan.kv_cache_gib == pytest.approx(2.89, rel=0.03)
    assert plan.kv_cache_tokens == pytest.approx(23_648, rel=0.03)
    assert not plan.fits and "does not fit" in plan.reason


def test_calibration_the_other_way_round_29k_to_20k():
    cal = calibrate(parse_startup_log(logs.V0_064_29K), _rtx3090(29000), source="vllm#10517")
    plan = plan_memory(apply_calibration(_rtx3090(20000), cal))
    assert plan.kv_cache_gib == pytest.approx(3.81, rel=0.03)
    assert plan.fits


def test_every_corrected_term_is_reported_with_the_uncalibrated_prediction():
    cal = _cal_20k()
    names = {t.name: t for t in cal.terms}
    assert {"visible_gib", "weights_gib", "non_torch_gib", "activation_gib"} <= set(names)
    assert names["non_torch_gib"].logged == 0.35 and names["non_torch_gib"].scope is Scope.GPU
    assert names["non_torch_gib"].predicted == pytest.approx(NON_TORCH_TP1_GIB)
    assert names["weights_gib"].scope is Scope.DEPLOYMENT


def test_a_log_of_another_model_on_the_same_gpu_still_sets_the_gpu_terms():
    cal = _cal_20k()
    other = Deployment(find_model("Qwen2.5-7B"), find_gpu("RTX3090"), 1, max_model_len=8192, engine="v0")
    plain, calibrated = plan_memory(other), plan_memory(apply_calibration(other, cal))
    assert calibrated.non_torch_gib == pytest.approx(0.35)  # the card's, from the log
    assert calibrated.weights_gib == plain.weights_gib  # the model's own: the log was of Llama
    assert not any(t.calibrated for t in calibrated.terms if t.name == "weights")


def test_a_calibration_for_another_gpu_changes_nothing():
    other = Deployment(find_model("Llama-3.1-8B"), find_gpu("A10"), 1, max_model_len=8192, engine="v0")
    assert (
        plan_memory(apply_calibration(other, _cal_20k())).kv_cache_tokens
        == plan_memory(other).kv_cache_tokens
    )


def test_v1_log_kv_bytes_agree_with_the_model_so_no_kv_correction_is_made():
    # LMCache#1739: Qwen3-14B, 6.51 GiB holds 42,656 tokens: 163,870 B/token; the model says 160 KiB
    dep = Deployment(find_model("Qwen3-14B"), find_gpu("A100-40G"), 1, max_model_len=32768)
    cal = calibrate(parse_startup_log(logs.V1_QWEN3_14B), dep)
    assert cal.kv_bytes_per_token is None
    plan = plan_memory(apply_calibration(dep, cal))
    assert plan.kv_cache_tokens == pytest.approx(42_656, rel=0.002)


def test_a_kv_line_of_more_tokens_than_bytes_is_refused_not_divided_by():
    # a corrupt token count gave 0 bytes a token: the calibration divided by it (ZeroDivisionError)
    dep = Deployment(find_model("Qwen3-14B"), find_gpu("A100-40G"), 1, max_model_len=32768)
    text = logs.V1_QWEN3_14B.replace("42,656 tokens", "10,000,000,000 tokens")
    with pytest.raises(SizingInputError, match=r"6\.51 GiB holds 10,000,000,000 tokens, under one"):
        calibrate(parse_startup_log(text), dep)


@settings(max_examples=25, deadline=None)
@given(util=st.floats(0.80, 0.97), seqs=st.sampled_from([32, 64, 128, 256]))
def test_v1_calibration_moves_only_by_the_models_differences(util, seqs):
    # At other gpu_memory_utilization and max_num_seqs the calibrated KV pool changes by exactly what vLLM's
    # own arithmetic changes: util x total, and the sampler's seqs x vocab buffers.
    dep = Deployment(find_model("Qwen3-14B"), find_gpu("A100-40G"), 1, max_model_len=32768)
    cal = calibrate(parse_startup_log(logs.V1_QWEN3_14B), dep)
    at_log = plan_memory(apply_calibration(dep, cal))
    moved = plan_memory(apply_calibration(replace(dep, gpu_memory_utilization=util, max_num_seqs=seqs), cal))
    plain_log, plain_moved = (
        plan_memory(dep),
        plan_memory(replace(dep, gpu_memory_utilization=util, max_num_seqs=seqs)),
    )
    delta_model = plain_moved.kv_cache_gib - plain_log.kv_cache_gib
    assert moved.kv_cache_gib - at_log.kv_cache_gib == pytest.approx(delta_model, abs=1e-6)


# vllm-project/vllm#20469: Qwen3-14B-AWQ on one A100 80GB, --enforce-eager, benchmark_serving.py at
# --max-concurrency 1, 16000 in / 200 out: the printed result, as its --save-result JSON names the fields.
BENCH_20469 = {
    "completed": 30,
    "total_input_tokens": 480000,
    "total_output_tokens": 6000,
    "mean_ttft_ms": 3345.37,
    "mean_tpot_ms": 20.63,
    "output_throughput": 26.84,
    "max_concurrency": 1,
}


def test_a_benchmark_calibrates_decode_and_prefill_of_its_deployment():
    dep = Deployment(
        find_model("Qwen3-14B-AWQ"),
        find_gpu("A100-80G"),
        1,
        max_model_len=16384,
        gpu_memory_utilization=0.95,
        max_num_seqs=30,
    )
    cal = calibrate(LogFacts(), dep, bench_from_json(BENCH_20469))  # the memory terms are not tested here
    calibrated = apply_calibration(dep, cal)
    perf = perf_for(calibrated, plan_memory(calibrated))
    assert perf.decode_tpot_s(16100) * 1000 == pytest.approx(20.63, rel=0.01)
    assert perf.prefill_s(16000, plan_memory(calibrated).max_num_batched_tokens) * 1000 == pytest.approx(
        3345.37, rel=0.01
    )
    # an eager run's launch costs stay with this deployment; the card's bandwidth share stays physical
    assert cal.bw_eff is not None and 0.5 <= cal.bw_eff <= 0.95
    assert cal.decode_time_scale is not None and cal.decode_time_scale > 1


def test_the_file_format_round_trips():
    cal = _cal_20k()
    back = calibration_from_dict(calibration_to_dict(cal))
    for name in ("model", "gpu", "tp", "dtype", "engine", "visible_gib", "non_torch_gib", "weights_gib"):
        assert (
            getattr(back, name) == pytest.approx(getattr(cal, name))
            if isinstance(getattr(cal, name), float)
            else getattr(back, name) == getattr(cal, name)
        )
    assert back.activation_scale == pytest.approx(cal.activation_scale, rel=1e-5)
    assert back.sampler_scale == 0.0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema": "other"}, "not a calibration file"),
        ({"tp": 0}, "'tp' must be a positive integer"),
        ({"gpu_terms": {"bogus": 1.0}}, "unknown term gpu_terms.bogus"),
        ({"gpu_terms": {"bw_eff": 1.5}}, r"bw_eff must be in \[0.5, 0.95\]"),
        ({"deployment_terms": {"kv_bytes_per_token": 0.5}}, "kv_bytes_per_token must be a whole number"),
        ({"deployment_terms": {"kv_bytes_per_token": 1234.5}}, "kv_bytes_per_token must be a whole number"),
        ({"gpu_terms": {"visible_gib": 100000}}, r"visible_gib must be in \[21.22, 25.94\] \(the RTX3090"),
        ({"deployment_terms": {"overhead_residual_gib": -1000}}, "overhead_residual_gib must be in"),
        ({"deployment_terms": {"weights_gib": 1e300}}, "weights_gib must be in"),
        ({"gpu_terms": {"non_torch_gib": 1e300}}, "non_torch_gib must be in"),
        ({"deployment_terms": {"activation_scale": 1e300}}, r"activation_scale must be in \[0.01, 100\]"),
        ({"deployment_terms": {"decode_time_scale": 1e-300}}, "decode_time_scale must be in"),
        ({"deployment_terms": {"sampler_scale": -0.5}}, r"sampler_scale must be in \[0, 100\]"),
        (
            {"gpu_terms": {"kv_bytes_per_token": 20000}},
            "gpu_terms.kv_bytes_per_token belongs under deployment",
        ),
        ({"gpu": "RTX3O90"}, "'gpu': unknown GPU 'RTX3O90'; nearest: RTX3090"),
        ({"dtype": "bfloat16"}, "'dtype' must be one of bf16"),
        ({"deployment_terms": {"weights_gib": -1}}, "must be positive"),
        ({"deployment_terms": {"weights_gib": float("nan")}}, "finite number"),
        ({"engine": "v2"}, "'engine' must be v0 or v1"),
    ],
)
def test_a_bad_calibration_file_is_refused_naming_the_field(change, message):
    doc = calibration_to_dict(_cal_20k()) | change
    with pytest.raises(SizingInputError, match=message):
        calibration_from_dict(doc)


@pytest.mark.parametrize(
    ("version", "refused"),
    [("0.19.0", True), ("0.11.0", True), ("0.10.2", False), ("0.1.dev9000+gabc", False), (None, False)],
)
def test_a_calibration_file_of_the_v0_engine_is_refused_with_a_release_that_has_none(version, refused):
    doc = calibration_to_dict(_cal_20k()) | {"engine": "v0", "vllm_version": version}
    if refused:
        with pytest.raises(SizingInputError, match="engine v0 with vLLM .*removed the V0 engine in 0.11.0"):
            calibration_from_dict(doc)
    else:
        assert calibration_from_dict(doc).engine == "v0"


def test_calibrating_a_v0_deployment_on_a_log_of_a_v1_only_release_is_refused():
    facts = replace(parse_startup_log(logs.V0_064_20K), vllm_version="0.19.0")
    with pytest.raises(SizingInputError, match="engine v0 with vLLM 0.19.0"):
        calibrate(facts, _rtx3090(20000))


def test_a_whole_kv_bytes_per_token_written_as_a_float_is_read_as_the_integer():
    doc = calibration_to_dict(_cal_20k())
    doc["deployment_terms"]["kv_bytes_per_token"] = 131072.0
    assert calibration_from_dict(doc).kv_bytes_per_token == 131072


def test_a_calibration_file_naming_its_gpu_by_an_alias_applies_to_that_gpu():
    doc = calibration_to_dict(_cal_20k()) | {"gpu": "rtx3090"}
    assert calibration_from_dict(doc).gpu == "RTX3090"


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "expected a JSON object"),
        ({"completed": 0, "mean_tpot_ms": 5}, "no completed requests"),
        ({"completed": 3}, "'mean_tpot_ms' missing"),
    ],
)
def test_a_bad_benchmark_json_is_refused(doc, message):
    with pytest.raises(SizingInputError, match=message):
        bench_from_json(doc)


def test_a_benchmark_of_one_model_sets_the_gpus_bandwidth_share_for_another():
    dep = Deployment(
        find_model("Qwen3-14B-AWQ"), find_gpu("A100-80G"), 1, max_model_len=16384, max_num_seqs=30
    )
    cal = calibrate(LogFacts(), dep, bench_from_json(BENCH_20469))
    other = apply_calibration(
        Deployment(find_model("Llama-3.1-8B"), find_gpu("A100-80G"), 1, max_model_len=8192), cal
    )
    perf = perf_for(other, plan_memory(other))
    assert perf.bw_eff == pytest.approx(cal.bw_eff)
    assert perf.decode_time_scale == 1.0  # the eager run's own launch costs stay with its deployment
    elsewhere = apply_calibration(
        Deployment(find_model("Llama-3.1-8B"), find_gpu("L20"), 1, max_model_len=8192), cal
    )
    assert perf_for(elsewhere, plan_memory(elsewhere)).bw_eff == pytest.approx(BW_EFF)


def _h100_l8b() -> Deployment:
    return Deployment(
        find_model("Llama-3.1-8B"), find_gpu("H100"), max_model_len=8192, gpu_memory_utilization=0.95
    )


def _v019_facts() -> LogFacts:
    # llm-d-planner accuracy/accuracy_report.md (vLLM 0.19.0, H100, util 0.95): Llama-3.1-8B's logged terms
    return LogFacts(
        vllm_version="0.19.0",
        engine="v1",
        total_gib=79.19,
        gpu_memory_utilization=0.95,
        weights_gib=14.99,
        non_torch_gib=0.25,
        activation_gib=1.89,
        kv_cache_gib=58.11,
        kv_cache_tokens=476_016,
    )


def test_a_calibration_carries_the_logged_release_and_its_cuda_graph_rule():
    dep = _h100_l8b()
    cal = calibrate(_v019_facts(), dep)
    plan = plan_memory(apply_calibration(dep, cal))
    assert not plan.cuda_graphs_in_util  # 0.19 captured its graphs outside util
    assert plan.kv_cache_gib == pytest.approx(58.11, abs=0.01)
    # a deployment that names its own release keeps it: the same terms on 0.27 lose the graph pool to util
    newer = plan_memory(apply_calibration(dep.with_(vllm_version="0.27.1"), cal))
    assert newer.cuda_graphs_in_util
    assert newer.kv_cache_gib == pytest.approx(58.11 - newer.cuda_graph_gib, abs=0.01)


def test_a_main_branch_build_counts_as_the_current_release():
    facts = replace(_v019_facts(), vllm_version="0.1.dev20073+g8e685d198")
    dep = _h100_l8b()
    plan = plan_memory(apply_calibration(dep, calibrate(facts, dep)))
    assert plan.cuda_graphs_in_util and plan.kv_cache_gib == pytest.approx(58.11, abs=0.01)


@pytest.mark.parametrize(("gpu", "side"), [("A100-80G", "less memory"), ("A10", "more memory")])
def test_a_log_of_another_card_is_refused_naming_the_cards_it_fits(gpu, side):
    # LMCache#1739 ran on an A100-40G: its weights and KV cache leave most of an 80 GB card unexplained and
    # overflow an A10; calibrating on either would write the difference into the overhead term
    dep = Deployment(find_model("Qwen3-14B"), find_gpu(gpu), 1, max_model_len=32768)
    with pytest.raises(SizingInputError, match=side) as refused:
        calibrate(parse_startup_log(logs.V1_QWEN3_14B), dep)
    assert "A100-40G" in str(refused.value) and "--gpu" in str(refused.value)


def test_a_v0_log_whose_total_memory_is_another_cards_is_refused():
    dep = Deployment(find_model("Llama-3.1-8B"), find_gpu("A100-80G"), 1, max_model_len=20000, engine="v0")
    with pytest.raises(SizingInputError, match=r"23\.58 GiB per GPU .*RTX3090"):
        calibrate(parse_startup_log(logs.V0_064_20K), dep)
