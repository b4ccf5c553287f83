"""CmsAdapter through the real CMS SDK: dimension batching, NextToken, Datapoints parsing, publishing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from fleet.cloud import CustomMetric, InvalidRequest, ServerError

from .conftest import ACCOUNT

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)


def _rows_for(dimensions: str, **stats) -> str:
    """One Datapoints row per filter object, as CMS returns it (a JSON string)."""
    rows = []
    for d in json.loads(dimensions):
        iid = d.get("instanceId") or d["dimension"].split("=", 1)[1]
        rows.append({"timestamp": T0_MS, "userId": ACCOUNT, "instanceId": iid, **stats})
    return json.dumps(rows)


def test_metric_last_batches_dimensions_fifty_per_call(stub, clients):
    ids = [f"i-{n:03d}" for n in range(120)]
    stub.on(
        "DescribeMetricLast",
        lambda p: {"Code": "200", "Success": True, "Datapoints": _rows_for(p["Dimensions"], Average=1.0)},
    )
    points = clients.cms.metric_last("acs_ecs_dashboard", "instance_gpu_gpu_usedutilization", ids)
    sizes = [len(json.loads(c.params["Dimensions"])) for c in stub.calls]
    assert sizes == [50, 50, 20]
    assert sorted(p.instance_id for p in points) == ids


def test_ecs_dashboard_filters_by_instance_id_object(stub, clients):
    stub.on("DescribeMetricLast", lambda p: {"Code": "200", "Success": True, "Datapoints": "[]"})
    clients.cms.metric_last("acs_ecs_dashboard", "instance_gpu_gpu_temperature", ["i-1"])
    assert json.loads(stub.calls[0].params["Dimensions"]) == [{"instanceId": "i-1"}]


def test_custom_namespace_filters_by_group_and_dimension_string(stub, clients):
    stub.on("DescribeMetricLast", lambda p: {"Code": "200", "Success": True, "Datapoints": "[]"})
    clients.cms.metric_last(clients.cms.custom_namespace, "vllm_num_requests_waiting", ["i-1"])
    assert stub.calls[0].params["Namespace"] == f"acs_customMetric_{ACCOUNT}"
    assert json.loads(stub.calls[0].params["Dimensions"]) == [{"groupId": "0", "dimension": "instanceId=i-1"}]


def test_value_is_the_requested_statistic_and_stats_keep_all(stub, clients):
    stub.on(
        "DescribeMetricLast",
        lambda p: {
            "Code": "200",
            "Success": True,
            "Datapoints": json.dumps(
                [
                    {
                        "timestamp": T0_MS,
                        "instanceId": "i-1",
                        "gpuId": "00000000:00:07.0",
                        "Average": 70.0,
                        "Maximum": 91.0,
                        "Minimum": 60.0,
                    }
                ]
            ),
        },
    )
    [point] = clients.cms.metric_last(
        "acs_ecs_dashboard", "gpu_gpu_temperature", ["i-1"], statistic="Maximum"
    )
    assert point.value == 91.0
    assert point.stats == {"Average": 70.0, "Maximum": 91.0, "Minimum": 60.0}
    assert point.dimensions["gpuId"] == "00000000:00:07.0"
    assert point.timestamp == T0


def test_custom_rows_with_only_value_use_it(stub, clients):
    row = {"timestamp": T0_MS, "groupId": "0", "dimension": "gpu=1&instanceId=i-9", "value": 12.0}
    stub.on("DescribeMetricLast", {"Code": "200", "Success": True, "Datapoints": json.dumps([row])})
    [point] = clients.cms.metric_last(clients.cms.custom_namespace, "gpu_xid", ["i-9"])
    assert (point.instance_id, point.value, point.dimensions["gpu"]) == ("i-9", 12.0, "1")


def test_metric_list_follows_next_token(stub, clients):
    def page(params):
        token = params.get("NextToken")
        ts = T0_MS if token is None else T0_MS + 15_000
        rows = json.dumps([{"timestamp": ts, "instanceId": "i-1", "Average": 1.0}])
        return {"Code": "200", "Success": True, "Datapoints": rows, "NextToken": None if token else "page-2"}

    stub.on("DescribeMetricList", page)
    points = clients.cms.metric_list(
        "acs_ecs_dashboard", "m", ["i-1"], T0 - timedelta(minutes=5), T0 + timedelta(minutes=1)
    )
    assert [p.timestamp for p in points] == [T0, T0 + timedelta(seconds=15)]
    assert [c.params.get("NextToken") for c in stub.calls] == [None, "page-2"]


def test_metric_list_sends_window_in_epoch_ms_and_period(stub, clients):
    stub.on("DescribeMetricList", {"Code": "200", "Success": True, "Datapoints": "[]"})
    clients.cms.metric_list("acs_ecs_dashboard", "m", ["i-1"], T0, T0 + timedelta(minutes=5), period_s=60)
    params = stub.calls[0].params
    assert (params["StartTime"], params["EndTime"], params["Period"]) == (
        str(T0_MS),
        str(T0_MS + 300_000),
        "60",
    )


def test_no_instances_means_no_calls(stub, clients):
    assert clients.cms.metric_last("acs_ecs_dashboard", "m", []) == []
    assert stub.calls == []


def test_put_custom_metrics_batches_twenty_one_per_call(stub, clients):
    stub.on("PutCustomMetric", {"Code": "200", "Message": ""})
    metrics = [
        CustomMetric("vllm_num_requests_waiting", {"instanceId": f"i-{n}"}, float(n), T0) for n in range(45)
    ]
    clients.cms.put_custom_metrics(metrics)
    counts = [len({k.split(".")[1] for k in c.params if k.startswith("MetricList.")}) for c in stub.calls]
    assert counts == [21, 21, 3]


def test_put_custom_metric_wire_fields(stub, clients):
    stub.on("PutCustomMetric", {"Code": "200", "Message": ""})
    clients.cms.put_custom_metrics([CustomMetric("vllm_ttft_p99_ms", {"instanceId": "i-1"}, 812.5, T0)])
    p = stub.calls[0].params
    assert p["MetricList.1.MetricName"] == "vllm_ttft_p99_ms"
    assert json.loads(p["MetricList.1.Dimensions"]) == {"instanceId": "i-1"}
    assert json.loads(p["MetricList.1.Values"]) == {"value": 812.5}
    assert (p["MetricList.1.Type"], p["MetricList.1.GroupId"], p["MetricList.1.Time"]) == (
        "0",
        "0",
        str(T0_MS),
    )


def test_success_false_on_http_200_is_an_error(stub, clients):
    stub.on("DescribeMetricLast", {"Code": "400", "Success": False, "Message": "bad Dimensions"})
    with pytest.raises(InvalidRequest, match="bad Dimensions") as info:
        clients.cms.metric_last("acs_ecs_dashboard", "m", ["i-1"])
    assert info.value.action == "DescribeMetricLast"
    assert len(stub.calls) == 1  # parameter errors are not retried


def test_success_false_with_server_code_is_retried(stub, clients):
    stub.sequence(
        "DescribeMetricLast",
        {"Code": "500", "Success": False, "Message": "internal"},
        {"Code": "200", "Success": True, "Datapoints": "[]"},
    )
    assert clients.cms.metric_last("acs_ecs_dashboard", "m", ["i-1"]) == []
    assert len(stub.calls) == 2


def test_put_custom_metric_server_error_surfaces_after_retries(stub, clients, fast_retry):
    stub.on("PutCustomMetric", {"Code": "500", "Message": "down"})
    with pytest.raises(ServerError):
        clients.cms.put_custom_metrics([CustomMetric("m", {"instanceId": "i-1"}, 1.0, T0)])
    assert len(stub.calls) == fast_retry.attempts
