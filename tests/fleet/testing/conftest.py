"""SDK clients pointed at the fake; the ``aliyun`` fixture itself comes from the fleet.testing plugin."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from alibabacloud_cms20190101.client import Client as CmsClient
from alibabacloud_ecs20140526.client import Client as EcsClient
from alibabacloud_ess20220222 import models as ess_models
from alibabacloud_ess20220222.client import Client as EssClient
from alibabacloud_tea_openapi import models as open_api_models

from fleet.testing import FakeCloud, mock_aliyun

REGION = "cn-chengdu"
START = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)  # a Monday, 00:00 UTC


def sdk_config(endpoint: str | None = None) -> open_api_models.Config:
    config = open_api_models.Config(
        access_key_id="test-ak", access_key_secret="test-secret", region_id=REGION
    )
    if endpoint is not None:
        config.endpoint = endpoint
        config.protocol = "http"
    return config


@pytest.fixture
def cloud() -> Iterator[FakeCloud]:
    """The fake on a manual clock at a fixed start, 30 s boots."""
    with mock_aliyun(boot_seconds=30.0, start=START, region_id=REGION) as fake:
        yield fake


@pytest.fixture
def ess(cloud: FakeCloud) -> EssClient:
    return EssClient(sdk_config())


@pytest.fixture
def cms(cloud: FakeCloud) -> CmsClient:
    return CmsClient(sdk_config())


@pytest.fixture
def ecs(cloud: FakeCloud) -> EcsClient:
    return EcsClient(sdk_config())


class EssHelper:
    """Short-hands over the ESS SDK client (every call still goes through the real client and the wire)."""

    def __init__(self, client: EssClient) -> None:
        self.client = client

    def make_group(
        self,
        *,
        min_size: int = 0,
        max_size: int = 10,
        desired: int | None = None,
        policy: str = "release",
        name: str = "g",
        enable: bool = True,
    ) -> str:
        """Create (and enable) a group with one scaling configuration."""
        group_id = self.client.create_scaling_group(
            ess_models.CreateScalingGroupRequest(
                region_id=REGION,
                scaling_group_name=name,
                min_size=min_size,
                max_size=max_size,
                desired_capacity=desired,
                scaling_policy=policy,
                v_switch_ids=["vsw-a"],
            )
        ).body.scaling_group_id
        config_id = self.client.create_scaling_configuration(
            ess_models.CreateScalingConfigurationRequest(
                scaling_group_id=group_id, instance_type="ecs.gn7i-c8g1.2xlarge", image_id="img-1"
            )
        ).body.scaling_configuration_id
        if enable:
            self.client.enable_scaling_group(
                ess_models.EnableScalingGroupRequest(
                    scaling_group_id=group_id, active_scaling_configuration_id=config_id
                )
            )
        return group_id

    def scale_to(self, group_id: str, total: int, token: str | None = None) -> str:
        return self.client.scale_with_adjustment(
            ess_models.ScaleWithAdjustmentRequest(
                scaling_group_id=group_id,
                adjustment_type="TotalCapacity",
                adjustment_value=total,
                client_token=token,
            )
        ).body.scaling_activity_id

    def group(self, group_id: str) -> ess_models.DescribeScalingGroupsResponseBodyScalingGroups:
        return self.client.describe_scaling_groups(
            ess_models.DescribeScalingGroupsRequest(region_id=REGION, scaling_group_ids=[group_id])
        ).body.scaling_groups[0]

    def states(self, group_id: str) -> dict[str, str]:
        body = self.client.describe_scaling_instances(
            ess_models.DescribeScalingInstancesRequest(scaling_group_id=group_id, page_size=50)
        ).body
        return {i.instance_id: i.lifecycle_state for i in body.scaling_instances}

    def activity(self, activity_id: str) -> ess_models.DescribeScalingActivitiesResponseBodyScalingActivities:
        return self.client.describe_scaling_activities(
            ess_models.DescribeScalingActivitiesRequest(scaling_activity_ids=[activity_id])
        ).body.scaling_activities[0]


@pytest.fixture
def h(ess: EssClient) -> EssHelper:
    return EssHelper(ess)
