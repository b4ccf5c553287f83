"""The fake's plumbing: parameter parsing, clocks, timers, dispatch, faults."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import requests
from alibabacloud_ess20220222 import models as m
from alibabacloud_ess20220222.client import Client as EssClient
from alibabacloud_tea_openapi.exceptions import ClientException, ServerException, ThrottlingException

from fleet.testing import FakeCloud, ManualClock, ScaledClock, mock_aliyun
from fleet.testing.core.errors import AliyunError
from fleet.testing.core.params import Params, parse_query
from fleet.testing.core.timers import TimerQueue

from .conftest import REGION, START, sdk_config


def test_flattened_lists_are_read_in_index_order() -> None:
    params = Params(parse_query("InstanceIds.2=i-b&InstanceIds.1=i-a&InstanceIds.10=i-j"))
    assert params.list("InstanceIds") == ["i-a", "i-b", "i-j"]


def test_flattened_objects_nest_their_fields() -> None:
    params = Params(parse_query("Tags.1.Key=a&Tags.1.Value=1&Tags.2.Key=b&MetricList.1.Labels.1.Key=k"))
    assert (params.objects("Tags"), params.objects("MetricList")) == (
        [{"Key": "a", "Value": "1"}, {"Key": "b"}],
        [{"Labels": {"1": {"Key": "k"}}}],
    )


def test_nested_models_are_read_as_dicts() -> None:
    params = Params(parse_query("Escalations.Critical.Threshold=90&Escalations.Critical.Times=3"))
    assert params.nested("Escalations") == {"Critical": {"Threshold": "90", "Times": "3"}}


@pytest.mark.parametrize(("raw", "expected"), [("4", 4), ("-3", -3), ("4.0", 4), ("2147483647", 2**31 - 1)])
def test_integer_parameters_read_whole_numbers(raw: str, expected: int) -> None:
    assert Params({"N": raw}).int("N") == expected


@pytest.mark.parametrize(
    "raw", ["1.5", "1.9", "9" * 400 + ".0", "9" * 400, "2147483648", "1e3", "NaN", "inf", "1_000", " 4", "x"]
)
def test_an_integer_parameter_that_is_not_an_integer_is_invalid(raw: str) -> None:
    with pytest.raises(AliyunError) as info:
        Params({"N": raw}).int("N")
    assert (info.value.code, info.value.status) == ("InvalidParameter", 400)


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-Infinity", "1e999", "x", "1,5"])
def test_a_number_parameter_that_is_not_a_finite_number_is_invalid(raw: str) -> None:
    # TargetValue=nan made a target-tracking rule no metric ever meets; every number the fake reads is finite
    with pytest.raises(AliyunError) as info:
        Params({"TargetValue": raw}).float("TargetValue")
    assert (info.value.code, info.value.status) == ("InvalidParameter", 400)
    assert "TargetValue" in info.value.message


def test_a_number_parameter_reads_what_str_makes_of_a_float() -> None:
    assert Params({"T": "0.75", "U": "-3", "V": "1e-3"}).float("T") == 0.75
    assert Params({"U": "-3"}).float("U") == -3.0 and Params({"V": "1e-3"}).float("V") == 0.001


@pytest.mark.parametrize(
    "query",
    [
        "Action=CreateScalingGroup&ScalingGroupName=g&MinSize=" + "9" * 400 + ".0&MaxSize=2",
        "Action=CreateScalingGroup&ScalingGroupName=g&MinSize=1.5&MaxSize=2",
        "Action=DescribeScalingGroups&PageNumber=" + "9" * 400 + ".0",
        "Action=DescribeScalingGroups&PageSize=1.9",
    ],
)
def test_a_request_with_a_non_integer_count_is_invalid_and_creates_nothing(
    cloud: FakeCloud, query: str
) -> None:
    response = requests.post(f"https://ess.aliyuncs.com/?RegionId=cn-chengdu&{query}", timeout=5)
    assert (response.status_code, response.json()["Code"]) == (400, "InvalidParameter")
    assert cloud.ess.groups == {}


@pytest.mark.parametrize(("raw", "expected"), [("True", True), ("false", False), ("1", True)])
def test_booleans_are_parsed_case_insensitively(raw: str, expected: bool) -> None:
    assert Params({"Flag": raw}).bool("Flag") is expected


def test_json_string_parameters_are_decoded() -> None:
    assert Params(parse_query("InstanceIds=%5B%22i-1%22%5D")).json_list("InstanceIds") == ["i-1"]


@pytest.mark.parametrize("raw", ["[NaN]", '{"v": Infinity}', "-Infinity"])
def test_json_string_parameters_refuse_python_constants_that_are_not_json(raw: str) -> None:
    with pytest.raises(AliyunError) as info:
        Params({"X": raw}).json("X")
    assert (info.value.code, info.value.status) == ("InvalidParameter", 400)


def test_times_accept_epoch_ms_and_date_strings() -> None:
    params = Params({"A": "1772409600000", "B": "2026-03-02 00:00:00", "C": "2026-03-02T00:00Z"})
    assert params.time_ms("A") == params.time_ms("B") == params.time_ms("C") == 1772409600000


def test_manual_clock_moves_only_when_advanced() -> None:
    clock = ManualClock(START)
    assert clock.now() == START and clock.advance(90) == START + timedelta(seconds=90)


def test_manual_clock_refuses_to_go_backwards() -> None:
    with pytest.raises(ValueError, match="backwards"):
        ManualClock(START).advance(-1)


@pytest.mark.parametrize(
    "make", [lambda: ManualClock(START), lambda: ScaledClock(start=START)], ids=["manual", "scaled"]
)
@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), 1e12, 1e308])
def test_a_clock_refuses_an_unusable_advance_and_keeps_its_time(
    make: Callable[[], ManualClock | ScaledClock], seconds: float
) -> None:
    clock = make()
    with pytest.raises(ValueError, match="cannot move the clock"):
        clock.advance(seconds)
    assert clock.now() - START < timedelta(minutes=1)


def test_scaled_clock_adds_explicit_advances() -> None:
    clock = ScaledClock(time_scale=1.0, start=START)
    assert clock.advance(3600) >= START + timedelta(seconds=3600)


def test_timers_fire_in_time_order_with_their_due_time() -> None:
    queue, fired = TimerQueue(), []
    queue.schedule(20.0, lambda at: fired.append(("b", at)))
    queue.schedule(10.0, lambda at: fired.append(("a", at)))
    queue.schedule(30.0, lambda at: fired.append(("c", at)))
    queue.run_due(25.0)
    assert fired == [("a", 10.0), ("b", 20.0)]


def test_a_foreign_clock_is_driven_by_tick() -> None:
    class Wall:
        def __init__(self) -> None:
            self.t = START

        def now(self) -> datetime:
            return self.t

    wall = Wall()
    with mock_aliyun(clock=wall, boot_seconds=30) as cloud:
        group_id = cloud.create_group_for_tests(desired_capacity=0)
        cloud.ess.scale(group_id, "TotalCapacity", 1, min_adjustment_magnitude=None, cause="test")
        wall.t = START + timedelta(seconds=31)
        cloud.tick()
        assert list(cloud.ess.instances.values())[0].lifecycle_state == "InService"


def test_unfaked_action_answers_not_implemented(ess: EssClient) -> None:
    with pytest.raises(ClientException) as info:
        ess.describe_regions(m.DescribeRegionsRequest())
    assert info.value.code == "NotImplemented" and "DescribeRegions" in info.value.message


def test_unfaked_host_answers_not_implemented(cloud: FakeCloud) -> None:
    response = requests.get("https://example.com/anything", timeout=5)
    assert response.status_code == 400 and response.json()["Code"] == "NotImplemented"


def test_action_query_parameter_is_dispatched_too(cloud: FakeCloud) -> None:
    response = requests.post(
        "https://ess.aliyuncs.com/?Action=DescribeScalingGroups&RegionId=cn-chengdu", timeout=5
    )
    assert response.status_code == 200 and response.json()["ScalingGroups"] == []


@pytest.mark.parametrize(
    ("host", "query"),
    [
        ("metrics.cn-chengdu", "DescribeMetricList&Namespace=acs_ecs_dashboard&MetricName=m&Length=0"),
        ("metrics.cn-chengdu", "DescribeMetricList&Namespace=acs_ecs_dashboard&MetricName=m&Length=1441"),
        ("metrics.cn-chengdu", "DescribeCustomMetricList&PageNumber=0"),
        ("metrics.cn-chengdu", "DescribeCustomMetricList&PageNumber=-1"),
        ("metrics.cn-chengdu", "DescribeMetricRuleList&Page=0"),
        ("metrics.cn-chengdu", "DescribeAlertLogList&PageSize=0"),
        ("ecs.cn-chengdu", "DescribeInstances&MaxResults=0"),
        ("ecs.cn-chengdu", "DescribeInstances&MaxResults=101"),
        ("ecs.cn-chengdu", "DescribeInstances&PageNumber=0"),
        ("ecs.cn-chengdu", "DescribeInstanceTypes&MaxResults=0"),
        ("ess", "DescribeScalingGroups&PageNumber=0"),
        ("ess", "DescribeScalingGroups&PageSize=0"),
    ],
)
def test_a_page_size_or_number_out_of_range_is_invalid(cloud: FakeCloud, host: str, query: str) -> None:
    response = requests.post(f"https://{host}.aliyuncs.com/?RegionId=cn-chengdu&Action={query}", timeout=5)
    assert (response.status_code, response.json()["Code"]) == (400, "InvalidParameter")


def test_injected_throttling_with_retry_after_raises_throttling_exception(
    ess: EssClient, cloud: FakeCloud
) -> None:
    cloud.inject_fault("DescribeScalingGroups", retry_after_s=1.5)
    with pytest.raises(ThrottlingException) as info:
        ess.describe_scaling_groups(m.DescribeScalingGroupsRequest(region_id=REGION))
    assert (info.value.code, info.value.status_code, info.value.retry_after) == ("Throttling.User", 400, 1500)


def test_injected_throttling_without_retry_after_is_a_client_error(ess: EssClient, cloud: FakeCloud) -> None:
    cloud.inject_fault("DescribeScalingGroups")
    with pytest.raises(ClientException) as info:
        ess.describe_scaling_groups(m.DescribeScalingGroupsRequest(region_id=REGION))
    assert (info.value.code, info.value.status_code) == ("Throttling.User", 400)


def test_injected_server_error_raises_server_exception(ess: EssClient, cloud: FakeCloud) -> None:
    cloud.inject_fault(None, code="ServiceUnavailable", status=503)
    with pytest.raises(ServerException) as info:
        ess.describe_scaling_groups(m.DescribeScalingGroupsRequest(region_id=REGION))
    assert (info.value.code, info.value.status_code) == ("ServiceUnavailable", 503)


def test_fault_count_limits_how_often_it_fires(ess: EssClient, cloud: FakeCloud) -> None:
    cloud.inject_fault("DescribeScalingGroups", count=2)
    outcomes = []
    for _ in range(3):
        try:
            ess.describe_scaling_groups(m.DescribeScalingGroupsRequest(region_id=REGION))
            outcomes.append("ok")
        except ClientException as err:
            outcomes.append(err.code)
    assert outcomes == ["Throttling.User", "Throttling.User", "ok"]


def test_faults_for_other_actions_do_not_fire(ess: EssClient, cloud: FakeCloud) -> None:
    cloud.inject_fault("DescribeMetricList")
    assert (
        ess.describe_scaling_groups(m.DescribeScalingGroupsRequest(region_id=REGION)).body.scaling_groups
        == []
    )


def _random_fault_pattern(seed: int) -> list[bool]:
    with mock_aliyun(seed=seed, start=START) as cloud:
        client = EssClient(sdk_config())
        cloud.inject_fault(None, rate=0.5)
        pattern = []
        for _ in range(20):
            try:
                client.describe_scaling_groups(m.DescribeScalingGroupsRequest(region_id=REGION))
                pattern.append(False)
            except ClientException:
                pattern.append(True)
        return pattern


def test_random_faults_are_reproducible_under_a_seed() -> None:
    first, again, other = _random_fault_pattern(7), _random_fault_pattern(7), _random_fault_pattern(8)
    assert first == again and first != other and 0 < sum(first) < 20


def test_latency_only_fault_answers_normally(cloud: FakeCloud, ess: EssClient) -> None:
    cloud.inject_fault("DescribeScalingGroups", code=None, latency_s=0.01, count=1)
    body = ess.describe_scaling_groups(m.DescribeScalingGroupsRequest(region_id=REGION)).body
    assert body.scaling_groups == [] and cloud.faults.fired[-1]["code"] is None


def test_reset_forgets_everything_but_the_clock(cloud: FakeCloud) -> None:
    cloud.create_group_for_tests(in_service=1)
    cloud.advance(10)
    now = cloud.now()
    cloud.reset()
    assert (cloud.ess.groups, cloud.ecs.instances, cloud.now()) == ({}, {}, now)


def test_mock_aliyun_works_as_a_decorator() -> None:
    @mock_aliyun(start=START)
    def listed() -> list:
        return (
            EssClient(sdk_config())
            .describe_scaling_groups(m.DescribeScalingGroupsRequest(region_id=REGION))
            .body.scaling_groups
        )

    assert listed() == []


def test_the_aliyun_fixture_is_a_fake_cloud(aliyun: FakeCloud) -> None:
    assert isinstance(aliyun, FakeCloud) and aliyun.now().tzinfo is not None
    assert abs((aliyun.now() - datetime.now(UTC)).total_seconds()) < 3600
