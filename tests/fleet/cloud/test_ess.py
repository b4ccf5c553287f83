"""EssAdapter through the real ESS SDK client, the wire answered by stubs: conversion, paging, parameters."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from fleet.cloud import IncompleteListing, ScalingGroup


def _group(i: int, **over) -> dict:
    g = {
        "ScalingGroupId": f"asg-{i}",
        "ScalingGroupName": f"group-{i}",
        "LifecycleState": "Active",
        "MinSize": 1,
        "MaxSize": 8,
        "DesiredCapacity": 3,
        "TotalCapacity": 3,
        "ActiveCapacity": 2,
        "PendingCapacity": 1,
        "PendingWaitCapacity": 0,
        "RemovingCapacity": 0,
        "StandbyCapacity": 0,
        "ProtectedCapacity": 0,
        "StoppedCapacity": 0,
        "ScalingPolicy": "recycle",
        "DefaultCooldown": 300,
    }
    g.update(over)
    return g


def test_describe_scaling_groups_converts_to_frozen_dataclass(stub, clients):
    stub.on("DescribeScalingGroups", {"ScalingGroups": [_group(1)], "TotalCount": 1})
    [group] = clients.ess.describe_scaling_groups(group_ids=["asg-1"])
    assert group == ScalingGroup(
        group_id="asg-1",
        name="group-1",
        lifecycle_state="Active",
        min_size=1,
        max_size=8,
        desired_capacity=3,
        total_capacity=3,
        active_capacity=2,
        pending_capacity=1,
        removing_capacity=0,
        standby_capacity=0,
        protected_capacity=0,
        stopped_capacity=0,
        scaling_policy="recycle",
        default_cooldown_s=300,
    )
    assert stub.calls[0].params["ScalingGroupIds.1"] == "asg-1"


def test_describe_scaling_groups_walks_every_page(stub, clients):
    groups = [_group(i) for i in range(120)]

    def page(params):
        number, size = int(params["PageNumber"]), int(params["PageSize"])
        return {"ScalingGroups": groups[(number - 1) * size : number * size], "TotalCount": len(groups)}

    stub.on("DescribeScalingGroups", page)
    found = clients.ess.describe_scaling_groups()
    assert [g.group_id for g in found] == [g["ScalingGroupId"] for g in groups]
    assert [c.params["PageNumber"] for c in stub.calls] == ["1", "2", "3"]
    assert {c.params["PageSize"] for c in stub.calls} == {"50"}


def test_describe_scaling_groups_splits_long_id_filters(stub, clients):
    ids = [f"asg-{i}" for i in range(45)]

    def by_ids(params):
        asked = [v for k, v in params.items() if k.startswith("ScalingGroupIds.")]
        return {"ScalingGroups": [_group(int(a.split("-")[1])) for a in asked], "TotalCount": len(asked)}

    stub.on("DescribeScalingGroups", by_ids)
    found = clients.ess.describe_scaling_groups(group_ids=ids)
    assert sorted(g.group_id for g in found) == sorted(ids)
    assert [sum(k.startswith("ScalingGroupIds.") for k in c.params) for c in stub.calls] == [20, 20, 5]


def test_scale_to_sends_total_capacity_with_client_token(stub, clients):
    stub.on("ScaleWithAdjustment", {"ScalingActivityId": "asa-1"})
    assert clients.ess.scale_to("asg-1", 6, client_token="tok-1") == "asa-1"
    params = stub.calls[0].params
    assert (
        params["ScalingGroupId"],
        params["AdjustmentType"],
        params["AdjustmentValue"],
        params["ClientToken"],
    ) == (
        "asg-1",
        "TotalCapacity",
        "6",
        "tok-1",
    )


def test_scaling_instance_times_become_aware_utc(stub, clients):
    stub.on(
        "DescribeScalingInstances",
        {
            "ScalingInstances": [
                {
                    "InstanceId": "i-1",
                    "ScalingGroupId": "asg-1",
                    "LifecycleState": "InService",
                    "HealthStatus": "Healthy",
                    "CreationType": "AutoCreated",
                    "CreatedTime": "2026-11-30T08:00Z",
                    "ZoneId": "cn-chengdu-a",
                }
            ],
            "TotalCount": 1,
        },
    )
    [inst] = clients.ess.describe_scaling_instances("asg-1", lifecycle_states=["InService"])
    assert inst.created_at == datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    assert inst.created_at.tzinfo is not None
    assert stub.calls[0].params["LifecycleStates.1"] == "InService"


def test_describe_scaling_activities_stops_at_limit(stub, clients):
    acts = [
        {
            "ScalingActivityId": f"asa-{i}",
            "ScalingGroupId": "asg-1",
            "StatusCode": "Successful",
            "StartTime": "2026-11-30T08:00Z",
            "EndTime": "2026-11-30T08:01Z",
            "TotalCapacity": "4",
        }
        for i in range(30)
    ]

    def page(params):
        n, size = int(params["PageNumber"]), int(params["PageSize"])
        return {"ScalingActivities": acts[(n - 1) * size : n * size], "TotalCount": len(acts)}

    stub.on("DescribeScalingActivities", page)
    found = clients.ess.describe_scaling_activities("asg-1", limit=7)
    assert [a.activity_id for a in found] == [f"asa-{i}" for i in range(7)]
    assert found[0].total_capacity == 4
    assert found[0].end_time == datetime(2026, 11, 30, 8, 1, tzinfo=UTC)


def test_create_scheduled_task_sends_launch_time_as_ess_utc_minutes(stub, clients):
    stub.on("CreateScheduledTask", {"ScheduledTaskId": "st-1"})
    shanghai = ZoneInfo("Asia/Shanghai")
    task_id = clients.ess.create_scheduled_task(
        "asg-1",
        "morning-floor",
        datetime(2026, 12, 1, 8, 30, tzinfo=shanghai),
        "Daily",
        "1",
        min_value=2,
        max_value=10,
        desired_capacity=4,
    )
    assert task_id == "st-1"
    params = stub.calls[0].params
    assert params["LaunchTime"] == "2026-12-01T00:30Z"
    assert (params["MinValue"], params["MaxValue"], params["DesiredCapacity"]) == ("2", "10", "4")
    assert params["TaskEnabled"] == "True"


def test_create_scheduled_task_refuses_naive_time(stub, clients):
    with pytest.raises(ValueError, match="no timezone"):
        clients.ess.create_scheduled_task("asg-1", "t", datetime(2026, 12, 1, 8, 30), "Daily", "1")
    assert stub.calls == []


def test_describe_scheduled_tasks_parses_fields(stub, clients):
    stub.on(
        "DescribeScheduledTasks",
        {
            "ScheduledTasks": [
                {
                    "ScheduledTaskId": "st-1",
                    "ScheduledTaskName": "morning",
                    "ScalingGroupId": "asg-1",
                    "LaunchTime": "2026-12-01T00:30Z",
                    "RecurrenceType": "Daily",
                    "RecurrenceValue": "1",
                    "RecurrenceEndTime": "2027-03-01T00:30Z",
                    "MinValue": 2,
                    "MaxValue": 10,
                    "DesiredCapacity": 4,
                    "TaskEnabled": False,
                }
            ],
            "TotalCount": 1,
        },
    )
    [task] = clients.ess.describe_scheduled_tasks("asg-1")
    assert (task.task_id, task.min_value, task.max_value, task.desired_capacity, task.enabled) == (
        "st-1",
        2,
        10,
        4,
        False,
    )
    assert task.recurrence_end_time == datetime(2027, 3, 1, 0, 30, tzinfo=UTC)


def test_modify_scaling_group_sends_only_given_fields(stub, clients):
    stub.on("ModifyScalingGroup", {})
    clients.ess.modify_scaling_group("asg-1", max_size=12)
    params = stub.calls[0].params
    assert params["MaxSize"] == "12"
    assert "MinSize" not in params and "DesiredCapacity" not in params


def test_modify_scheduled_task_sends_only_given_fields(stub, clients):
    stub.on("ModifyScheduledTask", {})
    clients.ess.modify_scheduled_task("st-1", desired_capacity=5, enabled=False)
    params = stub.calls[0].params
    assert (params["ScheduledTaskId"], params["DesiredCapacity"], params["TaskEnabled"]) == (
        "st-1",
        "5",
        "False",
    )
    assert "LaunchTime" not in params and "MinValue" not in params


def test_remove_instances_decreases_desired_capacity_by_default(stub, clients):
    stub.on("RemoveInstances", {"ScalingActivityId": "asa-9"})
    assert clients.ess.remove_instances("asg-1", ["i-1", "i-2"], client_token="tok-r") == "asa-9"
    params = stub.calls[0].params
    assert (params["InstanceIds.1"], params["InstanceIds.2"]) == ("i-1", "i-2")
    assert params["DecreaseDesiredCapacity"] == "True"
    assert params["ClientToken"] == "tok-r"


def test_remove_instances_refuses_more_than_one_call_can_carry(stub, clients):
    with pytest.raises(ValueError, match="at most 20"):
        clients.ess.remove_instances("asg-1", [f"i-{n}" for n in range(21)], client_token="t")
    assert stub.calls == []


def test_standby_round_trip_sends_instances_and_token(stub, clients):
    stub.on("EnterStandby", {"ScalingActivityId": "asa-in"})
    stub.on("ExitStandby", {"ScalingActivityId": "asa-out"})
    assert clients.ess.enter_standby("asg-1", ["i-7"], client_token="a") == "asa-in"
    assert clients.ess.exit_standby("asg-1", ["i-7"], client_token="b") == "asa-out"
    assert [(c.action, c.params["InstanceIds.1"], c.params["ClientToken"]) for c in stub.calls] == [
        ("EnterStandby", "i-7", "a"),
        ("ExitStandby", "i-7", "b"),
    ]


def test_set_instances_protection_batches_by_twenty(stub, clients):
    stub.on("SetInstancesProtection", {})
    clients.ess.set_instances_protection("asg-1", [f"i-{n}" for n in range(25)], protected=True)
    assert [sum(k.startswith("InstanceIds.") for k in c.params) for c in stub.calls] == [20, 5]
    assert {c.params["ProtectedFromScaleIn"] for c in stub.calls} == {"True"}


def test_delete_scheduled_task_names_the_task(stub, clients):
    stub.on("DeleteScheduledTask", {})
    clients.ess.delete_scheduled_task("st-3")
    assert stub.calls[0].params["ScheduledTaskId"] == "st-3"


def test_a_group_answer_without_its_bounds_never_clips_a_plan_to_zero(stub, clients):
    """MinSize/MaxSize missing (or null) in a DescribeScalingGroups answer are unknown, not 0: read as 0,
    the plan was clipped to 'MaxSize 0' and the group scaled in to nothing."""
    from fleet.service.actuate import clip_to_ess
    from policies.model import GroupPlan

    stub.on(
        "DescribeScalingGroups", {"ScalingGroups": [_group(1, MinSize=None, MaxSize=None)], "TotalCount": 1}
    )
    [group] = clients.ess.describe_scaling_groups(group_ids=["asg-1"])
    gp = GroupPlan(group="chat", serving_target=4, target_capacity=4, desired_capacity=4, direction="up")
    assert clip_to_ess(gp, group) is gp
    assert (group.min_size, group.max_size) == (0, 2000)  # ESS's own limits on MinSize and MaxSize


def _instances_answer(ids, total, short_on_page=None, cut=0):
    """A DescribeScalingInstances handler over ``ids``: page ``short_on_page`` answers ``cut`` fewer items
    than it holds while TotalCount still counts them all."""

    def page(params):
        n, size = int(params["PageNumber"]), int(params["PageSize"])
        rows = ids[(n - 1) * size : n * size]
        if n == short_on_page:
            rows = rows[: len(rows) - cut]
        return {
            "ScalingInstances": [
                {"InstanceId": i, "ScalingGroupId": "asg-1", "LifecycleState": "InService"} for i in rows
            ],
            "TotalCount": total,
        }

    return page


def test_a_short_page_mid_listing_is_an_error_not_part_of_the_fleet(stub, clients):
    ids = [f"i-{n:03d}" for n in range(120)]
    # page 2 answers 30 of its 50 while TotalCount says 120: page 3 is never asked for
    stub.on("DescribeScalingInstances", _instances_answer(ids, 120, short_on_page=2, cut=20))
    with pytest.raises(IncompleteListing) as info:
        clients.ess.describe_scaling_instances("asg-1")
    assert info.value.action == "DescribeScalingInstances"
    assert "80 items in 2 page(s) against TotalCount 120" in str(info.value)
    # read once more before giving up
    assert [c.params["PageNumber"] for c in stub.calls] == ["1", "2", "1", "2"]


def test_a_listing_short_once_is_read_again_whole(stub, clients):
    ids = [f"i-{n:03d}" for n in range(120)]
    short = _instances_answer(ids, 120, short_on_page=2, cut=20)
    whole = _instances_answer(ids, 120)
    answers = iter([short, short, whole, whole, whole])
    stub.on("DescribeScalingInstances", lambda params: next(answers)(params))
    found = clients.ess.describe_scaling_instances("asg-1")
    assert [i.instance_id for i in found] == ids


def test_a_total_count_moving_between_pages_reads_the_list_again(stub, clients):
    # an instance left page 1 between the pages: page 2 counts one less, and one of its rows moved unseen
    before = [f"i-{n:03d}" for n in range(60)]
    after = before[1:]
    answers = iter(
        [
            _instances_answer(before, 60),  # page 1 of the first walk
            _instances_answer(after, 59),  # page 2 of the first walk
            _instances_answer(after, 59),
            _instances_answer(after, 59),
        ]
    )
    stub.on("DescribeScalingInstances", lambda params: next(answers)(params))
    found = clients.ess.describe_scaling_instances("asg-1")
    assert [i.instance_id for i in found] == after
