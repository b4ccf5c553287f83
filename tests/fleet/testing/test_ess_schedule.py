"""ESS scheduled tasks on the fake clock (UTC), through the SDK; and the recurrence functions themselves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from alibabacloud_ess20220222 import models as m
from alibabacloud_ess20220222.client import Client as EssClient
from alibabacloud_tea_openapi.exceptions import ClientException

from fleet.testing import FakeCloud
from fleet.testing.ess import schedule

from .conftest import START, EssHelper


def at(delta_s: float) -> str:
    return (START + timedelta(seconds=delta_s)).strftime("%Y-%m-%dT%H:%MZ")


def create_task(ess: EssClient, group_id: str, launch: str, **fields) -> str:
    return ess.create_scheduled_task(
        m.CreateScheduledTaskRequest(
            scaling_group_id=group_id,
            scheduled_task_name=fields.pop("name", "t"),
            launch_time=launch,
            **fields,
        )
    ).body.scheduled_task_id


def test_one_off_task_sets_min_max_desired_at_its_launch_time(
    h: EssHelper, ess: EssClient, cloud: FakeCloud
) -> None:
    group_id = h.make_group(desired=0, max_size=5)
    create_task(ess, group_id, at(600), min_value=2, max_value=8, desired_capacity=3)
    cloud.advance(599)
    before = h.group(group_id)
    cloud.advance(1)
    after = h.group(group_id)
    assert (before.min_size, before.desired_capacity) == (0, 0)
    assert (after.min_size, after.max_size, after.desired_capacity, after.total_capacity) == (2, 8, 3, 3)


def test_task_raising_min_scales_a_group_without_desired_capacity(
    h: EssHelper, ess: EssClient, cloud: FakeCloud
) -> None:
    group_id = h.make_group()
    create_task(ess, group_id, at(60), min_value=2)
    cloud.advance(60)
    assert h.group(group_id).total_capacity == 2


def test_daily_task_fires_again_the_next_day(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(desired=0)
    create_task(
        ess,
        group_id,
        at(3600),
        desired_capacity=2,
        recurrence_type="Daily",
        recurrence_value="1",
        recurrence_end_time=at(10 * 86400),
    )
    cloud.advance(3600)
    ess.modify_scaling_group(m.ModifyScalingGroupRequest(scaling_group_id=group_id, desired_capacity=0))
    cloud.advance(86400)
    assert h.group(group_id).desired_capacity == 2


def test_weekly_task_fires_only_on_listed_days(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(desired=0)
    # START is a Monday; "3" is Wednesday (0 = Sunday).
    task_id = create_task(
        ess,
        group_id,
        at(8 * 3600),
        desired_capacity=1,
        recurrence_type="Weekly",
        recurrence_value="3",
        recurrence_end_time=at(30 * 86400),
    )
    cloud.advance(86400 + 9 * 3600)  # Tuesday 09:00: not yet
    tuesday = h.group(group_id).desired_capacity
    cloud.advance(86400)  # Wednesday 09:00
    assert (tuesday, h.group(group_id).desired_capacity) == (0, 1)
    assert cloud.ess.scheduled_tasks[task_id].history[0]["scheduled"] == "2026-03-04T08:00:00Z"


def test_cron_task_fires_at_cron_times_in_utc(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(desired=0)
    task_id = create_task(
        ess,
        group_id,
        at(0),
        desired_capacity=1,
        recurrence_type="Cron",
        recurrence_value="30 */6 * * *",
        recurrence_end_time=at(2 * 86400),
    )
    cloud.advance(86400)
    fired = [x["scheduled"] for x in cloud.ess.scheduled_tasks[task_id].history]
    assert fired == [
        "2026-03-02T00:30:00Z",
        "2026-03-02T06:30:00Z",
        "2026-03-02T12:30:00Z",
        "2026-03-02T18:30:00Z",
    ]


def test_recurrence_stops_after_its_end_time(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(desired=0)
    task_id = create_task(
        ess,
        group_id,
        at(60),
        desired_capacity=1,
        recurrence_type="Daily",
        recurrence_value="1",
        recurrence_end_time=at(86400 + 30),
    )
    cloud.advance(5 * 86400)
    assert len(cloud.ess.scheduled_tasks[task_id].history) == 1


def test_disabled_task_does_not_change_the_group(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(desired=0)
    create_task(ess, group_id, at(60), desired_capacity=2, task_enabled=False)
    cloud.advance(120)
    assert h.group(group_id).desired_capacity == 0


def test_modified_launch_time_moves_the_firing(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(desired=0)
    task_id = create_task(ess, group_id, at(60), desired_capacity=2)
    ess.modify_scheduled_task(m.ModifyScheduledTaskRequest(scheduled_task_id=task_id, launch_time=at(600)))
    cloud.advance(300)
    early = h.group(group_id).desired_capacity
    cloud.advance(300)
    assert (early, h.group(group_id).desired_capacity) == (0, 2)


def test_deleted_task_never_fires(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(desired=0)
    task_id = create_task(ess, group_id, at(60), desired_capacity=2)
    ess.delete_scheduled_task(m.DeleteScheduledTaskRequest(scheduled_task_id=task_id))
    cloud.advance(120)
    assert h.group(group_id).desired_capacity == 0


def test_task_executing_a_rule_by_ari(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group()
    ari = ess.create_scaling_rule(
        m.CreateScalingRuleRequest(
            scaling_group_id=group_id, adjustment_type="TotalCapacity", adjustment_value=2
        )
    ).body.scaling_rule_ari
    ess.create_scheduled_task(
        m.CreateScheduledTaskRequest(scheduled_task_name="r", launch_time=at(60), scheduled_action=ari)
    )
    cloud.advance(60)
    assert h.group(group_id).total_capacity == 2


def test_duplicate_task_name_is_refused(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group(desired=0)
    create_task(ess, group_id, at(60), desired_capacity=1, name="same")
    with pytest.raises(ClientException) as info:
        create_task(ess, group_id, at(120), desired_capacity=1, name="same")
    assert info.value.code == "InvalidScheduledTaskName.Duplicate"


def test_tasks_beyond_the_regions_quota_are_refused_until_one_is_deleted(
    h: EssHelper, ess: EssClient, cloud: FakeCloud
) -> None:
    from fleet.testing.server import FakeControl

    assert FakeControl(cloud).handle("POST", "/_fake/limits", {"scheduled_tasks": 2}) == (200, {"ok": True})
    group_id = h.make_group(desired=0)
    first = create_task(ess, group_id, at(60), desired_capacity=1, name="a")
    create_task(ess, group_id, at(60), desired_capacity=1, name="b")
    with pytest.raises(ClientException) as info:
        create_task(ess, group_id, at(60), desired_capacity=1, name="c")
    assert info.value.code == "QuotaExceeded.ScheduledTask" and "2 per region" in info.value.message
    ess.delete_scheduled_task(m.DeleteScheduledTaskRequest(scheduled_task_id=first))
    create_task(ess, group_id, at(60), desired_capacity=1, name="c")
    status, answer = FakeControl(cloud).handle("POST", "/_fake/limits", {"scheduled_tasks": -1})
    assert status == 400 and "scheduled_tasks" in answer["error"]


def test_rule_and_group_modes_are_exclusive(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    ari = ess.create_scaling_rule(
        m.CreateScalingRuleRequest(
            scaling_group_id=group_id, adjustment_type="TotalCapacity", adjustment_value=2
        )
    ).body.scaling_rule_ari
    with pytest.raises(ClientException) as info:
        create_task(ess, group_id, at(60), scheduled_action=ari, desired_capacity=1)
    assert info.value.code == "InvalidParameter"


def test_invalid_recurrence_value_is_refused(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group(desired=0)
    with pytest.raises(ClientException) as info:
        create_task(ess, group_id, at(60), desired_capacity=1, recurrence_type="Weekly", recurrence_value="7")
    assert info.value.code == "InvalidParameter"


def test_describe_scheduled_tasks_prints_launch_time_in_minutes(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group(desired=0)
    create_task(ess, group_id, at(3600), desired_capacity=1, recurrence_type="Daily", recurrence_value="1")
    task = ess.describe_scheduled_tasks(
        m.DescribeScheduledTasksRequest(scaling_group_id=group_id)
    ).body.scheduled_tasks[0]
    assert (task.launch_time, task.recurrence_type, task.desired_capacity) == (
        "2026-03-02T01:00Z",
        "Daily",
        1,
    )


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("Daily", "2", "2026-03-04T06:00:00+00:00"),
        ("Weekly", "0,6", "2026-03-07T06:00:00+00:00"),  # Saturday after Monday 06:00
        ("Monthly", "10-12", "2026-03-10T06:00:00+00:00"),
        ("Cron", "0 7 * * *", "2026-03-02T07:00:00+00:00"),
    ],
)
def test_first_occurrence_after_launch(kind: str, value: str, expected: str) -> None:
    launch_s = datetime(2026, 3, 2, 6, 0, tzinfo=UTC).timestamp()
    first = schedule.first_at_or_after(launch_s, kind, value, launch_s + 1)
    assert datetime.fromtimestamp(first, UTC).isoformat() == expected
