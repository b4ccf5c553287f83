"""`fleet size`'s capacity part (issue 17): spot beside on-demand cost per million tokens for the best option,
and the fallback ladder of other instance types that meet the SLOs, with the count each needs. The logic is
``sizing.fallback``; this module only renders it."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from fleet.commands._common import console, wide_console
from sizing.fallback import DEFAULT_SPOT_FRACTION, fallback_ladder, spot_cost
from sizing.search import SearchResult


def fallback_json(result: SearchResult) -> dict[str, Any]:
    best = result.best
    spot = spot_cost(best.cost_cny_per_million_tokens) if best is not None else None
    return {
        "spot_cost_cny_per_million_tokens": None if spot is None else round(spot, 4),
        "spot_price_fraction": DEFAULT_SPOT_FRACTION,
        "fallback_ladder": [r.to_json() for r in fallback_ladder(result)],
    }


def render_fallback(result: SearchResult) -> None:
    best = result.best
    if best is None or best.cost_cny_per_million_tokens is None:
        return
    spot = spot_cost(best.cost_cny_per_million_tokens)
    console.print(
        f"cost per million tokens: on-demand CNY {best.cost_cny_per_million_tokens:.2f}, "
        f"spot CNY {spot:.2f} (estimate: spot at {DEFAULT_SPOT_FRACTION:.0%} of on-demand)",
        highlight=False,
    )
    ladder = fallback_ladder(result)
    if not ladder:
        console.print(f"fallback ladder: {_why_none(result)}", highlight=False)
        return
    table = Table(title=f"fallback ladder (when {best.instance_type} is sold out)")
    for col in ("instance type", "count", "TP", "CNY/h", "CNY/Mtok on-demand", "CNY/Mtok spot"):
        table.add_column(col)
    for r in ladder:
        table.add_row(
            r.instance_type,
            str(r.instances),
            str(r.tp),
            _fmt(r.cost_cny_per_hour),
            _fmt(r.cost_cny_per_million_tokens),
            _fmt(r.spot_cost_cny_per_million_tokens),
        )
    wide_console(100).print(table)


def _why_none(result: SearchResult) -> str:
    """Why the ladder is empty: no other type was evaluated (``--instance-type``), or none serves."""
    best = result.best
    assert best is not None
    if {c.instance_type for c in result.candidates} <= {best.instance_type}:
        return f"only {best.instance_type} was evaluated (without --instance-type the search ranks others)"
    if result.slo is None or not result.slo.given:
        return "no other instance type serves the load"
    return "no other instance type meets the SLOs"


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"
