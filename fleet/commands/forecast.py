"""`fleet forecast`: a group's demand forecast, capacity per instance and planned capacity for the coming
hours, from the service's store (``--database``) or a history file (``--history``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import typer
from rich.table import Table

from fleet.commands._common import console, fail, load_config_or_exit, parse_at, print_json, write_atomically
from fleet.service.planning import ForecastView
from policies import forecast as fc

DB_HELP = "database URL (default: $FLEET_DATABASE_URL, else sqlite:///fleet.db in the working directory)"


def register(app: typer.Typer) -> None:
    @app.command("forecast")
    def forecast(
        config: Path = typer.Option(..., "--config", "-c", help="fleet.yaml"),
        group: str = typer.Option(..., "--group", help="the group to forecast"),
        at: str | None = typer.Option(
            None, "--at", help="forecast as of this ISO 8601 instant (default: now)"
        ),
        hours: int = typer.Option(24, "--hours", help="coming hours to plan (1-48)"),
        json_out: bool = typer.Option(False, "--json", help="print the forecast as JSON"),
        plot: Path | None = typer.Option(None, "--plot", help="write an SVG plot of history and forecast"),
        history: Path | None = typer.Option(
            None,
            "--history",
            help="demand rows (CSV or JSON: at, request_rate_rps, ...) instead of the store",
        ),
        database: str | None = typer.Option(None, "--database", help=DB_HELP),
        service: str | None = typer.Option(None, "--service", help="service name in the store"),
    ) -> None:
        """Demand forecast, capacity per instance and planned capacity for the coming hours."""
        from fleet.config import validate_hardware
        from fleet.service.planning import HistoryFileError, plan_forecast, read_history_file, svg_plot

        if not 1 <= hours <= 48:
            fail(f"--hours: must be between 1 and 48, got {hours}")
        if plot is not None and plot.suffix.lower() != ".svg":
            fail(f"--plot: {plot} must end in .svg")
        at_given = parse_at(at) if at is not None else None  # flags first, before any file or store is read
        cfg = load_config_or_exit(config)
        spec = next((g for g in cfg.groups if g.name == group), None)
        if spec is None:
            fail(f"--group: no group {group!r} in {config}; groups: {', '.join(g.name for g in cfg.groups)}")
        pred = spec.predictive
        if pred.capacity_rps is None and not (pred.model and pred.instance_type):
            if pred.mode == "off":
                fail(
                    f"{config}: groups[{group}] has predictive scaling off, so the service records no demand "
                    "for it: give it a predictive: section (mode: forecast-only records what it would do and "
                    "changes nothing) with model and instance_type, or capacity_rps"
                )
            fail(f"{config}: groups[{group}].predictive: needs model and instance_type, or capacity_rps")
        problem = validate_hardware(spec)
        if problem:
            fail(f"{config}: groups[{group}].predictive: {problem}")
        if history is not None:
            try:
                rows = read_history_file(history)
            except HistoryFileError as exc:
                fail(str(exc))
            when = at_given if at_given is not None else _after_newest(rows)
        else:
            when = at_given if at_given is not None else datetime.now(UTC)
            rows = _store_rows(database, service, group, float(pred.history_s), when)
        # in UTC: the table's hours are whole UTC hours, labelled so, whatever offset the rows or --at carry
        when = when.astimezone(UTC)
        rows = [r for r in rows if r.at <= when]
        view = plan_forecast(spec, rows, when, hours)
        if plot is not None:
            try:
                write_atomically(plot, svg_plot(view))
            except OSError as exc:
                fail(f"--plot: cannot write {plot}: {exc.strerror or exc}")
        if json_out:
            print_json(view.to_json())
            return
        _print(view)


def _after_newest(rows: list) -> datetime:
    """A history file's default --at: just after its newest row (now when it has none)."""
    return rows[-1].at + timedelta(minutes=1) if rows else datetime.now(UTC)


def _store_rows(
    database: str | None, service: str | None, group: str, history_s: float, until: datetime
) -> list:
    """The group's rows of the ``history_s`` (and a day) up to ``until``: a forecast as of a past instant
    reads the history before it, never rows written after it."""
    from fleet.commands.serve import _open
    from fleet.service.demand import DemandLog

    store = _open(database, service, existing=True)  # a read: never create an empty store
    try:
        log = DemandLog(store, {group: history_s})
        return log.rows(group, until - timedelta(seconds=history_s + 86400), until)
    finally:
        store.close()


def _print(view: ForecastView) -> None:
    h = view.horizon
    cap = view.capacity_per_instance_rps
    console.print(
        f"[bold]{view.group}[/] at {view.at:%Y-%m-%d %H:%M}Z: method {view.method}; capacity per instance "
        f"{'unknown' if cap is None else f'{cap:.3f} req/s'} ({view.capacity_source}); burstiness "
        f"{view.burstiness:.2f}"
    )
    if view.horizon_unknown:
        console.print(
            f"next {view.horizon_s:g}s: no forecast: under {fc.MIN_LEVEL_BUCKETS} minutes of demand in the "
            f"last {fc.LEVEL_WINDOW_S / 60:g} minutes, so no recent level (the service's predictive scaling "
            "neither scales in nor out until it has one; its rules decide meanwhile)",
            highlight=False,
        )
    else:
        console.print(
            f"next {view.horizon_s:g}s: level {h.level_rps:.2f} req/s, forecast {h.mean_rps:.2f}, upper "
            f"{h.upper_rps:.2f}"
        )
    if not view.hours:
        console.print("no hourly forecast: under a day of history (the service plans from level and trend)")
        return
    table = Table("hour (UTC)", "forecast req/s", "upper", "lower", "planned", "learned floor")
    for p in view.hours:
        table.add_row(
            f"{p.start:%m-%d %H:%M}",
            f"{p.mean_rps:.2f}",
            f"{p.upper_rps:.2f}",
            f"{p.lower_rps:.2f}",
            str(p.planned_instances),
            str(p.learned_floor),
        )
    console.print(table)
