"""Schedule windows: which are active at an instant, and the floor and ceiling they impose.

Floors start ``lead_s`` early (the group's cold start: an instance ordered at the window's start would serve
only cold_start_s later). Ceilings apply only while the window itself is active, never early. Overlapping
windows: the highest floor wins; the lowest ceiling wins, but a ceiling never goes below the effective floor
(the floor is the promise, the ceiling a cost cap).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from croniter import croniter

from policies.spec import GroupSpec, Schedule


@dataclass(frozen=True)
class Window:
    schedule: str
    start: datetime
    end: datetime


def windows_between(schedule: Schedule, start: datetime, end: datetime) -> list[Window]:
    """Occurrences of ``schedule`` overlapping [start, end) (aware datetimes, any zone)."""
    zone = schedule.zone
    out: list[Window] = []
    if schedule.cron is not None:
        duration = timedelta(seconds=schedule.duration_s or 0.0)
        # first fire that could still be active at ``start``
        base = (start - duration).astimezone(zone) - timedelta(seconds=1)
        it = croniter(schedule.cron, base)
        for _ in range(10_000):  # a bound, not an expectation: minutely crons over long spans
            fire = it.get_next(datetime)
            if fire >= end:
                break
            w_end = fire + duration
            if w_end > start:
                out.append(Window(schedule.name, fire, w_end))
        return out
    assert schedule.start is not None and schedule.end is not None
    first = (start.astimezone(zone) - timedelta(days=1)).date()
    last = end.astimezone(zone).date()
    day = first
    while day <= last:
        if day.weekday() in schedule.weekdays:
            w_start = datetime.combine(day, schedule.start, tzinfo=zone)
            end_day = day if schedule.end > schedule.start else day + timedelta(days=1)
            w_end = datetime.combine(end_day, schedule.end, tzinfo=zone)
            if w_start < end and w_end > start:
                out.append(Window(schedule.name, w_start, w_end))
        day += timedelta(days=1)
    return out


def is_active(schedule: Schedule, at: datetime, lead_s: float = 0.0) -> bool:
    """Whether a window of ``schedule`` is active at ``at`` or starts within ``lead_s`` after it."""
    horizon = at + timedelta(seconds=lead_s)
    return any(
        w.start <= horizon and w.end > at for w in windows_between(schedule, at, horizon + timedelta(0, 1))
    )


@dataclass(frozen=True)
class Bounds:
    floor: int
    ceiling: int
    floor_source: str  # "min_size", "warm_floor" or "schedule:<name>"
    ceiling_source: str  # "max_size" or "schedule:<name>"
    active: tuple[str, ...]  # schedules whose floor applies (including by lead time)
    ceiling_clipped: bool  # a schedule ceiling was below the floor and was raised to it


def bounds(spec: GroupSpec, at: datetime) -> Bounds:
    """The effective floor and ceiling of a group at ``at``."""
    floor, floor_source = spec.min_size, "min_size"
    if spec.warm_floor > floor:
        floor, floor_source = spec.warm_floor, "warm_floor"
    active: list[str] = []
    ceiling, ceiling_source = spec.max_size, "max_size"
    for sched in spec.schedules:
        if is_active(sched, at, spec.cold_start_s):
            active.append(sched.name)
            if sched.floor > floor:
                floor, floor_source = sched.floor, f"schedule:{sched.name}"
        if sched.ceiling is not None and sched.ceiling < ceiling and is_active(sched, at, 0.0):
            ceiling, ceiling_source = sched.ceiling, f"schedule:{sched.name}"
    floor = min(floor, spec.max_size)
    clipped = ceiling < floor
    if clipped:
        ceiling = floor
    return Bounds(floor, ceiling, floor_source, ceiling_source, tuple(active), clipped)
