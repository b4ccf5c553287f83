"""The issue's acceptance list, walked by a script that uses only the official SDK clients: over HTTP against
``FakeAliyunServer`` and against ``fleet fake-cloud`` in a subprocess, and in-process under
``mock_aliyun()``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from fleet.testing import FakeAliyunServer, FakeCloud, mock_aliyun

from .acceptance_script import HttpControl, run
from .conftest import START


class MockControl:
    def __init__(self, cloud: FakeCloud) -> None:
        self.cloud = cloud

    def advance(self, seconds: float) -> None:
        self.cloud.advance(seconds)

    def throttle(self, action: str) -> None:
        self.cloud.inject_fault(action, count=1)


def check(seen: dict[str, Any]) -> None:
    assert seen["repeated_activity"] == seen["activity"]
    assert seen["concurrent_error"] == "ScalingActivityInProgress"
    assert seen["states_before_boot"] == ["Pending", "Pending"]
    assert seen["states_after_boot"] == ["InService", "InService"]
    assert seen["activity_status"] == "Successful"
    assert seen["datapoints_type"] == "str" and seen["metrics"] == seen["expected_metrics"]
    assert seen["throttled"] == ("Throttling.User", 400)


def test_acceptance_in_process_under_mock_aliyun() -> None:
    with mock_aliyun(boot_seconds=30, start=START) as cloud:
        check(run(None, MockControl(cloud), boot_seconds=30))


def test_acceptance_over_http_against_fake_aliyun_server() -> None:
    with FakeAliyunServer(port=0, boot_seconds=30, time_scale=1.0) as server:
        check(run(server.endpoint, HttpControl(server.endpoint), boot_seconds=30))


@pytest.mark.slow
def test_acceptance_against_the_fleet_fake_cloud_command() -> None:
    fleet = Path(sys.executable).with_name("fleet")
    command = [str(fleet)] if fleet.exists() else [sys.executable, "-m", "fleet.cli"]
    proc = subprocess.Popen(
        [*command, "fake-cloud", "--port", "0", "--boot-seconds", "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert "listening on 127.0.0.1:" in line, line + (
            proc.stderr.read() if proc.poll() is not None else ""
        )
        endpoint = line.split("listening on ", 1)[1].split()[0]
        check(run(endpoint, HttpControl(endpoint), boot_seconds=30))
        with urllib.request.urlopen(f"http://{endpoint}/_fake/state", timeout=10) as response:
            state = json.loads(response.read())
        assert len(state["ess"]["groups"]) == 1 and len(state["ecs"]["instances"]) == 2
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.returncode in (0, -15)
