"""Timers on the fake's clock: boot completion, reboot stages, scheduled tasks, rule evaluations.

Timers fire lazily (on every request and on ``advance``), in time order; each callback receives the time it
was due at, so records carry the due time rather than the moment somebody happened to look."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(order=True)
class _Timer:
    due_s: float
    seq: int
    callback: Callable[[float], None] = field(compare=False)
    label: str = field(compare=False, default="")
    cancelled: bool = field(compare=False, default=False)


class TimerQueue:
    def __init__(self) -> None:
        self._heap: list[_Timer] = []
        self._seq = itertools.count()

    def schedule(self, due_s: float, callback: Callable[[float], None], label: str = "") -> _Timer:
        timer = _Timer(due_s, next(self._seq), callback, label)
        heapq.heappush(self._heap, timer)
        return timer

    def run_due(self, now_s: float, at_time: Callable[[float | None], None] | None = None) -> int:
        """Fire every timer due at or before ``now_s`` in order (timers may schedule more); return how many.

        ``at_time`` is told each due time before its callback runs (and None at the end), so that work a
        callback starts is timed from when it was due, not from ``now_s``.
        """
        fired = 0
        try:
            while self._heap and self._heap[0].due_s <= now_s:
                timer = heapq.heappop(self._heap)
                if timer.cancelled:
                    continue
                if at_time is not None:
                    at_time(timer.due_s)
                timer.callback(timer.due_s)
                fired += 1
        finally:
            if at_time is not None:
                at_time(None)
        return fired

    def pending(self) -> list[tuple[float, str]]:
        return sorted((t.due_s, t.label) for t in self._heap if not t.cancelled)

    def clear(self) -> None:
        self._heap.clear()
