"""The report's planning sections: demand against its forecast, ordered capacity against the oracle's, the
cost curve, and the decision timeline with reasons.

* **Demand**: the arrivals per second of every minute (what really came) against the forecast the controller
  acted on, read from its scale decisions' inputs (``demand_rps``, ``forecast_rps``, ``forecast_upper_rps``:
  the predictive policy records them; a run without them draws the demand alone and says so).
* **Ordered capacity vs the oracle**: the desired capacity the controller set against what the hindsight fleet
  (``fleet.sim.oracle``) holds for the same arrivals.
* **Cost**: cumulative CNY of the instances billed (creation to removal, booting and draining included),
  against the oracle's plan at the same price.
* **Decision timeline**: every decision of the run, its time, action, target and reason.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from fleet.sim.report import _Plot
from fleet.sim.types import SimResult
from fleet.timefmt import parse_iso

FORECAST_KEYS = ("demand_rps", "forecast_rps", "forecast_upper_rps")
MAX_TIMELINE_ROWS = 400  # a day of a reactive baseline can hold thousands; the first ones tell the story


def _minute(result: SimResult, at: Any) -> float | None:
    if not at:
        return None
    when = at if isinstance(at, datetime) else parse_iso(str(at))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - result.options.start).total_seconds() / 60.0


def forecast_points(result: SimResult) -> dict[str, list[tuple[float, float]]]:
    """Per forecast key, (minute, value) from the decisions' inputs that carry it."""
    out: dict[str, list[tuple[float, float]]] = {k: [] for k in FORECAST_KEYS}
    for d in result.decisions:
        inputs = d.get("inputs") or {}
        m = _minute(result, d.get("at"))
        if m is None:
            continue
        for key in FORECAST_KEYS:
            value = inputs.get(key)
            if isinstance(value, int | float):
                out[key].append((m, float(value)))
    return out


def demand_section(result: SimResult, start_local: datetime) -> str:
    s = result.series
    actual = [(p.minute + 0.5, p.arrivals / 60.0) for p in s]
    fc = forecast_points(result)
    top = max([v for _, v in actual] + [v for pts in fc.values() for _, v in pts] + [0.1]) * 1.15
    plot = _Plot(len(s), top)
    plot.polyline(actual, "#9ecae1", 1.2)
    for key, color, dash in (
        ("demand_rps", "#2ca02c", ""),
        ("forecast_rps", "#ff7f0e", ""),
        ("forecast_upper_rps", "#ff7f0e", "4 3"),
    ):
        if fc[key]:
            plot.polyline(sorted(fc[key]), color, 1.8, step=True, dash=dash)
    note = (
        "Arrivals per second of each minute (light blue) against what the controller saw and forecast: "
        "observed demand (green), forecast (orange) and its upper quantile (dashed), from its decisions."
        if any(fc.values())
        else "Arrivals per second of each minute. This run's decisions carry no forecast "
        f"({', '.join(FORECAST_KEYS)}): the policy does not forecast."
    )
    return "<p>" + html.escape(note) + "</p>" + plot.render("Demand vs forecast", start_local, "req/s")


def oracle_series(result: SimResult) -> list[int]:
    plan = result.extra.get("oracle_desired") or []
    return [int(v) for v in plan]


def capacity_vs_oracle_section(result: SimResult, start_local: datetime) -> str:
    s = result.series
    plan = oracle_series(result)
    if not plan:
        return ""
    top = max([p.desired for p in s] + plan + [1]) * 1.15
    plot = _Plot(len(s), top)
    plot.polyline([(m, float(v)) for m, v in enumerate(plan)], "#7f7f7f", 1.5, step=True, dash="5 3")
    plot.polyline([(p.minute + 1, float(p.desired)) for p in s], "#1f77b4", 2.0, step=True)
    return (
        "<p>Desired capacity ordered by the controller (blue) against the oracle's (grey dashed): the fleet "
        "that knows every arrival, orders each instance one cold start before its minute and releases it "
        "when no minute within a cold start needs it.</p>"
        + plot.render("Ordered capacity vs the oracle", start_local, "instances")
    )


def cumulative_cost(counts: Sequence[int], price_cny_per_hour: float) -> list[float]:
    """Cumulative CNY of ``counts`` instances per minute."""
    total, out = 0.0, []
    for n in counts:
        total += n * price_cny_per_hour / 60.0
        out.append(total)
    return out


def run_cost_curve(result: SimResult) -> list[float]:
    """The run's cumulative CNY at each minute's end as billed (spot instances at their price, stopped ones
    their disks): it ends at the summary's ``cost_cny``. (Drawn from the instance count at the list price,
    a spot fleet's curve ended half again above what the summary said it cost.)"""
    return [p.cost_cny for p in result.series]


def cost_section(result: SimResult, start_local: datetime) -> str:
    s = result.series
    price = result.hardware.price_cny_per_hour
    run_cost = run_cost_curve(result)
    oracle_cost = cumulative_cost(oracle_series(result), price)
    top = max(run_cost + oracle_cost + [1.0]) * 1.1
    plot = _Plot(len(s), top)
    plot.polyline([(p.minute + 1, c) for p, c in zip(s, run_cost, strict=True)], "#d62728", 2.0)
    if oracle_cost:
        plot.polyline([(m + 1, c) for m, c in enumerate(oracle_cost)], "#7f7f7f", 1.5, dash="5 3")
    return (
        "<p>Cumulative cost of the run as billed (red: the summary's cost_cny at its end; spot instances at "
        f"their price, stopped ones their disks) and of the oracle's plan at {price:.2f} CNY/h an instance "
        "(grey dashed).</p>" + plot.render("Cost curve", start_local, "CNY")
    )


def _local(result: SimResult, at: Any, start_local: datetime) -> str:
    m = _minute(result, at)
    if m is None:
        return ""
    return (start_local + timedelta(minutes=m)).strftime("%a %H:%M:%S")


def timeline_section(result: SimResult, start_local: datetime) -> str:
    rows = []
    for d in result.decisions[:MAX_TIMELINE_ROWS]:
        target = d.get("desired")
        action = d.get("action") or "scale_to"
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(v))}</td>"
                for v in (
                    _local(result, d.get("at"), start_local),
                    action,
                    "" if target is None else target,
                    d.get("instance_id") or "",
                    d.get("reason", ""),
                )
            )
            + "</tr>"
        )
    more = len(result.decisions) - MAX_TIMELINE_ROWS
    tail = f"<p>... and {more} more decisions.</p>" if more > 0 else ""
    body = "".join(rows) or '<tr><td colspan="5">no decisions</td></tr>'
    return (
        "<h2>Decision timeline</h2><table><tr><th>time</th><th>action</th><th>target</th><th>instance</th>"
        f"<th>reason</th></tr>{body}</table>{tail}"
    )


def planning_sections(result: SimResult, start_local: datetime) -> str:
    """Everything above, in the report's order."""
    if not result.series:
        return ""
    return (
        demand_section(result, start_local)
        + capacity_vs_oracle_section(result, start_local)
        + cost_section(result, start_local)
    )
