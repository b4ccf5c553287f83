"""Drain on scale-in (issue 21.5): the service completes the lifecycle action once an instance's running and
waiting requests reach 0, instead of every scale-in waiting out the hook's timeout. Through the real ESS and
CMS SDK clients against the in-process fake."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime, timedelta

import pytest

from fleet.cloud.clients import make_clients
from fleet.cloud.retry import RetryPolicy
from fleet.cloud.types import LifecycleAction
from fleet.config import load_config
from fleet.service.app import build_service
from fleet.service.drain import DrainState, InFlight, action_drained, drain_state
from fleet.testing import mock_aliyun

REGION = "cn-chengdu"
ENV = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "test-ak", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "test-secret-value"}
FAST = RetryPolicy(attempts=3, initial_s=0.0, max_s=0.0, jitter=False, sleep=lambda s: None)
HOOK_TIMEOUT_S = 600
T = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)


# ---- the pure decision -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reading", "since", "expected"),
    [
        (InFlight(0.0, T), None, DrainState.DRAINED),
        (InFlight(0.0, T), T - timedelta(seconds=30), DrainState.DRAINED),
        (InFlight(3.0, T), None, DrainState.IN_FLIGHT),
        (InFlight(0.0, T - timedelta(seconds=10)), T, DrainState.UNKNOWN),  # measured before the scale-in
        (InFlight(0.0, T - timedelta(seconds=300)), None, DrainState.UNKNOWN),  # stale
        (InFlight(None, None), None, DrainState.UNKNOWN),
        (None, None, DrainState.UNKNOWN),
    ],
)
def test_drain_state(reading, since, expected):
    assert drain_state(reading, since=since, now=T, stale_after_s=120) == expected


def test_an_action_completes_only_when_every_waiting_instance_drained():
    action = LifecycleAction("tok", "ash-1", ("i-a", "i-b", "i-gone"), "Pending")
    both = {"i-a": DrainState.DRAINED, "i-b": DrainState.DRAINED}
    assert action_drained(action, both)[0]
    done, why = action_drained(action, {**both, "i-b": DrainState.UNKNOWN})
    assert not done and "i-b: unknown" in why
    assert not action_drained(action, {})[0]


# ---- the service against the fake -------------------------------------------------------------------------
@pytest.fixture
def world(tmp_path):
    """(cloud, service, clients, group id, hook id): three InService instances and a SCALE_IN hook."""
    with mock_aliyun(boot_seconds=30) as cloud:
        gid = cloud.create_group_for_tests(
            name="chat", min_size=1, max_size=10, desired_capacity=3, in_service=3, region_id=REGION
        )
        hook = cloud.ess.create_lifecycle_hook(
            gid, "drain", "SCALE_IN", "CONTINUE", HOOK_TIMEOUT_S, None, None
        )
        clients = make_clients(REGION, cloud.account_id, retry=FAST, env=ENV)
        path = tmp_path / "fleet.yaml"
        path.write_text(
            textwrap.dedent(f"""
                region: {REGION}
                account_id: "1234567890"
                groups:
                  - {{name: chat, scaling_group_id: {gid}, min_size: 1, max_size: 10, warm_floor: 1}}
            """)
        )
        svc = build_service(
            load_config(path, env={}),
            clients,
            database_url=f"sqlite:///{tmp_path / 'fleet.db'}",
            clock=cloud.now,
        )
        yield cloud, svc, clients, gid, hook.hook_id
        svc.close()


def _states(clients, gid):
    return {i.instance_id: i.lifecycle_state for i in clients.ess.describe_scaling_instances(gid)}


def _scale_in_one(cloud, svc, clients, gid) -> str:
    svc.tick(cloud.now())  # the first decision starts from what is observed: desired stays 3
    clients.ess.scale_to(gid, 2, "test-scale-in")
    cloud.advance(1)
    [victim] = [i for i, s in _states(clients, gid).items() if s == "Removing:Wait"]
    return victim


def _publish(cloud, victim, running, waiting):
    dims = {"instanceId": victim}
    cloud.put_custom_metric("vllm_num_requests_running", dims, running)
    cloud.put_custom_metric("vllm_num_requests_waiting", dims, waiting)


def test_a_drained_instance_is_released_before_the_hook_timeout(world):
    cloud, svc, clients, gid, hook_id = world
    victim = _scale_in_one(cloud, svc, clients, gid)
    _publish(cloud, victim, running=4, waiting=1)
    svc.tick(cloud.now())
    assert _states(clients, gid)[victim] == "Removing:Wait"  # still serving its requests
    assert not svc.store.decisions(kind="drain")

    cloud.advance(15)
    _publish(cloud, victim, running=0, waiting=0)
    svc.tick(cloud.now())
    [record] = svc.store.decisions(kind="drain")
    assert (record.action, record.outcome, record.instance_id) == (
        "complete_lifecycle_action",
        "applied",
        victim,
    )
    assert record.client_token and record.inputs["lifecycle_hook_id"] == hook_id
    cloud.advance(cloud.removal_seconds + 1)
    assert victim not in _states(clients, gid)  # removed after ~20 s, not after the 600 s timeout
    [action] = [a for a in cloud.ess.lifecycle_actions.values() if a.hook_id == hook_id]
    assert (action.status, action.result) == ("Completed", "CONTINUE")


def test_unknown_in_flight_requests_leave_the_instance_to_the_hook_timeout(world):
    cloud, svc, clients, gid, _ = world
    victim = _scale_in_one(cloud, svc, clients, gid)
    for _ in range(4):  # the agent publishes nothing: no guess, the timeout decides
        cloud.advance(15)
        svc.tick(cloud.now())
    assert _states(clients, gid)[victim] == "Removing:Wait"
    assert not svc.store.decisions(kind="drain")
    activity = next(
        i.activity_id for i in clients.ess.describe_scaling_instances(gid) if i.instance_id == victim
    )
    cloud.advance(HOOK_TIMEOUT_S)  # the hook's timeout ends the wait (CONTINUE), reported as Timeout
    assert victim not in _states(clients, gid)
    [timed_out] = clients.ess.describe_lifecycle_actions(activity, status="Timeout")
    assert victim in timed_out.instance_ids


def test_a_sample_from_before_the_scale_in_does_not_count(world):
    cloud, svc, clients, gid, _ = world
    victim_ids = [i for i, s in _states(clients, gid).items() if s == "InService"]
    for iid in victim_ids:  # idle before the scale-in began ...
        _publish(cloud, iid, running=0, waiting=0)
    cloud.advance(5)
    victim = _scale_in_one(cloud, svc, clients, gid)
    svc.tick(cloud.now())  # ... says nothing about the requests it got since
    assert _states(clients, gid)[victim] == "Removing:Wait"


def test_standby_instances_show_weight_0_in_the_load_balancer(world):
    cloud, svc, clients, gid, _ = world
    first = sorted(_states(clients, gid))[0]
    clients.ess.enter_standby(gid, [first], "test-standby")
    weights = {i.instance_id: i.load_balancer_weight for i in clients.ess.describe_scaling_instances(gid)}
    assert weights[first] == 0 and all(w and w > 0 for i, w in weights.items() if i != first)
    clients.ess.exit_standby(gid, [first], "test-exit")
    cloud.advance(1)
    assert {i.instance_id: i.load_balancer_weight for i in clients.ess.describe_scaling_instances(gid)}[
        first
    ] > 0


@pytest.mark.parametrize(
    ("running", "waiting"),
    [(-4.0, 0.0), (0.0, -1.0), (float("nan"), 0.0), (-float("inf"), 0.0)],
)
def test_an_in_flight_reading_no_real_agent_sends_does_not_drain_the_instance(world, running, waiting):
    """A negative or NaN count is a broken agent's, not 'no request running': the sample guard drops it
    for the policies, and the drain must not complete a scale-in on it either (its requests are cut)."""
    cloud, svc, clients, gid, _ = world
    victim = _scale_in_one(cloud, svc, clients, gid)
    cloud.advance(15)
    _publish(cloud, victim, running=running, waiting=waiting)
    svc.tick(cloud.now())
    assert _states(clients, gid)[victim] == "Removing:Wait"
    assert not svc.store.decisions(kind="drain")


def test_an_in_flight_reading_dated_ahead_of_the_host_does_not_drain_the_instance(world):
    """A point dated minutes ahead of this host (a clock off) has no age that can be known: it cannot say
    the instance drained after the scale-in began."""
    cloud, svc, clients, gid, _ = world
    victim = _scale_in_one(cloud, svc, clients, gid)
    cloud.advance(180)
    _publish(cloud, victim, running=0, waiting=0)
    svc.tick(cloud.now() - timedelta(seconds=170))
    assert _states(clients, gid)[victim] == "Removing:Wait"
    assert not svc.store.decisions(kind="drain")
