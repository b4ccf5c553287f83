"""The module's variables under real Terraform, offline: a configuration holding only variables needs no
provider, so `terraform apply` evaluates their types, optional() defaults and validation blocks for real."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleet.config import load_config
from fleet.terraform.export import build_tfvars
from fleet.terraform.hcl import apply_defaults, literal, load_dir, load_hcl_tfvars, parse_type

REPO = Path(__file__).resolve().parents[2]
MODULE_DIR = REPO / "terraform"
EXAMPLE_DIR = MODULE_DIR / "examples" / "complete"
NOW = datetime(2026, 11, 30, 16, 0, tzinfo=UTC)


def _terraform_1_3() -> str:
    """A Terraform that knows optional() defaults (1.3+), from PATH or the virtualenv."""
    for candidate in (shutil.which("terraform"), str(Path(sys.prefix) / "bin" / "terraform")):
        if not candidate or not Path(candidate).is_file():
            continue
        out = subprocess.run(
            [candidate, "version", "-json"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
        match = re.search(r'"terraform_version":\s*"(\d+)\.(\d+)', out)
        if match and (int(match.group(1)), int(match.group(2))) >= (1, 3):
            return candidate
    pytest.skip("needs Terraform >= 1.3 on PATH (the module uses optional() defaults); none found")


def _inputs() -> dict:
    values = {
        **load_hcl_tfvars(EXAMPLE_DIR / "terraform.tfvars"),
        **build_tfvars(load_config(REPO / "examples" / "fleet.yaml", env={}), now=NOW),
    }
    values.pop("region")  # the example's own variable, not the module's
    return values


def _apply(tmp_path: Path, inputs: dict) -> subprocess.CompletedProcess[str]:
    terraform = _terraform_1_3()
    shutil.copy(MODULE_DIR / "variables.tf", tmp_path / "variables.tf")
    (tmp_path / "outputs.tf").write_text(
        "".join(f'output "{n}" {{\n  value = var.{n}\n}}\n' for n in ("alarms", "backstop_alarm"))
    )
    (tmp_path / "inputs.auto.tfvars.json").write_text(json.dumps(inputs))
    env_args = {"cwd": tmp_path, "capture_output": True, "text": True, "timeout": 120, "check": False}
    init = subprocess.run([terraform, "init", "-input=false", "-no-color"], **env_args)
    assert init.returncode == 0, init.stdout + init.stderr
    return subprocess.run([terraform, "apply", "-auto-approve", "-input=false", "-no-color"], **env_args)


def test_variable_validations_accept_the_export_and_the_example_inputs(tmp_path):
    result = _apply(tmp_path, _inputs())
    assert result.returncode == 0, result.stdout + result.stderr


def test_terraform_fills_optional_defaults_as_the_checker_assumes(tmp_path):
    inputs = _inputs()
    del inputs["alarms"]  # the module's default alarms, with their optional() attributes left out
    assert _apply(tmp_path, inputs).returncode == 0
    shown = subprocess.run(
        [_terraform_1_3(), "output", "-json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    outputs = json.loads(shown.stdout)
    variables = load_dir(MODULE_DIR).variables
    for name in ("alarms", "backstop_alarm"):
        body = variables[name].body
        expected = apply_defaults(parse_type(body["type"]), literal(body["default"]))
        assert outputs[name]["value"] == expected, name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"alarms": {"x": {"metric": "m", "threshold": 1, "level": "urgent"}}}, "level must be one of"),
        ({"alarms": {"x": {"metric": "m", "threshold": 1, "period_s": 50}}}, "multiple of 15"),
        (
            {
                "scheduled_tasks": {
                    "x": {"launch_time": "tomorrow", "recurrence_type": "Weekly", "recurrence_value": "1"}
                }
            },
            "launch_time must be UTC",
        ),
        ({"instance_types": ["gn7i-c8g1.2xlarge"]}, 'starting with "ecs."'),
        ({"backstop_alarm": {"period_s": 30}}, "60, 120, 300 or 900"),
    ],
)
def test_variable_validations_refuse_bad_input(tmp_path, change, message):
    result = _apply(tmp_path, {**_inputs(), **change})
    assert result.returncode != 0
    assert message in " ".join((result.stdout + result.stderr).split())
