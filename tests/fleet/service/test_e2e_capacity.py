"""End to end: `fleet fake-cloud` and `fleet serve --once` as subprocesses. The service falls back along its
capacity ladder when the primary type is sold out, replaces a spot instance on its reclaim notice, and both
survive a restart (the next process reads them from the store)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from alibabacloud_ess20220222 import models as m
from alibabacloud_ess20220222.client import Client as EssClient
from alibabacloud_tea_openapi import models as open_api_models

pytestmark = pytest.mark.slow

REGION = "cn-chengdu"
REPO = Path(__file__).resolve().parents[3]
A10, L20 = "ecs.gn7i-c8g1.2xlarge", "ecs.gn8is.2xlarge"


class Fake:
    """`fleet fake-cloud --port 0` in a subprocess, driven over its control API."""

    def __init__(self, proc: subprocess.Popen[str], endpoint: str) -> None:
        self.proc = proc
        self.endpoint = endpoint
        self.http = httpx.Client(base_url=f"http://{endpoint}/_fake/", timeout=10)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = self.http.post(path, json=body)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def state(self) -> dict[str, Any]:
        return dict(self.http.get("state").json())

    def ess(self) -> EssClient:
        config = open_api_models.Config(
            access_key_id="ak",
            access_key_secret="sk",
            region_id=REGION,
            endpoint=self.endpoint,
            protocol="http",
        )
        return EssClient(config)


@pytest.fixture
def fake() -> Iterator[Fake]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleet.cli",
            "fake-cloud",
            "--port",
            "0",
            "--boot-seconds",
            "5",
            "--region",
            REGION,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    endpoint = line.split("listening on ", 1)[1].split()[0]
    try:
        yield Fake(proc, endpoint)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def run_fleet(tmp: Path, fake: Fake, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "FLEET_ALIYUN_ENDPOINT": fake.endpoint,
        "ALIBABA_CLOUD_ACCESS_KEY_ID": "ak",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "sk",
        "PYTHONPATH": str(REPO),
    }
    return subprocess.run(
        [sys.executable, "-m", "fleet.cli", *args, "--database", f"sqlite:///{tmp / 'fleet.db'}"],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def write_config(tmp: Path, group_id: str, extra: str) -> Path:
    path = tmp / "fleet.yaml"
    path.write_text(
        textwrap.dedent(f"""\
            region: {REGION}
            account_id: "1234567890"
            groups:
              - name: chat
                scaling_group_id: {group_id}
                min_size: 1
                max_size: 8
            """)
        + textwrap.indent(textwrap.dedent(extra), "    ")
    )
    return path


def capacity_records(tmp: Path, fake: Fake) -> list[dict[str, Any]]:
    done = run_fleet(tmp, fake, "status", "--json")
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout)["capacity"])


def instance_types(fake: Fake, group_id: str) -> list[str]:
    state = fake.state()
    members = state["ess"]["groups"][group_id]["instances"]
    return sorted(state["ecs"]["instances"][i]["instance_type"] for i in members)


def spot_group(fake: Fake) -> tuple[str, str]:
    """A group of two spot A10 instances, enabled and InService: its id and the instance a reclaim takes."""
    ess = fake.ess()
    group_id = ess.create_scaling_group(
        m.CreateScalingGroupRequest(
            region_id=REGION,
            scaling_group_name="chat",
            min_size=0,
            max_size=8,
            desired_capacity=2,
            v_switch_ids=["vsw-a"],
        )
    ).body.scaling_group_id
    config_id = ess.create_scaling_configuration(
        m.CreateScalingConfigurationRequest(
            scaling_group_id=group_id, instance_types=[A10], image_id="img", spot_strategy="SpotAsPriceGo"
        )
    ).body.scaling_configuration_id
    ess.enable_scaling_group(
        m.EnableScalingGroupRequest(scaling_group_id=group_id, active_scaling_configuration_id=config_id)
    )
    fake.post("clock", {"advance_s": 10})
    return group_id, sorted(fake.state()["ess"]["groups"][group_id]["instances"])[0]


def test_sold_out_primary_type_falls_back_in_the_same_tick_and_the_ladder_survives_a_restart(
    tmp_path: Path, fake: Fake
) -> None:
    group_id = fake.post("groups", {"name": "chat", "max_size": 8, "desired_capacity": 1, "in_service": 1})[
        "group_id"
    ]
    fake.post("stock", {"instance_type": A10, "available": 0})
    config = write_config(tmp_path, group_id, f"warm_floor: 3\ninstance_types: [{A10}, {L20}]\n")
    first = run_fleet(tmp_path, fake, "serve", "--config", str(config), "--once", "--no-api")
    assert first.returncode in (0, 1), first.stderr
    assert instance_types(fake, group_id) == [A10, L20, L20]
    (record,) = capacity_records(tmp_path, fake)
    assert (record["kind"], record["state"], record["instance_type"]) == ("stockout", "open", A10)
    assert [e["event"] for e in record["timeline"]] == ["fall_back"]
    assert "OperationDenied.NoStock" in record["timeline"][0]["detail"]
    # A second process resumes from the store: it stays on L20 and does not fall back again.
    second = run_fleet(tmp_path, fake, "serve", "--config", str(config), "--once", "--no-api")
    assert second.returncode in (0, 1), second.stderr
    (again,) = capacity_records(tmp_path, fake)
    assert [e["event"] for e in again["timeline"]] == ["fall_back"]
    assert instance_types(fake, group_id) == [A10, L20, L20]


def test_spot_reclaim_notice_orders_the_replacement_and_drains_the_instance(
    tmp_path: Path, fake: Fake
) -> None:
    group_id, victim = spot_group(fake)
    fake.post("spot-reclaim", {"instance_id": victim, "notice_s": 300})
    config = write_config(
        tmp_path,
        group_id,
        f"warm_floor: 2\ninstance_types: [{A10}]\ncapacity_mix: {{spot_percentage_above_base: 100}}\n",
    )
    started = time.monotonic()
    done = run_fleet(tmp_path, fake, "serve", "--config", str(config), "--once", "--no-api")
    assert done.returncode in (0, 1), done.stderr
    members = fake.state()["ess"]["groups"][group_id]["instances"]
    assert members[victim] == "Removing"
    assert sorted(members.values()).count("Pending") == 1 and len(members) == 3
    (record,) = capacity_records(tmp_path, fake)
    assert (record["kind"], record["instance_id"]) == ("spot_reclaim", victim)
    assert [e["event"] for e in record["timeline"]] == ["notice", "replacement_ordered", "draining"]
    assert time.monotonic() - started < 120


def test_a_group_disabled_in_ess_is_written_nothing_until_it_is_enabled_again(
    tmp_path: Path, fake: Fake
) -> None:
    # someone ran DisableScalingGroup (maintenance): ESS refuses every scaling write on it, so the service
    # writes none, not even a spot reclaim's replacement, and takes the notice up once the group is enabled
    group_id, victim = spot_group(fake)
    ess = fake.ess()
    fake.post("spot-reclaim", {"instance_id": victim, "notice_s": 600})
    ess.disable_scaling_group(m.DisableScalingGroupRequest(scaling_group_id=group_id))
    # a warm floor of 3 asks for a scale-out the disabled group cannot take
    config = write_config(
        tmp_path,
        group_id,
        f"warm_floor: 3\ninstance_types: [{A10}]\ncapacity_mix: {{spot_percentage_above_base: 100}}\n",
    )
    held = run_fleet(tmp_path, fake, "serve", "--config", str(config), "--once", "--no-api")
    assert held.returncode == 0, held.stderr
    assert "scaling group Inactive in ESS" in held.stderr
    assert "IncorrectScalingGroupStatus" not in held.stderr  # nothing was tried
    members = fake.state()["ess"]["groups"][group_id]["instances"]
    assert len(members) == 2 and members[victim] == "InService"
    assert capacity_records(tmp_path, fake) == []
    ess.enable_scaling_group(m.EnableScalingGroupRequest(scaling_group_id=group_id))
    resumed = run_fleet(tmp_path, fake, "serve", "--config", str(config), "--once", "--no-api")
    assert resumed.returncode in (0, 1), resumed.stderr
    members = fake.state()["ess"]["groups"][group_id]["instances"]
    assert members[victim] == "Removing"
    (record,) = capacity_records(tmp_path, fake)
    assert (record["kind"], record["instance_id"]) == ("spot_reclaim", victim)


def test_a_reclaim_whose_replacement_failed_to_order_is_ordered_on_the_next_tick(
    tmp_path: Path, fake: Fake
) -> None:
    group_id, victim = spot_group(fake)
    fake.post("spot-reclaim", {"instance_id": victim, "notice_s": 600})
    # ESS refuses two ticks' RemoveInstances (a refusal the adapter does not retry, so no backoff to wait)
    fault = {"action": "RemoveInstances", "code": "IncorrectInstanceStatus", "status": 400, "count": 2}
    fake.post("faults", fault)
    config = write_config(
        tmp_path,
        group_id,
        f"warm_floor: 2\ninstance_types: [{A10}]\ncapacity_mix: {{spot_percentage_above_base: 100}}\n",
    )
    for _ in range(2):
        failed = run_fleet(tmp_path, fake, "serve", "--config", str(config), "--once", "--no-api")
        assert failed.returncode in (0, 1), failed.stderr
        assert fake.state()["ess"]["groups"][group_id]["instances"][victim] == "InService"
    (record,) = capacity_records(tmp_path, fake)
    assert [e["event"] for e in record["timeline"]] == ["notice", "error"]  # one per run of failures
    again = run_fleet(tmp_path, fake, "serve", "--config", str(config), "--once", "--no-api")
    assert again.returncode in (0, 1), again.stderr
    assert fake.state()["ess"]["groups"][group_id]["instances"][victim] == "Removing"
    (record,) = capacity_records(tmp_path, fake)
    assert [e["event"] for e in record["timeline"]] == [
        "notice",
        "error",
        "replacement_ordered",
        "draining",
    ]
