"""ESS through the real SDK client against mock_aliyun: one behaviour per test."""

from __future__ import annotations

import pytest
from alibabacloud_ess20220222 import models as m
from alibabacloud_ess20220222.client import Client as EssClient
from alibabacloud_tea_openapi.exceptions import ClientException

from fleet.testing import FakeCloud

from .conftest import REGION, EssHelper


def error_code(call) -> tuple[str, int]:
    with pytest.raises(ClientException) as info:
        call()
    return info.value.code, info.value.status_code


def test_new_group_is_inactive(h: EssHelper) -> None:
    group_id = h.make_group(enable=False)
    assert h.group(group_id).lifecycle_state == "Inactive"


def test_enable_scales_to_min_size_with_pending_instances(h: EssHelper) -> None:
    group_id = h.make_group(min_size=2)
    group = h.group(group_id)
    assert (group.lifecycle_state, group.pending_capacity, group.total_capacity) == ("Active", 2, 2)


def test_scale_out_is_pending_until_boot_time_then_in_service(h: EssHelper, cloud: FakeCloud) -> None:
    group_id = h.make_group()
    h.scale_to(group_id, 2)
    cloud.advance(29)
    assert set(h.states(group_id).values()) == {"Pending"}
    cloud.advance(1)
    assert set(h.states(group_id).values()) == {"InService"}


def test_capacities_add_up_to_total(h: EssHelper, cloud: FakeCloud, ess: EssClient) -> None:
    group_id = h.make_group(desired=0)
    h.scale_to(group_id, 4)
    cloud.advance(30)
    h.scale_to(group_id, 6)
    ids = list(h.states(group_id))
    ess.enter_standby(m.EnterStandbyRequest(scaling_group_id=group_id, instance_ids=[ids[0]]))
    ess.set_instances_protection(
        m.SetInstancesProtectionRequest(
            scaling_group_id=group_id, instance_ids=[ids[1]], protected_from_scale_in=True
        )
    )
    g = h.group(group_id)
    parts = (
        g.active_capacity
        + g.pending_capacity
        + g.pending_wait_capacity
        + g.removing_capacity
        + g.removing_wait_capacity
        + g.protected_capacity
        + g.standby_capacity
        + g.stopped_capacity
    )
    assert (parts, g.total_capacity, g.standby_capacity, g.protected_capacity, g.pending_capacity) == (
        6,
        6,
        1,
        1,
        2,
    )


def test_min_above_max_is_invalid_parameter_conflict(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group(max_size=3)
    code = error_code(
        lambda: ess.modify_scaling_group(m.ModifyScalingGroupRequest(scaling_group_id=group_id, min_size=4))
    )
    assert code == ("InvalidParameter.Conflict", 400)


def test_desired_outside_bounds_is_invalid_parameter_conflict(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group(max_size=3, desired=0)
    code = error_code(
        lambda: ess.modify_scaling_group(
            m.ModifyScalingGroupRequest(scaling_group_id=group_id, desired_capacity=5)
        )
    )
    assert code == ("InvalidParameter.Conflict", 400)


@pytest.mark.parametrize("disable", [None, False])
def test_desired_capacity_on_a_group_created_without_it_is_invalid_and_changes_nothing(
    h: EssHelper, ess: EssClient, cloud: FakeCloud, disable: bool | None
) -> None:
    group_id = h.make_group(max_size=5)
    code = error_code(
        lambda: ess.modify_scaling_group(
            m.ModifyScalingGroupRequest(
                scaling_group_id=group_id, desired_capacity=4, disable_desired_capacity=disable
            )
        )
    )
    cloud.advance(60)
    g = h.group(group_id)
    assert code == ("InvalidParameter", 400)
    assert (g.enable_desired_capacity, g.desired_capacity, g.total_capacity) == (False, None, 0)


def test_a_group_created_with_desired_capacity_can_disable_and_set_it_again(
    h: EssHelper, ess: EssClient
) -> None:
    group_id = h.make_group(max_size=5, desired=1)
    ess.modify_scaling_group(
        m.ModifyScalingGroupRequest(scaling_group_id=group_id, disable_desired_capacity=True)
    )
    ess.modify_scaling_group(m.ModifyScalingGroupRequest(scaling_group_id=group_id, desired_capacity=2))
    g = h.group(group_id)
    assert (g.enable_desired_capacity, g.desired_capacity) == (True, 2)


def test_lowering_max_below_desired_works_when_desired_changes_in_the_same_call(
    h: EssHelper, ess: EssClient
) -> None:
    group_id = h.make_group(max_size=5, desired=4)
    ess.modify_scaling_group(
        m.ModifyScalingGroupRequest(scaling_group_id=group_id, max_size=2, desired_capacity=2)
    )
    g = h.group(group_id)
    assert (g.max_size, g.desired_capacity) == (2, 2)


def test_second_activity_without_desired_capacity_is_in_progress(h: EssHelper) -> None:
    group_id = h.make_group()
    h.scale_to(group_id, 1)
    assert error_code(lambda: h.scale_to(group_id, 2)) == ("ScalingActivityInProgress", 400)


def test_groups_with_desired_capacity_run_activities_in_parallel(h: EssHelper) -> None:
    group_id = h.make_group(desired=0)
    h.scale_to(group_id, 1)
    h.scale_to(group_id, 3)
    assert h.group(group_id).desired_capacity == 3 and len(h.states(group_id)) == 3


def test_repeated_client_token_answers_the_same_activity(h: EssHelper) -> None:
    group_id = h.make_group()
    first = h.scale_to(group_id, 2, token="tok-1")
    assert h.scale_to(group_id, 2, token="tok-1") == first and len(h.states(group_id)) == 2


def test_client_token_with_other_parameters_is_a_mismatch(h: EssHelper) -> None:
    group_id = h.make_group()
    h.scale_to(group_id, 2, token="tok-1")
    assert error_code(lambda: h.scale_to(group_id, 3, token="tok-1")) == ("IdempotentParameterMismatch", 400)


def test_scaling_an_inactive_group_is_incorrect_status(h: EssHelper) -> None:
    group_id = h.make_group(enable=False)
    assert error_code(lambda: h.scale_to(group_id, 1)) == ("IncorrectScalingGroupStatus", 400)


def test_unknown_group_is_not_found(h: EssHelper) -> None:
    assert error_code(lambda: h.scale_to("asg-missing", 1)) == ("InvalidScalingGroupId.NotFound", 404)


def test_unchanged_capacity_is_no_change(h: EssHelper, cloud: FakeCloud) -> None:
    group_id = h.make_group(min_size=1)
    cloud.advance(30)
    assert error_code(lambda: h.scale_to(group_id, 1)) == ("IncorrectCapacity.NoChange", 400)


def test_target_is_clamped_to_max_size(h: EssHelper, cloud: FakeCloud) -> None:
    group_id = h.make_group(max_size=3)
    h.scale_to(group_id, 7)
    assert h.group(group_id).total_capacity == 3


def test_unknown_groups_are_dropped_from_describe(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    body = ess.describe_scaling_groups(
        m.DescribeScalingGroupsRequest(region_id=REGION, scaling_group_ids=[group_id, "asg-nope"])
    ).body
    assert [g.scaling_group_id for g in body.scaling_groups] == [group_id]


def test_execute_simple_rule_by_ari_changes_capacity(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(min_size=1)
    cloud.advance(30)
    ari = ess.create_scaling_rule(
        m.CreateScalingRuleRequest(
            scaling_group_id=group_id, adjustment_type="QuantityChangeInCapacity", adjustment_value=2
        )
    ).body.scaling_rule_ari
    ess.execute_scaling_rule(m.ExecuteScalingRuleRequest(scaling_rule_ari=ari))
    assert h.group(group_id).total_capacity == 3


def test_step_rule_needs_metric_value(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    ari = ess.create_scaling_rule(
        m.CreateScalingRuleRequest(
            scaling_group_id=group_id,
            scaling_rule_type="StepScalingRule",
            adjustment_type="QuantityChangeInCapacity",
            step_adjustments=[
                m.CreateScalingRuleRequestStepAdjustments(metric_interval_lower_bound=0, scaling_adjustment=1)
            ],
        )
    ).body.scaling_rule_ari
    code = error_code(
        lambda: ess.execute_scaling_rule(
            m.ExecuteScalingRuleRequest(scaling_rule_ari=ari, breach_threshold=1)
        )
    )
    assert code == ("MissingParameter.MetricValue", 400)


def test_step_rule_picks_the_matching_step(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    steps = [
        m.CreateScalingRuleRequestStepAdjustments(
            metric_interval_lower_bound=0, metric_interval_upper_bound=10, scaling_adjustment=1
        ),
        m.CreateScalingRuleRequestStepAdjustments(metric_interval_lower_bound=10, scaling_adjustment=3),
    ]
    ari = ess.create_scaling_rule(
        m.CreateScalingRuleRequest(
            scaling_group_id=group_id,
            scaling_rule_type="StepScalingRule",
            adjustment_type="QuantityChangeInCapacity",
            step_adjustments=steps,
        )
    ).body.scaling_rule_ari
    ess.execute_scaling_rule(
        m.ExecuteScalingRuleRequest(scaling_rule_ari=ari, breach_threshold=50, metric_value=75)
    )
    assert h.group(group_id).total_capacity == 3


def test_unknown_rule_ari_is_not_found(ess: EssClient) -> None:
    code = error_code(
        lambda: ess.execute_scaling_rule(
            m.ExecuteScalingRuleRequest(scaling_rule_ari="ari:acs:ess:cn-chengdu:1:scalingrule/asr-none")
        )
    )
    assert code == ("InvalidScalingRuleAri.NotFound", 404)


def test_standby_keeps_desired_capacity_and_takes_no_traffic(
    h: EssHelper, ess: EssClient, cloud: FakeCloud
) -> None:
    group_id = h.make_group(desired=2)
    cloud.advance(30)
    victim = next(iter(h.states(group_id)))
    ess.enter_standby(m.EnterStandbyRequest(scaling_group_id=group_id, instance_ids=[victim]))
    row = ess.describe_scaling_instances(
        m.DescribeScalingInstancesRequest(scaling_group_id=group_id, instance_ids=[victim])
    ).body.scaling_instances[0]
    assert (
        row.lifecycle_state,
        row.load_balancer_weight,
        h.group(group_id).desired_capacity,
        h.group(group_id).total_capacity,
    ) == ("Standby", 0, 2, 2)
    assert victim not in cloud.ess.serving_instance_ids(group_id)


def test_standby_instances_are_never_scaled_in(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(desired=2)
    cloud.advance(30)
    victim = next(iter(h.states(group_id)))
    ess.enter_standby(m.EnterStandbyRequest(scaling_group_id=group_id, instance_ids=[victim]))
    h.scale_to(group_id, 1)
    cloud.advance(60)
    assert h.states(group_id) == {victim: "Standby"}


def test_exit_standby_returns_to_in_service(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(min_size=1)
    cloud.advance(30)
    victim = next(iter(h.states(group_id)))
    ess.enter_standby(m.EnterStandbyRequest(scaling_group_id=group_id, instance_ids=[victim]))
    ess.exit_standby(m.ExitStandbyRequest(scaling_group_id=group_id, instance_ids=[victim]))
    assert h.states(group_id)[victim] == "InService"


def test_enter_standby_of_a_pending_instance_is_incorrect_status(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group(min_size=1)
    victim = next(iter(h.states(group_id)))
    code = error_code(
        lambda: ess.enter_standby(m.EnterStandbyRequest(scaling_group_id=group_id, instance_ids=[victim]))
    )
    assert code == ("IncorrectInstanceStatus", 400)


def test_protected_instances_are_never_scaled_in(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(min_size=0)
    h.scale_to(group_id, 2)
    cloud.advance(30)
    keep = next(iter(h.states(group_id)))
    ess.set_instances_protection(
        m.SetInstancesProtectionRequest(
            scaling_group_id=group_id, instance_ids=[keep], protected_from_scale_in=True
        )
    )
    h.scale_to(group_id, 0)
    cloud.advance(60)
    assert h.states(group_id) == {keep: "Protected"}


def test_remove_instances_decreases_desired_by_default(
    h: EssHelper, ess: EssClient, cloud: FakeCloud
) -> None:
    group_id = h.make_group(desired=3)
    cloud.advance(30)
    victim = next(iter(h.states(group_id)))
    ess.remove_instances(m.RemoveInstancesRequest(scaling_group_id=group_id, instance_ids=[victim]))
    cloud.advance(60)
    assert h.group(group_id).desired_capacity == 2 and victim not in h.states(group_id)
    assert victim not in cloud.ecs.instances  # AutoCreated instances are released


def test_remove_instances_below_min_size_is_refused(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(min_size=2, desired=2)
    cloud.advance(30)
    victim = next(iter(h.states(group_id)))
    code = error_code(
        lambda: ess.remove_instances(
            m.RemoveInstancesRequest(scaling_group_id=group_id, instance_ids=[victim])
        )
    )
    assert code == ("IncorrectCapacity.MinSize", 400)


def test_remove_without_decreasing_desired_launches_a_replacement(
    h: EssHelper, ess: EssClient, cloud: FakeCloud
) -> None:
    group_id = h.make_group(min_size=2, desired=2)
    cloud.advance(30)
    victim = next(iter(h.states(group_id)))
    ess.remove_instances(
        m.RemoveInstancesRequest(
            scaling_group_id=group_id, instance_ids=[victim], decrease_desired_capacity=False
        )
    )
    cloud.advance(60)
    after = h.states(group_id)
    assert victim not in after and list(after.values()) == ["InService", "InService"]


def test_remove_instance_of_another_group_is_not_found(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    code = error_code(
        lambda: ess.remove_instances(
            m.RemoveInstancesRequest(scaling_group_id=group_id, instance_ids=["i-unknown"])
        )
    )
    assert code == ("InvalidInstanceId.NotFound", 404)


def test_attach_above_max_size_is_refused(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(max_size=1, min_size=1)
    cloud.advance(30)
    extra = cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION).instance_id
    code = error_code(
        lambda: ess.attach_instances(
            m.AttachInstancesRequest(scaling_group_id=group_id, instance_ids=[extra])
        )
    )
    assert code == ("IncorrectCapacity.MaxSize", 400)


def test_attach_adds_in_service_instances_and_raises_desired(
    h: EssHelper, ess: EssClient, cloud: FakeCloud
) -> None:
    group_id = h.make_group(desired=0)
    extra = cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION).instance_id
    ess.attach_instances(m.AttachInstancesRequest(scaling_group_id=group_id, instance_ids=[extra]))
    assert h.states(group_id) == {extra: "InService"} and h.group(group_id).desired_capacity == 1


def test_attach_instance_already_in_a_group_is_in_use(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    first = h.make_group(min_size=1, name="a")
    second = h.make_group(name="b")
    cloud.advance(30)
    taken = next(iter(h.states(first)))
    code = error_code(
        lambda: ess.attach_instances(m.AttachInstancesRequest(scaling_group_id=second, instance_ids=[taken]))
    )
    assert code == ("InvalidInstanceId.InUse", 400)


def test_economical_mode_keeps_scaled_in_instances_stopped(h: EssHelper, cloud: FakeCloud) -> None:
    group_id = h.make_group(policy="recycle")
    h.scale_to(group_id, 2)
    cloud.advance(30)
    h.scale_to(group_id, 0)
    cloud.advance(30)
    g = h.group(group_id)
    assert (g.stopped_capacity, g.total_capacity) == (2, 2)
    assert {cloud.ecs.instances[i].status for i in h.states(group_id)} == {"Stopped"}


def test_economical_mode_scale_out_starts_stopped_instances_first(
    h: EssHelper, cloud: FakeCloud, ess: EssClient
) -> None:
    group_id = h.make_group(policy="recycle")
    h.scale_to(group_id, 2)
    cloud.advance(30)
    before = set(h.states(group_id))
    h.scale_to(group_id, 0)
    cloud.advance(30)
    activity = h.activity(h.scale_to(group_id, 2))
    cloud.advance(30)
    assert set(activity.started_instances) == before and set(h.states(group_id)) == before
    assert set(h.states(group_id).values()) == {"InService"}


def test_lowering_max_releases_stopped_instances_first(
    h: EssHelper, cloud: FakeCloud, ess: EssClient
) -> None:
    group_id = h.make_group(policy="recycle", max_size=4)
    h.scale_to(group_id, 3)
    cloud.advance(30)
    h.scale_to(group_id, 1)
    cloud.advance(30)
    ess.modify_scaling_group(m.ModifyScalingGroupRequest(scaling_group_id=group_id, max_size=2))
    g = h.group(group_id)
    assert (g.active_capacity, g.stopped_capacity) == (1, 1)


def test_stopped_instance_fails_health_check_and_is_replaced(h: EssHelper, cloud: FakeCloud) -> None:
    group_id = h.make_group(desired=2)
    cloud.advance(30)
    victim = next(iter(h.states(group_id)))
    cloud.ecs.stop_instance(victim)
    cloud.advance(5)
    after = h.states(group_id)
    assert victim not in after and len(after) == 2 and h.group(group_id).desired_capacity == 2


def test_activities_are_listed_newest_first_with_status_codes(
    h: EssHelper, cloud: FakeCloud, ess: EssClient
) -> None:
    group_id = h.make_group()
    first = h.scale_to(group_id, 1)
    cloud.advance(30)
    second = h.scale_to(group_id, 2)
    rows = ess.describe_scaling_activities(m.DescribeScalingActivitiesRequest(scaling_group_id=group_id)).body
    assert [(a.scaling_activity_id, a.status_code) for a in rows.scaling_activities] == [
        (second, "InProgress"),
        (first, "Successful"),
    ]


def test_describe_activities_filters_by_status_code(h: EssHelper, cloud: FakeCloud, ess: EssClient) -> None:
    group_id = h.make_group()
    h.scale_to(group_id, 1)
    cloud.advance(30)
    second = h.scale_to(group_id, 2)
    rows = ess.describe_scaling_activities(
        m.DescribeScalingActivitiesRequest(scaling_group_id=group_id, status_code="InProgress")
    ).body.scaling_activities
    assert [a.scaling_activity_id for a in rows] == [second]


def test_scaling_instances_paginate(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group(max_size=30)
    h.scale_to(group_id, 25)
    body = ess.describe_scaling_instances(
        m.DescribeScalingInstancesRequest(scaling_group_id=group_id, page_number=3, page_size=10)
    ).body
    assert (body.total_count, len(body.scaling_instances)) == (25, 5)


def test_duplicate_group_name_is_refused(h: EssHelper) -> None:
    h.make_group(name="same")
    assert error_code(lambda: h.make_group(name="same")) == ("InvalidScalingGroupName.Duplicate", 400)


def test_delete_group_with_instances_needs_force(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(min_size=1)
    cloud.advance(30)
    code = error_code(
        lambda: ess.delete_scaling_group(m.DeleteScalingGroupRequest(scaling_group_id=group_id))
    )
    ess.delete_scaling_group(m.DeleteScalingGroupRequest(scaling_group_id=group_id, force_delete=True))
    assert code == ("IncorrectScalingGroupStatus", 400) and not cloud.ecs.instances


def test_disabled_group_refuses_scaling(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    ess.disable_scaling_group(m.DisableScalingGroupRequest(scaling_group_id=group_id))
    assert error_code(lambda: h.scale_to(group_id, 1)) == ("IncorrectScalingGroupStatus", 400)


def test_alarms_are_stored_and_deleted(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    ari = ess.create_scaling_rule(
        m.CreateScalingRuleRequest(
            scaling_group_id=group_id, adjustment_type="QuantityChangeInCapacity", adjustment_value=1
        )
    ).body.scaling_rule_ari
    alarm_id = ess.create_alarm(
        m.CreateAlarmRequest(
            scaling_group_id=group_id,
            name="gpu-hot",
            metric_type="system",
            metric_name="GpuUtilizationAgent",
            threshold=80,
            alarm_actions=[ari],
        )
    ).body.alarm_task_id
    listed = ess.describe_alarms(m.DescribeAlarmsRequest(scaling_group_id=group_id)).body.alarm_list
    ess.delete_alarm(m.DeleteAlarmRequest(alarm_task_id=alarm_id))
    after = ess.describe_alarms(m.DescribeAlarmsRequest(scaling_group_id=group_id)).body.alarm_list
    assert [a.alarm_task_id for a in listed] == [alarm_id] and after == []


def test_create_group_for_tests_builds_in_service_instances(cloud: FakeCloud, h: EssHelper) -> None:
    group_id = cloud.create_group_for_tests(min_size=1, max_size=5, desired_capacity=3, in_service=3)
    assert list(h.states(group_id).values()) == ["InService"] * 3


def test_raising_min_size_scales_a_group_without_desired_capacity(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    ess.modify_scaling_group(m.ModifyScalingGroupRequest(scaling_group_id=group_id, min_size=2))
    assert h.group(group_id).total_capacity == 2


def test_lowering_max_size_scales_in_a_group_without_desired_capacity(
    h: EssHelper, ess: EssClient, cloud: FakeCloud
) -> None:
    group_id = h.make_group()
    h.scale_to(group_id, 3)
    cloud.advance(30)
    ess.modify_scaling_group(m.ModifyScalingGroupRequest(scaling_group_id=group_id, max_size=1))
    cloud.advance(30)
    assert list(h.states(group_id).values()) == ["InService"]


def test_quantity_change_with_desired_capacity_counts_from_stable_instances(
    h: EssHelper, ess: EssClient, cloud: FakeCloud
) -> None:
    group_id = h.make_group(desired=2)
    cloud.advance(30)
    h.scale_to(group_id, 4)  # two more Pending: not stable yet
    ess.scale_with_adjustment(
        m.ScaleWithAdjustmentRequest(
            scaling_group_id=group_id, adjustment_type="QuantityChangeInCapacity", adjustment_value=1
        )
    )
    assert h.group(group_id).desired_capacity == 3  # stable 2 + 1 (aliyun-api.md section 1.2)


def test_percent_change_rounds_away_from_zero(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(min_size=3)
    cloud.advance(30)
    ess.scale_with_adjustment(
        m.ScaleWithAdjustmentRequest(
            scaling_group_id=group_id, adjustment_type="PercentChangeInCapacity", adjustment_value=10
        )
    )
    assert h.group(group_id).total_capacity == 4


def test_adjustment_value_out_of_range_is_invalid(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    code = error_code(
        lambda: ess.scale_with_adjustment(
            m.ScaleWithAdjustmentRequest(
                scaling_group_id=group_id, adjustment_type="TotalCapacity", adjustment_value=5000
            )
        )
    )
    assert code == ("InvalidParameter", 400)


def test_configurations_and_rules_are_described(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    rule = ess.create_scaling_rule(
        m.CreateScalingRuleRequest(
            scaling_group_id=group_id,
            scaling_rule_name="up",
            adjustment_type="QuantityChangeInCapacity",
            adjustment_value=1,
            cooldown=60,
        )
    ).body
    configs = ess.describe_scaling_configurations(
        m.DescribeScalingConfigurationsRequest(scaling_group_id=group_id)
    ).body.scaling_configurations
    rules = ess.describe_scaling_rules(
        m.DescribeScalingRulesRequest(scaling_group_id=group_id)
    ).body.scaling_rules
    assert [(c.instance_type, c.lifecycle_state) for c in configs] == [("ecs.gn7i-c8g1.2xlarge", "Active")]
    assert [(r.scaling_rule_id, r.scaling_rule_ari, r.cooldown) for r in rules] == [
        (rule.scaling_rule_id, rule.scaling_rule_ari, 60)
    ]


def test_target_tracking_rule_cannot_be_executed(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    ari = ess.create_scaling_rule(
        m.CreateScalingRuleRequest(
            scaling_group_id=group_id,
            scaling_rule_type="TargetTrackingScalingRule",
            metric_name="CpuUtilization",
            target_value=50,
        )
    ).body.scaling_rule_ari
    code = error_code(lambda: ess.execute_scaling_rule(m.ExecuteScalingRuleRequest(scaling_rule_ari=ari)))
    assert code == ("ScalingRule.InvalidScalingRuleType", 400)


def test_enable_without_a_configuration_is_refused(ess: EssClient) -> None:
    group_id = ess.create_scaling_group(
        m.CreateScalingGroupRequest(region_id=REGION, scaling_group_name="bare", min_size=0, max_size=1)
    ).body.scaling_group_id
    code = error_code(
        lambda: ess.enable_scaling_group(m.EnableScalingGroupRequest(scaling_group_id=group_id))
    )
    assert code == ("MissingParameter.ActiveScalingConfigurationId", 400)


def test_suspended_health_check_keeps_a_stopped_instance(
    h: EssHelper, ess: EssClient, cloud: FakeCloud
) -> None:
    group_id = h.make_group(desired=1)
    cloud.advance(30)
    ess.suspend_processes(m.SuspendProcessesRequest(scaling_group_id=group_id, processes=["HealthCheck"]))
    victim = next(iter(h.states(group_id)))
    cloud.ecs.stop_instance(victim)
    cloud.advance(10)
    assert h.states(group_id) == {victim: "InService"}


def test_enter_standby_is_idempotent_per_client_token(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(min_size=1)
    cloud.advance(30)
    victim = next(iter(h.states(group_id)))
    request = m.EnterStandbyRequest(scaling_group_id=group_id, instance_ids=[victim], client_token="sb-1")
    first = ess.enter_standby(request).body.scaling_activity_id
    assert ess.enter_standby(request).body.scaling_activity_id == first


def _gpu_alarm(ess: EssClient, group_id: str, ari: str, threshold: float, count: int = 2) -> str:
    return ess.create_alarm(
        m.CreateAlarmRequest(
            scaling_group_id=group_id,
            name="gpu-busy",
            metric_type="system",
            metric_name="GpuUtilizationAgent",
            statistics="Average",
            comparison_operator=">=",
            threshold=threshold,
            evaluation_count=count,
            period=60,
            alarm_actions=[ari],
        )
    ).body.alarm_task_id


def _up_rule(ess: EssClient, group_id: str, cooldown: int | None = None) -> str:
    return ess.create_scaling_rule(
        m.CreateScalingRuleRequest(
            scaling_group_id=group_id,
            adjustment_type="QuantityChangeInCapacity",
            adjustment_value=1,
            cooldown=cooldown,
        )
    ).body.scaling_rule_ari


def _report_gpu(cloud: FakeCloud, group_id: str, value: float) -> None:
    for iid in cloud.ess.serving_instance_ids(group_id):
        cloud.publish_gpu_metrics(iid, "gpu_usedutilization", {"0": value})


def test_alarm_executes_its_rule_after_evaluation_count_breaches(
    h: EssHelper, ess: EssClient, cloud: FakeCloud
) -> None:
    group_id = cloud.create_group_for_tests(max_size=5, in_service=2, default_cooldown_s=0)
    _gpu_alarm(ess, group_id, _up_rule(ess, group_id), threshold=80, count=2)
    totals = []
    for _ in range(2):
        _report_gpu(cloud, group_id, 95.0)
        cloud.advance(60)
        totals.append(h.group(group_id).total_capacity)
    alarm = ess.describe_alarms(m.DescribeAlarmsRequest(scaling_group_id=group_id)).body.alarm_list[0]
    assert totals == [2, 3] and alarm.state == "ALARM"


def test_alarm_below_threshold_stays_ok(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = cloud.create_group_for_tests(max_size=5, in_service=2)
    _gpu_alarm(ess, group_id, _up_rule(ess, group_id), threshold=80, count=1)
    _report_gpu(cloud, group_id, 30.0)
    cloud.advance(60)
    alarm = ess.describe_alarms(m.DescribeAlarmsRequest(scaling_group_id=group_id)).body.alarm_list[0]
    assert (alarm.state, h.group(group_id).total_capacity) == ("OK", 2)


def test_alarm_without_data_is_insufficient_data(ess: EssClient, cloud: FakeCloud) -> None:
    group_id = cloud.create_group_for_tests(max_size=5, in_service=1)
    _gpu_alarm(ess, group_id, _up_rule(ess, group_id), threshold=80, count=1)
    cloud.advance(60)
    alarm = ess.describe_alarms(m.DescribeAlarmsRequest(scaling_group_id=group_id)).body.alarm_list[0]
    assert alarm.state == "INSUFFICIENT_DATA"


def test_alarm_actions_wait_for_the_rule_cooldown(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = cloud.create_group_for_tests(max_size=9, in_service=1, default_cooldown_s=0)
    _gpu_alarm(ess, group_id, _up_rule(ess, group_id, cooldown=600), threshold=80, count=1)
    totals = []
    for _ in range(
        4
    ):  # the first scale-out ends after the 30 s boot; its 600 s cooldown blocks the next ones
        _report_gpu(cloud, group_id, 95.0)
        cloud.advance(60)
        totals.append(h.group(group_id).total_capacity)
    assert totals == [2, 2, 2, 2]


def test_alarm_on_an_unknown_system_metric_is_refused(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    code = error_code(
        lambda: ess.create_alarm(
            m.CreateAlarmRequest(
                scaling_group_id=group_id,
                name="x",
                metric_type="system",
                metric_name="NoSuchMetric",
                threshold=1,
                alarm_actions=[_up_rule(ess, group_id)],
            )
        )
    )
    assert code == ("InvalidParameter", 400)


def test_a_step_rules_numbers_are_checked_like_every_other_parameter(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()

    def create(**step) -> tuple[str, int]:
        request = m.CreateScalingRuleRequest(
            scaling_group_id=group_id,
            scaling_rule_type="StepScalingRule",
            adjustment_type="QuantityChangeInCapacity",
            step_adjustments=[m.CreateScalingRuleRequestStepAdjustments(**step)],
        )
        return error_code(lambda: ess.create_scaling_rule(request))

    # a fractional adjustment was truncated to 1, junk answered with a 500
    assert create(metric_interval_lower_bound=0, scaling_adjustment=1.5) == ("InvalidParameter", 400)
    assert create(metric_interval_lower_bound="junk", scaling_adjustment=1) == ("InvalidParameter", 400)
    assert create(metric_interval_lower_bound=float("nan"), scaling_adjustment=1) == ("InvalidParameter", 400)
