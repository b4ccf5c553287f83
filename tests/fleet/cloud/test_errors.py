"""The SDK's exceptions become our error tree: through the real SDK for HTTP errors, directly for the rest."""

from __future__ import annotations

import pickle

import pytest
import requests
from alibabacloud_tea_openapi.exceptions import ClientException, ThrottlingException

from fleet.cloud import (
    AuthError,
    CloudError,
    Conflict,
    IdempotencyMismatch,
    InvalidRequest,
    NetworkError,
    NotFound,
    RetryPolicy,
    ServerError,
    Throttled,
)
from fleet.cloud.errors import classify, from_sdk

from .conftest import error, reply


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (400, "Throttling", Throttled),
        (400, "Throttling.User", Throttled),
        (400, "Throttling.Api", Throttled),
        # ECS's per-resource and concurrency flow control, and a 429 without Retry-After under any code
        # (a gateway's): retried after a wait, never a parameter error that fails the read at once
        (400, "Throttling.Resource", Throttled),
        (400, "Throttling.Concurrent", Throttled),
        (429, "TooManyRequests", Throttled),
        (429, "ServiceUnavailable", Throttled),
        (400, "ScalingActivityInProgress", Conflict),
        (400, "IncorrectScalingGroupStatus", Conflict),
        (400, "IdempotentParameterMismatch", IdempotencyMismatch),
        (404, "InvalidScalingGroupId.NotFound", NotFound),
        (400, "InvalidInstanceId.NotFound", NotFound),
        (403, "Forbidden.Unauthorized", AuthError),
        (403, "Forbidden", AuthError),
        (400, "SignatureDoesNotMatch", AuthError),
        (400, "InvalidAccessKeyId.NotFound", AuthError),
        (400, "InvalidParameter.Conflict", InvalidRequest),
        (400, "IncorrectCapacity.MinSize", InvalidRequest),
        (500, "InternalError", ServerError),
        (503, "ServiceUnavailable", ServerError),
    ],
)
def test_wire_error_maps_to_class(stub, clients, status, code, expected):
    stub.on("DescribeScalingGroups", error(status, code, "it failed", request_id="RID-7"))
    with pytest.raises(CloudError) as info:
        clients.ess.describe_scaling_groups()
    err = info.value
    assert type(err) is expected
    assert (err.code, err.status, err.request_id, err.action) == (
        code,
        status,
        "RID-7",
        "DescribeScalingGroups",
    )
    assert err.message == "it failed"


def test_classify_prefers_code_over_status():
    assert classify("InvalidScalingGroupId.NotFound", 400) is NotFound
    assert classify("SomethingNew", 502) is ServerError
    assert classify("SomethingNew", 400) is InvalidRequest


def test_retry_after_header_becomes_throttled_minimum_wait(stub, clients):
    stub.on("DescribeScalingGroups", error(400, "Throttling.User", **{"x-acs-retry-after": "2500"}))
    policy = RetryPolicy(attempts=1)
    clients.ess._retry = policy  # one attempt: look at the error itself
    with pytest.raises(Throttled) as info:
        clients.ess.describe_scaling_groups()
    assert info.value.retry_after_s == 2.5


def test_throttling_exception_with_other_code_is_still_throttled():
    exc = ThrottlingException(
        status_code=429, code="TooManyRequests", message="m", request_id="r", retry_after=100
    )
    err = from_sdk(exc, "X")
    assert isinstance(err, Throttled)
    assert err.retry_after_s == 0.1


def test_connection_failure_is_network_error(stub, clients):
    stub.on("DescribeInstances", requests.ConnectionError("connection refused"))
    clients.ecs._retry = RetryPolicy(attempts=1)
    with pytest.raises(NetworkError) as info:
        clients.ecs.describe_instances(["i-1"])
    assert isinstance(info.value, ServerError)
    assert info.value.action == "DescribeInstances"


def test_missing_credentials_client_exception_is_auth_error():
    exc = ClientException(code="InvalidCredentials", message="Please set up the credentials correctly.")
    assert isinstance(from_sdk(exc, "DescribeScalingGroups"), AuthError)


def test_str_is_one_clear_line():
    err = Throttled(
        "Throttling.User", "Request was denied\ndue to user flow control.", "RID-1", 400, "DescribeMetricList"
    )
    err.attempts = 5
    text = str(err)
    assert "\n" not in text
    assert text == (
        "DescribeMetricList: HTTP 400 Throttling.User: Request was denied due to user flow control. "
        "(request id RID-1; gave up after 5 attempts)"
    )


def test_errors_pickle_with_their_fields():
    err = pickle.loads(pickle.dumps(Throttled("Throttling", "m", "r", 400, "A", retry_after_s=1.5)))
    assert (type(err), err.code, err.request_id, err.retry_after_s) == (Throttled, "Throttling", "r", 1.5)
    denied = AuthError("Forbidden.RAM", "m", "r", 403, "ScaleWithAdjustment", auth_action="ess:Scale")
    denied.product, denied.attempts = "ess", 3
    back = pickle.loads(pickle.dumps(denied))
    assert (back.auth_action, back.permission, back.product, str(back)) == (
        "ess:Scale",
        "ess:Scale",
        "ess",
        str(denied),
    )


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (403, "Forbidden.RAM"),
        (403, "Forbidden.Unauthorized"),
        (403, "Forbidden"),
        (400, "NoPermission"),
        (403, "NotAuthorized"),
        (403, "Forbidden.NotAuthorized"),
    ],
)
def test_a_ram_denial_names_the_permission_to_grant(stub, clients, status, code):
    stub.on("ScaleWithAdjustment", error(status, code, "User not authorized.", request_id="RID-9"))
    with pytest.raises(AuthError) as info:
        clients.ess.scale_to("asg-1", 3, client_token="t")
    err = info.value
    assert (err.denied, err.product, err.permission) == (True, "ess", "ess:ScaleWithAdjustment")
    assert str(err) == (
        f"ScaleWithAdjustment: HTTP {status} {code}: User not authorized.; missing RAM permission "
        "ess:ScaleWithAdjustment: grant it in the service role's policy (terraform/ module: "
        "alicloud_ram_policy.service) (request id RID-9)"
    )
    assert len(stub.calls) == 1  # not transient: never retried


def test_the_server_s_access_denied_detail_names_the_permission(stub, clients):
    body = {
        "RequestId": "RID-1",
        "Code": "Forbidden.RAM",
        "Message": "User not authorized to operate on the specified resource.",
        "AccessDeniedDetail": {"AuthAction": "ecs:DescribeInstances", "NoPermissionType": "ImplicitDeny"},
    }
    stub.on("DescribeInstances", reply(403, body))
    with pytest.raises(AuthError) as info:
        clients.ecs.describe_instances(["i-1"])
    assert info.value.permission == "ecs:DescribeInstances"
    assert "missing RAM permission ecs:DescribeInstances" in str(info.value)


def test_a_credential_failure_is_no_ram_denial(stub, clients):
    stub.on("DescribeScalingGroups", error(400, "SignatureDoesNotMatch", "bad signature"))
    with pytest.raises(AuthError) as info:
        clients.ess.describe_scaling_groups()
    assert (info.value.denied, info.value.permission) == (False, None)
    assert "RAM permission" not in str(info.value)


def test_a_denial_pickles_with_its_permission():
    err = AuthError("Forbidden.RAM", "m", "r", 403, "RebootInstance")
    err.product = "ecs"
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), back.permission, str(back)) == (AuthError, "ecs:RebootInstance", str(err))
