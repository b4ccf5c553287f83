"""ECS through the real SDK client against mock_aliyun."""

from __future__ import annotations

import json

import pytest
from alibabacloud_ecs20140526 import models as em
from alibabacloud_ecs20140526.client import Client as EcsClient
from alibabacloud_tea_openapi.exceptions import ClientException

from fleet.testing import FakeCloud

from .conftest import REGION, EssHelper


def describe(ecs: EcsClient, ids: list[str]) -> list[em.DescribeInstancesResponseBodyInstancesInstance]:
    return ecs.describe_instances(
        em.DescribeInstancesRequest(region_id=REGION, instance_ids=json.dumps(ids))
    ).body.instances.instance


def test_instances_created_by_ess_exist_in_ecs_with_gpu_fields(
    h: EssHelper, ecs: EcsClient, cloud: FakeCloud
) -> None:
    group_id = h.make_group(min_size=1)
    cloud.advance(30)
    iid = next(iter(h.states(group_id)))
    row = describe(ecs, [iid])[0]
    assert (row.status, row.instance_type, row.gpuamount, row.gpuspec) == (
        "Running",
        "ecs.gn7i-c8g1.2xlarge",
        1,
        "NVIDIA A10",
    )
    assert row.vpc_attributes.private_ip_address.ip_address[0].startswith("10.")


def test_describe_instances_paginates_with_next_token(ecs: EcsClient, cloud: FakeCloud) -> None:
    for _ in range(5):
        cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION)
    seen, token = [], None
    while True:
        body = ecs.describe_instances(
            em.DescribeInstancesRequest(region_id=REGION, max_results=2, next_token=token)
        ).body
        seen.extend(i.instance_id for i in body.instances.instance)
        token = body.next_token
        if not token:
            break
    assert sorted(seen) == sorted(cloud.ecs.instances) and body.total_count == 5


def test_unknown_ids_are_left_out(ecs: EcsClient, cloud: FakeCloud) -> None:
    real = cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION).instance_id
    assert [i.instance_id for i in describe(ecs, [real, "i-ghost"])] == [real]


def test_instance_types_carry_gpu_amount_spec_and_memory(ecs: EcsClient) -> None:
    body = ecs.describe_instance_types(
        em.DescribeInstanceTypesRequest(instance_types=["ecs.gn7e-c16g1.4xlarge", "ecs.gn8is-2x.8xlarge"])
    ).body
    rows = {
        t.instance_type_id: (t.gpuamount, t.gpuspec, t.gpumemory_size)
        for t in body.instance_types.instance_type
    }
    assert rows == {
        "ecs.gn7e-c16g1.4xlarge": (1, "NVIDIA A100 80G", 80.0),
        "ecs.gn8is-2x.8xlarge": (2, "NVIDIA L20", 48.0),
    }


def test_instance_types_filter_by_gpu_spec_fuzzily(ecs: EcsClient) -> None:
    body = ecs.describe_instance_types(
        em.DescribeInstanceTypesRequest(gpuspec="l20", minimum_gpuamount=8)
    ).body
    assert {t.instance_type_id for t in body.instance_types.instance_type} == {
        "ecs.gn8is-8x.32xlarge",
        "ecs.ebmgn8is.32xlarge",
    }


def test_reboot_goes_stopping_starting_running(ecs: EcsClient, cloud: FakeCloud) -> None:
    iid = cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION).instance_id
    ecs.reboot_instance(em.RebootInstanceRequest(instance_id=iid))
    seen = [describe(ecs, [iid])[0].status]
    cloud.advance(5)
    seen.append(describe(ecs, [iid])[0].status)
    cloud.advance(30)
    seen.append(describe(ecs, [iid])[0].status)
    assert seen == ["Stopping", "Starting", "Running"]


def test_reboot_of_a_stopped_instance_is_incorrect_status(ecs: EcsClient, cloud: FakeCloud) -> None:
    iid = cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION, status="Stopped").instance_id
    with pytest.raises(ClientException) as info:
        ecs.reboot_instance(em.RebootInstanceRequest(instance_id=iid))
    assert info.value.code == "IncorrectInstanceStatus"


def test_stop_then_start(ecs: EcsClient, cloud: FakeCloud) -> None:
    iid = cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION).instance_id
    ecs.stop_instance(em.StopInstanceRequest(instance_id=iid, stopped_mode="StopCharging"))
    cloud.advance(5)
    stopped = describe(ecs, [iid])[0]
    ecs.start_instance(em.StartInstanceRequest(instance_id=iid))
    cloud.advance(30)
    assert (stopped.status, stopped.stopped_mode, describe(ecs, [iid])[0].status) == (
        "Stopped",
        "StopCharging",
        "Running",
    )


def test_deleting_a_running_instance_needs_force(ecs: EcsClient, cloud: FakeCloud) -> None:
    iid = cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION).instance_id
    with pytest.raises(ClientException) as info:
        ecs.delete_instance(em.DeleteInstanceRequest(instance_id=iid))
    ecs.delete_instance(em.DeleteInstanceRequest(instance_id=iid, force=True))
    assert info.value.code == "IncorrectInstanceStatus" and describe(ecs, [iid]) == []


def test_unknown_instance_is_not_found(ecs: EcsClient) -> None:
    with pytest.raises(ClientException) as info:
        ecs.reboot_instance(em.RebootInstanceRequest(instance_id="i-ghost"))
    assert (info.value.code, info.value.status_code) == ("InvalidInstanceId.NotFound", 404)


def test_dry_run_answers_dry_run_operation(ecs: EcsClient, cloud: FakeCloud) -> None:
    iid = cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION).instance_id
    with pytest.raises(ClientException) as info:
        ecs.reboot_instance(em.RebootInstanceRequest(instance_id=iid, dry_run=True))
    assert info.value.code == "DryRunOperation" and cloud.ecs.instances[iid].status == "Running"


def test_full_status_is_impaired_under_an_executing_failure_event(ecs: EcsClient, cloud: FakeCloud) -> None:
    iid = cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION).instance_id
    event_id = cloud.add_system_event(iid, "SystemFailure.Reboot")
    row = ecs.describe_instances_full_status(
        em.DescribeInstancesFullStatusRequest(region_id=REGION, instance_id=[iid])
    ).body.instance_full_status_set.instance_full_status_type[0]
    events = row.scheduled_system_event_set.scheduled_system_event_type
    assert (row.status.name, row.health_status.name) == ("Running", "Impaired")
    assert [(e.event_id, e.event_type.name, e.event_cycle_status.name) for e in events] == [
        (event_id, "SystemFailure.Reboot", "Executing")
    ]


def test_full_status_is_ok_for_a_healthy_running_instance(ecs: EcsClient, cloud: FakeCloud) -> None:
    iid = cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION).instance_id
    row = ecs.describe_instances_full_status(
        em.DescribeInstancesFullStatusRequest(region_id=REGION, instance_id=[iid])
    ).body.instance_full_status_set.instance_full_status_type[0]
    assert row.health_status.name == "Ok"


@pytest.mark.parametrize(("status", "after"), [("Scheduled", "Avoided"), ("Executing", "Executed")])
def test_a_reboot_ends_the_instances_reboot_events(
    ecs: EcsClient, cloud: FakeCloud, status: str, after: str
) -> None:
    iid = cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION).instance_id
    reboot = cloud.add_system_event(iid, "SystemMaintenance.Reboot", cycle_status=status)
    other = cloud.add_system_event(iid, "SystemMaintenance.Redeploy", cycle_status="Scheduled")
    ecs.reboot_instance(em.RebootInstanceRequest(instance_id=iid))
    cloud.advance(5)
    midway = {e.event_id: e.cycle_status for e in cloud.ecs.events_for(iid)}
    cloud.advance(30)
    rows = ecs.describe_instance_history_events(
        em.DescribeInstanceHistoryEventsRequest(region_id=REGION, instance_id=iid)
    ).body.instance_system_event_set.instance_system_event_type
    got = {e.event_id: e.event_cycle_status.name for e in rows}
    assert midway == {reboot: status, other: "Scheduled"}  # not before the instance is back
    assert got == {reboot: after, other: "Scheduled"}  # a redeploy is not what a reboot does
    health = (
        ecs.describe_instances_full_status(
            em.DescribeInstancesFullStatusRequest(region_id=REGION, instance_id=[iid])
        )
        .body.instance_full_status_set.instance_full_status_type[0]
        .health_status.name
    )
    assert health == "Ok"


def test_history_events_filter_by_cycle_status(ecs: EcsClient, cloud: FakeCloud) -> None:
    iid = cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION).instance_id
    active = cloud.add_system_event(iid, "SystemMaintenance.Reboot", cycle_status="Scheduled")
    cloud.add_system_event(iid, "SystemFailure.Reboot", cycle_status="Executed")
    body = ecs.describe_instance_history_events(
        em.DescribeInstanceHistoryEventsRequest(
            region_id=REGION, instance_id=iid, instance_event_cycle_status=["Scheduled", "Executing"]
        )
    ).body
    rows = body.instance_system_event_set.instance_system_event_type
    assert [(e.event_id, e.event_type.name) for e in rows] == [(active, "SystemMaintenance.Reboot")]
