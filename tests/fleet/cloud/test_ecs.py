"""EcsAdapter through the real ECS SDK client: InstanceIds batching, NextToken, health and events."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from fleet.cloud import InstanceInfo, ServerError

from .conftest import error


def _instance(iid: str) -> dict:
    return {
        "InstanceId": iid,
        "Status": "Running",
        "InstanceType": "ecs.gn7i-c8g1.2xlarge",
        "GPUAmount": 1,
        "GPUSpec": "NVIDIA A10",
        "ZoneId": "cn-chengdu-b",
        "VpcAttributes": {"PrivateIpAddress": {"IpAddress": ["10.0.0.7"]}},
    }


def test_describe_instances_converts_gpu_fields(stub, clients):
    stub.on("DescribeInstances", {"Instances": {"Instance": [_instance("i-1")]}, "TotalCount": 1})
    assert clients.ecs.describe_instances(["i-1"]) == [
        InstanceInfo("i-1", "Running", "ecs.gn7i-c8g1.2xlarge", 1, "NVIDIA A10", "cn-chengdu-b", "10.0.0.7")
    ]
    assert stub.calls[0].params["RegionId"] == "cn-chengdu"


def test_describe_instances_batches_ids_as_json_hundred_per_call(stub, clients):
    ids = [f"i-{n:03d}" for n in range(250)]

    def answer(params):
        asked = json.loads(params["InstanceIds"])
        return {"Instances": {"Instance": [_instance(i) for i in asked]}, "TotalCount": len(asked)}

    stub.on("DescribeInstances", answer)
    found = clients.ecs.describe_instances(ids)
    assert [len(json.loads(c.params["InstanceIds"])) for c in stub.calls] == [100, 100, 50]
    assert [i.instance_id for i in found] == ids


def test_describe_instances_follows_next_token(stub, clients):
    stub.sequence(
        "DescribeInstances",
        {"Instances": {"Instance": [_instance("i-1")]}, "NextToken": "t2"},
        {"Instances": {"Instance": [_instance("i-2")]}, "NextToken": ""},
    )
    assert [i.instance_id for i in clients.ecs.describe_instances(["i-1", "i-2"])] == ["i-1", "i-2"]
    assert [c.params.get("NextToken") for c in stub.calls] == [None, "t2"]


def test_full_status_reads_names_and_scheduled_events(stub, clients):
    stub.on(
        "DescribeInstancesFullStatus",
        {
            "InstanceFullStatusSet": {
                "InstanceFullStatusType": [
                    {
                        "InstanceId": "i-1",
                        "Status": {"Code": 1, "Name": "Running"},
                        "HealthStatus": {"Code": 64, "Name": "Impaired"},
                        "ScheduledSystemEventSet": {
                            "ScheduledSystemEventType": [
                                {
                                    "EventId": "e-1",
                                    "EventType": {"Code": 1, "Name": "SystemFailure.Reboot"},
                                    "EventCycleStatus": {"Code": 24, "Name": "Executing"},
                                    "NotBefore": "2026-11-30T09:00:00Z",
                                    "Reason": "hardware",
                                }
                            ]
                        },
                    }
                ]
            },
            "TotalCount": 1,
        },
    )
    [health] = clients.ecs.describe_full_status(["i-1"])
    assert (health.status, health.health_status) == ("Running", "Impaired")
    [event] = health.events
    assert (event.code, event.cycle_status, event.instance_id) == ("SystemFailure.Reboot", "Executing", "i-1")
    assert event.not_before == datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    assert stub.calls[0].params["InstanceId.1"] == "i-1"


def test_history_events_asks_for_active_cycles_per_instance(stub, clients):
    def answer(params):
        return {
            "InstanceSystemEventSet": {
                "InstanceSystemEventType": [
                    {
                        "EventId": f"e-{params['InstanceId']}",
                        "InstanceId": params["InstanceId"],
                        "EventType": {"Code": 1, "Name": "SystemMaintenance.Reboot"},
                        "EventCycleStatus": {"Code": 23, "Name": "Scheduled"},
                        "NotBefore": "2026-12-01T00:00:00Z",
                    }
                ]
            }
        }

    stub.on("DescribeInstanceHistoryEvents", answer)
    events = clients.ecs.describe_history_events(["i-1", "i-2"])
    assert [e.instance_id for e in events] == ["i-1", "i-2"]
    assert {c.params["InstanceEventCycleStatus.1"] for c in stub.calls} == {"Scheduled"}
    assert sorted(
        v for k, v in stub.calls[0].params.items() if k.startswith("InstanceEventCycleStatus.")
    ) == [
        "Executing",
        "Inquiring",
        "Scheduled",
    ]


def test_history_events_active_only_drops_finished_events(stub, clients):
    stub.on(
        "DescribeInstanceHistoryEvents",
        {
            "InstanceSystemEventSet": {
                "InstanceSystemEventType": [
                    {
                        "EventId": "old",
                        "EventType": {"Name": "SystemFailure.Reboot"},
                        "EventCycleStatus": {"Name": "Executed"},
                    },
                    {
                        "EventId": "new",
                        "EventType": {"Name": "SystemFailure.Reboot"},
                        "EventCycleStatus": {"Name": "Executing"},
                    },
                ]
            }
        },
    )
    assert [e.event_id for e in clients.ecs.describe_history_events(["i-1"])] == ["new"]


def test_reboot_is_not_repeated_after_a_server_error(stub, clients):
    stub.on("RebootInstance", error(500, "InternalError"))
    with pytest.raises(ServerError):
        clients.ecs.reboot_instance("i-1")
    assert len(stub.calls) == 1


def test_reboot_is_retried_when_throttled(stub, clients):
    stub.sequence("RebootInstance", error(400, "Throttling.User"), {})
    clients.ecs.reboot_instance("i-1")
    assert [c.params["InstanceId"] for c in stub.calls] == ["i-1", "i-1"]
