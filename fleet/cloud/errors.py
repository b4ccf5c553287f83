"""One error tree for every cloud call, and the mapping from the SDKs' exceptions into it.

    CloudError(code, message, request_id, status, action)
    ├── Throttled            Throttling, Throttling.* (.User, .Api, ECS's .Resource), any HTTP 429
    │                        (retried; carries retry_after_s)
    ├── Conflict             ScalingActivityInProgress, IncorrectScalingGroupStatus (retried)
    ├── IdempotencyMismatch  IdempotentParameterMismatch: a ClientToken reused with other parameters
    ├── NotFound             any *.NotFound code
    ├── AuthError            Forbidden*, NoPermission*, NotAuthorized*, SignatureDoesNotMatch,
    │                        InvalidAccessKeyId*, missing credentials (never retried). A RAM denial (the
    │                        identity lacks the Action) names the permission to grant (`permission`)
    ├── InvalidRequest       every other 4xx (parameter errors: never retried)
    └── ServerError          5xx (retried where the call is idempotent)
        ├── NetworkError     no usable HTTP answer: refused, reset, timed out, or cut off mid-body
        ├── IncompleteListing  a paged list whose pages did not add up to its TotalCount, twice running
        └── MalformedAnswer  an answer that came back whole but not as the API defines it (a body that is
                             no JSON object, a list answer without its list or TotalCount, a number or
                             time that does not parse): retried as a 5xx, never read as data

The SDKs raise `alibabacloud_tea_openapi.exceptions.{ThrottlingException, ClientException, ServerException}`
for HTTP errors (ThrottlingException when the answer carries `x-acs-retry-after`, whatever the status), and a
Tea `UnretryableException` wrapping darabonba's `RetryError` when no answer came back
(../shared/reference/aliyun-api.md section 0). `from_sdk` turns any of those into the tree above.
Nothing here ever includes request headers or credentials: only the server's code, message and request id.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from alibabacloud_tea_openapi.exceptions import (
    AlibabaCloudException,
    ClientException,
    ServerException,
    ThrottlingException,
)
from requests import RequestException
from Tea.exceptions import TeaException, UnretryableException

from fleet.cloud import permissions

THROTTLING_CODES = frozenset({"Throttling", "Throttling.User", "Throttling.Api"})
# ECS adds Throttling.Resource (one resource asked about too often) and others: every Throttling.* is flow
# control. HTTP 429 is flow control whatever the code (a gateway's TooManyRequests) when no Retry-After came
# with it (with one, the SDK raises ThrottlingException): a request refused unprocessed, safe to repeat.
THROTTLING_PREFIX = "Throttling."
TOO_MANY_REQUESTS = 429
CONFLICT_CODES = frozenset({"ScalingActivityInProgress", "IncorrectScalingGroupStatus"})
IDEMPOTENCY_CODES = frozenset({"IdempotentParameterMismatch"})
AUTH_CODES = frozenset({"SignatureDoesNotMatch", "InvalidCredentials", "IncompleteSignature"})
AUTH_PREFIXES = ("Forbidden", "InvalidAccessKeyId", "InvalidSecurityToken", "NoPermission", "NotAuthorized")
# The codes a RAM denial comes back with (the identity is valid but not allowed the Action): ECS and most
# products answer 403 Forbidden.RAM ("User not authorized to operate on the specified resource, or this API
# doesn't support RAM."), ESS Forbidden(.Unauthorized) (aliyun-api.md section 1.4); RAM's troubleshooting
# guide names NoPermission and NotAuthorized for API calls. An answer carrying AccessDeniedDetail is one too,
# whatever its code. Credential failures (SignatureDoesNotMatch, InvalidAccessKeyId.*) are not.
PERMISSION_CODES = frozenset(
    {
        "Forbidden",
        "Forbidden.RAM",
        "Forbidden.Unauthorized",
        "Forbidden.NotAuthorized",
        "Forbidden.NoPermission",
        "Forbidden.SubUser",
        "NoPermission",
        "NotAuthorized",
    }
)
# What the SDK (alibabacloud_tea_util, darabonba) raises, as a bare RuntimeError, when an answer's body is not
# JSON: an empty or cut-off body (a connection closed mid-answer by a proxy or load balancer). There is no
# class to tell it by, only this text.
UNPARSEABLE_BODY = "Failed to parse the value as json format"


class CloudError(Exception):
    """A failed cloud call: the wire error code, the server's message, its RequestId, the HTTP status and
    the Action that failed. str() is one line fit for a log or a CLI error, e.g.
    `DescribeMetricList: HTTP 400 Throttling.User: Request was denied due to user flow control.
    (request id 5E4A...; gave up after 5 attempts)`."""

    def __init__(
        self,
        code: str,
        message: str,
        request_id: str | None = None,
        status: int | None = None,
        action: str | None = None,
    ) -> None:
        super().__init__(code, message, request_id, status, action)
        self.code = code
        self.message = message
        self.request_id = request_id
        self.status = status
        self.action = action
        self.product: str | None = None  # the adapter's product (ess, cms, ecs), set by the retry loop
        self.attempts = 1  # set by the retry loop to how many calls were made before giving up

    @property
    def failure(self) -> str:
        """What failed, without this call's request id and attempts: the same text for the same failure on
        every retry (what an audit compares)."""
        where = f"{self.action}: " if self.action else ""
        status = f"HTTP {self.status} " if self.status is not None else ""
        text = " ".join(str(self.message).split())  # one line, whatever the server sent
        return f"{where}{status}{self.code}: {text}"

    def __str__(self) -> str:
        notes = []
        if self.request_id:
            notes.append(f"request id {self.request_id}")
        if self.attempts > 1:
            notes.append(f"gave up after {self.attempts} attempts")
        tail = f" ({'; '.join(notes)})" if notes else ""
        return f"{self.failure}{tail}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, "
            f"request_id={self.request_id!r}, status={self.status!r}, action={self.action!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self._args(), self._state())

    def _args(self) -> tuple[Any, ...]:
        """What ``__init__`` takes, in order (a subclass with a field of its own adds it)."""
        return (self.code, self.message, self.request_id, self.status, self.action)

    def _state(self) -> dict[str, Any]:
        return {"product": self.product, "attempts": self.attempts}


class Throttled(CloudError):
    """Flow control. `retry_after_s` is the server's requested wait, when it sent one."""

    def __init__(
        self,
        code: str,
        message: str,
        request_id: str | None = None,
        status: int | None = None,
        action: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(code, message, request_id, status, action)
        self.retry_after_s = retry_after_s

    def _args(self) -> tuple[Any, ...]:
        return (*super()._args(), self.retry_after_s)


class Conflict(CloudError):
    """The group is busy (an activity is running) or not Active: safe to retry later."""


class IdempotencyMismatch(CloudError):
    """The ClientToken was already used with different parameters: a bug in the caller, never retried."""


class NotFound(CloudError):
    """The named group, instance, rule or task does not exist."""


class InvalidRequest(CloudError):
    """The request was refused as malformed or impossible (4xx): retrying cannot help."""


class ServerError(CloudError):
    """The service failed (5xx)."""


class NetworkError(ServerError):
    """No HTTP answer came back (connection refused, reset, timed out)."""


class IncompleteListing(ServerError):
    """A paged list that ended short of its TotalCount (a page answered fewer items than PageSize while the
    count said more remained), or whose TotalCount moved between its pages, on two walks running: the
    caller has part of a list and must not act on it as the whole. Raised by the adapter, not the wire."""


class MalformedAnswer(ServerError):
    """An answer read whole that is not what the API defines: a 200 whose body is JSON but no object
    (``null``, a string), a list answer carrying neither its list nor TotalCount (a RequestId and nothing
    else), a field that should be a number or a time and does not parse. Raised by the adapter, not the
    wire; retried where the call is idempotent, as a 5xx is, and never turned into an empty list or a
    default value the service would act on."""


R = TypeVar("R")


def parsed_items(action: str, convert: Callable[[Any], R], raws: Iterable[Any]) -> list[R]:
    """Each raw SDK item as our type; a field that does not parse (a time, a number) fails the whole list
    as a MalformedAnswer naming it: part of a list is never returned as the whole, and a ValueError from a
    conversion never reaches the service as a bug."""
    try:
        return [convert(raw) for raw in raws]
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        raise MalformedAnswer("MalformedAnswer", f"an item does not parse: {exc}", action=action) from exc


class AuthError(CloudError):
    """Credentials missing, wrong, or without the permission for this Action.

    A RAM denial (`denied`) names the permission an operator must grant, as a policy writes it: the
    server's own AccessDeniedDetail.AuthAction when it sent one, else `<product>:<Action>`; the one-line
    text then ends with it and the policy of the module that grants it, e.g. `ScaleWithAdjustment: HTTP 403
    Forbidden.RAM: ...; missing RAM permission ess:ScaleWithAdjustment: grant it in the service role's
    policy (terraform/ module: alicloud_ram_policy.service)`."""

    def __init__(
        self,
        code: str,
        message: str,
        request_id: str | None = None,
        status: int | None = None,
        action: str | None = None,
        auth_action: str | None = None,
    ) -> None:
        super().__init__(code, message, request_id, status, action)
        self.auth_action = auth_action  # AccessDeniedDetail.AuthAction of the answer, when it had one

    @property
    def denied(self) -> bool:
        """The identity is valid but not allowed the Action (not a credential failure)."""
        return self.auth_action is not None or self.code in PERMISSION_CODES

    @property
    def permission(self) -> str | None:
        """The permission to grant (`ess:ScaleWithAdjustment`), for a RAM denial whose Action is known."""
        if not self.denied:
            return None
        if self.auth_action:
            return self.auth_action
        if self.product and self.action:
            return permissions.permission(self.product, self.action)
        return None

    @property
    def failure(self) -> str:
        text = super().failure
        if not self.denied:
            return text
        needed = self.permission
        if needed is None:
            return f"{text}; {permissions.denial_hint(self.product, self.action)}"
        product, _, action = needed.partition(":")
        return f"{text}; {permissions.denial_hint(product, action)}"

    def _args(self) -> tuple[Any, ...]:
        return (*super()._args(), self.auth_action)


def classify(code: str, status: int | None) -> type[CloudError]:
    """The error class for a wire code and HTTP status (the code wins over the status)."""
    if code in THROTTLING_CODES or code.startswith(THROTTLING_PREFIX):
        return Throttled
    if code in CONFLICT_CODES:
        return Conflict
    if code in IDEMPOTENCY_CODES:
        return IdempotencyMismatch
    if code in AUTH_CODES or code.startswith(AUTH_PREFIXES):
        return AuthError
    if code.endswith(".NotFound"):
        return NotFound
    if status == TOO_MANY_REQUESTS:
        return Throttled
    if status is not None and status >= 500:
        return ServerError
    if status == 403:
        return AuthError
    if status == 404:
        return NotFound
    return InvalidRequest


def _wire_message(exc: TeaException) -> str:
    """The server's own Message, without the SDK's 'code: 400, ... request id: ...' wrapping."""
    data = getattr(exc, "data", None)
    if isinstance(data, dict):
        msg = data.get("Message") or data.get("message")
        if msg:
            return str(msg)
    return str(getattr(exc, "message", None) or type(exc).__name__)


def _retry_after_s(exc: Exception) -> float | None:
    # darabonba treats x-acs-retry-after as milliseconds: DaraCore.get_backoff_time returns it unchanged
    # and DaraCore.sleep divides by 1000 (darabonba-core 1.0.9). We read it the same way.
    value = getattr(exc, "retry_after", None)
    if value is None:
        return None
    try:
        ms = float(value)
    except (TypeError, ValueError):
        return None
    return ms / 1000.0 if ms > 0 else None


def _auth_action(exc: TeaException) -> str | None:
    """AccessDeniedDetail.AuthAction of a RAM denial's body (an object, or a JSON string of one)."""
    detail = getattr(exc, "access_denied_detail", None)
    data = getattr(exc, "data", None)
    if detail is None and isinstance(data, dict):
        detail = data.get("AccessDeniedDetail") or data.get("accessDeniedDetail")
    if isinstance(detail, str):
        try:
            detail = json.loads(detail)
        except ValueError:
            return None
    action = detail.get("AuthAction") if isinstance(detail, dict) else None
    return action if isinstance(action, str) and action.strip() else None


def _build(
    cls: type[CloudError], code: str, message: str, request_id: str | None, status: int | None, **kw: Any
) -> CloudError:
    auth_action = kw.pop("auth_action", None)
    if auth_action is not None and cls is not Throttled:
        cls = AuthError  # an access-denied detail is a denial whatever the code says
    if cls is AuthError:
        return AuthError(code, message, request_id, status, kw["action"], auth_action)
    return cls(code, message, request_id, status, kw["action"])


def from_sdk(exc: BaseException, action: str | None = None, product: str | None = None) -> CloudError:
    """Map any exception raised by an SDK call into the error tree (an unknown one becomes a plain
    CloudError, which is never retried). `product` (ess, cms, ecs) names the permission of a RAM denial."""
    error = _from_sdk(exc, action)
    if error.product is None:
        error.product = product
    return error


def _from_sdk(exc: BaseException, action: str | None) -> CloudError:
    if isinstance(exc, CloudError):
        if exc.action is None:
            exc.action = action
        return exc
    if isinstance(exc, UnretryableException):
        inner = exc.inner_exception
        if isinstance(inner, TeaException) and not isinstance(inner, UnretryableException):
            return _from_sdk(inner, action)
        return _no_answer(inner, action)
    if isinstance(exc, AlibabaCloudException):
        code = str(exc.code) if exc.code not in (None, "None") else "Unknown"
        status = exc.status_code
        request_id = exc.request_id if exc.request_id not in (None, "None") else None
        message = _wire_message(exc)
        if isinstance(exc, ThrottlingException) or classify(code, status) is Throttled:
            return Throttled(code, message, request_id, status, action, retry_after_s=_retry_after_s(exc))
        denied = _auth_action(exc)
        if status is None and isinstance(exc, ClientException):
            # Raised by the SDK before sending anything (e.g. InvalidCredentials when no credential is set).
            return _build(classify(code, 400), code, message, request_id, None, action=action)
        if status is None and isinstance(exc, ServerException):
            status = 500
        return _build(
            classify(code, status), code, message, request_id, status, action=action, auth_action=denied
        )
    if isinstance(exc, TeaException):
        code = str(exc.code) if exc.code else "Unknown"
        status = getattr(exc, "statusCode", None)
        return _build(
            classify(code, status),
            code,
            _wire_message(exc),
            None,
            status,
            action=action,
            auth_action=_auth_action(exc),
        )
    return _no_answer(exc, action)


def _no_answer(exc: BaseException | None, action: str | None) -> CloudError:
    name = type(exc).__name__ if exc is not None else "Unknown"
    if name == "CredentialException":
        # alibabacloud_credentials found nothing in its chain; its text lists the providers it tried.
        return AuthError("NoCredentials", str(exc), None, None, action)
    if exc is not None and (
        isinstance(exc, (RequestException, OSError)) or name in ("RetryError", "ConnectionError", "Timeout")
    ):
        text = str(getattr(exc, "message", None) or exc) or name
        return NetworkError("NetworkError", text, None, None, action)
    if isinstance(exc, RuntimeError) and str(exc).startswith(UNPARSEABLE_BODY):
        # A cut-off answer is a lost answer: retried like one (a write only under its ClientToken).
        return NetworkError("NetworkError", f"the answer could not be read: {exc}", None, None, action)
    # Anything else (a validation error inside the SDK, a bug) is not known to be transient: not retried.
    return CloudError(name, str(exc) if exc is not None else "unknown failure", None, None, action)
