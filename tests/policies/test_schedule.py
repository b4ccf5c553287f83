"""Schedule windows: weekdays and hours in a timezone, cross-midnight, cron, cold-start lead, overlaps."""

from datetime import UTC, date, datetime, timedelta

import pytest
from policy_builders import group_spec

from policies.schedule import bounds, is_active, uncut_days, windows_between
from policies.spec import Calendar, Schedule

BIZ = Schedule.model_validate(
    {
        "name": "biz",
        "timezone": "Asia/Shanghai",
        "days": "mon-fri",
        "start": "09:00",
        "end": "18:00",
        "min": 6,
    }
)
NIGHT = Schedule.model_validate(
    {"name": "night", "days": "daily", "start": "22:00", "end": "06:00", "min": 3}
)


def shanghai(day: int, hour: int, minute: int = 0) -> datetime:
    """2026-12-<day> at hour:minute in Asia/Shanghai (UTC+8, no DST), as UTC. Dec 7 2026 is a Monday."""
    return datetime(2026, 12, day, hour, minute, tzinfo=UTC) - timedelta(hours=8)


@pytest.mark.parametrize(
    ("at", "active"),
    [
        (shanghai(7, 9, 0), True),  # Monday 09:00: start is inclusive
        (shanghai(7, 17, 59), True),
        (shanghai(7, 18, 0), False),  # end is exclusive
        (shanghai(7, 8, 59), False),
        (shanghai(12, 10, 0), False),  # Saturday
        (shanghai(11, 17, 0), True),  # Friday
    ],
)
def test_weekday_window_in_its_timezone(at, active):
    assert is_active(BIZ, at) is active


@pytest.mark.parametrize(
    ("at", "active"),
    [
        (shanghai(7, 23, 0), True),
        (shanghai(8, 5, 59), True),
        (shanghai(8, 6, 0), False),
        (shanghai(8, 21, 0), False),
    ],
)
def test_window_may_run_past_midnight(at, active):
    assert is_active(NIGHT, at) is active


def test_cross_midnight_window_belongs_to_the_day_it_starts():
    fri_night = Schedule.model_validate(
        {"name": "f", "days": "fri", "start": "22:00", "end": "02:00", "min": 3}
    )
    assert is_active(fri_night, shanghai(12, 1, 0))  # Saturday 01:00 is Friday's night
    assert not is_active(fri_night, shanghai(13, 1, 0))  # Sunday 01:00 is not


def test_whole_day_window():
    day = Schedule.model_validate({"name": "d", "days": "sun", "start": "00:00", "end": "24:00", "min": 1})
    assert is_active(day, shanghai(13, 0, 0)) and is_active(day, shanghai(13, 23, 59))
    assert not is_active(day, shanghai(14, 0, 0))


def test_cron_window_with_duration():
    sched = Schedule.model_validate(
        {"name": "c", "timezone": "Asia/Shanghai", "cron": "30 8 * * 1-5", "duration": "2h", "min": 4}
    )
    assert is_active(sched, shanghai(7, 8, 30))
    assert is_active(sched, shanghai(7, 10, 29))
    assert not is_active(sched, shanghai(7, 10, 30))
    assert not is_active(sched, shanghai(12, 9, 0))  # Saturday


def test_cron_window_longer_than_a_day_apart_from_start():
    sched = Schedule.model_validate({"name": "c", "cron": "0 20 * * *", "duration": "12h", "min": 4})
    assert is_active(sched, shanghai(8, 7, 0))  # the previous evening's window is still on


# America/New_York in 2026: the clocks go 02:00 -> 03:00 on Sunday March 8 (EST UTC-5 -> EDT UTC-4) and
# 02:00 -> 01:00 on Sunday November 1.
SPRING = datetime(2026, 3, 8, tzinfo=UTC)
FALL = datetime(2026, 11, 1, tzinfo=UTC)


def test_a_start_the_spring_forward_day_skips_opens_at_the_jump():
    # 02:30 never shows on March 8: the clock passes it at 03:00 EDT (07:00 UTC), not at 03:30 EDT
    spec = group_spec(
        cold_start_s=0,
        schedules=[
            {
                "name": "n",
                "timezone": "America/New_York",
                "days": "daily",
                "start": "02:30",
                "end": "04:00",
                "min": 6,
            }
        ],
    )
    assert bounds(spec, SPRING + timedelta(hours=6, minutes=59)).floor == 2
    assert bounds(spec, SPRING + timedelta(hours=7)).floor == 6
    assert bounds(spec, SPRING + timedelta(hours=7, minutes=59)).floor == 6  # until 04:00 EDT
    assert bounds(spec, SPRING + timedelta(hours=8)).floor == 2


def test_a_start_the_fall_back_day_shows_twice_opens_at_the_first():
    sched = Schedule.model_validate(
        {
            "name": "n",
            "timezone": "America/New_York",
            "days": "sun",
            "start": "01:30",
            "end": "03:00",
            "min": 6,
        }
    )
    (window,) = windows_between(sched, FALL, FALL + timedelta(days=1))
    assert window.start == FALL + timedelta(hours=5, minutes=30)  # 01:30 EDT
    assert window.end == FALL + timedelta(hours=8)  # 03:00 EST: the repeated hour is inside


@pytest.mark.parametrize("day", [SPRING, FALL])
def test_a_cron_window_lasts_its_duration_across_a_daylight_saving_change(day):
    # midnight + 3 h: the clock change falls inside the window; the floor holds three hours, and the window
    # that the schedule lists is the one the floor follows
    sched = Schedule.model_validate(
        {"name": "c", "timezone": "America/New_York", "cron": "0 0 * * *", "duration": "3h", "min": 4}
    )
    windows = windows_between(sched, day, day + timedelta(days=1))
    assert [w.end - w.start for w in windows] == [timedelta(hours=3)] * len(windows)
    for minute in range(0, 24 * 60, 10):
        at = day + timedelta(minutes=minute)
        listed = any(
            w.start <= at < w.end
            for w in windows_between(sched, at - timedelta(days=1), at + timedelta(days=1))
        )
        assert is_active(sched, at) == listed, at


def test_floor_starts_early_by_the_cold_start():
    spec = group_spec(cold_start_s=300, schedules=[BIZ.model_dump(by_alias=True)])
    assert bounds(spec, shanghai(7, 8, 54)).floor == 2
    assert bounds(spec, shanghai(7, 8, 55)).floor == 6
    assert bounds(spec, shanghai(7, 8, 55)).floor_source == "schedule:biz"


def test_overlapping_windows_take_the_highest_floor():
    spec = group_spec(
        schedules=[
            BIZ.model_dump(by_alias=True),
            {"name": "launch", "days": "mon", "start": "10:00", "end": "12:00", "min": 9},
        ]
    )
    b = bounds(spec, shanghai(7, 11, 0))
    assert (b.floor, b.floor_source) == (9, "schedule:launch")
    assert set(b.active) == {"biz", "launch"}


def test_overlapping_ceilings_take_the_lowest_but_never_below_the_floor():
    spec = group_spec(
        schedules=[
            {"name": "cap", "days": "daily", "start": "00:00", "end": "24:00", "max": 10},
            {"name": "tight", "days": "mon", "start": "10:00", "end": "12:00", "max": 4},
            {"name": "promo", "days": "mon", "start": "11:00", "end": "12:00", "min": 7},
        ]
    )
    assert bounds(spec, shanghai(7, 9, 0)).ceiling == 10
    assert bounds(spec, shanghai(7, 10, 30)).ceiling == 4
    b = bounds(spec, shanghai(7, 11, 30))
    assert (b.floor, b.ceiling, b.ceiling_clipped) == (7, 7, True)


def test_ceiling_does_not_start_early():
    spec = group_spec(
        cold_start_s=600,
        schedules=[{"name": "cap", "days": "mon", "start": "10:00", "end": "12:00", "min": 2, "max": 3}],
    )
    assert bounds(spec, shanghai(7, 9, 55)).ceiling == 20
    assert bounds(spec, shanghai(7, 10, 0)).ceiling == 3


def test_base_floor_is_the_larger_of_min_size_and_warm_floor():
    assert bounds(group_spec(min_size=1, warm_floor=3), shanghai(8, 3, 0)).floor_source == "warm_floor"
    assert bounds(group_spec(min_size=4, warm_floor=3), shanghai(8, 3, 0)).floor == 4


def test_the_holidays_the_weekly_tasks_still_fire_on_are_those_past_the_cut_with_a_workday_before():
    """Synced on Monday 2026-03-02 noon in Shanghai with the cut 7 days ahead: a holiday Wednesday that week
    is cut, a run of holidays from tomorrow is skipped by the next launch however long it is, and the holidays
    of the week after next still get the weekly start; with the cut as far ahead, none does."""
    now = datetime(2026, 3, 2, 4, 0, tzinfo=UTC)
    cal = Calendar.model_validate({"holidays": ["2026-03-04", "2026-03-17..2026-03-18"]})
    assert uncut_days(BIZ, cal, now, 180.0, 7, 84) == [date(2026, 3, 17), date(2026, 3, 18)]
    assert uncut_days(BIZ, cal, now, 180.0, 84, 84) == []
    assert uncut_days(BIZ, cal, now, 180.0, 7, 10) == []  # beyond the days asked about
    long_run = Calendar.model_validate({"holidays": ["2026-03-03..2026-03-13"]})
    assert uncut_days(BIZ, long_run, now, 180.0, 7, 84) == []
    assert uncut_days(BIZ, None, now, 180.0, 7, 84) == []
