"""What is retried, how often, how long it waits, and what gets logged."""

from __future__ import annotations

import logging
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.cloud import (
    AuthError,
    Conflict,
    IdempotencyMismatch,
    InvalidRequest,
    RetryPolicy,
    ServerError,
    Throttled,
)

from .conftest import Raw, error, reply

GROUPS = {"ScalingGroups": [], "TotalCount": 0}


def test_throttling_is_retried_until_success(stub, clients, sleeps):
    stub.sequence(
        "DescribeScalingGroups", error(400, "Throttling.User"), error(400, "Throttling.User"), GROUPS
    )
    assert clients.ess.describe_scaling_groups() == []
    assert len(stub.calls) == 3
    assert len(sleeps) == 2


def test_throttling_surfaces_after_all_attempts(stub, clients, fast_retry):
    stub.on(
        "DescribeScalingGroups", error(400, "Throttling.User", "Request was denied due to user flow control.")
    )
    with pytest.raises(Throttled) as info:
        clients.ess.describe_scaling_groups()
    assert len(stub.calls) == fast_retry.attempts
    assert info.value.attempts == fast_retry.attempts
    assert f"gave up after {fast_retry.attempts} attempts" in str(info.value)


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("InvalidParameter", 400, InvalidRequest),
        ("Forbidden.Unauthorized", 403, AuthError),
        ("IdempotentParameterMismatch", 400, IdempotencyMismatch),
    ],
)
def test_caller_errors_are_never_retried(stub, clients, code, status, expected):
    stub.on("ScaleWithAdjustment", error(status, code))
    with pytest.raises(expected):
        clients.ess.scale_to("asg-1", 3, client_token="t")
    assert len(stub.calls) == 1


def test_activity_conflict_is_retried(stub, clients):
    stub.sequence(
        "ScaleWithAdjustment", error(400, "ScalingActivityInProgress"), {"ScalingActivityId": "asa-1"}
    )
    assert clients.ess.scale_to("asg-1", 3, client_token="t") == "asa-1"
    assert [c.params["ClientToken"] for c in stub.calls] == ["t", "t"]


def test_conflict_surfaces_after_all_attempts(stub, clients, fast_retry):
    stub.on("ScaleWithAdjustment", error(400, "ScalingActivityInProgress"))
    with pytest.raises(Conflict):
        clients.ess.scale_to("asg-1", 3, client_token="t")
    assert len(stub.calls) == fast_retry.attempts


def test_server_error_is_retried_for_idempotent_calls(stub, clients):
    stub.sequence("DescribeScalingGroups", error(503, "ServiceUnavailable"), GROUPS)
    assert clients.ess.describe_scaling_groups() == []
    assert len(stub.calls) == 2


def test_server_error_is_not_retried_for_a_create_without_token(stub, clients):
    stub.on("CreateScheduledTask", error(500, "InternalError"))
    from datetime import UTC, datetime

    with pytest.raises(ServerError):
        clients.ess.create_scheduled_task("asg-1", "t", datetime(2026, 12, 1, tzinfo=UTC), None, None)
    assert len(stub.calls) == 1


def test_retry_after_is_a_minimum_wait(stub, clients, sleeps, fast_retry):
    stub.sequence(
        "DescribeScalingGroups", error(400, "Throttling.User", **{"x-acs-retry-after": "1500"}), GROUPS
    )
    clients.ess.describe_scaling_groups()
    assert sleeps == [pytest.approx(1.5)]
    assert fast_retry.max_s < 1.5  # the policy alone would have waited less


def test_retry_after_is_capped():
    policy = RetryPolicy(max_retry_after_s=3.0, jitter=False)
    err = Throttled("Throttling", "m", retry_after_s=86_400.0)
    assert policy.wait_s(1, err) == 3.0


def test_backoff_doubles_up_to_the_ceiling():
    policy = RetryPolicy(initial_s=0.5, max_s=4.0, jitter=False)
    assert [policy.backoff_s(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


@given(retry=st.integers(min_value=1, max_value=30), seed=st.integers(min_value=0, max_value=2**32))
def test_jittered_wait_stays_between_half_and_full_backoff(retry, seed):
    policy = RetryPolicy(initial_s=0.5, max_s=20.0, rng=random.Random(seed))
    ceiling = RetryPolicy(initial_s=0.5, max_s=20.0, jitter=False).backoff_s(retry)
    assert ceiling / 2 <= policy.backoff_s(retry) <= ceiling


def test_retries_log_a_warning_with_action_and_code(stub, clients, caplog):
    stub.sequence("DescribeScalingGroups", error(400, "Throttling.User", request_id="RID-T"), GROUPS)
    with caplog.at_level(logging.DEBUG, logger="fleet.cloud"):
        clients.ess.describe_scaling_groups()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "fleet.cloud"]
    assert len(warnings) == 1
    assert "DescribeScalingGroups" in warnings[0].getMessage()
    assert "Throttling.User" in warnings[0].getMessage()
    assert "RID-T" in warnings[0].getMessage()


def test_each_call_logs_action_and_request_id_at_debug(stub, clients, caplog):
    stub.on("DescribeScalingGroups", {**GROUPS, "RequestId": "RID-OK-1"})
    with caplog.at_level(logging.DEBUG, logger="fleet.cloud"):
        clients.ess.describe_scaling_groups()
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and r.name == "fleet.cloud"]
    assert any("DescribeScalingGroups" in m and "RID-OK-1" in m for m in debug)


def test_policy_rejects_zero_attempts():
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)


@pytest.mark.parametrize("body", ["", '{"ScalingGroups": [', '{"Scal'])
def test_an_answer_cut_off_mid_body_is_retried_like_a_lost_one(stub, clients, body):
    """Before, the SDK's RuntimeError on an empty or truncated body (a connection closed mid-answer) was an
    unknown error: the read failed for the tick at its first attempt."""
    stub.sequence("DescribeScalingGroups", reply(200, Raw(body)), GROUPS)
    assert clients.ess.describe_scaling_groups() == []
    assert len(stub.calls) == 2
