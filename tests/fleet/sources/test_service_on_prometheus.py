"""Acceptance (issue 11): with ``metrics_source: prometheus`` the service scales on queue depth and isolates
an overheating node end to end, reading only Prometheus.

The fake cloud is served over HTTP at real time (boot 1 s); a real Prometheus scrapes the fake DCGM exporter
and vLLM pages every second; ``Service.tick(now)`` is driven here at the fake cloud's (real-time) clock. Rule
durations are a few seconds so that the whole run stays short; waits are bounded polls.
"""

from __future__ import annotations

import textwrap
import time

from fleet.cloud.clients import make_clients
from fleet.cloud.retry import RetryPolicy
from fleet.config import load_config
from fleet.service.app import build_service

from .conftest import ENV, REGION, free_port

FAST = RetryPolicy(attempts=2, initial_s=0.0, max_s=0.0, jitter=False, sleep=lambda s: None)


def _config(tmp_path, group_id, prometheus_url):
    path = tmp_path / "fleet.yaml"
    path.write_text(
        textwrap.dedent(f"""
            region: {REGION}
            account_id: "1234567890"
            tick_interval_s: 1
            groups:
              - name: chat
                scaling_group_id: {group_id}
                min_size: 1
                max_size: 6
                warm_floor: 1
                cold_start_s: 5
                scale_out:
                  - {{metric: queue_waiting_per_instance, above: 2, for: 2s}}
                stabilization: {{stale_after: 30s}}
                isolation:
                  rules:
                    - {{name: gpu_overheat, metric: gpu_temperature_c, above: 85, for: 2s, action: reboot}}
                metrics_source:
                  type: prometheus
                  url: {prometheus_url}
                  instance_label: instance_id
        """)
    )
    return load_config(path, env={})


def _run_until(svc, cloud, done, timeout_s=40.0):
    deadline = time.monotonic() + timeout_s
    results = []
    while time.monotonic() < deadline:
        results.append(svc.tick(cloud.now()))
        if done():
            return results
        time.sleep(0.5)
    errors = [e for r in results for e in r.errors]
    raise AssertionError(f"not done after {timeout_s:.0f}s of ticks; tick errors: {errors[-5:]}")


def test_service_scales_out_and_isolates_reading_only_prometheus(
    tmp_path, aliyun_server, exporters, real_prometheus
):
    cloud = aliyun_server.cloud
    gid = cloud.create_group_for_tests(
        name="chat", min_size=1, max_size=6, desired_capacity=2, in_service=2, region_id=REGION
    )
    clients = make_clients(REGION, cloud.account_id, endpoint=aliyun_server.endpoint, retry=FAST, env=ENV)
    hot, cool = sorted(i.instance_id for i in clients.ess.describe_scaling_instances(gid))
    for iid in (hot, cool):
        exporters.set_vllm(iid, waiting=8, running=16)  # 8 waiting per instance, rule: above 2
        for gpu in (0, 1):
            exporters.set_gpu(iid, gpu, DCGM_FI_DEV_GPU_TEMP=60, DCGM_FI_DEV_XID_ERRORS=0)
    exporters.set_gpu(hot, 1, DCGM_FI_DEV_GPU_TEMP=93)

    svc = build_service(
        _config(tmp_path, gid, real_prometheus.url),
        clients,
        database_url=f"sqlite:///{tmp_path / 'fleet.db'}",
        clock=cloud.now,
    )
    try:

        def desired() -> int:
            return clients.ess.describe_scaling_groups(group_ids=[gid])[0].desired_capacity

        def hot_isolated() -> bool:
            return any(
                d.instance_id == hot and d.action == "enter_standby" and d.outcome == "applied"
                for d in svc.store.decisions(kind="isolation")
            )

        _run_until(svc, cloud, lambda: desired() > 2 and hot_isolated())
        scale = [d for d in svc.store.decisions(kind="scale") if d.outcome == "applied"]
        assert scale and scale[0].target > 2
        incidents = [i for i in svc.store.incidents() if i.instance_id == hot]
        assert incidents and "gpu_overheat" in incidents[0].cause
        assert not [i for i in svc.store.incidents() if i.instance_id == cool]
        assert not [c for c in cloud.calls if c[0] == "cms"]  # the metrics came from Prometheus alone
        staleness = svc.last_observation.groups["chat"].staleness_s if svc.last_observation else {}
        assert staleness.get("queue_waiting") is not None and staleness["queue_waiting"] < 30
    finally:
        svc.close()


def test_prometheus_down_is_counted_as_an_api_error_and_never_scales_in(tmp_path, aliyun_server):
    cloud = aliyun_server.cloud
    gid = cloud.create_group_for_tests(
        name="chat", min_size=1, max_size=6, desired_capacity=3, in_service=3, region_id=REGION
    )
    clients = make_clients(REGION, cloud.account_id, endpoint=aliyun_server.endpoint, retry=FAST, env=ENV)
    path = tmp_path / "fleet.yaml"
    path.write_text(
        textwrap.dedent(f"""
            region: {REGION}
            groups:
              - name: chat
                scaling_group_id: {gid}
                min_size: 1
                max_size: 6
                scale_in:
                  - {{metric: queue_waiting_per_instance, below: 0.5, for: 1s}}
                stabilization: {{scale_in_window: 1s}}
                isolation: {{enabled: false}}
                metrics_source: {{type: prometheus, url: "http://127.0.0.1:{free_port()}"}}
        """)
    )
    svc = build_service(
        load_config(path, env={}), clients, database_url=f"sqlite:///{tmp_path / 'fleet.db'}", clock=cloud.now
    )
    try:
        for _ in range(4):
            assert svc.tick(cloud.now()).leader
            time.sleep(0.5)
        errors = svc.metrics.registry.get_sample_value(
            "fleet_cloud_api_errors_total", {"code": "Prometheus.Unreachable"}
        )
        assert errors is not None and errors >= 4  # one per tick at least (each metric read fails)
        assert clients.ess.describe_scaling_groups(group_ids=[gid])[0].desired_capacity == 3
        assert not [d for d in svc.store.decisions(kind="scale") if d.outcome == "applied"]
    finally:
        svc.close()


def test_a_prometheus_warning_on_a_good_answer_is_shown_in_the_status_view(tmp_path, aliyun_server, prom_api):
    """Prometheus' ``warnings`` (a Thanos store that did not answer, PromQL info about a counter that is not
    one) only reached the log: the operator looking at /status saw the metric as fine."""
    from .conftest import vector

    cloud = aliyun_server.cloud
    gid = cloud.create_group_for_tests(
        name="chat", min_size=1, max_size=6, desired_capacity=1, in_service=1, region_id=REGION
    )
    [iid] = cloud.ess.groups[gid].instance_ids

    def answer(endpoint, form):
        at = time.time()
        value = at - 1 if "timestamp(" in form["query"] else 0
        body = vector([({"instance_id": iid}, value)], at=at)
        if "vllm:num_requests_waiting" in form["query"] and "timestamp(" not in form["query"]:
            body["warnings"] = ["store 10.0.0.7:10901 is unavailable"]
        return 200, body

    prom_api.answer = answer
    clients = make_clients(REGION, cloud.account_id, endpoint=aliyun_server.endpoint, retry=FAST, env=ENV)
    path = tmp_path / "fleet.yaml"
    path.write_text(
        textwrap.dedent(f"""
            region: {REGION}
            groups:
              - name: chat
                scaling_group_id: {gid}
                min_size: 1
                max_size: 6
                scale_out:
                  - {{metric: queue_waiting_per_instance, above: 2, for: 30s}}
                isolation: {{enabled: false}}
                metrics_source: {{type: prometheus, url: "{prom_api.url}"}}
        """)
    )
    svc = build_service(
        load_config(path, env={}), clients, database_url=f"sqlite:///{tmp_path / 'fleet.db'}", clock=cloud.now
    )
    try:
        assert svc.tick(cloud.now()).leader
        [group] = svc.status()["groups"]
        warned = [w for w in group["warnings"] if w["code"] == "metric_source_warning"]
        assert [(w["metric"], w["detail"]) for w in warned] == [
            ("queue_waiting", "prometheus: store 10.0.0.7:10901 is unavailable")
        ]
        assert svc.last_observation.groups["chat"].metrics[iid]["queue_waiting"].value == 0  # still used
    finally:
        svc.close()
