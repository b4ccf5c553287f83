"""ESS lifecycle hooks through the SDK: *:Wait states, completion, heartbeat (lower-camel keys), timeouts."""

from __future__ import annotations

import pytest
from alibabacloud_ess20220222 import models as m
from alibabacloud_ess20220222.client import Client as EssClient
from alibabacloud_tea_openapi.exceptions import ClientException

from fleet.testing import FakeCloud

from .conftest import EssHelper


def add_hook(
    ess: EssClient, group_id: str, transition: str, default_result: str = "CONTINUE", timeout_s: int = 300
) -> str:
    return ess.create_lifecycle_hook(
        m.CreateLifecycleHookRequest(
            scaling_group_id=group_id,
            lifecycle_hook_name=f"hook-{transition}",
            lifecycle_transition=transition,
            default_result=default_result,
            heartbeat_timeout=timeout_s,
        )
    ).body.lifecycle_hook_id


def pending_token(ess: EssClient, activity_id: str) -> str:
    actions = ess.describe_lifecycle_actions(
        m.DescribeLifecycleActionsRequest(scaling_activity_id=activity_id)
    ).body.lifecycle_actions
    return actions[0].lifecycle_action_token


def test_scale_out_waits_in_pending_wait_until_completed(
    h: EssHelper, ess: EssClient, cloud: FakeCloud
) -> None:
    group_id = h.make_group()
    hook_id = add_hook(ess, group_id, "SCALE_OUT")
    activity_id = h.scale_to(group_id, 1)
    cloud.advance(60)
    waiting = set(h.states(group_id).values())
    ess.complete_lifecycle_action(
        m.CompleteLifecycleActionRequest(
            lifecycle_hook_id=hook_id,
            lifecycle_action_token=pending_token(ess, activity_id),
            lifecycle_action_result="CONTINUE",
        )
    )
    assert (waiting, set(h.states(group_id).values())) == ({"Pending:Wait"}, {"InService"})
    assert h.group(group_id).pending_wait_capacity == 0


def test_completed_before_boot_stays_pending_until_boot(
    h: EssHelper, ess: EssClient, cloud: FakeCloud
) -> None:
    group_id = h.make_group()
    hook_id = add_hook(ess, group_id, "SCALE_OUT")
    activity_id = h.scale_to(group_id, 1)
    ess.complete_lifecycle_action(
        m.CompleteLifecycleActionRequest(
            lifecycle_hook_id=hook_id, lifecycle_action_token=pending_token(ess, activity_id)
        )
    )
    early = set(h.states(group_id).values())
    cloud.advance(30)
    assert (early, set(h.states(group_id).values())) == ({"Pending"}, {"InService"})


def test_heartbeat_with_lower_camel_keys_extends_the_timeout(
    h: EssHelper, ess: EssClient, cloud: FakeCloud
) -> None:
    group_id = h.make_group()
    hook_id = add_hook(ess, group_id, "SCALE_OUT", default_result="ABANDON", timeout_s=60)
    activity_id = h.scale_to(group_id, 1)
    cloud.advance(50)
    ess.record_lifecycle_action_heartbeat(
        m.RecordLifecycleActionHeartbeatRequest(
            lifecycle_hook_id=hook_id,
            lifecycle_action_token=pending_token(ess, activity_id),
            heartbeat_timeout=120,
        )
    )
    cloud.advance(60)  # past the first deadline, before the extended one
    assert set(h.states(group_id).values()) == {"Pending:Wait"}


def test_timeout_with_abandon_releases_the_instances(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group()
    add_hook(ess, group_id, "SCALE_OUT", default_result="ABANDON", timeout_s=60)
    activity_id = h.scale_to(group_id, 1)
    cloud.advance(61)
    assert h.states(group_id) == {} and h.activity(activity_id).status_code == "Failed"


def test_scale_in_waits_in_removing_wait(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(desired=1)
    cloud.advance(30)
    add_hook(ess, group_id, "SCALE_IN")
    h.scale_to(group_id, 0)
    cloud.advance(60)
    assert set(h.states(group_id).values()) == {"Removing:Wait"}
    assert h.group(group_id).removing_wait_capacity == 1


def test_rollback_on_scale_in_keeps_the_instance(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(desired=1)
    cloud.advance(30)
    hook_id = add_hook(ess, group_id, "SCALE_IN")
    activity_id = h.scale_to(group_id, 0)
    ess.complete_lifecycle_action(
        m.CompleteLifecycleActionRequest(
            lifecycle_hook_id=hook_id,
            lifecycle_action_token=pending_token(ess, activity_id),
            lifecycle_action_result="ROLLBACK",
        )
    )
    cloud.advance(60)
    assert set(h.states(group_id).values()) == {"InService"}


def test_continue_on_scale_in_removes_the_instance(h: EssHelper, ess: EssClient, cloud: FakeCloud) -> None:
    group_id = h.make_group(desired=1)
    cloud.advance(30)
    hook_id = add_hook(ess, group_id, "SCALE_IN")
    activity_id = h.scale_to(group_id, 0)
    ess.complete_lifecycle_action(
        m.CompleteLifecycleActionRequest(
            lifecycle_hook_id=hook_id, lifecycle_action_token=pending_token(ess, activity_id)
        )
    )
    cloud.advance(60)
    assert h.states(group_id) == {} and h.activity(activity_id).status_code == "Successful"


def test_unknown_token_is_not_found(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    hook_id = add_hook(ess, group_id, "SCALE_OUT")
    with pytest.raises(ClientException) as info:
        ess.complete_lifecycle_action(
            m.CompleteLifecycleActionRequest(lifecycle_hook_id=hook_id, lifecycle_action_token="nope")
        )
    assert (info.value.code, info.value.status_code) == ("InvalidLifecycleActionToken.NotFound", 404)


def test_heartbeat_timeout_out_of_range_is_invalid(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    with pytest.raises(ClientException) as info:
        add_hook(ess, group_id, "SCALE_OUT", timeout_s=10)
    assert info.value.code == "InvalidParameter"


def test_hooks_are_listed_per_group(h: EssHelper, ess: EssClient) -> None:
    group_id = h.make_group()
    hook_id = add_hook(ess, group_id, "SCALE_OUT")
    hooks = ess.describe_lifecycle_hooks(
        m.DescribeLifecycleHooksRequest(scaling_group_id=group_id)
    ).body.lifecycle_hooks
    assert [(x.lifecycle_hook_id, x.lifecycle_transition, x.default_result) for x in hooks] == [
        (hook_id, "SCALE_OUT", "CONTINUE")
    ]
