"""End to end, predictive: `fleet serve` against the fake cloud with two days of seasonal demand history in
its store raises capacity ahead of a ramp that yesterday had (before any rule fires) and mirrors the learned
floor as an ESS scheduled task."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleet.service.demand import DemandLog, DemandReading, forecast_against_actual, minute_of
from fleet.service.store import open_store
from tests.fleet.service.test_e2e import wait_for, world  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

PREDICTIVE = """\
min_size: 1
max_size: 10
warm_floor: 1
cold_start_s: 2
scale_out:
  - {metric: queue_waiting_per_instance, above: 2, for: 2s}
isolation: {enabled: false}
predictive: {mode: on, capacity_rps: 1.0, horizon: 10m, headroom: 0.5}
"""


def seasonal_history(now: datetime) -> list[DemandReading]:
    """Two days at 2 req/s, except that each of them ramped to 8 req/s five minutes after this time of day."""
    rows = []
    start = minute_of(now - timedelta(days=2))
    t = start
    while t < now - timedelta(minutes=1):
        ramp = any(
            now - timedelta(days=d) + timedelta(minutes=5) <= t < now - timedelta(days=d) + timedelta(hours=3)
            for d in (1, 2)
        )
        rows.append(DemandReading(t, 8.0 if ramp else 2.0, 800.0, 200.0))
        t += timedelta(minutes=1)
    return rows


def test_seasonal_history_raises_capacity_ahead_of_the_ramp_and_writes_the_learned_floor(world):  # noqa: F811
    store = open_store(world.db_url)
    try:
        DemandLog(store, {"chat": 7 * 86400}).write("chat", seasonal_history(datetime.now(UTC)))
    finally:
        store.close()
    world._publish["vllm_request_rate"] = 2.0  # today: still the night's 2 req/s, spread over InService
    world.publish_queue(0.0)  # nothing waits: no rule fires
    world.serve(world.config(PREDICTIVE))
    wait_for(lambda: world.desired() >= 6, timeout_s=40, what="capacity ahead of yesterday's ramp")
    scale = [d for d in world.store().decisions(kind="scale") if d.outcome == "applied"]
    assert scale, world.dump()
    first = scale[-1]  # newest first: the oldest applied scale decision
    assert "predictive_scale_out" in first.reason and "rule_scale_out" not in first.reason, world.dump()
    for key in ("demand_rps", "forecast_rps", "forecast_upper_rps", "capacity_per_instance_rps"):
        assert first.inputs[key] is not None
    assert first.inputs["forecast_method"] == "seasonal"
    # the service records what its forecast predicted for the end of the horizon (10m), for the console
    now = datetime.now(UTC)
    made = forecast_against_actual(
        world.store(), "chat", now - timedelta(hours=1), now + timedelta(minutes=11)
    )
    assert made and all(
        timedelta(minutes=10) - timedelta(seconds=1) <= r.at - r.made_at <= timedelta(minutes=10, seconds=1)
        and r.forecast_rps > 0
        and r.forecast_upper_rps is not None
        and r.forecast_upper_rps >= r.forecast_rps
        for r in made
    ), made
    tasks = wait_for(
        lambda: {n: t for n, t in world.scheduled_tasks().items() if "-learned-" in n},
        what="learned-floor scheduled tasks",
    )
    nxt = (datetime.now(UTC) + timedelta(hours=1)).strftime("%H00")
    task = tasks.get(f"fleet-chat-learned-{nxt}-start")
    assert task is not None, sorted(tasks)
    assert task.min_value > 1 and task.recurrence_type == "Weekly"
