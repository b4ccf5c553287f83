"""The demand history: minutes in the store, the series the policy reads, and a restart resuming from it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fleet.service.demand import DemandLog, DemandReading, read_demand
from fleet.service.store import open_store
from policies import metrics as pm
from policies.model import MetricSample

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
