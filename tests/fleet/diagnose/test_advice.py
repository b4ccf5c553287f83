"""Fixes an SRE can act on (issue 21.3) and silence that is reported (issue 14.5)."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path

import pytest
from diagnose_windows import IDS, T0, make_window

from fleet.diagnose import fixes
from fleet.diagnose.model import windows_from_json
from fleet.diagnose.rules import diagnose

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "diagnose"
SIZED = {"model": "Qwen2.5-14B", "instance_type": "ecs.gn7i-2x.8xlarge"}


def _only(window, kind):
    found = [f for f in diagnose(window) if f.kind == kind]
    assert len(found) == 1, [f.kind for f in diagnose(window)]
    return found[0]


def test_falsely_busy_example_raises_max_num_seqs_toward_the_knee():
    # batch pinned at max_num_seqs 32, KV 18% used, ~35 waiting per node: the cap limits throughput
    window = windows_from_json(json.loads((EXAMPLES / "falsely-busy-queue.json").read_text()))[0]
    finding = _only(window, "queue_backlog")
    recommended = finding.evidence["max_num_seqs_recommended"]
    limits = finding.evidence["max_num_seqs_limits"]
    assert recommended > 32 and recommended == min(limits.values())
    assert limits["latency_knee"] > 32
    assert f"max_num_seqs from 32 to {recommended}" in finding.fix
    assert "keep max_num_seqs" not in finding.fix.lower()


def _pinned_window(max_num_seqs: int, kv_pct: float = 18.0, **group):
    def queue(k: int) -> float:
        return 60.0 * max(0.0, math.sin(2 * math.pi * k / 8))

    return make_window(
        {
            "*": {
                "gpu_util_pct": 99.0,
                "queue_waiting": queue,
                "requests_running": float(max_num_seqs),
                "kv_cache_usage_pct": kv_pct,
                "ttft_p99_ms": 9000.0,
                "request_rate_rps": 4.0,
            }
        },
        group={
            **SIZED,
            "max_num_seqs": max_num_seqs,
            "prompt_tokens_mean": 300,
            "output_tokens_mean": 120,
            **group,
        },
    )


def test_the_raised_batch_stays_within_what_the_kv_cache_holds():
    finding = _only(_pinned_window(32), "queue_backlog")
    kv_limit = finding.evidence["max_num_seqs_limits"]["kv_cache_90pct"]
    assert finding.evidence["max_num_seqs_recommended"] <= kv_limit


def test_a_tpot_slo_caps_the_raised_batch():
    loose = _only(_pinned_window(32), "queue_backlog").evidence["max_num_seqs_recommended"]
    tokens = 300 + 120 / 2  # no KV reading matched: the request mix
    ctx = make_window(group={**SIZED, "max_num_seqs": 32}).group
    tight_ms = fixes._tpot_ms(fixes.deployment(ctx), 48, tokens) / fixes.TPOT_MEAN_SHARE
    tight = _only(_pinned_window(32, slo_tpot_p99_ms=tight_ms), "queue_backlog").evidence
    assert 32 < tight["max_num_seqs_recommended"] < loose
    assert tight["max_num_seqs_recommended"] == tight["max_num_seqs_limits"]["tpot_slo"]


def test_a_batch_below_its_cap_gets_no_max_num_seqs_advice_to_keep_it():
    window = _pinned_window(32)
    for inst in window.instances:
        inst.metrics["requests_running"] = [(t, 12.0) for t, _ in inst.metrics["requests_running"]]
    finding = _only(window, "queue_backlog")
    assert "raise max_num_seqs" not in finding.fix and "keep max_num_seqs" not in finding.fix


# 0.01% of Qwen2.5-14B's 58,288-token cache on 2 x A10 is 6 tokens, under one 16-token block for each of the
# 32 running; without the sizing model (no model or instance type) only 0% is known to be no reading
@pytest.mark.parametrize(("kv_pct", "sized"), [(0.0, True), (0.01, True), (0.0, False)])
def test_an_implausible_kv_reading_under_a_pinned_batch_makes_the_raise_conditional(kv_pct, sized):
    # 32 running while the KV cache reads 0% (or under one block per running request): no reading of the
    # cache's room, so the advice to raise max_num_seqs must not say the cache had room
    window = _pinned_window(32, kv_pct=kv_pct, **({} if sized else {"model": None, "instance_type": None}))
    finding = _only(window, "queue_backlog")
    assert "raise max_num_seqs from 32" in finding.fix.lower()
    assert "if the KV cache has room" in finding.fix and "could not be judged" in finding.fix
    assert "% used" not in finding.fix
    assert finding.evidence["kv_cache_usage_pct_mean"] is None


def test_a_plausible_kv_reading_under_a_pinned_batch_says_the_cache_had_room():
    finding = _only(_pinned_window(32, kv_pct=18.0), "queue_backlog")
    assert "the KV cache was only 18% used" in finding.fix and "could not be judged" not in finding.fix
    assert finding.evidence["kv_cache_usage_pct_mean"] == 18.0


def test_thermal_fix_is_an_action_possible_on_ecs():
    window = make_window(
        {"i-b": {"gpu_temperature_c": 91.0, "gpu_sm_clock_ratio": 0.6, "gpu_throttle_reasons": 0x60}}
    )
    fix = _only(window, "thermal_throttling").fix
    assert "rack" not in fix and "density" not in fix
    assert "RedeployInstance" in fix and "RemoveInstances" in fix and "ReportInstancesStatus" in fix


def test_power_fix_names_no_rack_or_power_domain_change():
    window = make_window(
        {"i-c": {"gpu_throttle_reasons": 0x4, "gpu_sm_clock_ratio": 0.7, "gpu_temperature_c": 60.0}}
    )
    fix = _only(window, "power_throttling").fix
    assert "density" not in fix and "rack" not in fix and "ReportInstancesStatus" in fix


def _bandwidth_window(source: str):
    window = make_window(
        {"*": {"gpu_mem_bw_util_pct": 94.0, "tpot_p99_ms": 60.0}}, group={"slo_tpot_p99_ms": 50.0}
    )
    window.source = source
    return window


def test_bandwidth_on_cloudmonitor_is_named_memory_busy_time():
    finding = _only(_bandwidth_window("cloudmonitor"), "memory_bandwidth_bound")
    assert finding.evidence["signal"] == "nvml_memory_busy_pct"
    assert "busy time" in finding.explanation and "overstates" in finding.explanation


def test_bandwidth_on_prometheus_is_dcgm_dram_activity():
    finding = _only(_bandwidth_window("prometheus"), "memory_bandwidth_bound")
    assert finding.evidence["signal"] == "dcgm_dram_active_pct"
    assert "DRAM" in finding.explanation and "overstates" not in finding.explanation


def test_instances_publishing_nothing_at_all_are_metrics_missing_even_within_cold_start():
    # freshly launched, no agent and no CloudMonitor GPU plugin: silence must not read as "all is well"
    end = T0 + timedelta(minutes=8)
    window = make_window(
        drop={"*": tuple(make_window().instances[0].metrics)},
        created={i: end - timedelta(seconds=60) for i in IDS},
    )
    found = diagnose(window)
    assert [f.kind for f in found] == ["metrics_missing"]
    assert found[0].scope == sorted(IDS)
    assert set(found[0].evidence["missing"]) >= {"queue_waiting", "requests_running", "gpu_util_pct"}
    assert found[0].evidence["within_cold_start"] == sorted(IDS)


def test_new_instances_still_loading_beside_publishing_ones_are_not_missing():
    window = make_window(first_sample={"i-d": 40}, created={"i-d": T0 + timedelta(minutes=7)})
    assert "metrics_missing" not in [f.kind for f in diagnose(window)]
