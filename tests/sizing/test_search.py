"""The SLO-aware search over instance types x TP x max_num_seqs."""

from __future__ import annotations

import pytest

from sizing import SizingInputError, find_gpu, find_instance, find_model, price_book
from sizing.latency import Workload
from sizing.search import SLO, Settings, search, vllm_command

MODEL = find_model("Qwen2.5-7B")
LOAD = Workload(qps=4.0, prompt_tokens=1000, output_tokens=200)
SETTINGS = Settings(max_model_len=8192)


@pytest.fixture(scope="module")
def result():
    return search(MODEL, settings=SETTINGS, workload=LOAD, slo=SLO(2000, 100), prices=price_book())


def test_the_best_option_meets_both_slos_in_simulation(result):
    best = result.best
    assert best is not None and not best.estimated
    assert best.report.ttft_p99_ms <= 2000 and best.report.tpot_p99_ms <= 100


def test_every_other_option_says_why_it_lost(result):
    assert all(c.reason for c in result.candidates[1:])


def test_no_verified_option_that_meets_the_slos_is_cheaper_than_the_best(result):
    best = result.best
    cheaper = [
        c
        for c in result.candidates
        if c.meets_slo and not c.estimated and c.cost_cny_per_hour < best.cost_cny_per_hour
    ]
    assert cheaper == []


def test_options_whose_weights_do_not_fit_are_rejected_as_such():
    big = search(find_model("Qwen2.5-72B"), settings=Settings(max_model_len=4096), prices=price_book())
    t4 = [c for c in big.candidates if c.instance_type == "ecs.gn6i-c4g1.xlarge"]
    assert t4 and not t4[0].fits and t4[0].reason.startswith("does not fit")


def test_a_tp_that_does_not_divide_the_heads_is_rejected_as_impossible(result):
    tp8 = [c for c in result.candidates if c.tp == 8]
    assert tp8 and all(c.reason.startswith("impossible") for c in tp8)  # 28 heads


def test_the_count_covers_the_load_at_the_per_engine_rate_simulated(result):
    best = result.best
    assert best.replicas == best.instances * best.replicas_per_instance
    assert best.report.rate_rps == pytest.approx(LOAD.rate / best.replicas)


def test_the_winner_has_headroom_and_a_queue_limit(result):
    best = result.best
    assert best.headroom_pct is not None and best.headroom_pct >= 0
    assert best.queue_limit >= 1
    assert best.queue_limit == int(
        best.capacity_rps * 2.0
    )  # requests one engine clears within the 2 s TTFT SLO


def test_more_load_needs_at_least_as_many_gpus():
    slo = SLO(2000, 100)
    pool = [find_instance("gn7i-c8g1.2xlarge")]
    small = search(
        MODEL, settings=SETTINGS, workload=LOAD.with_qps(2.0), slo=slo, prices=price_book(), instances=pool
    ).best
    large = search(
        MODEL, settings=SETTINGS, workload=LOAD.with_qps(8.0), slo=slo, prices=price_book(), instances=pool
    ).best
    assert large.instances > small.instances


def test_an_unreachable_tpot_slo_leaves_no_best_and_says_so():
    res = search(
        MODEL,
        settings=SETTINGS,
        workload=LOAD,
        slo=SLO(None, 1.0),
        prices=price_book(),
        instances=[find_instance("gn7i-c8g1.2xlarge")],
    )
    assert res.best is None
    assert res.candidates[0].reason.startswith("SLO missed")


def test_a_fixed_max_num_seqs_is_kept():
    res = search(
        MODEL,
        settings=Settings(max_model_len=8192, max_num_seqs=48),
        workload=LOAD,
        slo=SLO(2000, 100),
        prices=price_book(),
        instances=[find_instance("gn7i-c8g1.2xlarge")],
    )
    assert res.best.max_num_seqs == 48 and res.best.vllm_args()["max_num_seqs"] == 48


def test_without_a_load_options_are_ranked_by_hourly_price():
    res = search(MODEL, settings=SETTINGS, prices=price_book())
    fitting = [c for c in res.candidates if c.fits]
    prices = [c.price_cny_per_hour for c in fitting]
    assert prices[0] == min(prices)
    assert all(c.reason.startswith("dearer") for c in fitting[1:])


def test_a_bare_gpu_is_evaluated_at_tp_1_without_a_price():
    res = search(MODEL, settings=SETTINGS, gpu=find_gpu("L20"))
    [c] = res.candidates
    assert c.instance_type is None and c.tp == 1 and c.fits and c.price_cny_per_hour is None


def test_an_instance_type_with_fewer_gpus_than_the_tp_is_refused():
    with pytest.raises(SizingInputError, match="impossible TP"):
        search(
            MODEL,
            settings=Settings(tp=2, max_model_len=8192),
            instances=[find_instance("gn7i-c8g1.2xlarge")],
            prices=price_book(),
        )


def test_the_vllm_command_line_carries_the_chosen_settings(result):
    args = result.best.vllm_args()
    cmd = vllm_command(args)
    assert cmd.startswith("vllm serve Qwen/Qwen2.5-7B-Instruct ")
    assert f"--max-num-seqs {result.best.max_num_seqs}" in cmd and "--max-model-len 8192" in cmd


def test_a_quantised_checkpoint_is_served_with_its_quantization_flag():
    res = search(find_model("Qwen2.5-7B-Instruct-AWQ"), settings=SETTINGS, gpu=find_gpu("A10"))
    assert res.candidates[0].vllm_args()["quantization"] == "awq"


def test_the_json_of_a_candidate_has_every_documented_field(result):
    doc = result.to_json()
    fields = {
        "instance_type",
        "gpu",
        "gpus",
        "tp",
        "fits",
        "weights_gib",
        "kv_cache_gib",
        "kv_cache_tokens",
        "activation_gib",
        "non_torch_gib",
        "max_concurrency",
        "max_model_len",
        "decode_tpot_ms",
        "prefill_tokens_per_s",
        "vllm_args",
        "reason",
        "instances",
        "p99_ttft_ms",
        "p99_tpot_ms",
        "cost_cny_per_hour",
        "cost_cny_per_million_tokens",
    }
    assert all(fields <= set(c) for c in doc["candidates"])


def test_without_slos_the_count_still_carries_the_load():
    pool = [find_instance("gn7i-c8g1.2xlarge")]
    res = search(MODEL, settings=SETTINGS, workload=LOAD.with_qps(8.0), prices=price_book(), instances=pool)
    best = res.best
    assert best is not None and best.report.stable and best.instances >= 2
