"""``mock_aliyun``: the fake cloud in-process, intercepting the official SDKs' HTTP with ``responses``.

Every request the SDKs send through ``requests`` reaches the fake; a request the fake does not know (another
product, another host, an unfaked Action) is answered with a loud ``NotImplemented`` error, so nothing reaches
the network. ``passthrough`` lists URL prefixes to let through (e.g. a local test server)."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import responses

from fleet.testing.cloud import DEFAULT_ACCOUNT_ID, FakeCloud
from fleet.testing.core.clock import Clock, ManualClock

F = TypeVar("F", bound=Callable[..., Any])
_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")
_KEEP_CALLS = 1000  # responses records every call; keep memory flat over long simulations


class mock_aliyun:  # noqa: N801 - named like moto's mock_* helpers, used as a context manager and a decorator
    """``with mock_aliyun() as cloud:`` or ``@mock_aliyun()``; ``cloud`` is the :class:`FakeCloud`.

    The clock is a :class:`ManualClock` starting at ``start`` (default: the current UTC time) unless ``clock``
    (any object with ``now()``) is given. Extra keyword arguments go to :class:`FakeCloud` (``stop_seconds``,
    ``removal_seconds``, ``metric_retention_s``, ``sleep_latency``).
    """

    def __init__(
        self,
        boot_seconds: float = 30.0,
        seed: int = 0,
        account_id: str = DEFAULT_ACCOUNT_ID,
        start: datetime | None = None,
        clock: Clock | None = None,
        passthrough: Sequence[str] = (),
        **cloud_options: Any,
    ) -> None:
        self.boot_seconds = boot_seconds
        self.seed = seed
        self.account_id = account_id
        self.start = start
        self.clock = clock
        self.passthrough = tuple(passthrough)
        self.cloud_options = cloud_options
        self.cloud: FakeCloud | None = None
        self._mock: responses.RequestsMock | None = None

    def __enter__(self) -> FakeCloud:
        clock = self.clock if self.clock is not None else ManualClock(self.start)
        cloud = FakeCloud(
            clock=clock,
            boot_seconds=self.boot_seconds,
            seed=self.seed,
            account_id=self.account_id,
            **self.cloud_options,
        )
        mock = responses.RequestsMock(assert_all_requests_are_fired=False)
        for prefix in self.passthrough:
            mock.add_passthru(prefix)

        def callback(request: Any) -> tuple[int, dict[str, str], str]:
            if len(mock.calls) > _KEEP_CALLS:
                mock.calls.reset()
            return cloud.handle(request.method, request.url, dict(request.headers), request.body)

        # responses lets a request through only when nothing matches it, so the catch-all must not match the
        # passthrough prefixes (a negative lookahead), or they would be answered by the fake.
        skip = "|".join(re.escape(prefix) for prefix in self.passthrough)
        catch_all = re.compile(rf"^(?!(?:{skip})).*" if skip else r".*")
        for method in _METHODS:
            mock.add_callback(method, catch_all, callback=callback)
        mock.start()
        self.cloud, self._mock = cloud, mock
        return cloud

    def __exit__(self, *exc: object) -> None:
        if self._mock is not None:
            self._mock.stop()
            self._mock.reset()
        self._mock = None

    def __call__(self, func: F) -> F:
        options = dict(
            boot_seconds=self.boot_seconds,
            seed=self.seed,
            account_id=self.account_id,
            start=self.start,
            clock=self.clock,
            passthrough=self.passthrough,
            **self.cloud_options,
        )
        if inspect.iscoroutinefunction(func):
            raise TypeError("mock_aliyun does not decorate coroutines; use it as a context manager inside")

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with mock_aliyun(**options):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]  # functools.wraps keeps func's signature; mypy sees (*args)
