"""CMS through the real SDK client against mock_aliyun: custom metrics, metric queries, rules and alerts."""

from __future__ import annotations

import json

import pytest
import requests
from alibabacloud_cms20190101 import models as cm
from alibabacloud_cms20190101.client import Client as CmsClient
from alibabacloud_tea_openapi.exceptions import ClientException

from fleet.testing import FakeCloud

from .conftest import START

NS = "acs_ecs_dashboard"
TEMP = "instance_gpu_gpu_temperature"
START_MS = int(START.timestamp() * 1000)


def put_custom(
    cms: CmsClient, name: str, dims: dict[str, str], value: float, ts_ms: int | None = None
) -> None:
    cms.put_custom_metric(
        cm.PutCustomMetricRequest(
            metric_list=[
                cm.PutCustomMetricRequestMetricList(
                    metric_name=name,
                    group_id="0",
                    dimensions=json.dumps(dims),
                    type="0",
                    values=json.dumps({"value": value}),
                    time=None if ts_ms is None else str(ts_ms),
                )
            ]
        )
    )


def points(body) -> list[dict]:
    assert isinstance(body.datapoints, str)  # a JSON string on the wire, not a list
    return json.loads(body.datapoints)


def test_custom_metric_reads_back_under_the_account_namespace(cms: CmsClient, cloud: FakeCloud) -> None:
    put_custom(cms, "vllm_num_requests_waiting", {"instanceId": "i-1"}, 7)
    body = cms.describe_metric_last(
        cm.DescribeMetricLastRequest(
            namespace="acs_customMetric_1234567890",
            metric_name="vllm_num_requests_waiting",
            dimensions=json.dumps([{"groupId": "0", "dimension": "instanceId=i-1"}]),
        )
    ).body
    rows = points(body)
    assert [(r["dimension"], r["groupId"], r["Average"]) for r in rows] == [("instanceId=i-1", "0", 7.0)]


def test_custom_dimensions_are_joined_in_key_order(cms: CmsClient, cloud: FakeCloud) -> None:
    put_custom(cms, "gpu_xid", {"instanceId": "i-1", "gpu": "0"}, 79)
    body = cms.describe_metric_last(
        cm.DescribeMetricLastRequest(namespace=cloud.custom_namespace, metric_name="gpu_xid")
    ).body
    assert [r["dimension"] for r in points(body)] == ["gpu=0&instanceId=i-1"]


def test_more_than_21_custom_metrics_per_call_is_invalid(cms: CmsClient) -> None:
    items = [
        cm.PutCustomMetricRequestMetricList(
            metric_name="m", group_id="0", dimensions="{}", type="0", values='{"value": 1}'
        )
        for _ in range(22)
    ]
    with pytest.raises(ClientException) as info:
        cms.put_custom_metric(cm.PutCustomMetricRequest(metric_list=items))
    assert (info.value.code, info.value.status_code) == ("InvalidParameter", 400)


@pytest.mark.parametrize(
    "values",
    ['{"value": NaN}', '{"value": Infinity}', '{"value": -Infinity}', '{"value": 1e999}', '{"value": true}'],
)
def test_a_custom_metric_value_that_is_not_a_finite_json_number_is_invalid(
    cms: CmsClient, cloud: FakeCloud, values: str
) -> None:
    item = cm.PutCustomMetricRequestMetricList(
        metric_name="m", group_id="0", dimensions='{"instanceId": "i-1"}', type="0", values=values
    )
    with pytest.raises(ClientException) as info:
        cms.put_custom_metric(cm.PutCustomMetricRequest(metric_list=[item]))
    body = cms.describe_metric_list(
        cm.DescribeMetricListRequest(namespace=cloud.custom_namespace, metric_name="m")
    ).body
    assert (info.value.code, info.value.status_code) == ("InvalidParameter", 400) and points(body) == []


@pytest.mark.parametrize(
    ("value", "ts"), [("nan", ""), ("inf", ""), ("abc", ""), ("1", "abc"), ("1", "1e999")]
)
def test_hybrid_data_with_a_value_or_time_that_is_not_a_finite_number_is_invalid(
    cloud: FakeCloud, value: str, ts: str
) -> None:
    query = f"Namespace=ns&MetricList.1.Name=q&MetricList.1.Value={value}&MetricList.1.TS={ts}"
    response = requests.post(
        f"https://metrics.cn-chengdu.aliyuncs.com/?Action=PutHybridMonitorMetricData&{query}", timeout=5
    )
    assert (response.status_code, response.json()["Code"]) == (400, "InvalidParameter")
    assert cloud.cms.state()["series"] == []


def test_custom_metric_list_names_each_series(cms: CmsClient, cloud: FakeCloud) -> None:
    put_custom(cms, "vllm_ttft_p99_ms", {"instanceId": "i-1"}, 200)
    body = cms.describe_custom_metric_list(
        cm.DescribeCustomMetricListRequest(metric_name="vllm_ttft_p99_ms")
    ).body
    result = json.loads(body.result)
    assert [(x["MetricName"], x["Dimension"]) for x in result["MetricList"]] == [
        ("vllm_ttft_p99_ms", "instanceId=i-1")
    ]


def test_hybrid_monitor_data_reads_back_by_namespace(cms: CmsClient, cloud: FakeCloud) -> None:
    cms.put_hybrid_monitor_metric_data(
        cm.PutHybridMonitorMetricDataRequest(
            namespace="fleet-ns",
            metric_list=[
                cm.PutHybridMonitorMetricDataRequestMetricList(
                    name="queue",
                    value=4.0,
                    ts=START_MS,
                    labels=[
                        cm.PutHybridMonitorMetricDataRequestMetricListLabels(key="instanceId", value="i-9")
                    ],
                )
            ],
        )
    )
    rows = points(
        cms.describe_metric_last(cm.DescribeMetricLastRequest(namespace="fleet-ns", metric_name="queue")).body
    )
    assert [(r["instanceId"], r["Average"], r["timestamp"]) for r in rows] == [("i-9", 4.0, START_MS)]


def test_published_gpu_metric_rows_carry_instance_and_gpu_ids(cms: CmsClient, cloud: FakeCloud) -> None:
    cloud.publish_metric(NS, "gpu_gpu_temperature", {"instanceId": "i-1", "gpuId": "00000000:00:07.0"}, 80)
    rows = points(
        cms.describe_metric_last(
            cm.DescribeMetricLastRequest(namespace=NS, metric_name="gpu_gpu_temperature")
        ).body
    )
    assert (rows[0]["instanceId"], rows[0]["gpuId"], rows[0]["userId"]) == (
        "i-1",
        "00000000:00:07.0",
        "1234567890",
    )


def test_dimension_filter_as_an_object(cms: CmsClient, cloud: FakeCloud) -> None:
    for iid in ("i-1", "i-2"):
        cloud.publish_metric(NS, TEMP, {"instanceId": iid}, 70)
    rows = points(
        cms.describe_metric_list(
            cm.DescribeMetricListRequest(
                namespace=NS, metric_name=TEMP, dimensions=json.dumps({"instanceId": "i-2"})
            )
        ).body
    )
    assert [r["instanceId"] for r in rows] == ["i-2"]


def test_dimension_filter_as_a_list(cms: CmsClient, cloud: FakeCloud) -> None:
    for iid in ("i-1", "i-2", "i-3"):
        cloud.publish_metric(NS, TEMP, {"instanceId": iid}, 70)
    rows = points(
        cms.describe_metric_list(
            cm.DescribeMetricListRequest(
                namespace=NS,
                metric_name=TEMP,
                dimensions=json.dumps([{"instanceId": "i-1"}, {"instanceId": "i-3"}]),
            )
        ).body
    )
    assert sorted(r["instanceId"] for r in rows) == ["i-1", "i-3"]


def test_period_aggregates_average_minimum_maximum(cms: CmsClient, cloud: FakeCloud) -> None:
    for i, value in enumerate([60.0, 70.0, 80.0, 90.0]):  # four 15 s points in one minute
        cloud.publish_metric(NS, TEMP, {"instanceId": "i-1"}, value, START_MS + i * 15000)
    cloud.advance(120)
    rows = points(
        cms.describe_metric_list(
            cm.DescribeMetricListRequest(
                namespace=NS,
                metric_name=TEMP,
                period="60",
                start_time=str(START_MS - 1),
                end_time=str(START_MS + 60000),
            )
        ).body
    )
    assert [(r["timestamp"], r["Average"], r["Minimum"], r["Maximum"]) for r in rows] == [
        (START_MS, 75.0, 60.0, 90.0)
    ]


def test_window_is_left_open_and_accepts_date_strings(cms: CmsClient, cloud: FakeCloud) -> None:
    for i in range(3):
        cloud.publish_metric(NS, TEMP, {"instanceId": "i-1"}, float(i), START_MS + i * 60000)
    cloud.advance(600)
    rows = points(
        cms.describe_metric_list(
            cm.DescribeMetricListRequest(
                namespace=NS,
                metric_name=TEMP,
                start_time="2026-03-02 00:00:00",
                end_time="2026-03-02 00:02:00",
            )
        ).body
    )
    assert [r["Average"] for r in rows] == [1.0, 2.0]


def test_length_and_next_token_page_through_the_points(cms: CmsClient, cloud: FakeCloud) -> None:
    for i in range(5):
        cloud.publish_metric(NS, TEMP, {"instanceId": "i-1"}, float(i), START_MS + i * 15000)
    cloud.advance(300)
    seen, token = [], None
    while True:
        body = cms.describe_metric_list(
            cm.DescribeMetricListRequest(
                namespace=NS, metric_name=TEMP, start_time=str(START_MS - 1), length="2", next_token=token
            )
        ).body
        seen.extend(r["Average"] for r in points(body))
        token = body.next_token
        if not token:
            break
    assert seen == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_metric_last_answers_the_latest_point_per_series(cms: CmsClient, cloud: FakeCloud) -> None:
    cloud.publish_metric(NS, TEMP, {"instanceId": "i-1"}, 70)
    cloud.advance(15)
    cloud.publish_metric(NS, TEMP, {"instanceId": "i-1"}, 85)
    rows = points(cms.describe_metric_last(cm.DescribeMetricLastRequest(namespace=NS, metric_name=TEMP)).body)
    assert [r["Maximum"] for r in rows] == [85.0]


def test_metric_data_aggregates_the_window(cms: CmsClient, cloud: FakeCloud) -> None:
    cloud.publish_metric(NS, TEMP, {"instanceId": "i-1"}, 60, START_MS - 30000)
    cloud.publish_metric(NS, TEMP, {"instanceId": "i-1"}, 80, START_MS - 15000)
    rows = points(
        cms.describe_metric_data(
            cm.DescribeMetricDataRequest(namespace=NS, metric_name=TEMP, period="60")
        ).body
    )
    assert [r["Average"] for r in rows] == [70.0]


def test_points_older_than_retention_are_dropped(cloud: FakeCloud, cms: CmsClient) -> None:
    cloud.publish_metric(NS, TEMP, {"instanceId": "i-1"}, 50)
    cloud.advance(8 * 86400)
    cloud.publish_metric(NS, TEMP, {"instanceId": "i-1"}, 60)
    series = next(iter(cloud.cms.series[(NS, TEMP)].values()))
    assert series.values == [60.0]


def test_missing_namespace_is_missing_parameter(cms: CmsClient) -> None:
    with pytest.raises(ClientException) as info:
        cms.describe_metric_list(cm.DescribeMetricListRequest(metric_name=TEMP))
    assert info.value.code == "MissingParameter.Namespace"


def rule_request(rule_id: str, threshold: float = 85, times: int = 2) -> cm.PutResourceMetricRuleRequest:
    return cm.PutResourceMetricRuleRequest(
        rule_id=rule_id,
        rule_name="gpu-hot",
        namespace=NS,
        metric_name=TEMP,
        contact_groups="ops",
        resources=json.dumps([{"instanceId": "i-1"}]),
        period=60,
        silence_time=3600,
        webhook="http://127.0.0.1:9/hook",
        escalations=cm.PutResourceMetricRuleRequestEscalations(
            critical=cm.PutResourceMetricRuleRequestEscalationsCritical(
                statistics="Maximum",
                comparison_operator="GreaterThanOrEqualToThreshold",
                threshold=str(threshold),
                times=times,
            )
        ),
    )


def test_metric_rules_are_upserted_listed_and_deleted(cms: CmsClient) -> None:
    cms.put_resource_metric_rule(rule_request("r-1", threshold=85))
    cms.put_resource_metric_rule(rule_request("r-1", threshold=90))
    listed = cms.describe_metric_rule_list(cm.DescribeMetricRuleListRequest(rule_ids="r-1")).body
    cms.delete_metric_rules(cm.DeleteMetricRulesRequest(id=["r-1"]))
    after = cms.describe_metric_rule_list(cm.DescribeMetricRuleListRequest()).body
    rules = listed.alarms.alarm
    assert (len(rules), rules[0].escalations.critical.threshold, listed.total) == (1, "90", "1")
    assert after.alarms.alarm == []


def test_rule_without_escalations_is_refused(cms: CmsClient) -> None:
    request = rule_request("r-2")
    request.escalations = None
    with pytest.raises(ClientException) as info:
        cms.put_resource_metric_rule(request)
    assert info.value.code == "MissingParameter.Escalations"


@pytest.mark.parametrize("field", ["period", "silence_time", "interval"])
def test_a_rule_period_of_zero_is_refused_not_read_as_the_default(cms: CmsClient, field: str) -> None:
    request = rule_request("r-3")
    setattr(request, field, 0)
    with pytest.raises(ClientException) as info:
        cms.put_resource_metric_rule(request)
    assert info.value.code == "InvalidParameter"
    assert cms.describe_metric_rule_list(cm.DescribeMetricRuleListRequest()).body.alarms.alarm == []


def test_rule_alerts_after_times_consecutive_breaches(cms: CmsClient, cloud: FakeCloud) -> None:
    cms.put_resource_metric_rule(rule_request("r-1", threshold=85, times=2))
    for _ in range(3):
        cloud.publish_metric(NS, TEMP, {"instanceId": "i-1"}, 92)
        cloud.advance(60)
    logs = cms.describe_alert_log_list(cm.DescribeAlertLogListRequest(rule_id="r-1")).body.alert_log_list
    state = cms.describe_metric_rule_list(cm.DescribeMetricRuleListRequest(rule_ids="r-1")).body.alarms.alarm[
        0
    ]
    assert [(x.level, x.instance_id) for x in logs] == [("CRITICAL", "i-1")] and state.alert_state == "ALARM"
    assert cloud.cms.webhook_calls[0]["url"] == "http://127.0.0.1:9/hook"


def test_rule_below_threshold_stays_ok(cms: CmsClient, cloud: FakeCloud) -> None:
    cms.put_resource_metric_rule(rule_request("r-1", threshold=85, times=1))
    cloud.publish_metric(NS, TEMP, {"instanceId": "i-1"}, 60)
    cloud.advance(60)
    state = cms.describe_metric_rule_list(cm.DescribeMetricRuleListRequest(rule_ids="r-1")).body.alarms.alarm[
        0
    ]
    assert state.alert_state == "OK" and cloud.cms.alert_logs == []


def test_instance_gpu_metric_summarizes_the_gpus(cms: CmsClient, cloud: FakeCloud) -> None:
    cloud.publish_gpu_metrics(
        "i-1", "gpu_usedutilization", {"00000000:00:07.0": 80.0, "00000000:00:08.0": 40.0}
    )
    instance = points(
        cms.describe_metric_last(
            cm.DescribeMetricLastRequest(namespace=NS, metric_name="instance_gpu_gpu_usedutilization")
        ).body
    )
    per_gpu = points(
        cms.describe_metric_last(
            cm.DescribeMetricLastRequest(
                namespace=NS,
                metric_name="gpu_gpu_usedutilization",
                dimensions=json.dumps({"instanceId": "i-1"}),
            )
        ).body
    )
    assert [(r["Average"], r["Minimum"], r["Maximum"]) for r in instance] == [(60.0, 40.0, 80.0)]
    assert sorted((r["gpuId"], r["Average"]) for r in per_gpu) == [
        ("00000000:00:07.0", 80.0),
        ("00000000:00:08.0", 40.0),
    ]


def test_period_aggregate_keeps_the_extremes_of_summarized_points(cms: CmsClient, cloud: FakeCloud) -> None:
    cloud.publish_metric(NS, TEMP, {"instanceId": "i-1"}, 70, START_MS, minimum=65, maximum=75)
    cloud.publish_metric(NS, TEMP, {"instanceId": "i-1"}, 80, START_MS + 15000, minimum=60, maximum=95)
    cloud.advance(60)
    rows = points(
        cms.describe_metric_list(
            cm.DescribeMetricListRequest(
                namespace=NS, metric_name=TEMP, period="60", start_time=str(START_MS - 1)
            )
        ).body
    )
    assert [(r["Average"], r["Minimum"], r["Maximum"]) for r in rows] == [(75.0, 60.0, 95.0)]
