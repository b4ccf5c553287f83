"""Recurrence of ESS scheduled tasks, in UTC: Daily (every N days), Weekly (days 0-6, 0 = Sunday), Monthly
(day range ``A-B``) and Cron (five fields). Pure functions of (launch time, previous fire time)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from croniter import croniter

from fleet.testing.core.errors import invalid

RECURRENCE_TYPES = ("Daily", "Weekly", "Monthly", "Cron")


def validate(recurrence_type: str | None, value: str | None) -> None:
    if recurrence_type is None:
        if value is not None:
            raise invalid("RecurrenceValue needs RecurrenceType.")
        return
    if recurrence_type not in RECURRENCE_TYPES:
        raise invalid(f"RecurrenceType {recurrence_type!r} is not one of {', '.join(RECURRENCE_TYPES)}.")
    if not value:
        raise invalid(
            f"RecurrenceValue is required with RecurrenceType {recurrence_type}.",
            "MissingParameter.RecurrenceValue",
        )
    try:
        if recurrence_type == "Daily":
            if not 1 <= int(value) <= 31:
                raise ValueError
        elif recurrence_type == "Weekly":
            days = [int(d) for d in value.split(",")]
            if not days or any(not 0 <= d <= 6 for d in days):
                raise ValueError
        elif recurrence_type == "Monthly":
            first, _, last = value.partition("-")
            a, b = int(first), int(last or first)
            if not 1 <= a <= b <= 31:
                raise ValueError
        elif not croniter.is_valid(value) or len(value.split()) != 5:
            raise ValueError
    except ValueError:
        raise invalid(
            f"RecurrenceValue {value!r} is not valid for RecurrenceType {recurrence_type}."
        ) from None


def _at_time_of(day: datetime, launch: datetime) -> datetime:
    return day.replace(hour=launch.hour, minute=launch.minute, second=launch.second, microsecond=0)


def first_at_or_after(
    launch_s: float, recurrence_type: str | None, value: str | None, not_before_s: float
) -> float | None:
    """The first occurrence >= ``not_before_s`` (the launch time itself counts when it matches)."""
    launch = datetime.fromtimestamp(launch_s, UTC)
    if recurrence_type is None:
        return launch_s if launch_s >= not_before_s else None
    assert value is not None, "validate() requires a RecurrenceValue with a RecurrenceType"
    if recurrence_type == "Cron":
        start = datetime.fromtimestamp(max(launch_s, not_before_s) - 1, UTC)
        return float(croniter(value, start).get_next(float))
    if recurrence_type == "Daily":
        step_s = int(value or 1) * 86400
        if launch_s >= not_before_s:
            return launch_s
        periods = math.ceil((not_before_s - launch_s) / step_s)
        return launch_s + periods * step_s
    candidate = (
        launch if launch_s >= not_before_s else _at_time_of(datetime.fromtimestamp(not_before_s, UTC), launch)
    )
    if candidate.timestamp() < not_before_s:
        candidate += timedelta(days=1)
    for _ in range(400):  # a year of days always contains a match
        if _matches(candidate, recurrence_type, value or ""):
            return candidate.timestamp()
        candidate += timedelta(days=1)
    return None


def next_after(
    launch_s: float, recurrence_type: str | None, value: str | None, previous_s: float
) -> float | None:
    """The occurrence after the one at ``previous_s`` (None for a one-off task)."""
    if recurrence_type is None:
        return None
    return first_at_or_after(launch_s, recurrence_type, value, previous_s + 1)


def _matches(day: datetime, recurrence_type: str, value: str) -> bool:
    if recurrence_type == "Weekly":
        sunday_zero = (day.weekday() + 1) % 7  # Python: Monday = 0; ESS: Sunday = 0
        return str(sunday_zero) in value.split(",")
    first, _, last = value.partition("-")
    return int(first) <= day.day <= int(last or first)
