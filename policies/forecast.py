"""Demand forecast of one group, pure: the store's history in, the demand over the coming horizon out.

The forecast blends two predictors (capacity-control.md, AWS and ESS predictive scaling need a day of history
for the same reason):

- **seasonal**: the same time yesterday and a week ago, rescaled to today's level (the ratio of the last
  ``LEVEL_WINDOW_S`` to the same minutes then), so that a day busier than yesterday keeps yesterday's shape;
  the week ago's share grows where the history shows the days differ by weekday (``_week_share``: an
  office's Monday after a quiet weekend is last Monday's, not Sunday's);
- **level and trend**: the mean of the last minutes plus a damped slope.

With a ``calendar`` (the group's holidays and makeup workdays) the references are days of today's type
(``reference_days``): a holiday's day-ago reference is the last non-working day, a makeup workday's the last
workday, the first workday after a holiday's the last workday before it; the week-ago reference steps back by
whole weeks to a day of the same type. Without one, or on days the calendar leaves alone, yesterday and a
week ago as before.

With under a day of history only the second one speaks. "The same time" is the same time on the clock of
``predictive.timezone`` when the group names one (demand that follows New York's or Berlin's clock is 23
hours after yesterday's on the spring-forward day, 25 on the fall-back day), else whole days of 86,400 s.

The upper quantile is the mean times the ``UPPER_QUANTILE`` of the forecast's own measured ratios (actual /
predicted), never below ``MIN_UPPER``; the lower quantile (the learned floor) likewise with the
``LOWER_QUANTILE`` ratio. ``judge`` keeps that record: each forecast is judged when its time comes, giving the
MAPE and the upper quantile's coverage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo

from policies.model import DemandSeries, ForecastState, PendingForecast
from policies.spec import Calendar, weekday_of

DAY_S = 86400.0
WEEK_S = 7 * DAY_S
LEVEL_WINDOW_S = 600.0  # the recent level: the last 10 minutes
HOURLY_LEVEL_WINDOW_S = 3600.0  # today's level against then, for whole coming hours: the last hour
SEASON_WINDOW_S = 900.0  # yesterday's value at a time: the mean of the 15 minutes around it
SEASONAL_WEIGHT = 0.75  # the seasonal predictor's share when it has data; the rest is level and trend
# Of the seasonal part, when both yesterday and last week are known: at the least (``_week_share`` raises it
# where the history shows the days differ by weekday)
WEEK_SHARE = 0.35
DAY_TYPE_HOURS = 24  # the hours around a time whose errors tell whether its days differ by weekday
SIGNIFICANT = 2.0  # standard errors (the usual 95 %) the references' mean hourly errors must differ by
TREND_DAMPING_S = 1800.0  # a slope is trusted for about half an hour, then it flattens
RATIO_CLIP = (0.33, 3.0)  # today's level against yesterday's, outside this the day is not like yesterday
UPPER_QUANTILE = 0.9
LOWER_QUANTILE = 0.1
MIN_UPPER = 1.08  # even a perfect record keeps 8 % above the mean (the record is short and days differ)
DEFAULT_UPPER = 1.2  # no record yet
DEFAULT_LOWER = 0.7
MAX_RECORD = 288  # judged forecasts kept (one a minute: the last ~5 hours)
# The most one judged forecast adds to the record: demand returning after a silence (an upstream outage, a
# launch, a collection gap) is judged against forecasts near zero, whose ratios run to thousands and would
# hold the upper band there for hours; past RATIO_CLIP's 3x the day is not like the forecast's anyway.
MAX_JUDGED_RATIO = RATIO_CLIP[1]
# A forecast is judged against the demand of the tick that finds it due. One found due longer ago than this
# (the service was down at its time, or the demand unknown: a restart, a takeover, a metrics outage) is
# dropped unjudged: the demand now is not the demand it was for. Judged hours late, the forecasts made
# before a night's outage were set against the morning's load and recorded as misses at the cap.
MAX_JUDGE_DELAY_S = 300.0
MIN_RECORD = 20  # judged forecasts before the record sets the quantiles, at the least (min_record)
LEARNED_HOURS = 24  # learned floors cover the coming day: one ESS scheduled task an hour
MAX_BURSTINESS = 3.0  # the scale-in window's stretch: beyond it the swings are demand the forecast follows
# The headroom's: measured daily medians run 3-42 (calm ServeGen days ~4-7, wild ones ~40); clipped at 64, a
# wild day's headroom cost more GPU-hours per violation minute saved than 12 did (docs/simulator.md)
STAFFING_MAX_BURSTINESS = 12.0
MIN_BURSTINESS_BUCKETS = 6  # buckets the index of dispersion needs
BURSTINESS_LOOKBACK_S = 86400.0  # how far back a gap in the history sends it for buckets with data
# A past window's largest minute over this many times the mean of the others is a lone outlier (_Index)
LONE_OUTLIER = 8.0
SHIFT_REVERT_BUCKETS = 5  # a jump not undone within this many minutes is a level shift, not a clump
STEP_FIT = 0.25  # a step explains a span when a level each side of it leaves under this of a line's error
# A fall from a level: every minute since it lies this many times the minutes' noise below each of the
# ``SHIFT_REVERT_BUCKETS`` minutes before it (``_since_fall``)
FALL_SIGMAS = 4.0
FALL_MINUTES = 2  # minutes below it before a fall is the level: one minute below is a reading, not a level


class Method(StrEnum):
    SEASONAL = "seasonal"  # seasonal blended with level and trend
    LEVEL_TREND = "level_trend"  # under a day of history
    NONE = "none"  # no recent demand at all


@dataclass(frozen=True)
class Forecast:
    """Demand over ``(now, now + horizon]``: mean, peak of the mean path, quantiles, and how it was made."""

    method: Method
    level_rps: float | None
    mean_rps: float
    peak_rps: float
    upper_rps: float
    lower_rps: float
    points: tuple[tuple[float, float], ...]  # (seconds ahead, mean rps)
    band: float = DEFAULT_UPPER  # the upper quantile's multiplier of the mean (``error_bands``)


class _Index:
    """Bucket lookups over a DemandSeries."""

    def __init__(self, series: DemandSeries) -> None:
        self.start_s = series.start.timestamp()
        self.step_s = series.step_s
        self.rps = series.rps

    def known(self, t0_s: float, t1_s: float) -> list[float]:
        """The known buckets whose start lies in [t0, t1), oldest first."""
        i0 = max(0, math.ceil((t0_s - self.start_s) / self.step_s - 1e-9))
        i1 = min(len(self.rps), math.ceil((t1_s - self.start_s) / self.step_s - 1e-9))
        if i1 <= i0:
            return []  # (a negative end would slice from the other end)
        return [v for v in self.rps[i0:i1] if v is not None]

    def mean(self, t0_s: float, t1_s: float) -> float | None:
        """The mean of the known buckets whose start lies in [t0, t1)."""
        known = self.known(t0_s, t1_s)
        return sum(known) / len(known) if known else None

    def past_mean(self, t0_s: float, t1_s: float) -> float | None:
        """``mean`` of a past window with a lone outlier left out: its largest bucket, where it is over
        ``LONE_OUTLIER`` times the mean of the others (one bad minute yesterday, a sample of 1e6 req/s among
        minutes of 12, must not make the seasonal forecast 4,000 times the demand). Two such minutes are
        demand; the recent level keeps every minute (a step must show at once)."""
        known = self.known(t0_s, t1_s)
        if not known:
            return None
        if len(known) >= 3:
            top = max(known)
            rest = (sum(known) - top) / (len(known) - 1)
            if rest > 0 and top > LONE_OUTLIER * rest and sorted(known)[-2] <= LONE_OUTLIER * rest:
                return rest
        return sum(known) / len(known)

    def known_span_s(self, now_s: float) -> float:
        """How far back the oldest known bucket lies."""
        for i, v in enumerate(self.rps):
            if v is not None:
                return now_s - (self.start_s + i * self.step_s)
        return 0.0


MIN_LEVEL_BUCKETS = 5  # known buckets in the level window before there is a level at all


def _known(idx: _Index, t0_s: float, t1_s: float) -> int:
    return len(idx.known(t0_s, t1_s))


def _level(idx: _Index, now_s: float, window_s: float) -> float | None:
    """The mean of the last ``window_s`` up to now (None with under ``MIN_LEVEL_BUCKETS`` known minutes in it:
    a fresh start or an outage)."""
    if _known(idx, now_s - window_s, now_s + idx.step_s) < MIN_LEVEL_BUCKETS:
        return None
    return idx.mean(now_s - window_s, now_s + idx.step_s)


def _level_trend(idx: _Index, now_s: float) -> tuple[float | None, float]:
    level = _level(idx, now_s, LEVEL_WINDOW_S)
    if level is None:
        return None, 0.0
    if _known(idx, now_s - 2 * LEVEL_WINDOW_S, now_s - LEVEL_WINDOW_S) < MIN_LEVEL_BUCKETS:
        return level, 0.0  # no slope from a window that hardly saw anything
    fall = _since_fall(idx, now_s)
    if fall is not None and fall[1] >= FALL_MINUTES:
        return fall[0], 0.0
    after_step = _since_step(idx, now_s)
    if after_step is not None:
        return after_step, 0.0
    before = idx.mean(now_s - 2 * LEVEL_WINDOW_S, now_s - LEVEL_WINDOW_S)
    slope = 0.0 if before is None else (level - before) / LEVEL_WINDOW_S
    if fall is not None:
        slope = min(0.0, slope)  # nothing rises from a minute that fell: the windows' means straddle a burst
    return level, slope


def _since_step(idx: _Index, now_s: float) -> float | None:
    """The level since a step inside the slope's span (the last two level windows), or None when there is
    none: the span's largest level shift (``_level_shift``: a jump that stayed for ``SHIFT_REVERT_BUCKETS``),
    where a level on each side of it fits the span's minutes with under ``STEP_FIT`` of the squared error a
    line leaves. Across a step the two windows' means read as a slope, which went on adding half the level
    for the 20 minutes after a jump from 1 to 12 req/s had ended (the forecast at 1.5x the demand); a ramp,
    which a line fits, keeps its slope."""
    values = idx.known(now_s - 2 * LEVEL_WINDOW_S, now_s + idx.step_s)
    shift = _level_shift([b - a for a, b in zip(values, values[1:], strict=False)])
    if not shift:
        return None
    before, after = values[: min(shift) + 1], values[max(shift) + 1 :]  # the buckets inside it in neither
    if len(before) < 2 or len(after) < MIN_LEVEL_BUCKETS:  # (a step leaving the span: the slope's window
        return None  # before the level's then straddles it, and the line still reads the jump as a slope)
    sides = _sse(before) + _sse(after)
    kept = [(float(x), v) for x, v in enumerate(values) if x <= min(shift) or x > max(shift)]
    return sum(after) / len(after) if sides <= STEP_FIT * _line_sse(kept) else None


def _since_fall(idx: _Index, now_s: float) -> tuple[float, int] | None:
    """The level since a fall inside the slope's span and the minutes since it, or None when there is none:
    the earliest minute from which every minute up to now lies ``FALL_SIGMAS`` times the minutes' noise
    (``_noise``) below each of the ``SHIFT_REVERT_BUCKETS`` minutes before it, a level (a burst that outlasted
    a clump's minutes, or the demand before a drop). Unlike a rise, which waits ``SHIFT_REVERT_BUCKETS``
    minutes to be told from a clump's start, a fall is the level from its ``FALL_MINUTES``-th minute, and in
    its first no slope rises from it: the 10-minute mean, and the two windows' means read as a slope, held
    an 8-minute burst of 12 req/s in the forecast for the 10 minutes after it ended, which ordered instances
    that arrived after it (docs/simulator.md, "Unseen workloads"). Not from its first minute: ServeGen days
    dip below their level for one minute every few hours, and each dip believed was a forecast judged a miss,
    which widened the upper band for the hours after."""
    values = idx.known(now_s - 2 * LEVEL_WINDOW_S, now_s + idx.step_s)
    spread = _noise(values)
    for k in range(SHIFT_REVERT_BUCKETS, len(values)):  # the most minutes since the fall first
        before, after = values[k - SHIFT_REVERT_BUCKETS : k], values[k:]
        # never under the noise of Poisson arrivals at the level before: a span mostly of empty minutes
        # has no spread of its own
        noise = max(spread, math.sqrt(max(0.0, sum(before) / len(before)) / idx.step_s))
        if max(after) + FALL_SIGMAS * noise < min(before):
            return sum(after) / len(after), len(after)
    return None


def _noise(values: list[float]) -> float:
    """The spread of a minute's value about its level: the median of the first differences over 0.954 (the
    median absolute difference of two normal draws of unit standard deviation), which the jumps of a step
    or a clump do not move."""
    diffs = sorted(abs(b - a) for a, b in zip(values, values[1:], strict=False))
    return diffs[len(diffs) // 2] / 0.954 if diffs else 0.0


def _sse(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values)


def _line_sse(points: list[tuple[float, float]]) -> float:
    """The squared error left by the least-squares line through ``points``."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx > 0 else 0.0
    return sum((y - my - slope * (x - mx)) ** 2 for x, y in points)


def _seasonal(idx: _Index, now_s: float, ahead_s: float, level: float, lag_s: float) -> float | None:
    """Today's level times the change the day ``lag_s`` ago saw from now to now + ahead."""
    half = SEASON_WINDOW_S / 2
    then_now = idx.past_mean(now_s - lag_s - LEVEL_WINDOW_S, now_s - lag_s)
    then_ahead = idx.past_mean(now_s - lag_s + ahead_s - half, now_s - lag_s + ahead_s + half)
    if then_now is None or then_ahead is None:
        return None
    floor = max(then_now, 1e-6)
    ratio = min(RATIO_CLIP[1], max(RATIO_CLIP[0], level / floor)) if then_now > 1e-6 else 1.0
    if then_now <= 1e-6:
        return level + then_ahead
    return then_ahead * ratio


def lag_s(at_s: float, days: int, zone: ZoneInfo | None) -> float:
    """Seconds from the same time ``days`` days before ``at_s`` (epoch seconds) to it: on the clock of
    ``zone`` (a day across a daylight-saving change is 23 or 25 hours), else ``days`` x 86,400 s."""
    if zone is None:
        return days * DAY_S
    local = datetime.fromtimestamp(at_s, zone).replace(tzinfo=None)
    then = (local - timedelta(days=days)).replace(tzinfo=zone)  # a time the clock skipped or repeated: fold 0
    return at_s - then.timestamp()


# How far back a reference of today's day type is looked for (past a golden week and its weekends).
REFERENCE_SEARCH_DAYS = 21
REFERENCE_WEEKS = 4  # whole weeks the week-ago reference steps back to find a day of today's type


def _working(calendar: Calendar | None, day: date) -> bool:
    return weekday_of(calendar, day) < 5


def _altered(calendar: Calendar | None, day: date) -> bool:
    """Whether the calendar changes ``day``'s type (a holiday on a weekday, a worked Saturday)."""
    return calendar is not None and _working(calendar, day) != (day.weekday() < 5)


def reference_days(
    at_s: float,
    zone: ZoneInfo | None,
    calendar: Calendar | None = None,
    calendar_zone: ZoneInfo | None = None,
) -> tuple[int, int]:
    """Days back to the seasonal part's day-ago and week-ago references for the demand at ``at_s``: 1 and 7,
    unless the calendar changes the type of today or of that day. Then the day-ago reference is the last day
    of today's type (working or not), and the week-ago one the same weekday up to ``REFERENCE_WEEKS`` weeks
    back that is of today's type and left alone by the calendar, else the last day of today's type a week or
    more back. The dates are read on ``calendar_zone``'s clock, else ``zone``'s, else UTC's."""
    if calendar is None:
        return 1, 7
    today = datetime.fromtimestamp(at_s, calendar_zone or zone or UTC).date()
    kind = _working(calendar, today)

    def same(back: int) -> bool:
        return _working(calendar, today - timedelta(days=back)) == kind

    day, week = 1, 7
    if _altered(calendar, today) or _altered(calendar, today - timedelta(days=1)):
        day = next((b for b in range(1, REFERENCE_SEARCH_DAYS) if same(b)), 1)
    if _altered(calendar, today) or _altered(calendar, today - timedelta(days=7)):
        weeks = (7 * k for k in range(1, REFERENCE_WEEKS + 1))
        week = next((b for b in weeks if same(b) and not _altered(calendar, today - timedelta(days=b))), 0)
        week = week or next((b for b in range(7, 7 + REFERENCE_SEARCH_DAYS) if same(b)), 7)
    return day, week


def reference_lags(
    at_s: float,
    zone: ZoneInfo | None,
    calendar: Calendar | None = None,
    calendar_zone: ZoneInfo | None = None,
) -> tuple[float, float]:
    """Seconds back to the day-ago and week-ago references (``reference_days``, ``lag_s``)."""
    day, week = reference_days(at_s, zone, calendar, calendar_zone)
    return lag_s(at_s, day, zone), lag_s(at_s, week, zone)


def _back(at_s: float, days: int, zone: ZoneInfo | None) -> float:
    """The same time ``days`` days before ``at_s`` (``lag_s``)."""
    return at_s - lag_s(at_s, days, zone)


def _share(day_err: float, week_err: float) -> float:
    """The week-ago reference's share of the seasonal part from the two references' measured errors: each
    one's ``WEEK_SHARE`` part over its own error, so the one that missed less speaks more (alike errors:
    ``WEEK_SHARE`` as before), and never under ``WEEK_SHARE``: where yesterday was the better reference the
    blend keeps the week ago's part, whose errors are not yesterday's (measured: lowering it made the hourly
    forecast of the 14-day ServeGen traces worse, docs/simulator.md)."""
    if day_err + week_err <= 1e-9:
        return WEEK_SHARE
    day_w, week_w = (1 - WEEK_SHARE) * week_err, WEEK_SHARE * day_err
    return max(WEEK_SHARE, week_w / (day_w + week_w))


def _week_share(
    idx: _Index,
    at_s: float,
    zone: ZoneInfo | None,
    calendar: Calendar | None = None,
    calendar_zone: ZoneInfo | None = None,
) -> float:
    """The week-ago reference's share of the seasonal part for the demand at ``at_s``, from what each
    reference missed the last times it could be judged around that time of day: the hourly means of the
    ``DAY_TYPE_HOURS`` around it a week ago as the day before foretold them (the day-ago reference's
    error), and the same hours yesterday as a week before foretold them (the week-ago one's). Traffic whose
    days differ by weekday (an office's Monday after a quiet Sunday) finds that Sunday foretold last Monday
    badly and last Sunday foretold yesterday well, and the week ago speaks for this Monday; traffic alike
    every day finds the two about alike, and they share as ``WEEK_SHARE`` says, as they do unless the two
    differ by ``SIGNIFICANT`` standard errors of the hours' differences (one day's noise is no weekday).
    Each reference is rescaled to the hours it foretold first (``_shape_errors``). Needs 8 days of history
    and half those hours known (``history: 8d`` or more); with less, ``WEEK_SHARE``.

    With a ``calendar`` the references judged are those the forecast uses (``reference_days``): the day-ago
    one on the week-ago reference's day, foretold by that day's own day-ago reference, and the week-ago one
    on the day-ago reference's day, foretold by that day's own week-ago reference. Judged on plain days, a
    holiday yesterday (foretold by a workday a week before) read as the week ago failing on a Thursday whose
    forecast steps over the holiday to Tuesday."""
    half = DAY_TYPE_HOURS // 2
    rows: list[tuple[float, float, float, float]] = []

    def refs(x: float) -> tuple[int, int]:
        return reference_days(x, zone, calendar, calendar_zone)

    for k in range(-half, DAY_TYPE_HOURS - half):
        t = at_s + k * 3600.0
        day_back, week_back = refs(t)
        week_ago, yesterday = _back(t, week_back, zone), _back(t, day_back, zone)
        hours = [
            idx.past_mean(x, x + 3600.0)
            for x in (
                week_ago,
                _back(week_ago, refs(week_ago)[0], zone),
                yesterday,
                _back(yesterday, refs(yesterday)[1], zone),
            )
        ]
        if all(h is not None for h in hours):
            rows.append(tuple(hours))  # type: ignore[arg-type]  # none is None
    if len(rows) < half:
        return WEEK_SHARE
    day = _shape_errors([(r[0], r[1]) for r in rows])
    week = _shape_errors([(r[2], r[3]) for r in rows])
    diffs = [d - w for d, w in zip(day, week, strict=True)]
    n = len(diffs)
    mean = sum(diffs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / (n - 1))
    if abs(mean) <= SIGNIFICANT * sd / math.sqrt(n):
        return WEEK_SHARE  # no difference the hours' own spread would not make: days alike, as far as known
    return _share(sum(day), sum(week))


def hour_of(at: datetime) -> int:
    """The hour holding ``at`` (hours since the epoch): what ``week_share`` is a property of."""
    return math.floor(at.timestamp() / 3600.0)


def week_share(
    series: DemandSeries | None,
    at: datetime,
    zone: ZoneInfo | None = None,
    calendar: Calendar | None = None,
    calendar_zone: ZoneInfo | None = None,
) -> float:
    """The week-ago reference's share of the seasonal part for the hour holding ``at``, judged at the hour's
    middle as ``hourly`` judges each coming hour (``_week_share``, with the group's ``calendar`` as
    ``forecast`` is given it). It reads only hours at least half a day old, so it is the same all hour long:
    the service works it out once an hour (``DemandInputs.week_share``) rather than every tick, where it was
    most of what a forecast cost."""
    if series is None or not series.rps:
        return WEEK_SHARE
    return _week_share(_Index(series), hour_of(at) * 3600.0 + 1800.0, zone, calendar, calendar_zone)


def _shape_errors(pairs: list[tuple[float, float]]) -> list[float]:
    """The absolute error of each (actual, reference) pair's reference rescaled to the actuals' total, as the
    seasonal predictor rescales its reference to today's level: what is left is the difference in shape (a
    day busier than the one before is not a day of another type)."""
    actual, ref = sum(a for a, _ in pairs), sum(r for _, r in pairs)
    k = actual / ref if ref > 1e-9 else 1.0
    return [abs(a - k * r) for a, r in pairs]


def _blend(
    idx: _Index,
    now_s: float,
    ahead_s: float,
    level: float,
    slope: float,
    lags: tuple[float, float],
    week_share: float = WEEK_SHARE,
) -> tuple[float, bool]:
    damped = TREND_DAMPING_S * (1 - math.exp(-ahead_s / TREND_DAMPING_S))
    # a slope never more than halves or adds half of the level within the horizon: noise is not a trend
    trend = level + max(-0.5 * level, min(0.5 * level, slope * damped))
    day = _seasonal(idx, now_s, ahead_s, level, lags[0])
    week = _seasonal(idx, now_s, ahead_s, level, lags[1])
    if day is None and week is None:
        return trend, False
    if day is not None and week is not None:
        seasonal = (1 - week_share) * day + week_share * week
    else:
        seasonal = day if day is not None else week  # type: ignore[assignment]  # one of them is known
    return SEASONAL_WEIGHT * seasonal + (1 - SEASONAL_WEIGHT) * trend, True


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[k]


def surprise_run(horizon_s: float) -> int:
    """How many judged forecasts one surprise (a step) lands in: every forecast made within one horizon
    before it (one a minute), and those made in the minutes the level takes to see it (``MIN_LEVEL_BUCKETS``
    after a step)."""
    return max(1, math.ceil(horizon_s / 60.0 - 1e-9)) + 1 + MIN_LEVEL_BUCKETS


def min_record(horizon_s: float) -> int:
    """Judged forecasts the record needs for its quantiles' tails to hold more than one surprise's run."""
    return max(MIN_RECORD, math.ceil(surprise_run(horizon_s) / (1.0 - UPPER_QUANTILE) - 1e-9))


def _but_one_event(ratios: list[float], top: bool, horizon_s: float) -> list[float]:
    """``ratios`` (in the order judged) less one event: when the tail of the quantile (the highest
    ``1 - UPPER_QUANTILE`` of them for ``top``, else the lowest ``LOWER_QUANTILE``) lies within one surprise's
    run (``surprise_run``) of consecutive forecasts all on its side of the median, that run and its shoulders
    (the neighbours on the same side of the median: forecasts made as the level caught up); as they are when
    the tail is spread over several runs (bursts, or two steps) or over more forecasts than one surprise lands
    in (a regime, not an event).

    The tail need not be consecutive: within one event the misses rise and fall with the minutes' noise (a
    service started on a morning ramp misses its first forecasts by 2-2.7x in no order, and a tail that had
    to be consecutive read them as several events: a 2.5x band and three times the instances the ramp
    needed)."""
    n = len(ratios)
    m = max(1, math.ceil((1.0 - UPPER_QUANTILE if top else LOWER_QUANTILE) * n - 1e-9))
    tail = sorted(range(n), key=lambda k: ratios[k], reverse=top)[:m]
    first, last = min(tail), max(tail)
    median = quantile(ratios, 0.5)

    def beyond(k: int) -> bool:
        return ratios[k] > median if top else ratios[k] < median

    if last - first + 1 > surprise_run(horizon_s) or not all(beyond(k) for k in range(first, last + 1)):
        return ratios
    while first > 0 and beyond(first - 1):
        first -= 1
    while last < n - 1 and beyond(last + 1):
        last += 1
    return ratios[:first] + ratios[last + 1 :] or ratios


def error_bands(state: ForecastState, horizon_s: float) -> tuple[float, float]:
    """(upper, lower) multipliers of the mean from the measured ratios actual / predicted of the forecasts
    over ``horizon_s``.

    While the record is shorter than ``min_record``, a tail that is one event (``_but_one_event``) is left
    out of its quantile: one surprise (a step) lands in every forecast made within a horizon before it, and
    in a short record those are the whole tail, so the band would be that one event (a step from 1 to 12
    req/s in a service's first hour read as a 3x band, which took the fleet to its max_size for a load of
    7). Bursts spread over the record, or a second step, and the tail speaks."""
    n = len(state.ratios)
    if n < MIN_RECORD:
        return DEFAULT_UPPER, DEFAULT_LOWER
    high = low = state.ratios
    if n < min_record(horizon_s):
        high, low = _but_one_event(high, True, horizon_s), _but_one_event(low, False, horizon_s)
    upper = max(MIN_UPPER, quantile(high, UPPER_QUANTILE))
    lower = min(1.0, max(0.2, quantile(low, LOWER_QUANTILE)))
    return upper, lower


def forecast(
    series: DemandSeries | None,
    now: datetime,
    horizon_s: float,
    state: ForecastState,
    step_s: float = 60.0,
    zone: ZoneInfo | None = None,
    calendar: Calendar | None = None,
    calendar_zone: ZoneInfo | None = None,
    share: float | None = None,
) -> Forecast:
    """Demand over the next ``horizon_s`` from ``series`` (history up to ``now``); ``zone``: the clock whose
    yesterday and last week the seasonal part reads (``lag_s``); ``calendar``: the days whose type differs
    from their weekday's (``reference_days``; its dates on ``calendar_zone``'s clock); ``share``:
    ``week_share`` of this hour where the caller has it, else worked out here."""
    if series is None or not series.rps:
        return Forecast(Method.NONE, None, 0.0, 0.0, 0.0, 0.0, ())
    idx = _Index(series)
    now_s = now.timestamp()
    level, slope = _level_trend(idx, now_s)
    if level is None:
        return Forecast(Method.NONE, None, 0.0, 0.0, 0.0, 0.0, ())
    points: list[tuple[float, float]] = []
    seasonal_used = False
    steps = max(1, math.ceil(horizon_s / step_s))
    lags = reference_lags(now_s, zone, calendar, calendar_zone)
    if share is None:
        share = _week_share(idx, hour_of(now) * 3600.0 + 1800.0, zone, calendar, calendar_zone)
    for k in range(1, steps + 1):
        ahead = min(horizon_s, k * step_s)
        value, used = _blend(idx, now_s, ahead, level, slope, lags, share)
        seasonal_used = seasonal_used or used
        points.append((ahead, value))
    values = [v for _, v in points]
    mean = sum(values) / len(values)
    peak = max(max(values), level)
    upper_k, lower_k = error_bands(state, horizon_s)
    lower = min(values) * lower_k
    method = Method.SEASONAL if seasonal_used else Method.LEVEL_TREND
    return Forecast(method, level, mean, peak, peak * upper_k, lower, tuple(points), upper_k)


def judge(state: ForecastState, now: datetime, actual_rps: float | None) -> ForecastState:
    """Judge the forecasts due by ``now`` against ``actual_rps`` (the demand observed now); a new state.
    Those due more than ``MAX_JUDGE_DELAY_S`` ago are dropped unjudged, whether the demand is known or not."""
    late = now - timedelta(seconds=MAX_JUDGE_DELAY_S)
    if any(p.due < late for p in state.pending):
        state = state.model_copy(update={"pending": [p for p in state.pending if p.due >= late]})
    due = [p for p in state.pending if p.due <= now]
    if not due or actual_rps is None:
        return state
    ratios, covered = list(state.ratios), list(state.covered)
    for p in due:
        if p.mean_rps > 1e-6 or actual_rps > 1e-6:
            ratios.append(min(MAX_JUDGED_RATIO, actual_rps / max(p.mean_rps, 1e-6)))
            covered.append(actual_rps <= p.upper_rps + 1e-9)
    pending = [p for p in state.pending if p.due > now]
    return state.model_copy(
        update={"pending": pending, "ratios": ratios[-MAX_RECORD:], "covered": covered[-MAX_RECORD:]}
    )


def remember(state: ForecastState, now: datetime, fc: Forecast, horizon_s: float) -> ForecastState:
    """Keep this forecast's value at the horizon to judge it then (at most one a minute, unless the clock
    stepped back)."""
    if fc.method == Method.NONE or not fc.points:
        return state
    # (one made "later" than now is from before the clock stepped back: it does not stop this one)
    if state.last_at is not None and 0.0 <= (now - state.last_at).total_seconds() < 60.0:
        return state
    _, at_horizon = fc.points[-1]
    entry = PendingForecast(
        due=now + timedelta(seconds=horizon_s), mean_rps=at_horizon, upper_rps=at_horizon * fc.band
    )
    pending = [*state.pending, entry][-MAX_RECORD:]
    return state.model_copy(update={"pending": pending, "last_at": now})


def mape_pct(state: ForecastState) -> float | None:
    """Mean absolute percentage error of the judged forecasts (|actual - predicted| / actual)."""
    errs = [abs(1.0 - 1.0 / r) for r in state.ratios if r > 1e-6]
    return 100.0 * sum(errs) / len(errs) if errs else None


def coverage(state: ForecastState) -> float | None:
    """Fraction of judged forecasts whose actual demand stayed at or under the upper quantile."""
    return sum(state.covered) / len(state.covered) if state.covered else None


def busiest_minute(series: DemandSeries | None, now: datetime, window_s: float) -> float | None:
    """The highest bucket rate of the last ``window_s`` up to now (None: no known bucket in it)."""
    if series is None:
        return None
    idx = _Index(series)
    now_s = now.timestamp()
    known = idx.known(now_s - window_s, now_s + idx.step_s)
    return max(known) if known else None


def burstiness(
    series: DemandSeries | None,
    now: datetime,
    *,
    cap: float,
    window_s: float = 1800.0,
    lookback_s: float = BURSTINESS_LOOKBACK_S,
) -> float:
    """Index of dispersion of per-bucket arrival counts over the last ``window_s`` (1 for Poisson arrivals),
    clipped to ``cap``.

    First differences remove the trend of a ramp (which is demand, not burstiness): Var(x_i - x_{i-1}) / 2
    estimates the variance of the counts around their local level. A window that a gap in the history left
    with under ``MIN_BURSTINESS_BUCKETS`` buckets (a metrics outage, the service down) takes the latest
    window's worth of buckets with data up to ``lookback_s`` back: the arrivals did not turn Poisson while
    nobody read them, and reading 1 there would drop the staffing's headroom (and shorten the scale-in
    window) the moment the readings come back. With no data that recent (a first start) it is 1.
    """
    if series is None:
        return 1.0
    idx = _Index(series)
    now_s = now.timestamp()
    i0 = max(0, math.ceil((now_s - window_s - idx.start_s) / idx.step_s))
    counts = [v * idx.step_s for v in idx.rps[i0:] if v is not None]
    if len(counts) < MIN_BURSTINESS_BUCKETS:
        back = max(0, math.ceil((now_s - lookback_s - idx.start_s) / idx.step_s))
        earlier = [v * idx.step_s for v in idx.rps[back:] if v is not None]
        counts = earlier[-max(MIN_BURSTINESS_BUCKETS, round(window_s / idx.step_s)) :]
    if len(counts) < MIN_BURSTINESS_BUCKETS:
        return 1.0
    mean = sum(counts) / len(counts)
    if mean <= 1e-9:
        return 1.0
    diffs = [b - a for a, b in zip(counts, counts[1:], strict=False)]
    shift = _level_shift(diffs)
    kept = [d * d for i, d in enumerate(diffs) if i not in shift]
    var = sum(kept) / len(kept) / 2
    return min(cap, max(1.0, var / mean))


def _level_shift(diffs: list[float]) -> set[int]:
    """The differences that make the window's largest level shift: the largest difference and its same-sign
    neighbour when the pair straddles one (a step within a bucket lands in two), if no difference of the
    other sign and at least half its size follows or precedes it within ``SHIFT_REVERT_BUCKETS``, and that
    many have followed it (a jump younger than that may be a clump's start, and counts). A clump
    rises and falls back; a step (a failover, a launch, a batch job starting or ending) stays, and is demand
    that the level follows, not dispersion: counted as dispersion, one step read as 5-9 for the next half hour
    on Poisson arrivals, and the headroom and the scale-in window it stretches held twice the fleet."""
    if len(diffs) <= MIN_BURSTINESS_BUCKETS:
        return set()
    top = max(range(len(diffs)), key=lambda i: abs(diffs[i]))
    size = diffs[top]
    if size == 0:
        return set()

    def reverted(i: int) -> bool:
        near = range(max(0, i - SHIFT_REVERT_BUCKETS), min(len(diffs), i + SHIFT_REVERT_BUCKETS + 1))
        return any(diffs[j] * size < 0 and abs(diffs[j]) >= 0.5 * abs(size) for j in near)

    if top >= len(diffs) - SHIFT_REVERT_BUCKETS or reverted(top):
        return set()  # too recent to tell from a clump's start (counted until it is), or undone: a clump
    shift = {top}
    side = [i for i in (top - 1, top + 1) if 0 <= i < len(diffs) and diffs[i] * size > 0]
    if side:
        other = max(side, key=lambda i: abs(diffs[i]))
        if abs(diffs[other]) >= 0.5 * abs(size) and not reverted(other):
            shift.add(other)
    return shift


@dataclass(frozen=True)
class HourForecast:
    """The demand expected in one coming hour: its start, the mean, and the conservative lower quantile."""

    start: datetime
    mean_rps: float
    upper_rps: float
    lower_rps: float


def hourly(
    series: DemandSeries | None,
    now: datetime,
    hours: int,
    state: ForecastState,
    *,
    horizon_s: float,
    zone: ZoneInfo | None = None,
    calendar: Calendar | None = None,
    calendar_zone: ZoneInfo | None = None,
) -> list[HourForecast]:
    """The next ``hours`` whole hours from the seasonal predictor (empty with under a day of history).

    Each hour's lower value is the lowest 5-minute mean of the same hour yesterday (and a week ago), times
    today's level against then when that is below 1, times the measured lower band: a floor a morning ramp
    can rely on, never one that a quiet day would find too high.
    """
    if series is None or not series.rps:
        return []
    idx = _Index(series)
    now_s = now.timestamp()
    # today's level over the last hour, not the horizon's 10 minutes: the ratio scales every coming hour, and
    # a 10-minute mean swings with each clump, which moved every learned floor (and rewrote its ESS task)
    level = _level(idx, now_s, HOURLY_LEVEL_WINDOW_S)
    upper_k, lower_k = error_bands(state, horizon_s)  # the record's: forecasts over the group's horizon
    first = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    out: list[HourForecast] = []
    for h in range(hours):
        start = first + timedelta(hours=h)
        weighted: list[tuple[float, float]] = []
        lows: list[float] = []
        week = _week_share(idx, start.timestamp() + 1800.0, zone, calendar, calendar_zone)
        refs = reference_days(start.timestamp(), zone, calendar, calendar_zone)
        for days, share in zip(refs, (1 - week, week), strict=True):
            got = _hour_then(
                idx,
                start.timestamp() - lag_s(start.timestamp(), days, zone),
                now_s - lag_s(now_s, days, zone),
                level,
            )
            if got is not None:
                weighted.append((got[0], share))
                lows.append(got[1])
        if not weighted:
            continue
        mean = sum(v * w for v, w in weighted) / sum(w for _, w in weighted)
        out.append(HourForecast(start, mean, mean * upper_k, min(lows) * lower_k))
    return out


def _hour_then(
    idx: _Index, t0_s: float, then_now_s: float, level: float | None
) -> tuple[float, float] | None:
    """(mean, lowest 5-minute mean) of the hour starting at ``t0_s``, rescaled to today's level."""
    parts = [idx.past_mean(t0_s + k * 300.0, t0_s + (k + 1) * 300.0) for k in range(12)]
    known = [p for p in parts if p is not None]
    # half the hour's 5-minute parts, or a sparser history that still spans it (a 15-minute export fills 4)
    filled = [k for k, p in enumerate(parts) if p is not None]
    spans = len(filled) >= 3 and filled[0] < 6 <= filled[-1]
    if len(known) < 6 and not spans:
        return None
    ratio = 1.0
    then_level = idx.past_mean(then_now_s - HOURLY_LEVEL_WINDOW_S, then_now_s)
    if level is not None and then_level is not None and then_level > 1e-6:
        ratio = min(RATIO_CLIP[1], max(RATIO_CLIP[0], level / then_level))
    mean = sum(known) / len(known) * ratio
    return mean, min(known) * min(1.0, ratio)
