"""The analysis core on synthetic windows: each rule fires on its cause and stays quiet on a near miss."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from diagnose_windows import HEALTHY, IDS, T0, make_window

from fleet.diagnose.model import GroupContext, Window
from fleet.diagnose.rules import KINDS, diagnose

SIZED = {"model": "Qwen2.5-14B", "instance_type": "ecs.gn7i-2x.8xlarge"}


def kinds(window: Window) -> list[str]:
    return [f.kind for f in diagnose(window)]


def oscillating(k: int) -> float:
    """A queue that fills in bursts and drains between them (period eight samples)."""
    return 60.0 * max(0.0, math.sin(2 * math.pi * k / 8))


# (name, expected kind, window arguments that produce it)
FIRING: list[tuple[str, str, dict]] = [
    (
        "hot GPU with its clock cut",
        "thermal_throttling",
        {
            "changes": {
                "i-b": {
                    "gpu_temperature_c": 91.0,
                    "gpu_sm_clock_ratio": 0.6,
                    "gpu_throttle_reasons": 0x60,
                    "tpot_p99_ms": 110.0,
                }
            }
        },
    ),
    (
        "power cap holding the clock down on a cool GPU",
        "power_throttling",
        {
            "changes": {
                "i-c": {
                    "gpu_throttle_reasons": 0x4,
                    "gpu_sm_clock_ratio": 0.7,
                    "gpu_temperature_c": 60.0,
                    "tpot_p99_ms": 100.0,
                }
            }
        },
    ),
    (
        "one node three times slower per token",
        "node_outlier",
        {"changes": {"i-d": {"tpot_p99_ms": 210.0}}},
    ),
    (
        "KV cache full while requests wait and the batch is small",
        "kv_cache_pressure",
        {
            "changes": {
                "*": {
                    "kv_cache_usage_pct": 96.0,
                    "queue_waiting": 12.0,
                    "requests_running": 9.0,
                    "ttft_p99_ms": 9000.0,
                    "gpu_util_pct": 99.0,
                }
            },
            "group": SIZED,
        },
    ),
    (
        "bandwidth above 90% and TPOT over its SLO",
        "memory_bandwidth_bound",
        {
            "changes": {"*": {"gpu_mem_bw_util_pct": 94.0, "tpot_p99_ms": 60.0}},
            "group": {"slo_tpot_p99_ms": 45.0},
        },
    ),
    (
        # 2 x A10 at TP 2: the PCIe all-reduces keep a bandwidth-limited decode at ~84% memory busy (sizing)
        "memory busy near a TP 2 deployment's decode ceiling and TPOT over its SLO",
        "memory_bandwidth_bound",
        {
            "changes": {
                "*": {
                    "gpu_mem_bw_util_pct": 80.0,
                    "tpot_p99_ms": 55.0,
                    "requests_running": 66.0,
                    "kv_cache_usage_pct": 67.0,
                }
            },
            "group": {**SIZED, "slo_tpot_p99_ms": 45.0},
        },
    ),
    (
        "saturated GPUs and queues growing all through the window",
        "undersized_fleet",
        {
            "changes": {
                "*": {
                    "gpu_util_pct": 99.0,
                    "queue_waiting": lambda k: 4.0 + 2.0 * k,
                    "ttft_p99_ms": 9000.0,
                    "request_rate_rps": 4.0,
                }
            }
        },
    ),
    (
        "saturated GPUs, queues at the gateway's limit",
        "undersized_fleet",
        {
            "changes": {
                "*": {
                    "gpu_util_pct": 99.0,
                    "queue_waiting": 63.0,
                    "ttft_p99_ms": 12000.0,
                    "request_rate_rps": 4.0,
                }
            }
        },
    ),
    (
        "saturated GPUs with a queue that builds and drains in bursts",
        "queue_backlog",
        {
            "changes": {
                "*": {
                    "gpu_util_pct": 99.0,
                    "queue_waiting": oscillating,
                    "ttft_p99_ms": 9000.0,
                    "request_rate_rps": 4.0,
                }
            }
        },
    ),
    (
        "SLO broken while scaled-out instances load",
        "cold_start",
        {
            "ids": ("i-a", "i-b", "i-new1", "i-new2"),
            "created": {"i-new1": T0 + timedelta(seconds=30), "i-new2": T0 + timedelta(seconds=30)},
            "first_sample": {"i-new1": 17, "i-new2": 17},  # 270 s after creation: the cold start
            "changes": {
                "i-a": {
                    "ttft_p99_ms": lambda k: 9000.0 if 2 <= k < 18 else 1300.0,
                    "queue_waiting": lambda k: 30.0 if 2 <= k < 18 else 0.0,
                },
                "i-b": {
                    "ttft_p99_ms": lambda k: 9000.0 if 2 <= k < 18 else 1300.0,
                    "queue_waiting": lambda k: 30.0 if 2 <= k < 18 else 0.0,
                },
            },
            "scale_outs": [(T0 + timedelta(seconds=30), 2, 4)],
            "group": {"warm_floor": 2},
        },
    ),
    (
        "node agent silent on every instance",
        "metrics_missing",
        {
            "drop": {
                "*": (
                    "queue_waiting",
                    "requests_running",
                    "kv_cache_usage_pct",
                    "ttft_p99_ms",
                    "tpot_p99_ms",
                    "e2e_p99_ms",
                    "latency_p95_ms",
                    "gpu_throttle_reasons",
                    "gpu_sm_clock_ratio",
                    "gpu_mem_bw_util_pct",
                    "gpu_xid",
                    "request_rate_rps",
                )
            }
        },
    ),
    (
        "P99 TTFT three times its SLO on busy GPUs without a queue",
        "slo_violated_unexplained",
        {"changes": {"*": {"gpu_util_pct": 100.0, "ttft_p99_ms": 6000.0}}},
    ),
]

FIRING.append(
    (
        "hardware XID 79 on one GPU",
        "gpu_xid_error",
        {"changes": {"i-c": {"gpu_xid": lambda k: 79.0 if k >= 20 else 0.0}}},
    )
)

# (name, kind that must not be reported, window arguments: a near miss of that kind's cause)
QUIET: list[tuple[str, str, dict]] = [
    (
        "an application XID (13)",
        "gpu_xid_error",
        {"changes": {"i-c": {"gpu_xid": lambda k: 13.0 if k == 20 else 0.0}}},
    ),
    ("84 C with full clocks", "thermal_throttling", {"changes": {"i-b": {"gpu_temperature_c": 84.0}}}),
    (
        "power-cap bit at full clocks (normal at the power limit)",
        "power_throttling",
        {"changes": {"i-c": {"gpu_throttle_reasons": 0x4, "gpu_sm_clock_ratio": 0.97}}},
    ),
    ("one node 1.7x slower per token", "node_outlier", {"changes": {"i-d": {"tpot_p99_ms": 120.0}}}),
    (
        "KV cache full but nothing waits",
        "kv_cache_pressure",
        {"changes": {"*": {"kv_cache_usage_pct": 96.0, "queue_waiting": 0.0}}},
    ),
    (
        "bandwidth above 90% with TPOT within its SLO",
        "memory_bandwidth_bound",
        {
            "changes": {"*": {"gpu_mem_bw_util_pct": 94.0, "tpot_p99_ms": 40.0}},
            "group": {"slo_tpot_p99_ms": 45.0},
        },
    ),
    (
        "memory busy well below a TP 2 deployment's decode ceiling with TPOT over its SLO",
        "memory_bandwidth_bound",
        {
            "changes": {
                "*": {
                    "gpu_mem_bw_util_pct": 70.0,
                    "tpot_p99_ms": 55.0,
                    "requests_running": 66.0,
                    "kv_cache_usage_pct": 67.0,
                }
            },
            "group": {**SIZED, "slo_tpot_p99_ms": 45.0},
        },
    ),
    (
        "bursty queue that drains (not a fleet too small)",
        "undersized_fleet",
        {"changes": {"*": {"gpu_util_pct": 99.0, "queue_waiting": oscillating, "ttft_p99_ms": 9000.0}}},
    ),
    (
        "a standing queue while TTFT meets the SLO",
        "queue_backlog",
        {"changes": {"*": {"gpu_util_pct": 99.0, "queue_waiting": oscillating, "ttft_p99_ms": 1200.0}}},
    ),
    (
        "scale-out absorbed without SLO violations",
        "cold_start",
        {
            "ids": ("i-a", "i-b", "i-new1", "i-new2"),
            "created": {"i-new1": T0 + timedelta(seconds=30), "i-new2": T0 + timedelta(seconds=30)},
            "first_sample": {"i-new1": 17, "i-new2": 17},
            "scale_outs": [(T0 + timedelta(seconds=30), 2, 4)],
        },
    ),
    (
        "an instance still loading has no metrics yet",
        "metrics_missing",
        {
            "ids": ("i-a", "i-b", "i-c", "i-new"),
            "created": {"i-new": T0 + timedelta(minutes=6)},
            "first_sample": {"i-new": 10_000},
        },
    ),
    (
        "P99 TTFT a little over its SLO, nothing else wrong",
        "slo_violated_unexplained",
        {"changes": {"*": {"ttft_p99_ms": 2500.0}}},
    ),
]


@pytest.mark.parametrize(("name", "kind", "args"), FIRING, ids=[c[0] for c in FIRING])
def test_rule_fires_on_its_cause_and_nothing_else(name, kind, args):
    assert kinds(make_window(**args)) == [kind]


@pytest.mark.parametrize(("name", "kind", "args"), QUIET, ids=[c[0] for c in QUIET])
def test_rule_stays_quiet_on_a_near_miss(name, kind, args):
    assert kind not in kinds(make_window(**args))


def test_every_kind_has_a_firing_and_a_quiet_case():
    assert {k for _, k, _ in FIRING} == set(KINDS)
    assert {k for _, k, _ in QUIET} == set(KINDS)


def test_healthy_window_has_no_findings():
    assert diagnose(make_window()) == []


def test_window_without_any_metrics_reports_metrics_missing():
    w = make_window(drop={"*": tuple(make_window().instances[0].metrics)})
    found = diagnose(w)
    assert [f.kind for f in found] == ["metrics_missing"]
    assert sorted(found[0].scope) == sorted(IDS)


def test_group_without_instances_reports_metrics_missing():
    w = make_window(ids=())
    assert kinds(w) == ["metrics_missing"]


def test_agent_stopped_mid_window_is_reported_with_when():
    w = make_window(
        changes={
            "i-a": {
                name: (lambda k, v=v: v if k < 10 else None)
                for name, v in {
                    "queue_waiting": 0.0,
                    "requests_running": 8.0,
                    "kv_cache_usage_pct": 25.0,
                }.items()
            }
        }
    )
    found = [f for f in diagnose(w) if f.kind == "metrics_missing"]
    assert found and found[0].scope == ["i-a"] and "i-a" in found[0].evidence["stopped_at"]


def test_throttled_reads_are_named_in_the_fix():
    w = make_window(
        drop={"*": ("queue_waiting", "requests_running", "kv_cache_usage_pct")},
        errors=["Throttling.User: vllm_num_requests_waiting"],
    )
    found = diagnose(w)
    assert found[0].kind == "metrics_missing" and "throttled" in found[0].fix


def test_findings_are_ordered_critical_first():
    w = make_window(
        changes={
            "i-b": {"gpu_temperature_c": 91.0, "gpu_sm_clock_ratio": 0.6, "gpu_throttle_reasons": 0x60},
            "i-d": {"tpot_p99_ms": 210.0},
        }
    )
    found = diagnose(w)
    assert [f.kind for f in found] == ["thermal_throttling", "node_outlier"]
    assert [f.severity for f in found] == ["critical", "warning"]


def test_instance_filter_keeps_only_findings_about_it():
    w = make_window(
        changes={
            "i-b": {"gpu_temperature_c": 91.0, "gpu_sm_clock_ratio": 0.6, "gpu_throttle_reasons": 0x60},
            "i-d": {"tpot_p99_ms": 210.0},
        }
    )
    assert [f.kind for f in diagnose(w, instance="i-d")] == ["node_outlier"]


def test_a_throttled_node_is_not_also_reported_as_an_outlier():
    w = make_window(
        changes={
            "i-b": {
                "gpu_temperature_c": 91.0,
                "gpu_sm_clock_ratio": 0.6,
                "gpu_throttle_reasons": 0x60,
                "tpot_p99_ms": 300.0,
            }
        }
    )
    assert kinds(w) == ["thermal_throttling"]


def test_every_finding_has_evidence_explanation_and_fix():
    for _, _, args in FIRING:
        for f in diagnose(make_window(**args)):
            assert f.scope and f.evidence and f.explanation and f.fix and f.group == "chat"
            assert f.severity in ("critical", "warning", "info")


def test_kv_fix_quotes_the_sizing_models_fp8_cache():
    from sizing import Deployment, find_gpu, find_instance, find_model, plan_memory

    inst = find_instance(SIZED["instance_type"])
    dep = Deployment(find_model(SIZED["model"]), find_gpu(inst.gpu), tp=inst.gpus, kv_cache_dtype="fp8")
    fp8_tokens = plan_memory(dep).kv_cache_tokens
    args = next(a for _, k, a in FIRING if k == "kv_cache_pressure")
    f = diagnose(make_window(**args))[0]
    assert f"-> {fp8_tokens} tokens" in f.fix


def test_undersized_fix_names_the_sizing_searchs_count():
    from sizing import SLO, Workload, find_instance, find_model, price_book, search

    args = {
        "changes": {
            "*": {
                "gpu_util_pct": 99.0,
                "queue_waiting": lambda k: 4.0 + 1.0 * k,
                "ttft_p99_ms": 9000.0,
                "request_rate_rps": 9.0,
            }
        },
        "group": {**SIZED, "prompt_tokens_mean": 300, "output_tokens_mean": 120},
    }
    f = diagnose(make_window(**args))[0]
    assert f.kind == "undersized_fleet"
    demand = f.evidence["offered_rps_estimate"]
    best = search(
        find_model(SIZED["model"]),
        workload=Workload(qps=demand, prompt_tokens=300, output_tokens=120),
        slo=SLO(ttft_p99_ms=2000.0),
        prices=price_book(),
        instances=[find_instance(SIZED["instance_type"])],
        top=1,
    ).best
    assert f"Run {best.instances} instance(s) of {SIZED['instance_type']}" in f.fix


def test_cold_start_fix_uses_the_measured_cold_start():
    args = next(a for _, k, a in FIRING if k == "cold_start")
    f = diagnose(make_window(**args))[0]
    measured_s = 17 * 15 + 15 - 30  # first sample at index 17 (t = 18 periods) minus creation at 30 s
    assert f.evidence["cold_start_s_measured"] == measured_s
    assert f"{math.ceil(measured_s / 60)} min earlier" in f.fix
    assert "warm floor from 2 to 4" in f.fix


def test_context_defaults_do_not_need_a_model():
    w = make_window(
        changes={"*": {"kv_cache_usage_pct": 96.0, "queue_waiting": 12.0, "requests_running": 9.0}}
    )
    assert isinstance(w.group, GroupContext) and w.group.model is None
    assert kinds(w) == ["kv_cache_pressure"]


HOT = {"gpu_temperature_c": 95.0, "gpu_sm_clock_ratio": 0.5, "gpu_throttle_reasons": 0x20}


def test_an_xid_explains_the_same_nodes_throttling():
    w = make_window(changes={"i-b": {**HOT, "gpu_xid": lambda k: 79.0 if k >= 4 else 0.0}})
    assert kinds(w) == ["gpu_xid_error"]


def test_an_xid_is_reported_before_another_nodes_throttling():
    w = make_window(changes={"i-a": {"gpu_xid": 79.0}, "i-b": HOT})
    assert kinds(w) == ["gpu_xid_error", "thermal_throttling"]


# What the node agent publishes (policies.metrics.CUSTOM_METRIC_NAMES); CloudMonitor's own GPU metrics go on.
AGENT_PUBLISHED = (
    "queue_waiting",
    "requests_running",
    "kv_cache_usage_pct",
    "ttft_p99_ms",
    "tpot_p99_ms",
    "e2e_p99_ms",
    "latency_p95_ms",
    "gpu_throttle_reasons",
    "gpu_xid",
    "gpu_mem_bw_util_pct",
    "gpu_sm_clock_ratio",
    "request_rate_rps",
)


def _agent_stops_at(k_stop: int, **values: float) -> dict:
    """The agent's metrics (``values`` over the healthy ones) until sample ``k_stop``, none after."""
    return {
        name: (lambda k, v=values.get(name, HEALTHY[name]): v if k < k_stop else None)
        for name in AGENT_PUBLISHED
        if name in HEALTHY
    }


def test_an_xid_before_the_agent_stopped_is_reported_and_the_stop_is_its_consequence():
    w = make_window(changes={"i-b": _agent_stops_at(8, gpu_xid=79.0)})
    found = diagnose(w)
    assert [f.kind for f in found] == ["gpu_xid_error"]
    assert found[0].evidence["vllm_metrics_stopped_at"] and "consequence" in found[0].explanation


def test_a_hot_gpu_whose_agent_stopped_is_reported_as_thermal_throttling():
    changes = {
        **_agent_stops_at(8, gpu_sm_clock_ratio=0.6, gpu_throttle_reasons=0x20),
        "gpu_temperature_c": 95.0,
    }
    assert kinds(make_window(changes={"i-b": changes})) == ["thermal_throttling"]


def test_an_xid_with_vllm_metrics_absent_all_window_is_not_a_missing_agent():
    w = make_window(
        changes={"i-b": {"gpu_xid": 79.0}},
        drop={"i-b": ("queue_waiting", "requests_running", "kv_cache_usage_pct")},
    )
    assert kinds(w) == ["gpu_xid_error"]


def test_a_hot_gpu_without_any_agent_is_reported_and_so_is_the_missing_agent():
    w = make_window(changes={"i-b": {"gpu_temperature_c": 95.0}}, drop={"i-b": AGENT_PUBLISHED})
    assert sorted(kinds(w)) == ["metrics_missing", "thermal_throttling"]


def test_an_agent_that_stopped_is_not_said_to_have_published_none():
    found = diagnose(make_window(changes={"i-b": _agent_stops_at(8)}))
    assert [f.kind for f in found] == ["metrics_missing"]
    assert "1 stopped publishing them during the window (i-b at" in found[0].explanation
    assert "published none" not in found[0].explanation


def test_kv_usage_given_as_a_fraction_with_preemptions_is_read_as_percent():
    from fleet.diagnose.model import window_from_json, window_to_json

    data = window_to_json(
        make_window(
            changes={"*": {"kv_cache_usage_pct": 0.97, "queue_waiting": 12.0, "requests_running": 9.0}}
        )
    )
    for inst in data["instances"]:
        inst["metrics"]["preemptions"] = [[t, 3.0] for t, _ in inst["metrics"]["queue_waiting"]]
    w = window_from_json(data)
    assert kinds(w) == ["kv_cache_pressure"]
    assert any("read as a 0-1 fraction" in e for e in w.errors)


def test_kv_usage_under_one_percent_without_preemptions_stays_as_given():
    from fleet.diagnose.model import window_from_json, window_to_json

    w = window_from_json(window_to_json(make_window(changes={"*": {"kv_cache_usage_pct": 0.5}})))
    assert w.instances[0].values("kv_cache_usage_pct")[0] == 0.5 and w.errors == []


def test_an_unexplained_ttft_names_the_sizing_models_idle_prefill():
    from fleet.diagnose.fixes import idle_latency_ms

    w = make_window(changes={"*": {"ttft_p99_ms": 6000.0}}, group=SIZED)
    f = diagnose(w)[0]
    idle = idle_latency_ms(w.group)
    assert f.kind == "slo_violated_unexplained" and idle is not None
    assert f"prefills a mean 1000-token prompt in {idle['prefill_ms']:.0f} ms" in f.fix
    assert "API server" in f.fix and f.evidence["ttft_p99_ms"]["samples_over"] == 1.0


def test_a_cool_node_with_its_clock_down_and_tpot_twice_its_peers_is_named_by_its_clock():
    # The SM clock at 55% on a cool card with no throttle reason published (a lowered power limit the driver
    # does not flag, or clocks locked low), TPOT exactly twice its peers': slow, and the clock says why.
    w = make_window(
        changes={"i-c": {"gpu_sm_clock_ratio": 0.55, "tpot_p99_ms": 140.0, "gpu_temperature_c": 60.0}}
    )
    found = diagnose(w)
    assert [(f.kind, f.scope) for f in found] == [("node_outlier", ["i-c"])]
    f = found[0]
    assert f.evidence["sm_clock_ratio_median"] == 0.55 and f.evidence["peers_sm_clock_ratio_median"] == 1.0
    assert f.evidence["factor"] == 2.0
    assert "SM clock" in f.explanation and "55%" in f.explanation
    assert "nvidia-smi -q -d CLOCK,POWER,PERFORMANCE" in f.fix and "fleet isolate i-c" in f.fix


@pytest.mark.parametrize(
    "changes",
    [
        # clock a little low (boost jitter, a warm card), TPOT within noise of its peers
        {"i-c": {"gpu_sm_clock_ratio": 0.85, "tpot_p99_ms": 80.0}},
        # clock down, but the node keeps up with its peers (the engine is not compute-bound)
        {"i-c": {"gpu_sm_clock_ratio": 0.6, "tpot_p99_ms": 75.0}},
        # the whole fleet at a lower clock: nothing to compare against
        {"*": {"gpu_sm_clock_ratio": 0.6}, "i-c": {"gpu_sm_clock_ratio": 0.6, "tpot_p99_ms": 84.0}},
    ],
)
def test_a_lower_clock_without_a_slower_node_is_no_finding(changes):
    assert kinds(make_window(changes=changes)) == []
