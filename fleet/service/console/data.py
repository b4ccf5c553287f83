"""What the console reads from the store, in few queries: the last decision per group, capacity and demand
series, a filtered and paged decision log, and forecasts against actual demand.

Pages answer within 200 ms with 50 groups and 10,000 decisions (benchmarks/console.py), so each page makes a
fixed number of queries whatever the number of groups, and reads only the columns it draws.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from fleet.service.demand import forecast_against_actual
from fleet.service.store import DecisionRecord, Store, decisions

# Most rows one page of the decision log shows; older ones are a link away.
PAGE_ROWS = 200
# Points of a Fleet-page sparkline (160 px wide): more would only cost time and bytes.
SPARK_POINTS = 80


@dataclass(frozen=True)
class CapacityPoint:
    """One scale decision as a point of the capacity plot."""

    at: datetime
    target: int | None
    in_service: int | None
    demand: float | None
    outcome: str
    reason: str
    floor_codes: tuple[str, ...] = ()
    observed_desired: int | None = None  # ESS's desired capacity when the decision was taken
    inputs: dict[str, Any] | None = None


@dataclass(frozen=True)
class DecisionFilter:
    group: str | None = None
    outcome: str | None = None
    reason_code: str | None = None
    kind: str | None = None
    since: datetime | None = None
    before_id: int | None = None


@dataclass(frozen=True)
class ForecastPoint:
    """The demand (req/s) forecast for ``at``, its upper quantile, and the demand observed then."""

    at: datetime
    predicted: float
    upper: float | None = None
    actual: float | None = None


def latest_decisions(store: Store) -> dict[str, DecisionRecord]:
    """The newest decision of every group, in one query."""
    newest = (
        sa.select(sa.func.max(decisions.c.id))
        .where(decisions.c.service == store.service)
        .group_by(decisions.c.group_name)
    )
    q = sa.select(decisions).where(decisions.c.id.in_(newest))
    with store.engine.connect() as c:
        return {r.group_name: DecisionRecord(**dict(r._mapping)) for r in c.execute(q)}


def latest_floor_codes(store: Store) -> dict[str, tuple[str, ...]]:
    """The floor reasons in force at each group's newest scale decision, in one query."""
    newest = (
        sa.select(sa.func.max(decisions.c.id))
        .where(decisions.c.service == store.service, decisions.c.kind == "scale")
        .group_by(decisions.c.group_name)
    )
    q = sa.select(decisions.c.group_name, decisions.c.inputs).where(decisions.c.id.in_(newest))
    with store.engine.connect() as c:
        return {r.group_name: floor_codes(r.inputs or {}) for r in c.execute(q)}


def spark_series(store: Store, since: datetime) -> dict[str, list[CapacityPoint]]:
    """Capacity and demand of every group since ``since`` for the sparklines: the few JSON fields they draw
    are extracted by the database (no inputs parsed here), and each line is thinned to SPARK_POINTS."""
    inputs = decisions.c.inputs
    q = (
        sa.select(
            decisions.c.at,
            decisions.c.group_name,
            decisions.c.target,
            decisions.c.outcome,
            inputs["observed_desired"].as_integer().label("observed_desired"),
            # the first reason is the one that set the target; a rule's records what the metrics asked for
            inputs[("reasons", 0, "inputs", "desired")].as_float().label("demand"),
        )
        .where(decisions.c.service == store.service, decisions.c.kind == "scale", decisions.c.at >= since)
        .order_by(decisions.c.id)
    )
    out: dict[str, list[CapacityPoint]] = {}
    with store.engine.connect() as c:
        for r in c.execute(q):
            out.setdefault(r.group_name, []).append(
                CapacityPoint(
                    at=r.at,
                    target=r.target,
                    in_service=None,
                    demand=r.demand,
                    outcome=r.outcome,
                    reason="",
                    observed_desired=r.observed_desired,
                )
            )
    return {g: thin(pts, since) for g, pts in out.items()}


def thin(points: list[CapacityPoint], since: datetime) -> list[CapacityPoint]:
    """At most SPARK_POINTS points: the last of each equal slice of time (a step line keeps its shape)."""
    if len(points) <= SPARK_POINTS:
        return points
    span_s = max((points[-1].at - since).total_seconds(), 1.0)
    kept: dict[int, CapacityPoint] = {}
    for p in points:
        kept[min(int((p.at - since).total_seconds() / span_s * SPARK_POINTS), SPARK_POINTS - 1)] = p
    first = points[0]
    return [first, *[p for p in kept.values() if p is not first]]


def demand_of(inputs: dict[str, Any] | None) -> float | None:
    """The serving count the metric rules asked for, as recorded (None: no rule fired)."""
    for reason in (inputs or {}).get("reasons") or []:
        value = (reason.get("inputs") or {}).get("desired")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def floor_codes(inputs: dict[str, Any]) -> tuple[str, ...]:
    """The floor reasons (schedule, warm, min size, learned) a scale decision recorded as in force."""
    codes = [str(r.get("code", "")) for r in inputs.get("reasons") or [] if isinstance(r, dict)]
    return tuple(dict.fromkeys(c for c in codes if c.startswith("floor_")))


def capacity_series(
    store: Store, since: datetime, group: str | None = None
) -> dict[str, list[CapacityPoint]]:
    """Scale decisions since ``since``, oldest first, per group (every group in one query)."""
    cols = (
        decisions.c.at,
        decisions.c.group_name,
        decisions.c.target,
        decisions.c.inputs,
        decisions.c.outcome,
        decisions.c.reason,
    )
    q = sa.select(*cols).where(
        decisions.c.service == store.service, decisions.c.kind == "scale", decisions.c.at >= since
    )
    if group is not None:
        q = q.where(decisions.c.group_name == group)
    out: dict[str, list[CapacityPoint]] = {}
    with store.engine.connect() as c:
        for r in c.execute(q.order_by(decisions.c.id)):
            inputs = r.inputs or {}
            out.setdefault(r.group_name, []).append(
                CapacityPoint(
                    at=r.at,
                    target=r.target,
                    in_service=_int_or_none(inputs.get("in_service")),
                    demand=demand_of(inputs),
                    outcome=r.outcome,
                    reason=r.reason,
                    floor_codes=floor_codes(inputs),
                    observed_desired=_int_or_none(inputs.get("observed_desired")),
                    inputs=inputs,
                )
            )
    return out


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def decision_log(store: Store, f: DecisionFilter, limit: int = PAGE_ROWS) -> list[DecisionRecord]:
    """The decision log, newest first, filtered in SQL; ``before_id`` pages back."""
    q = sa.select(decisions).where(decisions.c.service == store.service)
    for column, value in (
        (decisions.c.group_name, f.group),
        (decisions.c.outcome, f.outcome),
        (decisions.c.kind, f.kind),
    ):
        if value:
            q = q.where(column == value)
    if f.reason_code:
        # The reason text starts with its code: "rule_scale_out; ..." or "enter_standby: ...".
        code = f.reason_code
        q = q.where(
            sa.or_(
                decisions.c.reason == code,
                decisions.c.reason.startswith(code + ";", autoescape=True),
                decisions.c.reason.startswith(code + ":", autoescape=True),
                decisions.c.reason.startswith(code + " ", autoescape=True),
            )
        )
    if f.since is not None:
        q = q.where(decisions.c.at >= f.since)
    if f.before_id is not None:
        q = q.where(decisions.c.id < f.before_id)
    q = q.order_by(decisions.c.id.desc()).limit(limit)
    with store.engine.connect() as c:
        return [DecisionRecord(**dict(r._mapping)) for r in c.execute(q)]


def outcomes_seen(store: Store) -> list[str]:
    q = sa.select(decisions.c.outcome).where(decisions.c.service == store.service).distinct()
    with store.engine.connect() as c:
        return sorted(r[0] for r in c.execute(q))


def forecasts(store: Store, group: str, since: datetime, until: datetime) -> list[ForecastPoint]:
    """Forecast against actual for the Group page: what the forecast predicted for each time of the window
    (req/s, with its upper quantile) and the demand observed then (``demand_samples``)."""
    return [
        ForecastPoint(at=r.at, predicted=r.forecast_rps, upper=r.forecast_upper_rps, actual=r.actual_rps)
        for r in forecast_against_actual(store, group, since, until)
    ]
