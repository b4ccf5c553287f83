"""`fleet forecast` (plan_forecast) and the service read the group's calendar: the day after a holiday is
planned from the last workday."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleet.service.demand import DemandReading
from fleet.service.planning import plan_forecast
from policies.model import DemandSeries
from policies.spec import Calendar, GroupSpec
from tests.policies.test_forecast_calendar import office_history

# illustrative: Tuesday 2026-12-15 and Wednesday 2026-12-16 off (dates in UTC, the group's forecast clock)
CAL = Calendar.model_validate({"holidays": ["2026-12-15..2026-12-16"]})


def _history(now: datetime, days: int = 21) -> DemandSeries:
    return office_history(now, days, CAL)


def test_fleet_forecast_reads_the_groups_calendar():
    """The shell passes the group's calendar (and its zone) to the forecast: `fleet forecast`'s plan."""
    at = datetime(2026, 12, 17, 2, 30, tzinfo=UTC)
    history = _history(at)
    rows = [
        DemandReading(history.start + timedelta(minutes=i), rps)
        for i, rps in enumerate(history.rps)
        if rps is not None
    ]
    base = {
        "name": "chat",
        "min_size": 1,
        "max_size": 20,
        "predictive": {"mode": "on", "capacity_rps": 1.0, "history": "21d", "timezone": "UTC"},
    }
    plain = plan_forecast(GroupSpec.model_validate(base), rows, at, 12)
    cal = plan_forecast(
        GroupSpec.model_validate({**base, "calendar": CAL.model_dump(mode="json")}), rows, at, 12
    )
    noon = [next(h.mean_rps for h in view.hours if h.start.hour == 12) for view in (plain, cal)]
    assert noon[1] == pytest.approx(10.0, rel=0.05)
    assert noon[0] < 5.0
