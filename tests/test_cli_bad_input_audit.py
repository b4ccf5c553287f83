"""An audit of every `fleet` command with bad input: each case is one clear line on stderr and exit 2 (never a
traceback, never exit 1 with a stack, never a half-written file or store), and stdout stays empty."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fleet.cli import main
from fleet.commands._common import parse_at

GROUP = (
    "region: cn-hangzhou\naccount_id: '1234567890'\ngroups:\n  - name: chat\n    scaling_group_id: asg-1\n"
    "    min_size: 1\n    max_size: 4\n"
)
TWO_GROUPS = GROUP + "  - name: code\n    scaling_group_id: asg-2\n    min_size: 1\n    max_size: 4\n"
SNAPSHOT = Path(__file__).resolve().parents[1] / "examples" / "snapshots" / "business-hours-steady.json"


def _write(tmp_path: Path, text: str, name: str = "fleet.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The last error line, after checking there is no traceback and nothing on stdout."""
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert out == ""
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert lines, err
    return lines[-1]


# -- fleet terraform --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ("[1, 2]", "the top level must be an object of resource types"),  # was AttributeError
        ('{"a": 1}', "a: expected an object of arguments"),  # was every resource unknown, exit 1
        ("{}", "it names no resource type"),
    ],
)
def test_terraform_check_refuses_a_file_that_is_not_a_provider_schema(tmp_path, capsys, schema, expected):
    module = tmp_path / "module"
    module.mkdir()
    (module / "main.tf").write_text('resource "alicloud_ess_scaling_group" "this" {}\n')
    path = _write(tmp_path, schema, "schema.json")
    assert main(["terraform", "check", str(module), "--schema", path]) == 2
    line = _one_error(capsys)
    assert f"--schema: {path} is not a provider schema" in line and expected in line


def test_terraform_export_to_a_directory_names_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = _write(tmp_path, GROUP)
    assert main(["terraform", "export", "--config", config, "--output", ""]) == 2  # "" is the directory "."
    assert "--output: . is a directory" in _one_error(capsys)  # was "Device or resource busy"


# -- a group's instance_types, checked by every command, not only validate ---------------------------------

BAD_TYPES = GROUP + "    instance_types: [ecs.no-such-type]\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["terraform", "export", "--output", "-"],
        ["plan", "--snapshot", str(SNAPSHOT)],
        ["simulate", "--hours", "0.1"],
        ["validate"],
    ],
)
def test_an_unknown_instance_type_in_a_group_is_refused_by_every_command(tmp_path, capsys, argv):
    config = _write(tmp_path, BAD_TYPES)
    assert main([*argv, "--config", config]) == 2
    assert "groups.chat.instance_types: unknown instance type 'ecs.no-such-type'" in _one_error(capsys)


def test_serve_refuses_an_unknown_instance_type_before_the_store_is_touched(tmp_path, capsys):
    config = _write(tmp_path, BAD_TYPES)
    db = tmp_path / "never.db"
    argv = ["serve", "--config", config, "--once", "--no-api", "--database", f"sqlite:///{db}"]
    assert main(argv) == 2  # was a tick ordering from a type the cloud does not sell
    assert "groups.chat.instance_types" in _one_error(capsys)
    assert not db.exists()


# -- fleet serve: the credentials library's tracebacks ------------------------------------------------------


@pytest.fixture
def credentials_logger():
    logger = logging.getLogger("credentials")
    level = logger.level
    logger.setLevel(logging.NOTSET)
    yield logger
    logger.setLevel(level)


def test_serve_keeps_the_credentials_librarys_tracebacks_off_stderr(
    tmp_path, capsys, monkeypatch, credentials_logger
):
    # a failed credential refresh was logged with its traceback on every call; the adapters report it as one
    # NoCredentials line. The endpoint is refused just after logging is set up, so nothing is called.
    monkeypatch.setenv("FLEET_ALIYUN_ENDPOINT", "ftp://127.0.0.1:1")
    config = _write(tmp_path, GROUP)
    argv = ["serve", "--config", config, "--once", "--no-api", "--database", f"sqlite:///{tmp_path / 'x.db'}"]
    assert main(argv) == 2
    assert "FLEET_ALIYUN_ENDPOINT" in _one_error(capsys)
    assert credentials_logger.level == logging.CRITICAL


# -- windows and instants -----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["decisions", "sla-report"])
@pytest.mark.parametrize("since", ["0", "0s"])
def test_a_window_of_zero_length_is_refused(tmp_path, capsys, command, since):
    from fleet.service.store import open_store

    db = f"sqlite:///{tmp_path / 'cli.db'}"
    open_store(db).close()
    assert main([command, "--since", since, "--database", db]) == 2  # was exit 0 and an empty table
    assert f"--since: '{since}' must be positive" in _one_error(capsys)


@pytest.mark.parametrize("command", ["status", "decisions", "sla-report"])
def test_a_database_the_store_does_not_support_is_named(capsys, command):
    # was "ModuleNotFoundError: No module named 'MySQLdb'", which reads as a broken install
    assert main([command, "--database", "mysql://fleet@127.0.0.1/fleet"]) == 2
    error = _one_error(capsys)
    assert "a mysql database is not supported" in error
    assert "postgresql+psycopg://" in error


@pytest.mark.parametrize("command", ["status", "decisions", "sla-report"])
def test_a_postgresql_driver_that_is_not_installed_is_named(capsys, command):
    # was "ModuleNotFoundError: No module named 'pg8000'": the driver comes with the postgres extra
    assert main([command, "--database", "postgresql+pg8000://fleet@127.0.0.1/fleet"]) == 2
    error = _one_error(capsys)
    assert "the PostgreSQL driver 'pg8000' is not installed" in error
    assert "gpu-fleet[postgres]" in error


def test_the_container_image_installs_the_driver_of_the_store_it_documents():
    # the Containerfile's own example points the service at postgresql+psycopg://, which a plain
    # `pip install .` cannot open
    text = (Path(__file__).resolve().parents[1] / "Containerfile").read_text()
    install = next(line for line in text.splitlines() if "pip install" in line)
    assert "postgresql+psycopg://" in text and "[postgres]" in install


def test_diagnose_until_before_the_calendar_is_one_line(tmp_path, capsys):
    config = _write(tmp_path, GROUP)
    assert main(["diagnose", "--config", config, "--until", "0001-01-01T00:00:00Z"]) == 2  # was OverflowError
    assert "--until: 0001-01-01T00:00:00+00:00 is outside 1970..8999" in _one_error(capsys)


def test_diagnose_until_without_a_zone_is_still_read_as_utc():
    at = parse_at("2026-03-02T10:00:00", "--until", naive_as_utc=True)
    assert at.isoformat() == "2026-03-02T10:00:00+00:00"


# -- fleet size ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("inf", "--gpu-memory-gib must be a positive number, got inf"),  # was OverflowError
        ("0", "--gpu-memory-gib must be a positive number, got 0"),  # was exit 1: "no option fits"
        ("-1", "--gpu-memory-gib must be a positive number, got -1"),
        ("nan", "--gpu-memory-gib must be a positive number, got nan"),
        ("1e308", "--gpu-memory-gib 1e+308 is more than"),  # was OverflowError
    ],
)
def test_size_refuses_a_gpu_memory_no_card_has(capsys, value, expected):
    argv = ["size", "--model", "Qwen2.5-7B", "--instance-type", "ecs.gn7i-c8g1.2xlarge"]
    assert main([*argv, "--gpu-memory-gib", value]) == 2
    assert expected in _one_error(capsys)


def test_size_refuses_more_gpu_memory_than_the_evaluated_card_has(capsys):
    assert main(["size", "--model", "Qwen2.5-7B", "--gpu", "A10", "--gpu-memory-gib", "30"]) == 2
    assert "--gpu-memory-gib 30 is more than the A10 shows CUDA (22.07 GiB" in _one_error(capsys)


def test_size_refuses_the_gpu_memory_label_where_cuda_sees_less(capsys):
    # an A10's 24 GB label: CUDA reports 22.07 GiB of it (gpus.yaml visible_gib, from vLLM logs)
    assert main(["size", "--model", "Qwen2.5-7B", "--gpu", "A10", "--gpu-memory-gib", "24"]) == 2
    assert "--gpu-memory-gib 24 is more than the A10 shows CUDA (22.07 GiB" in _one_error(capsys)
    assert main(["size", "--model", "Qwen2.5-7B", "--gpu", "A10", "--gpu-memory-gib", "22.07"]) == 0


def test_size_refuses_gpu_memory_for_a_search_over_every_card(capsys):
    # it was given to every GPU kind: a T4 sized with 60 GiB
    assert main(["size", "--model", "Qwen2.5-7B", "--gpu-memory-gib", "60"]) == 2
    assert "--gpu-memory-gib is the memory of one card: give it with --gpu or --instance-type" in _one_error(
        capsys
    )


def test_size_refuses_a_length_spread_that_overflows(capsys):
    argv = ["size", "--model", "Qwen2.5-7B", "--instance-type", "ecs.gn7i-c8g1.2xlarge", "--qps", "1"]
    assert main([*argv, "--length-cv", "1e308"]) == 2  # was OverflowError
    assert "--length-cv must be at most 10" in _one_error(capsys)


# -- fleet size calibrate: a 0 was read as "not given" and the log's value used --------------------------

VLLM_LOG = """\
Loading model weights took 14.9888 GB
Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB peak_torch_memory=17.06GiB \
memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90
GPU blocks: 1952, # CPU blocks: 2048
Maximum concurrency for 20000 tokens per request: 1.56x
"""


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("--max-model-len", "--max-model-len must be at least 1, got 0"),
        ("--max-num-seqs", "--max-num-seqs must be at least 1, got 0"),
        ("--max-num-batched-tokens", "--max-num-batched-tokens must be at least 1, got 0"),
        ("--gpu-memory-utilization", "--gpu-memory-utilization must be in (0, 1], got 0"),
    ],
)
def test_calibrate_refuses_a_zero_and_writes_nothing(tmp_path, capsys, flag, expected):
    log = _write(tmp_path, VLLM_LOG, "vllm.log")
    out = tmp_path / "cal.yaml"
    argv = ["size", "calibrate", log, "--model", "Llama-3.1-8B", "--gpu", "RTX3090", "--out", str(out)]
    assert main([*argv, flag, "0"]) == 2
    assert expected in _one_error(capsys)
    assert not out.exists()


# -- fleet bench --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--database", "bogus://"], "--database: NoSuchModuleError"),  # was a RuntimeError from a replica
        (["--database", "not a url"], "--database: ArgumentError"),
        (["--instances", "1001"], "--instances must be between 1 and 1000"),  # was the fake's AliyunError
        (["--latency-ms", "1e300"], "--latency-ms must be between 0 and 15000"),  # was a run with no tick
        (["--duration-s", "1e300"], "--duration-s must be above 0 and at most 86400"),
        (["--interval-s", "1e300"], "--interval-s must be between 0.1 and 86400 s"),
    ],
)
def test_bench_service_refuses_bad_flags_before_anything_starts(capsys, flags, expected):
    argv = ["bench", "service", "--groups", "1", "--instances", "1", "--duration-s", "1"]
    assert main([*argv, *flags]) == 2
    assert expected in _one_error(capsys)


def test_bench_capacity_refuses_a_config_with_several_groups(tmp_path, capsys):
    config = _write(tmp_path, TWO_GROUPS)
    argv = ["bench", "capacity", "--config", config, "--hours", "7", "--scenario", "spot"]
    assert main(argv) == 2  # was a run of the first group, the second one ignored
    assert "the capacity benchmark runs one group; this config has 2 (chat, code)" in _one_error(capsys)


# -- fleet simulate -----------------------------------------------------------------------------------------


def test_simulate_report_under_a_file_names_the_file(tmp_path, capsys):
    blocker = Path(_write(tmp_path, "not a directory", "out"))
    report = blocker / "sub" / "report.html"
    assert main(["simulate", "--hours", "0.1", "--report", str(report)]) == 2
    assert f"--report: {blocker} is a file, not a directory" in _one_error(capsys)  # was "File exists"
