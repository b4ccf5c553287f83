"""`fleet plan` (one decision offline: the shadow mode) and `fleet validate` (all config problems at once)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel, ValidationError
from rich.markup import escape
from rich.table import Table

from fleet.commands._common import (
    check_profiles,
    console,
    err_console,
    fail,
    fail_lines,
    load_config_or_exit,
    parse_at,
    print_json,
    write_atomically,
)
from fleet.config import config_json_schema
from fleet.timefmt import outside_calendar


def _load_json_model(path: Path, model: type[BaseModel], what: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"{path}: {what} file not found")
    except OSError as exc:
        fail(f"{path}: cannot read: {exc.strerror or exc}")
    except UnicodeDecodeError as exc:
        fail(f"{path}: not UTF-8 text (byte {exc.start})")
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        lines = []
        for err in exc.errors(include_url=False):
            loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
            msg = err["msg"]
            if err["type"] == "json_invalid":
                msg = f"not valid JSON: {err.get('ctx', {}).get('error', msg)}"
            lines.append(f"{path}: {loc or '(top level)'}: {msg}")
        fail_lines(lines)


def register(app: typer.Typer) -> None:
    @app.command("plan")
    def plan(
        config: Path = typer.Option(..., "--config", "-c", help="fleet.yaml"),
        snapshot: Path = typer.Option(..., "--snapshot", "-s", help="observation as JSON (docs/policies.md)"),
        history: Path | None = typer.Option(None, "--history", help="the remembered state as JSON"),
        at: str | None = typer.Option(None, "--at", help="as of this ISO 8601 time (default taken_at)"),
        as_json: bool = typer.Option(False, "--json", help="print the whole plan as JSON"),
        save_history: Path | None = typer.Option(
            None, "--save-history", help="write the new history here (to feed the next --history)"
        ),
    ) -> None:
        """Decide once, offline, what the service would do: the shadow mode."""
        from policies import History, Snapshot, decide

        cfg = load_config_or_exit(config)
        snap = _load_json_model(snapshot, Snapshot, "snapshot")
        hist = _load_json_model(history, History, "history") if history is not None else None
        now = parse_at(at) if at is not None else snap.taken_at  # parse_at refuses one out of the calendar
        too_far = outside_calendar(now)
        if too_far is not None:  # a snapshot dated 9999-12-31 overflowed inside the policy
            fail(f"{snapshot}: taken_at: {too_far}; the policy's windows and timers could not be computed")
        # one line a reason: a snapshot dated far from --at gave a line for every metric of every instance
        by_reason: dict[str, list[str]] = {}
        for where, why in _drop_bad_samples(snap, now):
            by_reason.setdefault(why, []).append(where)
        for why, wheres in by_reason.items():
            where = wheres[0] + (f" and {len(wheres) - 1} more sample(s)" if len(wheres) > 1 else "")
            err_console.print(
                f"[yellow]warning:[/] {escape(str(snapshot))}: {escape(where)}: {escape(why)}: read as "
                "unknown, as the service drops it",
                highlight=False,
                soft_wrap=True,
            )
        spec = cfg.policy()
        _with_capacity(snap, spec, now)
        result = decide(snap, spec, hist, now)
        if save_history is not None:
            try:
                write_atomically(save_history, result.history.model_dump_json(indent=2) + "\n")
            except OSError as exc:
                fail(f"{save_history}: cannot write: {exc.strerror or exc}")
        if as_json:
            print_json(result)
            return
        _render(result)

    @app.command("validate")
    def validate(
        config: Path | None = typer.Option(None, "--config", "-c", help="fleet.yaml"),
        schema: bool = typer.Option(False, "--schema", help="print the JSON schema of fleet.yaml and exit"),
    ) -> None:
        """Check fleet.yaml (and FLEET_* environment): every problem with its file, field and reason."""
        if schema:
            import sys

            sys.stdout.write(json.dumps(config_json_schema(), indent=2) + "\n")
            return
        if config is None:
            fail("--config is required (or use --schema)")
        cfg = load_config_or_exit(config)  # instance_types checked there too (issue 17)
        check_profiles(cfg, config)
        from datetime import UTC, datetime

        from fleet.config import unknown_env_vars

        for warning in [*cfg.warnings(), *unknown_env_vars(), *cfg.uncut_holidays(datetime.now(UTC))]:
            err_console.print(
                f"[yellow]warning:[/] {escape(str(config))}: {escape(warning)}",
                highlight=False,
                soft_wrap=True,
            )
        names = ", ".join(g.name for g in cfg.groups)
        console.print(escape(f"{config}: valid ({len(cfg.groups)} group(s): {names})"), highlight=False)


def _drop_bad_samples(snap: Any, now: Any) -> list[tuple[str, str]]:
    """Drop the samples the service's boundary check refuses (a negative queue, a share above 100 %, a point
    from the future: ``fleet.service.sanitize``) from a snapshot file, as the service never lets them reach
    the policy: (where, why) of each. A queue of -50 read "below 0.5" and scaled in."""
    from fleet.service.sanitize import problem

    dropped: list[tuple[str, str]] = []
    for g in snap.groups:
        places = [(f"groups[{g.name}].group_metrics", g.group_metrics)]
        places += [(f"groups[{g.name}].instances[{i.instance_id}].metrics", i.metrics) for i in g.instances]
        for where, metrics in places:
            for name, sample in list(metrics.items()):
                why = problem(name, sample.value, sample.at, now)
                if why is not None:
                    del metrics[name]
                    dropped.append((f"{where}.{name}", why))
    return dropped


def _with_capacity(snap: Any, spec: Any, now: Any) -> None:
    """Each predictive group's capacity per instance from the sizing engine at the snapshot's token mix (its
    InService instances' fresh, rate-weighted means), as the service gives it to the policy every tick; a
    snapshot that carries its own keeps it."""
    from fleet.service.capacity_table import CapacityTable
    from fleet.service.demand import read_demand
    from policies.model import DemandInputs, LifecycleState

    table = CapacityTable()
    for group in spec.groups:
        gs = snap.group(group.name)
        if gs is None or group.predictive.mode == "off":
            continue
        demand = gs.demand or DemandInputs()
        if demand.capacity_rps is not None:
            continue
        serving = [i.instance_id for i in gs.instances if i.lifecycle_state == LifecycleState.IN_SERVICE]
        metrics = {i.instance_id: i.metrics for i in gs.instances}
        reading = read_demand(serving, metrics, now, group.stabilization.stale_after_s)
        mix = (reading.prompt_tokens, reading.output_tokens) if reading else (None, None)
        gs.demand = demand.model_copy(update=table.demand_fields(group, *mix))


def _serving_cell(g: Any) -> str:
    """InService + Pending, the capacity ESS was asked for and has not launched yet, and Standby."""
    ordered = g.current_serving - g.in_service - g.pending
    return (
        f"{g.in_service}+{g.pending} pending"
        + (f"+{ordered} ordered" if ordered > 0 else "")
        + (f" ({g.standby} standby)" if g.standby else "")
    )


def _render(plan: Any) -> None:
    table = Table(title=f"plan at {plan.at.isoformat()}")
    for col in ("group", "serving", "target", "desired", "floor", "ceiling", "schedules", "reason"):
        table.add_column(col)
    for g in plan.groups:
        table.add_row(
            escape(g.group),
            _serving_cell(g),
            str(g.serving_target),
            "-" if g.desired_capacity is None else str(g.desired_capacity),
            str(g.floor),
            str(g.ceiling),
            ",".join(g.active_schedules) or "-",
            g.reason.value,
        )
    console.print(table)
    for g in plan.groups:
        for r in g.reasons:
            console.print(escape(f"  {g.group}: {r.code.value}: {r.detail}"), highlight=False)
        floor = f"floor {g.floor} ({g.floor_source})"
        if g.floor_source and not any(floor in r.detail for r in g.reasons):
            # where the floor comes from, even where it does not bind: a holiday's names the calendar's day
            console.print(escape(f"  {g.group}: {floor}"), highlight=False)
        ceiling = f"ceiling {g.ceiling} ({g.ceiling_source})"
        if g.ceiling_source not in ("", "max_size") and not any(ceiling in r.detail for r in g.reasons):
            # a schedule's ceiling, or the calendar's day that set or lifted one, even where it does not bind
            console.print(escape(f"  {g.group}: {ceiling}"), highlight=False)
    steps = [(g.group, s) for g in plan.groups for s in g.steps]
    if steps:
        st = Table(title="isolation steps")
        for col in ("group", "instance", "action", "reason", "detail"):
            st.add_column(col)
        for group, s in steps:
            st.add_row(*(escape(x) for x in (group, s.instance_id, s.action.value, s.reason.value, s.detail)))
        console.print(st)
    incidents = [(g.group, i) for g in plan.groups for i in g.incidents]
    if incidents:
        it = Table(title="open incidents")
        for col in ("instance", "rule", "action", "state", "respond_by", "isolate_by", "acknowledged"):
            it.add_column(col)
        for _, i in incidents:
            cells = (
                i.instance_id,
                i.rule,
                i.action,
                i.state.value,
                i.respond_by.isoformat(),
                i.isolate_by.isoformat(),
                "yes" if i.acknowledged_at else "no",
            )
            it.add_row(*(escape(x) for x in cells))
        console.print(it)
    for w in plan.warnings:
        where = " ".join(x for x in (w.instance_id, w.metric) if x)
        text = f"{w.group}: {w.code.value}{' ' + where if where else ''}: {w.detail}"
        console.print(f"[yellow]warning:[/] {escape(text)}", highlight=False, soft_wrap=True)
