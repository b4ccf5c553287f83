"""The service's tick against cloud answers that are legal HTTP but not what the API defines (a RequestId
and nothing else, a row that does not parse, a NextToken that never ends): the tick goes on, the group whose
read cannot be trusted is not acted on, the other group is decided and scaled as usual, and the failure is
one warning line, never a traceback.

The two groups of ``tests/fleet/service/test_hostile.py``'s world (``chat``, ``other``) both have a queue
deep enough to scale out; the odd answer is given to ``chat``'s reads only, by the SDK client itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fleet.service.store import Outcome
from policies import metrics as pm

from .test_hostile import World, _instances, world  # noqa: F401 - the world fixture

__all__ = ["world"]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records() -> Iterator[_Records]:
    handler = _Records()
    root = logging.getLogger("fleet")
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


def _queue_deep(w: World) -> dict[str, list[str]]:
    instances = _instances(w)
    for ids in instances.values():
        for iid in ids:
            w.cloud.put_custom_metric("vllm_num_requests_waiting", {"instanceId": iid}, 9.0)
    for name in instances:
        w.svc.observer.invalidate(name)  # the next tick reads the instances again
    return instances


def _answer_chat_with(w: World, sdk: Any, method: str, change: Callable[[Any, Any], None]) -> None:
    """``change(request, response)`` to every answer of ``method`` about the chat group's instances."""
    real = getattr(sdk, method)
    chat = w.ids["chat"]

    def odd(request: Any) -> Any:
        response = real(request)
        if _about_chat(request, chat, w):
            change(request, response)
        return response

    setattr(sdk, method, odd)


def _about_chat(request: Any, chat: str, w: World) -> bool:
    if getattr(request, "scaling_group_id", None) == chat:
        return True
    dims = getattr(request, "dimensions", None) or ""
    return any(iid in dims for iid in w.chat_ids)


def _tick_and_check(w: World, records: _Records, failure: str) -> None:
    result = w.svc.tick(w.cloud.now())
    assert result.plan is not None and {gp.group for gp in result.plan.groups} == {"chat", "other"}
    assert any(failure in e for e in result.errors), result.errors
    assert not any("other" in e for e in result.errors), result.errors
    scaled = [(a.group, a.outcome) for a in result.actions if a.action == "scale_to"]
    assert scaled == [("other", Outcome.APPLIED)]
    assert not [r for r in records.records if r.exc_info], "a traceback was logged"
    # the adapter's retry lines (fleet.cloud, thinned on the way out) aside, the service says it once
    said = [r for r in records.records if r.name.startswith("fleet.service") and failure in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in records.records]


def test_an_instance_list_of_a_request_id_alone_is_not_an_empty_group(world: World, records) -> None:
    world.chat_ids = _queue_deep(world)["chat"]  # type: ignore[attr-defined]

    def request_id_only(request: Any, response: Any) -> None:
        response.body.scaling_instances, response.body.total_count = [], None

    _answer_chat_with(world, world.svc.clients.ess._client, "describe_scaling_instances", request_id_only)
    _tick_and_check(world, records, "neither ScalingInstances nor TotalCount")
    assert world.svc.last_observation is not None
    assert not world.svc.last_observation.groups["chat"].ok


def test_an_instance_row_that_does_not_parse_fails_its_group_not_the_region(world: World, records) -> None:
    world.chat_ids = _queue_deep(world)["chat"]  # type: ignore[attr-defined]

    def unreadable_time(request: Any, response: Any) -> None:
        response.body.scaling_instances[0].created_time = "last tuesday"

    _answer_chat_with(world, world.svc.clients.ess._client, "describe_scaling_instances", unreadable_time)
    _tick_and_check(world, records, "last tuesday")


def test_a_metric_read_whose_next_token_never_ends_leaves_the_metric_unknown(world: World, records) -> None:
    _queue_deep(world)
    sdk = world.svc.clients.cms._client
    real = sdk.describe_metric_last
    tokens = (f"t-{n}" for n in range(10_000))

    def endless(request: Any) -> Any:
        request.next_token = None  # the fake knows no token of ours: answer the first page again
        response = real(request)
        response.body.next_token = next(tokens)
        return response

    sdk.describe_metric_last = endless
    result = world.svc.tick(world.cloud.now())
    assert any("IncompleteListing" in e for e in result.errors), result.errors
    assert not [r for r in records.records if r.exc_info], "a traceback was logged"
    # the metric reads are shared by both groups: neither is scaled on a queue it could not read
    assert [a for a in result.actions if a.action == "scale_to"] == []
    assert world.svc.last_observation is not None
    for g in world.svc.last_observation.groups.values():
        assert all(pm.QUEUE_WAITING not in metrics for metrics in g.metrics.values())


# -- a group above its own MaxSize (lowered in the console) -------------------------------------------------


def test_a_plan_clipped_below_what_the_group_has_is_not_written() -> None:
    from fleet.cloud.types import ScalingGroup
    from fleet.service.actuate import clip_to_ess
    from policies.model import GroupPlan

    # MaxSize 2 while the group has 5 desired: the policy asks 6, or holds at 5, or scales in to 4
    group = ScalingGroup("asg-1", "chat", "Active", 1, 2, 5, 5, 5, 0, 0, 0, 0, 0, None, 300)
    for asks in (6, 5, 4):
        gp = GroupPlan(group="chat", serving_target=asks, target_capacity=asks, desired_capacity=asks)
        clipped = clip_to_ess(gp, group)
        assert (clipped.target_capacity, clipped.desired_capacity) == (2, None)
        assert "above its MaxSize" in clipped.reasons[-1].detail
    # a scale-in the policy decided to within MaxSize is written as decided
    within = GroupPlan(group="chat", serving_target=1, target_capacity=1, desired_capacity=1)
    assert clip_to_ess(within, group) is within


def test_a_group_above_its_max_size_is_not_scaled_in_by_the_service(world: World, records) -> None:
    _queue_deep(world)
    sdk = world.svc.clients.ess._client
    real = sdk.describe_scaling_groups

    def max_lowered(request: Any) -> Any:
        response = real(request)
        for g in response.body.scaling_groups:
            g.max_size = 1  # both groups have 2
        return response

    sdk.describe_scaling_groups = max_lowered
    for _ in range(2):
        result = world.svc.tick(world.cloud.now())
        assert result.ok, result.errors
        assert [a for a in result.actions if a.action == "scale_to"] == []
        world.cloud.advance(15)
    assert result.plan is not None
    assert {gp.group: gp.target_capacity for gp in result.plan.groups} == {"chat": 1, "other": 1}
    said = [r.getMessage() for r in records.records if "above its MaxSize 1" in r.getMessage()]
    assert len(said) == 2 and any("group chat" in line for line in said)  # once per group over two ticks


# -- this host's clock minutes behind the cloud's ------------------------------------------------------------


def test_a_host_clock_minutes_behind_the_cloud_is_one_line_not_one_per_instance(
    world: World, records
) -> None:
    from datetime import timedelta

    _queue_deep(world)
    for ids in _instances(world).values():
        for iid in ids:
            world.cloud.put_custom_metric("gpu_throttle_reasons", {"instanceId": iid}, 0.0)
            world.cloud.put_custom_metric("gpu_xid", {"instanceId": iid}, 0.0)
    behind = timedelta(minutes=3)
    first = world.svc.tick(world.cloud.now() - behind)
    world.cloud.advance(15)
    again = world.svc.tick(world.cloud.now() - behind)
    for result in (first, again):
        # every point is dated ahead of the host: unknown, so nothing is scaled on them
        assert [a for a in result.actions if a.action == "scale_to"] == []
    said = [r.getMessage() for r in records.records if r.name.startswith("fleet.service")]
    assert len(said) == 1, said
    assert "ahead of this host's clock" in said[0] and "4 instances" in said[0]
    assert world.svc.last_observation is not None
    for g in world.svc.last_observation.groups.values():
        assert all(pm.QUEUE_WAITING not in metrics for metrics in g.metrics.values())


def test_one_agent_with_a_clock_ahead_is_still_named_alone(world: World, records) -> None:
    import json

    instances = _queue_deep(world)
    bad = instances["chat"][0]
    sdk = world.svc.clients.cms._client
    real = sdk.describe_metric_last

    def one_ahead(request: Any) -> Any:
        response = real(request)
        rows = json.loads(response.body.datapoints or "[]")
        for row in rows:
            if bad in json.dumps(row):
                row["timestamp"] += 180_000  # this agent stamps its points 3 minutes ahead
        response.body.datapoints = json.dumps(rows)
        return response

    sdk.describe_metric_last = one_ahead
    world.svc.tick(world.cloud.now())
    said = [r.getMessage() for r in records.records if r.name.startswith("fleet.service")]
    assert [line for line in said if bad in line and "in the future" in line], said
    assert not [line for line in said if "ahead of this host's clock" in line], said


# -- ECS health answers -------------------------------------------------------------------------------------


def test_an_ecs_event_that_does_not_parse_fails_the_ecs_read_not_the_region(world: World, records) -> None:
    world.chat_ids = _queue_deep(world)["chat"]  # type: ignore[attr-defined]
    sdk = world.svc.clients.ecs._client
    real = sdk.describe_instances_full_status

    def odd_event(request: Any) -> Any:
        response = real(request)
        body = response.body.to_map()
        for row in body.get("InstanceFullStatusSet", {}).get("InstanceFullStatusType", []):
            event = {
                "EventId": "e-1",
                "EventType": {"Code": 1, "Name": "SystemMaintenance.Reboot"},
                "EventCycleStatus": {"Code": 24, "Name": "Scheduled"},
                "NotBefore": "after the weekend",
            }
            row["ScheduledSystemEventSet"] = {"ScheduledSystemEventType": [event]}
        response.body = type(response.body)().from_map(body)
        return response

    sdk.describe_instances_full_status = odd_event
    result = world.svc.tick(world.cloud.now())
    assert not [r for r in records.records if r.exc_info], "a traceback was logged"
    assert any("after the weekend" in e for e in result.errors), result.errors
    # the events are unread (isolation acts on none of them); both groups are observed and scaled
    scaled = [(a.group, a.outcome) for a in result.actions if a.action == "scale_to"]
    assert scaled == [("chat", Outcome.APPLIED), ("other", Outcome.APPLIED)]
    assert world.svc.last_observation is not None
    assert world.svc.last_observation.groups["other"].ok


def test_an_unexpected_exception_reading_one_group_fails_that_group_not_the_region(
    world: World, records, monkeypatch
) -> None:
    _queue_deep(world)
    ess = world.svc.clients.ess
    real = ess.describe_scaling_instances
    chat = world.ids["chat"]

    def broken(group_id: str, *args: Any, **kwargs: Any) -> Any:
        if group_id == chat:
            raise KeyError("a bug in a conversion")
        return real(group_id, *args, **kwargs)

    monkeypatch.setattr(ess, "describe_scaling_instances", broken)
    result = world.svc.tick(world.cloud.now())
    assert any("chat" in e or "KeyError" in e for e in result.errors), result.errors
    scaled = [(a.group, a.outcome) for a in result.actions if a.action == "scale_to"]
    assert scaled == [("other", Outcome.APPLIED)]
    assert world.svc.last_observation is not None
    groups = world.svc.last_observation.groups
    assert groups["other"].ok and not groups["chat"].ok
    said = [r.getMessage() for r in records.records if "a bug in a conversion" in r.getMessage()]
    assert len(said) == 1, said
