"""Two quick simulator scenarios read back through the fake CloudMonitor, and the benchmark's scoring."""

from __future__ import annotations

import json

import pytest

from fleet.cli import main
from fleet.diagnose.rules import KINDS
from fleet.sim.diagnose_bench import score
from fleet.sim.diagnose_run import run_scenario
from fleet.sim.diagnose_scenarios import SCENARIOS, by_name
from fleet.sim.workload import traces_dir

# The scenarios replay the Azure conversation trace from ../shared/traces.
needs_traces = pytest.mark.skipif(
    not (traces_dir() / "azure2023_conv.csv").exists(), reason=f"shared traces not found at {traces_dir()}"
)


def _needs_bench_app() -> None:
    try:
        from fleet.commands.simulate import bench_app  # noqa: F401
    except ImportError:
        pytest.skip("the bench sub-app (fleet/commands/simulate.py) is not present")


@needs_traces
def test_overheating_gpu_scenario_is_diagnosed_on_the_faulted_instance():
    run = run_scenario(by_name("overheating-gpu"))
    faulted = {e["instance_id"] for e in run.fault_log if e["event"] == "overheat"}
    assert [(f.kind, set(f.scope)) for f in run.findings] == [("thermal_throttling", faulted)]
    assert run.window.source == "cloudmonitor" and len(run.window.instances) == 4


@needs_traces
def test_healthy_control_reads_metrics_and_finds_nothing():
    run = run_scenario(by_name("healthy-steady"))
    assert run.findings == []
    assert all(i.metrics.get("queue_waiting") for i in run.window.instances)


def test_cold_start_after_ramp_under_the_real_service():
    run = run_scenario(by_name("cold-start-after-ramp"))
    assert [f.kind for f in run.findings] == ["cold_start"]
    ev = run.findings[0].evidence
    assert (
        ev["new_instances"] >= 1
        and ev["cold_start_s_measured"] >= by_name("cold-start-after-ramp").cold_start_s
    )
    # the service's own scale-out decision, read from its store, is part of the evidence
    assert any(d["action"] == "scale_to" and d["outcome"] == "applied" for d in ev["service_decisions"])


def test_scenarios_cover_every_kind_and_have_controls():
    assert {s.expected for s in SCENARIOS if s.expected} == set(KINDS)
    assert any(s.expected is None for s in SCENARIOS)
    assert len({s.name for s in SCENARIOS}) == len(SCENARIOS)


def test_score_counts_misses_and_false_findings():
    rows = [
        {"expected": "cold_start", "found": ["cold_start"]},
        {"expected": "node_outlier", "found": []},
        {"expected": "kv_cache_pressure", "found": ["kv_cache_pressure", "queue_backlog"]},
        {"expected": None, "found": []},
    ]
    s = score(rows)
    assert (s["recall"], s["precision"]) == (round(2 / 3, 3), round(2 / 3, 3))
    assert s["controls_clean"] and not s["passed"]


def test_a_finding_on_a_healthy_control_fails_the_benchmark():
    rows = [{"expected": "cold_start", "found": ["cold_start"]}] * 20 + [
        {"expected": None, "found": ["node_outlier"]}
    ]
    s = score(rows)
    assert s["recall"] == 1.0 and s["precision"] >= 0.9 and not s["controls_clean"] and not s["passed"]


@needs_traces
def test_bench_command_reports_one_scenario_as_json(capsys):
    _needs_bench_app()
    assert main(["bench", "diagnose", "--json", "--scenario", "power-cap"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(r["scenario"], r["expected"], r["found"]) for r in report["scenarios"]] == [
        ("power-cap", "power_throttling", ["power_throttling"])
    ]
    assert report["recall"] == 1.0 and report["precision"] == 1.0 and report["passed"]


def test_bench_command_refuses_an_unknown_scenario(capsys):
    _needs_bench_app()
    assert main(["bench", "diagnose", "--scenario", "nope"]) == 2
    assert "unknown nope" in capsys.readouterr().err


@needs_traces
def test_a_batch_held_at_max_num_seqs_is_told_to_raise_it_not_to_buy_instances():
    scenario = by_name("batch-at-max-num-seqs")
    run = run_scenario(scenario)
    assert [f.kind for f in run.findings] == ["queue_backlog"]
    f = run.findings[0]
    assert f.fix.startswith(f"Raise max_num_seqs from {scenario.max_num_seqs} to ")
    assert f.evidence["max_num_seqs_recommended"] > 2 * (scenario.max_num_seqs or 0)
