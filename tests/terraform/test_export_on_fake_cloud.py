"""The exported scheduled tasks, created through the real ESS SDK on the fake Alibaba Cloud, hold the same
floors and ceilings that the service's policy computes, as the fake's clock runs through a week."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fleet.cloud import RetryPolicy, make_clients
from fleet.terraform.export import scheduled_tasks_for
from fleet.testing import mock_aliyun
from policies.schedule import bounds
from policies.spec import GroupSpec

REGION = "cn-chengdu"
START = datetime(2026, 11, 30, 16, 0, tzinfo=UTC)  # a Monday


def test_exported_tasks_on_the_fake_cloud_hold_the_policy_bounds(tmp_path):
    spec = GroupSpec.model_validate(
        {
            "name": "chat-7b",
            "min_size": 2,
            "max_size": 20,
            "warm_floor": 2,
            "cold_start_s": 180,
            "schedules": [
                {
                    "name": "business-hours",
                    "timezone": "Asia/Shanghai",
                    "days": "mon-fri",
                    "start": "09:00",
                    "end": "18:00",
                    "min": 6,
                },
                {
                    "name": "weekend",
                    "timezone": "Asia/Shanghai",
                    "days": "sat,sun",
                    "start": "10:00",
                    "end": "20:00",
                    "min": 4,
                    "max": 8,
                },
            ],
        }
    )
    tasks = scheduled_tasks_for(spec, START)
    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "id", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "s", "HOME": str(tmp_path)}
    with mock_aliyun(account_id="1234567890", start=START) as cloud:
        group_id = cloud.create_group_for_tests(min_size=2, max_size=20, region_id=REGION)
        ess = make_clients(REGION, "1234567890", retry=RetryPolicy(attempts=1), env=env).ess
        for key, task in tasks.items():
            ess.create_scheduled_task(
                group_id,
                f"tf-floor-{key}",
                task["launch_time"],
                task["recurrence_type"],
                task["recurrence_value"],
                min_value=task["min_value"],
                max_value=task["max_value"],
                recurrence_end_time=task["recurrence_end_time"],
            )
        cloud.advance(timedelta(days=1).total_seconds())  # let every first launch pass
        mismatches = []
        for _ in range(7 * 24 * 3):  # every 20 minutes for a week
            cloud.advance(20 * 60)
            group = ess.describe_scaling_groups([group_id])[0]
            want = bounds(spec, cloud.now())
            if (group.min_size, group.max_size) != (want.floor, want.ceiling):
                mismatches.append(
                    (cloud.now().isoformat(), group.min_size, group.max_size, want.floor, want.ceiling)
                )
        assert not mismatches, mismatches[:5]
