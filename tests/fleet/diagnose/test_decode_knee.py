"""The sizing model's time per token against the batch, and what a group without a TPOT SLO is judged by:
a batch at or past the decode knee (where TPOT reaches 1.5x its batch-1 value) on memory near its ceiling."""

from __future__ import annotations

import pytest
from diagnose_windows import make_window

from fleet.diagnose import fixes
from fleet.diagnose.model import Finding, GroupContext, Window
from fleet.diagnose.rules import diagnose

TP2_A10 = {"model": "Qwen2.5-14B", "instance_type": "ecs.gn7i-2x.8xlarge"}  # 2 x A10 over PCIe
A100_40G = {"model": "Llama-3.1-8B", "instance_type": "ecs.gn7-c12g1.3xlarge"}  # one A100-40G


@pytest.mark.parametrize(("group", "tokens_per_seq"), [(TP2_A10, 1300.0), (A100_40G, 600.0)])
def test_expected_tpot_never_falls_as_the_batch_grows(group: dict[str, str], tokens_per_seq: float) -> None:
    ctx = GroupContext(name="chat", **group)
    tpots = [fixes.expected_tpot_ms(ctx, n, tokens_per_seq) for n in range(1, 257)]
    assert all(t is not None for t in tpots)
    falls = [(n + 1, a, b) for n, (a, b) in enumerate(zip(tpots, tpots[1:], strict=False)) if b < a - 1e-9]
    assert not falls, falls[:3]


def test_the_knee_is_where_the_decode_step_reaches_1_5x_its_batch_1_time() -> None:
    ctx = GroupContext(name="chat", **A100_40G)
    knee = fixes.knee_batch(ctx, 600.0)
    assert knee is not None
    alone = fixes.expected_tpot_ms(ctx, 1, 600.0)
    at_knee = fixes.expected_tpot_ms(ctx, knee, 600.0)
    past = fixes.expected_tpot_ms(ctx, knee + 1, 600.0)
    assert alone is not None and at_knee is not None and past is not None
    assert at_knee <= fixes.KNEE_TPOT_FACTOR * alone < past


def _steady_decode(batch: float, tokens_per_seq: float, mem_busy_pct: float, tpot_ms: float) -> Window:
    """Four A100-40G instances decoding a batch held steady (no TPOT SLO, no queue): TPOT has nothing to
    correlate with, only the batch's size can say whether it slows the tokens."""
    d = fixes.deployment(GroupContext(name="chat", **A100_40G))
    assert d is not None
    return make_window(
        {
            "*": {
                "requests_running": batch,
                "kv_cache_usage_pct": 100.0 * batch * tokens_per_seq / d.kv_cache_tokens,
                "gpu_util_pct": 100.0,
                "gpu_mem_bw_util_pct": mem_busy_pct,
                "tpot_p99_ms": tpot_ms,
            }
        },
        group={**A100_40G, "max_num_seqs": 256},
    )


def _bandwidth(window: Window) -> Finding | None:
    found = [f for f in diagnose(window) if f.kind == "memory_bandwidth_bound"]
    return found[0] if found else None


def test_a_steady_batch_past_the_knee_without_a_tpot_slo_is_bandwidth_bound() -> None:
    ctx = GroupContext(name="chat", **A100_40G)
    knee = fixes.knee_batch(ctx, 600.0)
    assert knee is not None and knee < 200
    f = _bandwidth(_steady_decode(200.0, 600.0, 95.0, 30.0))
    assert f is not None
    past = f.evidence["instances"]["i-a"]["past_knee"]
    assert past["knee_batch"] == knee and past["batch"] == 200
    assert past["tpot_ms_expected"] >= fixes.KNEE_TPOT_FACTOR * past["tpot_ms_expected_batch_1"]
    assert f"latency knee of {knee}" in f.explanation and "no TPOT SLO" in f.explanation
    assert f"lower max_num_seqs from 256 to {knee}" in f.fix.lower()
    assert "until P99 TPOT meets its SLO" not in f.fix


def test_a_steady_batch_below_the_knee_without_a_tpot_slo_is_quiet() -> None:
    # memory as busy, but the batch is small enough that the weights, not the batch, set the time per token
    assert _bandwidth(_steady_decode(60.0, 600.0, 95.0, 16.0)) is None


def test_a_steady_batch_past_the_knee_with_memory_well_below_its_ceiling_is_quiet() -> None:
    assert _bandwidth(_steady_decode(200.0, 600.0, 60.0, 30.0)) is None


def test_a_kv_cache_reading_zero_under_a_running_batch_falls_back_to_the_token_mix() -> None:
    # 200 sequences running while kv_cache_usage_pct reads 0% (a gauge not updated yet, or a vLLM release
    # publishing it wrong): no sequence runs with no context, so the reading says nothing about the context
    # and the request mix (500 in, 200 out: 600 tokens a sequence halfway through) is used instead.
    w = _steady_decode(200.0, 600.0, 95.0, 30.0)
    for inst in w.instances:
        inst.metrics["kv_cache_usage_pct"] = [(t, 0.0) for t, _ in inst.metrics["kv_cache_usage_pct"]]
    w.group.prompt_tokens_mean, w.group.output_tokens_mean = 500.0, 200.0
    f = _bandwidth(w)
    assert f is not None
    past = f.evidence["instances"]["i-a"]["past_knee"]
    assert past["tokens_per_seq"] == 600
    assert past["knee_batch"] == fixes.knee_batch(GroupContext(name="chat", **A100_40G), 600.0)
