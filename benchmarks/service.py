"""Speed targets of the fleet service's tick (issue 5): one tick over a 40-instance group with scaling and
isolation rules, in-process against the fake cloud through the real SDK clients, SQLite in memory.

A production tick every 15 s must finish well inside its interval, and its cloud calls must not grow with
instances: the targets below are the mean tick's CPU time and the API calls per tick. Run by `make bench`,
never by the tests. Times are CPU seconds of this process (the machine is shared)."""

from __future__ import annotations

import tempfile
import textwrap
import time
from pathlib import Path

TICK_TARGET_MS = 400.0  # mean CPU per tick, 40 instances, SDK signing and JSON included
CALLS_TARGET = 12  # cloud API calls per tick for one group (DescribeScaling*, ECS, one read per metric)
INSTANCES = 40
TICKS = 40


def main() -> int:
    from fleet.cloud.clients import make_clients
    from fleet.cloud.retry import RetryPolicy
    from fleet.config import load_config
    from fleet.service.app import build_service
    from fleet.testing import mock_aliyun

    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "bench", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "bench"}
    with (
        mock_aliyun(boot_seconds=60, metric_retention_s=3600.0) as cloud,
        tempfile.TemporaryDirectory() as tmp,
    ):
        gid = cloud.create_group_for_tests(
            name="chat",
            min_size=1,
            max_size=80,
            desired_capacity=INSTANCES,
            in_service=INSTANCES,
            region_id="cn-chengdu",
        )
        path = Path(tmp) / "fleet.yaml"
        path.write_text(
            textwrap.dedent(f"""\
            region: cn-chengdu
            account_id: "{cloud.account_id}"
            groups:
              - name: chat
                scaling_group_id: {gid}
                min_size: 1
                max_size: 80
                warm_floor: {INSTANCES}
                scale_out:
                  - {{metric: queue_waiting_per_instance, above: 2, for: 30s}}
                  - {{metric: ttft_p99_ms, above: 800, for: 60s}}
                scale_in:
                  - {{metric: queue_waiting_per_instance, below: 0.5, for: 10m}}
            """)
        )
        retry = RetryPolicy(attempts=1, sleep=lambda s: None)
        svc = build_service(
            load_config(path, env={}),
            make_clients("cn-chengdu", cloud.account_id, retry=retry, env=env),
            database_url="sqlite://",
            clock=cloud.now,
        )
        ids = list(cloud.ess.groups[gid].instance_ids)
        cpu = 0.0
        calls = 0
        for _ in range(TICKS):
            for iid in ids:
                cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 1.0)
                cloud.put_custom_metric("vllm_ttft_p99_ms", {"instanceId": iid}, 300.0)
                cloud.publish_metric(
                    "acs_ecs_dashboard", "instance_gpu_gpu_temperature", {"instanceId": iid}, 60
                )
            cloud.calls.clear()
            start = time.process_time()
            svc.tick(cloud.now())
            cpu += time.process_time() - start
            calls = max(calls, len(cloud.calls))
            cloud.advance(15)
        svc.close()
    mean_ms = cpu / TICKS * 1000
    print(
        f"service tick, {INSTANCES} instances: mean {mean_ms:.0f} ms CPU (target {TICK_TARGET_MS:.0f}), "
        f"{calls} API calls per tick (target {CALLS_TARGET})"
    )
    ok = mean_ms <= TICK_TARGET_MS and calls <= CALLS_TARGET
    print("ok" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
