"""Retrying cloud calls: which failures are safe to repeat, how long to wait, and what gets logged.

Retried: Throttled (waiting at least what the server asked for), Conflict (the group is busy; ESS rejects the
second activity without doing anything, so repeating is safe) and, for idempotent calls only, ServerError and
NetworkError (a 5xx or a lost answer may hide a write that happened). Never retried: parameter, auth,
not-found and idempotency errors, which no amount of waiting fixes.

Waits grow exponentially from `initial_s` up to `max_s`, with "equal jitter" (half fixed, half random) so that
many callers throttled together do not come back together. The sleep function is injectable so tests take
milliseconds and the simulator can run on a virtual clock.

Counting: inside ``with count_calls() as counts:`` every wire request (each attempt, retries included) adds
one to ``counts[action]``; the service counts its calls per tick by Action this way. The counters live in a
context variable, so concurrent ticks (several replicas in one process) never count each other's calls, and
worker threads count into their caller's counters when they run in a copy of its context.

Logging (logger `fleet.cloud`): each call's Action and RequestId at DEBUG, each retry at WARNING
(`RETRY_MESSAGE`; the service's output holds back repeats, `fleet.service.logs.RepeatedRetries`). Only the
Action, the error code, message and request id are ever logged: never a request, a header or a credential.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from fleet.cloud.errors import CloudError, Conflict, MalformedAnswer, ServerError, Throttled, from_sdk

log = logging.getLogger("fleet.cloud")
# The line each retried attempt logs (args: product, action, attempt, attempts, the CloudError, the wait):
# ``fleet.service.logs.RepeatedRetries`` recognises it to hold back repeats on the way to stderr.
RETRY_MESSAGE = "%s %s failed (attempt %d/%d): %s; retrying in %.2f s"

T = TypeVar("T")

_CALL_COUNTS: ContextVar[tuple[tuple[Counter[str], threading.Lock], ...]] = ContextVar(
    "fleet_cloud_call_counts", default=()
)


@contextmanager
def count_calls() -> Iterator[Counter[str]]:
    """Count the wire requests made inside the block (and in threads run in a copy of its context).

    Blocks nest: a call counts in every enclosing block (a tick's total and its observation's share).
    """
    counts: Counter[str] = Counter()
    token = _CALL_COUNTS.set((*_CALL_COUNTS.get(), (counts, threading.Lock())))
    try:
        yield counts
    finally:
        _CALL_COUNTS.reset(token)


def _count(action: str) -> None:
    for counts, lock in _CALL_COUNTS.get():
        with lock:
            counts[action] += 1


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try. `attempts` counts the first call (5 = one call and up to four retries)."""

    attempts: int = 5
    initial_s: float = 0.5
    max_s: float = 20.0
    jitter: bool = True
    # A server's x-acs-retry-after is honoured as a minimum wait, but never beyond this ceiling, so a
    # malformed header cannot park the controller for hours.
    max_retry_after_s: float = 60.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)
    rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}")
        if self.initial_s < 0 or self.max_s < 0:
            raise ValueError("RetryPolicy waits must be >= 0")

    def backoff_s(self, retry_number: int) -> float:
        """The wait before retry number `retry_number` (1 = the first retry), before any server hint."""
        ceiling = min(self.max_s, self.initial_s * (2 ** max(0, retry_number - 1)))
        if not self.jitter:
            return ceiling
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)

    def wait_s(self, retry_number: int, error: BaseException | None) -> float:
        wait = self.backoff_s(retry_number)
        if isinstance(error, Throttled) and error.retry_after_s:
            wait = max(wait, min(error.retry_after_s, self.max_retry_after_s))
        return wait


def is_retryable(error: BaseException, idempotent: bool = True) -> bool:
    if isinstance(error, (Throttled, Conflict)):
        return True
    return idempotent and isinstance(error, ServerError)


def call(
    policy: RetryPolicy,
    product: str,
    action: str,
    fn: Callable[[], T],
    *,
    idempotent: bool = True,
) -> T:
    """Run one SDK call `fn` (doing the wire Action `action`) under `policy`.

    Returns fn's result; raises the CloudError of the last attempt, its `attempts` set to how many were made.
    """

    def attempt() -> T:
        _count(action)
        try:
            result = _whole(fn())
        except CloudError as exc:  # raised by an adapter check on a 200 answer (CMS Success:false)
            if exc.action is None:
                exc.action = action
            if exc.product is None:
                exc.product = product
            raise
        except Exception as exc:
            raise from_sdk(exc, action, product) from exc
        log.debug("%s %s ok request_id=%s", product, action, _request_id(result))
        return result

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.upcoming_sleep
        log.warning(
            RETRY_MESSAGE,
            product,
            action,
            state.attempt_number,
            policy.attempts,
            exc,
            wait,
        )

    retrying = Retrying(
        stop=stop_after_attempt(policy.attempts),
        wait=lambda state: policy.wait_s(
            state.attempt_number, state.outcome.exception() if state.outcome else None
        ),
        retry=retry_if_exception(lambda e: is_retryable(e, idempotent)),
        sleep=policy.sleep,
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        return retrying(attempt)
    except CloudError as exc:
        exc.attempts = retrying.statistics.get("attempt_number", 1)
        log.debug("%s %s gave up: %s", product, action, exc)
        raise


_NO_BODY = object()


def _whole(response: T) -> T:
    """The SDK's answer, unless it carries no body: a 2xx whose JSON is no object (``null``, a string, a
    number) leaves ``body`` None, which every reader would fail on as an AttributeError far from the call."""
    if getattr(response, "body", _NO_BODY) is None:
        raise MalformedAnswer("MalformedAnswer", "the answer's body is not a JSON object")
    return response


def _request_id(response: object) -> str | None:
    body = getattr(response, "body", None)
    rid = getattr(body, "request_id", None)
    if rid is None and isinstance(body, dict):
        rid = body.get("RequestId")
    return rid
