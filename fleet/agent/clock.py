"""The agent's notion of time: an injected AgentClock, and the guard that turns wall-clock readings into
timestamps.

The agent never reads ``time`` directly: it is given an :class:`AgentClock` (the real one in production, a
manual one in tests) so that periods, percentile windows and skew repair are testable without sleeping.

Clock skew policy (documented in docs/agent.md): a sample is stamped with the local wall clock when the wall
clock agrees with the monotonic clock's account of how much time has passed since the last trusted reading.
When the two disagree by more than ``max_skew_s`` (a step of the wall clock: a VM resumed with a stale clock,
an RTC reset to 1970, an operator's ``date -s``), the sample is stamped from the monotonic clock instead,
counted as a repair, and the wall clock is accepted again only after it has held its new offset for
``reanchor_after`` consecutive samples (so a real NTP correction wins after about a minute, a clock that
jitters wildly never does). A wall clock before ``PLAUSIBLE_FLOOR_S`` is never trusted; until a plausible
reading has been seen there is nothing to derive a timestamp from, and the guard says so (``None``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

# 2024-01-01T00:00:00Z: no sample this agent takes can be older than the code that takes it.
PLAUSIBLE_FLOOR_S = 1_704_067_200.0
# 2100-01-01T00:00:00Z: a clock this far ahead is broken, not early.
PLAUSIBLE_CEILING_S = 4_102_444_800.0


class AgentClock(Protocol):
    """Time as the agent sees it."""

    def time(self) -> float:
        """Wall-clock seconds since the Unix epoch (may jump)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never go backwards."""
        ...

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        """Wait up to ``seconds`` or until ``stop`` is set; return whether ``stop`` is set."""
        ...


class SystemClock:
    """The real clock."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        return stop.wait(max(0.0, seconds))


class ManualAgentClock:
    """A clock that moves only when told (or when waited on), for tests and simulation."""

    def __init__(self, wall_s: float = 1_767_225_600.0, monotonic_s: float = 1000.0) -> None:
        self.wall_s = wall_s
        self.monotonic_s = monotonic_s

    def time(self) -> float:
        return self.wall_s

    def monotonic(self) -> float:
        return self.monotonic_s

    def advance(self, seconds: float) -> None:
        """Move both clocks forward together."""
        self.wall_s += seconds
        self.monotonic_s += seconds

    def step_wall(self, seconds: float) -> None:
        """Jump only the wall clock (skew), as an NTP step or a broken RTC would."""
        self.wall_s += seconds

    def wait(self, stop: threading.Event, seconds: float) -> bool:
        if not stop.is_set():
            self.advance(max(0.0, seconds))
        return stop.is_set()


@dataclass
class StampResult:
    """A timestamp for one sample and what the guard made of the wall clock."""

    timestamp_ms: int | None
    source: str  # "wall", "monotonic" (repaired) or "none" (no plausible wall clock seen yet)
    wall_skew_s: float  # wall clock minus the monotonic-derived estimate (0 when none)


class TimestampGuard:
    """Stamps samples from the wall clock, repairing absurd values from the monotonic clock."""

    def __init__(self, max_skew_s: float = 30.0, reanchor_after: int = 4) -> None:
        self.max_skew_s = max_skew_s
        self.reanchor_after = reanchor_after
        self._anchor: tuple[float, float] | None = None  # (wall_s, monotonic_s) last trusted together
        self._pending_offset_s: float | None = None
        self._pending_count = 0
        self.repairs = 0

    def stamp(self, wall_s: float, monotonic_s: float) -> StampResult:
        plausible = PLAUSIBLE_FLOOR_S <= wall_s < PLAUSIBLE_CEILING_S
        if self._anchor is None:
            if not plausible:
                self.repairs += 1
                return StampResult(None, "none", 0.0)
            self._anchor = (wall_s, monotonic_s)
            return StampResult(int(wall_s * 1000), "wall", 0.0)

        anchor_wall_s, anchor_mono_s = self._anchor
        estimate_s = anchor_wall_s + (monotonic_s - anchor_mono_s)
        skew_s = wall_s - estimate_s
        if plausible and abs(skew_s) <= self.max_skew_s:
            self._anchor = (wall_s, monotonic_s)
            self._pending_offset_s, self._pending_count = None, 0
            return StampResult(int(wall_s * 1000), "wall", skew_s)

        # The wall clock stepped. Keep counting from the monotonic clock, but if the new offset holds
        # steady for long enough, it was a correction (NTP) rather than a fault: accept it.
        if plausible:
            if self._pending_offset_s is not None and abs(skew_s - self._pending_offset_s) <= self.max_skew_s:
                self._pending_count += 1
            else:
                self._pending_offset_s, self._pending_count = skew_s, 1
            if self._pending_count >= self.reanchor_after:
                self._anchor = (wall_s, monotonic_s)
                self._pending_offset_s, self._pending_count = None, 0
                return StampResult(int(wall_s * 1000), "wall", skew_s)
        self.repairs += 1
        return StampResult(int(estimate_s * 1000), "monotonic", skew_s)
