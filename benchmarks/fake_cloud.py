"""Speed targets of the fake cloud (issue 2): the simulator drives it in-process through the real SDK for a
simulated day with tens of instances and thousands of calls, so the fake's own work per request must stay
small next to the SDK's (signing, JSON, requests). Run by `make bench`, never by the tests.

The run: one group of 40 InService instances on a manual clock; every 15 s of fake time each instance reports
six metrics (four custom, two GPU); every 60 s a service-like reader calls DescribeScalingGroups,
DescribeScalingInstances and DescribeMetricLast/List over all 40 instances; every 10 min it scales. Two fake
hours. Times are CPU seconds of this process (the machine is shared)."""

from __future__ import annotations

import contextlib
import json
import time

HANDLE_TARGET_MS = 2.0  # the fake's own CPU per request, mean
PUBLISH_TARGET_US = 50.0  # per metric point written through the backend
HOURS = 2
INSTANCES = 40


def main() -> int:
    from alibabacloud_cms20190101 import models as cm
    from alibabacloud_cms20190101.client import Client as CmsClient
    from alibabacloud_ess20220222 import models as em
    from alibabacloud_ess20220222.client import Client as EssClient
    from alibabacloud_tea_openapi import models as open_api_models
    from alibabacloud_tea_openapi.exceptions import ClientException

    from fleet.testing import FakeCloud, mock_aliyun

    handle_s = [0.0]
    handled = [0]
    original = FakeCloud.handle

    def timed_handle(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        start = time.process_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            handle_s[0] += time.process_time() - start
            handled[0] += 1

    FakeCloud.handle = timed_handle  # type: ignore[method-assign]
    publish_s, points = 0.0, 0
    total_start = time.process_time()
    try:
        with mock_aliyun(boot_seconds=60, metric_retention_s=3600.0) as cloud:
            config = open_api_models.Config(
                access_key_id="bench", access_key_secret="bench", region_id="cn-chengdu"
            )
            ess, cms = EssClient(config), CmsClient(config)
            group_id = cloud.create_group_for_tests(
                max_size=60, desired_capacity=INSTANCES, in_service=INSTANCES
            )
            dims = json.dumps(
                [
                    {"groupId": "0", "dimension": f"instanceId={i}"}
                    for i in cloud.ess.groups[group_id].instance_ids
                ][:50]
            )
            for tick in range(HOURS * 3600 // 15):
                start = time.process_time()
                for n, iid in enumerate(list(cloud.ess.groups[group_id].instance_ids)):
                    for name in (
                        "vllm_num_requests_waiting",
                        "vllm_num_requests_running",
                        "vllm_ttft_p99_ms",
                        "vllm_kv_cache_usage_pct",
                    ):
                        cloud.put_custom_metric(name, {"instanceId": iid}, float(n + tick % 7))
                    cloud.publish_gpu_metrics(iid, "gpu_usedutilization", {"0": 50.0 + n % 9, "1": 40.0})
                    cloud.publish_metric(
                        "acs_ecs_dashboard",
                        "instance_gpu_gpu_temperature",
                        {"instanceId": iid},
                        60.0 + n % 20,
                    )
                    points += 7
                publish_s += time.process_time() - start
                cloud.advance(15)
                if tick % 4 == 0:
                    ess.describe_scaling_groups(em.DescribeScalingGroupsRequest(scaling_group_ids=[group_id]))
                    ess.describe_scaling_instances(
                        em.DescribeScalingInstancesRequest(scaling_group_id=group_id, page_size=50)
                    )
                    for name in ("vllm_num_requests_waiting", "vllm_ttft_p99_ms"):
                        cms.describe_metric_last(
                            cm.DescribeMetricLastRequest(
                                namespace=cloud.custom_namespace, metric_name=name, dimensions=dims
                            )
                        )
                    cms.describe_metric_list(
                        cm.DescribeMetricListRequest(
                            namespace="acs_ecs_dashboard",
                            metric_name="instance_gpu_gpu_usedutilization",
                            period="60",
                            start_time=str(int((cloud.now_s() - 120) * 1000)),
                        )
                    )
                if tick % 40 == 0:
                    target = INSTANCES + (2 if (tick // 40) % 2 == 0 else 0)
                    with contextlib.suppress(ClientException):  # NoChange is fine: this measures time
                        ess.scale_with_adjustment(
                            em.ScaleWithAdjustmentRequest(
                                scaling_group_id=group_id,
                                adjustment_type="TotalCapacity",
                                adjustment_value=target,
                            )
                        )
    finally:
        FakeCloud.handle = original  # type: ignore[method-assign]
    total_s = time.process_time() - total_start
    per_call_ms = 1000 * handle_s[0] / max(1, handled[0])
    per_point_us = 1e6 * publish_s / max(1, points)
    failures = 0
    verdict = "ok" if per_call_ms < HANDLE_TARGET_MS else "SLOW"
    failures += verdict != "ok"
    print(
        f"fake per request {per_call_ms:6.2f} ms (target < {HANDLE_TARGET_MS:g} ms) {verdict}: "
        f"{handled[0]} SDK calls over {HOURS} fake hours, {INSTANCES} instances"
    )
    verdict = "ok" if per_point_us < PUBLISH_TARGET_US else "SLOW"
    failures += verdict != "ok"
    print(
        f"metric point     {per_point_us:6.1f} us (target < {PUBLISH_TARGET_US:g} us) {verdict}: "
        f"{points} points; whole run {total_s:.1f} s CPU"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
