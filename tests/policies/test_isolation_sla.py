"""The SLA rules for the response and isolate clocks, which the SLA report and the simulator's incident list
share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from policies.isolation.sla import isolate_breached, respond_breached

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
DEADLINE = T0 + timedelta(minutes=15)


def _at(minutes: float | None) -> datetime | None:
    return None if minutes is None else T0 + timedelta(minutes=minutes)


@pytest.mark.parametrize(
    ("responded_min", "closed_min", "now_min", "breached"),
    [
        (5, None, 60, False),  # responded in time
        (20, None, 60, True),  # responded late
        (None, 10, 60, False),  # closed before the deadline: no response was needed
        (None, 20, 60, True),  # still open and unanswered when the deadline passed
        (None, None, 10, False),  # open, unanswered, the deadline not reached yet
        (None, None, 15, False),  # exactly at the deadline: not yet past it
        (None, None, 16, True),  # open and unanswered past it
        (20, 10, 60, False),  # closed in time; a later acknowledgment changes nothing
        (5, 30, 60, False),  # responded in time, closed later
    ],
)
def test_the_response_clock_stops_at_the_first_response_or_the_close(
    responded_min, closed_min, now_min, breached
):
    got = respond_breached(DEADLINE, _at(responded_min), _at(closed_min), _at(now_min) or T0)
    assert got is breached


ISOLATE_BY = T0 + timedelta(hours=4)


@pytest.mark.parametrize(
    ("isolated_min", "closed_min", "now_min", "breached"),
    [
        (30, None, 600, False),  # isolated in time
        (300, None, 600, True),  # isolated late
        (None, 60, 600, False),  # recovered (closed) before the deadline, never isolated
        (None, 300, 600, True),  # in traffic past the deadline, then recovered: the live clock warned then
        (None, None, 120, False),  # open, not isolated, the deadline not reached yet
        (None, None, 241, True),  # open and in traffic past it
        (30, 300, 600, False),  # isolated in time, closed (rebooted, released) later
        (None, 240, 600, False),  # closed exactly at the deadline: not past it
    ],
)
def test_the_isolate_clock_stops_at_the_isolation_or_the_close(isolated_min, closed_min, now_min, breached):
    got = isolate_breached(ISOLATE_BY, _at(isolated_min), _at(closed_min), _at(now_min) or T0)
    assert got is breached
