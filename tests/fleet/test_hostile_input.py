"""Issue 14, items 7, 8 and 13: hostile flags, files and environment give one clear line and exit 2 (or the
right behaviour), never a traceback or a misleading message."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fleet.cli import main
from fleet.config import ConfigError, load_config, unknown_env_vars
from fleet.service.store import open_store

GROUP = (
    "region: cn-chengdu\ngroups:\n  - name: chat\n    scaling_group_id: asg-1\n    min_size: 1\n"
    "    max_size: 4\n"
)


def _write(tmp_path, text: str, name: str = "fleet.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert lines, err
    return lines[-1]


# -- item 7: tracebacks ---------------------------------------------------------------------------------


def test_deeply_nested_yaml_is_one_line(tmp_path, capsys):
    path = _write(tmp_path, "region: " + "[" * 3000 + "]" * 3000 + "\n")
    for argv in (["validate", "--config", path], ["serve", "--config", path, "--once"]):
        assert main(argv) == 2
        assert "nested too deeply" in _one_error(capsys)


def test_deeply_nested_yaml_in_simulate_is_one_line(tmp_path, capsys):
    path = _write(tmp_path, "groups: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n")
    assert main(["simulate", "--config", path, "--hours", "1"]) == 2
    assert "nested too deeply" in _one_error(capsys)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--interval", "nan"], "--interval must be between"),
        (["--interval", "inf"], "--interval must be between"),
        (["--interval", "1e-9"], "--interval must be between"),
        (["--log-level", "bogus"], "--log-level: 'bogus' is not one of"),
        (["--port", "99999"], "--port must be between 0 and 65535"),
        (["--holder", "h" * 300], "--holder: at most 200 characters"),
        (["--holder", "a\x00b"], "--holder: must not contain control characters"),
    ],
)
def test_bad_serve_flags_are_one_line_before_anything_starts(tmp_path, capsys, flags, expected):
    db = tmp_path / "never.db"
    path = _write(tmp_path, GROUP)
    assert main(["serve", "--config", path, "--once", "--database", f"sqlite:///{db}", *flags]) == 2
    line = _one_error(capsys)
    assert expected in line and "database" not in line  # item 8: inf was blamed on the database
    assert not db.exists()


def test_decisions_since_beyond_the_calendar_is_one_line(tmp_path, capsys):
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    assert main(["decisions", "--since", "99999999999d", "--database", db]) == 2
    assert "--since" in _one_error(capsys)


def test_sla_report_since_beyond_the_calendar_is_one_line(tmp_path, capsys):
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    assert main(["sla-report", "--since", "99999999999d", "--database", db]) == 2
    assert "--since" in _one_error(capsys)


def test_fleet_groups_not_json_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FLEET_GROUPS", "notjson")
    assert main(["validate", "--config", _write(tmp_path, GROUP)]) == 2
    assert "FLEET_GROUPS: not valid JSON" in _one_error(capsys)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["isolate", "i-" + "x" * 80, "--reason", "r"], "instance id: at most 64 characters"),
        (["isolate", "i-abc\x00", "--reason", "r"], "instance id: must not contain control characters"),
        (["isolate", "i-abc", "--reason", "bad\x00reason"], "--reason must not contain NUL"),
        (["release", "i-" + "x" * 80], "instance id: at most 64 characters"),
    ],
)
def test_operator_requests_the_store_cannot_hold_are_refused(tmp_path, capsys, argv, expected):
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    assert main([*argv, "--database", db]) == 2
    assert expected in _one_error(capsys)
    assert open_store(db).requests() == []


def _snapshot(tmp_path, taken_at: str, queue: float) -> str:
    snap = {
        "taken_at": taken_at,
        "groups": [
            {
                "name": "chat",
                "desired_capacity": 2,
                "instances": [
                    {
                        "instance_id": f"i-{k}",
                        "lifecycle_state": "InService",
                        "metrics": {"queue_waiting": {"value": queue, "at": taken_at}},
                    }
                    for k in range(2)
                ],
            }
        ],
    }
    return _write(tmp_path, json.dumps(snap), "snap.json")


PLAN_CFG = GROUP + "    scale_out:\n      - {metric: queue_waiting_per_instance, above: 2, for: 0s}\n"


def test_plan_at_the_end_of_the_calendar_is_one_line(tmp_path, capsys):
    cfg = _write(tmp_path, PLAN_CFG)
    snap = _snapshot(tmp_path, "9999-12-31T23:59:59Z", 1.0)
    assert main(["plan", "--config", cfg, "--snapshot", snap]) == 2
    assert "taken_at" in _one_error(capsys)


def test_plan_with_a_queue_of_minus_1e308_decides(tmp_path, capsys):
    cfg = _write(tmp_path, PLAN_CFG)
    snap = _snapshot(tmp_path, "2026-12-01T08:00:00Z", -1e308)
    assert main(["plan", "--config", cfg, "--snapshot", snap, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["groups"][0]["serving_target"] >= 1


def test_plan_with_a_queue_of_1e308_reads_it_unknown_as_the_service_does(tmp_path, capsys):
    # the policy core caps such a desire at the ceiling (tests/policies/test_hostile_values.py); the service
    # never lets it reach the core, and the shadow plan now drops it the same way instead of scaling to max
    cfg = _write(tmp_path, PLAN_CFG)
    snap = _snapshot(tmp_path, "2026-12-01T08:00:00Z", 1e308)
    assert main(["plan", "--config", cfg, "--snapshot", snap, "--json"]) == 0
    out = capsys.readouterr()
    group = json.loads(out.out)["groups"][0]
    assert group["serving_target"] == group["in_service"] + group["pending"] and group["direction"] == "none"
    err = " ".join(out.err.split())
    assert "metrics.queue_waiting" in err and "value 1e+308 is beyond any real reading" in err


def test_plan_refuses_a_snapshot_with_an_instance_listed_twice(tmp_path, capsys):
    cfg = _write(tmp_path, PLAN_CFG)
    path = _snapshot(tmp_path, "2026-12-01T08:00:00Z", 1.0)
    snap = json.loads((tmp_path / "snap.json").read_text())
    snap["groups"][0]["instances"][1]["instance_id"] = "i-0"
    _write(tmp_path, json.dumps(snap), "snap.json")
    assert main(["plan", "--config", cfg, "--snapshot", path]) == 2
    assert "i-0" in _one_error(capsys)


def test_plan_refuses_a_negative_desired_capacity(tmp_path, capsys):
    # ESS never reports one; a hand-written snapshot with one would plan from a nonsense in-flight count.
    cfg = _write(tmp_path, PLAN_CFG)
    path = _snapshot(tmp_path, "2026-12-01T08:00:00Z", 1.0)
    snap = json.loads((tmp_path / "snap.json").read_text())
    snap["groups"][0]["desired_capacity"] = -3
    _write(tmp_path, json.dumps(snap), "snap.json")
    assert main(["plan", "--config", cfg, "--snapshot", path]) == 2
    assert "desired_capacity" in _one_error(capsys)


def test_simulate_with_a_missing_trace_file_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FLEET_TRACES_DIR", str(tmp_path / "no-traces"))
    code = main(["simulate", "--hours", "1", "--workload", "azure:code"])
    assert code == 2
    assert "azure2023_code.csv: cannot read" in _one_error(capsys)


# -- item 8: misleading errors --------------------------------------------------------------------------


def test_an_environment_value_is_blamed_on_its_variable_not_the_file(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, GROUP), env={"FLEET_API__PORT": "abc"})
    (line,) = err.value.problems
    assert line.startswith("environment FLEET_API__PORT: api.port:") and "fleet.yaml" not in line


def test_unknown_fleet_variables_are_named_with_a_suggestion():
    warnings = unknown_env_vars({"FLEET_DATABSE_URL": "x", "FLEET_ALIYUN_ENDPOINT": "y", "HOME": "/"})
    assert warnings == [
        "environment: FLEET_DATABSE_URL is not a setting fleet reads (did you mean FLEET_DATABASE_URL?); "
        "it is ignored"
    ]


def test_known_fleet_variables_raise_no_warning():
    env = {
        "FLEET_API__TOKEN": "x" * 10,
        "FLEET_API_TOKEN": "x",
        "FLEET_TICK_INTERVAL_S": "5",
        "FLEET_REGION": "r",
    }
    assert unknown_env_vars(env) == []


def test_serve_logs_unknown_fleet_variables(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FLEET_TICK_INTERVL_S", "5")
    path = _write(tmp_path, GROUP)
    # a database that cannot open stops it right after logging is set up and the warnings are logged
    code = main(["serve", "--config", path, "--once", "--database", "nosuchdialect://x"])
    assert code == 2
    err = capsys.readouterr().err
    assert "FLEET_TICK_INTERVL_S" in err and "did you mean FLEET_TICK_INTERVAL_S" in err


# -- item 13: validation gaps ---------------------------------------------------------------------------


def test_a_duplicate_yaml_key_is_refused_with_both_lines(tmp_path):
    with pytest.raises(ConfigError, match=r"line 7.*duplicate key 'max_size' \(first given on line 6\)"):
        load_config(_write(tmp_path, GROUP + "    max_size: 40\n"), env={})


def test_serve_refuses_a_group_naming_no_scaling_group(tmp_path, capsys):
    path = _write(tmp_path, "region: r\ngroups:\n  - {name: chat, min_size: 1, max_size: 3}\n")
    assert main(["serve", "--config", path, "--once", "--database", f"sqlite:///{tmp_path / 'x.db'}"]) == 2
    assert "groups[chat]: give scaling_group_id or scaling_group_name" in _one_error(capsys)


def test_validate_warns_about_a_group_naming_no_scaling_group(tmp_path, capsys):
    path = _write(tmp_path, "region: r\ngroups:\n  - {name: chat, min_size: 1, max_size: 3}\n")
    assert main(["validate", "--config", path]) == 0
    assert "scaling_group_id or scaling_group_name" in capsys.readouterr().err


def test_a_tick_interval_of_a_nanosecond_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="tick_interval_s"):
        load_config(_write(tmp_path, GROUP + "tick_interval_s: 1e-9\n"), env={})


def test_a_three_character_api_token_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"api.token: must be at least 8 characters"):
        load_config(_write(tmp_path, GROUP + "api: {token: abc}\n"), env={})


def test_a_short_token_from_the_environment_is_refused_under_its_name(tmp_path):
    with pytest.raises(ConfigError, match=r"environment FLEET_API_TOKEN: api.token"):
        load_config(_write(tmp_path, GROUP), env={"FLEET_API_TOKEN": "abc"})


def test_listening_on_every_interface_warns_that_status_is_open(tmp_path, capsys):
    path = _write(tmp_path, GROUP + "api: {host: 0.0.0.0}\n")
    assert main(["validate", "--config", path]) == 0
    assert "unauthenticated" in capsys.readouterr().err.replace("need no token", "unauthenticated")


def test_duplicate_instances_in_an_observation_are_counted_once():
    from fleet.cloud.types import ScalingInstance
    from fleet.service.observe import GroupObservation
    from fleet.service.snapshot import _instances

    now = datetime.now(UTC)
    inst = ScalingInstance(
        instance_id="i-1",
        group_id="asg-1",
        lifecycle_state="InService",
        health_status="Healthy",
        creation_type="AutoCreated",
        created_at=now - timedelta(hours=1),
        zone_id="z",
    )
    g = GroupObservation(name="chat", ok=True, group=None, instances=[inst, inst])
    assert [i.instance_id for i in _instances(g, None)] == ["i-1"]


def test_validate_names_unknown_fleet_variables(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FLEET_DATABSE_URL", "sqlite:///x.db")
    assert main(["validate", "--config", _write(tmp_path, GROUP)]) == 0
    assert "did you mean FLEET_DATABASE_URL?" in capsys.readouterr().err


# -- NaN, infinity and absurd durations in fleet.yaml: refused by validate, never a crash later -----------

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("cold_start_s: 180 ", "cold_start_s: .nan ", "cold_start_s: a duration must be a finite number"),
        ("above: 800,", "above: .nan,", "scale_out[1].above: Input should be a finite number"),
        ("above: 800,", "above: .inf,", "scale_out[1].above: Input should be a finite number"),
        ("for: 30s, target: 4", "for: nan, target: 4", "scale_out[0].for: a duration must be a finite"),
        ("for: 30s, target: 4", "for: 99999999999999999d, target: 4", "cannot be longer than 366d"),
    ],
)
def test_non_finite_or_absurd_settings_are_refused(tmp_path, capsys, old, new, expected):
    text = Path(EXAMPLE).read_text()
    assert old in text
    path = _write(tmp_path, text.replace(old, new, 1))
    for argv in (["validate", "--config", path], ["terraform", "export", "--config", path, "-o", "-"]):
        assert main(argv) == 2
        assert expected in _one_error(capsys)


def test_a_non_finite_percentage_or_tick_interval_is_refused(tmp_path):
    bad = GROUP + '    stabilization: {max_step_down: "nan%"}\n'
    with pytest.raises(ConfigError, match="not a finite percentage"):
        load_config(_write(tmp_path, bad), env={})
    with pytest.raises(ConfigError, match="finite number of seconds"):
        load_config(_write(tmp_path, GROUP), env={"FLEET_TICK_INTERVAL_S": "inf"})


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["decisions"],
        ["incidents"],
        ["incidents", "show", "inc-1"],
        ["sla-report"],
    ],
)
def test_a_read_never_creates_an_empty_store(tmp_path, capsys, argv):
    db = tmp_path / "never.db"
    assert main([*argv, "--database", f"sqlite:///{db}"]) == 2
    assert "does not exist" in _one_error(capsys)
    assert not db.exists()


def test_a_model_that_does_not_fit_is_one_line_before_anything_is_simulated(capsys):
    argv = [
        "simulate",
        "--hours",
        "0.25",
        "--model",
        "Llama-3.1-70B",
        "--instance-type",
        "ecs.gn7i-c16g1.4xlarge",
    ]
    assert main(argv) == 2
    assert "does not fit on 1 x A10" in _one_error(capsys)


def test_an_instant_past_the_calendar_is_refused_by_terraform_export(capsys):
    for at in ("9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"):
        assert main(["terraform", "export", "--config", EXAMPLE, "-o", "-", "--at", at]) == 2
        assert "is outside 1970..8999" in _one_error(capsys)


def test_a_predictive_model_its_instance_type_cannot_hold_is_refused_by_validate(tmp_path, capsys):
    text = GROUP + "    predictive: {mode: on, model: Llama-3.1-70B, instance_type: ecs.gn7i-c16g1.4xlarge}\n"
    path = _write(tmp_path, text)
    assert main(["validate", "--config", path]) == 2
    assert "predictive.instance_type ecs.gn7i-c16g1.4xlarge cannot hold Llama-3.1-70B" in _one_error(capsys)
    fits = _write(tmp_path, text.replace("Llama-3.1-70B", "Qwen2.5-7B"), "fits.yaml")
    assert main(["validate", "--config", fits]) == 0


@pytest.mark.parametrize(
    ("model", "max_model_len", "problem"),
    [
        ("Qwen2.5-7B", 131072, "max_model_len 131072 is above Qwen2.5-7B's limit of 32768"),
        ("Llama-3.1-8B", 131072, "vLLM cannot start Llama-3.1-8B on ecs.gn7i-c16g1.4xlarge with it"),
        ("Llama-3.1-8B", 16384, None),
    ],
)
def test_a_predictive_max_model_len_the_deployment_cannot_serve_is_refused_by_validate(
    tmp_path, capsys, model, max_model_len, problem
):
    """Accepted before: the service's capacity model was refused at every tick (a warning in the log) and the
    group's predictive scaling never knew its capacity."""
    text = GROUP + (
        f"    predictive: {{mode: on, model: {model}, instance_type: ecs.gn7i-c16g1.4xlarge, "
        f"max_model_len: {max_model_len}}}\n"
    )
    assert main(["validate", "--config", _write(tmp_path, text)]) == (2 if problem else 0)
    if problem:
        assert problem in _one_error(capsys)


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ("max_num_seqs: 0", "max_num_seqs"),
        (
            "max_num_seqs: 256, max_num_batched_tokens: 128",
            "max_num_batched_tokens 128 is below max_num_seqs 256",
        ),
        ("gpu_memory_utilization: 1.5", "gpu_memory_utilization"),
        (
            "gpu_memory_utilization: 0.3",
            "cannot start Qwen2.5-7B on ecs.gn7i-c16g1.4xlarge with predictive.gpu_memory_utilization 0.3",
        ),
        ("max_num_seqs: 64, max_num_batched_tokens: 4096, gpu_memory_utilization: 0.85", None),
    ],
)
def test_predictive_vllm_settings_vllm_would_refuse_are_refused_by_validate(
    tmp_path, capsys, settings, problem
):
    text = GROUP + (
        "    predictive: {mode: on, model: Qwen2.5-7B, instance_type: ecs.gn7i-c16g1.4xlarge, "
        f"{settings}}}\n"
    )
    assert main(["validate", "--config", _write(tmp_path, text)]) == (2 if problem else 0)
    if problem:
        assert problem in _one_error(capsys)


def test_json_output_writes_nan_and_infinity_as_null_so_strict_parsers_read_it(capsys):
    from fleet.commands._common import print_json

    print_json({"a": float("nan"), "b": [1.0, float("inf")], "c": {"d": -float("inf")}, "e": 2.5})
    out = capsys.readouterr().out
    assert json.loads(out, parse_constant=lambda c: pytest.fail(f"bare {c} in --json output")) == {
        "a": None,
        "b": [1.0, None],
        "c": {"d": None},
        "e": 2.5,
    }
