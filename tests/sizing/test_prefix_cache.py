"""Automatic prefix caching as a given hit share: cached prompt tokens are held in the KV cache but never
computed, in the engine, the closed form and `fleet size`."""

from __future__ import annotations

import pytest

from sizing import Deployment, InstanceEngine, SizingInputError, find_gpu, find_model, perf_for, plan_memory
from sizing.latency import Workload, capacity_estimate, simulate


def _dep(model="Qwen2.5-7B", gpu="A10", **kw):
    return Deployment(model=find_model(model), gpu=find_gpu(gpu), max_model_len=8192, **kw)


def _first_token_and_kv(cached):
    engine = InstanceEngine(_dep())
    engine.submit("r", 0.0, 6000, 200, cached_tokens=cached)
    engine.first_tokens = []
    t = 0.0
    while not engine.first_tokens:
        t += 0.01
        engine.advance(t)
    return engine.first_tokens[0], engine.kv_usage


def test_a_cached_prefix_is_held_in_the_kv_cache_but_not_computed():
    ttft_cold, kv_cold = _first_token_and_kv(0)
    ttft_warm, kv_warm = _first_token_and_kv(4000)
    assert ttft_warm < 0.6 * ttft_cold  # two thirds of the prompt was not prefilled
    assert kv_warm == pytest.approx(kv_cold, rel=0.01)  # but its KV is there all the same


def test_the_hit_is_whole_blocks_and_never_the_last_token():
    engine = InstanceEngine(_dep())
    engine.submit("whole", 0.0, 96, 10, cached_tokens=96)
    engine.submit("partial", 0.0, 100, 10, cached_tokens=37)
    seqs = {s.rid: s for _, _, s in engine._pending}
    assert engine._cached_of(seqs["whole"]) == 80  # the last token is computed, so its block is too
    assert engine._cached_of(seqs["partial"]) == 32  # two 16-token blocks


def test_a_prefix_hit_raises_what_one_instance_serves_and_lowers_ttft():
    dep = _dep()
    plan = plan_memory(dep)
    perf = perf_for(dep, plan)
    cold, _ = capacity_estimate(plan, perf, 3000, 200)
    warm, _ = capacity_estimate(plan, perf, 3000, 200, prefix_hit_share=0.6)
    assert warm > 1.3 * cold
    load = Workload(qps=cold * 0.8, prompt_tokens=3000, output_tokens=200)
    hit = Workload(qps=cold * 0.8, prompt_tokens=3000, output_tokens=200, prefix_hit=0.6)
    warm_p99 = simulate(dep, hit, num_requests=300).ttft_p99_ms
    assert warm_p99 < simulate(dep, load, num_requests=300).ttft_p99_ms


def test_a_linear_attention_hybrid_gets_no_prefix_hit():
    from sizing import model_from_hf_config
    from tests.sizing.test_sliding_window_and_mxfp4 import QWEN3_NEXT

    dep = Deployment(model=model_from_hf_config(QWEN3_NEXT), gpu=find_gpu("H20"), tp=2, max_model_len=65536)
    plan = plan_memory(dep)
    perf = perf_for(dep, plan)
    assert capacity_estimate(plan, perf, 3000, 200, prefix_hit_share=0.6) == capacity_estimate(
        plan, perf, 3000, 200
    )


@pytest.mark.parametrize("share", [-0.1, 1.0, float("nan")])
def test_a_hit_share_outside_zero_to_one_is_refused(share):
    with pytest.raises(SizingInputError, match="prefix hit"):
        Workload(qps=1.0, prefix_hit=share)


def test_a_traces_prefix_share_counts_the_blocks_an_earlier_prompt_began_with():
    from sizing.traces import parse_trace

    rows = [
        '{"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [1, 2]}',
        '{"timestamp": 1, "input_length": 1500, "output_length": 5, "hash_ids": [1, 2, 3]}',  # 1024 repeat
        '{"timestamp": 2, "input_length": 700, "output_length": 5, "hash_ids": [4, 2]}',  # a new first block
        '{"timestamp": 3, "input_length": 300, "output_length": 5, "hash_ids": [1]}',  # 300 of its 300
    ]
    assert parse_trace("\n".join(rows), "m", jsonl=True)[1] == pytest.approx(
        (1024 + 300) / (1024 + 1500 + 700 + 300)
    )
    plain = '{"timestamp": 0, "input_length": 10, "output_length": 5}'
    assert parse_trace(plain + "\n" + plain, "m", jsonl=True)[1] is None
