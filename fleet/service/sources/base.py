"""The metric source seam: where the Observer reads one canonical policy metric for a group's instances.

A source answers with ``fleet.cloud.types.MetricPoint`` rows, one per instance or one per GPU (``gpu`` in the
dimensions), each stamped with when it was measured, so that the Observer's reduction (worst GPU, OR of
throttle bits), its staleness tracking and the policies' "unknown is never zero" apply to every source alike.
An instance without a point is unknown. A failed read raises a ``fleet.cloud.errors.CloudError`` (its
subclasses ``NetworkError``, ``ServerError`` or ``InvalidRequest`` for a source that is not a cloud API),
which the Observer records and counts by code as it does every cloud error, and the tick goes on. Anything
else a read raises is a bug in the source: the Observer fails that read alone the same way (code
``Source.UnexpectedError``; one line at error, the traceback at debug), never the other groups or metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from fleet.cloud.types import MetricPoint


@runtime_checkable
class MetricSource(Protocol):
    """Reads canonical per-instance metrics (``policies.metrics.INSTANCE_METRICS``) for a set of instances."""

    kind: str  # "cloudmonitor" or "prometheus": for logs and status

    def describe(self, canonical: str) -> str:
        """What this source reads for ``canonical`` (a cloud metric name or a PromQL expression), for logs."""
        ...

    def read_last(self, canonical: str, instance_ids: Sequence[str]) -> list[MetricPoint]:
        """The newest point(s) of ``canonical`` for each of ``instance_ids`` that has one."""
        ...

    def take_warnings(self, canonical: str) -> list[str]:
        """What the source warned of in this thread's last read of ``canonical`` though it answered (one line
        each: Prometheus' ``warnings``), shown with the group's warnings in /status; cleared once taken."""
        ...

    def read_range(
        self, canonical: str, instance_ids: Sequence[str], start: datetime, end: datetime, step_s: int = 15
    ) -> list[MetricPoint]:
        """Every point of ``canonical`` in [start, end] at ``step_s`` resolution (history, diagnosis)."""
        ...
