"""The issue's acceptance script: only the official SDK clients (plus the fake's control API: time, faults).

Run against a server: ``python acceptance_script.py 127.0.0.1:PORT`` (e.g. ``fleet fake-cloud --port PORT``);
the tests also run it in-process under ``mock_aliyun()`` and against ``FakeAliyunServer``.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from typing import Any, Protocol

from alibabacloud_cms20190101 import models as cms_models
from alibabacloud_cms20190101.client import Client as CmsClient
from alibabacloud_ess20220222 import models as ess_models
from alibabacloud_ess20220222.client import Client as EssClient
from alibabacloud_tea_openapi import models as open_api_models
from alibabacloud_tea_openapi.exceptions import ClientException

REGION = "cn-chengdu"
ACCOUNT_ID = "1234567890"


class Control(Protocol):
    def advance(self, seconds: float) -> None: ...

    def throttle(self, action: str) -> None: ...


class HttpControl:
    """The ``/_fake/`` control API of a fake server."""

    def __init__(self, endpoint: str) -> None:
        self.base = f"http://{endpoint}/_fake"

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.base}/{path}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def advance(self, seconds: float) -> None:
        self._post("clock", {"advance_s": seconds})

    def throttle(self, action: str) -> None:
        self._post("faults", {"action": action, "code": "Throttling.User", "status": 400, "count": 1})


def run(endpoint: str | None, control: Control, boot_seconds: float = 30.0) -> dict[str, Any]:
    """Walk the acceptance list; return what was observed (the tests assert on it)."""
    config = open_api_models.Config(
        access_key_id="acceptance", access_key_secret="acceptance", region_id=REGION
    )
    if endpoint is not None:
        config.endpoint, config.protocol = endpoint, "http"
    ess, cms = EssClient(config), CmsClient(config)
    seen: dict[str, Any] = {}

    group_id = ess.create_scaling_group(
        ess_models.CreateScalingGroupRequest(
            region_id=REGION, scaling_group_name="acceptance", min_size=0, max_size=4
        )
    ).body.scaling_group_id
    config_id = ess.create_scaling_configuration(
        ess_models.CreateScalingConfigurationRequest(
            scaling_group_id=group_id, instance_type="ecs.gn7i-c8g1.2xlarge", image_id="img-acceptance"
        )
    ).body.scaling_configuration_id
    ess.enable_scaling_group(
        ess_models.EnableScalingGroupRequest(
            scaling_group_id=group_id, active_scaling_configuration_id=config_id
        )
    )

    def scale(total: int, token: str | None) -> str:
        return ess.scale_with_adjustment(
            ess_models.ScaleWithAdjustmentRequest(
                scaling_group_id=group_id,
                adjustment_type="TotalCapacity",
                adjustment_value=total,
                client_token=token,
            )
        ).body.scaling_activity_id

    def lifecycle_states() -> dict[str, str]:
        rows = ess.describe_scaling_instances(
            ess_models.DescribeScalingInstancesRequest(scaling_group_id=group_id)
        ).body.scaling_instances
        return {r.instance_id: r.lifecycle_state for r in rows}

    seen["activity"] = scale(2, "acceptance-token-1")
    seen["repeated_activity"] = scale(2, "acceptance-token-1")
    try:
        scale(3, None)
        seen["concurrent_error"] = None
    except ClientException as err:
        seen["concurrent_error"] = err.code
    seen["states_before_boot"] = sorted(lifecycle_states().values())
    control.advance(boot_seconds)
    states = lifecycle_states()
    seen["states_after_boot"] = sorted(states.values())
    activity = ess.describe_scaling_activities(
        ess_models.DescribeScalingActivitiesRequest(scaling_activity_ids=[seen["activity"]])
    ).body.scaling_activities[0]
    seen["activity_status"] = activity.status_code

    metrics = [
        cms_models.PutCustomMetricRequestMetricList(
            metric_name="vllm_num_requests_waiting",
            group_id="0",
            dimensions=json.dumps({"instanceId": iid}),
            type="0",
            values=json.dumps({"value": float(n)}),
        )
        for n, iid in enumerate(sorted(states))
    ]
    cms.put_custom_metric(cms_models.PutCustomMetricRequest(metric_list=metrics))
    body = cms.describe_metric_last(
        cms_models.DescribeMetricLastRequest(
            namespace=f"acs_customMetric_{ACCOUNT_ID}",
            metric_name="vllm_num_requests_waiting",
            dimensions=json.dumps([{"groupId": "0", "dimension": f"instanceId={iid}"} for iid in states]),
        )
    ).body
    seen["datapoints_type"] = type(body.datapoints).__name__
    seen["metrics"] = sorted((row["dimension"], row["Average"]) for row in json.loads(body.datapoints))
    seen["expected_metrics"] = sorted((f"instanceId={iid}", float(n)) for n, iid in enumerate(sorted(states)))

    control.throttle("DescribeScalingGroups")
    try:
        ess.describe_scaling_groups(ess_models.DescribeScalingGroupsRequest(region_id=REGION))
        seen["throttled"] = None
    except ClientException as err:
        seen["throttled"] = (err.code, err.status_code)
    return seen


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:8080"
    print(json.dumps(run(target, HttpControl(target)), indent=2))
