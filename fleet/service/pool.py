"""Bounded, rate-limited concurrency for the observation's cloud reads: one pool per product.

A tick's reads that cannot be batched into one call (a group's scaling instances, its activities, the pages of
different metrics) run concurrently, so a tick's wall time is bounded by the slowest product's share rather
than by the sum of every call's latency. Each product gets its own bounded thread pool and a token bucket
that keeps the request rate within what the account may send: CloudMonitor documents at most 50 calls per
second per API and account (aliyun-api.md section 2); ESS and ECS publish no figure, so they get the same.
Throttling that still happens is retried by the adapters (``fleet.cloud.retry``) as before.

Work runs in a copy of the caller's context (``contextvars``), so the per-tick call counter of
``fleet.cloud.retry.count_calls`` sees the calls made on worker threads.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Requests per second and worker threads per product. CMS: 50/s per API per account [DOC], kept below it
# because other tools of the account share the budget.
DEFAULT_RATES_PER_S: dict[str, float] = {"cms": 40.0, "ess": 40.0, "ecs": 40.0}
DEFAULT_WORKERS = 8


class TokenBucket:
    """At most ``rate_per_s`` acquisitions per second on average, bursts up to ``burst``; clock injectable."""

    def __init__(
        self,
        rate_per_s: float,
        burst: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not rate_per_s > 0:
            raise ValueError(f"rate_per_s must be positive, got {rate_per_s}")
        self.rate_per_s = float(rate_per_s)
        self.burst = float(burst if burst is not None else max(1.0, rate_per_s / 4))
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.burst
        self._at = clock()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        while True:
            with self._lock:
                now = self._clock()
                self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate_per_s)
                self._at = now
                if self._tokens >= 1.0 - 1e-9:  # tolerance: float refills land just under 1
                    self._tokens = max(0.0, self._tokens - 1.0)
                    return
                wait_s = (1.0 - self._tokens) / self.rate_per_s
            self._sleep(wait_s)


@dataclass
class ProductPool:
    """One product's workers and rate limit."""

    product: str
    workers: int
    bucket: TokenBucket
    _executor: ThreadPoolExecutor | None = field(default=None, repr=False)

    def executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=self.workers, thread_name_prefix=f"fleet-{self.product}"
            )
        return self._executor

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


class CallPools:
    """``run(product, fn, items)``: fn over items on that product's pool; results (or raised errors) in order.

    Each call of ``fn`` acquires one token first; ``fn`` making several wire requests (paging) counts as one
    here and the adapters' retries absorb the rest. ``workers=1`` runs inline (no threads), as in tests.
    """

    def __init__(
        self,
        rates_per_s: dict[str, float] | None = None,
        workers: int = DEFAULT_WORKERS,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rate_limited: bool = True,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        rates = {**DEFAULT_RATES_PER_S, **(rates_per_s or {})}
        self.workers = workers
        # False where the cloud has no request budget and no wall time passes (the simulator's in-process
        # fake): a wall-clock bucket there only sleeps, stretching a simulated day by minutes.
        self.rate_limited = rate_limited
        self._pools = {
            product: ProductPool(product, workers, TokenBucket(rate, clock=clock, sleep=sleep))
            for product, rate in rates.items()
        }

    def run(self, product: str, fn: Callable[[T], R], items: Iterable[T]) -> list[R | Exception]:
        pool = self._pools[product]
        work = list(items)

        def limited(item: T) -> R:
            if self.rate_limited:
                pool.bucket.acquire()
            return fn(item)

        if self.workers == 1 or len(work) <= 1:
            return [_capture(limited, item) for item in work]
        futures: list[Future[R]] = [
            pool.executor().submit(contextvars.copy_context().run, limited, item) for item in work
        ]
        out: list[R | Exception] = []
        for fut in futures:
            try:
                out.append(fut.result())
            except Exception as exc:  # handed back to the caller, who knows which failures it expects
                out.append(exc)
        return out

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()


def _capture(fn: Callable[[T], R], item: T) -> R | Exception:
    try:
        return fn(item)
    except Exception as exc:  # see CallPools.run
        return exc
