"""`fleet diagnose`: why P99 latency is high and what to change, from the cloud's metrics or a snapshot file.

And `fleet bench diagnose`: the diagnosis against labelled simulator scenarios (fleet.sim.diagnose_bench).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from fleet.commands._common import (
    console,
    err_console,
    fail,
    load_config_or_exit,
    parse_at,
    parse_window,
    print_json,
    quiet_credential_logs,
    write_atomically,
)
from fleet.timefmt import isoformat


def register(app: typer.Typer) -> None:
    app.command("diagnose")(diagnose)
    _register_bench(app)


def _register_bench(app: typer.Typer) -> None:
    """Add ``diagnose`` to the ``bench`` sub-app (fleet/commands/simulate.py owns it)."""
    try:
        from fleet.commands.simulate import bench_app
    except ImportError:  # the simulator's commands are absent: the benchmark is reachable via make bench
        return
    if not any(getattr(c, "name", None) == "diagnose" for c in bench_app.registered_commands):
        bench_app.command("diagnose")(bench_diagnose)


def _check_catalog(model: str | None, instance_type: str | None) -> None:
    """``--model`` and ``--instance-type`` must be in the sizing catalog: an unknown one would silently drop
    the fixes' numbers."""
    from sizing.catalog import find_instance, find_model
    from sizing.errors import SizingInputError

    for flag, value, find in (
        ("--model", model, find_model),
        ("--instance-type", instance_type, find_instance),
    ):
        if value is None:
            continue
        try:
            find(value)
        except SizingInputError as exc:
            fail(f"{flag}: {exc}")


def _parse_until(text: str | None) -> datetime:
    """The window's end: now, or an instant within the calendar (a time without a zone is UTC)."""
    if text is None:
        return datetime.now(UTC)
    return parse_at(text, "--until", naive_as_utc=True)


def diagnose(
    config: Path | None = typer.Option(None, "--config", help="fleet.yaml (needed unless --snapshot)."),
    group: str | None = typer.Option(None, "--group", help="Only this group (default: every group)."),
    instance: str | None = typer.Option(None, "--instance", help="Only findings that concern this instance."),
    since: str = typer.Option("30m", "--since", help="Window length back from --until, e.g. 30m, 2h."),
    until: str | None = typer.Option(None, "--until", help="Window end (ISO 8601; default now)."),
    snapshot: Path | None = typer.Option(
        None,
        "--snapshot",
        help="Diagnose a saved metrics window (JSON, docs/diagnose.md) instead of the cloud.",
    ),
    save: Path | None = typer.Option(
        None, "--save", help="Also write the window(s) read as a snapshot file."
    ),
    model: str | None = typer.Option(None, "--model", help="Model served (sizing catalog), for fix numbers."),
    instance_type: str | None = typer.Option(
        None, "--instance-type", help="ECS instance type (default: read from ECS), for fix numbers."
    ),
    prompt_tokens: float | None = typer.Option(
        None, "--prompt-tokens", help="Mean prompt tokens per request (the sizing model's request mix)."
    ),
    output_tokens: float | None = typer.Option(
        None, "--output-tokens", help="Mean output tokens per request (the sizing model's request mix)."
    ),
    max_num_seqs: int | None = typer.Option(
        None,
        "--max-num-seqs",
        help="vLLM's max_num_seqs on the group (default: the config's predictive.max_num_seqs, else the "
        "sizing model's).",
    ),
    max_num_batched_tokens: int | None = typer.Option(
        None,
        "--max-num-batched-tokens",
        help="vLLM's chunked-prefill budget on the group (default: the config's "
        "predictive.max_num_batched_tokens, else the sizing model's).",
    ),
    period_s: int = typer.Option(15, "--period", help="Metric resolution in seconds (CloudMonitor period)."),
    json_out: bool = typer.Option(False, "--json", help="Print {findings: [...], groups: [...]} as JSON."),
) -> None:
    """Diagnose high latency: queueing, KV cache, bandwidth, throttling, bad node, cold start, fleet size."""
    from fleet.diagnose.rules import diagnose as run_rules

    for flag, path in (("--config", config), ("--snapshot", snapshot)):
        # (refused here in one line, not by the option's dir_okay: click's five-line usage box)
        if path is not None and path.is_dir():
            fail(f"{flag}: {path} is a directory; give the file")
    since_s = parse_window(since, "--since")
    if period_s <= 0:
        fail(f"--period: must be a positive number of seconds, got {period_s}")
    for flag, value in (("--prompt-tokens", prompt_tokens), ("--output-tokens", output_tokens)):
        if value is not None and not 0 < value < math.inf:
            fail(f"{flag}: must be a positive, finite number of tokens, got {value:g}")
    _check_catalog(model, instance_type)
    end = _parse_until(until)
    if snapshot is not None:
        windows = _read_snapshot(snapshot, group)
    else:
        if config is None:
            fail("--config: needed to read the cloud (or give --snapshot FILE)")
        windows = _read_cloud(config, group, end - timedelta(seconds=since_s), end, period_s)
    for w in windows:
        w.group.model = model or w.group.model
        w.group.instance_type = instance_type or w.group.instance_type
        w.group.prompt_tokens_mean = prompt_tokens or w.group.prompt_tokens_mean
        w.group.output_tokens_mean = output_tokens or w.group.output_tokens_mean
    _apply_batch_limits(windows, max_num_seqs, max_num_batched_tokens)
    if instance is not None and not any(w.instance(instance) for w in windows):
        known = sorted(i.instance_id for w in windows for i in w.instances)
        fail(f"--instance: {instance} is not in the group(s) read; instances: {', '.join(known) or 'none'}")
    results = [(w, run_rules(w, instance=instance)) for w in windows]
    if save is not None:
        _save(save, windows)
    if json_out:
        print_json(_json_report(results))
        return
    _print(results)


def _apply_batch_limits(windows: list[Any], seqs: int | None, tokens: int | None) -> None:
    """--max-num-seqs and --max-num-batched-tokens over each window's group, refused where vLLM would not
    start with them (as a snapshot's group fields are)."""
    from policies.spec import MIN_BATCHED_TOKENS

    for flag, value, least in (
        ("--max-num-seqs", seqs, 1),
        ("--max-num-batched-tokens", tokens, MIN_BATCHED_TOKENS),
    ):
        if value is not None and value < least:
            fail(f"{flag}: must be at least {least}, got {value}")
    for w in windows:
        w.group.max_num_seqs = seqs or w.group.max_num_seqs
        w.group.max_num_batched_tokens = tokens or w.group.max_num_batched_tokens
        budget, cap = w.group.max_num_batched_tokens, w.group.max_num_seqs
        if budget and cap and budget < cap:
            fail(
                f"--max-num-batched-tokens: {budget} is below max_num_seqs {cap} (group {w.group.name}); "
                "vLLM needs at least one token a sequence"
            )


def _read_snapshot(snapshot: Path, group: str | None) -> list[Any]:
    """The windows of a snapshot file (only ``group``'s when given); bad input is one line and exit 2."""
    from fleet.diagnose.model import SnapshotError
    from fleet.diagnose.reader import load_snapshot

    try:
        windows = load_snapshot(snapshot)
    except SnapshotError as exc:
        fail(str(exc))
    if group is not None:
        names = [w.group.name for w in windows]
        windows = [w for w in windows if w.group.name == group]
        if not windows:
            fail(f"--group: no group {group!r} in {snapshot}; groups there: {', '.join(names)}")
    return windows


def _save(save: Path, windows: list[Any]) -> None:
    """--save: the window (or ``{"windows": [...]}``) as a snapshot file ``--snapshot`` reads back."""
    from fleet.diagnose.model import window_to_json

    payload: Any = (
        window_to_json(windows[0]) if len(windows) == 1 else {"windows": [window_to_json(w) for w in windows]}
    )
    try:
        write_atomically(save, json.dumps(payload, indent=1) + "\n")
    except OSError as exc:
        fail(f"--save: cannot write {save}: {exc.strerror or exc}")


def _json_report(results: list[tuple[Any, list[Any]]]) -> dict[str, Any]:
    return {
        "findings": [f.to_json() for _, fs in results for f in fs],
        "groups": [
            {
                "group": w.group.name,
                "window": {"start": isoformat(w.start), "end": isoformat(w.end)},
                "source": w.source,
                "instances": len(w.instances),
                "errors": w.errors,
                "kinds": [f.kind for f in fs],
            }
            for w, fs in results
        ],
    }


def _read_cloud(config: Path, group: str | None, start: datetime, end: datetime, period_s: int) -> list[Any]:
    from fleet.cloud.clients import make_clients
    from fleet.diagnose.reader import ReadError, context_for, read_window

    cfg = load_config_or_exit(config)
    specs = list(cfg.groups)
    if group is not None:
        specs = [s for s in specs if s.name == group]
        if not specs:
            fail(f"--group: no group {group!r} in {config}; groups: {', '.join(g.name for g in cfg.groups)}")
    try:
        clients = make_clients(cfg.region, cfg.account_id or "unset")
    except ValueError as exc:
        fail(str(exc))
    quiet_credential_logs()
    store = _store(cfg)
    windows = []
    try:
        for spec in specs:
            ctx = context_for(spec, region=cfg.region)
            try:
                windows.append(
                    read_window(
                        clients, spec, start=start, end=end, period_s=period_s, store=store, context=ctx
                    )
                )
            except ReadError as exc:
                fail(str(exc), code=1)
    finally:
        if store is not None:
            store.close()
    return windows


def _store(cfg: Any) -> Any:
    """The service's store when one is configured or already exists here; never created by diagnosis."""
    from fleet.service.store import DEFAULT_DATABASE_URL, default_database_url, open_store

    url = getattr(cfg, "database_url", None) or default_database_url()
    if url == DEFAULT_DATABASE_URL and not Path("fleet.db").exists():
        return None
    try:
        return open_store(url)
    except Exception as exc:  # noqa: BLE001 - decisions are context; diagnosis goes on without them
        err_console.print(f"[yellow]warning:[/] store {url.split('@')[-1]} unreadable: {type(exc).__name__}")
        return None


_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}


def _print(results: list[tuple[Any, list[Any]]]) -> None:
    from rich.table import Table

    for w, findings in results:
        start, end = w.start.astimezone(UTC), w.end.astimezone(UTC)  # --until may carry an offset
        title = f"{w.group.name}: {start:%Y-%m-%d %H:%M} - {end:%H:%M} UTC, {len(w.instances)} instance(s)"
        if not findings:
            console.print(f"[green]{title}: no latency problem found[/]")
            _print_errors(w.errors)
            continue
        table = Table(title=title, show_lines=True)
        table.add_column("severity", no_wrap=True)
        table.add_column("kind", no_wrap=True)
        table.add_column("scope", overflow="fold", max_width=26)
        table.add_column("why", ratio=2)
        table.add_column("fix", ratio=2)
        for f in findings:
            style = _STYLE.get(f.severity, "")
            why = f.explanation
            brief = _evidence_brief(f.evidence)
            if brief:
                why += f"\n[dim]{brief}[/]"
            table.add_row(f"[{style}]{f.severity}[/]", f.kind, "\n".join(f.scope), why, f.fix)
        console.print(table)
        _print_errors(w.errors)


def _print_errors(errors: list[str], limit: int = 5) -> None:
    """The window's failed reads and dropped samples, a few of them (``--json`` has them all)."""
    if errors:
        more = f" (and {len(errors) - limit} more; --json lists them)" if len(errors) > limit else ""
        console.print(f"[yellow]window errors:[/] {escape('; '.join(errors[:limit]))}{more}")


def _evidence_brief(evidence: dict[str, Any], limit: int = 5) -> str:
    """A few scalar evidence values (``--json`` has them all)."""
    items = [
        f"{k}={v}"
        for k, v in evidence.items()
        if isinstance(v, int | float | str) and not isinstance(v, bool) and k != "window"
    ]
    return ", ".join(items[:limit])


def bench_diagnose(
    json_out: bool = typer.Option(
        False, "--json", help="Print per-scenario results, recall and precision as JSON."
    ),
    scenario: list[str] = typer.Option([], "--scenario", help="Run only these scenarios (repeatable)."),
    seeds: int = typer.Option(1, "--seeds", help="Repeat each scenario with this many workload seeds."),
) -> None:
    """The diagnosis benchmark: one simulated scenario per finding kind plus healthy controls."""
    from fleet.sim import diagnose_bench as bench
    from fleet.sim.diagnose_scenarios import SCENARIOS

    known = {s.name for s in SCENARIOS}
    unknown = [s for s in scenario if s not in known]
    if unknown:
        fail(f"--scenario: unknown {', '.join(unknown)}; one of {', '.join(sorted(known))}")
    if seeds < 1:
        fail(f"--seeds: must be at least 1, got {seeds}")
    report = bench.run(names=scenario or None, progress=None if json_out else err_console.print, seeds=seeds)
    if json_out:
        print_json(report)
    else:
        bench.print_report(report, console)
    if not report["passed"]:
        raise typer.Exit(1)
