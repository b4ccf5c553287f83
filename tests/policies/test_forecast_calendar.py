"""The forecast's seasonal references under a calendar: a holiday is foretold from the last non-working day,
a makeup workday and the first workday after a holiday from the last workday (synthetic office traffic)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from policies import forecast as fc
from policies.model import DemandSeries, ForecastState
from policies.spec import Calendar, weekday_of

HORIZON_S = 360.0
# illustrative: Tuesday 2026-12-15 and Wednesday 2026-12-16 off, Saturday 2026-12-19 worked (dates in UTC)
CAL = Calendar.model_validate({"holidays": ["2026-12-15..2026-12-16"], "workdays": ["2026-12-19"]})


def office(t: datetime, calendar: Calendar = CAL) -> float:
    """10 req/s 09:00-18:00 (UTC) on the calendar's working days, 0.5 on their nights, 0.2 on other days."""
    if weekday_of(calendar, t.date()) >= 5:
        return 0.2
    return 10.0 if 9 <= t.hour < 18 else 0.5


def office_history(now: datetime, days: int = 21, calendar: Calendar = CAL) -> DemandSeries:
    """``days`` of ``office`` minutes up to ``now``."""
    n = days * 1440
    start = now - timedelta(minutes=n - 1)
    rps = [office(start + timedelta(minutes=i), calendar) for i in range(n)]
    return DemandSeries(start=start, step_s=60, rps=rps)


def _business_hours_error(now: datetime, calendar: Calendar | None) -> float:
    """Mean absolute error of the hourly forecast made at ``now`` (the early morning) over 09:00-18:00."""
    hours = fc.hourly(office_history(now), now, 20, ForecastState(), horizon_s=HORIZON_S, calendar=calendar)
    busy = [h for h in hours if 9 <= h.start.hour < 18]
    assert len(busy) == 9
    return sum(abs(h.mean_rps - office(h.start)) for h in busy) / len(busy)


@pytest.mark.parametrize(
    ("day", "refs"),
    [
        (date(2026, 12, 14), (1, 7)),  # a Monday the calendar leaves alone, its references too
        (date(2026, 12, 15), (2, 9)),  # a holiday Tuesday: Sunday, and the Sunday before last
        (date(2026, 12, 16), (1, 10)),  # the second holiday: the first one, then a Sunday 10 days back
        (date(2026, 12, 17), (3, 7)),  # Thursday after: Monday; last Thursday was a workday
        (date(2026, 12, 19), (1, 8)),  # the makeup Saturday: Friday, and Friday a week before
        (date(2026, 12, 21), (1, 7)),  # the Monday after it: yesterday was a plain Sunday
        (date(2026, 12, 22), (1, 14)),  # a Tuesday whose week ago was a holiday: two weeks back
    ],
)
def test_the_references_are_days_of_todays_type(day, refs):
    at = datetime(day.year, day.month, day.day, 12, tzinfo=UTC).timestamp()
    assert fc.reference_days(at, None, CAL) == refs
    assert fc.reference_days(at, None, None) == (1, 7)


def test_the_day_after_a_holiday_is_forecast_from_the_last_workday():
    at = datetime(2026, 12, 17, 2, 30, tzinfo=UTC)  # Thursday, after two days off
    plain, with_calendar = _business_hours_error(at, None), _business_hours_error(at, CAL)
    assert plain > 3.0  # yesterday's 0.2 holds most of the blend: the office hours forecast far too low
    assert with_calendar < 0.5
    assert with_calendar < plain / 5


def test_a_holiday_is_forecast_from_the_last_non_working_day():
    at = datetime(2026, 12, 15, 2, 30, tzinfo=UTC)  # the holiday Tuesday
    plain, with_calendar = _business_hours_error(at, None), _business_hours_error(at, CAL)
    assert plain > 3.0  # a Monday's office hours, on a day nobody works
    assert with_calendar < 0.5


def test_a_makeup_saturday_is_forecast_as_a_workday():
    at = datetime(2026, 12, 19, 2, 30, tzinfo=UTC)
    plain, with_calendar = _business_hours_error(at, None), _business_hours_error(at, CAL)
    assert plain > 3.0
    assert with_calendar < 0.5


def test_the_near_term_forecast_before_nine_climbs_on_the_day_after_a_holiday():
    at = datetime(2026, 12, 17, 8, 55, tzinfo=UTC)
    plain = fc.forecast(office_history(at), at, 1800, ForecastState())
    cal = fc.forecast(office_history(at), at, 1800, ForecastState(), calendar=CAL)
    assert cal.points[-1][1] > 0.75 * 10.0
    assert plain.points[-1][1] < cal.points[-1][1]


def _thursdays_differ(t: datetime) -> float:
    """``office``, but a Thursday's office hours run 4 req/s to 14:00 and 25 after: a weekday whose shape
    only the week-ago reference foretells."""
    if weekday_of(CAL, t.date()) < 5 and 9 <= t.hour < 18 and t.date().weekday() == 3:
        return 25.0 if t.hour >= 14 else 4.0
    return office(t)


def _thursday_history(now: datetime, days: int = 21) -> DemandSeries:
    n = days * 1440
    start = now - timedelta(minutes=n - 1)
    rps = [_thursdays_differ(start + timedelta(minutes=i)) for i in range(n)]
    return DemandSeries(start=start, step_s=60, rps=rps)


def test_the_week_share_judges_the_references_the_forecast_uses():
    """The Thursday after two holidays: the forecast steps over them to Monday and last Thursday. Judged on
    plain days, yesterday's holiday (foretold by a workday a week before) read as the week ago failing, and
    the share of last Thursday's shape fell; judged on the days the forecast reads, the share is the one an
    ordinary Thursday learns, and the afternoon peak is foretold."""
    ordinary = datetime(2026, 12, 10, 2, 30, tzinfo=UTC)  # a Thursday of a week the calendar leaves alone
    after = datetime(2026, 12, 17, 2, 30, tzinfo=UTC)
    hours = fc.hourly(_thursday_history(after), after, 20, ForecastState(), horizon_s=HORIZON_S, calendar=CAL)
    office = [h for h in hours if 9 <= h.start.hour < 18]
    error = sum(abs(h.mean_rps - _thursdays_differ(h.start)) for h in office) / len(office)
    assert error < 0.3  # judged on plain days: 1.5 req/s, Monday's flat 10 blended into the 4 and the 25
    for hour in (10, 15):
        usual = fc.week_share(_thursday_history(ordinary), ordinary.replace(hour=hour), None, CAL)
        shared = fc.week_share(_thursday_history(after), after.replace(hour=hour), None, CAL)
        assert shared == pytest.approx(usual, abs=0.02)
        assert shared > 0.95  # only last Thursday foretold a Thursday
