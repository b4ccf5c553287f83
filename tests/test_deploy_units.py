"""deploy/*.service: the agent's and the service's systemd units run their command as an unprivileged user,
restart it, and pass systemd-analyze where available."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
AGENT, SERVICE = "fleet-agent.service", "fleet-service.service"


def load_unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string((DEPLOY / name).read_text())
    return parser


@pytest.mark.parametrize(("name", "command"), [(AGENT, ["agent"]), (SERVICE, ["serve"])])
def test_unit_runs_its_command_and_restarts_it(name, command):
    unit = load_unit(name)
    assert unit["Service"]["ExecStart"].split()[1 : 1 + len(command)] == command
    assert unit["Service"]["Restart"] == "always"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


@pytest.mark.parametrize("name", [AGENT, SERVICE])
def test_unit_does_not_run_as_root(name):
    assert load_unit(name)["Service"]["DynamicUser"] == "yes"


def test_agent_unit_holds_only_the_capability_to_read_the_kernel_log():
    # /dev/kmsg (XIDs, fleet.agent.kmsg) needs CAP_SYSLOG under kernel.dmesg_restrict=1; nothing more is held
    service = load_unit(AGENT)["Service"]
    assert service["AmbientCapabilities"] == service["CapabilityBoundingSet"] == "CAP_SYSLOG"
    assert service.get("ProtectKernelLogs", "no") == "no"


def test_service_unit_stops_with_sigterm_and_reloads_with_sighup():
    # SIGTERM finishes the tick and releases the shard leases; SIGHUP checks and reloads fleet.yaml
    service = load_unit(SERVICE)["Service"]
    assert service["KillSignal"] == "SIGTERM" and "-HUP $MAINPID" in service["ExecReload"]


def test_service_unit_runs_in_its_state_directory():
    # ProtectSystem=strict leaves "/" read-only: a store or file named relative to the working directory
    # (the default SQLite fleet.db) must land in the writable state directory, not in "/"
    service = load_unit(SERVICE)["Service"]
    assert service["ProtectSystem"] == "strict"
    assert service["WorkingDirectory"] == f"/var/lib/{service['StateDirectory']}"


@pytest.mark.parametrize("name", [AGENT, SERVICE])
def test_systemd_accepts_the_unit(tmp_path, name):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    # The binary path only exists on an installed node: point ExecStart at one that exists here.
    true = shutil.which("true") or "/bin/true"
    text = (DEPLOY / name).read_text().replace("/opt/fleet/.venv/bin/fleet", true)
    copy = tmp_path / name
    copy.write_text(text)
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    problems = [line for line in result.stderr.splitlines() if name in line]
    assert result.returncode == 0 and not problems, result.stderr
