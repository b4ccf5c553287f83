"""Clocks for the fake cloud: a manual one for tests and the simulator, a scaled real-time one for the server.

Any object with ``now() -> datetime`` (timezone-aware) can drive the fake; ``advance(seconds)`` is optional
and only needed when the fake itself is asked to move time (``FakeCloud.advance``)."""

from __future__ import annotations

import math
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime: ...


def _checked_step(seconds: float) -> timedelta:
    """``seconds`` as a step forward, refused (ValueError) unless it is finite and not negative: a clock that
    took NaN or infinity would answer every later ``now()`` with an error."""
    if not math.isfinite(seconds):
        raise ValueError(f"cannot move the clock by {seconds} s: not a finite number")
    if seconds < 0:
        raise ValueError(f"cannot move the clock backwards ({seconds} s)")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"cannot move the clock by {seconds} s: too far") from None


def _moved(now: datetime, step: timedelta) -> datetime:
    try:
        return now + step
    except OverflowError:
        raise ValueError(f"cannot move the clock {step} past {now.isoformat()}: beyond year 9999") from None


class ManualClock:
    """A clock that only moves when told to (``advance``): deterministic tests and simulation."""

    def __init__(self, start: datetime | None = None) -> None:
        start = start if start is not None else datetime.now(UTC)
        if start.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start time")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        """Move forward by ``seconds``; a refused step (ValueError) leaves the clock where it was."""
        step = _checked_step(seconds)
        with self._lock:
            self._now = _moved(self._now, step)
            return self._now

    def set(self, when: datetime) -> None:
        """Jump forward to ``when`` (never backwards: timers already fired cannot be undone)."""
        with self._lock:
            when = when.astimezone(UTC)
            if when < self._now:
                raise ValueError(f"cannot move the clock backwards to {when.isoformat()}")
            self._now = when


class ScaledClock:
    """Real time multiplied by ``time_scale``, plus any explicit advances (the server's clock)."""

    def __init__(self, time_scale: float = 1.0, start: datetime | None = None) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be positive, got {time_scale}")
        self.time_scale = time_scale
        self._start = (start or datetime.now(UTC)).astimezone(UTC)
        self._t0 = time.monotonic()
        self._offset_s = 0.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        elapsed_s = (time.monotonic() - self._t0) * self.time_scale
        return self._start + timedelta(seconds=elapsed_s + self._offset_s)

    def advance(self, seconds: float) -> datetime:
        """Move forward by ``seconds``; a refused step (ValueError) leaves the clock where it was. The new
        time is computed before the offset changes, so an overflow cannot break every later ``now()``."""
        step = _checked_step(seconds)
        with self._lock:
            _moved(self.now(), step)
            self._offset_s += seconds
        return self.now()
