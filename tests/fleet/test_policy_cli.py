"""`fleet validate` and `fleet plan`, run in-process through fleet.cli.main."""

import json
from pathlib import Path

import pytest

from fleet.cli import main
from policies import History, Plan

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")
SNAPSHOTS = ROOT / "examples" / "snapshots"


def test_validate_accepts_the_example(capsys):
    assert main(["validate", "--config", EXAMPLE]) == 0
    out, err = capsys.readouterr()
    assert "valid" in out and "chat-7b" in out
    assert "warning" not in err


def test_validate_lists_every_problem_and_exits_2(tmp_path, capsys):
    bad = tmp_path / "fleet.yaml"
    bad.write_text(
        "region: r\ngroups:\n  - {name: a, min_size: 1, max_size: 3, warm_flor: 1,\n"
        "     scale_out: [{metric: ttft_p99_ms, above: 800, for: forever}]}\n"
    )
    assert main(["validate", "--config", str(bad)]) == 2
    _, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 2
    assert any("groups[0].warm_flor: unknown key (did you mean 'warm_floor'?)" in line for line in lines)
    assert any("groups[0].scale_out[0].for:" in line for line in lines)
    assert "Traceback" not in err


def test_validate_warns_without_a_notification_channel(tmp_path, capsys):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text("region: r\ngroups:\n  - {name: a, min_size: 1, max_size: 3}\n")
    assert main(["validate", "--config", str(cfg)]) == 0
    _, err = capsys.readouterr()
    assert "warning:" in err and "no notification channel" in err


def test_validate_prints_the_json_schema(capsys):
    assert main(["validate", "--schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "groups" in schema["properties"]


def test_validate_needs_a_config(capsys):
    assert main(["validate"]) == 2


@pytest.mark.parametrize(
    "snapshot", sorted(p.name for p in SNAPSHOTS.glob("*.json") if ".history." not in p.name)
)
def test_plan_runs_on_every_example_snapshot(snapshot, capsys):
    assert main(["plan", "--config", EXAMPLE, "--snapshot", str(SNAPSHOTS / snapshot), "--json"]) == 0
    plan = Plan.model_validate_json(capsys.readouterr().out)
    assert plan.group("chat-7b") is not None


def test_plan_table_names_the_reason(capsys):
    assert main(["plan", "--config", EXAMPLE, "--snapshot", str(SNAPSHOTS / "queue-spike.json")]) == 0
    out = capsys.readouterr().out
    assert "chat-7b" in out and "panic" in out


def test_plan_with_history_shows_the_incident(tmp_path, capsys):
    saved = tmp_path / "next-history.json"
    args = [
        "plan",
        "--config",
        EXAMPLE,
        "--snapshot",
        str(SNAPSHOTS / "overheating-node.json"),
        "--history",
        str(SNAPSHOTS / "overheating-node.history.json"),
        "--json",
        "--save-history",
        str(saved),
    ]
    assert main(args) == 0
    plan = Plan.model_validate_json(capsys.readouterr().out)
    (incident,) = plan.group("chat-7b").incidents
    assert incident.rule == "gpu_overheat"
    assert History.model_validate_json(saved.read_text()) == plan.history


def test_plan_metrics_outage_reports_stale_metrics(capsys):
    assert main(["plan", "--config", EXAMPLE, "--snapshot", str(SNAPSHOTS / "metrics-outage.json")]) == 0
    assert "metric_stale" in capsys.readouterr().out


def test_plan_at_overrides_the_snapshot_time(capsys):
    args = [
        "plan",
        "--config",
        EXAMPLE,
        "--snapshot",
        str(SNAPSHOTS / "business-hours-steady.json"),
        "--json",
    ]
    assert main(args + ["--at", "2026-12-07T02:00:00Z"]) == 0
    day = Plan.model_validate_json(capsys.readouterr().out)
    assert main(args + ["--at", "2026-12-07T23:00:00+08:00"]) == 0
    night = Plan.model_validate_json(capsys.readouterr().out)
    assert day.group("chat-7b").floor == 6 and night.group("chat-7b").floor == 2


@pytest.mark.parametrize("at", ["2026-12-07T02:00:00", "yesterday"])
def test_plan_rejects_a_bad_or_naive_time(at, capsys):
    args = ["plan", "--config", EXAMPLE, "--snapshot", str(SNAPSHOTS / "queue-spike.json"), "--at", at]
    assert main(args) == 2
    assert "--at" in capsys.readouterr().err


def test_plan_reports_a_bad_snapshot_with_its_field(tmp_path, capsys):
    snap = tmp_path / "snap.json"
    snap.write_text(
        json.dumps({"taken_at": "2026-12-07T02:00:00Z", "groups": [{"name": "g", "instances": [{}]}]})
    )
    assert main(["plan", "--config", EXAMPLE, "--snapshot", str(snap)]) == 2
    err = capsys.readouterr().err
    assert "groups[0].instances[0].instance_id" in err and "Traceback" not in err


@pytest.mark.parametrize(("content", "expected"), [(None, "not found"), ("{not json", "not valid JSON")])
def test_plan_reports_an_unreadable_snapshot(tmp_path, capsys, content, expected):
    snap = tmp_path / "snap.json"
    if content is not None:
        snap.write_text(content)
    assert main(["plan", "--config", EXAMPLE, "--snapshot", str(snap)]) == 2
    assert expected in capsys.readouterr().err


def test_plan_with_an_invalid_config_exits_2(tmp_path, capsys):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text("region: r\n")
    assert main(["plan", "--config", str(cfg), "--snapshot", str(SNAPSHOTS / "queue-spike.json")]) == 2
    assert "groups" in capsys.readouterr().err


def test_a_config_or_snapshot_that_is_not_utf8_exits_2_naming_it(tmp_path, capsys):
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    for argv in (
        ["validate", "--config", str(binary)],
        ["plan", "--config", EXAMPLE, "--snapshot", str(binary)],
    ):
        assert main(argv) == 2
        _, err = capsys.readouterr()
        assert f"{binary}: not UTF-8 text" in err and "Traceback" not in err


def test_validate_refuses_an_instance_type_that_cannot_hold_the_model(tmp_path, capsys):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(
        "region: r\ngroups:\n  - {name: a, min_size: 1, max_size: 3, model: Llama-3.1-70B,\n"
        "     instance_types: [ecs.gn7i-c8g1.2xlarge]}\n"
    )
    assert main(["validate", "--config", str(cfg)]) == 2
    _, err = capsys.readouterr()
    assert "groups.a.instance_types: ecs.gn7i-c8g1.2xlarge cannot hold Llama-3.1-70B" in err
    assert "Traceback" not in err


def test_validate_accepts_capacity_keys_that_hold_the_model(tmp_path, capsys):
    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(
        "region: cn-hangzhou\ngroups:\n  - name: a\n    min_size: 1\n    max_size: 3\n    model: Qwen2.5-7B\n"
        "    instance_types: [ecs.gn7i-c8g1.2xlarge, ecs.gn8is.2xlarge]\n"
        "    zones: [{zone: cn-hangzhou-h, vswitch_id: vsw-h}, {zone: cn-hangzhou-i, vswitch_id: vsw-i}]\n"
        "    capacity_mix: {on_demand_base: 2, spot_percentage_above_base: 70, spot_price_limit: 6.5}\n"
        "    economical_mode: true\n"
    )
    assert main(["validate", "--config", str(cfg)]) == 0


def _with_demand(tmp_path, capacity_rps=None):
    """queue-spike.json with the agents' demand metrics on every instance (and, optionally, a capacity)."""
    snap = json.loads((SNAPSHOTS / "queue-spike.json").read_text())
    group = snap["groups"][0]
    for inst in group["instances"]:
        at = inst["metrics"]["queue_waiting"]["at"]
        inst["metrics"].update(
            request_rate={"value": 1.5, "at": at},
            prompt_tokens_per_request={"value": 900.0, "at": at},
            output_tokens_per_request={"value": 180.0, "at": at},
        )
    if capacity_rps is not None:
        group["demand"] = {"capacity_rps": capacity_rps, "capacity_source": "the snapshot's"}
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snap))
    return path


def test_plan_sizes_the_capacity_per_instance_as_the_service_does(tmp_path, capsys):
    from fleet.config import load_config
    from fleet.service.capacity_table import CapacityTable

    assert main(["plan", "--config", EXAMPLE, "--snapshot", str(_with_demand(tmp_path)), "--json"]) == 0
    inputs = Plan.model_validate_json(capsys.readouterr().out).group("chat-7b").predictive
    spec = load_config(Path(EXAMPLE), env={}).policy().groups[0]
    expected = CapacityTable().lookup(spec, 900.0, 180.0).rps
    assert expected and inputs["capacity_model_rps"] == pytest.approx(expected, abs=1e-3)
    assert inputs["demand_rps"] == pytest.approx(1.5 * 6)
    # a snapshot that carries its own capacity keeps it
    own = str(_with_demand(tmp_path, capacity_rps=0.42))
    assert main(["plan", "--config", EXAMPLE, "--snapshot", own, "--json"]) == 0
    assert Plan.model_validate_json(capsys.readouterr().out).group("chat-7b").predictive[
        "capacity_model_rps"
    ] == pytest.approx(0.42)


def test_plan_drops_the_samples_the_service_would_and_says_so(tmp_path, capsys):
    # a queue of -50 read "below 0.5" and scaled in; a KV cache at 195 % is no reading either
    doc = json.loads((SNAPSHOTS / "business-hours-steady.json").read_text())
    clean = json.loads(json.dumps(doc))
    first, second = doc["groups"][0]["instances"][:2]
    first["metrics"]["queue_waiting"]["value"] = -50
    second["metrics"]["kv_cache_usage_pct"] = {"value": 195, "at": doc["taken_at"]}
    del clean["groups"][0]["instances"][0]["metrics"]["queue_waiting"]
    clean["groups"][0]["instances"][1]["metrics"].pop("kv_cache_usage_pct", None)
    bad, good = tmp_path / "bad.json", tmp_path / "good.json"
    bad.write_text(json.dumps(doc))
    good.write_text(json.dumps(clean))
    assert main(["plan", "--config", EXAMPLE, "--snapshot", str(good), "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    assert main(["plan", "--config", EXAMPLE, "--snapshot", str(bad), "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out) == expected
    err = " ".join(out.err.split())
    assert f"instances[{first['instance_id']}].metrics.queue_waiting: value -50 is negative" in err
    assert "kv_cache_usage_pct: value 195 is above 100 %" in err


def test_plan_table_shows_capacity_ordered_and_not_yet_launched(tmp_path, capsys):
    doc = json.loads((SNAPSHOTS / "business-hours-steady.json").read_text())
    group = doc["groups"][0]
    serving = sum(
        1 for i in group["instances"] if i.get("lifecycle_state", "InService") in ("InService", "Pending")
    )
    group["desired_capacity"] = serving + 4  # ESS accepted 4 more and has not created them yet
    path = tmp_path / "ordered.json"
    path.write_text(json.dumps(doc))
    assert main(["plan", "--config", EXAMPLE, "--snapshot", str(path)]) == 0
    assert "+4 ordered" in capsys.readouterr().out


def test_plan_says_each_reason_for_dropping_samples_once(capsys):
    """A snapshot dated long after --at: every sample of every instance is in the future. It gave one warning
    per metric per instance (48 lines for the example); one line now, with the count."""
    snapshot = SNAPSHOTS / "business-hours-steady.json"
    doc = json.loads(snapshot.read_text())
    samples = sum(len(i["metrics"]) for g in doc["groups"] for i in g["instances"])
    argv = ["plan", "--config", EXAMPLE, "--snapshot", str(snapshot), "--at", "2020-01-01T00:00:00Z"]
    assert main(argv) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"and {samples - 1} more sample(s)" in warnings[0]
    assert "in the future" in warnings[0]
