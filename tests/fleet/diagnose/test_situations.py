"""Situations an operator meets that the rules were not built around: each must get the cause that fixes it
(or none, or a clear note of what is missing), not the nearest look-alike."""

from __future__ import annotations

from diagnose_windows import make_window

from fleet.diagnose.model import Finding, Window
from fleet.diagnose.rules import diagnose

SIZED = {"model": "Qwen2.5-14B", "instance_type": "ecs.gn7i-2x.8xlarge"}  # 2 x A10, 48,896 KV tokens


def findings(window: Window) -> list[Finding]:
    return diagnose(window)


def test_kv_cache_full_with_preemptions_at_max_num_seqs_is_kv_pressure() -> None:
    # The batch reached max_num_seqs too, but vLLM preempted: the KV cache, not the cap, is what ran out.
    w = make_window(
        {
            "*": {
                "requests_running": 62.0,
                "queue_waiting": 8.0,
                "kv_cache_usage_pct": 97.0,
                "gpu_util_pct": 100.0,
                "ttft_p99_ms": 5000.0,
                "preemptions": 3.0,
            }
        },
        group={**SIZED, "max_num_seqs": 64},
    )
    found = findings(w)
    assert [f.kind for f in found] == ["kv_cache_pressure"]
    f = found[0]
    assert "preempted" in f.explanation and "max_num_seqs would not help" in f.explanation
    assert "--kv-cache-dtype fp8" in f.fix and "--max-model-len" in f.fix
    assert "raise max_num_seqs" not in f.fix.lower()


def _at_cap(queue: object, kv_pct: float, group: dict[str, object]) -> Window:
    """Four instances whose batch sits at max_num_seqs 64 while requests wait, GPUs at 100%."""
    return make_window(
        {
            "*": {
                "requests_running": 64.0,
                "queue_waiting": queue,  # type: ignore[dict-item]
                "kv_cache_usage_pct": kv_pct,
                "gpu_util_pct": 100.0,
                "ttft_p99_ms": 6000.0,
                "request_rate_rps": 2.0,
            }
        },
        group={"max_num_seqs": 64, **group},
    )


def _growing(k: int) -> float:
    return 2.0 + 1.5 * k


def test_a_growing_queue_behind_a_batch_held_at_max_num_seqs_says_raise_it_not_buy_instances() -> None:
    found = findings(_at_cap(_growing, 30.0, SIZED))
    assert [f.kind for f in found] == ["queue_backlog"]
    f = found[0]
    assert f.fix.startswith("Raise max_num_seqs from 64 to ")
    assert f.evidence["max_num_seqs_recommended"] > 64
    assert "bigger card would not help" in f.explanation


def test_a_batch_held_at_max_num_seqs_without_a_sized_model_still_says_raise_it() -> None:
    for queue in (10.0, _growing):
        found = findings(_at_cap(queue, 30.0, {}))
        assert [f.kind for f in found] == ["queue_backlog"], queue
        assert found[0].fix.startswith("Raise max_num_seqs from 64: the batch sat at the cap")
        assert "--model and --instance-type" in found[0].fix


def test_a_growing_queue_at_max_num_seqs_with_the_kv_cache_full_is_an_undersized_fleet() -> None:
    # no room in the KV cache for a larger batch: more instances are the fix
    found = findings(_at_cap(_growing, 95.0, SIZED))
    assert [f.kind for f in found] == ["undersized_fleet"]


def test_latency_metrics_missing_everywhere_is_said_not_read_as_health() -> None:
    found = findings(make_window(drop={"*": ("ttft_p99_ms", "tpot_p99_ms", "e2e_p99_ms")}, group=SIZED))
    assert [f.kind for f in found] == ["metrics_missing"]
    f = found[0]
    assert set(f.evidence["missing"]) == {"ttft_p99_ms", "tpot_p99_ms"}
    assert f.evidence["missing"]["ttft_p99_ms"] == ["i-a", "i-b", "i-c", "i-d"]
    assert "not a sign of health" in f.explanation and "vllm:time_to_first_token_seconds" in f.fix


def test_gpu_utilization_missing_under_a_queue_is_named_as_what_kept_the_cause_unseen() -> None:
    w = make_window(
        {"*": {"queue_waiting": 10.0, "ttft_p99_ms": 5000.0}}, drop={"*": ("gpu_util_pct",)}, group=SIZED
    )
    found = {f.kind: f for f in findings(w)}
    assert set(found) == {"metrics_missing", "slo_violated_unexplained"}
    assert list(found["metrics_missing"].evidence["missing"]) == ["gpu_util_pct"]
    slo = found["slo_violated_unexplained"]
    assert "GPU utilization was not published" in slo.explanation
    assert "where these metrics do not look" not in slo.explanation
    assert slo.fix.startswith("Publish GPU utilization first")


def test_a_signal_missing_on_one_instance_only_is_not_reported() -> None:
    assert findings(make_window(drop={"i-b": ("ttft_p99_ms", "gpu_util_pct")}, group=SIZED)) == []


def test_a_healthy_sized_fleet_has_no_findings() -> None:
    for group in (SIZED, {**SIZED, "max_num_seqs": 64, "slo_tpot_p99_ms": 100.0}, {}):
        assert findings(make_window(group=group)) == [], group


def _long_prompts(prompt_tokens: float, **group: object) -> Window:
    """Low load (two running, no queue, GPUs 60% busy) with P99 TTFT at 6 s against the 2 s SLO."""
    return make_window(
        {
            "*": {
                "requests_running": 2.0,
                "kv_cache_usage_pct": 20.0,
                "gpu_util_pct": 60.0,
                "gpu_mem_bw_util_pct": 30.0,
                "ttft_p99_ms": 6000.0,
                "tpot_p99_ms": 40.0,
                "request_rate_rps": 0.2,
            }
        },
        group={**SIZED, "prompt_tokens_mean": prompt_tokens, "output_tokens_mean": 100, **group},
    )


def test_prompts_whose_idle_prefill_exceeds_the_slo_are_named_as_the_cause() -> None:
    from fleet.diagnose.fixes import idle_latency_ms

    w = _long_prompts(16000)
    idle = idle_latency_ms(w.group)
    assert idle is not None and idle["prefill_ms"] > 2000.0
    found = findings(w)
    assert [f.kind for f in found] == ["slo_violated_unexplained"]
    f = found[0]
    assert "the prompts' length, not the load, sets this TTFT" in f.explanation
    assert f.fix.startswith("Look at the prompts first: ")
    assert "misses the SLO at any load" in f.fix and "only prompts that much longer" not in f.fix
    # the chunked-prefill budget is not what makes it long (sizing: fewer, larger chunks gain < 10%)
    assert idle["prefill_ms_budget_x4"] > 0.9 * idle["prefill_ms"]
    assert "a larger chunked-prefill budget would not help" in f.fix


def test_the_groups_chunked_prefill_budget_is_the_one_reasoned_about() -> None:
    # The group runs vLLM with --max-num-batched-tokens 512, not the sizing default (2,048 on an A10): the
    # prefill and the budget advice are worked out at 512 and name it.
    from fleet.diagnose.fixes import idle_latency_ms

    default, small = _long_prompts(16000), _long_prompts(16000, max_num_batched_tokens=512)
    idle, idle_small = idle_latency_ms(default.group), idle_latency_ms(small.group)
    assert idle is not None and idle_small is not None
    assert idle_small["max_num_batched_tokens"] == 512 and idle["max_num_batched_tokens"] == 2048
    assert idle_small["prefill_ms"] > idle["prefill_ms"]  # more, smaller chunks
    f = findings(small)[0]
    assert "with max_num_batched_tokens 2048 instead of 512" in f.fix
    assert f"prompt in {idle_small['prefill_ms']:.0f} ms on an idle" in f.fix


def test_short_prompts_keep_the_look_elsewhere_advice() -> None:
    f = findings(_long_prompts(1000))[0]
    assert f.kind == "slo_violated_unexplained"
    assert "where these metrics do not look" in f.explanation
    assert "only prompts that much longer reach the SLO" in f.fix and "chunked-prefill" not in f.fix


def test_the_prompt_advice_is_given_once() -> None:
    for prompt in (1000, 16000):
        f = findings(_long_prompts(prompt))[0]
        assert f.fix.count("prefills a mean") == 1 and "gives a mean prompt's prefill time" not in f.fix
    f = findings(make_window({"*": {"ttft_p99_ms": 6000.0}}))[0]  # no sizing model: the generic advice
    assert f.fix.count("compare prompt lengths with the TTFT SLO") == 1


def test_a_queue_on_one_instance_while_its_peers_have_none_says_spread_the_load_not_scale_out() -> None:
    w = make_window(
        {
            "i-a": {
                "queue_waiting": 20.0,
                "requests_running": 64.0,
                "gpu_util_pct": 100.0,
                "ttft_p99_ms": 9000.0,
                "request_rate_rps": 2.0,
            }
        },
        group=SIZED,
    )
    backlog = [f for f in findings(w) if f.kind == "queue_backlog"]
    assert len(backlog) == 1 and backlog[0].scope == ["i-a"]
    f = backlog[0]
    assert f.fix.startswith("Spread the requests: 3 of 4 instance(s) had no queue")
    assert f.evidence["instances_without_queue"] == ["i-b", "i-c", "i-d"]
    assert "scale out" not in f.fix and "max_num_seqs" not in f.fix


def test_a_tpot_far_above_what_the_hardware_gives_at_the_batch_points_at_the_engine() -> None:
    ctx = make_window(group=SIZED).group
    w = make_window({"*": {"tpot_p99_ms": 120.0}}, group={**SIZED, "slo_tpot_p99_ms": 60.0})
    found = findings(w)
    assert [f.kind for f in found] == ["slo_violated_unexplained"]
    f = found[0]
    at = f.evidence["tpot_expected_at_batch"]
    assert at["batch"] == 8 and at["measured_over_expected"] >= 2.0
    assert at["tpot_ms_expected"] < 60.0 and ctx.model == "Qwen2.5-14B"
    assert "the engine runs slower than this hardware allows" in f.fix and "--enforce-eager" in f.fix


def test_a_tpot_near_what_the_model_expects_keeps_the_batch_1_figure() -> None:
    w = make_window({"*": {"tpot_p99_ms": 70.0}}, group={**SIZED, "slo_tpot_p99_ms": 40.0})
    f = findings(w)[0]
    assert (
        f.kind == "slo_violated_unexplained"
        and f.evidence["tpot_expected_at_batch"]["measured_over_expected"] < 2
    )
    assert "decodes one request alone at" in f.fix and "slower than this hardware" not in f.fix
