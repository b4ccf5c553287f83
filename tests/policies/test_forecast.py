"""The demand forecast: seasonal with a day of history, level and trend without, its own error record."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from policies import forecast as fc
from policies.model import DemandSeries, ForecastState, PendingForecast

NOW = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)
HORIZON_S = 360.0  # the example configs' 6 minutes


def daily_ramp(minute_of_day: float) -> float:
    """2 req/s at night, ramping from 06:00 to 10 req/s at 07:00 (UTC)."""
    h = minute_of_day / 60.0
    return 2.0 + 8.0 * min(1.0, max(0.0, h - 6.0))


def series(
    days: float, now: datetime = NOW, fn=daily_ramp, noise: float = 0.0, seed: int = 0
) -> DemandSeries:
    rng = random.Random(seed)
    n = int(days * 1440)
    start = now - timedelta(minutes=n - 1)
    values: list[float | None] = []
    for i in range(n):
        t = start + timedelta(minutes=i)
        v = fn(t.hour * 60 + t.minute)
        values.append(max(0.0, v * (1 + rng.gauss(0, noise))))
    return DemandSeries(start=start, step_s=60, rps=values)


def test_seasonal_forecast_sees_the_ramp_that_level_and_trend_cannot():
    f = fc.forecast(series(2), NOW, 1800, ForecastState())
    assert f.method == fc.Method.SEASONAL
    assert f.level_rps is not None and math.isclose(f.level_rps, 2.0, rel_tol=0.05)
    # 30 minutes into yesterday's ramp the demand was 6 req/s: the forecast's path climbs towards it
    assert f.peak_rps > 4.5
    flat = fc.forecast(series(0.5), NOW, 1800, ForecastState())
    assert flat.method == fc.Method.LEVEL_TREND
    assert flat.peak_rps < 2.5


def test_seasonal_forecast_is_rescaled_to_todays_level():
    busier = series(2, fn=lambda m: daily_ramp(m) * (1.5 if m >= 5 * 60 else 1.0))
    base = fc.forecast(series(2), NOW, 1800, ForecastState())
    # the last hour ran 1.5x yesterday's: the forecast is about 1.5x too (blended with a flat trend)
    f = fc.forecast(busier, NOW, 1800, ForecastState())
    assert f.peak_rps > 1.3 * base.peak_rps


def test_no_level_without_recent_minutes():
    s = series(2)
    holed = DemandSeries(start=s.start, step_s=60, rps=s.rps[:-20] + [None] * 20)
    assert fc.forecast(holed, NOW, 600, ForecastState()).method == fc.Method.NONE
    assert fc.forecast(None, NOW, 600, ForecastState()).method == fc.Method.NONE


def test_upper_quantile_comes_from_the_measured_ratios():
    n = fc.min_record(600)  # a record long enough to speak for the 10-minute horizon
    wide = ForecastState(ratios=[0.8 + 0.6 * i / n for i in range(n)])  # up to 1.4
    narrow = ForecastState(ratios=[1.0] * n)
    s = series(2)
    f_wide = fc.forecast(s, NOW, 600, wide)
    f_narrow = fc.forecast(s, NOW, 600, narrow)
    assert math.isclose(f_narrow.upper_rps, f_narrow.peak_rps * fc.MIN_UPPER, rel_tol=1e-9)
    assert math.isclose(f_wide.upper_rps / f_wide.peak_rps, fc.quantile(wide.ratios, fc.UPPER_QUANTILE))


def test_judge_records_mape_and_coverage_when_forecasts_come_due():
    state = ForecastState()
    f = fc.forecast(series(2), NOW, 600, state)
    state = fc.remember(state, NOW, f, 600)
    assert len(state.pending) == 1
    assert fc.judge(state, NOW + timedelta(seconds=300), 3.0) == state  # not due yet
    due = state.pending[0]
    judged = fc.judge(state, NOW + timedelta(seconds=600), due.mean_rps * 1.5)
    assert judged.pending == []
    assert judged.ratios == [1.5]
    assert fc.mape_pct(judged) == 100.0 * (1 - 1 / 1.5)
    assert judged.covered == [due.mean_rps * 1.5 <= due.upper_rps]


def test_demand_returning_after_a_silence_does_not_hold_the_upper_band_at_thousands():
    # 60 judged minutes of a steady forecast, then demand comes back after a silence: a dozen forecasts made
    # at the silence's level (near zero) are judged against the full load
    state = ForecastState(ratios=[1.0] * 60)
    for k in range(12):
        at = NOW + timedelta(minutes=k)
        silent = PendingForecast(due=at, mean_rps=0.01, upper_rps=0.012)
        state = state.model_copy(update={"pending": [silent]})
        state = fc.judge(state, at, 8.0)
    assert max(state.ratios) == fc.MAX_JUDGED_RATIO  # 800 each, recorded as the cap
    upper, _ = fc.error_bands(state, 60.0)  # (a record long enough to speak for a one-minute horizon)
    assert upper == fc.MAX_JUDGED_RATIO  # 12 of 72 over the 90th percentile: the band is the cap, not 800
    # an ordinary miss is recorded as it is
    state = fc.judge(ForecastState(pending=[PendingForecast(due=NOW, mean_rps=4.0, upper_rps=5.0)]), NOW, 6.0)
    assert state.ratios == [1.5]


def _judged_step(state, start, minutes, before_rps, after_rps):
    """``minutes`` forecasts made at ``before_rps`` judged after a step to ``after_rps`` (one a minute)."""
    for k in range(minutes):
        at = start + timedelta(minutes=k)
        made = PendingForecast(due=at, mean_rps=before_rps, upper_rps=before_rps * fc.DEFAULT_UPPER)
        state = fc.judge(state.model_copy(update={"pending": [made]}), at, after_rps)
    return state


def test_one_step_in_a_young_record_does_not_set_the_band():
    # a service's first 45 minutes forecast 1 req/s well; then demand steps to 12 req/s: every forecast made
    # within the 6-minute horizon before the step is judged 12x short (recorded as the cap)
    run = int(HORIZON_S // 60) + 1
    state = _judged_step(ForecastState(ratios=[1.0] * 45), NOW, run, 1.0, 12.0)
    assert state.ratios.count(fc.MAX_JUDGED_RATIO) == run
    assert fc.MIN_RECORD <= len(state.ratios) < fc.min_record(HORIZON_S)
    # the record's top tenth is that one run: the band is what the rest of it says
    assert fc.error_bands(state, HORIZON_S) == (fc.MIN_UPPER, 1.0)
    # a second step in the young record: the tail is two events, and the band says so
    twice = _judged_step(_ones(state, 5), NOW + timedelta(minutes=20), run, 1.0, 12.0)
    assert fc.error_bands(twice, HORIZON_S)[0] == fc.MAX_JUDGED_RATIO
    # bursts: the same highs spread over the record are not one event
    spread = ForecastState(ratios=[fc.MAX_JUDGED_RATIO if k % 8 == 0 else 1.0 for k in range(52)])
    assert fc.error_bands(spread, HORIZON_S)[0] == fc.MAX_JUDGED_RATIO
    # a step down is left out of the lower band alike
    down = _judged_step(ForecastState(ratios=[1.0] * 45), NOW, run, 12.0, 1.0)
    assert fc.error_bands(down, HORIZON_S) == (fc.MIN_UPPER, 1.0)
    # a record long enough for its tail to hold more than one surprise's run: one step is under its top
    # tenth, two are over it
    older = _judged_step(ForecastState(ratios=[1.0] * fc.min_record(HORIZON_S)), NOW, run, 1.0, 12.0)
    assert fc.error_bands(older, HORIZON_S)[0] == fc.MIN_UPPER
    again = _judged_step(_ones(older, 5), NOW + timedelta(hours=1), run, 1.0, 12.0)
    assert fc.error_bands(again, HORIZON_S)[0] == fc.MAX_JUDGED_RATIO
    # a longer horizon spreads one surprise over more forecasts: it needs a longer record
    assert fc.min_record(2 * HORIZON_S) > fc.min_record(HORIZON_S) >= fc.MIN_RECORD


def _ones(state, k):
    """The state after ``k`` more forecasts judged right."""
    return state.model_copy(update={"ratios": [*state.ratios, *([1.0] * k)]})


def _poisson_minutes(rate, minutes, seed=5):
    """Minute means of Poisson arrivals at ``rate(minutes_ago)`` req/s, the last minute at NOW."""
    rng = random.Random(seed)
    values = []
    for k in range(minutes):
        lam = rate(minutes - 1 - k) * 60
        values.append(max(0.0, rng.gauss(lam, math.sqrt(lam))) / 60)
    return DemandSeries(start=NOW - timedelta(minutes=minutes - 1), step_s=60, rps=values)


@pytest.mark.parametrize("ago", [6, 9, 12, 16, 19])
def test_a_step_that_stayed_is_the_level_not_a_slope(ago):
    # 1 req/s for an hour, then 12 from ``ago`` minutes back (the jump within two minutes): the two level
    # windows' means straddle it, which read as a slope adding half the level over the horizon
    step = _poisson_minutes(lambda m: 12.0 if m < ago else (6.5 if m == ago else 1.0), 60)
    f = fc.forecast(step, NOW, HORIZON_S, ForecastState())
    assert f.method == fc.Method.LEVEL_TREND
    assert 11.0 < f.mean_rps < 13.0 and f.peak_rps < 13.0


@pytest.mark.parametrize("steepest_ago", [None, 8, 12])
def test_a_ramp_keeps_its_slope(steepest_ago):
    # the same rise spread over the last 20 minutes is a trend: the forecast runs ahead of the level; also
    # where one minute of it rose twice as steeply as the rest, long enough ago to count as a level shift: a
    # line still fits the span far better than a level each side of that minute
    def rate(m):
        bump = 0.5 if steepest_ago is not None and m < steepest_ago else 0.0
        return 1.0 + 0.5 * max(0.0, 20 - m) + bump

    if steepest_ago is None:
        ramp = _poisson_minutes(rate, 60)
    else:  # without noise: a noisy minute falling back by half the bump would read as a clump
        ramp = DemandSeries(
            start=NOW - timedelta(minutes=59), step_s=60, rps=[rate(59 - k) for k in range(60)]
        )
        span = ramp.rps[-21:]  # the slope's 20 minutes, the last one at NOW
        diffs = [b - a for a, b in zip(span, span[1:], strict=False)]
        assert fc._level_shift(diffs)  # the rule's candidate: the line's fit decides
    f = fc.forecast(ramp, NOW, HORIZON_S, ForecastState())
    assert f.level_rps is not None and f.peak_rps > 1.2 * f.level_rps


@pytest.mark.parametrize("since", [2, 4, 8])
def test_a_burst_that_ended_is_not_the_level(since):
    # 1 req/s for an hour, 12 for 8 minutes, then 1 again for the last ``since`` minutes: the 10-minute mean
    # still held the burst, and the two windows' means read it as a slope, for the minutes after it ended
    burst = _poisson_minutes(lambda m: 12.0 if since <= m < since + 8 else 1.0, 60)
    f = fc.forecast(burst, NOW, HORIZON_S, ForecastState())
    assert f.level_rps is not None and f.level_rps < 1.5
    assert f.peak_rps < 1.5


def test_nothing_rises_from_the_first_minute_after_a_burst():
    # one minute after the burst the level is still the 10-minute mean (one low minute is a reading, and
    # real traffic dips so for a minute), but the windows' means straddling the burst are no rising trend
    burst = _poisson_minutes(lambda m: 12.0 if 1 <= m < 9 else 1.0, 60)
    f = fc.forecast(burst, NOW, HORIZON_S, ForecastState())
    assert f.level_rps is not None and f.peak_rps <= f.level_rps


@pytest.mark.parametrize("since", [2, 4])
def test_a_drop_is_the_level_from_its_second_minute(since):
    # 10 req/s for an hour, then 0.5 for the last ``since`` minutes (a batch job ending, a client failing
    # over elsewhere): the level is the demand since the drop, not the 10-minute mean across it, and not
    # five minutes later, as a rise is
    drop = _poisson_minutes(lambda m: 0.5 if m < since else 10.0, 60)
    f = fc.forecast(drop, NOW, HORIZON_S, ForecastState())
    assert f.level_rps is not None and f.level_rps < 1.0
    assert f.peak_rps < 1.0


def _minutes(values):
    """An index over ``values`` (req/s a minute), the last one at NOW."""
    return fc._Index(DemandSeries(start=NOW - timedelta(minutes=len(values) - 1), step_s=60, rps=values))


@pytest.mark.parametrize(
    ("values", "fall"),
    [
        # a level of five minutes or more, then every minute since far below it
        ([1.0] * 12 + [12.0, 11.6, 12.3, 12.1, 11.8, 12.2, 0.9], (0.9, 1)),
        ([10.2, 9.8, 10.1, 9.9, 10.0, 10.3, 9.7, 0.5, 0.6, 0.4], (0.5, 3)),
        # a clump of three minutes falling back is the clump's (the 10-minute mean keeps it)
        ([1.0, 1.1, 0.9, 1.0, 1.2, 1.0, 12.0, 12.4, 11.9, 1.0], None),
        # one minute a little under the five before it: noise, not a fall
        ([8.1, 7.9, 8.2, 8.0, 7.8, 8.3, 7.9, 8.1, 8.0, 7.6], None),
        # the same after a silence, whose empty minutes have no spread: Poisson's at the level is the least
        ([0.0] * 10 + [7.5, 8.1, 8.5, 7.8, 8.4, 8.0, 8.6, 7.7, 7.4], None),
        # a steep ramp down is a trend: each minute is a little under the last, never a level's fall
        ([20.0 - k for k in range(20)], None),
        # a rise
        ([1.0] * 10 + [9.0] * 3, None),
    ],
)
def test_a_fall_is_a_level_left_behind(values, fall):
    # ``fall``: the level since it (the mean of the minutes since) and those minutes, None where there is none
    got = fc._since_fall(_minutes(values), NOW.timestamp())
    assert got == (None if fall is None else pytest.approx(fall))


def test_poisson_minutes_are_not_bursty_and_clumped_ones_are():
    rng = random.Random(3)
    start = NOW - timedelta(minutes=59)

    def counts(fn):
        return DemandSeries(start=start, step_s=60, rps=[fn() / 60 for _ in range(60)])

    # Poisson counts of mean 600 per minute: index of dispersion about 1
    poisson = counts(lambda: sum(1 for _ in range(6000) if rng.random() < 0.1))
    clumped = counts(lambda: rng.choice([100, 1100]))
    assert fc.burstiness(poisson, NOW, cap=fc.MAX_BURSTINESS) < 1.6
    assert fc.burstiness(clumped, NOW, cap=fc.MAX_BURSTINESS) == fc.MAX_BURSTINESS
    assert fc.burstiness(clumped, NOW, cap=fc.STAFFING_MAX_BURSTINESS) == fc.STAFFING_MAX_BURSTINESS
    assert fc.burstiness(poisson, NOW, cap=fc.STAFFING_MAX_BURSTINESS) < 1.6  # the cap raises no calm index


@pytest.mark.parametrize("at_s", [0.0, 30.0])  # on a minute's boundary, or half way through one
def test_a_step_in_the_level_is_demand_not_dispersion(at_s):
    # Poisson arrivals at 3 req/s that step to 9 (a failover, a launch) 12 minutes before now: the window's
    # one jump is the level's, which the forecast follows; the arrivals around it stay as calm as before
    rng = random.Random(11)
    start = NOW - timedelta(minutes=29)
    step_s = (start + timedelta(minutes=18, seconds=at_s)).timestamp()
    counts = [0] * 30
    t = start.timestamp()
    while t < NOW.timestamp() + 60:
        t += rng.expovariate(3.0 if t < step_s else 9.0)
        k = int((t - start.timestamp()) // 60)
        if k < 30:
            counts[k] += 1
    stepped = DemandSeries(start=start, step_s=60, rps=[c / 60 for c in counts])
    assert fc.burstiness(stepped, NOW, cap=64.0) < 1.6
    # the same jump undone three minutes later is a clump: dispersion, as it always was
    clump = [*counts[:18], *counts[18:21], *counts[:9]]
    clumped = DemandSeries(start=start, step_s=60, rps=[c / 60 for c in clump])
    assert fc.burstiness(clumped, NOW, cap=64.0) > 4.0
    # a jump two minutes old may yet be a clump's start: it counts until five minutes have not undone it
    young = DemandSeries(
        start=start, step_s=60, rps=[c / 60 for c in [*counts[:9], *counts[:18], *counts[18:21]]]
    )
    assert fc.burstiness(young, NOW, cap=64.0) > 4.0


def test_a_gap_in_the_history_does_not_read_as_poisson_arrivals():
    # A clumpy hour, then an hour of no readings (a metrics outage), then two minutes of readings again: the
    # window of the last 30 minutes holds two buckets. It takes the latest buckets with data instead, so the
    # index stays the clumpy hour's and the headroom does not collapse as the readings come back.
    rng = random.Random(5)
    start = NOW - timedelta(minutes=121)
    clumps = [rng.choice([500, 700]) / 60 for _ in range(60)]
    series = DemandSeries(start=start, step_s=60, rps=[*clumps, *([None] * 60), 600 / 60, 610 / 60])
    before = DemandSeries(start=start, step_s=60, rps=clumps)
    at_gap_start = start + timedelta(minutes=60)
    clumpy = fc.burstiness(before, at_gap_start, cap=64.0)
    assert 10 < clumpy < 64
    assert fc.burstiness(series, NOW, cap=64.0) == pytest.approx(clumpy, rel=0.25)
    # no readings within the lookback: Poisson, as on a first start
    assert fc.burstiness(series, NOW, cap=64.0, lookback_s=30 * 60.0) == 1.0
    # a window with enough buckets is read as it is, the gap's older buckets not mixed in
    full = DemandSeries(start=start, step_s=60, rps=[*clumps, *([600 / 60] * 60)])
    assert fc.burstiness(full, NOW, cap=64.0) == 1.0


def test_hourly_needs_a_day_and_its_lower_quantile_stays_under_the_mean():
    assert fc.hourly(series(0.5), NOW, 6, ForecastState(), horizon_s=HORIZON_S) == []
    hours = fc.hourly(series(2, noise=0.05), NOW, 6, ForecastState(), horizon_s=HORIZON_S)
    assert len(hours) == 6
    assert hours[0].start == NOW + timedelta(hours=1)
    for h in hours:
        assert h.lower_rps <= h.mean_rps <= h.upper_rps
    assert hours[0].mean_rps > 8.0  # 07:00-08:00 is at the top of yesterday's ramp


def _today_times(s: DemandSeries, minutes: int, factor: float) -> DemandSeries:
    """``s`` with its last ``minutes`` (today's, not yesterday's) at ``factor`` times their rate."""
    rps = [v for v in s.rps]
    rps[-minutes:] = [None if v is None else v * factor for v in rps[-minutes:]]
    return DemandSeries(start=s.start, step_s=s.step_s, rps=rps)


def test_the_hourly_forecast_scales_by_the_last_hour_not_a_ten_minute_clump():
    base = fc.hourly(series(2), NOW, 6, ForecastState(), horizon_s=HORIZON_S)
    # the last 10 minutes ran at twice yesterday's rate: a clump, not a busier day
    hours = fc.hourly(_today_times(series(2), 10, 2.0), NOW, 6, ForecastState(), horizon_s=HORIZON_S)
    ratio = hours[0].mean_rps / base[0].mean_rps
    assert 1.1 < ratio < 1.25  # the last hour's mean is a sixth higher, not twice
    # a whole hour at 1.5x is a busier day, and every coming hour follows it
    busier = fc.hourly(_today_times(series(2), 60, 1.5), NOW, 6, ForecastState(), horizon_s=HORIZON_S)
    assert all(
        b.mean_rps == pytest.approx(1.5 * a.mean_rps, rel=0.02) for a, b in zip(base, busier, strict=True)
    )


def _with(s: DemandSeries, ago_min: int, value: float | None) -> DemandSeries:
    """``s`` with the minute ``ago_min`` minutes before its last one set to ``value``."""
    rps = list(s.rps)
    rps[-1 - ago_min] = value
    return DemandSeries(start=s.start, step_s=s.step_s, rps=rps)


def test_one_bad_minute_yesterday_does_not_make_the_seasonal_forecast():
    base = fc.forecast(series(2), NOW, HORIZON_S, ForecastState())
    # 1e6 req/s recorded once, 24 h ago (under the history's rejection limit): the forecast was 4,000x
    spiked = fc.forecast(_with(series(2), 1440, 1e6), NOW, HORIZON_S, ForecastState())
    assert spiked.mean_rps == pytest.approx(base.mean_rps, rel=0.05)
    # two such minutes are demand the seasonal part follows
    twice = _with(_with(series(2), 1440, 1e6), 1439, 1e6)
    assert fc.forecast(twice, NOW, HORIZON_S, ForecastState()).mean_rps > 10 * base.mean_rps
    hours = fc.hourly(_with(series(2), 1380, 1e6), NOW, 3, ForecastState(), horizon_s=HORIZON_S)
    base_hours = fc.hourly(series(2), NOW, 3, ForecastState(), horizon_s=HORIZON_S)
    assert hours[0].mean_rps == pytest.approx(base_hours[0].mean_rps, rel=0.05)


def test_a_history_exported_every_15_minutes_still_gives_the_hourly_forecast():
    s = series(2)
    sparse = DemandSeries(
        start=s.start, step_s=60, rps=[v if i % 15 == 0 else None for i, v in enumerate(s.rps)]
    )
    hours = fc.hourly(sparse, NOW, 3, ForecastState(), horizon_s=HORIZON_S)
    assert len(hours) == 3 and hours[0].mean_rps > 8.0  # 07:00-08:00, the top of yesterday's ramp
    # an hour with a few minutes of data in one half of it is not an hour known
    s_half = DemandSeries(
        start=s.start, step_s=60, rps=[v if (i % 60) in (1, 2, 3) else None for i, v in enumerate(s.rps)]
    )
    assert fc.hourly(s_half, NOW, 3, ForecastState(), horizon_s=HORIZON_S) == []


# Demand that follows New York's clock: 5 req/s, 40 from 09:00 to 17:00 local. On Sunday March 8 2026 the
# clocks go 02:00 -> 03:00 (EST UTC-5 -> EDT UTC-4), so 09:00 is 13:00 UTC that day, 14:00 UTC the day before.
NEW_YORK = "America/New_York"


def _office_hours(until: datetime, days: int = 8) -> DemandSeries:
    zone = ZoneInfo(NEW_YORK)
    start = until - timedelta(days=days)
    rps: list[float | None] = []
    t = start
    while t < until:
        rps.append(40.0 if 9 <= t.astimezone(zone).hour < 17 else 5.0)
        t += timedelta(minutes=1)
    return DemandSeries(start=start, step_s=60.0, rps=rps)


@pytest.mark.parametrize(
    ("at", "zone", "hours"),
    [
        (
            datetime(2026, 3, 8, 13, tzinfo=UTC),
            NEW_YORK,
            23,
        ),  # spring forward: yesterday's 09:00 is 23 h back
        (datetime(2026, 11, 1, 14, tzinfo=UTC), NEW_YORK, 25),  # fall back
        (datetime(2026, 3, 9, 13, tzinfo=UTC), NEW_YORK, 24),
        (datetime(2026, 3, 8, 13, tzinfo=UTC), "Asia/Shanghai", 24),
        (datetime(2026, 3, 8, 13, tzinfo=UTC), None, 24),
    ],
)
def test_yesterday_is_the_same_time_on_the_demands_clock(at, zone, hours):
    assert fc.lag_s(at.timestamp(), 1, ZoneInfo(zone) if zone else None) == hours * 3600.0


def test_the_hour_after_spring_forward_is_forecast_from_yesterdays_same_local_hour():
    now = datetime(2026, 3, 8, 12, 50, tzinfo=UTC)  # 08:50 EDT: the office opens in 10 minutes
    hist = _office_hours(now)
    utc_days = {h.start.hour: h.mean_rps for h in fc.hourly(hist, now, 2, fc.ForecastState(), horizon_s=300)}
    local = {
        h.start.hour: h.mean_rps
        for h in fc.hourly(hist, now, 2, fc.ForecastState(), horizon_s=300, zone=ZoneInfo(NEW_YORK))
    }
    assert local[13] == pytest.approx(40.0)  # 09:00 EDT
    assert utc_days[13] == pytest.approx(5.0)  # whole UTC days read yesterday's 08:00 EST: an hour late
    near = fc.forecast(hist, now, 900.0, fc.ForecastState(), zone=ZoneInfo(NEW_YORK))
    assert near.peak_rps > 20.0  # the ramp at 13:00 UTC is within the next 15 minutes
    assert fc.forecast(hist, now, 900.0, fc.ForecastState()).peak_rps < 10.0


def test_forecasts_found_due_long_after_their_time_are_dropped_unjudged():
    # forecasts made before a service outage (or while the demand was unknown) for a night's 1 req/s: the
    # tick that finds them, hours later, sees the morning's 12 req/s, which is not the demand they were for
    made = [PendingForecast(due=NOW + timedelta(minutes=k), mean_rps=1.0, upper_rps=1.2) for k in range(10)]
    state = ForecastState(ratios=[1.0] * 40, covered=[True] * 40, pending=made)
    unknown = fc.judge(state, NOW + timedelta(hours=1), None)  # the demand still unknown: nothing to keep
    assert unknown.pending == [] and unknown.ratios == state.ratios
    back = fc.judge(state, NOW + timedelta(hours=6), 12.0)
    assert back.pending == []
    assert back.ratios == state.ratios and back.covered == state.covered
    # a forecast found due within a few minutes of its time is still judged against the demand then
    recent = fc.judge(state, NOW + timedelta(minutes=9, seconds=30), 1.5)
    assert recent.ratios[-1] == 1.5 and len(recent.ratios) == 40 + 5


def test_a_forecast_is_remembered_after_the_clock_steps_back():
    f = fc.forecast(series(2), NOW, 600, ForecastState())
    state = fc.remember(ForecastState(), NOW, f, 600)
    earlier = NOW - timedelta(hours=1)  # the clock stepped back an hour
    stepped = fc.remember(state, earlier, f, 600)
    assert len(stepped.pending) == 2 and stepped.last_at == earlier
    assert fc.remember(stepped, earlier + timedelta(seconds=30), f, 600) == stepped  # one a minute again


def _business(t: datetime) -> float:
    """Office traffic: 10 req/s on weekdays 09:00-18:00 (UTC), 0.5 on weekday nights, 0.2 all weekend."""
    if t.weekday() >= 5:
        return 0.2
    return 10.0 if 9 <= t.hour < 18 else 0.5


def _weeks(days: float, now: datetime, fn=_business) -> DemandSeries:
    n = int(days * 1440)
    start = now - timedelta(minutes=n - 1)
    return DemandSeries(start=start, step_s=60, rps=[fn(start + timedelta(minutes=i)) for i in range(n)])


def test_monday_morning_after_a_quiet_weekend_is_forecast_as_last_monday_ran():
    """NOW is a Monday 06:00: yesterday (a Sunday) ran 0.2 at 09:00, last Monday 10. The history shows the
    days differ by weekday (Sunday did not foretell last Monday; last Sunday foretold yesterday), so the
    week-ago reference speaks for Monday's office hours, where a fixed 35 % share forecast 3.6."""
    assert NOW.weekday() == 0
    hours = fc.hourly(_weeks(15, NOW), NOW, 6, ForecastState(), horizon_s=HORIZON_S)
    nine = next(h for h in hours if h.start.hour == 9)
    assert nine.mean_rps == pytest.approx(10.0, rel=0.1)
    early = next(h for h in hours if h.start.hour == 7)
    assert early.mean_rps == pytest.approx(0.5, rel=0.2)
    # the near-term forecast at 08:55 climbs to Monday's 10 too, not to a Sunday's blend
    at = NOW.replace(hour=8, minute=55)
    f = fc.forecast(_weeks(15, at), at, 1800, ForecastState())
    assert f.points[-1][1] > 0.75 * 10.0


def test_without_a_weekly_pattern_the_references_share_as_before():
    """Every day alike (a daily ramp with noise): the measured errors of yesterday and a week ago are alike,
    so the week-ago reference keeps about the share it had, and the forecast what it was."""
    noisy = series(15, noise=0.05)
    hours = fc.hourly(noisy, NOW, 6, ForecastState(), horizon_s=HORIZON_S)
    for h in hours:
        assert h.mean_rps == pytest.approx(daily_ramp(h.start.hour * 60 + 30), rel=0.1)


def test_one_event_whose_misses_come_in_no_order_does_not_set_the_band():
    # a service started on a morning ramp (0.5 to 12 req/s over an hour): its first ten forecasts, made from
    # a few minutes' level and no slope yet, miss by 2-2.7x, in the order the minutes' noise gives them; the
    # forecasts after them miss by 1.1-1.5x (the ratios the simulator recorded on such a ramp)
    first = [2.7, 2.47, 2.55, 2.03, 2.61, 2.27, 2.18, 2.22, 2.31, 2.02]
    state = ForecastState(ratios=[*first, 1.48, 1.32, 1.3, 1.36, 1.38, 1.17, 1.32, 1.14, 1.16, 1.28])
    assert len(state.ratios) < fc.min_record(HORIZON_S)
    # the top tenth (2.7 and 2.61) is not consecutive, but it lies in one run above the median: one event
    upper, _ = fc.error_bands(state, HORIZON_S)
    assert upper == 1.38  # the rest's 90th percentile, not the ramp's start (2.55)
    # misses above the median over more forecasts than one surprise lands in are a regime: they speak
    run = fc.surprise_run(HORIZON_S)
    regime = ForecastState(ratios=[1.0] * 20 + [1.6 if k % 4 == 0 else 1.5 for k in range(20)])
    assert run < 13  # the top tenth (the 1.6s at 0, 4, 8, 12) spans 13 forecasts: more than one surprise
    assert fc.error_bands(regime, HORIZON_S)[0] == 1.6
