"""Answers that are legal HTTP but not what the API defines, through the real SDKs: each becomes one
CloudError naming the Action (never an AttributeError or ValueError from deep in a conversion), and a list
that cannot be trusted whole is never returned as the whole list."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from fleet.cloud import CloudError, IncompleteListing, MalformedAnswer

from .conftest import Raw, reply

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)


def _metric_list(clients):
    return clients.cms.metric_list("acs_ecs_dashboard", "m", ["i-1"], T0 - timedelta(minutes=5), T0)


def _rows(*rows: dict) -> dict:
    return {"Code": "200", "Success": True, "Datapoints": json.dumps(list(rows))}


# -- bodies that are JSON but not an object ---------------------------------------------------------------


@pytest.mark.parametrize("body", ["null", '"maintenance"', "42"])
def test_a_200_answer_whose_body_is_not_an_object_is_a_malformed_answer(stub, clients, body):
    stub.on("DescribeScalingInstances", reply(200, Raw(body)))
    stub.on("DescribeMetricList", reply(200, Raw(body)))
    with pytest.raises(MalformedAnswer) as ess:
        clients.ess.describe_scaling_instances("asg-1")
    with pytest.raises(MalformedAnswer) as cms:
        _metric_list(clients)
    assert ess.value.action == "DescribeScalingInstances" and cms.value.action == "DescribeMetricList"
    assert "not a JSON object" in str(ess.value)


def test_a_malformed_answer_is_read_again_before_it_fails_the_read(stub, clients):
    stub.sequence(
        "DescribeScalingInstances", reply(200, Raw("null")), {"ScalingInstances": [], "TotalCount": 0}
    )
    assert clients.ess.describe_scaling_instances("asg-1") == []
    assert len(stub.calls_of("DescribeScalingInstances")) == 2


# -- ESS lists --------------------------------------------------------------------------------------------


def test_an_ess_list_answer_with_only_a_request_id_is_not_an_empty_group(stub, clients):
    stub.on("DescribeScalingInstances", {"RequestId": "R-only"})
    with pytest.raises(MalformedAnswer) as info:
        clients.ess.describe_scaling_instances("asg-1")
    assert "neither ScalingInstances nor TotalCount" in str(info.value)


def test_an_ess_list_answer_with_an_empty_list_and_its_count_is_an_empty_group(stub, clients):
    stub.on("DescribeScalingInstances", {"ScalingInstances": [], "TotalCount": 0})
    assert clients.ess.describe_scaling_instances("asg-1") == []


def _page_of(ids: list[str], total: int):
    def page(params):
        number, size = int(params["PageNumber"]), int(params["PageSize"])
        rows = ids[(number - 1) * size : number * size]
        return {
            "ScalingInstances": [{"InstanceId": i, "LifecycleState": "InService"} for i in rows],
            "TotalCount": total,
        }

    return page


def test_an_instance_on_two_pages_while_the_count_held_reads_the_list_again(stub, clients):
    # between page 1 and page 2, i-060 left and i-000 joined ahead of the others: TotalCount stays 60,
    # i-050 moves onto page 2 and is listed twice, and i-000 is never seen
    before = [f"i-{n:03d}" for n in range(1, 61)]
    after = [f"i-{n:03d}" for n in range(60)]
    answers = iter([_page_of(before, 60), _page_of(after, 60), _page_of(after, 60), _page_of(after, 60)])
    stub.on("DescribeScalingInstances", lambda params: next(answers)(params))
    found = clients.ess.describe_scaling_instances("asg-1")
    assert [i.instance_id for i in found] == after
    assert len(stub.calls_of("DescribeScalingInstances")) == 4


def test_an_instance_listed_twice_on_every_walk_is_an_incomplete_listing(stub, clients):
    before = [f"i-{n:03d}" for n in range(1, 61)]
    after = [f"i-{n:03d}" for n in range(60)]
    answers = iter([_page_of(before, 60), _page_of(after, 60)] * 2)
    stub.on("DescribeScalingInstances", lambda params: next(answers)(params))
    with pytest.raises(IncompleteListing) as info:
        clients.ess.describe_scaling_instances("asg-1")
    assert "listed twice: i-050" in str(info.value)


@pytest.mark.parametrize(
    ("row", "named"),
    [
        ({"LifecycleState": "InService"}, "InstanceId"),
        ({"InstanceId": "i-1", "LifecycleState": "InService", "CreatedTime": "last tuesday"}, "last tuesday"),
        ({"InstanceId": "i-1", "LifecycleState": "InService", "LoadBalancerWeight": "heavy"}, "heavy"),
    ],
)
def test_an_instance_row_that_does_not_parse_is_a_malformed_answer(stub, clients, row, named):
    stub.on("DescribeScalingInstances", {"ScalingInstances": [row], "TotalCount": 1})
    with pytest.raises(MalformedAnswer) as info:
        clients.ess.describe_scaling_instances("asg-1")
    assert info.value.action == "DescribeScalingInstances" and named in str(info.value)


def test_a_group_whose_capacity_does_not_parse_is_a_malformed_answer(stub, clients):
    group = {"ScalingGroupId": "asg-1", "LifecycleState": "Active", "MaxSize": 4, "TotalCapacity": "many"}
    stub.on("DescribeScalingGroups", {"ScalingGroups": [group], "TotalCount": 1})
    with pytest.raises(MalformedAnswer) as info:
        clients.ess.describe_scaling_groups(group_ids=["asg-1"])
    assert "many" in str(info.value)


def test_an_activity_in_progress_with_an_unreadable_start_is_a_malformed_answer(stub, clients):
    act = {"ScalingActivityId": "asa-1", "StatusCode": "InProgress", "StartTime": "soon"}
    stub.on("DescribeScalingActivities", {"ScalingActivities": [act], "TotalCount": 1})
    with pytest.raises(MalformedAnswer):
        clients.ess.describe_scaling_activities("asg-1", status_code="InProgress")


# -- CloudMonitor datapoints ------------------------------------------------------------------------------


@pytest.mark.parametrize("timestamp", ["yesterday", 10**20, -(10**20), True])
def test_a_datapoint_with_an_unreadable_timestamp_is_invalid_datapoints(stub, clients, timestamp):
    stub.on("DescribeMetricList", _rows({"timestamp": timestamp, "instanceId": "i-1", "Average": 1.0}))
    with pytest.raises(CloudError) as info:
        _metric_list(clients)
    assert info.value.code == "InvalidDatapoints" and info.value.action == "DescribeMetricList"


def test_statistics_sent_as_numeric_strings_are_read_as_numbers(stub, clients):
    row = {"timestamp": T0_MS, "userId": "1234567890", "instanceId": "i-1", "gpuId": "0", "Average": "12.5"}
    stub.on("DescribeMetricList", _rows(row, {"timestamp": T0_MS, "instanceId": "i-2", "value": " 3 "}))
    first, second = _metric_list(clients)
    assert (first.value, first.stats) == (12.5, {"Average": 12.5})
    # dimensions stay strings, even the numeric ones
    assert first.dimensions == {"userId": "1234567890", "instanceId": "i-1", "gpuId": "0"}
    assert second.value == 3.0


@pytest.mark.parametrize("text", ["high", "", "1,5"])
def test_a_statistic_that_is_no_number_is_a_missing_value(stub, clients, text):
    stub.on("DescribeMetricList", _rows({"timestamp": T0_MS, "instanceId": "i-1", "Average": text}))
    [point] = _metric_list(clients)
    assert point.value is None and "Average" not in point.dimensions


def test_an_empty_string_datapoints_is_no_points(stub, clients):
    stub.on("DescribeMetricList", {"Code": "200", "Success": True, "Datapoints": ""})
    assert _metric_list(clients) == []


# -- NextToken walks that never end ---------------------------------------------------------------------


def test_a_next_token_that_comes_back_again_fails_the_read_rather_than_loop(stub, clients):
    row = {"timestamp": T0_MS, "instanceId": "i-1", "Average": 1.0}
    tokens = iter(["a", "b", "a"])
    stub.on("DescribeMetricList", lambda params: {**_rows(row), "NextToken": next(tokens)})
    with pytest.raises(IncompleteListing) as info:
        _metric_list(clients)
    assert "NextToken 'a' came back again after 3 pages" in str(info.value)


def test_a_fresh_next_token_on_empty_pages_for_ever_ends_the_read(stub, clients):
    tokens = (f"t-{n}" for n in range(10_000))
    stub.on("DescribeMetricList", lambda params: {**_rows(), "NextToken": next(tokens)})
    with pytest.raises(IncompleteListing) as info:
        _metric_list(clients)
    assert "5 pages running carried no rows" in str(info.value)
    assert len(stub.calls_of("DescribeMetricList")) == 5


def test_a_fresh_next_token_on_full_pages_for_ever_ends_the_read(stub, clients, monkeypatch):
    import fleet.cloud.paging as paging

    monkeypatch.setattr(paging, "MAX_PAGES", 30)
    row = {"timestamp": T0_MS, "instanceId": "i-1", "Average": 1.0}
    tokens = (f"t-{n}" for n in range(10_000))
    stub.on("DescribeMetricList", lambda params: {**_rows(row), "NextToken": next(tokens)})
    with pytest.raises(IncompleteListing):
        _metric_list(clients)
    assert len(stub.calls_of("DescribeMetricList")) == 30


def test_one_empty_last_page_with_a_token_is_the_end_of_a_read(stub, clients):
    row = {"timestamp": T0_MS, "instanceId": "i-1", "Average": 1.0}
    stub.sequence(
        "DescribeMetricList", {**_rows(row), "NextToken": "t-1"}, {**_rows(), "NextToken": "t-2"}, _rows()
    )
    assert [p.value for p in _metric_list(clients)] == [1.0]


def test_an_ecs_next_token_that_comes_back_again_fails_the_read(stub, clients):
    inst = {"InstanceId": "i-1", "Status": "Running", "InstanceType": "ecs.gn7i-c8g1.2xlarge"}
    stub.on("DescribeInstances", {"Instances": {"Instance": [inst]}, "NextToken": "same"})
    with pytest.raises(IncompleteListing):
        clients.ecs.describe_instances(["i-1"])


# -- ECS ------------------------------------------------------------------------------------------------


def _full_status(**event_fields) -> dict:
    event = {
        "EventId": "e-1",
        "EventType": {"Code": 1, "Name": "SystemMaintenance.Reboot"},
        "EventCycleStatus": {"Code": 24, "Name": "Scheduled"},
        "NotBefore": "2026-12-08T02:00:00Z",
        **event_fields,
    }
    row = {
        "InstanceId": "i-1",
        "Status": {"Code": 1, "Name": "Running"},
        "HealthStatus": {"Code": 0, "Name": "Ok"},
        "ScheduledSystemEventSet": {"ScheduledSystemEventType": [event]},
    }
    return {"InstanceFullStatusSet": {"InstanceFullStatusType": [row]}, "TotalCount": 1}


def test_an_event_of_a_type_never_seen_is_read_as_it_is(stub, clients):
    new = {"EventType": {"Code": 99, "Name": "SystemUpgrade.Migrate"}}
    stub.on("DescribeInstancesFullStatus", _full_status(**new))
    [health] = clients.ecs.describe_full_status(["i-1"])
    assert [e.code for e in health.events] == ["SystemUpgrade.Migrate"]


def test_an_event_whose_not_before_does_not_parse_is_a_malformed_answer(stub, clients):
    stub.on("DescribeInstancesFullStatus", _full_status(NotBefore="after the weekend"))
    with pytest.raises(MalformedAnswer) as info:
        clients.ecs.describe_full_status(["i-1"])
    assert info.value.action == "DescribeInstancesFullStatus" and "after the weekend" in str(info.value)


def test_an_instance_without_its_id_is_a_malformed_answer(stub, clients):
    stub.on("DescribeInstances", {"Instances": {"Instance": [{"Status": "Running"}]}})
    with pytest.raises(MalformedAnswer):
        clients.ecs.describe_instances(["i-1"])


def test_a_total_count_that_is_no_number_is_a_malformed_answer(stub, clients):
    row = {"InstanceId": "i-1", "LifecycleState": "InService"}
    stub.on("DescribeScalingInstances", {"ScalingInstances": [row], "TotalCount": "lots"})
    with pytest.raises(MalformedAnswer) as info:
        clients.ess.describe_scaling_instances("asg-1")
    assert "'lots' is not a whole number" in str(info.value)


def test_a_total_count_sent_as_text_is_read_as_its_number(stub, clients):
    rows = [{"InstanceId": f"i-{n}", "LifecycleState": "InService"} for n in range(2)]
    stub.on("DescribeScalingInstances", {"ScalingInstances": rows, "TotalCount": "2"})
    assert [i.instance_id for i in clients.ess.describe_scaling_instances("asg-1")] == ["i-0", "i-1"]


def test_one_page_listing_an_instance_twice_is_read_as_it_is(stub, clients):
    # no list moved under a one-page walk: the snapshot counts the instance once (test_hostile_input.py)
    rows = [{"InstanceId": i, "LifecycleState": "InService"} for i in ("i-1", "i-1", "i-2")]
    stub.on("DescribeScalingInstances", {"ScalingInstances": rows, "TotalCount": 3})
    assert [i.instance_id for i in clients.ess.describe_scaling_instances("asg-1")] == ["i-1", "i-1", "i-2"]
    assert len(stub.calls_of("DescribeScalingInstances")) == 1


def test_a_page_of_a_longer_walk_listing_an_instance_twice_is_read_as_it_is(stub, clients):
    # only an id on two pages says the list moved; one page of a two-page walk listing an id twice was read
    # as a moving list, listed again and refused
    ids = [f"i-{n:03d}" for n in range(60)]
    ids.insert(10, "i-005")

    def page(params):
        number, size = int(params["PageNumber"]), int(params["PageSize"])
        rows = ids[(number - 1) * size : number * size]
        return {
            "ScalingInstances": [{"InstanceId": i, "LifecycleState": "InService"} for i in rows],
            "TotalCount": len(ids),
        }

    stub.on("DescribeScalingInstances", page)
    assert [i.instance_id for i in clients.ess.describe_scaling_instances("asg-1")] == ids
    assert len(stub.calls_of("DescribeScalingInstances")) == 2


def test_a_metric_list_over_days_may_take_more_pages_than_a_tick_would(stub, clients, monkeypatch):
    import fleet.cloud.paging as paging

    monkeypatch.setattr(paging, "MAX_PAGES", 5)
    row = {"timestamp": T0_MS, "instanceId": "i-1", "Average": 1.0}
    pages = iter([{**_rows(row), "NextToken": f"t-{n}"} for n in range(11)] + [_rows(row)])
    stub.on("DescribeMetricList", lambda params: next(pages))
    # one instance over 7 days at 15 s holds up to 16 x 40,321 rows: far more than 5 pages of 1,440
    points = clients.cms.metric_list("acs_ecs_dashboard", "m", ["i-1"], T0 - timedelta(days=7), T0)
    assert len(points) == 12
