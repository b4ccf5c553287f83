"""`fleet diagnose` via fleet.cli.main: snapshot files, bad input, and end to end against the fake cloud."""

from __future__ import annotations

import json
from datetime import UTC, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from fleet.cli import main
from fleet.testing import FakeAliyunServer

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "diagnose"
ACCOUNT = "1234567890"
KEYS = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "test-key", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "test-secret"}


def run_json(capsys, *args: str) -> dict:
    code = main(["diagnose", *args, "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def test_example_snapshot_reports_the_overheating_gpu(capsys):
    data = run_json(capsys, "--snapshot", str(EXAMPLES / "overheating-gpu.json"))
    assert [f["kind"] for f in data["findings"]] == ["thermal_throttling"]
    assert data["findings"][0]["evidence"]["temperature_max_c"] >= 85


def test_healthy_example_has_no_findings(capsys):
    assert run_json(capsys, "--snapshot", str(EXAMPLES / "healthy-steady.json"))["findings"] == []


def test_every_example_parses_and_names_its_group(capsys):
    for path in sorted(EXAMPLES.glob("*.json")):
        data = run_json(capsys, "--snapshot", str(path))
        assert data["groups"] and data["groups"][0]["group"].startswith("diag-"), path


def test_human_output_is_a_table(capsys):
    assert main(["diagnose", "--snapshot", str(EXAMPLES / "kv-pressure-long-context.json")]) == 0
    out = capsys.readouterr().out
    assert "kv_cache_pressure" in out and "fix" in out


def test_save_writes_a_snapshot_that_diagnoses_the_same(tmp_path, capsys):
    saved = tmp_path / "again.json"
    first = run_json(capsys, "--snapshot", str(EXAMPLES / "falsely-busy-queue.json"), "--save", str(saved))
    again = run_json(capsys, "--snapshot", str(saved))
    assert (
        [f["kind"] for f in again["findings"]] == [f["kind"] for f in first["findings"]] == ["queue_backlog"]
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--snapshot", "/no/such/file.json"], "cannot read"),
        (["--snapshot", str(EXAMPLES / "healthy-steady.json"), "--group", "nope"], "no group 'nope'"),
        (["--snapshot", str(EXAMPLES / "healthy-steady.json"), "--since", "5x"], "--since"),
        (
            ["--snapshot", str(EXAMPLES / "healthy-steady.json"), "--since", "367d"],
            "--since: '367d': a duration cannot be longer than 366d",
        ),
        (
            ["--snapshot", str(EXAMPLES / "healthy-steady.json"), "--since", "-5m"],
            "--since: '-5m' must be positive",
        ),
        (["--since", "30m"], "--config"),
        (["--config", "/no/such/fleet.yaml"], "fleet.yaml"),
        (
            ["--snapshot", str(EXAMPLES / "healthy-steady.json"), "--model", "Nope-7B"],
            "--model: unknown model",
        ),
        (
            ["--snapshot", str(EXAMPLES / "healthy-steady.json"), "--instance-type", "ecs.nope"],
            "--instance-type: unknown instance type",
        ),
        (["--snapshot", str(EXAMPLES / "healthy-steady.json"), "--prompt-tokens", "inf"], "--prompt-tokens"),
        (["--snapshot", str(EXAMPLES / "healthy-steady.json"), "--output-tokens", "inf"], "--output-tokens"),
        (
            ["--snapshot", str(EXAMPLES / "healthy-steady.json"), "--max-num-batched-tokens", "8"],
            "--max-num-batched-tokens: must be at least 16, got 8",
        ),
        (
            ["--snapshot", str(EXAMPLES / "healthy-steady.json"), "--max-num-seqs", "0"],
            "--max-num-seqs: must be at least 1, got 0",
        ),
        (
            [
                "--snapshot",
                str(EXAMPLES / "healthy-steady.json"),
                "--max-num-seqs",
                "128",
                "--max-num-batched-tokens",
                "64",
            ],
            "--max-num-batched-tokens: 64 is below max_num_seqs 128",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    assert main(["diagnose", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not JSON"),
        ('{"group": {"name": "g"}, "start": "2026-01-01T00:00:00Z"}', "end: missing"),
        ('{"group": {"name": "g", "colour": 1}, "start": 0, "end": 60}', "unknown field(s) colour"),
        (
            '{"group": {"name": "g"}, "start": 0, "end": 60, "instances": [{"instance_id": "i-1", '
            '"metrics": {"queue_waiting": [[10, "x"]]}}]}',
            "queue_waiting[0]: value 'x' is not a number",
        ),
    ],
)
def test_bad_snapshot_names_the_field(tmp_path, content, message, capsys):
    path = tmp_path / "s.json"
    path.write_text(content)
    assert main(["diagnose", "--snapshot", str(path)]) == 2
    assert message in capsys.readouterr().err


# ---- end to end against the fake cloud server --------------------------------------------------------------
@pytest.fixture
def fake_cloud(monkeypatch):
    with FakeAliyunServer(account_id=ACCOUNT) as server:
        monkeypatch.setenv("FLEET_ALIYUN_ENDPOINT", server.endpoint)
        for k, v in KEYS.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("FLEET_DATABASE_URL", raising=False)
        yield server.cloud


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        f"region: cn-hangzhou\naccount_id: '{ACCOUNT}'\ndatabase_url: sqlite:///{tmp_path}/fleet.db\n"
        "groups:\n"
        "  - name: chat\n    scaling_group_name: chat-prod\n    min_size: 1\n    max_size: 8\n"
        "    cold_start_s: 240\n"
        "    scale_out:\n      - {metric: ttft_p99_ms, above: 2000, for: 60s}\n"
    )
    return path


def _group(cloud) -> list[str]:
    gid = cloud.create_group_for_tests(
        name="chat-prod", min_size=1, max_size=8, desired_capacity=3, in_service=3
    )
    cloud.advance(1800)  # the instances have long finished loading
    return sorted(cloud.ess.groups[gid].instance_ids)


def _publish(cloud, ids: list[str], hot: str) -> None:
    now = cloud.now()
    for k in range(32):
        ts_ms = int((now - timedelta(seconds=15 * (32 - k))).timestamp() * 1000)
        for iid in ids:
            dims = {"instanceId": iid}
            hot_now = iid == hot
            custom = {
                "vllm_num_requests_waiting": 0.0,
                "vllm_num_requests_running": 8.0,
                "vllm_kv_cache_usage_pct": 25.0,
                "vllm_ttft_p99_ms": 1300.0,
                "vllm_tpot_p99_ms": 110.0 if hot_now else 70.0,
                "gpu_throttle_reasons": float(0x60 if hot_now else 0),
                "gpu_sm_clock_ratio": 0.6 if hot_now else 1.0,
                "gpu_mem_bw_util": 63.0,
            }
            for name, value in custom.items():
                cloud.put_custom_metric(name, dims, value, ts_ms)
            cloud.publish_metric("acs_ecs_dashboard", "instance_gpu_gpu_usedutilization", dims, 96.0, ts_ms)
            cloud.publish_metric(
                "acs_ecs_dashboard", "instance_gpu_gpu_temperature", dims, 92.0 if hot_now else 73.0, ts_ms
            )


def test_end_to_end_finds_the_hot_gpu_in_published_metrics(fake_cloud, tmp_path, capsys):
    ids = _group(fake_cloud)
    _publish(fake_cloud, ids, hot=ids[1])
    until = fake_cloud.now().isoformat()
    data = run_json(capsys, "--config", str(_config(tmp_path)), "--since", "10m", "--until", until)
    assert [(f["kind"], f["scope"]) for f in data["findings"]] == [("thermal_throttling", [ids[1]])]
    assert data["groups"][0]["instances"] == 3 and data["groups"][0]["errors"] == []


def test_end_to_end_window_with_an_offset_is_printed_in_utc(fake_cloud, tmp_path, capsys):
    ids = _group(fake_cloud)
    _publish(fake_cloud, ids, hot=ids[1])
    end = fake_cloud.now().astimezone(UTC)
    until = end.astimezone(timezone(timedelta(hours=8))).isoformat()
    data = run_json(capsys, "--config", str(_config(tmp_path)), "--since", "10m", "--until", until)
    assert data["groups"][0]["window"]["end"] == end.isoformat().replace("+00:00", "Z")
    assert main(["diagnose", "--config", str(_config(tmp_path)), "--since", "10m", "--until", until]) == 0
    assert f"- {end:%H:%M} UTC" in capsys.readouterr().out


def test_end_to_end_without_metrics_reports_metrics_missing(fake_cloud, tmp_path, capsys):
    ids = _group(fake_cloud)
    until = fake_cloud.now().isoformat()
    data = run_json(capsys, "--config", str(_config(tmp_path)), "--until", until)
    assert [f["kind"] for f in data["findings"]] == ["metrics_missing"]
    assert sorted(data["findings"][0]["scope"]) == ids


def test_end_to_end_unknown_group_name_is_exit_2(fake_cloud, tmp_path, capsys):
    _group(fake_cloud)
    assert main(["diagnose", "--config", str(_config(tmp_path)), "--group", "other"]) == 2
    assert "no group 'other'" in capsys.readouterr().err


def test_end_to_end_missing_scaling_group_is_one_line(fake_cloud, tmp_path, capsys):
    assert main(["diagnose", "--config", str(_config(tmp_path))]) == 1
    err = capsys.readouterr().err.strip()
    assert "chat-prod" in err and len(err.splitlines()) == 1


def test_a_snapshot_that_is_not_utf8_exits_2_naming_it(tmp_path, capsys):
    binary = tmp_path / "window.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert main(["diagnose", "--snapshot", str(binary)]) == 2
    err = capsys.readouterr().err
    assert f"{binary}: not UTF-8 text" in err and "Traceback" not in err


def test_a_credentials_refresh_traceback_logged_by_the_sdk_stays_off_stderr(
    fake_cloud, tmp_path, capsys, monkeypatch
):
    import logging

    import fleet.diagnose.reader as reader

    def unreadable(*_args, **_kwargs):
        try:
            raise RuntimeError("metadata service answered 404")
        except RuntimeError:
            # what alibabacloud_credentials does when no provider in its chain has credentials
            logging.getLogger("credentials").error("Refresh credentials failed", exc_info=True)
        raise reader.ReadError("group chat: DescribeScalingInstances: NoCredentials: no provider had any")

    monkeypatch.setattr(reader, "read_window", unreadable)
    monkeypatch.setattr(logging.getLogger("credentials"), "level", logging.NOTSET)
    assert main(["diagnose", "--config", str(_config(tmp_path))]) == 1
    err = capsys.readouterr().err.strip()
    assert "NoCredentials" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_an_error_quoting_brackets_prints_them(tmp_path, capsys):
    window = json.loads((EXAMPLES / "healthy-steady.json").read_text())
    window["instances"][0]["metrics"]["e2e_p99_ms"] = "abc"
    path = tmp_path / "window.json"
    path.write_text(json.dumps(window))
    assert main(["diagnose", "--snapshot", str(path)]) == 2
    assert "expected a list of [time, value] pairs" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize(
    "field, value, named",
    [
        ("slo_ttft_p99_ms", "fast", "group.slo_ttft_p99_ms: expected a non-negative number, got 'fast'"),
        ("model", 7, "group.model: expected a string, got 7"),
        ("min_size", 1.5, "group.min_size: expected a whole number, got 1.5"),
    ],
)
def test_a_snapshot_group_field_of_the_wrong_type_is_one_line_naming_file_and_field(
    tmp_path, capsys, field, value, named
):
    window = json.loads((EXAMPLES / "healthy-steady.json").read_text())
    window["group"][field] = value
    path = tmp_path / "window.json"
    path.write_text(json.dumps(window))
    assert main(["diagnose", "--snapshot", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"error: {path}: {named}" in err and "Traceback" not in err


def _healthy_with(tmp_path: Path, change: Any) -> Path:
    window = json.loads((EXAMPLES / "healthy-steady.json").read_text())
    change(window)
    path = tmp_path / "window.json"
    path.write_text(json.dumps(window))
    return path


def _set_first_sample_time(value: Any) -> Any:
    def change(window: dict) -> None:
        window["instances"][0]["metrics"]["queue_waiting"][0][0] = value

    return change


def _set(key: str, value: Any) -> Any:
    return lambda window: window.__setitem__(key, value)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (_set_first_sample_time(1e300), "metrics.queue_waiting[0]: epoch 1e+300 is outside 1970..8999"),
        (_set_first_sample_time(float("inf")), "metrics.queue_waiting[0]: inf is not a time"),
        (_set_first_sample_time(float("nan")), "metrics.queue_waiting[0]: nan is not a time"),
        (_set_first_sample_time(-1e12), "metrics.queue_waiting[0]: epoch -1000000000000.0 is outside"),
        (_set("start", "0001-01-01T00:00:00Z"), "start: 0001-01-01T00:00:00+00:00 is outside 1970..8999"),
        (_set("start", -62135596800), "start: epoch -62135596800 is outside 1970..8999"),
        (_set("end", "9999-12-31T23:59:59-01:00"), "end: 9999-12-31T23:59:59-01:00 is outside 1970..8999"),
        (
            _set("scale_outs", [{"at": "2026-03-02T02:07:00Z", "from": 1, "to": float("inf")}]),
            "scale_outs[0].to: expected a whole number of instances",
        ),
        (
            _set("scale_outs", [{"at": "2026-03-02T02:07:00Z", "from": None, "to": 2}]),
            "scale_outs[0].from: expected a whole number of instances",
        ),
        (lambda w: w["group"].__setitem__("cold_start_s", 1e308), "group.cold_start_s: 1e+308 s is longer"),
        (lambda w: w["group"].__setitem__("publish_period_s", 1e300), "group.publish_period_s: 1e+300 s"),
        (
            lambda w: w["group"].__setitem__("publish_period_s", 0),
            "group.publish_period_s: the agent's period",
        ),
        (
            _set("scale_outs", [{"at": "2026-03-02T02:07:00Z", "from": 4, "to": 2}]),
            "scale_outs[0]: a scale-out goes up; from 4 to 2 does not",
        ),
    ],
)
def test_a_snapshot_time_or_number_out_of_range_is_one_line_naming_the_field(tmp_path, capsys, change, named):
    path = _healthy_with(tmp_path, change)
    assert main(["diagnose", "--snapshot", str(path)]) == 2
    err = capsys.readouterr().err
    assert named in " ".join(err.split()) and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            lambda w: w["group"].__setitem__("model", "Qwen2.5-14b-typo"),
            "group.model: unknown model 'Qwen2.5-14b-typo'; nearest: Qwen2.5-14B",
        ),
        (
            lambda w: w["group"].__setitem__("instance_type", "ecs.gn7i-2x.8xlarg"),
            "group.instance_type: unknown instance type 'ecs.gn7i-2x.8xlarg'; nearest: ecs.gn7i-2x.8xlarge",
        ),
        (
            lambda w: w["instances"][1].__setitem__("instance_id", w["instances"][0]["instance_id"]),
            "instances[1].instance_id: ",
        ),
    ],
)
def test_a_snapshot_naming_an_unknown_model_or_a_repeated_instance_is_refused(
    tmp_path, capsys, change, named
):
    path = _healthy_with(tmp_path, change)
    assert main(["diagnose", "--snapshot", str(path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert named in err and "Traceback" not in err


def test_a_snapshot_with_two_windows_of_one_group_is_refused(tmp_path, capsys):
    window = json.loads((EXAMPLES / "healthy-steady.json").read_text())
    path = tmp_path / "windows.json"
    path.write_text(json.dumps({"windows": [window, window]}))
    assert main(["diagnose", "--snapshot", str(path)]) == 2
    name = window["group"]["name"]
    assert f"windows[1].group.name: '{name}' repeats windows[0]" in " ".join(capsys.readouterr().err.split())


def test_dropped_samples_are_printed_even_without_findings(tmp_path, capsys):
    def negative_queue(window: dict) -> None:
        for point in window["instances"][0]["metrics"]["queue_waiting"]:
            point[1] = -5

    path = _healthy_with(tmp_path, negative_queue)
    assert main(["diagnose", "--snapshot", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "no latency problem found" in out and "window errors:" in out and "queue_waiting" in out


@pytest.mark.parametrize("flag", ["--config", "--snapshot"])
def test_a_directory_for_a_file_is_one_line_naming_the_option(capsys, tmp_path, flag):
    assert main(["diagnose", flag, str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"error: {flag}: {tmp_path} is a directory; give the file"]


def test_the_groups_batch_limits_reach_the_window(tmp_path, capsys):
    saved = tmp_path / "again.json"
    args = ["--max-num-seqs", "64", "--max-num-batched-tokens", "512", "--save", str(saved)]
    run_json(capsys, "--snapshot", str(EXAMPLES / "healthy-steady.json"), *args)
    group = json.loads(saved.read_text())["group"]
    assert (group["max_num_seqs"], group["max_num_batched_tokens"]) == (64, 512)


def test_the_configs_batch_limits_reach_the_window_unless_the_flags_give_them(fake_cloud, tmp_path, capsys):
    ids = _group(fake_cloud)
    _publish(fake_cloud, ids, hot=ids[1])
    config = _config(tmp_path)
    config.write_text(
        config.read_text() + "    predictive: {max_num_seqs: 48, max_num_batched_tokens: 1024}\n"
    )
    until = fake_cloud.now().isoformat()
    saved = tmp_path / "again.json"
    base = ["--config", str(config), "--since", "10m", "--until", until, "--save", str(saved)]
    run_json(capsys, *base)
    group = json.loads(saved.read_text())["group"]
    assert (group["max_num_seqs"], group["max_num_batched_tokens"]) == (48, 1024)
    run_json(capsys, *base, "--max-num-seqs", "96")
    group = json.loads(saved.read_text())["group"]
    assert (group["max_num_seqs"], group["max_num_batched_tokens"]) == (96, 1024)
