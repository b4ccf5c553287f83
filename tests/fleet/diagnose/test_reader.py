"""The cloud reader through the real SDK adapters against the in-process fake cloud."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fleet.cloud.clients import make_clients
from fleet.cloud.retry import RetryPolicy
from fleet.cloud.types import MetricPoint
from fleet.diagnose.reader import combine_points, context_for, read_window
from fleet.diagnose.rules import diagnose, parse_scale_out
from fleet.testing import mock_aliyun
from policies.spec import GroupSpec

ACCOUNT = "1234567890"
KEYS = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "k", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "s"}
START = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)


def clients():
    retry = RetryPolicy(attempts=2, initial_s=0.0, max_s=0.0, sleep=lambda s: None)
    return make_clients("cn-hangzhou", ACCOUNT, env=KEYS, retry=retry)


def spec(**extra) -> GroupSpec:
    return GroupSpec.model_validate(
        {
            "name": "chat",
            "scaling_group_name": "chat-prod",
            "min_size": 1,
            "max_size": 8,
            "cold_start_s": 240,
            "scale_out": [
                {"metric": "ttft_p99_ms", "above": 1500, "for": "60s"},
                {"metric": "tpot_p99_ms", "above": 80, "for": "60s"},
            ],
            **extra,
        }
    )


def test_context_takes_the_slos_from_the_scale_out_rules():
    ctx = context_for(spec())
    assert (ctx.slo_ttft_p99_ms, ctx.slo_tpot_p99_ms, ctx.cold_start_s) == (1500.0, 80.0, 240.0)


def test_context_takes_the_slos_the_predictive_section_declares_over_the_rules():
    # the policy sizes for these (GroupSpec.slo_ttft_p99_ms); the rules are its safety net
    ctx = context_for(
        spec(
            predictive={"mode": "forecast-only", "capacity_rps": 1.0, "ttft_p99_ms": 3000, "tpot_p99_ms": 120}
        )
    )
    assert (ctx.slo_ttft_p99_ms, ctx.slo_tpot_p99_ms) == (3000.0, 120.0)
    ctx = context_for(spec(predictive={"mode": "forecast-only", "capacity_rps": 1.0, "ttft_p99_ms": 3000}))
    assert (ctx.slo_ttft_p99_ms, ctx.slo_tpot_p99_ms) == (3000.0, 80.0)  # TPOT still from its rule


def test_context_sizes_the_model_the_groups_capacity_model_sizes():
    """Without --model a config's group names its model where its capacity model reads it: the group's
    ``model``, else the predictive section's; --model wins."""
    pred = {"mode": "forecast-only", "model": "Qwen2.5-7B", "instance_type": "ecs.gn7i-c16g1.4xlarge"}
    assert context_for(spec(predictive=pred)).model == "Qwen2.5-7B"
    assert context_for(spec(model="Qwen2.5-14B", predictive=pred)).model == "Qwen2.5-14B"
    assert context_for(spec(predictive=pred), model="Qwen2.5-32B").model == "Qwen2.5-32B"


def test_per_gpu_rows_reduce_to_the_worst_gpu_and_or_of_throttle_bits():
    t = START
    rows = [
        MetricPoint("ns", "m", "i-1", t, 0x20, {"gpu": "0"}, {}),
        MetricPoint("ns", "m", "i-1", t, 0x4, {"gpu": "1"}, {}),
    ]
    assert combine_points("gpu_throttle_reasons", rows) == {"i-1": [(t, float(0x24))]}
    assert combine_points("gpu_temperature_c", rows) == {"i-1": [(t, float(0x20))]}


def test_scale_out_is_parsed_from_the_activity_cause():
    assert parse_scale_out('... changing the Total Capacity from "2" to "5".') == (2, 5)
    assert parse_scale_out('... from "5" to "2".') is None
    assert parse_scale_out(None) is None


def test_window_holds_what_the_instances_published_and_the_instance_type():
    with mock_aliyun(account_id=ACCOUNT, start=START) as cloud:
        gid = cloud.create_group_for_tests(
            name="chat-prod",
            max_size=8,
            desired_capacity=2,
            in_service=2,
            instance_type="ecs.gn7i-2x.8xlarge",
        )
        cloud.advance(900)
        ids = sorted(cloud.ess.groups[gid].instance_ids)
        now = cloud.now()
        for k in range(8):
            ts = int((now - timedelta(seconds=15 * (8 - k))).timestamp() * 1000)
            for iid in ids:
                cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, float(k), ts)
                cloud.put_custom_metric("vllm_request_rate_per_s", {"instanceId": iid}, 2.0, ts)
        w = read_window(clients(), spec(), start=now - timedelta(minutes=5), end=now)
    assert sorted(i.instance_id for i in w.instances) == ids
    assert [v for _, v in w.instances[0].metrics["queue_waiting"]] == [float(k) for k in range(8)]
    assert w.instances[0].values("request_rate_rps") == [2.0] * 8
    assert w.group.instance_type == "ecs.gn7i-2x.8xlarge" and w.errors == []


def test_throttled_cloudmonitor_is_recorded_and_reported_not_raised():
    with mock_aliyun(account_id=ACCOUNT, start=START) as cloud:
        cloud.create_group_for_tests(name="chat-prod", max_size=8, desired_capacity=2, in_service=2)
        cloud.advance(900)
        cloud.inject_fault("DescribeMetricList", code="Throttling.User", status=400)
        now = cloud.now()
        w = read_window(clients(), spec(), start=now - timedelta(minutes=5), end=now)
    assert w.errors and all(e.startswith("Throttling") for e in w.errors)
    found = diagnose(w)
    assert [f.kind for f in found] == ["metrics_missing"] and "throttled" in found[0].explanation


def test_a_read_ram_denies_names_the_permission_to_grant():
    with mock_aliyun(account_id=ACCOUNT, start=START) as cloud:
        cloud.create_group_for_tests(name="chat-prod", max_size=8, desired_capacity=2, in_service=2)
        cloud.advance(900)
        cloud.deny("ecs:DescribeInstances", "ess:DescribeScalingActivities")
        now = cloud.now()
        w = read_window(clients(), spec(), start=now - timedelta(minutes=5), end=now)
    assert (
        "Forbidden.RAM: DescribeInstances (missing RAM permission ecs:DescribeInstances: grant it in the "
        "service role's policy (terraform/ module: alicloud_ram_policy.service))"
    ) in w.errors
    assert any(
        e.startswith(
            "Forbidden.Unauthorized: DescribeScalingActivities (missing RAM permission "
            "ess:DescribeScalingActivities"
        )
        for e in w.errors
    )


def test_per_gpu_clock_rows_keep_the_slowest_gpu():
    # tensor-parallel ranks run in lock step: the slowest GPU's clock is the instance's (as the agent and the
    # DCGM mapping reduce it); the highest would hide a throttled card behind a healthy one
    t = START
    rows = [
        MetricPoint("ns", "m", "i-1", t, 0.55, {"gpu": "0"}, {}),
        MetricPoint("ns", "m", "i-1", t, 1.0, {"gpu": "1"}, {}),
    ]
    assert combine_points("gpu_sm_clock_ratio", rows) == {"i-1": [(t, 0.55)]}
