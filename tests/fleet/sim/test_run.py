"""Short simulated runs through the real service loop (fake cloud, SDK adapters, policies, store)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from fleet.cli import main
from fleet.config import load_config
from fleet.sim.scenario import DEFAULT_CONFIG, simulate
from fleet.sim.types import Hardware, SimOptions
from fleet.sim.workload import traces_dir
from fleet.sim.world import parse_fault_spec

pytestmark = pytest.mark.skipif(
    not (traces_dir() / "azure2023_conv.csv").exists(), reason=f"shared traces not found at {traces_dir()}"
)

SUMMARY_FIELDS = (
    "requests",
    "completed",
    "rejected",
    "slo_violation_minutes",
    "ttft_p99_ms",
    "tpot_p99_ms",
    "gpu_hours",
    "cost_cny",
    "scale_actions",
    "max_instances",
    "incidents",
    "sla_breaches",
    "invariant_violations",
)
INCIDENT_FIELDS = ("instance_id", "cause", "detected_at", "responded_at", "isolated_at", "action")


@pytest.fixture(scope="module")
def config():
    return load_config(DEFAULT_CONFIG, env={})


@pytest.fixture(scope="module")
def overheat_run(config):
    """Twenty minutes of the conversation trace with one GPU's cooling failing after two minutes."""
    fault = replace(parse_fault_spec("overheat,at=2m,instance=0"), extra_c=50.0)
    return simulate(config, "azure:conv,rate=0.5", 20 / 60, faults=[fault], options=SimOptions())


def test_summary_has_every_field_the_issue_names(overheat_run):
    assert set(SUMMARY_FIELDS) <= set(overheat_run.summary)
    assert overheat_run.summary["requests"] > 0 and overheat_run.summary["completed"] > 0


def test_real_loop_run_has_no_invariant_violations(overheat_run):
    assert overheat_run.summary["invariant_violations"] == []


def test_overheating_gpu_becomes_an_incident_that_is_responded_to(overheat_run):
    incidents = overheat_run.summary["incidents"]
    hot = overheat_run.fault_log[0]["instance_id"]
    mine = [i for i in incidents if i["instance_id"] == hot]
    assert mine, incidents
    assert set(INCIDENT_FIELDS) <= set(mine[0])
    assert mine[0]["detected_at"] is not None and mine[0]["responded_at"] is not None


def test_a_node_rebooted_for_overheating_goes_back_once_its_engine_serves_and_only_once(overheat_run):
    # After the reboot its GPUs report cool within a minute while vLLM loads the weights for three more
    # (the agent sends vllm_up 0 meanwhile): the health check waits for the engine, and the engine rule does
    # not take the load for a dead engine, so the node is rebooted once.
    hot = overheat_run.fault_log[0]["instance_id"]
    mine = [i for i in overheat_run.summary["incidents"] if i["instance_id"] == hot]
    (incident,) = mine  # the heat's (the throttle rule or the temperature's), no engine_down after it
    assert "engine_down" not in incident["cause"] and incident["action"] == "reboot"
    reboots = [
        e["at_s"] for e in overheat_run.fault_log if e["event"] == "rebooted" and e["instance_id"] == hot
    ]
    assert len(reboots) == 1
    assert incident["state"] == "closed" and incident["outcome"] == "rebooted"


def _engine_crash_run(config):
    fault = parse_fault_spec("engine-crash,at=2m,instance=0")
    return simulate(config, "azure:conv,rate=0.5", 20 / 60, faults=[fault], options=SimOptions())


def test_a_dead_engine_is_isolated_rebooted_and_serves_again(config):
    run = _engine_crash_run(config)
    dead = run.fault_log[0]["instance_id"]
    (incident,) = [i for i in run.summary["incidents"] if i["instance_id"] == dead]
    assert incident["cause"] == "metric: engine_down" and incident["action"] == "reboot"
    assert incident["state"] == "closed"  # rebooted, reloaded, health-checked and back InService
    assert run.summary["invariant_violations"] == []


def test_an_engine_its_supervisor_keeps_restarting_is_rebooted_after_the_third_crash(config):
    faults = [parse_fault_spec(f"engine-crash,at={m}m,instance=0,for=2m") for m in (2, 10, 18)]
    run = simulate(config, "azure:conv,rate=0.5", 28 / 60, faults=faults, options=SimOptions())
    crashed = run.fault_log[0]["instance_id"]
    assert {f["instance_id"] for f in run.fault_log if f["event"] != "rebooted"} == {crashed}
    (incident,) = run.summary["incidents"]  # no outage was long enough for engine_down
    assert incident["instance_id"] == crashed and incident["cause"] == "metric: engine_restarting"
    assert incident["action"] == "reboot" and incident["state"] == "closed"
    assert run.summary["invariant_violations"] == []


def test_a_node_whose_agent_stopped_is_rebooted_and_its_agent_reports_again(config):
    fault = parse_fault_spec("agent-down,at=2m,instance=0")
    run = simulate(config, "azure:conv,rate=0.5", 32 / 60, faults=[fault], options=SimOptions())
    silent = run.fault_log[0]["instance_id"]
    (incident,) = run.summary["incidents"]
    assert incident["instance_id"] == silent and incident["cause"] == "absent: agent_silent"
    assert incident["action"] == "reboot" and incident["state"] == "closed"
    assert run.summary["invariant_violations"] == []


def test_a_hung_engine_whose_server_still_answers_is_read_down_and_rebooted(config):
    """The engine stops moving while vLLM's API server answers (the balancer keeps sending, the GPUs read
    busy): the agent reads no progress with work in flight as down, and engine_down reboots the node."""
    fault = parse_fault_spec("engine-hang,at=2m,instance=0")
    run = simulate(config, "azure:conv,rate=0.5", 16 / 60, faults=[fault], options=SimOptions())
    hung = run.fault_log[0]["instance_id"]
    (incident,) = run.summary["incidents"]
    assert incident["instance_id"] == hung and incident["cause"] == "metric: engine_down"
    assert incident["state"] == "closed" and any(f["event"] == "rebooted" for f in run.fault_log)
    assert run.summary["invariant_violations"] == []


def test_every_request_is_accounted_for_with_what_a_hung_engine_held_at_the_end(config):
    # the engine hangs a minute before the end: what it holds never finishes, and the summary says so
    # (requests was more than completed + rejected + dropped, with no field for the difference)
    fault = parse_fault_spec("engine-hang,at=3m,instance=0")
    s = simulate(config, "azure:conv,rate=0.5", 4 / 60, faults=[fault], options=SimOptions()).summary
    assert s["unfinished"] > 0
    assert s["requests"] == s["completed"] + s["rejected"] + s["dropped"] + s["unfinished"]


def test_without_the_engine_rule_the_dead_engine_stays_in_the_group(config, tmp_path):
    text = DEFAULT_CONFIG.read_text()
    assert "name: engine_down" in text
    kept = [line for line in text.splitlines() if "name: engine_down" not in line]
    path = tmp_path / "fleet.yaml"
    path.write_text("\n".join(kept) + "\n")
    run = _engine_crash_run(load_config(path, env={}))
    assert run.summary["incidents"] == []  # its GPUs read healthy: no other rule sees it


def test_simultaneous_hardware_failures_are_isolated_together_without_an_invariant_violation(config):
    """Three GPUs fail in one minute: their moves into Standby (one ESS activity each, in the same tick)
    are not capacity writes, so the run keeps no double-action violation, and each is replaced, or removed
    by a scale-in first (the dead nodes serve nothing, and a scale-in takes suspects first)."""
    faults = [parse_fault_spec(f"xid:79,at=2m,instance={n}") for n in range(3)]
    run = simulate(config, "azure:conv,rate=2", 20 / 60, faults=faults, options=SimOptions())
    incidents = run.summary["incidents"]
    assert len(incidents) == 3
    assert all(i["state"] == "closed" and i["outcome"] in ("replaced", "instance_gone") for i in incidents)
    isolated = [i["isolated_at"] for i in incidents if i["isolated_at"] is not None]
    assert len(isolated) >= 2 and len(set(isolated)) < len(isolated)  # at least two to Standby in one tick
    assert run.summary["invariant_violations"] == []


def test_series_has_one_point_per_simulated_minute(overheat_run):
    assert len(overheat_run.series) == 20
    assert all(p.desired >= 2 for p in overheat_run.series)


def test_static_peak_pins_the_group_at_its_size(config):
    result = simulate(
        config, "azure:conv,rate=0.5", 5 / 60, policy="static-peak", options=SimOptions(static_size=3)
    )
    assert result.summary["invariant_violations"] == []
    assert {p.desired for p in result.series} == {3}


def test_the_start_fleets_creation_is_not_counted_as_a_scale_action(config):
    # static provisioning never writes a capacity: the activity that created the pre-warmed fleet at the run's
    # first instant is nobody's decision (it was counted, so every run showed one scale action too many)
    result = simulate(
        config, "azure:conv,rate=0.5", 3 / 60, policy="static-peak", options=SimOptions(static_size=3)
    )
    assert result.summary["scale_actions"] == 0


def test_runs_are_judged_by_the_slo_the_groups_policy_reads(config):
    # the predictive section's ttft_p99_ms is the group's SLO (its capacity model sizes for it); the scale-out
    # rule's threshold only where it gives none
    group = config.groups[0]
    rule_slo = next(r.above for r in group.scale_out if r.metric == "ttft_p99_ms")
    wider = group.model_copy(
        update={"predictive": group.predictive.model_copy(update={"ttft_p99_ms": rule_slo + 1500.0})}
    )
    declared = config.model_copy(update={"groups": [wider]})
    for cfg, slo in ((config, rule_slo), (declared, rule_slo + 1500.0)):
        result = simulate(
            cfg, "azure:conv,rate=0.5", 2 / 60, policy="static-peak", options=SimOptions(static_size=3)
        )
        assert result.options.slo_ttft_ms == slo


def test_simulate_json_via_cli(capsys, tmp_path):
    report = tmp_path / "r.html"
    code = main(
        [
            "simulate",
            "--workload",
            "azure:conv,rate=0.3",
            "--hours",
            "0.08",
            "--json",
            "--report",
            str(report),
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert set(SUMMARY_FIELDS) <= set(out)
    assert report.read_text().startswith("<!doctype html>") and "<svg" in report.read_text()


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--policy", "magic"], "--policy"),
        (["--workload", "azure:chat"], "--workload"),
        (["--fault", "meltdown,at=1h"], "--fault"),
        (["--hours", "0"], "--hours"),
        (["--model", "NoSuchModel-1B"], "--model"),
        (["--hours", "1", "--fault", "overheat,at=10h"], "after the run's end (1 h)"),
    ],
)
def test_simulate_bad_input_is_one_line_and_exit_2(capsys, args, fragment):
    assert main(["simulate", *args]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err


def test_bench_autoscale_is_a_subcommand_of_bench(capsys):
    assert main(["bench", "--help"]) == 0
    assert "autoscale" in capsys.readouterr().out


def test_bench_verdicts_name_where_ours_falls_short():
    from fleet.sim.scenario import verdicts

    def s(minutes: int, hours: float) -> dict:
        return {"slo_violation_minutes": minutes, "gpu_hours": hours}

    results = {
        "w1": {"ours": s(1, 10), "static-peak": s(3, 20), "ess-alarm": s(2, 30)},
        "w2": {"ours": s(4, 25), "static-peak": s(3, 20), "ess-alarm": s(9, 9)},
    }
    out = verdicts(results)
    assert out["w1"] == []
    assert any("static-peak" in m and "SLO" in m for m in out["w2"])
    assert any("GPU-hours" in m for m in out["w2"])


def test_report_is_self_contained_with_plots_and_the_incident_closeup(overheat_run):
    import re
    import xml.dom.minidom

    from fleet.sim.report import render_html

    page = render_html(overheat_run)
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    # load, capacity, P99 TTFT, temperature, demand vs forecast, capacity vs oracle, cost + the two close-ups
    assert len(svgs) == 9
    for svg in svgs:
        xml.dom.minidom.parseString(svg)  # well-formed
    assert "Incident close-up" in page
    assert "<th>outcome</th>" in page and "<td>rebooted</td>" in page  # the overheat's incident row
    assert "Ordered capacity vs the oracle" in page and "Cost curve" in page and "Decision timeline" in page
    assert "<script" not in page and "<link" not in page and " src=" not in page  # nothing external


def test_the_report_reads_the_clock_of_the_groups_schedules(tmp_path):
    # the report's axes and times were always Shanghai's: a group scheduled in London time saw its floor's
    # 09:00 drawn at 17:00
    doc = yaml.safe_load(DEFAULT_CONFIG.read_text())
    doc["groups"][0]["schedules"][0]["timezone"] = "Europe/London"
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    report = tmp_path / "r.html"
    argv = ["simulate", "--config", str(path), "--workload", "azure:conv,rate=0.3", "--hours", "0.05"]
    assert main([*argv, "--json", "--report", str(report)]) == 0
    page = report.read_text()
    # replays start at 10:00 Shanghai time, 02:00 in London (GMT in March)
    assert "Mon 2026-03-02 02:00 (Europe/London)" in page


def test_the_reports_temperature_plots_draw_the_configured_isolation_threshold(
    overheat_run, config, tmp_path
):
    # the temperature plot and the close-up drew "85 C isolation rule" whatever the config's rule said
    from fleet.commands.simulate import _write_report

    spec = config.groups[0]
    rules = tuple(
        r.model_copy(update={"above": 92.0}) if r.metric == "gpu_temperature_c" else r
        for r in spec.isolation.rules
    )
    spec = spec.model_copy(update={"isolation": spec.isolation.model_copy(update={"rules": rules})})
    report = tmp_path / "r.html"
    _write_report(report, overheat_run, spec)
    page = report.read_text()
    assert page.count("92 C isolation rule") == 2  # the run's plot and the incident close-up
    assert "85 C" not in page


def test_a_group_without_a_temperature_rule_gets_no_threshold_line():
    from fleet.sim.report import temperature_limits_c

    spec = load_config(DEFAULT_CONFIG, env={}).groups[0]
    assert temperature_limits_c(spec) == (85.0,)
    no_temp = spec.isolation.model_copy(
        update={"rules": tuple(r for r in spec.isolation.rules if r.metric != "gpu_temperature_c")}
    )
    assert temperature_limits_c(spec.model_copy(update={"isolation": no_temp})) == ()
    off = spec.isolation.model_copy(update={"enabled": False})
    assert temperature_limits_c(spec.model_copy(update={"isolation": off})) == ()


def test_simulate_refuses_a_report_path_it_cannot_create_before_running(tmp_path, capsys):
    not_a_dir = tmp_path / "file.txt"
    not_a_dir.write_text("x")
    report = not_a_dir / "r.html"
    argv = ["simulate", "--workload", "azure:conv,rate=0.3", "--hours", "0.08", "--report", str(report)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert f"--report: {not_a_dir} is a file, not a directory" in err and "Traceback" not in err
    assert "simulating" not in captured.err  # refused before the run, not after it


@pytest.mark.parametrize("victim", ["config", "trace"])
def test_simulate_refuses_a_report_over_its_own_config_or_trace(tmp_path, capsys, victim):
    # --report fleet.yaml (or the trace) replaced the run's input with the HTML report, silently
    config = tmp_path / "fleet.yaml"
    config.write_text(DEFAULT_CONFIG.read_text())
    trace = tmp_path / "mine.csv"
    trace.write_text("timestamp,prompt_tokens,output_tokens\n0,100,50\n1,200,60\n")
    before = {config: config.read_text(), trace: trace.read_text()}
    target = config if victim == "config" else trace
    report = tmp_path / "sub" / ".." / target.name  # the same file by another path
    argv = ["simulate", "--config", str(config), "--workload", f"trace:{trace}", "--hours", "0.02"]
    assert main([*argv, "--report", str(report)]) == 2
    assert "the report would overwrite it" in capsys.readouterr().err
    assert {p: p.read_text() for p in before} == before
    assert not (tmp_path / "sub").exists()  # the check made the folder to resolve the path, then refused


def test_a_report_path_through_a_missing_folder_is_checked_without_making_it(tmp_path, monkeypatch):
    from fleet.commands.simulate import _check_report_path

    monkeypatch.chdir(tmp_path)
    assert _check_report_path(Path("sub") / ".." / "x.html").resolve() == tmp_path / "x.html"
    assert _check_report_path(Path("a") / "b" / ".." / "r.html").resolve() == tmp_path / "a" / "r.html"
    assert list(tmp_path.iterdir()) == []  # made when the report is written, after the run


def test_the_report_is_written_where_its_path_leads_making_only_the_folders_it_needs(
    overheat_run, config, tmp_path
):
    from fleet.commands.simulate import _check_report_path, _write_report

    report = tmp_path / "sub" / ".." / "out" / "r.html"
    _write_report(_check_report_path(report), overheat_run, config.groups[0], shown=report)
    assert (tmp_path / "out" / "r.html").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no "sub" made on the way


def test_a_group_without_a_ttft_slo_is_told_what_it_was_judged_by(tmp_path, capsys):
    # no predictive ttft_p99_ms and no ttft_p99_ms rule: the minutes were judged at the simulator's 800 ms
    # without a word, and the JSON never said by what SLO its slo_violation_minutes were counted
    doc = yaml.safe_load(DEFAULT_CONFIG.read_text())
    group = doc["groups"][0]
    group["scale_out"] = [r for r in group["scale_out"] if r["metric"] != "ttft_p99_ms"]
    group["scale_in"] = [r for r in group["scale_in"] if r["metric"] != "ttft_p99_ms"]
    group["predictive"] = {"mode": "off"}
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    argv = ["simulate", "--config", str(path), "--workload", "azure:conv,rate=0.3", "--hours", "0.03"]
    assert main([*argv, "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["slo_ttft_p99_ms"] == 800.0
    assert "states no P99 TTFT SLO" in captured.err and "judged at 800 ms" in " ".join(captured.err.split())
    assert main(["simulate", "--workload", "azure:conv,rate=0.3", "--hours", "0.03", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["slo_ttft_p99_ms"] == 3000.0 and "states no" not in captured.err


def test_simulate_lists_each_config_problem_on_its_own_error_line(tmp_path, capsys):
    config = tmp_path / "fleet.yaml"
    config.write_text("region: r\ngroups:\n  - {name: chat, min_size: x, max_size: 3, bogus: 1}\n")
    assert main(["simulate", "--config", str(config), "--hours", "0.05"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"error: {config}: groups[0].") for line in lines)


def test_simulate_runs_the_hardware_the_group_declares_unless_told_otherwise(tmp_path, capsys):
    text = DEFAULT_CONFIG.read_text()
    assert "model: Qwen2.5-14B" in text and "instance_type: ecs.gn7i-2x.8xlarge" in text
    config = tmp_path / "fleet.yaml"
    config.write_text(
        text.replace("model: Qwen2.5-14B", "model: Qwen2.5-7B").replace(
            "instance_type: ecs.gn7i-2x.8xlarge", "instance_type: ecs.gn7i-c16g1.4xlarge"
        )
    )
    argv = ["simulate", "--config", str(config), "--workload", "azure:conv,rate=0.3", "--hours", "0.05"]
    assert main(argv) == 0
    assert "(Qwen2.5-7B on ecs.gn7i-c16g1.4xlarge)" in " ".join(capsys.readouterr().err.split())
    assert main([*argv, "--model", "Qwen2.5-14B", "--instance-type", "ecs.gn7i-2x.8xlarge"]) == 0
    assert "(Qwen2.5-14B on ecs.gn7i-2x.8xlarge)" in " ".join(capsys.readouterr().err.split())


def test_simulate_serves_the_max_model_len_the_group_declares_and_warns_of_its_tp(
    tmp_path, capsys, monkeypatch
):
    # predictive.max_model_len 16384 was replaced by the simulator's 8192 (prompts cut at 7680, the capacity
    # model told 8192), and predictive.tp 1 on two GPUs (two engines per instance) ran as one engine of tp 2
    # without a word
    import fleet.sim.scenario as scenario

    seen = []
    real = scenario.simulate

    def spy(*args, **kwargs):
        seen.append(kwargs["hardware"])
        return real(*args, **kwargs)

    monkeypatch.setattr(scenario, "simulate", spy)
    doc = yaml.safe_load(DEFAULT_CONFIG.read_text())
    doc["groups"][0]["predictive"].update(model="Qwen2.5-7B", max_model_len=16384, tp=1)
    config = tmp_path / "fleet.yaml"
    config.write_text(yaml.safe_dump(doc))
    argv = ["simulate", "--config", str(config), "--workload", "azure:conv,rate=0.3", "--hours", "0.05"]
    assert main([*argv, "--json"]) == 0
    (hw,) = seen
    assert hw.max_model_len == 16384 and hw.tp == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "predictive.tp 1: the simulator runs one engine over all 2 GPUs" in err


def test_bench_runs_the_hardware_the_group_declares(tmp_path, capsys):
    from fleet.sim.engine import resolve_hardware

    config = tmp_path / "fleet.yaml"
    config.write_text(
        DEFAULT_CONFIG.read_text()
        .replace("model: Qwen2.5-14B", "model: Qwen2.5-7B")
        .replace("instance_type: ecs.gn7i-2x.8xlarge", "instance_type: ecs.gn7i-c16g1.4xlarge")
    )
    argv = ["bench", "autoscale", "--config", str(config), "--quick", "--json"]
    assert main([*argv, "--workload", "azure-conversation-hour", "--policy", "static-peak"]) == 0
    run = json.loads(capsys.readouterr().out)["azure-conversation-hour"]["static-peak"]
    region = load_config(config, env={}).region
    hw = resolve_hardware("Qwen2.5-7B", "ecs.gn7i-c16g1.4xlarge", region)
    default = resolve_hardware("Qwen2.5-14B", "ecs.gn7i-2x.8xlarge", region)
    per_gpu_hour = run["cost_cny"] / run["gpu_hours"]
    assert per_gpu_hour == pytest.approx(hw.price_cny_per_hour / hw.gpus_per_instance, rel=2e-3)
    assert per_gpu_hour != pytest.approx(default.price_cny_per_hour / default.gpus_per_instance, rel=2e-3)


@pytest.mark.parametrize(
    "fault, warned",
    [
        ("spot-reclaim,at=1m", "spot-reclaim at 1 min reclaimed nothing"),
        ("stockout:ecs.gn8is.2xlarge,at=1m,for=1m", "the stock-out of ecs.gn8is.2xlarge"),
        ("stockout:ecs.gn7i-2x.8xlarge,at=1m,for=1m", None),
    ],
)
def test_simulate_warns_about_a_capacity_fault_that_touched_nothing(capsys, fault, warned):
    argv = ["simulate", "--workload", "azure:conv,rate=0.3", "--hours", "0.05", "--json", "--fault", fault]
    assert main(argv) == 0
    err = " ".join(capsys.readouterr().err.split())
    if warned is None:
        assert "warning" not in err
    else:
        assert warned in err


@pytest.mark.parametrize("instance, warned", [("i-never-existed", True), ("0", False)])
def test_simulate_warns_about_a_fault_that_never_fired(capsys, instance, warned):
    argv = [
        "simulate",
        "--workload",
        "azure:conv,rate=0.3",
        "--hours",
        "0.08",
        "--json",
        "--fault",
        f"overheat,at=1m,instance={instance}",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert ("1 of 1 fault(s) never fired" in captured.err) is warned
    if warned:  # which one, and why (2026-12-07; before, "an instance=i-... that never existed?" for any)
        assert "overheat at 1 min on i-never-existed: no such instance in the group" in captured.err
        assert json.loads(captured.out)["unfired_faults"] == [
            "overheat at 1 min on i-never-existed: no such instance in the group from then to the end"
        ]


def test_a_fault_on_an_index_while_nothing_serves_is_named_as_that_not_as_a_missing_id(tmp_path, capsys):
    # min_size 0 under the HPA baseline: nothing waits at the first tick, the fleet goes to 0, and a fault on
    # instance 1 finds nothing serving; the warning asked about an instance id nobody gave (2026-12-07)
    doc = yaml.safe_load(DEFAULT_CONFIG.read_text())
    doc["groups"][0].update(min_size=0, warm_floor=0, schedules=[])
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    argv = ["simulate", "--config", str(path), "--workload", "azure:conv,rate=0.1", "--hours", "0.1"]
    assert main([*argv, "--policy", "target-tracking", "--fault", "xid:79,at=5m,instance=1"]) == 0
    err = capsys.readouterr().err
    assert "1 of 1 fault(s) never fired: xid at 5 min on instance 1: no instance serving" in err
    assert "i-..." not in err


def test_what_the_world_notes_beside_the_faults_is_neither_a_fired_fault_nor_an_incident(capsys):
    # an API outage's end is noted in the fault log: it was counted as a fault that fired (hiding the one
    # that never did), and a baseline reported it, and the outage itself, as gpu_overheat incidents with
    # SLA breaches; an engine crash was a gpu_overheat too
    argv = ["simulate", "--workload", "azure:conv,rate=0.3", "--hours", "0.35", "--json", "--policy"]
    faults = ["api-outage:cms,at=1m,for=2m", "engine-crash,at=2m", "overheat,at=3m,instance=i-never-existed"]
    assert main([*argv, "static-peak", *(a for f in faults for a in ("--fault", f))]) == 0
    captured = capsys.readouterr()
    assert "1 of 3 fault(s) never fired" in captured.err
    incidents = json.loads(captured.out)["incidents"]
    assert [i["cause"] for i in incidents] == ["engine-crash"]


def test_bench_verdicts_hold_servegen_days_to_the_oracle_and_static_targets():
    from fleet.sim.scenario import verdicts

    def s(minutes: int, hours: float, ratio: float) -> dict:
        return {"slo_violation_minutes": minutes, "gpu_hours": hours, "gpu_hours_vs_oracle": ratio}

    results = {
        "servegen-a": {"ours": s(0, 110, 1.1), "static-peak": s(1, 200, 1.8), "oracle": s(0, 100, 1.0)},
        "servegen-b": {"ours": s(0, 130, 1.3), "static-peak": s(1, 150, 1.5), "oracle": s(0, 100, 1.0)},
    }
    out = verdicts(results)
    assert out["servegen-a"] == []
    assert any("1.30x the oracle's" in m for m in out["servegen-b"])
    assert any("0.87x static-peak's" in m for m in out["servegen-b"])


def test_minutes_before_a_first_order_can_serve_are_counted_apart():
    from types import SimpleNamespace

    from fleet.sim.runner import summarize, warmup_minutes
    from fleet.sim.types import MinutePoint

    def point(minute: int, p99: float | None) -> MinutePoint:
        return MinutePoint(minute, "", 10, 10, 0, p99, 2, 2, 2, 0, 0, 40.0, 50.0)

    late = {1, 4, 5, 8}
    series = [point(m, 5000.0 if m in late else (None if m == 6 else 900.0)) for m in range(10)]
    world = SimpleNamespace(
        all_ttfts_ms=[900.0],
        all_tpots_ms=[30.0],
        total_requests=100,
        total_completed=100,
        total_rejected=0,
        total_dropped=0,
        total_unfinished=0,
    )
    warmup = warmup_minutes(240.0)
    assert warmup == 5  # minutes 0-4 start before an instance ordered at 0 s serves (240 s + up to a minute)
    s = summarize(
        world,
        series,
        slo_ttft_ms=3000.0,
        gpu_hours=1.0,
        cost_cny=1.0,
        scale_actions=0,
        max_instances=2,
        incidents=[],
        sla_breaches=0,
        invariant_violations=[],
        warmup=warmup,
    )
    assert (s["slo_violation_minutes"], s["warmup_violation_minutes"], s["warmup_minutes"]) == (2, 2, 5)
    assert warmup_minutes(30.0) == 2 and warmup_minutes(0.0) == 1


def test_bench_tables_show_the_start_fleets_minutes_apart_and_say_why():
    import io

    from rich.console import Console

    from fleet.commands.simulate import print_bench_tables

    def s(minutes: int, warm: int) -> dict:
        return {
            "slo_violation_minutes": minutes, "warmup_minutes": 5, "warmup_violation_minutes": warm,
            "gpu_hours": 10.0, "cost_cny": 146.0, "scale_actions": 3, "ttft_p99_ms": 900.0, "rejected": 0,
            "max_instances": 4,
        }  # fmt: skip

    buf = io.StringIO()
    print_bench_tables({"w": {"ours": s(3, 2), "static-peak": s(4, 0)}}, out=Console(file=buf, width=140))
    text = buf.getvalue()
    assert "3 (+2)" in text and "4 (+" not in text
    assert "first 5, before any policy's first order serves: not judged" in text
    buf = io.StringIO()
    print_bench_tables({"w": {"ours": s(3, 0)}}, out=Console(file=buf, width=140))
    assert "not judged" not in buf.getvalue()


def test_a_run_that_completed_nothing_has_no_p99_not_a_perfect_one(tmp_path, capsys):
    # the only instance loses its GPU at once: every request is rejected, and the P99 TTFT over the completed
    # ones was reported as 0.0 ms (the best run there is); now it is null, and the bench table shows "-"
    import io

    from rich.console import Console

    from fleet.commands.simulate import print_bench_tables

    doc = yaml.safe_load(DEFAULT_CONFIG.read_text())
    doc["groups"][0].update(min_size=1, max_size=1, warm_floor=1, schedules=[], predictive={"mode": "off"})
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    args = ["simulate", "--config", str(path), "--workload", "azure:conv,rate=0.1", "--hours", "0.05"]
    assert main([*args, "--fault", "xid:79,at=0", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["completed"] == 0 and s["rejected"] == s["requests"] > 0
    assert s["ttft_p99_ms"] is None and s["tpot_p99_ms"] is None
    buf = io.StringIO()
    print_bench_tables({"w": {"ours": s}}, out=Console(file=buf, width=140))
    assert "ours" in buf.getvalue()


def test_simulate_gives_the_fake_group_the_spot_mix_and_economical_mode_of_the_config(tmp_path):
    from fleet.sim.scenario import terraform_setup
    from fleet.testing import mock_aliyun

    text = DEFAULT_CONFIG.read_text().replace(
        "    predictive:",
        "    capacity_mix: {on_demand_base: 2, spot_percentage_above_base: 70}\n"
        "    economical_mode: true\n    predictive:",
        1,
    )
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    cfg = load_config(path, env={})
    with mock_aliyun() as cloud:
        gid = cloud.create_group_for_tests(name="g", min_size=0, max_size=4)
        setup = terraform_setup(cfg.groups[0])
        assert setup is not None and terraform_setup(load_config(DEFAULT_CONFIG, env={}).groups[0]) is None
        setup(cloud, gid)
        group = cloud.ess.groups[gid]
        fields = (group.scaling_policy, group.multi_az_policy, group.on_demand_base_capacity)
        assert fields == ("recycle", "COST_OPTIMIZED", 2)
        assert group.on_demand_percentage_above_base == 30
        assert cloud.ess.configurations[group.active_config_id].spot_strategy == "SpotAsPriceGo"
    # and a run buys spot above the base: cheaper per GPU-hour than on demand
    run = simulate(cfg, "servegen:m-small,day=2,peak=15,start_h=7", 1.0, options=SimOptions(tick_s=60))
    s = run.summary
    assert s["spot_instance_hours"] > 0
    assert (
        s["cost_cny"] / s["gpu_hours"]
        < 0.9 * run.hardware.price_cny_per_hour / run.hardware.gpus_per_instance
    )


def test_the_reports_cost_curve_ends_at_the_summarys_cost_for_a_spot_fleet(tmp_path):
    from fleet.sim.report_planning import run_cost_curve

    text = DEFAULT_CONFIG.read_text()
    path = tmp_path / "fleet.yaml"
    path.write_text(
        text.replace(
            "    predictive:",
            "    capacity_mix: {on_demand_base: 2, spot_percentage_above_base: 70}\n    predictive:",
            1,
        )
    )
    result = simulate(load_config(path, env={}), "azure:conv,rate=1", 10 / 60)
    assert result.summary.get("spot_instance_hours")
    curve = run_cost_curve(result)
    assert len(curve) == len(result.series) and curve == sorted(curve)
    assert curve[-1] == pytest.approx(result.summary["cost_cny"], abs=0.01)


def test_launches_that_never_serve_stop_the_scale_out_short_of_max_size(config):
    """Every instance launched from the first minute never gets vLLM up (a broken image), in the evening
    ramp: the rules read the dead ones as capacity and used to order the group to its max_size of 40 within
    45 minutes; the launch verdicts hold scale-out once two failed."""
    fault = parse_fault_spec("bad-launch,at=1m")
    workload = "servegen:m-large,day=9,peak=15,start_h=18"
    run = simulate(config, workload, 45 / 60, faults=[fault], options=SimOptions())
    assert run.fault_log[0]["event"] == "bad-launch"
    assert run.summary["max_instances"] <= 20 < config.groups[0].max_size
    assert run.summary["invariant_violations"] == []


def test_dead_launches_are_removed_and_a_real_fault_behind_them_still_isolated(config):
    """Every launch broken from the first minute in the evening ramp, and a GPU overheating on a serving node
    at 35 minutes: the dead launches' incidents trip no breaker (they take no serving capacity out) and
    their instances are removed; the overheating node is taken out of traffic."""
    faults = [parse_fault_spec("bad-launch,at=1m"), parse_fault_spec("overheat,at=35m,instance=0")]
    workload = "servegen:m-large,day=9,peak=15,start_h=18"
    run = simulate(config, workload, 50 / 60, faults=faults, options=SimOptions())
    incidents = run.summary["incidents"]
    dead = [i for i in incidents if i["cause"] == "metric: engine_down"]
    hot = [i for i in incidents if i not in dead]  # throttled or too hot, whichever rule holds first
    assert len(dead) >= 4  # more than the breaker's 3 an hour
    assert all(i["isolated_at"] is None for i in dead)  # not rebooted: a replacement would be as dead
    assert sum(1 for i in dead if i["outcome"] == "instance_gone") >= 4  # removed 10 min after the verdict
    assert len(hot) == 1 and hot[0]["isolated_at"] is not None
    assert run.summary["invariant_violations"] == []


def test_a_fleet_without_traffic_scales_in_on_its_rules_alone(tmp_path):
    # predictive off, so the rules decide alone, one of them on P99 TTFT: 10 minutes of requests and then
    # silence. No instance has a latency to report once idle; before, that read as missing and no rule ever
    # scaled in (the fleet kept its peak size through the silence)
    trace = tmp_path / "then-quiet.csv"
    rows = [f"{i / 10:.3f},2000,200" for i in range(6000)] + ["4700,500,100"]
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    config = tmp_path / "fleet.yaml"
    config.write_text(DEFAULT_CONFIG.read_text().replace("mode: on", "mode: off"))
    run = simulate(load_config(config, env={}), f"trace:{trace},loop=false", 1.25, options=SimOptions())
    assert not run.summary["invariant_violations"]
    peak = max(p.desired for p in run.series)
    assert peak > 6 and run.series[-1].desired == 6  # 10:00 local on a Monday: the business-hours floor


def _overheat_in_an_outage(config, at: str, outage: str, hours: float):
    """The conversation trace with one GPU's cooling failing at ``at`` and a cloud API outage: the run and
    its one incident (no invariant violated)."""
    overheat = replace(parse_fault_spec(f"overheat,at={at},instance=0"), extra_c=50.0)
    faults = [overheat, parse_fault_spec(outage)]
    run = simulate(config, "azure:conv,rate=0.5", hours, faults=faults, options=SimOptions())
    assert not run.summary["invariant_violations"]
    (inc,) = run.incidents
    return run, inc


def test_a_node_overheating_while_ess_is_down_is_detected_at_once_and_isolated_when_ess_is_back(config):
    # ESS's API down 02:05-02:45 UTC, a GPU losing its cooling at 02:08: the service watches the last
    # instance list it read, so it detects, admits and records the incident within minutes; the standby
    # and the reboot wait for ESS. Before, nothing was detected until ESS answered again.
    run, inc = _overheat_in_an_outage(config, "8m", "api-outage:ess,at=5m,for=40m", 1.0)
    detected, isolated = inc["detected_at"], inc["isolated_at"]
    assert "02:08" < detected[11:16] < "02:15" and inc["responded_at"] == detected
    assert isolated is not None and isolated[11:16] >= "02:45" and not inc["sla_breached"]


def test_a_node_ecs_cannot_reboot_is_not_returned_unmended_but_replaced(config):
    # ECS's API down 02:04-02:34 UTC with a GPU overheating from 02:03: the hot node is taken out (ESS works)
    # but its reboot errors. Resting in Standby it cooled, its health check passed and it went back unmended,
    # twice; now the reboot is asked again until the health timeout, then the node is replaced
    run, inc = _overheat_in_an_outage(config, "3m", "api-outage:ecs,at=4m,for=30m", 0.5)
    assert inc["action"] == "replace" and inc["state"] == "closed"
    steps = [d for d in run.decisions if d["kind"] == "isolation"]
    assert not any(d["action"] == "exit_standby" for d in steps)
    assert any(d["action"] == "reboot" and d["outcome"] == "error" for d in steps)


def test_the_capacity_test_measures_prompts_cut_as_the_run_cuts_them(config, tmp_path):
    # a tenth of the prompts past max_model_len: the run cuts them (docs/simulator.md), and so must the
    # capacity test, which sized each instance at its floor of 0.05 req/s when it fed them whole (the engine
    # rejects them, a P99 over them is a miss at any rate): the start fleet was 25 instances for 1 req/s
    rows = [f"{i},{100_000 if i % 10 == 0 else 200},50" for i in range(40)]
    trace = tmp_path / "long.csv"
    trace.write_text("timestamp,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    result = simulate(config, f"trace:{trace}", 2 / 60, policy="static-peak")
    assert result.summary["capacity_rps_per_instance"] > 0.3  # 0.05 before: the bisection's floor
    assert result.summary["max_instances"] <= 6  # the business-hours floor, not the collapsed capacity


@pytest.mark.parametrize(("max_model_len", "cap"), [(8192, 7680), (1024, 512), (512, 256), (300, 150)])
def test_prompts_are_cut_to_leave_room_for_an_answer_even_on_a_short_context(max_model_len, cap):
    # a group at predictive.max_model_len 512 had every prompt cut to 0 tokens (8192 less 512 for the rest),
    # and one at 300 to -212, which its instances then published as their demand
    from fleet.sim.scenario import prompt_cap_tokens

    assert prompt_cap_tokens(max_model_len) == cap


def test_a_spot_groups_start_fleet_is_bought_with_its_spot_mix_as_its_scale_outs_are(tmp_path):
    # The start fleet was launched before the group got its spot mix: all on demand, billed at full price,
    # and a spot-reclaim at the run's first minutes found no spot instance to reclaim (2026-12-07:
    # --config with capacity_mix --fault spot-reclaim,at=0,share=1.0 warned "reclaimed nothing").
    from fleet.sim import cloudview
    from fleet.sim.scenario import terraform_setup
    from fleet.testing import mock_aliyun

    text = DEFAULT_CONFIG.read_text().replace(
        "    predictive:",
        "    capacity_mix: {on_demand_base: 2, spot_percentage_above_base: 70}\n    predictive:",
        1,
    )
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    spec = load_config(path, env={}).groups[0]
    with mock_aliyun() as cloud:
        gid = cloudview.create_group(
            cloud, spec, Hardware(), 12, region="cn-hangzhou", max_size=40, setup=terraform_setup(spec)
        )
        members = [cloud.ecs.instances[i] for i in cloud.ess.groups[gid].instance_ids]
        spot = [i for i in members if i.spot_strategy != "NoSpot"]
        assert len(members) == 12
        assert len(spot) == 7  # 70 % of the 10 above the on-demand base of 2
