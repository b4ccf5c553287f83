"""Fixtures for the adapter tests: the real SDK clients, their HTTP answered by `responses` stubs.

`stub` routes each request by its `x-acs-action` header to a handler that sees the flattened query parameters
and returns a body (HTTP 200) or `reply(status, body, headers)`. Every call is recorded, so tests can assert
on exactly what went over the wire.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import responses

from fleet.cloud import RetryPolicy, make_clients
from fleet.cloud.clients import CloudClients

REGION = "cn-chengdu"
ACCOUNT = "1234567890"
HOSTS = {
    "ess": "ess.cn-chengdu.aliyuncs.com",
    "cms": "metrics.cn-chengdu.aliyuncs.com",
    "ecs": "ecs.cn-chengdu.aliyuncs.com",
}


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class Raw(str):
    """A body sent as it is, not as JSON (an empty or cut-off answer)."""


def reply(status: int, body: Any, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, body, headers or {})


def error(
    status: int, code: str, message: str = "stubbed failure", request_id: str = "RID-ERR", **headers: str
):
    return Reply(status, {"RequestId": request_id, "Code": code, "Message": message}, dict(headers))


@dataclass
class Call:
    action: str
    host: str
    params: dict[str, str]
    headers: dict[str, str]


Handler = Callable[[dict[str, str]], Any]


class Stub:
    """Answers SDK requests by Action; unknown Actions fail the test loudly."""

    def __init__(self, rsps: responses.RequestsMock):
        self.handlers: dict[str, Handler | list[Any]] = {}
        self.calls: list[Call] = []
        for host in HOSTS.values():
            rsps.add_callback(
                responses.POST, re.compile(rf"https://{re.escape(host)}/.*"), callback=self._answer
            )

    def on(self, action: str, handler: Handler | Any) -> None:
        """Answer `action` with handler(params), or with a fixed answer."""
        self.handlers[action] = handler

    def sequence(self, action: str, *answers: Any) -> None:
        self.handlers[action] = list(answers)

    def calls_of(self, action: str) -> list[Call]:
        return [c for c in self.calls if c.action == action]

    def _answer(self, request: Any) -> tuple[int, dict[str, str], str]:
        import json

        parts = urlsplit(request.url)
        params = dict(parse_qsl(parts.query, keep_blank_values=True))
        action = request.headers["x-acs-action"]
        self.calls.append(Call(action, parts.hostname or "", params, dict(request.headers)))
        handler = self.handlers.get(action)
        if handler is None:
            result: Any = error(400, "NotImplemented", f"no stub for {action}")
        elif isinstance(handler, list):
            result = handler.pop(0) if len(handler) > 1 else handler[0]
        elif callable(handler):
            result = handler(params)
        else:
            result = handler
        if isinstance(result, BaseException):
            raise result
        if not isinstance(result, Reply):
            result = Reply(200, result)
        body = dict(result.body) if isinstance(result.body, dict) else result.body
        if isinstance(body, dict):
            body.setdefault("RequestId", f"RID-{action}-{len(self.calls)}")
        text = body if isinstance(body, Raw) else json.dumps(body)
        return result.status, {"content-type": "application/json", **result.headers}, text


class Sleeps(list):
    """An injectable sleep that records instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def fast_retry(sleeps: Sleeps) -> RetryPolicy:
    return RetryPolicy(attempts=4, initial_s=0.001, max_s=0.004, sleep=sleeps)


@pytest.fixture
def stub():
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        yield Stub(rsps)


@pytest.fixture
def clients(stub: Stub, fast_retry: RetryPolicy, tmp_path) -> CloudClients:
    env = {
        "ALIBABA_CLOUD_ACCESS_KEY_ID": "LTAI-test-key-id",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "test-secret-not-logged",
        "HOME": str(tmp_path),
    }
    return make_clients(REGION, ACCOUNT, retry=fast_retry, env=env)
