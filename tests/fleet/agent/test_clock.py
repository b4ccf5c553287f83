"""TimestampGuard: trust a sane wall clock, repair steps from the monotonic clock, accept corrections."""

from __future__ import annotations

from fleet.agent.clock import ManualAgentClock, TimestampGuard

NOW_S = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def stamp(guard: TimestampGuard, clock: ManualAgentClock):
    return guard.stamp(clock.time(), clock.monotonic())


def test_sane_wall_clock_is_used_as_is():
    clock, guard = ManualAgentClock(NOW_S), TimestampGuard()
    first = stamp(guard, clock)
    clock.advance(15)
    second = stamp(guard, clock)
    assert (first.source, second.source) == ("wall", "wall")
    assert second.timestamp_ms == int((NOW_S + 15) * 1000)


def test_forward_jump_is_repaired_from_the_monotonic_clock():
    clock, guard = ManualAgentClock(NOW_S), TimestampGuard(max_skew_s=30)
    stamp(guard, clock)
    clock.advance(15)
    clock.step_wall(86_400 * 365)  # a year ahead
    result = stamp(guard, clock)
    assert result.source == "monotonic"
    assert result.timestamp_ms == int((NOW_S + 15) * 1000)
    assert guard.repairs == 1


def test_reset_to_1970_is_repaired():
    clock, guard = ManualAgentClock(NOW_S), TimestampGuard()
    stamp(guard, clock)
    clock.advance(15)
    clock.wall_s = 0.0
    result = stamp(guard, clock)
    assert result.source == "monotonic" and result.timestamp_ms == int((NOW_S + 15) * 1000)


def test_implausible_clock_at_start_gives_no_timestamp():
    result = stamp(TimestampGuard(), ManualAgentClock(wall_s=86_400.0))  # 1970-01-02
    assert result.timestamp_ms is None and result.source == "none"


def test_steady_new_offset_is_accepted_as_a_correction():
    clock, guard = ManualAgentClock(NOW_S), TimestampGuard(max_skew_s=30, reanchor_after=4)
    stamp(guard, clock)
    clock.step_wall(-300)  # NTP steps the clock back five minutes, and it stays there
    sources = []
    for _ in range(4):
        clock.advance(15)
        sources.append(stamp(guard, clock).source)
    assert sources == ["monotonic", "monotonic", "monotonic", "wall"]
    clock.advance(15)
    assert stamp(guard, clock).timestamp_ms == int(clock.time() * 1000)


def test_small_drift_within_tolerance_is_not_a_repair():
    clock, guard = ManualAgentClock(NOW_S), TimestampGuard(max_skew_s=30)
    stamp(guard, clock)
    clock.advance(15)
    clock.step_wall(2.0)
    assert stamp(guard, clock).source == "wall" and guard.repairs == 0
