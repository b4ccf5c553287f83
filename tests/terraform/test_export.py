"""`fleet terraform export`: the module's variables from the config the service runs.

The alarms must agree with what the service acts on, the scheduled tasks must hold the same bounds the
policy computes, and every exported key must be a variable the example (and through it the module) takes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fleet.cli import main
from fleet.config import FleetConfig, load_config
from fleet.terraform.check import check_module
from fleet.terraform.export import (
    ALARM_PERIOD_S,
    SLO_ALARM_HOLD_S,
    ExportError,
    build_all_tfvars,
    build_tfvars,
    calendar_warning,
    scheduled_tasks_for,
)
from fleet.terraform.hcl import load_dir, load_hcl_tfvars, parse_type, type_errors
from policies import metrics as m
from policies.schedule import bounds
from policies.spec import GroupSpec

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_CONFIG = REPO / "examples" / "fleet.yaml"
NOW = datetime(2026, 11, 30, 16, 0, tzinfo=UTC)  # a Monday


def group(**overrides) -> GroupSpec:
    data = {"name": "chat-7b", "min_size": 2, "max_size": 20, "warm_floor": 2, "cold_start_s": 180}
    data.update(overrides)
    return GroupSpec.model_validate(data)


def config(*groups: GroupSpec, account_id: str | None = "1234567890") -> FleetConfig:
    return FleetConfig.model_validate(
        {
            "region": "cn-chengdu",
            "account_id": account_id,
            "groups": [g.model_dump(by_alias=True) for g in groups],
        }
    )


BUSINESS_HOURS = {
    "name": "business-hours",
    "timezone": "Asia/Shanghai",
    "days": "mon-fri",
    "start": "09:00",
    "end": "18:00",
    "min": 6,
}


# --- scheduled tasks ---------------------------------------------------------------------------------------


def test_business_hours_floor_starts_cold_start_early_in_utc():
    tasks = scheduled_tasks_for(group(schedules=[BUSINESS_HOURS]), NOW)
    # 09:00 Asia/Shanghai (UTC+8) is 01:00 UTC; 180 s of cold start makes it 00:57. 18:00 is 10:00 UTC.
    fields = ("recurrence_type", "recurrence_value", "min_value", "max_value")
    assert [(t["launch_time"][11:], *(t[f] for f in fields)) for t in tasks.values()] == [
        ("00:57Z", "Weekly", "1,2,3,4,5", 6, 20),
        ("10:00Z", "Weekly", "1,2,3,4,5", 2, 20),
    ]


def test_a_raise_inside_a_minute_fires_at_the_start_of_that_minute():
    tasks = scheduled_tasks_for(group(schedules=[BUSINESS_HOURS], cold_start_s=90), NOW)
    raise_floor = next(t for t in tasks.values() if t["min_value"] == 6)
    assert raise_floor["launch_time"][11:] == "00:58Z"  # 00:58:30 UTC, never late: 00:58


def test_first_launch_is_the_next_occurrence_after_now():
    tasks = scheduled_tasks_for(group(schedules=[BUSINESS_HOURS]), NOW)
    launches = sorted(t["launch_time"] for t in tasks.values())
    assert launches == ["2026-12-01T00:57Z", "2026-12-01T10:00Z"]  # Monday 16:00 UTC: both already passed


def test_window_before_0800_local_moves_to_the_previous_utc_day():
    morning = {**BUSINESS_HOURS, "start": "07:00", "end": "12:00"}
    tasks = scheduled_tasks_for(group(schedules=[morning], cold_start_s=0), NOW)
    # 07:00 Monday-Friday in UTC+8 is 23:00 UTC Sunday-Thursday (ESS: 0 = Sunday).
    raise_floor = next(t for t in tasks.values() if t["min_value"] == 6)
    assert (raise_floor["launch_time"][11:], raise_floor["recurrence_value"]) == ("23:00Z", "0,1,2,3,4")


def test_every_day_window_is_one_daily_task():
    daily = {**BUSINESS_HOURS, "days": "daily"}
    tasks = scheduled_tasks_for(group(schedules=[daily]), NOW)
    assert {(t["recurrence_type"], t["recurrence_value"]) for t in tasks.values()} == {("Daily", "1")}


def test_overlapping_windows_take_the_highest_floor_and_the_schedule_ceiling():
    peak = {
        "name": "peak",
        "timezone": "Asia/Shanghai",
        "days": "mon-fri",
        "start": "12:00",
        "end": "14:00",
        "min": 10,
        "max": 12,
    }
    tasks = scheduled_tasks_for(group(schedules=[BUSINESS_HOURS, peak], cold_start_s=0), NOW)
    by_time = {t["launch_time"][11:16]: (t["min_value"], t["max_value"]) for t in tasks.values()}
    # 12:00-14:00 local is 04:00-06:00 UTC: floor 10 and ceiling 12 inside business hours' floor 6.
    assert by_time == {"01:00": (6, 20), "04:00": (10, 12), "06:00": (6, 20), "10:00": (2, 20)}


def test_no_schedules_no_tasks():
    assert scheduled_tasks_for(group(), NOW) == {}


def test_daylight_saving_zone_cannot_be_mirrored_as_weekly_utc_tasks():
    berlin = {**BUSINESS_HOURS, "timezone": "Europe/Berlin"}
    with pytest.raises(ExportError, match="daylight saving time in Europe/Berlin"):
        scheduled_tasks_for(group(schedules=[berlin]), NOW)


def test_the_daylight_saving_refusal_names_only_the_zones_that_move_and_the_way_out():
    berlin = {**BUSINESS_HOURS, "name": "eu", "timezone": "Europe/Berlin"}
    with pytest.raises(ExportError) as err:
        scheduled_tasks_for(group(schedules=[BUSINESS_HOURS, berlin]), NOW)
    assert "daylight saving time in Europe/Berlin moves them" in str(err.value)  # not Asia/Shanghai
    assert "--no-scheduled-tasks" in str(err.value)


@pytest.mark.parametrize("at_day", [7, 29])  # the week after --at held no 1st of the month on the 7th: {}
@pytest.mark.parametrize("cron", ["0 9 1 * *", "0 9 * 1-6 *", "0 9 1-7 * 1"])
def test_a_cron_on_days_of_the_month_or_months_is_refused_whatever_the_date(at_day, cron):
    monthly = {"name": "monthly", "timezone": "Asia/Shanghai", "cron": cron, "duration": "2h", "min": 10}
    with pytest.raises(ExportError, match=r"schedule 'monthly': cron .* not every week") as err:
        scheduled_tasks_for(group(schedules=[monthly]), NOW.replace(day=at_day))
    assert "daylight" not in str(err.value)  # Shanghai has none
    weekly = {**monthly, "cron": "0 9 * * 1-5"}
    assert scheduled_tasks_for(group(schedules=[weekly]), NOW.replace(day=at_day))


def _ess_state(tasks: dict, at: datetime, base: tuple[int, int]) -> tuple[int, int]:
    """(MinSize, MaxSize) as ESS leaves them: the latest task occurrence at or before ``at`` decides."""
    latest: tuple[datetime, int, int] | None = None
    for task in tasks.values():
        hh, mm = int(task["launch_time"][11:13]), int(task["launch_time"][14:16])
        if task["recurrence_type"] == "Daily":
            days = set(range(7))
        else:
            days = {(int(d) - 1) % 7 for d in task["recurrence_value"].split(",")}  # ESS Sunday=0 -> Monday=0
        for back in range(8):
            day = (at - timedelta(days=back)).replace(hour=hh, minute=mm, second=0, microsecond=0)
            if day <= at and day.weekday() in days:
                if latest is None or day > latest[0]:
                    latest = (day, task["min_value"], task["max_value"])
                break
    return (latest[1], latest[2]) if latest else base


@pytest.mark.parametrize("cold_start_s", [0, 180, 1800])
def test_tasks_hold_the_same_bounds_the_service_computes(cold_start_s):
    nights = {
        "name": "nights",
        "timezone": "Asia/Shanghai",
        "days": "daily",
        "start": "22:00",
        "end": "06:00",
        "min": 3,
    }
    weekend = {
        "name": "weekend",
        "timezone": "Asia/Shanghai",
        "days": "sat,sun",
        "start": "10:00",
        "end": "20:00",
        "min": 4,
        "max": 8,
    }
    spec = group(schedules=[BUSINESS_HOURS, nights, weekend], cold_start_s=cold_start_s)
    tasks = scheduled_tasks_for(spec, NOW)
    t = NOW + timedelta(days=7)  # a week later: every task has fired at least once
    while t < NOW + timedelta(days=14):
        b = bounds(spec, t)
        assert _ess_state(tasks, t, (0, 0)) == (b.floor, b.ceiling), t.isoformat()
        t += timedelta(minutes=7)  # not a divisor of an hour: samples land on and off the change minutes


# --- alarms ------------------------------------------------------------------------------------------------


def test_alarm_thresholds_and_durations_come_from_the_rules_the_service_acts_on():
    spec = group(
        scale_out=[
            {"metric": "queue_waiting_per_instance", "above": 3, "for": "30s"},
            {"metric": "ttft_p99_ms", "above": 900, "for": "2m"},
        ],
        isolation={
            "rules": [
                {"name": "hot", "metric": "gpu_temperature_c", "above": 83, "for": "3m"},
                {"name": "mem", "metric": "gpu_mem_used_pct", "above": 97, "for": "5m"},
            ]
        },
    )
    alarms = build_tfvars(config(spec), now=NOW)["alarms"]
    assert alarms["gpu_temperature"]["threshold"] == 83
    assert alarms["gpu_temperature"]["times"] * alarms["gpu_temperature"]["period_s"] == 180
    assert alarms["gpu_memory"]["threshold"] == 97
    assert alarms["queue_depth"]["threshold"] == 3
    assert alarms["ttft_p99"]["threshold"] == 900
    assert alarms["ttft_p99"]["times"] * ALARM_PERIOD_S >= 120 + SLO_ALARM_HOLD_S


def test_alarm_metric_names_and_statistics_are_the_ones_the_service_reads():
    alarms = build_tfvars(
        config(group(scale_out=[{"metric": "ttft_p99_ms", "above": 800, "for": "60s"}])), now=NOW
    )["alarms"]
    assert (
        alarms["gpu_temperature"]["metric"],
        alarms["gpu_temperature"]["statistics"],
    ) == m.CMS_METRIC_NAMES[m.GPU_TEMPERATURE_C]
    assert alarms["gpu_temperature"]["custom_metric"] is False
    assert alarms["ttft_p99"]["metric"] == m.CUSTOM_METRIC_NAMES[m.TTFT_P99_MS]
    assert alarms["queue_depth"]["metric"] == m.CUSTOM_METRIC_NAMES[m.QUEUE_WAITING]
    assert alarms["ttft_p99"]["custom_metric"] is True


def test_the_lowest_threshold_of_several_rules_on_one_metric_wins():
    rules = [
        {"name": "a", "metric": "gpu_temperature_c", "above": 90, "for": "1m"},
        {"name": "b", "metric": "gpu_temperature_c", "above": 84, "for": "5m"},
    ]
    spec = group(isolation={"rules": rules})
    assert build_tfvars(config(spec), now=NOW)["alarms"]["gpu_temperature"]["threshold"] == 84


def test_default_latency_alarms_are_ttft_and_tpot_and_instance_down_is_always_present():
    # an end-to-end P99 grows with the answer's length and paged on every long answer (issue 21.4)
    alarms = build_tfvars(config(group()), now=NOW)["alarms"]
    assert (alarms["ttft_p99"]["metric"], alarms["ttft_p99"]["threshold"]) == ("vllm_ttft_p99_ms", 2000)
    assert (alarms["tpot_p99"]["metric"], alarms["tpot_p99"]["threshold"]) == ("vllm_tpot_p99_ms", 100)
    assert "latency_p99" not in alarms
    assert not any(a["metric"] == "vllm_e2e_p99_ms" for a in alarms.values())
    assert alarms["instance_down"]["metric"] == "vllm_up"


def test_without_a_latency_rule_the_alarms_sit_at_the_slos_the_predictive_section_declares():
    spec = group(predictive={"mode": "forecast-only", "capacity_rps": 1.0, "ttft_p99_ms": 3000})
    alarms = build_tfvars(config(spec), now=NOW)["alarms"]
    assert alarms["ttft_p99"]["threshold"] == 3000
    assert alarms["tpot_p99"]["threshold"] == 100  # none declared: the default


def test_an_e2e_rule_still_gets_its_own_alarm():
    spec = group(scale_out=[{"metric": "e2e_p99_ms", "above": 30000, "for": "2m"}])
    alarms = build_tfvars(config(spec), now=NOW)["alarms"]
    assert alarms["latency_p99"]["metric"] == "vllm_e2e_p99_ms"
    assert alarms["latency_p99"]["threshold"] == 30000


# --- the whole export -------------------------------------------------------------------------------------


def test_bounds_and_names_come_from_the_group():
    tfvars = build_tfvars(config(group(min_size=1, max_size=9, warm_floor=3)), now=NOW)
    assert (tfvars["name"], tfvars["min_size"], tfvars["max_size"], tfvars["desired_capacity"]) == (
        "chat-7b",
        1,
        9,
        3,
    )
    assert (tfvars["region"], tfvars["account_id"]) == ("cn-chengdu", "1234567890")


def test_several_groups_need_a_choice():
    cfg = config(group(), group(name="chat-70b"))
    with pytest.raises(ExportError, match="choose one with --group"):
        build_tfvars(cfg, now=NOW)
    assert build_tfvars(cfg, "chat-70b", now=NOW)["name"] == "chat-70b"
    with pytest.raises(ExportError, match="no group named 'chat-13b'"):
        build_tfvars(cfg, "chat-13b", now=NOW)


def test_the_chat_robot_is_the_configs_dingtalk_notification():
    cfg = config(group()).model_copy(update={"notifications": ()})
    assert "chat_robot_webhook_url" not in build_tfvars(cfg, now=NOW)
    with_robot = FleetConfig.model_validate(
        {
            **cfg.model_dump(),
            "notifications": [
                {"type": "webhook", "url": "https://hooks.example/fleet"},
                {"type": "dingtalk", "url": "https://oapi.dingtalk.com/robot/send?access_token=t"},
            ],
        }
    )
    assert (
        build_tfvars(with_robot, now=NOW)["chat_robot_webhook_url"]
        == "https://oapi.dingtalk.com/robot/send?access_token=t"
    )


def test_backstop_stays_above_the_services_gpu_utilization_trigger():
    assert "backstop_alarm" not in build_tfvars(config(group()), now=NOW)
    low = group(scale_out=[{"metric": "gpu_util_avg", "above": 70, "for": "3m"}])
    assert build_tfvars(config(low), now=NOW)["backstop_alarm"] == {"threshold": 95}
    high = group(scale_out=[{"metric": "gpu_util_avg", "above": 88, "for": "3m"}])
    assert build_tfvars(config(high), now=NOW)["backstop_alarm"] == {"threshold": 98}


def test_missing_account_id_is_an_error():
    with pytest.raises(ExportError, match="account_id is required"):
        build_tfvars(config(group(), account_id=None), now=NOW)


def _declared_types(directory: Path) -> dict:
    return {name: parse_type(block.body["type"]) for name, block in load_dir(directory).variables.items()}


def test_export_produces_variables_the_example_consumes(example_dir, module_dir):
    tfvars = build_tfvars(load_config(EXAMPLE_CONFIG, env={}), now=NOW)
    example = _declared_types(example_dir)
    module = _declared_types(module_dir)
    assert set(tfvars) <= set(example), set(tfvars) - set(example)
    problems = [e for key, value in tfvars.items() for e in type_errors(example[key], value, key)]
    assert not problems, problems
    # The example hands each of them to the module under the same name and type.
    passed = {k: v for k, v in load_dir(example_dir).of("module")[0].body.items() if isinstance(v, str)}
    for key in set(tfvars) - {"region"}:
        assert passed.get(key) == f"${{var.{key}}}", key
        assert example[key] == module[key], key


def test_exported_values_pass_the_schema_check(schema, module_dir, example_dir):
    tfvars = build_tfvars(load_config(EXAMPLE_CONFIG, env={}), now=NOW)
    infra = load_hcl_tfvars(example_dir / "terraform.tfvars")
    inputs = {k: [v] for k, v in {**infra, **tfvars}.items()}
    problems = check_module(module_dir, schema, inputs=inputs)
    assert not problems, "\n".join(map(str, problems))


def test_type_check_rejects_a_value_the_example_would_refuse(example_dir):
    example = _declared_types(example_dir)
    wrong = {"a": {"metric": "x", "threshold": "high", "colour": "red"}}
    errors = type_errors(example["alarms"], wrong, "alarms")
    assert "alarms.a: unknown attribute 'colour'" in errors[0]
    assert any("alarms.a.threshold: expected a number" in e for e in errors)


# --- the command ------------------------------------------------------------------------------------------


def test_cli_writes_the_tfvars_json(tmp_path):
    out = tmp_path / "terraform.tfvars.json"
    code = main(
        [
            "terraform",
            "export",
            "--config",
            str(EXAMPLE_CONFIG),
            "-o",
            str(out),
            "--at",
            "2026-11-30T16:00:00Z",
        ]
    )
    assert code == 0
    assert json.loads(out.read_text()) == build_tfvars(load_config(EXAMPLE_CONFIG), now=NOW)


def test_cli_can_leave_the_floors_to_the_service(tmp_path):
    out = tmp_path / "t.json"
    code = main(["terraform", "export", "-c", str(EXAMPLE_CONFIG), "-o", str(out), "--no-scheduled-tasks"])
    assert code == 0
    assert json.loads(out.read_text())["scheduled_tasks"] == {}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--at", "yesterday"], "--at: 'yesterday' is not an ISO 8601 instant"),
        (["--at", "2026-11-30T16:00:00"], "has no timezone"),
        (["--group", "nope"], "no group named 'nope'"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, extra, expected):
    out = tmp_path / "t.json"
    code = main(["terraform", "export", "--config", str(EXAMPLE_CONFIG), "-o", str(out), *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err
    assert "Traceback" not in err
    assert not out.exists()


def test_cli_invalid_config_names_the_field(tmp_path, capsys):
    bad = tmp_path / "fleet.yaml"
    bad.write_text("region: cn-chengdu\ngroups:\n  - {name: g, min_size: 2, max_size: 1}\n")
    code = main(["terraform", "export", "--config", str(bad), "-o", str(tmp_path / "t.json")])
    err = capsys.readouterr().err
    assert code == 2
    assert str(bad) in err and "min_size (2) is above max_size (1)" in err


def test_cli_writes_to_stdout_with_dash(capsys):
    code = main(["terraform", "export", "-c", str(EXAMPLE_CONFIG), "-o", "-", "--at", "2026-11-30T16:00:00Z"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["name"] == "chat-7b"


def test_cli_refuses_an_output_in_a_missing_directory(tmp_path, capsys):
    code = main(["terraform", "export", "-c", str(EXAMPLE_CONFIG), "-o", str(tmp_path / "no" / "t.json")])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err


def test_export_to_a_directory_it_cannot_write_exits_2_without_a_traceback(tmp_path, capsys, monkeypatch):
    import tempfile

    def refuse(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    out = tmp_path / "fleet.auto.tfvars.json"
    code = main(["terraform", "export", "--config", str(EXAMPLE_CONFIG), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"--output: cannot write {out}: Permission denied" in " ".join(err.split())
    assert not out.exists() and "Traceback" not in err


@pytest.mark.parametrize("content", [b"{bad", b"\xff\xfe\x00"])
def test_check_names_a_var_file_it_cannot_read(tmp_path, capsys, schema, module_dir, content):
    var_file = tmp_path / "broken.tfvars.json"
    var_file.write_bytes(content)
    code = main(["terraform", "check", str(module_dir), "--var-file", str(var_file)])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and f"--var-file: {var_file}:" in err and "Traceback" not in err


def test_export_file_mode_follows_the_umask(tmp_path):
    import os

    out = tmp_path / "fleet.auto.tfvars.json"
    old = os.umask(0o022)
    try:
        assert main(["terraform", "export", "--config", str(EXAMPLE_CONFIG), "-o", str(out)]) == 0
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o644


def test_export_lists_each_config_problem_on_its_own_error_line(tmp_path, capsys):
    config = tmp_path / "fleet.yaml"
    config.write_text("region: r\ngroups:\n  - {name: chat, min_size: x, max_size: 3, bogus: 1}\n")
    assert main(["terraform", "export", "--config", str(config), "-o", str(tmp_path / "out.json")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"error: {config}: groups[0].") for line in lines)
    assert not (tmp_path / "out.json").exists()


# --- several groups (issue 21.7) --------------------------------------------------------------------------

TWO_GROUPS = """region: cn-chengdu
account_id: '1234567890'
groups:
  - {name: chat-7b, scaling_group_id: asg-1, min_size: 2, max_size: 8}
  - {name: code-14b, scaling_group_id: asg-2, min_size: 1, max_size: 4}
"""


def test_cli_exports_every_group_one_file_each(tmp_path, capsys):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(TWO_GROUPS)
    code = main(["terraform", "export", "-c", str(cfg), "-o", str(tmp_path), "--at", "2026-11-30T16:00:00Z"])
    assert code == 0, capsys.readouterr().err
    loaded = load_config(cfg, env={})
    for name in ("chat-7b", "code-14b"):
        written = json.loads((tmp_path / f"{name}.tfvars.json").read_text())
        assert written == build_tfvars(loaded, name, now=NOW)
    assert json.loads((tmp_path / "code-14b.tfvars.json").read_text())["max_size"] == 4


def test_cli_prints_every_group_on_stdout_by_name(tmp_path, capsys):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(TWO_GROUPS)
    assert main(["terraform", "export", "-c", str(cfg), "-o", "-", "--at", "2026-11-30T16:00:00Z"]) == 0
    assert sorted(json.loads(capsys.readouterr().out)) == ["chat-7b", "code-14b"]


def test_cli_several_groups_into_one_file_is_one_line_naming_the_choices(tmp_path, capsys):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(TWO_GROUPS)
    out = tmp_path / "t.json"
    assert main(["terraform", "export", "-c", str(cfg), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a directory" in err and "--group" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_cli_group_still_exports_one(tmp_path):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(TWO_GROUPS)
    out = tmp_path / "one.json"
    assert main(["terraform", "export", "-c", str(cfg), "-o", str(out), "--group", "code-14b"]) == 0
    assert json.loads(out.read_text())["name"] == "code-14b"


# --- capacity (issue 17) ----------------------------------------------------------------------------------

CAPACITY = {
    "instance_types": ["ecs.gn8is.2xlarge", "ecs.gn7i-c8g1.2xlarge"],
    "zones": [
        {"zone": "cn-chengdu-a", "vswitch_id": "vsw-a"},
        {"zone": "cn-chengdu-b", "vswitch_id": "vsw-b"},
    ],
    "capacity_mix": {"on_demand_base": 2, "spot_percentage_above_base": 70, "spot_price_limit": 6.5},
    "economical_mode": True,
}


def test_capacity_keys_reach_the_scaling_group_and_configuration_variables():
    tfvars = build_tfvars(config(group(**CAPACITY)), now=NOW)
    assert tfvars["instance_types"] == CAPACITY["instance_types"]
    assert (tfvars["vswitch_ids"], tfvars["multi_az_policy"]) == (["vsw-a", "vsw-b"], "COST_OPTIMIZED")
    assert (tfvars["on_demand_base_capacity"], tfvars["on_demand_percentage_above_base_capacity"]) == (2, 30)
    assert (tfvars["spot_strategy"], tfvars["spot_price_limit"]) == ("SpotWithPriceLimit", 6.5)
    assert tfvars["scaling_policy"] == "recycle"


def test_capacity_values_pass_the_schema_check_and_the_example_types(schema, module_dir, example_dir):
    tfvars = build_tfvars(config(group(**CAPACITY)), now=NOW)
    example = _declared_types(example_dir)
    problems = [e for key, value in tfvars.items() for e in type_errors(example[key], value, key)]
    assert not problems, problems
    infra = load_hcl_tfvars(example_dir / "terraform.tfvars")
    inputs = {k: [v] for k, v in {**infra, **tfvars}.items()}
    problems = check_module(module_dir, schema, inputs=inputs)
    assert not problems, "\n".join(map(str, problems))


def test_a_group_without_capacity_keys_exports_none_of_them():
    tfvars = build_tfvars(config(group()), now=NOW)
    assert not {"instance_types", "vswitch_ids", "spot_strategy", "scaling_policy"} & set(tfvars)


# --- several regions and accounts -------------------------------------------------------------------------


def test_a_group_of_another_region_and_account_exports_its_own_region_and_namespace():
    cfg = FleetConfig.model_validate(
        {
            "region": "cn-chengdu",
            "account_id": "1234567890",
            "accounts": {"team-b": {"account_id": "9876543210"}},
            "groups": [
                {"name": "chat", "min_size": 1, "max_size": 4},
                {
                    "name": "chat-bj",
                    "region": "cn-beijing",
                    "account": "team-b",
                    "min_size": 1,
                    "max_size": 4,
                },
                {"name": "chat-sh", "region": "cn-shanghai", "min_size": 1, "max_size": 4},
            ],
        }
    )
    by_group = build_all_tfvars(cfg, now=NOW)
    assert {n: (t["region"], t["account_id"]) for n, t in by_group.items()} == {
        "chat": ("cn-chengdu", "1234567890"),
        "chat-bj": ("cn-beijing", "9876543210"),
        "chat-sh": ("cn-shanghai", "1234567890"),
    }


# --- calendar ----------------------------------------------------------------------------------------------

# illustrative: the Wednesday to Friday after NOW off, that Saturday worked
CALENDAR = {"holidays": ["2026-12-02..2026-12-04"], "workdays": ["2026-12-05"]}


def test_a_calendar_exports_the_regular_week_and_says_what_it_leaves_out():
    spec = group(schedules=[BUSINESS_HOURS], calendar=CALENDAR)
    # a holiday in the first week compared read as a week that differs from the others: refused as DST
    assert scheduled_tasks_for(spec, NOW) == scheduled_tasks_for(group(schedules=[BUSINESS_HOURS]), NOW)
    warning = calendar_warning(spec, NOW)
    assert warning is not None and "4 coming holidays and makeup workdays (2026-12-02 first)" in warning
    assert calendar_warning(spec, datetime(2026, 12, 6, tzinfo=UTC)) is None  # all past
    assert calendar_warning(group(schedules=[BUSINESS_HOURS]), NOW) is None


def test_the_export_command_warns_of_the_calendar_on_stderr(tmp_path, capsys):
    path = tmp_path / "fleet.yaml"
    cfg = config(group(schedules=[BUSINESS_HOURS], calendar=CALENDAR))
    path.write_text(json.dumps(cfg.model_dump(mode="json", by_alias=True, exclude_defaults=True)))
    out = tmp_path / "t.json"
    args = ["terraform", "export", "-c", str(path), "-o", str(out), "--at", NOW.isoformat()]
    assert main(args) == 0
    assert "do not honour the calendar's 4 coming" in capsys.readouterr().err
    assert main([*args, "--no-scheduled-tasks"]) == 0
    assert "calendar" not in capsys.readouterr().err
