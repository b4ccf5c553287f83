"""Schedule windows: which are active at an instant, and the floor and ceiling they impose.

Floors start ``lead_s`` early (the group's cold start: an instance ordered at the window's start would serve
only cold_start_s later). Ceilings apply only while the window itself is active, never early. Overlapping
windows: the highest floor wins; the lowest ceiling wins, but a ceiling never goes below the effective floor
(the floor is the promise, the ceiling a cost cap).

Windows are computed as UTC instants, and every length and lead is elapsed time: in a zone with daylight
saving time an aware datetime in the zone adds and compares by its wall clock (03:00 less 3 minutes is 02:57,
which the spring-forward day skips, read an hour late), so nothing here does arithmetic in the zone.

A group's ``calendar`` (holidays, makeup workdays) changes the weekday a ``days`` window reads a date as, in
the schedule's own zone: on a holiday a ``mon-fri`` window stays closed, on a makeup Saturday it opens. A
window belongs to the day it starts on (a Friday 20:00-08:00 window is Friday's). A cron window that picks
days by weekday alone (day of month and month ``*``) fires on an exception day at the times it fires on the
weekday the day is read as; one that names days of the month or months follows its expression alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from policies.spec import Calendar, GroupSpec, Schedule, weekday_of


@dataclass(frozen=True)
class Window:
    schedule: str
    start: datetime
    end: datetime


def wall_start(day: date, clock: time, zone: ZoneInfo) -> datetime:
    """The UTC instant a window starting at ``clock`` on ``day`` opens: when the clock in ``zone`` first reads
    it (an 01:30 that the fall-back day shows twice opens at the first). A time the spring-forward day skips
    (02:30, when the clocks go from 02:00 to 03:00) opens at the jump, 03:00 new time, as cron starts the jobs
    of a skipped hour: Python reads it at the old offset, 03:30 new time, which would make the floor late."""
    naive = datetime.combine(day, clock)
    at = naive.replace(tzinfo=zone).astimezone(UTC)
    if at.astimezone(zone).replace(tzinfo=None) == naive:
        return at
    # skipped: the jump lies between the time read at the offset after it and the one before it
    lo, hi = sorted((at, naive.replace(tzinfo=zone, fold=1).astimezone(UTC)))
    while (hi - lo) > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if mid.astimezone(zone).replace(tzinfo=None) >= naive:
            hi = mid
        else:
            lo = mid
    return hi.replace(microsecond=0)


def day_window(schedule: Schedule, day: date) -> tuple[datetime, datetime]:
    """The UTC start and end of a ``days`` + ``start`` + ``end`` window on ``day`` (a local date; ``end``
    read as Python reads a local time: the first of a repeated one, at the old offset in a skipped one)."""
    assert schedule.start is not None and schedule.end is not None
    zone = schedule.zone
    end_day = day if schedule.end > schedule.start else day + timedelta(days=1)
    w_end = datetime.combine(end_day, schedule.end, tzinfo=zone).astimezone(UTC)
    return wall_start(day, schedule.start, zone), w_end


def windows_between(
    schedule: Schedule, start: datetime, end: datetime, calendar: Calendar | None = None
) -> list[Window]:
    """Occurrences of ``schedule`` overlapping [start, end) (aware datetimes, any zone), in UTC; a ``days``
    window opens on the dates whose weekday under ``calendar`` is one of its days.

    A cron window lasts ``duration`` of elapsed time, on a day with a daylight-saving change as on any other
    (the same length that decides how far back a still-open window can have started)."""
    zone = schedule.zone
    out: list[Window] = []
    if schedule.cron is not None:
        return _cron_windows(schedule, start, end, calendar if by_weekday(schedule.cron) else None)
    assert schedule.start is not None and schedule.end is not None
    first = (start.astimezone(zone) - timedelta(days=1)).date()
    last = end.astimezone(zone).date()
    day = first
    while day <= last:
        if weekday_of(calendar, day) in schedule.weekdays:
            w_start, w_end = day_window(schedule, day)
            if w_start < end and w_end > start:
                out.append(Window(schedule.name, w_start, w_end))
        day += timedelta(days=1)
    return out


def opened_by_calendar(schedule: Schedule, calendar: Calendar | None, day: date) -> bool:
    """Whether ``calendar`` opens a ``days`` window on ``day`` that its weekday does not (a ``mon-fri``
    window on a makeup Saturday, a ``sat,sun`` one on a holiday Wednesday): the days the service writes
    one-off ESS tasks for."""
    return (
        calendar is not None
        and day.weekday() not in schedule.weekdays
        and calendar.weekday_of(day) in schedule.weekdays
    )


def calendar_one_offs(
    schedule: Schedule, calendar: Calendar | None, now: datetime, lead_s: float, ahead_days: int
) -> list[tuple[date, datetime, datetime]]:
    """The days from yesterday to ``ahead_days`` ahead (dates in the schedule's own zone at ``now``) on which
    ``calendar`` opens the window its weekday does not (``opened_by_calendar``), each with the UTC instants of
    its window's start less ``lead_s`` and its end: the days the service writes one-off ESS tasks for. Past
    edges are kept: the caller drops those at or before ``now``."""
    if calendar is None or schedule.start is None or schedule.end is None:
        return []
    today = now.astimezone(schedule.zone).date()
    out = []
    for day in calendar.exception_days(today - timedelta(days=1), today + timedelta(days=ahead_days)):
        if opened_by_calendar(schedule, calendar, day):
            start, end = day_window(schedule, day)
            out.append((day, start - timedelta(seconds=lead_s), end))
    return out


# How far the recurring tasks' next launch is looked for past a run of days the calendar takes off.
SKIP_SEARCH_DAYS = 60


@dataclass(frozen=True)
class WeeklyRun:
    """A stretch of a window's weekly firings that the calendar leaves alone: one ESS Weekly task."""

    launch: datetime  # its first firing (whole minutes, in ``now``'s zone)
    day: date  # that firing's window's day, in the schedule's zone
    end: datetime | None  # its recurrence's end: a minute before a firing the calendar takes off; None: open


def _firings(
    schedule: Schedule,
    now: datetime,
    lead_s: float,
    at_end: bool,
    calendar: Calendar | None,
    ahead_days: int = 12 + SKIP_SEARCH_DAYS,
) -> list[tuple[datetime, date, bool]]:
    """Every firing after ``now`` of a window's start (less ``lead_s``) or end on the schedule's weekdays, for
    the coming weeks, rounded down to whole minutes (never late): its instant, its window's day, and whether
    the calendar keeps the window on that day (a ``mon-fri`` window's holiday does not)."""
    today = now.astimezone(schedule.zone).date()
    out = []
    for offset in range(-2, ahead_days):  # every weekday after ``now``, whatever the UTC shift
        day = today + timedelta(days=offset)
        if day.weekday() not in schedule.weekdays:
            continue
        w_start, w_end = day_window(schedule, day)
        at = w_end if at_end else w_start - timedelta(seconds=lead_s)
        edge = at.astimezone(now.tzinfo).replace(second=0, microsecond=0)
        if edge > now:
            out.append((edge, day, weekday_of(calendar, day) in schedule.weekdays))
    return out


def weekly_runs(
    schedule: Schedule,
    calendar: Calendar | None,
    now: datetime,
    lead_s: float,
    at_end: bool,
    cut_days: int,
) -> list[WeeklyRun]:
    """The Weekly tasks of a ``days`` window's start (less ``lead_s``) or end from ``now``: the first launches
    at the next firing the calendar keeps (past a run of days it takes off directly ahead, which needs no
    other task); when a firing the calendar takes off follows within ``cut_days`` (the window's days, in its
    zone), that task's recurrence ends a minute before it and another launches at the next kept firing after
    the run, and so on. The service writes one Weekly task for each (fleet/service/schedules.py), and
    ``fleet validate`` counts them against the scheduled-task quota."""
    firings = _firings(schedule, now, lead_s, at_end, calendar)
    assert firings, "a weekly window occurs within two weeks"
    kept = [k for k, f in enumerate(firings) if f[2]]
    # the regular next occurrence when the calendar keeps none in the span
    k = kept[0] if kept else 0
    last_day = now.astimezone(schedule.zone).date() + timedelta(days=cut_days)
    starts: list[int] = [k]
    ends: list[datetime | None] = [None]
    while k + 1 < len(firings) and firings[k + 1][1] <= last_day:
        k += 1
        if firings[k][2]:
            continue
        resume = next((j for j in kept if j > k), None)
        if resume is None:
            break
        ends[-1] = firings[k][0] - timedelta(minutes=1)
        starts.append(resume)
        ends.append(None)
        k = resume
    return [WeeklyRun(firings[j][0], firings[j][1], end) for j, end in zip(starts, ends, strict=True)]


def uncut_days(
    schedule: Schedule,
    calendar: Calendar | None,
    now: datetime,
    lead_s: float,
    cut_days: int,
    ahead_days: int,
) -> list[date]:
    """The days from today to ``ahead_days`` ahead (in the schedule's zone at ``now``) that ``calendar`` takes
    off a ``days`` window (a ``mon-fri`` window's holidays) on which the Weekly tasks of its start (less
    ``lead_s``) a sync at ``now`` writes (``weekly_runs`` cut ``cut_days`` ahead) still fire: the days that,
    with the service down from ``now``, ESS gives the window's floor."""
    if calendar is None or schedule.start is None or schedule.end is None:
        return []
    runs = weekly_runs(schedule, calendar, now, lead_s, False, cut_days)
    last = now.astimezone(schedule.zone).date() + timedelta(days=ahead_days)
    return [
        day
        for at, day, kept in _firings(schedule, now, lead_s, False, calendar, ahead_days + 3)
        if not kept and day <= last and any(r.launch <= at and (r.end is None or at <= r.end) for r in runs)
    ]


def weekdays_opened(schedule: Schedule) -> frozenset[int] | None:
    """The weekdays (Monday = 0) a window opens on, the ones a calendar's exception day can be read as; None
    for a cron window naming days of the month or months (the calendar leaves it alone)."""
    if schedule.cron is None:
        return frozenset(schedule.weekdays)
    if not by_weekday(schedule.cron):
        return None
    dow = croniter.expand(schedule.cron)[0][4]
    if "*" in dow:
        return frozenset(range(7))
    return frozenset((int(d) - 1) % 7 for d in dow)  # cron: Sunday = 0 (or 7)


def by_weekday(cron: str) -> bool:
    """Whether a cron expression picks its days by weekday alone (day of month and month ``*``): the days a
    calendar can re-type."""
    fields = cron.split()
    return len(fields) >= 5 and fields[2] == "*" and fields[3] == "*"


def _cron_windows(
    schedule: Schedule, start: datetime, end: datetime, calendar: Calendar | None
) -> list[Window]:
    """A cron window's occurrences overlapping [start, end): its fires, less those on the calendar's exception
    days, plus each exception day's fires at the wall times of the weekday it is read as."""
    assert schedule.cron is not None
    zone = schedule.zone
    duration = timedelta(seconds=schedule.duration_s or 0.0)
    first_s = (start - duration).astimezone(zone)  # the first fire that could still be active at ``start``
    exceptions: set[date] = set()
    if calendar is not None:
        exceptions = set(calendar.exception_days(first_s.date(), end.astimezone(zone).date()))
    fires = [
        f for f in _fires(schedule.cron, zone, first_s, end) if f.astimezone(zone).date() not in exceptions
    ]
    for day in sorted(exceptions):
        assert calendar is not None
        like = day + timedelta(days=(calendar.weekday_of(day) - day.weekday()) % 7)
        midnight = wall_start(like, time(0), zone)
        for fire in _fires(
            schedule.cron, zone, midnight, wall_start(like + timedelta(days=1), time(0), zone)
        ):
            fires.append(wall_start(day, fire.astimezone(zone).time(), zone))
    return [
        Window(schedule.name, fire, fire + duration)
        for fire in sorted(fires)
        if fire < end and fire + duration > start
    ]


def _fires(cron: str, zone: ZoneInfo, after: datetime, before: datetime) -> list[datetime]:
    """The fires of ``cron`` (read on ``zone``'s clock) from ``after`` (included) to ``before`` (excluded),
    in UTC."""
    it = croniter(cron, after.astimezone(zone) - timedelta(seconds=1))
    out = []
    for _ in range(10_000):  # a bound, not an expectation: minutely crons over long spans
        fire = it.get_next(datetime).astimezone(UTC)
        if fire >= before:
            break
        out.append(fire)
    return out


def is_active(
    schedule: Schedule, at: datetime, lead_s: float = 0.0, calendar: Calendar | None = None
) -> bool:
    """Whether a window of ``schedule`` is active at ``at`` or starts within ``lead_s`` after it."""
    horizon = at + timedelta(seconds=lead_s)
    windows = windows_between(schedule, at, horizon + timedelta(0, 1), calendar)
    return any(w.start <= horizon and w.end > at for w in windows)


@dataclass(frozen=True)
class Bounds:
    floor: int
    ceiling: int
    floor_source: str  # "min_size", "warm_floor" or "schedule:<name>"
    ceiling_source: str  # "max_size" or "schedule:<name>"
    active: tuple[str, ...]  # schedules whose floor applies (including by lead time)
    ceiling_clipped: bool  # a schedule ceiling was below the floor and was raised to it
    # the calendar's days that made the floor other than the regular week's, e.g. "holiday 2027-02-11 (as
    # Sunday)" ("" when the calendar changed nothing): why a mon-fri window's floor is not there on a weekday
    floor_calendar: str = ""
    # the same for the ceiling: why a sat,sun window's max holds on a holiday Thursday, or not on a makeup
    # Saturday
    ceiling_calendar: str = ""

    @property
    def floor_why(self) -> str:
        """The floor's source, with the calendar's day when that is why: ``min_size on holiday 2027-02-11 (as
        Sunday)``."""
        return f"{self.floor_source} on {self.floor_calendar}" if self.floor_calendar else self.floor_source

    @property
    def ceiling_why(self) -> str:
        """The ceiling's source, with the calendar's day when that is why: ``schedule:weekend on holiday
        2027-02-11 (as Sunday)``."""
        if self.ceiling_calendar:
            return f"{self.ceiling_source} on {self.ceiling_calendar}"
        return self.ceiling_source


# how far around an instant a calendar's exception day can hold the window that decides it (a window past
# midnight, a zone 14 hours off UTC, the lead): with none that near, the regular week's bounds are the bounds
CALENDAR_REACH = timedelta(days=2)


def bounds(spec: GroupSpec, at: datetime) -> Bounds:
    """The effective floor and ceiling of a group at ``at`` (its calendar's holidays and makeup workdays
    honoured, and named in ``floor_calendar`` / ``ceiling_calendar`` where they changed the floor /
    ceiling)."""
    out = _bounds(spec, at, spec.calendar)
    cal = spec.calendar
    if cal is None:
        return out
    near = cal.exception_days((at - CALENDAR_REACH).date(), (at + CALENDAR_REACH).date())
    if not near:
        return out
    regular = _bounds(spec, at, None)
    if (regular.floor, regular.floor_source) != (out.floor, out.floor_source):
        # floors apply from the cold start before a window opens
        out = replace(out, floor_calendar=_calendar_days(spec, cal, at, spec.cold_start_s, floors=True))
    if (regular.ceiling, regular.ceiling_source) != (out.ceiling, out.ceiling_source):
        # ceilings only while it is open; only schedules with a max can have changed one
        out = replace(out, ceiling_calendar=_calendar_days(spec, cal, at, 0.0, floors=False))
    return out


def _calendar_days(spec: GroupSpec, cal: Calendar, at: datetime, lead_s: float, floors: bool) -> str:
    """The calendar's days whose windows around ``at`` (``lead_s`` ahead) differ from the regular week's,
    described (``holiday 2027-02-11 (as Sunday)``), comma-separated; "" for none."""
    days: set[date] = set()
    horizon = at + timedelta(seconds=lead_s)
    for sched in spec.schedules:
        if not floors and sched.ceiling is None:
            continue
        with_cal = windows_between(sched, at, horizon + timedelta(0, 1), cal)
        without = windows_between(sched, at, horizon + timedelta(0, 1), None)
        for w in set(with_cal) ^ set(without):
            if w.start <= horizon and w.end > at:
                days.add(w.start.astimezone(sched.zone).date())
    return ", ".join(text for d in sorted(days) if (text := cal.describe(d)))


def _bounds(spec: GroupSpec, at: datetime, calendar: Calendar | None) -> Bounds:
    floor, floor_source = spec.min_size, "min_size"
    if spec.warm_floor > floor:
        floor, floor_source = spec.warm_floor, "warm_floor"
    active: list[str] = []
    ceiling, ceiling_source = spec.max_size, "max_size"
    for sched in spec.schedules:
        if is_active(sched, at, spec.cold_start_s, calendar):
            active.append(sched.name)
            if sched.floor > floor:
                floor, floor_source = sched.floor, f"schedule:{sched.name}"
        if sched.ceiling is not None and sched.ceiling < ceiling and is_active(sched, at, 0.0, calendar):
            ceiling, ceiling_source = sched.ceiling, f"schedule:{sched.name}"
    floor = min(floor, spec.max_size)
    clipped = ceiling < floor
    if clipped:
        ceiling = floor
    return Bounds(floor, ceiling, floor_source, ceiling_source, tuple(active), clipped)
