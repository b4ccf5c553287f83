"""The adapters against the fake Alibaba Cloud (fleet.testing), through the real SDK clients.

In-process under `mock_aliyun()`, and once over HTTP against `FakeAliyunServer` via `FLEET_ALIYUN_ENDPOINT`.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from fleet.cloud import (
    AuthError,
    CustomMetric,
    IdempotencyMismatch,
    RetryPolicy,
    Throttled,
    cms,
    ecs,
    ess,
    make_clients,
)
from fleet.cloud.types import LifecycleAction
from fleet.testing import FakeAliyunServer, mock_aliyun

from .conftest import Sleeps
from .test_actions import calls_for

REGION = "cn-hangzhou"
ACCOUNT = "1234567890"
START = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
SECRET = "FakeCloud-secret-canary-77c1"


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def cloud():
    with mock_aliyun(boot_seconds=30.0, account_id=ACCOUNT, start=START) as fake:
        yield fake


@pytest.fixture
def clients(cloud, sleeps, tmp_path):
    env = {
        "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAI-fake",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
        "HOME": str(tmp_path),
    }
    policy = RetryPolicy(attempts=3, initial_s=0.001, max_s=0.002, sleep=sleeps)
    return make_clients(REGION, ACCOUNT, retry=policy, env=env)


def test_scale_out_shows_pending_then_in_service(cloud, clients):
    group_id = cloud.create_group_for_tests(min_size=0, max_size=4, region_id=REGION)
    activity = clients.ess.scale_to(group_id, 2, client_token="scale-1")
    assert activity
    pending = clients.ess.describe_scaling_instances(group_id)
    assert [i.lifecycle_state for i in pending] == ["Pending", "Pending"]
    cloud.advance(31)
    in_service = clients.ess.describe_scaling_instances(group_id, lifecycle_states=["InService"])
    assert len(in_service) == 2
    [group] = clients.ess.describe_scaling_groups(group_ids=[group_id])
    assert (group.total_capacity, group.active_capacity, group.pending_capacity) == (2, 2, 0)
    assert all(i.created_at is not None and i.created_at.tzinfo is not None for i in in_service)


def test_repeated_client_token_gives_the_same_activity(cloud, clients):
    group_id = cloud.create_group_for_tests(min_size=0, max_size=4, region_id=REGION)
    first = clients.ess.scale_to(group_id, 2, client_token="same-token")
    assert clients.ess.scale_to(group_id, 2, client_token="same-token") == first


def test_client_token_reused_with_other_parameters_is_idempotency_mismatch(cloud, clients):
    group_id = cloud.create_group_for_tests(min_size=0, max_size=4, region_id=REGION)
    clients.ess.scale_to(group_id, 2, client_token="tok")
    with pytest.raises(IdempotencyMismatch) as info:
        clients.ess.scale_to(group_id, 3, client_token="tok")
    assert info.value.code == "IdempotentParameterMismatch"
    assert info.value.request_id


def test_custom_metrics_read_back(cloud, clients):
    t = cloud.now()
    clients.cms.put_custom_metrics(
        [
            CustomMetric("vllm_num_requests_waiting", {"instanceId": f"i-{n}"}, float(n * 10), t)
            for n in range(3)
        ]
    )
    points = clients.cms.metric_last(
        clients.cms.custom_namespace, "vllm_num_requests_waiting", ["i-0", "i-1", "i-2"]
    )
    assert sorted((p.instance_id, p.value) for p in points) == [("i-0", 0.0), ("i-1", 10.0), ("i-2", 20.0)]


def test_gpu_metric_list_reads_published_points(cloud, clients):
    base_ms = int(cloud.now().timestamp() * 1000)
    for k in range(4):
        cloud.publish_metric(
            "acs_ecs_dashboard",
            "instance_gpu_gpu_temperature",
            {"instanceId": "i-1"},
            80.0 + k,
            base_ms + k * 15_000,
        )
    cloud.advance(60)
    points = clients.cms.metric_list(
        "acs_ecs_dashboard",
        "instance_gpu_gpu_temperature",
        ["i-1"],
        cloud.now() - timedelta(minutes=5),
        cloud.now(),
        statistic="Maximum",
    )
    assert [p.value for p in points] == [80.0, 81.0, 82.0, 83.0]


def test_throttling_is_retried_then_succeeds(cloud, clients):
    cloud.inject_fault("DescribeScalingGroups", code="Throttling.User", count=2)
    assert clients.ess.describe_scaling_groups() == []
    assert [a for _, a in cloud.calls].count("DescribeScalingGroups") == 3


def test_persistent_throttling_surfaces_as_throttled_after_the_attempts(cloud, clients, sleeps):
    cloud.inject_fault("DescribeMetricLast", code="Throttling.User", retry_after_s=0.25)
    with pytest.raises(Throttled) as info:
        clients.cms.metric_last("acs_ecs_dashboard", "m", ["i-1"])
    assert info.value.attempts == 3
    assert [a for _, a in cloud.calls].count("DescribeMetricLast") == 3
    assert sleeps == [pytest.approx(0.25), pytest.approx(0.25)]  # the server's retry-after was honoured


def test_actions_sent_to_the_fake_equal_the_actions_tuples(cloud, clients):
    group_id = cloud.create_group_for_tests(min_size=0, max_size=4, region_id=REGION, in_service=1)
    [instance] = clients.ess.describe_scaling_instances(group_id)
    iid = instance.instance_id
    later = cloud.now() + timedelta(days=1)
    task: dict[str, str] = {}
    t0 = cloud.now()
    # a drain hook, so that the removal below waits in a lifecycle action the drain calls complete
    cloud.ess.create_lifecycle_hook(group_id, "drain", "SCALE_IN", "CONTINUE", 600, None, None)
    waiting: dict[str, list[LifecycleAction]] = {}

    def pending_actions() -> list[LifecycleAction]:
        [removed] = [i for i in clients.ess.describe_scaling_instances(group_id) if i.instance_id == iid]
        return waiting.setdefault("actions", clients.ess.describe_lifecycle_actions(removed.activity_id))

    # Every public adapter method once, in an order the fake's world accepts (reboot last).
    steps = {
        "ess.describe_scaling_groups": lambda: clients.ess.describe_scaling_groups(),
        "ess.describe_scaling_instances": lambda: clients.ess.describe_scaling_instances(group_id),
        "ess.describe_scaling_activities": lambda: clients.ess.describe_scaling_activities(group_id),
        "ess.modify_scaling_group": lambda: clients.ess.modify_scaling_group(group_id, max_size=5),
        "ess.modify_scaling_configuration": lambda: clients.ess.modify_scaling_configuration(
            cloud.ess.groups[group_id].active_config_id, instance_types=["ecs.gn7i-c8g1.2xlarge"]
        ),
        "ess.set_vswitch_order": lambda: clients.ess.set_vswitch_order(group_id, ["vsw-fake-a"]),
        "ess.create_scheduled_task": lambda: task.setdefault(
            "id",
            clients.ess.create_scheduled_task(
                group_id, "nightly", later, "Daily", "1", min_value=0, max_value=4
            ),
        ),
        "ess.describe_scheduled_tasks": lambda: clients.ess.describe_scheduled_tasks(group_id),
        "ess.modify_scheduled_task": lambda: clients.ess.modify_scheduled_task(task["id"], max_value=3),
        "ess.delete_scheduled_task": lambda: clients.ess.delete_scheduled_task(task["id"]),
        "ess.set_instances_protection": lambda: clients.ess.set_instances_protection(group_id, [iid], False),
        "ess.enter_standby": lambda: clients.ess.enter_standby(group_id, [iid], "a2"),
        "ess.exit_standby": lambda: clients.ess.exit_standby(group_id, [iid], "a3"),
        "ess.scale_to": lambda: clients.ess.scale_to(group_id, 2, client_token="a1"),
        "ess.remove_instances": lambda: (
            cloud.advance(120),
            clients.ess.remove_instances(group_id, [iid], client_token="a4"),
        ),
        "ess.describe_lifecycle_actions": pending_actions,
        "ess.complete_lifecycle_action": lambda: [
            clients.ess.complete_lifecycle_action(a.hook_id, a.token, client_token="a5")
            for a in pending_actions()
        ],
        "cms.metric_last": lambda: clients.cms.metric_last("acs_ecs_dashboard", "m", [iid]),
        "cms.metric_list": lambda: clients.cms.metric_list(
            "acs_ecs_dashboard", "m", [iid], t0 - timedelta(hours=1), t0
        ),
        "cms.put_custom_metrics": lambda: clients.cms.put_custom_metrics(
            [CustomMetric("m", {"instanceId": iid}, 1.0, t0)]
        ),
        "ecs.describe_instances": lambda: clients.ecs.describe_instances([iid]),
        "ecs.describe_full_status": lambda: clients.ecs.describe_full_status([iid]),
        "ecs.describe_full_status_exceptions": lambda: clients.ecs.describe_full_status_exceptions(),
        "ecs.describe_history_events": lambda: clients.ecs.describe_history_events([iid]),
        "ecs.reboot_instance": lambda: clients.ecs.reboot_instance(
            clients.ess.describe_scaling_instances(group_id, lifecycle_states=["InService"])[0].instance_id
        ),
    }
    assert set(steps) == set(calls_for(clients))  # the same methods as the stubbed test covers
    cloud.calls.clear()
    for step in steps.values():
        step()
    sent = {action for _, action in cloud.calls}
    assert sent == set(ess.ACTIONS + cms.ACTIONS + ecs.ACTIONS)


def test_over_http_with_endpoint_env_and_no_secret_in_logs(tmp_path, caplog, sleeps):
    caplog.set_level(logging.DEBUG)  # root: ours, the SDK's and urllib3's
    with FakeAliyunServer(port=0, account_id=ACCOUNT) as server:
        env = {
            "FLEET_ALIYUN_ENDPOINT": server.endpoint,
            "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAI-http",
            "ALIBABA_CLOUD_ACCESS_KEY_SECRET": SECRET,
            "HOME": str(tmp_path),
        }
        policy = RetryPolicy(attempts=2, initial_s=0.001, max_s=0.002, sleep=sleeps)
        clients = make_clients(REGION, ACCOUNT, retry=policy, env=env)
        group_id = server.cloud.create_group_for_tests(min_size=0, max_size=3, region_id=REGION)
        clients.ess.scale_to(group_id, 1, client_token="http-1")
        server.cloud.inject_fault("DescribeScalingGroups", code="Throttling.User")
        with pytest.raises(Throttled) as info:
            clients.ess.describe_scaling_groups()
    assert info.value.attempts == 2
    assert any("ScaleWithAdjustment" in r.getMessage() for r in caplog.records)
    assert SECRET not in caplog.text
    assert SECRET not in str(info.value) and SECRET not in repr(info.value)


# -- RAM denials: the fake refuses an Action as RAM would, the real SDK raises, the adapter names the grant


def test_a_denied_write_names_the_permission_and_the_policy_and_is_not_retried(cloud, clients, sleeps):
    group_id = cloud.create_group_for_tests(min_size=0, max_size=4, region_id=REGION)
    cloud.deny("ess:ScaleWithAdjustment")
    with pytest.raises(AuthError) as info:
        clients.ess.scale_to(group_id, 2, client_token="denied-1")
    err = info.value
    assert (err.code, err.status, err.permission) == (
        "Forbidden.Unauthorized",
        403,
        "ess:ScaleWithAdjustment",
    )
    assert str(err).startswith("ScaleWithAdjustment: HTTP 403 Forbidden.Unauthorized: ")
    assert (
        "; missing RAM permission ess:ScaleWithAdjustment: grant it in the service role's policy "
        "(terraform/ module: alicloud_ram_policy.service)"
    ) in str(err)
    assert cloud.call_counts["ScaleWithAdjustment"] == 1 and sleeps == []  # never retried
    assert cloud.ram.denials[-1]["permission"] == "ess:ScaleWithAdjustment"
    assert clients.ess.describe_scaling_groups(group_ids=[group_id])[0].total_capacity == 0  # nothing written


@pytest.mark.parametrize(
    ("permission", "code", "call", "policy"),
    [
        (
            "cms:DescribeMetricList",
            "NoPermission",
            lambda c, t: c.cms.metric_list("acs_ecs_dashboard", "m", ["i-1"], t - timedelta(minutes=5), t),
            "alicloud_ram_policy.service",
        ),
        (
            "ecs:DescribeInstancesFullStatus",
            "Forbidden.RAM",
            lambda c, t: c.ecs.describe_full_status(["i-1"]),
            "alicloud_ram_policy.service",
        ),
        (
            "cms:PutCustomMetric",
            "NoPermission",
            lambda c, t: c.cms.put_custom_metrics([CustomMetric("m", {"instanceId": "i-1"}, 1.0, t)]),
            "alicloud_ram_policy.node_agent",
        ),
    ],
)
def test_every_product_s_denial_names_its_permission(cloud, clients, sleeps, permission, code, call, policy):
    cloud.deny(permission)
    with pytest.raises(AuthError) as info:
        call(clients, cloud.now())
    assert (info.value.code, info.value.permission) == (code, permission)
    assert f"missing RAM permission {permission}: grant it in " in str(info.value)
    assert policy in str(info.value)
    assert sleeps == []


def test_a_policy_confining_one_caller_leaves_the_others_alone(cloud, clients, tmp_path):
    cloud.allow_only(["ess:DescribeScalingGroups"], access_key_id="LTAI-fake")
    group_id = cloud.create_group_for_tests(min_size=0, max_size=4, region_id=REGION)
    assert clients.ess.describe_scaling_groups(group_ids=[group_id])
    with pytest.raises(AuthError, match="missing RAM permission ess:DescribeScalingInstances"):
        clients.ess.describe_scaling_instances(group_id)
    other = make_clients(
        REGION,
        ACCOUNT,
        retry=RetryPolicy(attempts=1),
        env={"ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAI-other", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "s"},
    )
    assert other.ess.describe_scaling_instances(group_id) == []
