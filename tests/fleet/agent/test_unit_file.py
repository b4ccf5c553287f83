"""deploy/fleet-agent.service: runs `fleet agent`, restarts, and passes systemd-analyze where available."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[3] / "deploy" / "fleet-agent.service"


def load_unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


def test_unit_runs_the_agent_and_restarts_it():
    unit = load_unit()
    assert unit["Service"]["ExecStart"].split()[1:3] == ["agent", "$FLEET_AGENT_ARGS"]
    assert unit["Service"]["Restart"] == "always"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_unit_does_not_run_as_root():
    assert load_unit()["Service"]["DynamicUser"] == "yes"


def test_unit_holds_only_the_capability_to_read_the_kernel_log():
    # /dev/kmsg (XIDs, fleet.agent.kmsg) needs CAP_SYSLOG under kernel.dmesg_restrict=1; nothing more is held
    service = load_unit()["Service"]
    assert service["AmbientCapabilities"] == service["CapabilityBoundingSet"] == "CAP_SYSLOG"
    assert service.get("ProtectKernelLogs", "no") == "no"


def test_systemd_accepts_the_unit(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    # The binary path only exists on an installed node: point ExecStart at one that exists here.
    text = UNIT.read_text().replace("/opt/fleet/.venv/bin/fleet", shutil.which("true") or "/bin/true")
    copy = tmp_path / "fleet-agent.service"
    copy.write_text(text)
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    problems = [line for line in result.stderr.splitlines() if "fleet-agent.service" in line]
    assert result.returncode == 0 and not problems, result.stderr
