"""The demand history of each group: recorded every tick, kept per minute in the store, read as a series.

The service records what its InService instances report (the sum of ``request_rate``, the rate-weighted
token mix) when at least half of those serving reported a fresh value (``read_demand``: the silent ones are
counted at their peers' mean rate); a minute without such a reading stays a hole (unknown, not zero).
Each minute's mean becomes one row of ``demand_samples``; the series the policy reads is held in memory,
loaded from the store on the first tick (so a restart or a takeover resumes from what the last leader
wrote) and appended to thereafter, so a tick costs one small write a minute rather than a read of days
of rows.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fleet.service.store import Store, demand_samples, forecasts
from policies import forecast as fc
from policies import metrics as pm
from policies.model import DemandSeries, GroupHistory, MetricSample
from policies.spec import Calendar

log = logging.getLogger("fleet.service.demand")

STEP_S = 60.0
# A group's reading above this many times what its InService instances serve (the capacity model's rate per
# instance) waits for the next agent period to confirm it before it counts. One instance's agent misreading
# its counters once set the forecast's target to max_size for the scale-in window, and its minute raised the
# same hour's forecast the next day; a real surge is still there 15 s later (in flight or arriving), and a
# one-shot burst that is not is the queue's to absorb, not worth instances that arrive after it.
CONFIRM_ABOVE_CAPACITY = 10.0
MIX_WINDOW_S = 1800.0  # the token mix the capacity is looked up for: the last half hour
# The demand the policy sizes for now: the mean of the readings of the last minute. The agents' rates are over
# one scrape period (15 s), so one clump reads as four times its minute's rate in the period it lands in.
RECENT_WINDOW_S = 60.0
# Retention of ``demand_samples`` and ``forecasts``: the group's ``predictive.history`` (what the forecast
# reads) plus a day (a restart, `fleet forecast` and the console's week view never miss a minute).
RETENTION_MARGIN_S = 86400.0
PRUNE_BATCH_ROWS = 2000  # rows deleted per transaction
PRUNE_MAX_BATCHES = 5  # transactions per table and group each time the leader prunes


@dataclass(frozen=True)
class DemandReading:
    """One group's demand at one time."""

    at: datetime
    rps: float
    prompt_tokens: float | None = None
    output_tokens: float | None = None
    # the newest arrival-rate point it sums: a tick that finds no newer point (an agent's point late or
    # lost) repeats the last reading, and a repeat is not recorded again
    as_of: datetime | None = None
    # instances whose token mean was left out of the mix: longer than any request the group can serve
    refused_mix: tuple[str, ...] = ()


def _fresh(s: MetricSample | None, now: datetime, stale_s: float) -> bool:
    return s is not None and math.isfinite(s.value) and (now - s.at).total_seconds() <= stale_s


def read_demand(
    instances_in_service: Iterable[str],
    metrics: Mapping[str, Mapping[str, MetricSample]],
    now: datetime,
    stale_after_s: float,
    loading: Iterable[str] = (),
    max_tokens: float | None = None,
) -> DemandReading | None:
    """The group's demand: the sum of its InService instances' fresh arrival rates; None unless at least half
    of the serving ones reported.

    Two kinds of silent instance serve nothing and are not counted: those still ``loading`` their weights
    (the balancer has only begun to send to them, and the arrivals are counted where they landed) and those
    whose agent reads vLLM down on a fresh ``vllm_up``. Any other silent one (its agent or CloudMonitor's
    points late or lost) is serving the balancer's share all the same: it is counted at the mean rate of the
    ones that reported. Left out, the minutes recorded while a third of the agents were silent held two
    thirds of the demand, and the next day's forecast and learned floors for that hour with them.

    A token mean above ``max_tokens`` (the most one request of the group can hold, ``served_context``) is
    no served request's: that instance's mean is left out of the mix (its rate still counts). Weighted in,
    one agent's 50,000-token prompts among 1,000-token ones put the mix past the context, where the capacity
    model reads a hundredth of the capacity, or none, for the half hour the mix spans."""
    ids = list(instances_in_service)
    skip = set(loading)
    total = 0.0
    known = 0
    serving = 0
    newest: datetime | None = None
    refused: list[str] = []
    mix: dict[str, list[tuple[float, float]]] = {
        pm.PROMPT_TOKENS_PER_REQUEST: [],
        pm.OUTPUT_TOKENS_PER_REQUEST: [],
    }
    for iid in ids:
        m = metrics.get(iid, {})
        rate = m.get(pm.REQUEST_RATE)
        if rate is None or not _fresh(rate, now, stale_after_s):
            up = m.get(pm.VLLM_UP)
            down = up is not None and _fresh(up, now, stale_after_s) and up.value < pm.ENGINE_DOWN_BELOW
            serving += 0 if (iid in skip and rate is None) or down else 1
            continue
        known += 1
        serving += 1
        total += rate.value
        newest = rate.at if newest is None or rate.at > newest else newest
        for name, pairs in mix.items():
            tok = m.get(name)
            if tok is None or not _fresh(tok, now, stale_after_s):
                continue
            if max_tokens is not None and tok.value > max_tokens:
                refused.append(iid)
                continue
            pairs.append((tok.value, max(rate.value, 1e-6)))

    def weighted(pairs: list[tuple[float, float]]) -> float | None:
        w = sum(x for _, x in pairs)
        return sum(v * x for v, x in pairs) / w if pairs and w > 0 else None

    if not known or known * 2 < serving:
        return None
    return DemandReading(
        now,
        total * serving / known,
        weighted(mix[pm.PROMPT_TOKENS_PER_REQUEST]),
        weighted(mix[pm.OUTPUT_TOKENS_PER_REQUEST]),
        as_of=newest,
        refused_mix=tuple(dict.fromkeys(refused)),
    )


@dataclass(frozen=True)
class ForecastRow:
    """What the forecast made at ``made_at`` predicted for ``at`` (req/s), and the demand observed then."""

    at: datetime
    made_at: datetime
    forecast_rps: float
    forecast_upper_rps: float | None
    actual_rps: float | None


def minute_of(at: datetime) -> datetime:
    at = at.astimezone(UTC)
    return at.replace(second=0, microsecond=0)


@dataclass
class _Minute:
    at: datetime
    rps: list[float] = field(default_factory=list)
    prompt: list[float] = field(default_factory=list)
    output: list[float] = field(default_factory=list)

    def mean(self, values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None


@dataclass
class _GroupLog:
    rps: dict[datetime, float] = field(default_factory=dict)  # minute -> mean rps
    prompt: float | None = None  # the newest mix
    output: float | None = None
    open: _Minute | None = None
    mix: dict[datetime, tuple[float | None, float | None, float]] = field(default_factory=dict)
    cached: tuple[tuple[int, datetime, datetime], tuple[datetime | None, list[float | None]]] | None = None
    readings: deque[tuple[datetime, float]] = field(default_factory=deque)  # the last RECENT_WINDOW_S
    first: datetime | None = None  # the earliest minute in ``rps``
    added: list[datetime] = field(default_factory=list)  # minutes put since ``cached`` was last brought up
    as_of: datetime | None = None  # the newest rate point of the last reading recorded
    held: DemandReading | None = None  # a reading far above capacity, waiting for the next one to confirm it
    surge: bool = False  # readings above the ceiling confirmed and not yet below it: counted as they come
    share: tuple[int, float] | None = None  # (hour, the forecast's week share for it)

    def put(self, minute: datetime, rps: float) -> None:
        self.rps[minute] = rps
        self.first = minute if self.first is None or minute < self.first else self.first
        self.added.append(minute)


class DemandLog:
    """Per-group minute series of demand, persisted in ``demand_samples``."""

    def __init__(self, store: Store, history_s: Mapping[str, float]) -> None:
        self.store = store
        self.history_s = dict(history_s)
        self._groups: dict[str, _GroupLog] = {}

    def forget(self, group: str) -> None:
        """Drop what is held of ``group`` in memory: the next read loads it from the store again. Called when
        this replica takes the group's shard (back): another leader may have written minutes meanwhile,
        which the memory of an earlier leadership lacks (it is loaded from the store only once)."""
        self._groups.pop(group, None)

    # -- writes ----------------------------------------------------------------------------------------
    def record(self, group: str, reading: DemandReading, serves_rps: float | None = None) -> None:
        """Add one tick's reading; a finished minute is written to the store. A reading of the same rate
        points as the last one recorded (no newer point since) is not added: each counts once in the minute's
        mean and in the recent level, so every agent period weighs the same. A reading above
        ``CONFIRM_ABOVE_CAPACITY`` times ``serves_rps`` (what the group's instances serve) is held until the
        next one (of newer points) confirms it by being above it too, otherwise dropped; once confirmed, the
        readings above it count as they come until one falls below it."""
        ceiling_rps = None if serves_rps is None else CONFIRM_ABOVE_CAPACITY * serves_rps
        glog = self._log(group, reading.at)
        if reading.as_of is not None:
            if reading.as_of == glog.as_of:
                return
            glog.as_of = reading.as_of
        held, glog.held = glog.held, None
        if ceiling_rps is None or reading.rps <= ceiling_rps:
            glog.surge = False
            if held is not None:
                log.warning(
                    "group %s: demand %.4g req/s was not confirmed (the next reading: %.4g req/s): left out",
                    group,
                    held.rps,
                    reading.rps,
                    extra={"group": group},
                )
        elif held is None and not glog.surge:
            glog.held = reading
            log.warning(
                "group %s: demand %.4g req/s is above %.4g (%gx what its instances serve): waiting for the "
                "next reading to confirm it",
                group,
                reading.rps,
                ceiling_rps,
                CONFIRM_ABOVE_CAPACITY,
                extra={"group": group},
            )
            return
        else:  # confirmed: the held reading counts too, and the next ones above the ceiling at once
            glog.surge = True
            if held is not None:
                self._add(group, glog, held)
        self._add(group, glog, reading)

    def _add(self, group: str, glog: _GroupLog, reading: DemandReading) -> None:
        minute = minute_of(reading.at)
        if glog.open is not None and glog.open.at != minute:
            self._close(group, glog)
        if glog.open is None:
            glog.open = _Minute(minute)
        glog.open.rps.append(reading.rps)
        glog.readings.append((reading.at, reading.rps))
        if reading.prompt_tokens is not None:
            glog.open.prompt.append(reading.prompt_tokens)
            glog.prompt = reading.prompt_tokens
        if reading.output_tokens is not None:
            glog.open.output.append(reading.output_tokens)
            glog.output = reading.output_tokens

    def _close(self, group: str, glog: _GroupLog) -> None:
        m = glog.open
        assert m is not None
        glog.open = None
        rps = m.mean(m.rps)
        if rps is None:
            return
        glog.put(m.at, rps)
        glog.mix[m.at] = (m.mean(m.prompt), m.mean(m.output), max(rps, 1e-6))
        self.write(group, [DemandReading(m.at, rps, m.mean(m.prompt), m.mean(m.output))])

    def write(self, group: str, rows: Iterable[DemandReading]) -> int:
        """Insert minute rows (a minute already stored is left as it is); the number written."""
        values: list[dict[str, Any]] = [
            {
                "service": self.store.service,
                "group_name": group,
                "at": minute_of(r.at),
                "request_rate_rps": float(r.rps),
                "prompt_tokens": r.prompt_tokens,
                "output_tokens": r.output_tokens,
            }
            for r in rows
        ]
        if not values:
            return 0
        with self.store.begin() as conn:
            existing = {
                row.at
                for row in conn.execute(
                    sa.select(demand_samples.c.at).where(
                        demand_samples.c.service == self.store.service,
                        demand_samples.c.group_name == group,
                        demand_samples.c.at >= min(v["at"] for v in values),
                        demand_samples.c.at <= max(v["at"] for v in values),
                    )
                )
            }
            fresh = [v for v in values if v["at"] not in existing]
            if fresh:
                conn.execute(sa.insert(demand_samples), fresh)
        glog = self._groups.get(group)
        if glog is not None:
            for v in fresh:
                glog.put(v["at"], v["request_rate_rps"])
        return len(fresh)

    # -- reads -----------------------------------------------------------------------------------------
    def rows(self, group: str, since: datetime, until: datetime | None = None) -> list[DemandReading]:
        q = sa.select(demand_samples).where(
            demand_samples.c.service == self.store.service,
            demand_samples.c.group_name == group,
            demand_samples.c.at >= since,
        )
        if until is not None:
            q = q.where(demand_samples.c.at <= until)
        with self.store.begin() as conn:
            result = conn.execute(q.order_by(demand_samples.c.at))
            return [DemandReading(r.at, r.request_rate_rps, r.prompt_tokens, r.output_tokens) for r in result]

    def _log(self, group: str, now: datetime) -> _GroupLog:
        glog = self._groups.get(group)
        if glog is None:
            glog = _GroupLog()
            span = self.history_s.get(group, 7 * 86400.0)
            for r in self.rows(group, now - timedelta(seconds=span)):
                glog.put(minute_of(r.at), r.rps)
                glog.mix[minute_of(r.at)] = (r.prompt_tokens, r.output_tokens, max(r.rps, 1e-6))
                glog.prompt = r.prompt_tokens if r.prompt_tokens is not None else glog.prompt
                glog.output = r.output_tokens if r.output_tokens is not None else glog.output
            self._groups[group] = glog
        return glog

    def recent(self, group: str, now: datetime) -> float | None:
        """The mean of the readings of the last ``RECENT_WINDOW_S`` (None: no reading in it). Each is
        checked against the window, not only the oldest: after the clock stepped back, the readings taken
        before the step lie in the future and the ones after it behind them, so popping from the front stops
        early (the "last minute" was the mean of every reading since the step, an hour of them for an
        hour's step)."""
        glog = self._log(group, now)
        start = now - timedelta(seconds=RECENT_WINDOW_S)
        while glog.readings and glog.readings[0][0] <= start:
            glog.readings.popleft()
        values = [rps for at, rps in glog.readings if start < at <= now]
        return sum(values) / len(values) if values else None

    def mix(self, group: str, now: datetime) -> tuple[float | None, float | None]:
        """The token mix of the last ``MIX_WINDOW_S`` (rate-weighted), so the capacity does not flicker."""
        glog = self._log(group, now)
        start = minute_of(now - timedelta(seconds=MIX_WINDOW_S))
        recent = [(at, m) for at, m in glog.mix.items() if at >= start]
        for old in [at for at in glog.mix if at < start]:
            del glog.mix[old]
        out: list[float | None] = []
        for k in (0, 1):
            pairs: list[tuple[float, float]] = []
            for _, m in recent:
                value = m[k]
                if value is not None:
                    pairs.append((value, m[2]))
            w = sum(x for _, x in pairs)
            out.append(sum(v * x for v, x in pairs) / w if pairs and w > 0 else None)
        prompt = out[0] if out[0] is not None else glog.prompt
        output = out[1] if out[1] is not None else glog.output
        return prompt, output

    def series(self, group: str, now: datetime) -> DemandSeries | None:
        """The minutes of the last ``history`` up to ``now`` (the open minute included), oldest first.

        The list of closed minutes is rebuilt only when a minute closes (a week is 10,080 buckets: rebuilding
        and validating it every tick would cost more than the decision); ticks within a minute copy it and set
        the open minute.
        """
        glog = self._log(group, now)
        span = self.history_s.get(group, 7 * 86400.0)
        start = minute_of(now - timedelta(seconds=span))
        end = minute_of(now)
        key = (len(glog.rps), start, end)
        if glog.cached is None or glog.cached[0] != key:
            glog.cached = (key, self._refresh(glog, start, end))
        first, closed = glog.cached[1]
        if first is None:
            first = glog.open.at if glog.open is not None and glog.open.rps else None
            if first is None:
                return None
        rps = list(closed)
        if glog.open is not None and glog.open.rps:
            i = int((glog.open.at - first).total_seconds() // STEP_S)
            while len(rps) <= i:
                rps.append(None)
            if i >= 0:
                rps[i] = sum(glog.open.rps) / len(glog.open.rps)
        # built here from floats and None only: no validation needed (model_construct skips it)
        return DemandSeries.model_construct(start=first, step_s=STEP_S, rps=rps)

    def week_share(
        self,
        group: str,
        now: datetime,
        zone: ZoneInfo | None,
        calendar: Calendar | None = None,
        calendar_zone: ZoneInfo | None = None,
    ) -> float:
        """The forecast's week-ago share for the hour holding ``now`` (``policies.forecast.week_share``; the
        group's ``calendar``, its dates on ``calendar_zone``'s clock, as the forecast is given them), worked
        out at the hour's first tick and kept for the rest of it: it reads only hours at least half a day old
        (a minute written that far back meanwhile, by ``write``, waits for the next hour)."""
        glog = self._log(group, now)
        hour = fc.hour_of(now)
        if glog.share is None or glog.share[0] != hour:
            series = self.series(group, now)
            glog.share = (hour, fc.week_share(series, now, zone, calendar, calendar_zone))
        return glog.share[1]

    def _refresh(
        self, glog: _GroupLog, start: datetime, end: datetime
    ) -> tuple[datetime | None, list[float | None]]:
        """The closed minutes as a list: the kept one brought up with the minutes put since (``added``) when
        none came before its first, else built again; the front is trimmed a day at a time (the forecast
        reads no further back than ``history``; extra hours cost nothing)."""
        if glog.first is not None and glog.first < start - timedelta(days=1):
            for old in [k for k in glog.rps if k < start]:
                del glog.rps[old]
            glog.first = min(glog.rps) if glog.rps else None
            glog.cached = None
        if glog.cached is not None:
            first, rps = glog.cached[1]
            if first is not None and first == glog.first:
                # nothing earlier than the list's first minute was added: set the added minutes in place
                n = int((end - first).total_seconds() // STEP_S) + 1
                rps = rps + [None] * max(0, n - len(rps))
                later: list[datetime] = []
                for at in glog.added:
                    i = int((at - first).total_seconds() // STEP_S)
                    if i >= len(rps):
                        later.append(at)  # after ``end``: set once the list reaches it
                    elif at in glog.rps:
                        rps[i] = glog.rps[at]
                glog.added = later
                return first, rps
        glog.added = []
        return self._build(glog.rps, end)

    @staticmethod
    def _build(values: Mapping[datetime, float], end: datetime) -> tuple[datetime | None, list[float | None]]:
        if not values:
            return None, []
        first = min(values)
        n = int((end - first).total_seconds() // STEP_S) + 1
        rps: list[float | None] = [None] * max(n, 0)
        for at, v in values.items():
            i = int((at - first).total_seconds() // STEP_S)
            if 0 <= i < n:
                rps[i] = v
        return first, rps


# -- retention ------------------------------------------------------------------------------------------
def retention_s(history_s: float) -> float:
    """How long a group's demand minutes and forecasts are kept: its ``predictive.history`` and a margin."""
    return float(history_s) + RETENTION_MARGIN_S


def prune(
    store: Store,
    group: str,
    before: datetime,
    fence: Callable[[], bool] | None = None,
    batch_rows: int = PRUNE_BATCH_ROWS,
    max_batches: int = PRUNE_MAX_BATCHES,
) -> dict[str, int]:
    """Delete one group's ``demand_samples`` minutes before ``before`` and its ``forecasts`` made before it,
    oldest first, in transactions of at most ``batch_rows`` rows and at most ``max_batches`` of them per
    table (a backlog of months goes over several calls, never in one long lock). ``fence`` is asked before
    each delete: False stops (the lease is lost). A group with nothing to prune costs one read per table.
    The rows deleted per table."""
    done = {"demand_samples": 0, "forecasts": 0}
    for table, col in ((demand_samples, demand_samples.c.at), (forecasts, forecasts.c.made_at)):
        mine = (table.c.service == store.service, table.c.group_name == group, col < before)
        for _ in range(max_batches):
            oldest = sa.select(col).where(*mine).order_by(col).limit(batch_rows).subquery()
            with store.engine.connect() as conn:
                last = conn.execute(sa.select(sa.func.max(oldest.c[col.name]))).scalar()
            if last is None:
                break  # nothing (more) to prune: one read, no fence, no write
            if fence is not None and not fence():
                return done
            with store.begin() as conn:
                # the batch is every row up to its newest (the key is unique per group): no long IN list
                n = int(conn.execute(sa.delete(table).where(*mine, col <= last)).rowcount or 0)
            done[table.name] += n
            if n < batch_rows:
                break
    return done


def stored_groups(store: Store) -> set[str]:
    """The groups with demand minutes or forecasts in the store (of this service)."""
    with store.engine.connect() as conn:
        names: set[str] = set()
        for table in (demand_samples, forecasts):
            q = sa.select(table.c.group_name).where(table.c.service == store.service).distinct()
            names.update(r.group_name for r in conn.execute(q))
    return names


# -- forecasts: what was predicted, kept to be set against what came -------------------------------------
def record_forecasts(
    store: Store, groups: Mapping[str, GroupHistory], now: datetime, conn: Connection
) -> int:
    """Store the forecast each group remembered this tick (the policy keeps one a minute: its value at the
    end of the horizon, which it judges when that time comes); the number of rows written."""
    rows: list[dict[str, Any]] = []
    for name, gh in groups.items():
        state = gh.forecast
        if state.last_at != now or not state.pending:
            continue
        p = state.pending[-1]
        rows.append(
            {
                "service": store.service,
                "group_name": name,
                "made_at": now,
                "at": p.due,
                "forecast_rps": float(p.mean_rps),
                "forecast_upper_rps": float(p.upper_rps),
            }
        )
    if not rows:
        return 0
    seen = {
        (r.group_name, r.made_at)
        for r in conn.execute(
            sa.select(forecasts.c.group_name, forecasts.c.made_at).where(
                forecasts.c.service == store.service, forecasts.c.made_at == now
            )
        )
    }
    fresh = [r for r in rows if (r["group_name"], r["made_at"]) not in seen]
    if fresh:
        conn.execute(sa.insert(forecasts), fresh)
    return len(fresh)


def forecast_against_actual(store: Store, group: str, since: datetime, until: datetime) -> list[ForecastRow]:
    """The forecasts for times in ``[since, until]``, oldest first, each with the demand observed in its
    minute (None while that minute is still to come, or went unmeasured)."""
    fq = (
        sa.select(forecasts)
        .where(
            forecasts.c.service == store.service,
            forecasts.c.group_name == group,
            forecasts.c.at >= since,
            forecasts.c.at <= until,
        )
        .order_by(forecasts.c.at)
    )
    dq = sa.select(demand_samples.c.at, demand_samples.c.request_rate_rps).where(
        demand_samples.c.service == store.service,
        demand_samples.c.group_name == group,
        demand_samples.c.at >= minute_of(since),
        demand_samples.c.at <= until,
    )
    with store.engine.connect() as c:
        rows = list(c.execute(fq))
        actual = {minute_of(r.at): r.request_rate_rps for r in c.execute(dq)} if rows else {}
    return [
        ForecastRow(r.at, r.made_at, r.forecast_rps, r.forecast_upper_rps, actual.get(minute_of(r.at)))
        for r in rows
    ]
