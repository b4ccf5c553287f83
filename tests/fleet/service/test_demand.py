"""The demand history: minutes in the store, the series the policy reads, and a restart resuming from it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from fleet.service.demand import (
    DemandLog,
    DemandReading,
    forecast_against_actual,
    prune,
    read_demand,
    record_forecasts,
    retention_s,
)
from fleet.service.store import demand_samples, forecasts, open_store
from policies import metrics as pm
from policies.model import ForecastState, GroupHistory, MetricSample, PendingForecast

NOW = datetime(2026, 12, 7, 2, 0, 30, tzinfo=UTC)


def _metrics(rate: float, age_s: float = 0.0) -> dict[str, MetricSample]:
    at = NOW - timedelta(seconds=age_s)
    return {
        pm.REQUEST_RATE: MetricSample(value=rate, at=at),
        pm.PROMPT_TOKENS_PER_REQUEST: MetricSample(value=1000.0, at=at),
        pm.OUTPUT_TOKENS_PER_REQUEST: MetricSample(value=100.0, at=at),
    }


def test_group_demand_is_the_sum_and_the_rate_weighted_mix():
    metrics = {"a": _metrics(3.0), "b": _metrics(1.0)}
    metrics["b"][pm.PROMPT_TOKENS_PER_REQUEST] = MetricSample(value=2000.0, at=NOW)
    r = read_demand(["a", "b"], metrics, NOW, 120)
    assert r is not None and r.rps == 4.0
    assert r.prompt_tokens == (3 * 1000 + 1 * 2000) / 4


def test_demand_needs_half_the_instances_fresh():
    metrics = {"a": _metrics(3.0), "b": _metrics(1.0, age_s=600), "c": _metrics(1.0, age_s=600)}
    assert read_demand(["a", "b", "c"], metrics, NOW, 120) is None
    assert read_demand([], {}, NOW, 120) is None


def test_minutes_are_stored_and_a_new_log_resumes_from_the_store(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        log = DemandLog(store, {"chat": 86400})
        for k in range(5):
            log.record("chat", DemandReading(NOW + timedelta(minutes=k), 2.0 + k, 900, 200))
        s = log.series("chat", NOW + timedelta(minutes=4))
        assert s is not None and s.rps == [2.0, 3.0, 4.0, 5.0, 6.0]  # the open minute included
        assert len(log.rows("chat", NOW - timedelta(hours=1))) == 4  # finished minutes only
        again = DemandLog(store, {"chat": 86400}).series("chat", NOW + timedelta(minutes=5))
        assert again is not None and again.rps[:4] == [2.0, 3.0, 4.0, 5.0] and again.rps[-1] is None
        assert log.write("chat", [DemandReading(NOW, 99.0)]) == 0  # a stored minute is kept
    finally:
        store.close()


def test_the_recent_demand_is_the_mean_of_the_last_minute_of_readings(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        log = DemandLog(store, {"chat": 86400})
        assert log.recent("chat", NOW) is None  # no reading yet
        # one clump of arrivals lands in one 15 s scrape period: 12 req/s there, 2 in the three around it
        for k, rps in enumerate((2.0, 12.0, 2.0, 2.0, 2.0)):
            log.record("chat", DemandReading(NOW + timedelta(seconds=15 * k), rps))
        at = NOW + timedelta(seconds=45)
        assert log.recent("chat", at) == (2.0 + 12.0 + 2.0 + 2.0) / 4  # readings at 0, 15, 30 and 45 s
        at = NOW + timedelta(seconds=60)
        assert log.recent("chat", at) == (12.0 + 2.0 + 2.0 + 2.0) / 4  # the reading at 0 s is a minute old
        assert log.recent("chat", NOW + timedelta(minutes=5)) is None  # nothing within the last minute
    finally:
        store.close()


def test_a_tick_that_sees_no_newer_rate_adds_no_reading(tmp_path):
    # An agent's point late or missing: the tick reads the same points as the tick before (same newest time).
    # Counted twice, that reading would weigh twice in the recent level and stretch it past the last minute.
    store = open_store(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        log = DemandLog(store, {"chat": 86400})
        for k, rps in enumerate((2.0, 12.0, 4.0)):  # points at 0, 30 and 60 s; each seen again 15 s on
            read_at = NOW + timedelta(seconds=30 * k)
            log.record("chat", DemandReading(read_at, rps, as_of=read_at))
            if k < 2:
                log.record("chat", DemandReading(read_at + timedelta(seconds=15), rps, as_of=read_at))
        # the last minute's two reads, once each (counted at every tick: 2 at 15 s and 12 twice, 7.5)
        assert log.recent("chat", NOW + timedelta(seconds=60)) == (12.0 + 4.0) / 2
        metrics = {"a": _metrics(3.0, age_s=10), "b": _metrics(1.0, age_s=20)}
        assert read_demand(["a", "b"], metrics, NOW, 120).as_of == NOW - timedelta(seconds=10)
    finally:
        store.close()


def test_a_reading_far_above_the_ceiling_counts_only_once_the_next_one_confirms_it(tmp_path, caplog):
    store = open_store(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        log = DemandLog(store, {"chat": 86400})

        def read(k: int, rps: float) -> float | None:
            at = NOW + timedelta(seconds=15 * k)
            log.record("chat", DemandReading(at, rps, as_of=at), serves_rps=3.0)  # held above 30
            return log.recent("chat", at)

        assert read(0, 2.0) == 2.0
        assert read(1, 500.0) == 2.0  # held
        assert read(2, 2.0) == 2.0  # not confirmed: left out
        assert read(3, 90.0) == 2.0  # held
        # the last minute's readings (the one at 0 s aged out): confirmed, the held 90 counts beside the 60
        assert read(4, 60.0) == (2.0 + 90.0 + 60.0) / 3
        assert read(5, 70.0) == (2.0 + 90.0 + 60.0 + 70.0) / 4  # the surge goes on: counted at once
        assert read(6, 3.0) == (90.0 + 60.0 + 70.0 + 3.0) / 4  # below: the surge is over
        assert read(7, 80.0) == (60.0 + 70.0 + 3.0) / 3  # so the next one above waits again
    finally:
        store.close()
    said = [r.getMessage() for r in caplog.records if r.name == "fleet.service.demand"]
    assert sum("waiting for the next reading" in m for m in said) == 3
    assert sum("left out" in m for m in said) == 1


def test_the_series_kept_from_tick_to_tick_equals_one_read_fresh_from_the_store(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        log = DemandLog(store, {"chat": 86400})
        log.write("chat", [DemandReading(NOW - timedelta(minutes=k), 3.0) for k in range(1, 600)])
        at = NOW
        for i in range(20):
            at = NOW + timedelta(seconds=15 * i)
            log.record("chat", DemandReading(at, 3.0 + i))
            kept = log.series("chat", at)
        fresh = DemandLog(store, {"chat": 86400}).series("chat", at)
        assert kept is not None and fresh is not None
        assert kept.start == fresh.start
        assert kept.rps[:-1] == fresh.rps[:-1]  # all but the open minute, which only the live log has
    finally:
        store.close()


def _by_minute(series, since: datetime) -> dict[datetime, float]:
    """A series' closed minutes from ``since`` on (the open minute only the live log has)."""
    out = {}
    for k, v in enumerate(series.rps[:-1]):
        minute = series.start + timedelta(seconds=k * series.step_s)
        if v is not None and minute >= since:
            out[minute] = v
    return out


def test_the_kept_series_stays_equal_to_a_fresh_read_as_minutes_arrive_out_of_order_and_age_out(tmp_path):
    """Minutes written behind the newest (an import), before the first one, and a window that moves past a
    day of them: the list kept from tick to tick holds what a fresh read of the store holds, minute for
    minute."""
    store = open_store(f"sqlite:///{tmp_path / 'f.db'}")
    span = 6 * 3600
    try:
        log = DemandLog(store, {"chat": span})
        log.write("chat", [DemandReading(NOW - timedelta(minutes=k), float(k)) for k in range(1, 300, 2)])
        at = NOW
        for i in range(4 * 60 * 33):  # 33 hours of 15 s ticks: the front is trimmed on the way
            at = NOW + timedelta(seconds=15 * i)
            log.record("chat", DemandReading(at, 1.0 + i % 7))
            if i % 97 == 0:  # a gap filled later, behind the newest minute
                log.write("chat", [DemandReading(at - timedelta(minutes=30), 50.0 + i)])
            if i == 500:  # before the first minute held
                log.write("chat", [DemandReading(NOW - timedelta(minutes=400), 9.0)])
            if i % 240 == 0 or i == 501:
                kept = log.series("chat", at)
                fresh = DemandLog(store, {"chat": span}).series("chat", at)
                assert kept is not None and fresh is not None
                assert _by_minute(kept, fresh.start) == _by_minute(fresh, fresh.start), i
    finally:
        store.close()


def remembered(made_at: datetime, horizon_min: int, rps: float, upper: float) -> GroupHistory:
    """A group history whose forecast remembered, at ``made_at``, ``rps`` for the end of its horizon."""
    due = made_at + timedelta(minutes=horizon_min)
    pending = [PendingForecast(due=due, mean_rps=rps, upper_rps=upper)]
    return GroupHistory(forecast=ForecastState(pending=pending, last_at=made_at))


def test_forecasts_are_stored_once_and_read_back_against_the_demand_observed_then(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        for k in range(3):  # forecasts made at NOW+k min for NOW+k+10 min (mid-minute: 20 s past)
            made = NOW + timedelta(minutes=k, seconds=20)
            groups = {"chat": remembered(made, 10, 3.0 + k, 4.5 + k), "idle": GroupHistory()}
            with store.begin() as conn:
                assert record_forecasts(store, groups, made, conn) == 1
            with store.begin() as conn:  # the same tick again (a retry) writes nothing twice
                assert record_forecasts(store, groups, made, conn) == 0
        with store.begin() as conn:  # a tick that remembered nothing new (last_at is older) writes nothing
            later = NOW + timedelta(minutes=3)
            assert record_forecasts(store, {"chat": remembered(NOW, 10, 9.0, 9.0)}, later, conn) == 0
        # demand observed for the first two of the forecast minutes only
        DemandLog(store, {"chat": 86400}).write(
            "chat",
            [
                DemandReading(NOW + timedelta(minutes=10), 2.5),
                DemandReading(NOW + timedelta(minutes=11), 5.0),
            ],
        )
        rows = forecast_against_actual(store, "chat", NOW, NOW + timedelta(hours=1))
        assert [(r.forecast_rps, r.forecast_upper_rps, r.actual_rps) for r in rows] == [
            (3.0, 4.5, 2.5),
            (4.0, 5.5, 5.0),
            (5.0, 6.5, None),
        ]
        assert rows[0].at == NOW + timedelta(minutes=10, seconds=20)
        assert rows[0].made_at == NOW + timedelta(seconds=20)
        # the window is on the time forecast for, and other groups are not mixed in
        assert len(forecast_against_actual(store, "chat", NOW, NOW + timedelta(minutes=11))) == 1
        assert forecast_against_actual(store, "idle", NOW, NOW + timedelta(hours=1)) == []
    finally:
        store.close()


# -- retention --------------------------------------------------------------------------------------------
T0 = NOW.replace(second=0)  # on a minute: demand minutes are stored at the minute's start


def _fill(store, group: str, start: datetime, minutes: int) -> None:
    """``minutes`` demand minutes from ``start``, and one forecast made in each of them."""
    DemandLog(store, {group: 86400}).write(
        group, [DemandReading(start + timedelta(minutes=k), 1.0 + k) for k in range(minutes)]
    )
    rows = [
        {
            "service": store.service,
            "group_name": group,
            "made_at": start + timedelta(minutes=k, seconds=20),
            "at": start + timedelta(minutes=k + 10, seconds=20),
            "forecast_rps": 1.0,
            "forecast_upper_rps": 1.5,
        }
        for k in range(minutes)
    ]
    with store.begin() as conn:
        conn.execute(sa.insert(forecasts), rows)


def _counts(store, group: str) -> tuple[list[datetime], list[datetime]]:
    with store.begin() as conn:
        demand = conn.execute(
            sa.select(demand_samples.c.at).where(demand_samples.c.group_name == group).order_by("at")
        )
        made = conn.execute(
            sa.select(forecasts.c.made_at).where(forecasts.c.group_name == group).order_by("made_at")
        )
        return [r[0] for r in demand], [r[0] for r in made]


def test_pruning_deletes_the_groups_rows_older_than_the_cutoff_and_nothing_else(database_url):
    store = open_store(database_url)
    try:
        _fill(store, "chat", T0, 10)
        _fill(store, "other", T0, 10)
        cutoff = T0 + timedelta(minutes=4)
        done = prune(store, "chat", cutoff)
        assert done == {"demand_samples": 4, "forecasts": 4}  # minutes 0-3, and the forecasts made in them
        demand, made = _counts(store, "chat")
        assert demand == [T0 + timedelta(minutes=k) for k in range(4, 10)]
        assert made == [T0 + timedelta(minutes=k, seconds=20) for k in range(4, 10)]
        assert [len(x) for x in _counts(store, "other")] == [10, 10]  # another group is left alone
        assert prune(store, "chat", cutoff) == {"demand_samples": 0, "forecasts": 0}
        # another service's rows in the same tables are not this one's to delete
        assert prune(open_store(database_url, service="elsewhere"), "other", T0 + timedelta(days=1)) == {
            "demand_samples": 0,
            "forecasts": 0,
        }
        assert [len(x) for x in _counts(store, "other")] == [10, 10]
    finally:
        store.close()


def test_pruning_goes_in_bounded_batches_oldest_first_and_stops_when_the_lease_is_lost(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        _fill(store, "chat", T0, 20)
        cutoff = T0 + timedelta(minutes=15)
        # 2 transactions of 3 rows per table: 6 of the 15 old rows go, the oldest ones
        assert prune(store, "chat", cutoff, batch_rows=3, max_batches=2) == {
            "demand_samples": 6,
            "forecasts": 6,
        }
        demand, made = _counts(store, "chat")
        assert demand[0] == T0 + timedelta(minutes=6) and len(demand) == 14
        assert made[0] == T0 + timedelta(minutes=6, seconds=20) and len(made) == 14
        # the lease lost: nothing more is deleted
        assert prune(store, "chat", cutoff, fence=lambda: False) == {"demand_samples": 0, "forecasts": 0}
        assert [len(x) for x in _counts(store, "chat")] == [14, 14]
        # the next calls carry on until only the recent minutes are left
        prune(store, "chat", cutoff, batch_rows=3, max_batches=2)
        prune(store, "chat", cutoff, batch_rows=3, max_batches=2)
        demand, made = _counts(store, "chat")
        assert demand == [T0 + timedelta(minutes=k) for k in range(15, 20)]
        assert len(made) == 5
    finally:
        store.close()


def test_the_retention_is_the_forecasts_history_and_a_day():
    assert retention_s(7 * 86400) == 8 * 86400


def test_the_recent_level_after_the_clock_steps_back_is_the_last_minute(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        log = DemandLog(store, {"chat": 86400})
        for k in range(8):  # two minutes at 100 req/s
            at = NOW + timedelta(seconds=15 * k)
            log.record("chat", DemandReading(at, 100.0, as_of=at))
        back = NOW - timedelta(hours=1)  # the clock steps back an hour
        for k in range(40):  # ten minutes: 50 req/s, then 2 req/s for the last one
            at = back + timedelta(seconds=15 * k)
            log.record("chat", DemandReading(at, 2.0 if k >= 36 else 50.0, as_of=at))
        assert log.recent("chat", back + timedelta(seconds=15 * 39)) == 2.0
    finally:
        store.close()


def test_silent_serving_instances_count_at_their_peers_rate_not_as_zero():
    metrics = {"a": _metrics(1.0), "b": _metrics(1.0), "c": _metrics(1.0, age_s=600), "d": {}}
    # c's agent went quiet ten minutes ago, d never reported: both serve their share all the same
    r = read_demand(["a", "b", "c", "d"], metrics, NOW, 120)
    assert r is not None and r.rps == 4.0
    # an instance still loading its weights, or one whose agent reads vLLM down, serves nothing
    metrics["c"] = {pm.VLLM_UP: MetricSample(value=0.0, at=NOW)}
    r = read_demand(["a", "b", "c", "d"], metrics, NOW, 120, loading=["d"])
    assert r is not None and r.rps == 2.0
    # one that reported before is serving, loading or not
    metrics["d"] = _metrics(1.0, age_s=600)
    r = read_demand(["a", "b", "c", "d"], metrics, NOW, 120, loading=["d"])
    assert r is not None and r.rps == 3.0


def test_a_token_mean_longer_than_any_request_the_group_serves_is_left_out_of_the_mix():
    metrics = {"a": _metrics(3.0), "b": _metrics(1.0), "c": _metrics(1.0)}
    metrics["c"][pm.PROMPT_TOKENS_PER_REQUEST] = MetricSample(value=50_000.0, at=NOW)
    r = read_demand(["a", "b", "c"], metrics, NOW, 120, max_tokens=8192)
    assert r is not None and r.rps == 5.0  # its arrivals still count
    assert r.prompt_tokens == 1000.0 and r.output_tokens == 100.0
    assert r.refused_mix == ("c",)
    unbounded = read_demand(["a", "b", "c"], metrics, NOW, 120)
    assert unbounded is not None and unbounded.prompt_tokens == (4 * 1000 + 50_000) / 5


def test_the_forecasts_week_share_is_worked_out_once_an_hour_and_is_the_policys_own(tmp_path, monkeypatch):
    """The week share reads only hours at least half a day old: the service works it out at an hour's first
    tick and keeps it (``DemandLog.week_share``), and the forecast given it is the one that works it out."""
    from policies import forecast as fc

    store = open_store(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        start = NOW - timedelta(days=9)
        # weekdays busy, weekends quiet: the week ago speaks for more than its 35 %
        rows = [
            DemandReading(
                start + timedelta(minutes=k),
                2.0 if (start + timedelta(minutes=k)).weekday() >= 5 else 10.0 + (k % 7),
            )
            for k in range(9 * 1440)
        ]
        log = DemandLog(store, {"chat": 9 * 86400})
        log.write("chat", rows)
        calls = []
        real = fc._week_share
        monkeypatch.setattr(fc, "_week_share", lambda *a: calls.append(a) or real(*a))
        ticks = [NOW + timedelta(seconds=15 * k) for k in range(8 * 60)]  # two hours of 15 s ticks
        shares = {t: log.week_share("chat", t, None) for t in ticks}
        assert len(calls) == len({fc.hour_of(t) for t in ticks}) == 3  # 02:00, 03:00 and 04:00
        for t in (ticks[0], ticks[-1]):
            series = log.series("chat", t)
            assert shares[t] == fc.week_share(series, t)
            given = fc.forecast(series, t, 300.0, ForecastState(), share=shares[t])
            assert given == fc.forecast(series, t, 300.0, ForecastState())
    finally:
        store.close()


def test_the_week_share_is_judged_with_the_groups_calendar(tmp_path):
    """A group with a calendar: the hour's week share is judged on the days its forecast reads
    (``policies.forecast.week_share`` given the calendar), not on plain yesterday and a week ago. The
    Thursday after a holiday Wednesday, of office traffic whose Thursdays have their own shape."""
    from policies import forecast as fc
    from policies.spec import Calendar

    calendar = Calendar.model_validate({"holidays": ["2026-12-16"]})
    now = datetime(2026, 12, 17, 10, 0, 30, tzinfo=UTC)

    def rps(t: datetime) -> float:
        if calendar.weekday_of(t.date()) >= 5:
            return 0.2
        if not 9 <= t.hour < 18:
            return 0.5
        return (25.0 if t.hour >= 14 else 4.0) if t.weekday() == 3 else 10.0

    store = open_store(f"sqlite:///{tmp_path / 'f.db'}")
    try:
        start = now - timedelta(days=12)
        log = DemandLog(store, {"chat": 12 * 86400})
        log.write(
            "chat",
            [
                DemandReading(start + timedelta(minutes=k), rps(start + timedelta(minutes=k)))
                for k in range(12 * 1440)
            ],
        )
        series = log.series("chat", now)
        shared = log.week_share("chat", now, None, calendar)
        assert shared == fc.week_share(series, now, None, calendar)
        assert shared > fc.week_share(series, now) + 0.05  # the holiday no longer reads as last week failing
    finally:
        store.close()
