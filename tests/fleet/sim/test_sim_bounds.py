"""What a simulated run promises about its inputs and bounds: absurd sizes refused, one group at a time, the
clock at the curve's hour, every count inside [min_size, max_size], no real notification, the new policies."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from fleet.cli import main
from fleet.config import load_config
from fleet.sim.scenario import DEFAULT_CONFIG, bench_autoscale, run_start, simulate
from fleet.sim.types import DEFAULT_START, SimOptions
from fleet.sim.workload import parse_workload_spec, traces_dir
from fleet.sim.world import parse_fault_spec

needs_traces = pytest.mark.skipif(
    not (traces_dir() / "azure2023_conv.csv").exists(), reason=f"shared traces not found at {traces_dir()}"
)


@pytest.fixture(scope="module")
def config():
    return load_config(DEFAULT_CONFIG, env={})


def _config_file(tmp_path, mutate) -> str:
    doc = yaml.safe_load(DEFAULT_CONFIG.read_text())
    mutate(doc)
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--hours", "1e9"], "--hours: must be above 0 and at most 336"),
        (["--hours", "inf"], "--hours"),
        (["--hours", "nan"], "--hours"),
        (["--tick-s", "0"], "--tick-s"),
        (["--tick-s", "1e12"], "--tick-s"),
        (["--model-error", "200"], "--model-error"),
        (["--model-error", "-5"], "--model-error"),
        (["--workload", "servegen:m-small,peak=1e9"], "peak must be between 0 and 1000"),
        (["--workload", "azure:conv,rate=1e7"], "rate must be between 0 and 100"),
        (["--workload", "azure:conv,speed=1e-12"], "speed must be between 0.001 and 1000"),
        (["--workload", "servegen:m-small,start_h=1e9"], "start_h must be between 0 and 336"),
        (["--workload", "servegen:m-small,day=-1"], "day must be between 0 and 13"),
        (["--workload", "servegen:m-small,day=1.5"], "day must be a whole number"),
        (["--workload", "servegen:m-small,peak=1000", "--hours", "300"], "more than one run simulates"),
        # named as --seed (2026-12-07; before, as "--workload: workload '...,seed=-1'", a SPEC nobody wrote)
        (["--seed", "-1"], "--seed: must be a whole number from 0"),
        (["--seed", "99999999999999999999999"], "--seed: must be a whole number from 0"),
    ],
)
def test_absurd_sizes_are_refused_in_one_line_with_exit_2(capsys, args, fragment):
    assert main(["simulate", *args]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "command", [["simulate"], ["bench", "autoscale", "--quick"], ["bench", "capacity", "--hours", "7"]]
)
def test_a_config_that_is_a_directory_is_one_line_and_exit_2(tmp_path, capsys, command):
    # (2026-12-07; before, the option's own check printed a usage box of five lines)
    assert main([*command, "--config", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--config: {tmp_path} is a directory" in err
    assert len(err.strip().splitlines()) == 1


def test_a_trace_that_cannot_loop_is_one_line_naming_it_not_an_absurd_size(tmp_path, capsys):
    path = tmp_path / "burst.csv"
    path.write_text("timestamp,prompt_tokens,output_tokens\n5,100,50\n5,200,60\n")
    assert main(["simulate", "--workload", f"trace:{path}", "--hours", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "all arrive at the same instant" in err and str(path) in err
    assert len(err.strip().splitlines()) == 1


def _max_3(doc):
    doc["groups"][0].update(max_size=3)
    doc["groups"][0]["schedules"][0]["min"] = 3


@needs_traces
def test_a_day_past_the_end_of_its_trace_is_one_line_and_exit_2(capsys):
    assert main(["simulate", "--workload", "servegen:deepseek-r1,day=3", "--hours", "0.05"]) == 2
    err = capsys.readouterr().err
    assert "day 3 is past the trace's 1 day(s)" in err and "Traceback" not in err


def _two_groups(doc):
    second = dict(doc["groups"][0], name="chat-14b-b", scaling_group_name="chat-14b-sim-b")
    doc["groups"].append(second)


@needs_traces
def test_a_config_with_two_groups_is_refused_without_group(tmp_path, capsys):
    path = _config_file(tmp_path, _two_groups)
    assert main(["simulate", "--config", path, "--hours", "0.05", "--workload", "azure:conv"]) == 2
    err = capsys.readouterr().err
    assert "2 groups (chat-14b, chat-14b-b)" in err and "--group" in err
    assert len(err.strip().splitlines()) == 1


@needs_traces
def test_an_unknown_group_is_refused(tmp_path, capsys):
    path = _config_file(tmp_path, _two_groups)
    assert main(["simulate", "--config", path, "--group", "nope", "--workload", "azure:conv"]) == 2
    assert "--group: no group 'nope'" in capsys.readouterr().err


@needs_traces
def test_group_picks_the_group_to_simulate(tmp_path, capsys):
    def mutate(doc):
        _two_groups(doc)
        doc["groups"][1]["min_size"] = doc["groups"][1]["warm_floor"] = 3

    path = _config_file(tmp_path, mutate)
    argv = ["simulate", "--config", path, "--group", "chat-14b-b", "--workload", "azure:conv,rate=0.2"]
    assert main([*argv, "--hours", "0.05", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["max_size"] == 40 and out["invariant_violations"] == []


def test_start_h_moves_the_clock_with_the_curve():
    spec = parse_workload_spec("servegen:m-small,start_h=9.5")
    assert run_start(spec, DEFAULT_START) == DEFAULT_START.replace(hour=DEFAULT_START.hour) + _h(9.5)
    assert run_start(parse_workload_spec("servegen:m-small"), DEFAULT_START) == DEFAULT_START
    assert run_start(parse_workload_spec("azure:conv"), DEFAULT_START) == DEFAULT_START + _h(10)


def _h(hours: float):
    from datetime import timedelta

    return timedelta(hours=hours)


@needs_traces
def test_a_run_from_start_h_10_on_a_monday_starts_inside_the_business_hours_floor(config):
    result = simulate(config, "servegen:m-small,start_h=10,peak=2", 3 / 60)
    assert result.series[0].at.startswith("2026-03-02T02:00")  # 10:00 in Shanghai
    assert min(p.desired for p in result.series) >= 6  # the weekday 09:00-18:00 floor


@needs_traces
@pytest.mark.parametrize("policy", ["static-peak", "ours", "oracle"])
def test_every_count_stays_inside_max_size_and_the_run_says_it_needed_more(tmp_path, policy):
    cfg = load_config(_config_file(tmp_path, _max_3), env={})
    result = simulate(cfg, "azure:conv,rate=2", 4 / 60, policy=policy)
    s = result.summary
    assert s["exceeds_max_size"] is True and s["peak_instances_needed"] > 3 and s["max_size"] == 3
    assert s["max_instances"] <= 3
    assert all(p.desired <= 3 and p.in_service + p.pending + p.standby <= 3 for p in result.series)
    assert s["invariant_violations"] == []


@needs_traces
def test_the_cli_warns_when_the_workload_needs_more_than_max_size(tmp_path, capsys):
    path = _config_file(tmp_path, _max_3)
    argv = ["simulate", "--config", path, "--workload", "azure:conv,rate=2", "--hours", "0.05", "--json"]
    assert main([*argv, "--policy", "static-peak"]) == 0
    captured = capsys.readouterr()
    assert "more than the group's max_size 3" in captured.err
    assert json.loads(captured.out)["max_instances"] <= 3


@needs_traces
def test_the_cli_warns_when_the_oracle_stops_at_its_cap_over_the_slo(monkeypatch, capsys):
    import fleet.sim.oracle as oracle_mod

    monkeypatch.setattr(oracle_mod, "REFINEMENTS", 0)
    argv = ["simulate", "--workload", "azure:code", "--hours", str(20 / 60), "--policy", "oracle", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["oracle_converged"] is False and summary["slo_violation_minutes"] > 0
    assert (
        f"breaks the SLO for {summary['slo_violation_minutes']} judged minutes after 1 passes" in captured.err
    )


def test_a_simulated_service_never_gets_a_real_notification_channel(tmp_path):
    from fleet.sim import cloudview
    from fleet.testing import ManualClock, mock_aliyun

    robot = {"type": "dingtalk", "url": "https://oapi.dingtalk.com/robot/send?access_token=x"}
    cfg = load_config(_config_file(tmp_path, lambda d: d.update(notifications=[robot])), env={})
    assert cfg.notifications  # the config does name a real DingTalk robot
    clock = ManualClock(DEFAULT_START)
    with mock_aliyun(clock=clock, account_id=cfg.account_id) as cloud:
        service, _ = cloudview.make_controller(
            replace(SimOptions(), policy="ours"), cfg, cfg.groups[0], cloud, clock, "asg-x"
        )
        assert tuple(service.notifier.channels) == ()


@needs_traces
def test_oracle_plan_spends_no_more_than_static_peak_and_is_refined_until_it_meets_the_slo(
    config, monkeypatch
):
    import fleet.sim.oracle as oracle_mod

    opts = SimOptions()
    static = simulate(config, "azure:code", 20 / 60, policy="static-peak", options=opts)
    oracle = simulate(config, "azure:code", 20 / 60, policy="oracle", options=opts)
    cap = 1 + oracle_mod.REFINEMENTS
    monkeypatch.setattr(oracle_mod, "REFINEMENTS", 0)
    plain = simulate(config, "azure:code", 20 / 60, policy="oracle", options=opts)
    assert plain.summary["gpu_hours"] <= static.summary["gpu_hours"]  # minute needs never exceed the peak's
    assert plain.summary["oracle_passes"] == 1 and plain.summary["slo_violation_minutes"] > 0
    assert plain.summary["oracle_converged"] is False  # the cap (here no pass) stopped it over the SLO
    passes = oracle.summary["oracle_passes"]
    assert 1 < passes <= cap
    # it refines until no minute breaks the SLO, or stops at the cap and says so
    assert oracle.summary["oracle_converged"] is (oracle.summary["slo_violation_minutes"] == 0)
    assert oracle.summary["oracle_converged"] or passes == cap
    assert len(oracle.extra["oracle_desired"]) == 20
    assert all(d["reason"].startswith("hindsight_") for d in oracle.decisions)


@needs_traces
def test_level_oracle_plans_from_the_known_level_without_corrections(config):
    def run(headroom: float):
        opts = SimOptions(oracle_level_headroom=headroom)
        return simulate(config, "azure:code", 20 / 60, policy="oracle", options=opts)

    low, high = run(1.5), run(3.0)
    assert "oracle_passes" not in low.summary  # no hindsight corrections of its own run
    need = low.options.oracle_need
    assert len(set(need[:10])) == 1 and len(set(need[10:])) == 1  # one count per 10-minute window
    assert all(2 * a - 1 <= b <= 2 * a for a, b in zip(need, high.options.oracle_need, strict=True))
    assert high.summary["gpu_hours"] > low.summary["gpu_hours"]
    assert low.summary["invariant_violations"] == [] and high.summary["invariant_violations"] == []


@needs_traces
def test_kpa_runs_clean_with_its_target_from_the_capacity_test(config):
    kpa = simulate(config, "azure:code", 20 / 60, policy="kpa", options=SimOptions())
    assert kpa.summary["invariant_violations"] == [] and kpa.options.kpa_target > 0
    assert all(d["reason"].split("_")[0] in ("stable", "panic") for d in kpa.decisions)


@needs_traces
def test_bench_summaries_carry_their_ratio_to_the_oracle(config):
    out = bench_autoscale(
        config,
        workloads=[("w", "azure:conv,rate=0.3", 5 / 60)],
        policies=("static-peak", "oracle"),
        model_error_pct=None,
    )
    per = out["w"]
    assert per["oracle"]["gpu_hours_vs_oracle"] == 1.0
    ratio = per["static-peak"]["gpu_hours"] / per["oracle"]["gpu_hours"]
    assert per["static-peak"]["gpu_hours_vs_oracle"] == pytest.approx(ratio, abs=1e-3)


@needs_traces
def test_model_error_is_recorded_in_the_summary(config):
    result = simulate(
        config, "azure:conv,rate=0.3", 3 / 60, policy="static-peak", options=SimOptions(model_error_pct=20.0)
    )
    assert result.summary["model_error_pct"] == 20.0
    assert -20.0 <= result.summary["model_error_bias_pct"] <= 20.0


def test_bench_and_sweep_refuse_bad_names(capsys):
    assert main(["bench", "autoscale", "--sweep", "nope"]) == 2
    assert "--sweep: unknown sweep 'nope'; one of servegen, shapes" in capsys.readouterr().err
    assert main(["bench", "autoscale", "--workload", "nope"]) == 2
    assert "--workload: unknown benchmark workload 'nope'" in capsys.readouterr().err
    assert main(["bench", "autoscale", "--policy", "nope"]) == 2
    assert "--policy: unknown policy 'nope'; one of ours, static-peak" in capsys.readouterr().err
    assert main(["bench", "autoscale", "--sweep", "servegen", "--policy", "ours"]) == 2
    assert "--workload/--policy: not with --sweep" in capsys.readouterr().err


@needs_traces
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sweep", "servegen", "--days", "3-x"], "--days: '3-x' is not a day or a range of days"),
        (["--sweep", "servegen", "--days", "2,14"], "--days: '14': days run from 0 to 13"),
        (["--sweep", "servegen", "--days", "5-2"], "--days: '5-2': days run from 0 to 13, a range from low"),
        (["--sweep", "servegen", "--days", "-1"], "--days: '-1' is not a day"),
        (["--sweep", "servegen", "--quick", "--days", "2"], "--days: not with --quick"),
        (["--days", "2"], "--days: only with --sweep"),
    ],
)
def test_sweep_days_refuse_bad_input_in_one_line(capsys, args, message):
    assert main(["bench", "autoscale", *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


@needs_traces
def test_sweep_days_choose_the_same_days_of_every_trace():
    from fleet.sim.sweep import SWEEP_TRACES, parse_days, sweep_workloads

    assert parse_days("2-4, 9,3") == [2, 3, 4, 9]
    names = [name for name, _, _ in sweep_workloads(parse_days("9,2"))]
    assert names == [f"servegen-{t}-day{d}" for t in SWEEP_TRACES for d in (2, 9)]
    specs = [spec for _, spec, _ in sweep_workloads([13])]
    assert specs == [f"servegen:{t},day=13,peak=15" for t in SWEEP_TRACES]
    # the first N days, as --quick runs them, are unchanged
    first_two = [f"servegen-{t}-day{d}" for t in SWEEP_TRACES for d in (0, 1)]
    assert [n for n, _, _ in sweep_workloads([0, 1])] == first_two


@needs_traces
def test_bench_in_worker_processes_gives_the_same_summaries_as_in_one(config):
    args = dict(workloads=[("w", "azure:conv,rate=0.2", 3 / 60)], policies=("static-peak", "oracle"))
    serial = bench_autoscale(config, model_error_pct=None, **args)
    parallel = bench_autoscale(config, model_error_pct=None, jobs=2, **args)
    strip = lambda out: {p: {k: v for k, v in s.items() if k != "wall_s"} for p, s in out["w"].items()}  # noqa: E731
    assert strip(serial) == strip(parallel)
    assert list(parallel["w"]) == ["static-peak", "oracle"]


@needs_traces
def test_runs_with_options_of_their_own_keep_them_and_their_order_in_worker_processes(config):
    from fleet.sim.scenario import BenchRun, run_benches

    run = BenchRun("w", "azure:conv,rate=2", 6 / 60, "oracle")
    runs = [(run, SimOptions(oracle_level_headroom=h)) for h in (3.0, 1.0, 2.0)]
    serial = run_benches(config, runs)
    parallel = run_benches(config, runs, jobs=2)
    strip = lambda s: {k: v for k, v in s.items() if k != "wall_s"}  # noqa: E731
    assert [strip(s) for s in serial] == [strip(s) for s in parallel]
    # each ran under its own margin: the GPU-hours follow the margins, not the order of the runs
    hours = [s["gpu_hours"] for s in parallel]
    assert hours[1] <= hours[2] <= hours[0] and hours[1] < hours[0]


def test_bench_jobs_are_bounded(capsys):
    assert main(["bench", "autoscale", "--jobs", "0"]) == 2
    assert "--jobs: must be between 1 and" in capsys.readouterr().err


@needs_traces
def test_sweep_days_reach_the_sweep_and_its_progress_count(monkeypatch, capsys):
    import fleet.sim.sweep as sweep

    seen = {}

    def fake_run_sweep(cfg, *, sweep, days, hours, progress, jobs, hardware):
        seen.update(days=days, jobs=jobs, hardware=(hardware.model, hardware.instance_type))
        return {"sweep": "servegen", "workloads": {}, "distribution": {}}

    monkeypatch.setattr(sweep, "run_sweep", fake_run_sweep)
    assert main(["bench", "autoscale", "--sweep", "servegen", "--days", "4,2-3", "--json"]) == 0
    # the embedded config's group declares the simulator's default hardware
    assert seen == {"days": [2, 3, 4], "jobs": 1, "hardware": ("Qwen2.5-14B", "ecs.gn7i-2x.8xlarge")}
    assert json.loads(capsys.readouterr().out)["sweep"] == "servegen"


@needs_traces
@pytest.mark.parametrize("policy", ["ess-alarm", "target-tracking", "kpa", "oracle"])
def test_a_baseline_rides_out_an_api_outage_and_the_summary_counts_its_failed_ticks(config, policy):
    # docs: an api-outage fails the baselines' calls as the service's; a baseline's failed read ended the
    # whole run in a traceback (ServerError: DescribeScalingGroups ... gave up after 5 attempts)
    fault = parse_fault_spec("api-outage:ess,at=1m,for=2m")
    s = simulate(config, "azure:conv,rate=0.3", 4 / 60, faults=[fault], policy=policy).summary
    assert s["failed_ticks"] >= 1 and s["requests"] > 0
    assert s["invariant_violations"] == []
