"""GPU capacity in the fake through the real SDK clients: stock-outs, partial fills, several instance types
and zones, spot mixes, spot reclaim notices and economical mode. One behaviour per test."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from alibabacloud_ecs20140526 import models as ecs_models
from alibabacloud_ecs20140526.client import Client as EcsClient
from alibabacloud_ess20220222 import models as m
from alibabacloud_ess20220222.client import Client as EssClient
from alibabacloud_tea_openapi.exceptions import ClientException

from fleet.testing import FakeCloud, mock_aliyun

from .conftest import REGION, START, EssHelper, sdk_config

A10 = "ecs.gn7i-c8g1.2xlarge"
L20 = "ecs.gn8is.2xlarge"
ZONE_A, ZONE_B = f"{REGION}-a", f"{REGION}-b"


def make_group(
    ess: EssClient,
    *,
    types: list[str] | None = None,
    vswitches: list[str] | None = None,
    policy: str = "release",
    desired: int | None = None,
    multi_az: str | None = None,
    spot_strategy: str | None = None,
    spot_limits: dict[str, float] | None = None,
    **group_fields: object,
) -> str:
    group_id = ess.create_scaling_group(
        m.CreateScalingGroupRequest(
            region_id=REGION,
            scaling_group_name="gpu",
            min_size=0,
            max_size=20,
            desired_capacity=desired,
            scaling_policy=policy,
            v_switch_ids=vswitches or ["vsw-a"],
            multi_azpolicy=multi_az,
            **group_fields,
        )
    ).body.scaling_group_id
    config_id = ess.create_scaling_configuration(
        m.CreateScalingConfigurationRequest(
            scaling_group_id=group_id,
            instance_types=types or [A10],
            image_id="img-1",
            spot_strategy=spot_strategy,
            spot_price_limits=[
                m.CreateScalingConfigurationRequestSpotPriceLimits(instance_type=t, price_limit=p)
                for t, p in (spot_limits or {}).items()
            ]
            or None,
        )
    ).body.scaling_configuration_id
    ess.enable_scaling_group(
        m.EnableScalingGroupRequest(scaling_group_id=group_id, active_scaling_configuration_id=config_id)
    )
    return group_id


def ecs_instances(
    ecs: EcsClient, ids: list[str]
) -> list[ecs_models.DescribeInstancesResponseBodyInstancesInstance]:
    body = ecs.describe_instances(
        ecs_models.DescribeInstancesRequest(region_id=REGION, instance_ids=json.dumps(ids), max_results=100)
    ).body
    return list(body.instances.instance)


def test_scale_out_beyond_stock_ends_warning_with_the_no_stock_message(
    h: EssHelper, cloud: FakeCloud, ess: EssClient
) -> None:
    cloud.set_stock(A10, 2, zone_id=ZONE_A)
    group_id = make_group(ess)
    activity_id = h.scale_to(group_id, 3)
    cloud.advance(30)
    activity = h.activity(activity_id)
    assert activity.status_code == "Warning"
    assert len(activity.created_instances) == 2
    assert "OperationDenied.NoStock" in activity.status_message
    assert activity.error_messages[0].code == "OperationDenied.NoStock"


def test_scale_out_with_no_stock_at_all_fails(h: EssHelper, cloud: FakeCloud, ess: EssClient) -> None:
    cloud.set_stock(A10, 0)
    group_id = make_group(ess)
    activity = h.activity(h.scale_to(group_id, 2))
    assert (activity.status_code, activity.created_capacity) == ("Failed", 0)
    assert "sold out" in activity.status_message


def test_sold_out_first_type_falls_to_the_next_type_in_priority_order(
    h: EssHelper, cloud: FakeCloud, ess: EssClient, ecs: EcsClient
) -> None:
    cloud.set_stock(A10, 1)
    group_id = make_group(ess, types=[A10, L20])
    h.scale_to(group_id, 3)
    types = [i.instance_type for i in ecs_instances(ecs, list(h.states(group_id)))]
    assert sorted(types) == sorted([A10, L20, L20])


def test_priority_policy_moves_to_the_next_vswitch_when_the_first_zone_is_sold_out(
    h: EssHelper, cloud: FakeCloud, ess: EssClient, ecs: EcsClient
) -> None:
    cloud.set_stock(A10, 0, zone_id=ZONE_A)
    group_id = make_group(ess, vswitches=["vsw-a", "vsw-b"], multi_az="PRIORITY")
    h.scale_to(group_id, 2)
    found = ecs_instances(ecs, list(h.states(group_id)))
    assert {i.zone_id for i in found} == {ZONE_B}
    assert {i.vpc_attributes.v_switch_id for i in found} == {"vsw-b"}


def test_priority_policy_fills_the_first_zone_while_it_has_stock(
    h: EssHelper, cloud: FakeCloud, ess: EssClient, ecs: EcsClient
) -> None:
    group_id = make_group(ess, vswitches=["vsw-a", "vsw-b"], multi_az="PRIORITY")
    h.scale_to(group_id, 3)
    assert {i.zone_id for i in ecs_instances(ecs, list(h.states(group_id)))} == {ZONE_A}


def test_balance_policy_spreads_instances_over_the_zones(
    h: EssHelper, cloud: FakeCloud, ess: EssClient, ecs: EcsClient
) -> None:
    group_id = make_group(ess, vswitches=["vsw-a", "vsw-b"], multi_az="BALANCE")
    h.scale_to(group_id, 4)
    zones = [i.zone_id for i in ecs_instances(ecs, list(h.states(group_id)))]
    assert sorted(zones) == [ZONE_A, ZONE_A, ZONE_B, ZONE_B]


def test_cost_optimized_picks_the_cheapest_type_first(
    h: EssHelper, cloud: FakeCloud, ess: EssClient, ecs: EcsClient
) -> None:
    cloud.set_price(A10, on_demand_cny_per_hour=12.0, spot_cny_per_hour=None)
    cloud.set_price(L20, on_demand_cny_per_hour=9.0, spot_cny_per_hour=None)
    group_id = make_group(ess, types=[A10, L20], multi_az="COST_OPTIMIZED")
    h.scale_to(group_id, 2)
    assert {i.instance_type for i in ecs_instances(ecs, list(h.states(group_id)))} == {L20}


def test_cost_optimized_mixes_an_on_demand_base_and_a_spot_share_above_it(
    h: EssHelper, cloud: FakeCloud, ess: EssClient, ecs: EcsClient
) -> None:
    group_id = make_group(
        ess,
        multi_az="COST_OPTIMIZED",
        spot_strategy="SpotAsPriceGo",
        on_demand_base_capacity=1,
        on_demand_percentage_above_base_capacity=50,
    )
    h.scale_to(group_id, 5)
    strategies = sorted(i.spot_strategy for i in ecs_instances(ecs, list(h.states(group_id))))
    assert strategies == ["NoSpot", "NoSpot", "NoSpot", "SpotAsPriceGo", "SpotAsPriceGo"]
    spot_count = ess.describe_scaling_instances(
        m.DescribeScalingInstancesRequest(scaling_group_id=group_id, page_size=50)
    ).body.total_spot_count
    assert spot_count == 2


def test_group_reports_its_spot_parameters(h: EssHelper, ess: EssClient) -> None:
    group_id = make_group(
        ess,
        multi_az="COST_OPTIMIZED",
        on_demand_base_capacity=2,
        on_demand_percentage_above_base_capacity=25,
        spot_instance_pools=3,
        spot_instance_remedy=True,
        compensate_with_on_demand=True,
    )
    g = h.group(group_id)
    assert (g.multi_azpolicy, g.on_demand_base_capacity, g.on_demand_percentage_above_base_capacity) == (
        "COST_OPTIMIZED",
        2,
        25,
    )
    assert (g.spot_instance_pools, g.spot_instance_remedy, g.compensate_with_on_demand) == (3, True, True)


def test_spot_price_limit_below_the_spot_price_gets_no_spot_instance(
    h: EssHelper, cloud: FakeCloud, ess: EssClient
) -> None:
    cloud.set_price(A10, on_demand_cny_per_hour=10.0, spot_cny_per_hour=3.0)
    group_id = make_group(ess, spot_strategy="SpotWithPriceLimit", spot_limits={A10: 2.5})
    activity = h.activity(h.scale_to(group_id, 1))
    assert activity.status_code == "Failed"


def test_compensate_with_on_demand_creates_on_demand_when_spot_cannot_be_had(
    h: EssHelper, cloud: FakeCloud, ess: EssClient, ecs: EcsClient
) -> None:
    cloud.set_stock(A10, 0, spot=True)
    group_id = make_group(
        ess,
        multi_az="COST_OPTIMIZED",
        spot_strategy="SpotAsPriceGo",
        compensate_with_on_demand=True,
        on_demand_percentage_above_base_capacity=0,
    )
    h.scale_to(group_id, 2)
    assert {i.spot_strategy for i in ecs_instances(ecs, list(h.states(group_id)))} == {"NoSpot"}


def test_configuration_reports_spot_strategy_and_price_limits(h: EssHelper, ess: EssClient) -> None:
    group_id = make_group(ess, spot_strategy="SpotWithPriceLimit", spot_limits={A10: 4.0})
    config = ess.describe_scaling_configurations(
        m.DescribeScalingConfigurationsRequest(scaling_group_id=group_id, region_id=REGION)
    ).body.scaling_configurations[0]
    assert config.spot_strategy == "SpotWithPriceLimit"
    assert [(x.instance_type, x.price_limit) for x in config.spot_price_limits] == [(A10, 4.0)]


@pytest.mark.parametrize(
    ("field", "value"),
    [("multi_azpolicy", "CHEAPEST"), ("on_demand_percentage_above_base_capacity", 101)],
)
def test_bad_group_capacity_parameters_are_refused(ess: EssClient, field: str, value: object) -> None:
    with pytest.raises(ClientException) as info:
        ess.create_scaling_group(
            m.CreateScalingGroupRequest(
                region_id=REGION, scaling_group_name="bad", min_size=0, max_size=2, **{field: value}
            )
        )
    assert info.value.code == "InvalidParameter"
    assert not ess.describe_scaling_groups(
        m.DescribeScalingGroupsRequest(region_id=REGION)
    ).body.scaling_groups


def test_scheduled_sold_out_window_refuses_inside_and_refills_after(
    h: EssHelper, cloud: FakeCloud, ess: EssClient
) -> None:
    cloud.schedule_sold_out(A10, START + timedelta(seconds=60), START + timedelta(seconds=600))
    group_id = make_group(ess, desired=0)
    cloud.advance(100)
    ess.modify_scaling_group(m.ModifyScalingGroupRequest(scaling_group_id=group_id, desired_capacity=2))
    assert h.group(group_id).total_capacity == 0
    cloud.advance(560)  # the window ends at +600 s; the group retries within a minute
    assert h.group(group_id).total_capacity == 2


def test_spot_reclaim_announces_the_event_locks_the_instance_and_sets_the_termination_time(
    h: EssHelper, cloud: FakeCloud, ess: EssClient, ecs: EcsClient
) -> None:
    group_id = make_group(ess, spot_strategy="SpotAsPriceGo", desired=1)
    cloud.advance(30)
    (instance_id,) = h.states(group_id)
    cloud.reclaim_spot(instance_id, notice_s=300)
    events = ecs.describe_instance_history_events(
        ecs_models.DescribeInstanceHistoryEventsRequest(region_id=REGION, instance_id=instance_id)
    ).body.instance_system_event_set.instance_system_event_type
    assert [(e.event_type.name, e.event_cycle_status.name) for e in events] == [
        ("PreemptibleInstanceInterruption", "Scheduled")
    ]
    (found,) = ecs_instances(ecs, [instance_id])
    assert [lock.lock_reason for lock in found.operation_locks.lock_reason] == ["Recycling"]
    assert cloud.spot_termination_time(instance_id) == "2026-03-02T00:05:30Z"


def test_reclaimed_spot_instance_is_released_at_the_notice_and_then_replaced(
    h: EssHelper, cloud: FakeCloud, ess: EssClient
) -> None:
    group_id = make_group(ess, spot_strategy="SpotAsPriceGo", desired=1)
    cloud.advance(30)
    (old,) = h.states(group_id)
    cloud.reclaim_spot(old, notice_s=300)
    cloud.advance(299)
    assert list(h.states(group_id)) == [old]
    cloud.advance(1)
    states = h.states(group_id)
    assert old not in states and list(states.values()) == ["Pending"]


def test_spot_instance_remedy_replaces_before_the_release(
    h: EssHelper, cloud: FakeCloud, ess: EssClient
) -> None:
    group_id = make_group(ess, spot_strategy="SpotAsPriceGo", desired=1, spot_instance_remedy=True)
    cloud.advance(30)
    (old,) = h.states(group_id)
    cloud.reclaim_spot(old, notice_s=300)
    cloud.advance(30)
    states = h.states(group_id)
    assert states.pop(old) == "Removing" and list(states.values()) == ["InService"]
    cloud.advance(300)
    assert old not in h.states(group_id) and h.group(group_id).active_capacity == 1


def test_economical_mode_restart_takes_the_restart_time_not_the_boot_time(ess: EssClient) -> None:
    with mock_aliyun(boot_seconds=300, restart_seconds=40, start=START, region_id=REGION) as cloud:
        client = EssClient(sdk_config())
        helper = EssHelper(client)
        group_id = make_group(client, policy="recycle")
        helper.scale_to(group_id, 1)
        cloud.advance(300)
        helper.scale_to(group_id, 0)
        cloud.advance(60)
        helper.scale_to(group_id, 1)
        cloud.advance(39)
        assert list(helper.states(group_id).values()) == ["Pending"]
        cloud.advance(1)
        assert list(helper.states(group_id).values()) == ["InService"]


def test_recycled_instance_is_stopped_in_ess_only_once_ecs_has_stopped(
    h: EssHelper, cloud: FakeCloud, ess: EssClient
) -> None:
    # issue 21 item 8: ESS said Stopped (activity Successful) while ECS was still Stopping.
    group_id = make_group(ess, policy="recycle")
    h.scale_to(group_id, 1)
    cloud.advance(30)
    (instance_id,) = h.states(group_id)
    activity_id = h.scale_to(group_id, 0)
    cloud.advance(cloud.removal_seconds)
    assert cloud.ecs.instances[instance_id].status == "Stopping"
    assert h.states(group_id)[instance_id] == "Removing"
    assert h.activity(activity_id).status_code == "InProgress"
    cloud.advance(cloud.stop_seconds)
    assert h.states(group_id)[instance_id] == "Stopped"
    assert cloud.ecs.instances[instance_id].stopped_mode == "StopCharging"
    assert h.activity(activity_id).status_code == "Successful"


def test_scale_out_while_a_recycled_instance_is_stopping_restarts_it_instead_of_creating_one(
    h: EssHelper, cloud: FakeCloud, ess: EssClient
) -> None:
    group_id = make_group(ess, policy="recycle", desired=1)
    cloud.advance(30)
    (instance_id,) = h.states(group_id)
    ess.modify_scaling_group(m.ModifyScalingGroupRequest(scaling_group_id=group_id, desired_capacity=0))
    cloud.advance(cloud.removal_seconds)
    assert cloud.ecs.instances[instance_id].status == "Stopping"
    ess.modify_scaling_group(m.ModifyScalingGroupRequest(scaling_group_id=group_id, desired_capacity=1))
    cloud.advance(cloud.stop_seconds + cloud.restart_seconds)
    assert h.states(group_id) == {instance_id: "InService"}


def test_stopped_instance_whose_start_finds_no_stock_is_released_and_replaced_by_another_type(
    h: EssHelper, cloud: FakeCloud, ess: EssClient, ecs: EcsClient
) -> None:
    group_id = make_group(ess, policy="recycle", types=[A10, L20])
    h.scale_to(group_id, 1)
    cloud.advance(30)
    (old,) = h.states(group_id)
    h.scale_to(group_id, 0)
    cloud.advance(30)
    cloud.set_stock(A10, 0)
    activity = h.activity(h.scale_to(group_id, 1))
    (new,) = h.states(group_id)
    assert new != old and old in activity.destroyed_instances
    assert ecs_instances(ecs, [new])[0].instance_type == L20
    assert activity.error_messages[0].code == "OperationDenied.NoStock"


def test_modify_scaling_configuration_reorders_types_and_retries_at_once(
    h: EssHelper, cloud: FakeCloud, ess: EssClient, ecs: EcsClient
) -> None:
    cloud.set_stock(A10, 0)
    group_id = make_group(ess, desired=2, types=[A10])
    assert h.group(group_id).total_capacity == 0
    config_id = h.group(group_id).active_scaling_configuration_id
    ess.modify_scaling_configuration(
        m.ModifyScalingConfigurationRequest(scaling_configuration_id=config_id, instance_types=[L20, A10])
    )
    found = ecs_instances(ecs, list(h.states(group_id)))
    assert [i.instance_type for i in found] == [L20, L20]
