"""Publishing samples to CloudMonitor custom metrics, with a bounded buffer for when CMS says no.

Each period's points join the back of a buffer and the buffer is flushed from the front (oldest first), in
batches of at most 21 (PutCustomMetric's MetricList limit, ../shared/reference/aliyun-api.md section 2). When
a batch fails for a reason that may pass (throttling, 5xx, no answer, an expired STS token), the flush stops
and the rest waits for the next period; so a throttled agent retries once a period rather than hammering CMS.
A batch that CMS refuses as invalid is dropped and counted (retrying it can never succeed). The buffer holds
at most ``max_buffered_points``: beyond that the oldest points are dropped and counted, because after a long
outage the newest readings are the ones a scaler can still use.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol

from fleet.agent.sample import Point, PublishStatus
from fleet.cloud.errors import CloudError, IdempotencyMismatch, InvalidRequest, NotFound
from fleet.cloud.types import CustomMetric

log = logging.getLogger("fleet.agent")

PUT_CUSTOM_METRIC_BATCH = 21  # PutCustomMetric MetricList.N, N <= 21 (aliyun-api.md section 2)
# 20k points is about 50 minutes of an 8-GPU instance's samples at 15 s, and a few MiB of memory.
DEFAULT_MAX_BUFFERED_POINTS = 20_000
# A backlog drains at most this many batches per period, so one flush cannot eat the whole period.
DEFAULT_MAX_BATCHES_PER_FLUSH = 20

# Refusals that no retry can fix: the batch is dropped.
_PERMANENT_ERRORS: tuple[type[CloudError], ...] = (InvalidRequest, NotFound, IdempotencyMismatch)


class CustomMetricSink(Protocol):
    """The one CMS call the agent needs (``fleet.cloud.cms.CmsAdapter`` satisfies it)."""

    def put_custom_metrics(self, metrics: Sequence[CustomMetric]) -> None: ...


def to_custom_metric(point: Point) -> CustomMetric:
    return CustomMetric(
        name=point.name,
        dimensions=dict(point.dimensions),
        value=point.value,
        timestamp=datetime.fromtimestamp(point.timestamp_ms / 1000.0, UTC),
        group_id="0",  # GroupId 0: not tied to a CMS application group (brief contract)
    )


class CmsPublisher:
    """Buffers points and sends them to CMS oldest first; never raises into the agent loop."""

    def __init__(
        self,
        sink: CustomMetricSink,
        *,
        max_buffered_points: int = DEFAULT_MAX_BUFFERED_POINTS,
        max_batches_per_flush: int = DEFAULT_MAX_BATCHES_PER_FLUSH,
        batch_size: int = PUT_CUSTOM_METRIC_BATCH,
    ) -> None:
        if max_buffered_points < 1 or batch_size < 1 or max_batches_per_flush < 1:
            raise ValueError("publisher bounds must be >= 1")
        self._sink = sink
        self.max_buffered_points = max_buffered_points
        self.max_batches_per_flush = max_batches_per_flush
        self.batch_size = batch_size
        self._buffer: deque[Point] = deque()
        self.dropped_points_total = 0
        self.rejected_points_total = 0
        self.sent_points_total = 0
        self.last_error: str | None = None

    @property
    def buffered_points(self) -> int:
        return len(self._buffer)

    def publish(self, points: Sequence[Point]) -> PublishStatus:
        """Queue this period's points and flush what CMS will take; report what happened."""
        self._buffer.extend(points)
        overflow = len(self._buffer) - self.max_buffered_points
        if overflow > 0:
            for _ in range(overflow):
                self._buffer.popleft()
            self.dropped_points_total += overflow
            log.warning(
                "cms buffer full: dropped the %d oldest points (%d in all)",
                overflow,
                self.dropped_points_total,
            )
        sent = self.flush()
        return PublishStatus(
            enabled=True,
            sent_points=sent,
            buffered_points=len(self._buffer),
            dropped_points_total=self.dropped_points_total,
            rejected_points_total=self.rejected_points_total,
            last_error=self.last_error,
        )

    def flush(self) -> int:
        """Send buffered points oldest first until the buffer is empty, CMS refuses, or the per-flush cap."""
        sent = 0
        for _ in range(self.max_batches_per_flush):
            if not self._buffer:
                break
            batch = [self._buffer[i] for i in range(min(self.batch_size, len(self._buffer)))]
            try:
                self._sink.put_custom_metrics([to_custom_metric(p) for p in batch])
            except _PERMANENT_ERRORS as exc:
                self._drop_front(len(batch))
                self.rejected_points_total += len(batch)
                self.last_error = str(exc)
                log.error("cms refused %d points, dropped: %s", len(batch), exc)
                continue
            except Exception as exc:  # noqa: BLE001 - throttling, 5xx, network, auth: keep and retry later
                self.last_error = str(exc) or type(exc).__name__
                log.warning(
                    "cms publish deferred (%d points buffered): %s", len(self._buffer), self.last_error
                )
                break
            self._drop_front(len(batch))
            sent += len(batch)
            self.sent_points_total += len(batch)
            self.last_error = None
        return sent

    def _drop_front(self, n: int) -> None:
        for _ in range(n):
            self._buffer.popleft()
