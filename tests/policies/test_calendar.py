"""A group's calendar: holidays read as Sundays and makeup workdays as Mondays by the schedule floor."""

from datetime import UTC, date, datetime, timedelta

import pytest
from policy_builders import group_spec
from pydantic import ValidationError

from policies.schedule import bounds, windows_between
from policies.spec import Calendar, Schedule

BIZ = {"name": "biz", "days": "mon-fri", "start": "09:00", "end": "18:00", "min": 6}
WEEKEND = {"name": "weekend", "days": "sat,sun", "start": "00:00", "end": "24:00", "max": 4}
# illustrative dates: Wednesday 2027-02-10 to Friday 2027-02-12 off, Saturday 2027-02-20 worked
CALENDAR = {"holidays": ["2027-02-10..2027-02-12"], "workdays": [date(2027, 2, 20)]}


def shanghai(month: int, day: int, hour: int, minute: int = 0) -> datetime:
    """2027-<month>-<day> at hour:minute in Asia/Shanghai (UTC+8), as UTC."""
    return datetime(2027, month, day, hour, minute, tzinfo=UTC) - timedelta(hours=8)


def test_a_holiday_on_a_weekday_holds_no_business_hours_floor():
    spec = group_spec(schedules=[BIZ], calendar=CALENDAR)
    assert bounds(spec, shanghai(2, 10, 10)).floor == 2  # a Wednesday, a holiday
    assert bounds(spec, shanghai(2, 9, 10)).floor == 6  # the Tuesday before: business hours


def test_a_makeup_saturday_holds_the_business_hours_floor_from_the_cold_start_before_nine():
    spec = group_spec(cold_start_s=300, schedules=[BIZ], calendar=CALENDAR)
    assert bounds(spec, shanghai(2, 20, 8, 55)).floor == 6
    assert bounds(spec, shanghai(2, 20, 8, 54)).floor == 2
    assert bounds(spec, shanghai(2, 27, 10)).floor == 2  # the next Saturday is a weekend again


def test_a_weekend_window_applies_on_a_holiday_and_not_on_a_makeup_workday():
    spec = group_spec(schedules=[BIZ, WEEKEND], calendar=CALENDAR)
    assert bounds(spec, shanghai(2, 11, 12)).ceiling == 4
    assert bounds(spec, shanghai(2, 20, 12)).ceiling == 20


def test_without_a_calendar_the_weekdays_rule():
    spec = group_spec(schedules=[BIZ])
    assert bounds(spec, shanghai(2, 10, 10)).floor == 6
    assert bounds(spec, shanghai(2, 20, 10)).floor == 2


def test_the_dates_are_read_in_the_schedules_own_zone():
    # 09:00-18:00 in New York on 2027-02-10 is 14:00-23:00 UTC: the holiday is New York's date
    ny = Schedule.model_validate({**BIZ, "timezone": "America/New_York"})
    cal = Calendar.model_validate({"holidays": ["2027-02-10"]})
    day = datetime(2027, 2, 10, tzinfo=UTC)
    assert windows_between(ny, day, day + timedelta(days=1), cal) == []
    assert len(windows_between(ny, day, day + timedelta(days=1))) == 1


def test_a_window_past_midnight_belongs_to_the_day_it_starts():
    late = {"name": "late", "days": "mon-fri", "start": "20:00", "end": "02:00", "min": 5}
    spec = group_spec(schedules=[late], calendar={"holidays": ["2027-02-12"]})  # a Friday
    assert bounds(spec, shanghai(2, 11, 23)).floor == 5  # Thursday's window
    assert bounds(spec, shanghai(2, 12, 1)).floor == 5  # Thursday's window, after midnight
    assert bounds(spec, shanghai(2, 12, 21)).floor == 2  # the holiday's own window does not open


def test_the_weekday_a_day_is_read_as_is_configurable():
    cal = Calendar.model_validate({"workdays": ["2027-02-20"], "workday_like": "fri", "holiday_like": "sat"})
    assert cal.weekday_of(date(2027, 2, 20)) == 4
    assert cal.model_dump()["workday_like"] == "fri"


@pytest.mark.parametrize(
    ("calendar", "problem"),
    [
        ({"holidays": ["2027-02-30"]}, "'2027-02-30' is not a date"),
        ({"holidays": ["2027-2-3"]}, "write YYYY-MM-DD"),
        ({"holidays": ["2027-02-13..2027-02-06"]}, "the range ends before it starts"),
        ({"holidays": ["2027-02-06..2072-02-06"]}, "at most 366"),
        (
            {"holidays": ["2027-02-06..2027-02-13", "2027-02-10"]},
            "2027-02-10 overlaps 2027-02-06..2027-02-13",
        ),
        ({"holidays": ["2027-02-06..2027-02-13"], "workdays": ["2027-02-07"]}, "2027-02-07 is both"),
        ({"holidays": [datetime(2027, 2, 6, 10)]}, "is a time; give a date"),
        ({"holidays": [20270206]}, "expected a date"),
        ({"workday_like": "someday"}, "unknown weekday"),
    ],
)
def test_bad_calendars_are_refused_naming_the_problem(calendar, problem):
    with pytest.raises(ValidationError) as exc:
        Calendar.model_validate(calendar)
    assert problem in str(exc.value)


def test_a_calendar_serializes_as_it_is_written():
    cal = Calendar.model_validate(CALENDAR)
    assert cal.model_dump(mode="json")["holidays"] == ["2027-02-10..2027-02-12"]
    assert Calendar.model_validate(cal.model_dump(mode="json")) == cal


def test_exception_days_lists_each_day_of_a_range():
    cal = Calendar.model_validate(CALENDAR)
    got = cal.exception_days(date(2027, 2, 11), date(2027, 2, 28))
    assert got == [date(2027, 2, 11), date(2027, 2, 12), date(2027, 2, 20)]


CRON_BIZ = {"name": "cron-biz", "cron": "0 9 * * 1-5", "duration": "9h", "min": 6}


def test_a_weekday_cron_window_honours_the_calendar_as_a_days_window_does():
    spec = group_spec(cold_start_s=300, schedules=[CRON_BIZ], calendar=CALENDAR)
    assert bounds(spec, shanghai(2, 10, 10)).floor == 2  # a holiday Wednesday
    assert bounds(spec, shanghai(2, 9, 10)).floor == 6  # the Tuesday before
    assert bounds(spec, shanghai(2, 20, 8, 55)).floor == 6  # the makeup Saturday, a cold start early
    assert bounds(spec, shanghai(2, 20, 17, 59)).floor == 6
    assert bounds(spec, shanghai(2, 20, 18)).floor == 2
    assert bounds(spec, shanghai(2, 27, 10)).floor == 2


def test_a_cron_window_on_days_of_the_month_follows_its_expression_alone():
    monthly = {"name": "month-end", "cron": "0 9 10 * *", "duration": "9h", "min": 6}  # the 10th
    spec = group_spec(schedules=[monthly], calendar=CALENDAR)
    assert bounds(spec, shanghai(2, 10, 10)).floor == 6  # a holiday, but the expression names the date


def test_the_floor_names_the_calendar_day_that_changed_it():
    spec = group_spec(schedules=[BIZ, WEEKEND], calendar=CALENDAR)
    holiday = bounds(spec, shanghai(2, 11, 10))  # a Thursday, a holiday: no business hours
    assert (holiday.floor, holiday.floor_source) == (2, "min_size")
    assert holiday.floor_calendar == "holiday 2027-02-11 (as Sunday)"
    assert holiday.floor_why == "min_size on holiday 2027-02-11 (as Sunday)"
    makeup = bounds(spec, shanghai(2, 20, 8, 58))  # the makeup Saturday, from the cold start before nine
    assert (makeup.floor, makeup.floor_source) == (6, "schedule:biz")
    assert makeup.floor_why == "schedule:biz on makeup workday 2027-02-20 (as Monday)"
    # where the calendar changes nothing, nothing is said: a plain Tuesday, and the holiday's night
    for at in (shanghai(2, 9, 10), shanghai(2, 11, 22), shanghai(2, 20, 8, 50)):
        assert bounds(spec, at).floor_calendar == ""
    later = group_spec(schedules=[BIZ], calendar={"holidays": ["2027-02-11"], "holiday_like": "sat"})
    assert bounds(later, shanghai(2, 11, 10)).floor_calendar == "holiday 2027-02-11 (as Saturday)"


def test_the_plan_says_the_calendar_is_why_the_floor_fell():
    """A holiday Thursday: the floor that lifts one instance to two names the holiday, in the reason the
    decision records and in the plan's floor source (GET /status, ``fleet plan``)."""
    from policy_builders import fleet, snapshot

    from policies import PolicySpec, ReasonCode, decide

    at = shanghai(2, 11, 10)
    spec = PolicySpec(groups=(group_spec(schedules=[BIZ], calendar=CALENDAR),))
    gp = decide(snapshot(at, fleet(at, 1)), spec, None, at).group("chat")
    assert gp is not None and gp.floor == 2
    assert gp.floor_source == "min_size on holiday 2027-02-11 (as Sunday)"
    (floor,) = [r for r in gp.reasons if r.code == ReasonCode.FLOOR_MIN_SIZE]
    assert floor.detail == "floor 2 (min_size on holiday 2027-02-11 (as Sunday))"
    assert floor.inputs["calendar"] == "holiday 2027-02-11 (as Sunday)"
    plain = decide(snapshot(at, fleet(at, 1)), PolicySpec(groups=(group_spec(),)), None, at).group("chat")
    assert plain is not None and plain.floor_source == "min_size"


def test_the_ceiling_names_the_calendar_day_that_changed_it():
    spec = group_spec(schedules=[BIZ, WEEKEND], calendar=CALENDAR)
    holiday = bounds(spec, shanghai(2, 11, 12))  # a Thursday, a holiday: the weekend's max of 4 holds
    assert (holiday.ceiling, holiday.ceiling_source) == (4, "schedule:weekend")
    assert holiday.ceiling_why == "schedule:weekend on holiday 2027-02-11 (as Sunday)"
    makeup = bounds(spec, shanghai(2, 20, 12))  # the makeup Saturday: no weekend max
    assert makeup.ceiling_why == "max_size on makeup workday 2027-02-20 (as Monday)"
    # where the calendar changes nothing, nothing is said: a plain Saturday and a plain Tuesday
    for at in (shanghai(2, 27, 12), shanghai(2, 9, 12)):
        assert bounds(spec, at).ceiling_calendar == ""
    assert bounds(spec, shanghai(2, 27, 12)).ceiling_why == "schedule:weekend"


def test_the_plan_says_the_calendar_is_why_the_ceiling_holds():
    """A holiday Thursday read as Sunday: the weekend's ceiling that takes six instances down to four names
    the holiday, in the reason the decision records and in the plan's ceiling source (GET /status, ``fleet
    plan``)."""
    from policy_builders import fleet, snapshot

    from policies import PolicySpec, ReasonCode, decide

    at = shanghai(2, 11, 12)
    spec = PolicySpec(groups=(group_spec(schedules=[BIZ, WEEKEND], calendar=CALENDAR),))
    gp = decide(snapshot(at, fleet(at, 6)), spec, None, at).group("chat")
    assert gp is not None and gp.ceiling == 4 and gp.serving_target == 4
    assert gp.ceiling_source == "schedule:weekend on holiday 2027-02-11 (as Sunday)"
    (ceiling,) = [r for r in gp.reasons if r.code == ReasonCode.CEILING_SCHEDULE]
    assert ceiling.detail == "ceiling 4 (schedule:weekend on holiday 2027-02-11 (as Sunday))"
    assert ceiling.inputs["calendar"] == "holiday 2027-02-11 (as Sunday)"
    plain = decide(snapshot(at, fleet(at, 6)), PolicySpec(groups=(group_spec(),)), None, at).group("chat")
    assert plain is not None and plain.ceiling_source == "max_size"
