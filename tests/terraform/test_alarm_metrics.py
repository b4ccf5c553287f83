"""Every CloudMonitor alarm watches a metric the service reads, under the name it reads it by."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleet.agent.clock import StampResult
from fleet.agent.nvml import GpuSnapshot
from fleet.agent.sample import Sample, instance_values
from fleet.agent.vllm import VllmReading
from fleet.config import load_config
from fleet.terraform.export import AGENT_HEALTH_METRICS, ESS_SYSTEM_GPU_METRICS, build_tfvars
from fleet.terraform.hcl import apply_defaults, literal, load_dir, parse_type
from policies import metrics as m

REPO = Path(__file__).resolve().parents[2]

# What the service reads (fleet/service/observe.py maps policy metrics through policies.metrics).
SERVICE_CMS_METRICS = {name for name, _statistic in m.CMS_METRIC_NAMES.values()}
SERVICE_CUSTOM_METRICS = set(m.CUSTOM_METRIC_NAMES.values())


def metric_problems(alarms: dict) -> list[str]:
    problems = []
    for key, alarm in alarms.items():
        allowed = (
            (SERVICE_CUSTOM_METRICS | set(AGENT_HEALTH_METRICS))
            if alarm.get("custom_metric")
            else SERVICE_CMS_METRICS
        )
        if alarm["metric"] not in allowed:
            where = "acs_customMetric_<account>" if alarm.get("custom_metric") else m.CMS_NAMESPACE
            problems.append(f"{key}: {alarm['metric']!r} is not read by the service from {where}")
    return problems


def module_default_alarms(module_dir) -> dict:
    variable = load_dir(module_dir).variables["alarms"]
    return apply_defaults(parse_type(variable.body["type"]), literal(variable.body["default"]))


def test_module_default_alarms_use_names_the_service_reads(module_dir):
    alarms = module_default_alarms(module_dir)
    expected = {"gpu_temperature", "gpu_memory", "ttft_p99", "tpot_p99", "queue_depth", "instance_down"}
    assert expected <= set(alarms)
    assert not any(a["metric"] == "vllm_e2e_p99_ms" for a in alarms.values())  # pages on long answers
    assert metric_problems(alarms) == []


def test_module_default_latency_alarms_match_the_export_defaults(module_dir):
    from fleet.terraform.export import DEFAULT_LATENCY_ALARMS

    alarms = module_default_alarms(module_dir)
    for key, (metric, threshold, _) in DEFAULT_LATENCY_ALARMS.items():
        assert alarms[key]["metric"] == m.CUSTOM_METRIC_NAMES[metric]
        assert alarms[key]["threshold"] == threshold


def test_backstop_alarm_is_off_by_default(module_dir, example_dir):
    # GPU utilization >= 95 % holds at ~40 % load under vLLM: on by default it fought the service's scale-in
    for directory in (module_dir, example_dir):
        variable = load_dir(directory).variables["backstop_alarm"]
        assert apply_defaults(parse_type(variable.body["type"]), {})["enabled"] is False, directory


def test_exported_alarms_use_names_the_service_reads():
    config = load_config(REPO / "examples" / "fleet.yaml", env={})
    alarms = build_tfvars(config, now=datetime(2026, 11, 30, tzinfo=UTC))["alarms"]
    assert metric_problems(alarms) == []


def test_a_misspelt_or_namespace_swapped_metric_is_caught():
    alarms = {
        "typo": {"metric": "instance_gpu_gpu_temprature", "custom_metric": False},
        "swapped": {"metric": "vllm_ttft_p99_ms", "custom_metric": False},
    }
    assert len(metric_problems(alarms)) == 2


@pytest.mark.parametrize("name", AGENT_HEALTH_METRICS)
def test_agent_health_metrics_in_alarms_are_published_by_the_node_agent(name):
    sample = Sample(
        instance_id="i-1",
        clock=StampResult(timestamp_ms=1, source="wall", wall_skew_s=0.0),
        gpu=GpuSnapshot(nvml_ok=False),
        vllm=VllmReading(up=False),
    )
    assert instance_values(sample)[name] == 0.0  # published even (especially) when vLLM is down


def test_backstop_alarm_metric_is_the_ess_name_of_a_gpu_reading_the_service_reads(module_dir):
    variable = load_dir(module_dir).variables["backstop_alarm"]
    backstop = apply_defaults(parse_type(variable.body["type"]), literal(variable.body["default"]))
    policy_metric = ESS_SYSTEM_GPU_METRICS[backstop["metric_name"]]
    assert m.CMS_METRIC_NAMES[policy_metric][0] in SERVICE_CMS_METRICS
