"""FakeAliyunServer and its /_fake/ control API, over HTTP from the SDKs and urllib; the CLI's bad input."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from alibabacloud_cms20190101 import models as cm
from alibabacloud_cms20190101.client import Client as CmsClient
from alibabacloud_ecs20140526 import models as em
from alibabacloud_ecs20140526.client import Client as EcsClient
from alibabacloud_ess20220222 import models as m
from alibabacloud_ess20220222.client import Client as EssClient
from alibabacloud_tea_openapi.exceptions import ClientException, ServerException

from fleet.cli import main
from fleet.testing import FakeAliyunServer

from .conftest import REGION, sdk_config


@pytest.fixture
def server() -> Iterator[FakeAliyunServer]:
    with FakeAliyunServer(port=0, boot_seconds=30, time_scale=1.0) as running:
        yield running


def call(
    server: FakeAliyunServer, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{server.url}/_fake/{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_endpoint_is_loopback_with_the_bound_port(server: FakeAliyunServer) -> None:
    host, port = server.endpoint.split(":")
    assert host == "127.0.0.1" and int(port) > 0


def test_clock_advance_boots_instances(server: FakeAliyunServer) -> None:
    ess = EssClient(sdk_config(server.endpoint))
    group_id = server.cloud.create_group_for_tests(min_size=1)
    status, body = call(server, "POST", "clock", {"advance_s": 60})
    rows = ess.describe_scaling_instances(
        m.DescribeScalingInstancesRequest(scaling_group_id=group_id)
    ).body.scaling_instances
    assert status == 200 and "now" in body and [r.lifecycle_state for r in rows] == ["InService"]


def test_negative_advance_is_refused(server: FakeAliyunServer) -> None:
    status, body = call(server, "POST", "clock", {"advance_s": -5})
    assert status == 400 and "negative" in body["error"]


@pytest.mark.parametrize("advance_s", [float("nan"), float("inf"), 1e12, 1e308, 366 * 86400 + 1])
def test_an_unusable_advance_is_refused_and_the_server_keeps_working(
    server: FakeAliyunServer, advance_s: float
) -> None:
    before = server.cloud.now()
    status, body = call(server, "POST", "clock", {"advance_s": advance_s})
    groups = EssClient(sdk_config(server.endpoint)).describe_scaling_groups(
        m.DescribeScalingGroupsRequest(region_id=REGION)
    )
    assert status == 400 and "advance_s" in body["error"]
    assert groups.body.scaling_groups == [] and server.cloud.now() - before < timedelta(minutes=1)


def test_published_metrics_read_back_through_the_sdk(server: FakeAliyunServer) -> None:
    status, _ = call(
        server,
        "POST",
        "metrics",
        {
            "namespace": "acs_ecs_dashboard",
            "metric": "instance_gpu_gpu_temperature",
            "dimensions": {"instanceId": "i-1"},
            "value": 91.0,
        },
    )
    body = (
        CmsClient(sdk_config(server.endpoint))
        .describe_metric_last(
            cm.DescribeMetricLastRequest(
                namespace="acs_ecs_dashboard",
                metric_name="instance_gpu_gpu_temperature",
                dimensions=json.dumps({"instanceId": "i-1"}),
            )
        )
        .body
    )
    assert status == 200 and [r["Maximum"] for r in json.loads(body.datapoints)] == [91.0]


def test_metric_without_a_value_is_refused(server: FakeAliyunServer) -> None:
    status, body = call(server, "POST", "metrics", {"namespace": "ns", "metric": "m"})
    assert status == 400 and "value" in body["error"]


def test_injected_server_error_reaches_the_sdk(server: FakeAliyunServer) -> None:
    call(
        server,
        "POST",
        "faults",
        {"action": "DescribeScalingGroups", "code": "InternalError", "status": 500, "count": 1},
    )
    with pytest.raises(ServerException) as info:
        EssClient(sdk_config(server.endpoint)).describe_scaling_groups(
            m.DescribeScalingGroupsRequest(region_id=REGION)
        )
    assert (info.value.code, info.value.status_code) == ("InternalError", 500)


def test_unknown_fault_field_is_refused(server: FakeAliyunServer) -> None:
    status, body = call(server, "POST", "faults", {"action": "X", "probability": 0.5})
    assert status == 400 and "probability" in body["error"]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"action": "X", "status": 200}, "status must be an HTTP error status"),
        ({"action": "X", "rate": 5}, "rate must be a share"),
        ({"action": "X", "count": -1}, "count must be a whole number"),
        ({"action": "X", "count": 1.5}, "count must be a whole number"),
    ],
)
def test_a_fault_with_a_status_rate_or_count_no_fault_can_have_is_refused(server, body, named) -> None:
    status, answer = call(server, "POST", "faults", body)
    assert status == 400 and named in answer["error"]
    assert call(server, "GET", "faults", None)[1].get("faults", []) == []


def test_system_event_shows_in_full_status(server: FakeAliyunServer) -> None:
    iid = server.cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION).instance_id
    status, body = call(server, "POST", "events", {"instance_id": iid, "code": "SystemFailure.Reboot"})
    row = (
        EcsClient(sdk_config(server.endpoint))
        .describe_instances_full_status(
            em.DescribeInstancesFullStatusRequest(region_id=REGION, instance_id=[iid])
        )
        .body.instance_full_status_set.instance_full_status_type[0]
    )
    events = row.scheduled_system_event_set.scheduled_system_event_type
    assert status == 200 and [e.event_id for e in events] == [body["event_id"]]


def test_event_for_an_unknown_instance_is_refused(server: FakeAliyunServer) -> None:
    status, body = call(server, "POST", "events", {"instance_id": "i-ghost", "code": "SystemFailure.Reboot"})
    assert status == 400 and "i-ghost" in body["error"]


@pytest.mark.parametrize(
    "fields",
    [
        {"code": 123},
        {"code": ""},
        {"code": ["SystemFailure.Reboot"]},
        {"cycle_status": 1},
        {"reason": {"why": "x"}},
        {"not_before": 1.5},
        {"not_before": "9" * 400},
        {"not_before": "yesterday"},
    ],
)
def test_an_event_with_a_field_of_the_wrong_type_is_refused_and_stores_nothing(
    server: FakeAliyunServer, fields: dict[str, Any]
) -> None:
    iid = server.cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", region_id=REGION).instance_id
    status, body = call(
        server, "POST", "events", {"instance_id": iid, "code": "SystemFailure.Reboot", **fields}
    )
    state_status, _ = call(server, "GET", "state")
    assert status == 400 and next(iter(fields)) in body["error"]
    assert server.cloud.ecs.events == {} and state_status == 200


def test_state_dumps_groups_and_instances(server: FakeAliyunServer) -> None:
    group_id = server.cloud.create_group_for_tests(in_service=2)
    status, body = call(server, "GET", "state")
    assert status == 200 and body["ess"]["groups"][group_id]["TotalCapacity"] == 2
    assert len(body["ecs"]["instances"]) == 2


def test_reset_empties_the_world(server: FakeAliyunServer) -> None:
    server.cloud.create_group_for_tests(in_service=1)
    status, _ = call(server, "POST", "reset", {})
    assert status == 200 and call(server, "GET", "state")[1]["ess"]["groups"] == {}


def test_groups_endpoint_builds_a_group(server: FakeAliyunServer) -> None:
    status, body = call(server, "POST", "groups", {"min_size": 0, "max_size": 4, "in_service": 1})
    assert status == 200 and server.cloud.ess.groups[body["group_id"]].max_size == 4


def test_groups_endpoint_answers_an_invalid_group_with_the_api_error(server: FakeAliyunServer) -> None:
    status, body = call(server, "POST", "groups", {"min_size": 5, "max_size": 1})
    assert status == 400 and body["code"] == "InvalidParameter.Conflict"
    assert server.cloud.ess.groups == {}


@pytest.mark.parametrize(
    "fields",
    [
        {"max_size": 2, "in_service": 5},
        {"in_service": -3},
        {"in_service": 1, "enable": False},
        {"in_service": 1.5},
        {"min_size": True},
        {"desired_capacity": "2"},
        {"name": 5},
        {"region_id": 7},
        {"enable": "no"},
    ],
)
def test_groups_endpoint_refuses_a_bad_body_and_creates_nothing(
    server: FakeAliyunServer, fields: dict[str, Any]
) -> None:
    status, body = call(server, "POST", "groups", fields)
    assert status == 400 and next(iter(reversed(fields))) in body["error"]
    assert server.cloud.ess.groups == {} and server.cloud.ecs.instances == {}


@pytest.mark.parametrize(
    "fields",
    [
        {"on_demand_cny_per_hour": -1.0},
        {"spot_cny_per_hour": -0.5},
        {"on_demand_cny_per_hour": float("nan")},
        {"spot_cny_per_hour": float("inf")},
        {"on_demand_cny_per_hour": 12.0, "spot_cny_per_hour": float("nan")},
    ],
)
def test_prices_endpoint_refuses_a_negative_or_non_finite_price_and_sets_nothing(
    server: FakeAliyunServer, fields: dict[str, float]
) -> None:
    status, body = call(server, "POST", "prices", {"instance_type": "ecs.gn7i-c8g1.2xlarge", **fields})
    assert status == 400 and "cny_per_hour" in body["error"]
    assert (server.cloud.prices.on_demand, server.cloud.prices.spot) == ({}, {})


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        ("metrics", {"namespace": "ns", "metric": "m", "value": float("nan")}),
        ("metrics", {"namespace": "ns", "metric": "m", "value": 1.0, "maximum": float("inf")}),
        ("faults", {"action": "DescribeScalingGroups", "latency_s": float("inf")}),
        ("faults", {"action": "DescribeScalingGroups", "retry_after_s": float("nan")}),
    ],
)
def test_control_numbers_must_be_finite(server: FakeAliyunServer, path: str, fields: dict[str, Any]) -> None:
    status, body = call(server, "POST", path, fields)
    assert status == 400 and "finite" in body["error"]
    assert server.cloud.cms.state()["series"] == [] and server.cloud.faults.rules == []


def test_unknown_control_endpoint_is_404(server: FakeAliyunServer) -> None:
    assert call(server, "POST", "teleport", {})[0] == 404


def test_time_scale_speeds_up_the_clock() -> None:
    with FakeAliyunServer(port=0, time_scale=3600.0) as fast:
        before = fast.cloud.now()
        call(fast, "GET", "clock")
        assert (fast.cloud.now() - before).total_seconds() > 1.0


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--port", "70000"], "--port"),
        (["--port", "0", "--time-scale", "0"], "--time-scale"),
        (["--port", "0", "--boot-seconds", "-1"], "--boot-seconds"),
        (["--port", "0", "--restart-seconds", "-1"], "--restart-seconds"),
        (["--port", "0", "--boot-seconds", "nan"], "--boot-seconds: must be between"),
        (["--port", "0", "--boot-seconds", "inf"], "--boot-seconds: must be between"),
        (["--port", "0", "--time-scale", "nan"], "--time-scale"),
        (["--port", "0", "--time-scale", "inf"], "--time-scale"),
        (["--port", "0", "--account-id", "abc"], "--account-id"),
        (["--port", "0", "--region", "Chengdu"], "--region"),
    ],
)
def test_fake_cloud_command_refuses_bad_input(
    args: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fake-cloud", *args]) == 2
    assert fragment in capsys.readouterr().err


def test_a_bug_in_the_fake_is_answered_as_a_500_over_http(
    server: FakeAliyunServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fleet.testing.ess.responses import EssResponse

    def broken(self: EssResponse) -> dict:
        raise RuntimeError("boom")

    monkeypatch.setattr(EssResponse, "describe_scaling_groups", broken)
    with pytest.raises(ServerException) as info:
        EssClient(sdk_config(server.endpoint)).describe_scaling_groups(
            m.DescribeScalingGroupsRequest(region_id=REGION)
        )
    assert (info.value.code, info.value.status_code) == (
        "InternalError",
        500,
    ) and "boom" in info.value.message


def test_stock_endpoint_sells_a_type_out_and_the_scale_out_fails(server: FakeAliyunServer) -> None:
    ess = EssClient(sdk_config(server.endpoint))
    group_id = server.cloud.create_group_for_tests(max_size=4)
    status, _ = call(server, "POST", "stock", {"instance_type": "ecs.gn7i-c8g1.2xlarge", "available": 0})
    activity_id = ess.scale_with_adjustment(
        m.ScaleWithAdjustmentRequest(
            scaling_group_id=group_id, adjustment_type="TotalCapacity", adjustment_value=2
        )
    ).body.scaling_activity_id
    activity = ess.describe_scaling_activities(
        m.DescribeScalingActivitiesRequest(scaling_activity_ids=[activity_id])
    ).body.scaling_activities[0]
    assert status == 200 and activity.status_code == "Failed"
    assert call(server, "GET", "stock")[1]["counts"][0]["available"] == 0


def test_stock_endpoint_schedules_a_sold_out_window(server: FakeAliyunServer) -> None:
    status, _ = call(
        server,
        "POST",
        "stock",
        {
            "instance_type": "ecs.gn7i-c8g1.2xlarge",
            "start": "2026-03-02T08:00:00Z",
            "end": "2026-03-02T10:00:00Z",
        },
    )
    window = call(server, "GET", "stock")[1]["sold_out"][0]
    assert status == 200 and (window["start"], window["end"]) == (
        "2026-03-02T08:00:00Z",
        "2026-03-02T10:00:00Z",
    )


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"available": 0}, "instance_type"),
        ({"instance_type": "ecs.gn7i-c8g1.2xlarge", "available": -1}, "negative"),
        ({"instance_type": "ecs.gn7i-c8g1.2xlarge", "available": "none"}, "whole number"),
        ({"instance_type": "ecs.gn7i-c8g1.2xlarge", "colour": 1}, "unknown stock field"),
    ],
)
def test_stock_endpoint_refuses_bad_input(
    server: FakeAliyunServer, body: dict[str, Any], fragment: str
) -> None:
    status, answer = call(server, "POST", "stock", body)
    assert status == 400 and fragment in answer["error"]


def test_spot_reclaim_endpoint_and_the_metadata_termination_time(server: FakeAliyunServer) -> None:
    inst = server.cloud.ecs.create_instance("ecs.gn7i-c8g1.2xlarge", spot_strategy="SpotAsPriceGo")
    assert call(server, "GET", f"metadata/{inst.instance_id}/instance/spot/termination-time")[0] == 404
    status, body = call(server, "POST", "spot-reclaim", {"instance_id": inst.instance_id, "notice_s": 120})
    code, meta = call(server, "GET", f"metadata/{inst.instance_id}/instance/spot/termination-time")
    assert status == 200 and body["event_id"].startswith("e-")
    assert code == 200 and meta["termination_time"].endswith("Z")


def test_a_denied_action_reaches_the_sdk_as_a_ram_denial(server: FakeAliyunServer) -> None:
    ess = EssClient(sdk_config(server.endpoint))
    group_id = server.cloud.create_group_for_tests(min_size=0, region_id=REGION)
    assert call(server, "POST", "ram", {"deny": ["ess:ScaleWithAdjustment"]}) == (200, {"ok": True})
    request = m.ScaleWithAdjustmentRequest(
        scaling_group_id=group_id, adjustment_type="TotalCapacity", adjustment_value=2
    )
    with pytest.raises(ClientException) as info:
        ess.scale_with_adjustment(request)
    assert (info.value.status_code, info.value.code) == (403, "Forbidden.Unauthorized")
    assert info.value.access_denied_detail["AuthAction"] == "ess:ScaleWithAdjustment"
    assert info.value.access_denied_detail["NoPermissionType"] == "ExplicitDeny"
    assert ess.describe_scaling_groups(m.DescribeScalingGroupsRequest(region_id=REGION)).body.scaling_groups
    status, body = call(server, "GET", "ram")
    assert status == 200 and body["denials"] == [
        {"caller": "test-ak", "permission": "ess:ScaleWithAdjustment"}
    ]
    assert call(server, "DELETE", "ram") == (200, {"ok": True})
    assert ess.scale_with_adjustment(request).body.scaling_activity_id


def test_allow_only_confines_one_access_key(server: FakeAliyunServer) -> None:
    body = {"allow_only": ["ecs:DescribeInstances"], "access_key_id": "test-ak"}
    assert call(server, "POST", "ram", body)[0] == 200
    ecs = EcsClient(sdk_config(server.endpoint))
    assert ecs.describe_instances(em.DescribeInstancesRequest(region_id=REGION)).body is not None
    with pytest.raises(ClientException) as info:
        ecs.describe_instances_full_status(em.DescribeInstancesFullStatusRequest(region_id=REGION))
    assert (info.value.code, info.value.access_denied_detail["NoPermissionType"]) == (
        "Forbidden.RAM",
        "ImplicitDeny",
    )


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({}, "deny or allow_only"),
        ({"deny": "ess:ScaleWithAdjustment"}, "deny must be a list"),
        ({"deny": ["ess:*"]}, "ess:*"),
        ({"deny": ["ScaleWithAdjustment"]}, "ScaleWithAdjustment"),
        ({"deny": ["ess:ScaleWithAdjustmen"]}, "no Action 'ScaleWithAdjustmen'"),
        ({"deny": ["ess:ScaleWithAdjustment"], "allow_only": ["rds:X"]}, "rds:X"),
        ({"deny": ["ess:ScaleWithAdjustment"], "access_key_id": 5}, "access_key_id"),
        ({"deny": ["ess:ScaleWithAdjustment"], "who": "me"}, "who"),
    ],
)
def test_a_bad_ram_body_is_refused_and_changes_nothing(server: FakeAliyunServer, body, named) -> None:
    status, answer = call(server, "POST", "ram", body)
    assert status == 400 and named in answer["error"]
    assert call(server, "GET", "ram")[1] == {"denied": [], "allow_only": [], "denials": []}


def test_reset_lifts_the_ram_rules(server: FakeAliyunServer) -> None:
    call(server, "POST", "ram", {"deny": ["cms:DescribeMetricList"]})
    call(server, "POST", "reset", {})
    assert call(server, "GET", "ram")[1]["denied"] == []
