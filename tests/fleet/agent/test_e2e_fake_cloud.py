"""End to end against the fake cloud: what the agent publishes is what the service reads back from CMS."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pynvml
import pytest

from fleet.agent.clock import ManualAgentClock
from fleet.agent.fake_nvml import FakeGpu, FakeNvml
from fleet.agent.publish import CmsPublisher
from fleet.agent.run import Agent, AgentConfig
from fleet.cli import main
from fleet.cloud.clients import make_clients
from fleet.cloud.retry import RetryPolicy
from fleet.testing import FakeAliyunServer, mock_aliyun

ACCOUNT = "1234567890"
INSTANCE = "i-bp1e2eagent00001"
KEYS = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "test-key", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "test-secret"}


def cms_adapter():
    retry = RetryPolicy(attempts=2, initial_s=0.0, max_s=0.0, sleep=lambda s: None)
    return make_clients("cn-hangzhou", ACCOUNT, env=KEYS, retry=retry).cms


def agent_on(cloud, url: str, gpus: list[FakeGpu], clock: ManualAgentClock) -> Agent:
    return Agent(
        AgentConfig(instance_id=INSTANCE, vllm_url=url),
        nvml=FakeNvml(gpus),
        clock=clock,
        publisher=CmsPublisher(cms_adapter()),
    )


def last_value(cms, metric: str) -> float | None:
    points = cms.metric_last(cms.custom_namespace, metric, [INSTANCE])
    return points[0].value if points else None


def test_service_reads_back_the_queue_the_agent_published(vllm_server):
    with mock_aliyun(account_id=ACCOUNT) as cloud:
        clock = ManualAgentClock(wall_s=cloud.now().timestamp() - 30)
        agent = agent_on(cloud, vllm_server.url, [FakeGpu()], clock)
        agent.prime()
        vllm_server.state.waiting = 17
        clock.advance(15)
        agent.step()
        assert last_value(cms_adapter(), "vllm_num_requests_waiting") == 17.0


def test_gpu_health_names_read_back_as_published(vllm_server):
    hw_thermal = pynvml.nvmlClocksEventReasonHwThermalSlowdown
    gpus = [FakeGpu(clock_event_reasons=hw_thermal, mem_util_pct=92), FakeGpu(sm_clock_mhz=990)]
    with mock_aliyun(account_id=ACCOUNT) as cloud:
        clock = ManualAgentClock(wall_s=cloud.now().timestamp() - 30)
        agent = agent_on(cloud, vllm_server.url, gpus, clock)
        agent.prime()
        gpus[1].push_xid(48)
        vllm_server.state.finish_requests(40, ttft_s=0.3, tpot_s=0.03, e2e_s=2.0)
        clock.advance(15)
        sample = agent.step()
        cms = cms_adapter()
        assert last_value(cms, "gpu_throttle_reasons") == hw_thermal
        assert last_value(cms, "gpu_xid") == 48.0
        assert last_value(cms, "gpu_mem_bw_util") == 92.0
        assert last_value(cms, "gpu_sm_clock_ratio") == pytest.approx(0.5)
        assert last_value(cms, "vllm_ttft_p99_ms") == pytest.approx(sample.vllm.ttft.p99_ms)


def test_cms_throttling_is_buffered_and_flushed_into_the_fake(vllm_server):
    with mock_aliyun(account_id=ACCOUNT) as cloud:
        clock = ManualAgentClock(wall_s=cloud.now().timestamp() - 60)
        agent = agent_on(cloud, vllm_server.url, [FakeGpu()], clock)
        agent.prime()
        cloud.inject_fault("PutCustomMetric", code="Throttling.User", status=400)
        vllm_server.state.waiting = 5
        clock.advance(15)
        throttled = agent.step()
        assert throttled.publish.sent_points == 0 and throttled.publish.buffered_points > 0
        cloud.clear_faults()
        vllm_server.state.waiting = 8
        clock.advance(15)
        flushed = agent.step()
        assert flushed.publish.buffered_points == 0
        cms = cms_adapter()
        end = cloud.now()
        points = cms.metric_list(
            cms.custom_namespace, "vllm_num_requests_waiting", [INSTANCE], end - timedelta(minutes=5), end
        )
        assert [p.value for p in points] == [5.0, 8.0]


def test_cli_once_publishes_what_it_prints(capsys, monkeypatch, vllm_server):
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("FLEET_ALIYUN_ENDPOINT", raising=False)
    vllm_server.state.waiting = 11
    with mock_aliyun(account_id=ACCOUNT) as cloud:
        code = main(
            [
                "agent",
                "--once",
                "--json",
                "--period-s",
                "0.05",
                "--instance-id",
                INSTANCE,
                "--region",
                "cn-hangzhou",
                "--account-id",
                ACCOUNT,
                "--vllm-url",
                vllm_server.url,
            ]
        )
        printed = json.loads(capsys.readouterr().out)
        cloud.advance(5)  # the fake's clock stood still while the agent stamped with the real one
        assert code == 0 and printed["publish"]["sent_points"] > 0
        assert (
            last_value(cms_adapter(), "vllm_num_requests_waiting")
            == printed["metrics"]["vllm_num_requests_waiting"]
        )


@pytest.mark.slow
def test_agent_process_publishes_over_http_to_the_fake_server(vllm_server, tmp_path):
    vllm_server.state.waiting = 23
    with FakeAliyunServer(port=0, account_id=ACCOUNT) as server:
        env = {
            **os.environ,
            "FLEET_ALIYUN_ENDPOINT": server.endpoint,
            "FLEET_ECS_METADATA_URL": "http://127.0.0.1:9/latest/meta-data/",
            **KEYS,
        }
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fleet.cli",
                "agent",
                "--instance-id",
                INSTANCE,
                "--region",
                "cn-hangzhou",
                "--account-id",
                ACCOUNT,
                "--vllm-url",
                vllm_server.url,
                "--period-s",
                "0.2",
                "--listen",
                "off",
            ],
            cwd=Path(__file__).resolve().parents[3],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            retry = RetryPolicy(attempts=2, initial_s=0.0, max_s=0.0, sleep=lambda s: None)
            cms = make_clients("cn-hangzhou", ACCOUNT, endpoint=server.endpoint, env=KEYS, retry=retry).cms
            value = None
            deadline = time.monotonic() + 30
            while value is None and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.2)
                value = last_value(cms, "vllm_num_requests_waiting")
            assert value == 23.0, proc.stderr.read() if proc.poll() is not None else "no point published"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_an_instance_role_without_put_custom_metric_names_the_grant_and_keeps_the_points():
    from fleet.agent.sample import Point

    with mock_aliyun(account_id=ACCOUNT) as cloud:
        cloud.allow_only(["cms:DescribeMetricLast"], access_key_id=KEYS["ALIBABA_CLOUD_ACCESS_KEY_ID"])
        publisher = CmsPublisher(cms_adapter())
        at = int(cloud.now().timestamp() * 1000)
        status = publisher.publish([Point("vllm_up", {"instanceId": INSTANCE}, 1.0, at)])
        assert status.buffered_points == 1 and status.sent_points == 0  # kept for when the grant lands
        assert status.last_error is not None
        assert (
            "missing RAM permission cms:PutCustomMetric: grant it in the instance role's policy "
            "(terraform/ module: alicloud_ram_policy.node_agent)"
        ) in status.last_error
        assert cloud.call_counts["PutCustomMetric"] == 1  # a denial is not retried
        cloud.clear_ram()
        assert publisher.publish([]).sent_points == 1
        assert last_value(cms_adapter(), "vllm_up") == 1.0
