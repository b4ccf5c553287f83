"""Commands of the fleet service: `fleet serve`, and the store readers and operator actions around it.

`serve` runs the loop; `status`, `decisions`, `incidents`, `isolate`, `release` and `sla-report` read or write
the service's store directly (every one takes `--database URL`, default `FLEET_DATABASE_URL`, else a SQLite
file fleet.db in the working directory), so they work whether or not a replica is running: operator requests
are queued and carried out by the lease holder's next tick through the same workflow as automatic ones.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from fleet.commands._common import (
    check_profiles,
    console,
    err_console,
    fail,
    load_config_or_exit,
    parse_window,
    print_json,
    quiet_credential_logs,
)

DB_HELP = "database URL (default: $FLEET_DATABASE_URL, else sqlite:///fleet.db in the working directory)"
SERVICE_HELP = "service name in the store (the lease name; default $FLEET_SERVICE_NAME or 'fleet')"


def _service_name(value: str | None) -> str:
    return value or os.environ.get("FLEET_SERVICE_NAME") or "fleet"


def _open(database: str | None, service: str | None, *, existing: bool = False):
    """The store; ``existing``: an operator request must reach the store a service reads, so a SQLite
    file that does not exist is refused rather than created (nobody would ever read the request)."""
    from fleet.service.store import default_database_url, open_store, sqlite_file

    url = database or default_database_url()
    path = sqlite_file(url)
    if existing and path is not None and not path.exists():
        fail(
            f"database {path} does not exist: no service has run against it; give the service's store "
            "with --database (or FLEET_DATABASE_URL)"
        )
    name = _service_name(service)
    if existing:
        _check_is_store(url)
    try:
        store = open_store(url, service=name)
    except Exception as exc:  # bad URL, unreachable server, unwritable file: one line, exit 2
        fail(f"database {_safe_url(url)}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    known = store.services() if existing else []
    if known and name not in known:  # a request under a name no service reads would wait forever
        fail(
            f"no service named {name!r} has run against {_safe_url(url)}; it holds {', '.join(known)} "
            "(give one with --service or FLEET_SERVICE_NAME)"
        )
    return store


def _check_is_store(url: str) -> None:
    """A read or an operator request goes to a fleet store a service has written, never into another
    application's database: migrating would add the fleet's tables to it and read back nothing."""
    from fleet.service.store import existing_tables, known_tables

    try:
        tables = existing_tables(url)
    except Exception as exc:  # bad URL, unreachable server, unreadable file: one line, exit 2
        fail(f"database {_safe_url(url)}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    if not tables:
        fail(
            f"database {_safe_url(url)} is empty: no service has run against it; give the service's store "
            "with --database (or FLEET_DATABASE_URL)"
        )
    if not set(tables) & set(known_tables()):
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        fail(
            f"database {_safe_url(url)} is not a fleet store (it holds {shown}); nothing was written to it: "
            "give the service's store with --database (or FLEET_DATABASE_URL)"
        )


def _safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable URL>"


def _now() -> datetime:
    return datetime.now(UTC)


def serve(
    config: Path = typer.Option(..., "--config", "-c", help="fleet.yaml"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="decide and record what would be done; touch nothing"
    ),
    once: bool = typer.Option(
        False, "--once", help="run one tick and exit (exit 1 when the tick had errors)"
    ),
    database: str | None = typer.Option(None, "--database", help=DB_HELP),
    api: bool = typer.Option(True, "--api/--no-api", help="serve the status API"),
    port: int | None = typer.Option(None, "--port", help="status API port (overrides the config)"),
    interval: float | None = typer.Option(
        None, "--interval", help="seconds between ticks (overrides config)"
    ),
    holder: str | None = typer.Option(
        None, "--holder", help="replica id for the lease (default host:pid:random)"
    ),
    log_json: bool = typer.Option(
        False, "--log-json", envvar="FLEET_LOG_JSON", help="structured JSON log lines on stderr"
    ),
    log_level: str = typer.Option("info", "--log-level", envvar="FLEET_LOG_LEVEL"),
    open_console: bool = typer.Option(
        False, "--open", help="print the web console's address (and open it where there is a desktop)"
    ),
) -> None:
    """Run the fleet service: every tick observe, decide, actuate and record."""
    from dataclasses import replace

    from fleet.cloud.clients import make_clients
    from fleet.service.api import ApiServer, create_app
    from fleet.service.app import build_service
    from fleet.service.logs import config_secrets, setup_logging
    from fleet.service.settings import ServiceSettings
    from fleet.service.store import default_database_url

    cfg = load_config_or_exit(config)
    _check_serve_options(cfg, port, interval, log_level, holder)
    check_profiles(cfg, config)  # an account without its profile would be signed by another's keys
    # the name every other command reads the store under (their --service default): the service runs under it
    settings = replace(ServiceSettings.from_config(cfg), service_name=_serve_name(dry_run))
    if port is not None:
        settings = replace(settings, api_port=port)
    if interval is not None:
        settings = replace(
            settings, tick_interval_s=interval, lease_ttl_s=max(settings.lease_ttl_s, 3 * interval)
        )
    if open_console and (once or not (api and settings.api_enabled)):
        fail("--open needs the status API running (no --once, no --no-api, api enabled)")
    setup_logging(log_json, log_level, config_secrets(cfg, settings.api_token))
    quiet_credential_logs()
    log = logging.getLogger("fleet.service")
    from fleet.config import unknown_env_vars

    for warning in [*unknown_env_vars(), *(w for w in cfg.warnings() if w.startswith("api.host"))]:
        log.warning("%s", warning)
    url = database or getattr(cfg, "database_url", None) or default_database_url()
    try:
        # Without account_id the custom metric namespace is unknown (fleet validate warns); CMS reads fail.
        clients = make_clients(cfg.region, cfg.account_id or "unset")
    except ValueError as exc:
        fail(str(exc))
    try:
        service = build_service(
            cfg,
            clients,
            database_url=url,
            dry_run=dry_run,
            holder_id=holder,
            settings=settings,
            clients_for=scoped_clients(cfg, clients),
        )
    except Exception as exc:
        fail(f"database {_safe_url(url)}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    log.info(
        "fleet serve: %d group(s), tick %.1fs, lease %.0fs, database %s, service %s%s, holder %s",
        len(service.specs),
        settings.tick_interval_s,
        settings.lease_ttl_s,
        _safe_url(url),
        service.settings.service_name,
        " (dry run)" if dry_run else "",
        service.holder_id,
    )
    if once:
        result = service.tick(service.clock())
        service.close(release_lease=not result.fatal)
        _print_tick(result)
        if result.fatal:
            fail(result.fatal)
        raise typer.Exit(0 if result.ok else 1)
    server = None
    if api and settings.api_enabled:
        app = create_app(
            store=service.store,
            metrics=service.metrics,
            token=settings.api_token,
            clock=service.clock,
            groups=lambda: {s.name for s in service.specs},
            status=service.status,
            health=service.health,
        )
        try:
            server = ApiServer(app, settings.api_host, settings.api_port).start()
        except RuntimeError as exc:
            service.close()
            fail(str(exc))
        log.info("status API on http://%s:%s", settings.api_host, server.port)
        if open_console:
            _open_console(_console_url(settings.api_host, server.port))
        if not settings.api_token:
            log.warning(
                "no API token configured (api.token or FLEET_API_TOKEN): mutating endpoints refuse all"
            )
    _run(service, settings.tick_interval_s, config, log, server)


def _run(service: Any, interval_s: float, config: Path, log: logging.Logger, server: Any) -> None:
    """Tick until a signal; after a SIGHUP whose file is valid, start again on it (the same command line)."""
    from fleet.service.app import run_forever

    reload: list[bool] = []
    try:
        fatal = run_forever(service, interval_s, on_hangup=lambda: _reload_ok(config, log, reload))
    finally:
        if server is not None:
            server.stop()
    if fatal:
        fail(fatal)
    if reload:
        # a fresh start on the new file: every part (groups, clients, settings, the API) built from it
        # alone, none patched in place; the lease was released, so this holder takes it back at once
        log.info("fleet serve: restarting with the new %s", config)
        logging.shutdown()
        try:
            os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
        except OSError as exc:  # the interpreter gone from under us (an upgrade in place): stopped, say so
            fail(f"could not restart with the new {config}: {exc}; start fleet serve again")
    log.info("fleet serve stopped")


def _reload_ok(config: Path, log: logging.Logger, reload: list[bool]) -> bool:
    """SIGHUP: whether ``config`` as it is now on disk can be run; a file that cannot is named with its
    problems and the service goes on with the one it loaded (nothing half-applied)."""
    from fleet.config import ConfigError, load_config

    try:
        problems = load_config(config).service_problems()
    except ConfigError as exc:
        problems = list(exc.problems)
    if problems:
        log.error(
            "SIGHUP: %s is not valid, still running on the configuration loaded at start: %s",
            config,
            "; ".join(problems),
        )
        return False
    log.info("SIGHUP: %s is valid: finishing the current tick, then restarting with it", config)
    reload.append(True)
    return True


def _serve_name(dry_run: bool) -> str:
    """The service's name in the store: ``$FLEET_SERVICE_NAME``, else 'fleet' (one line and exit 2 when the
    variable cannot name a service)."""
    from fleet.service.app import DRY_RUN_SUFFIX

    name = _service_name(None)
    problem = text_problem(name, MAX_SERVICE_CHARS)
    if problem:
        fail(f"environment FLEET_SERVICE_NAME: {problem}")
    if name.endswith(DRY_RUN_SUFFIX) and not dry_run:
        fail(
            f"environment FLEET_SERVICE_NAME: {name!r} names a dry run's store; a service that acts needs "
            f"another name (fleet serve --dry-run adds {DRY_RUN_SUFFIX} itself)"
        )
    return name


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
# Column widths of the store (fleet/service/store.py): longer values would fail the insert on PostgreSQL.
MAX_HOLDER_CHARS = 200
# leases.name and the services' keys are 100 characters: room for the "-dry-run" and "/shard-N" suffixes
MAX_SERVICE_CHARS = 64
MAX_INSTANCE_ID_CHARS = 64


def _check_serve_options(
    cfg: Any, port: int | None, interval: float | None, log_level: str, holder: str | None
) -> None:
    """Every bad `fleet serve` flag as one line and exit 2, before anything starts."""
    import math

    from fleet.config import MAX_TICK_INTERVAL_S, MIN_TICK_INTERVAL_S

    if interval is not None and not (
        math.isfinite(interval) and MIN_TICK_INTERVAL_S <= interval <= MAX_TICK_INTERVAL_S
    ):
        low, high = MIN_TICK_INTERVAL_S, MAX_TICK_INTERVAL_S
        fail(f"--interval must be between {low} and {high:.0f} s, got {interval}")
    if port is not None and not 0 <= port <= 65535:
        fail(f"--port must be between 0 and 65535, got {port}")
    if log_level.lower() not in LOG_LEVELS:
        fail(f"--log-level: {log_level!r} is not one of {', '.join(LOG_LEVELS)}")
    if holder is not None:
        problem = text_problem(holder, MAX_HOLDER_CHARS)
        if problem:
            fail(f"--holder: {problem}")
    problems = cfg.service_problems()
    if problems:
        from fleet.commands._common import fail_lines

        fail_lines(problems)


def text_problem(value: str, max_chars: int) -> str | None:
    """Why ``value`` cannot be stored as an identifier (too long, control characters), or None."""
    if not value.strip():
        return "must not be empty"
    if len(value) > max_chars:
        return f"at most {max_chars} characters, got {len(value)}"
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return "must not contain control characters (NUL, newlines, ...)"
    return None


def _console_url(host: str, port: int) -> str:
    """The console's address; a wildcard listener is reached through the loopback address."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/console/"


def _open_console(url: str) -> None:
    """Print the address on stdout; open a browser only where a desktop is there to show it."""
    print(f"console: {url}", flush=True)
    desktop = sys.platform in ("darwin", "win32") or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )
    if desktop:
        import webbrowser

        try:
            webbrowser.open(url)
        except Exception:  # a missing browser must not stop the service; the address is printed
            logging.getLogger("fleet.service").info("could not open a browser; the address is printed")


def _print_tick(result: Any) -> None:
    console.print(
        f"tick at {result.at.isoformat()}: leader={result.leader} epoch={result.lease_epoch} "
        f"actions={len(result.actions)} errors={len(result.errors)}",
        highlight=False,
    )
    for a in result.actions:
        console.print(
            escape(f"  {a.group} {a.action} {a.instance_id or a.target}: {a.outcome}"), highlight=False
        )
    for e in result.errors:
        err_console.print(escape(f"  error: {e}"), highlight=False, soft_wrap=True)


def status(
    database: str | None = typer.Option(None, "--database", help=DB_HELP),
    service: str | None = typer.Option(None, "--service", help=SERVICE_HELP),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """What the store says: the leader, groups, recent decisions, open incidents with their SLA timers."""
    from rich.table import Table

    from fleet.service.capacity_store import view as capacity_view
    from fleet.service.views import status_from_store

    store = _open(database, service, existing=True)
    view = status_from_store(store, _now(), [])
    view["capacity"] = capacity_view(store)
    if as_json:
        print_json(view)
        return
    lease = view["lease"]
    if lease is None:
        console.print("leader: none (no replica has run against this database)")
    else:
        state = "held until" if lease["valid"] else "expired at"  # a released lease expires at once
        console.print(
            escape(f"leader: {lease['holder']} (epoch {lease['epoch']}, {state} {lease['expires_at']})")
        )
    _print_shards(view.get("shards", []))
    table = Table()
    table.add_column("group", no_wrap=True)
    table.add_column("paused")
    table.add_column("serving target")
    table.add_column("metrics complete since (UTC)", no_wrap=True)
    table.add_column("last scale (UTC)", no_wrap=True)
    table.add_column("to")
    table.add_column("outcome")
    incomplete = []
    for g in view["groups"]:
        last = g["last_scale"] or {}
        decided = g["serving_target"] is not None
        known = g["metrics_known_since"]
        if decided and known is None:
            incomplete.append(g["name"])
        table.add_row(
            escape(g["name"]),
            "yes" if g["paused"] else (f"ESS {g['ess_state']}" if g.get("ess_state") else ""),
            "-" if not decided else str(g["serving_target"]),
            known[:19] if known else ("[yellow]incomplete[/]" if decided else "-"),
            last.get("at", "-")[:19],
            str(last.get("target", "-")),
            last.get("outcome", "-"),
        )
    console.print(table)
    for g in view["groups"]:
        last = g["last_scale"] or {}
        if last.get("reason"):
            # why the last scale: the floor's reason names a holiday or makeup workday where that is why
            console.print(
                escape(f"{g['name']}: last scale to {last['target']}: {last['reason']}"),
                highlight=False,
                soft_wrap=True,
            )
        if last.get("error") and last.get("outcome") != "applied":
            # why the write failed: a RAM denial names the permission to grant and the policy holding it
            console.print(
                escape(f"{g['name']}: the last scale write failed ({last['outcome']}): {last['error']}"),
                highlight=False,
                soft_wrap=True,
            )
    if incomplete:
        console.print(
            f"[yellow]metrics incomplete:[/] {escape(', '.join(incomplete))}: at the last tick some serving "
            "instance lacked a rule's metric (or it was stale), so nothing scales in; is the node agent "
            "publishing? GET /status names the metric and the instances",
            highlight=False,
            soft_wrap=True,
        )
    for g in view["groups"]:
        if g.get("ess_unreadable"):
            down = g["ess_unreadable"]
            console.print(
                escape(
                    f"{g['name']}: ESS cannot be read since {down['since'][:19]} ({down['error']}): "
                    "nothing is written to it, and isolate, release and replace requests wait"
                ),
                highlight=False,
                soft_wrap=True,
            )
    _print_requests(view.get("requests", []))
    _print_incidents(view["incidents"])
    _print_capacity(view["capacity"])


def _print_requests(rows: list[dict[str, Any]]) -> None:
    """Operator requests the leader has not applied yet, and why one waits (as ``fleet requests`` says)."""
    from fleet.service.views import queued_request_line

    for r in rows:
        console.print(escape(queued_request_line(r)), highlight=False, soft_wrap=True)


def _print_capacity(records: list[dict[str, Any]]) -> None:
    """Stock-outs and spot reclaims with their timelines (issue 17)."""
    for rec in records[:10]:
        what = rec["instance_id"] or rec["instance_type"] or ""
        console.print(
            escape(f"capacity {rec['kind']} {rec['state']}: {rec['group']} {what} - {rec['detail']}"),
            highlight=False,
        )
        for ev in rec["timeline"]:
            console.print(escape(f"  {ev['at'][:19]} {ev['event']}: {ev['detail']}"), highlight=False)


def scoped_clients(cfg: Any, default: Any) -> Any:
    """Clients per (account, region) a group names: the profile's credentials (any type: keys, a RAM role
    to assume, the CLI's profiles) and the account's id for its custom metric namespace; groups naming
    neither share ``default``. `fleet serve` refuses an account no profile names before it gets here."""
    import os

    from fleet.cloud.clients import make_clients, profile_credential

    cache: dict[tuple[str | None, str | None], Any] = {(None, None): default}

    def clients_for(scope: tuple[str | None, str | None]) -> Any:
        if scope not in cache:
            account, region = scope
            account_id = cfg.accounts[account].account_id if account else (cfg.account_id or "unset")
            credential = profile_credential(account, os.environ) if account else None
            cache[scope] = make_clients(region or cfg.region, account_id, credential=credential)
        return cache[scope]

    return clients_for


def _print_shards(shards: list[dict[str, Any]]) -> None:
    """Which replica owns which shard, and each shard's last tick (only when the service is sharded)."""
    if len(shards) <= 1:
        return
    from rich.table import Table

    table = Table(title="shards")
    for col in ("shard", "holder", "epoch", "lease", "last tick (UTC)", "groups"):
        table.add_column(col, no_wrap=col != "groups")
    for s in shards:
        table.add_row(
            str(s["shard"]),
            escape(s["holder"]),
            str(s["epoch"]),
            "held" if s["valid"] else "expired",
            (s["last_tick"] or "-")[:19],
            str(len(s["groups"])),
        )
    console.print(table)


def decisions(
    since: str = typer.Option("1h", "--since", help="how far back, e.g. 30m, 1h, 7d"),
    group: str | None = typer.Option(None, "--group"),
    database: str | None = typer.Option(None, "--database", help=DB_HELP),
    service: str | None = typer.Option(None, "--service", help=SERVICE_HELP),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Decisions recorded since a time: inputs, reason, action, request id and outcome."""
    from rich.table import Table

    from fleet.service.views import decision_view

    start = _since_time(since)
    store = _open(database, service, existing=True)
    rows = [decision_view(d) for d in store.decisions(since=start, group=group)]
    if group is not None and not rows:
        known = store.decided_groups()
        if group not in known:
            # a typo would otherwise read as "the group made no decisions": name what the store has
            fail(
                f"--group {group!r}: this service has recorded no decision for it; groups with decisions: "
                + (", ".join(known) or "none yet")
            )
    if as_json:
        print_json(rows)
        return
    table = Table()
    table.add_column("at (UTC)", no_wrap=True)
    for col in ("group", "kind", "action", "target/instance", "outcome", "reason", "request id"):
        table.add_column(col)
    for d in rows:
        table.add_row(
            *map(
                escape,
                (
                    d["at"][:19],
                    d["group"],
                    d["kind"],
                    d["action"],
                    str(d["instance_id"] or d["target"] or ""),
                    d["outcome"] + (" (dry run)" if d["dry_run"] else ""),
                    d["error"] or d["reason"] or "",
                    d["request_id"] or "",
                ),
            )
        )
    console.print(table)
    if not rows:
        console.print(f"no decisions in the last {since}")


def _since_time(text: str, option: str = "--since") -> datetime:
    """Now less a positive duration given on the command line (`30m`, `4h`, `7d`); one that reaches before
    year 1 is refused."""
    seconds = parse_window(text, option)
    try:
        return _now() - timedelta(seconds=seconds)
    except OverflowError:
        fail(f"{option}: {text!r} reaches back before the calendar starts; give a shorter window")


def _print_incidents(rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from fleet.service.store import state_label

    if not rows:
        console.print("no open incidents")
        return
    # a deferred isolation (a system event ECS scheduled ahead) says when it falls due
    deferred = any(r.get("due_in_s") is not None for r in rows)
    table = Table()
    table.add_column("id", no_wrap=True)  # people copy it into `fleet incidents show`
    cols = ("group", "instance", "state", "cause", "respond in", "isolate in")
    for col in (*cols, *(("isolation due (UTC)",) if deferred else ()), "ack"):
        table.add_column(col)
    for r in rows:
        cells = [
            r["id"],
            r["group"],
            r["instance_id"],
            state_label(r["state"], r.get("outcome")),
            r["cause"],
            _left(r.get("respond_by_s_left")),
            _left(r.get("isolate_by_s_left")),
        ]
        if deferred:
            cells.append(_due(r))
        table.add_row(*map(escape, [*cells, r.get("acknowledged_by") or "-"]))
    console.print(table)


def _due(row: dict[str, Any]) -> str:
    """When a deferred isolation falls due, and how long until then; ``-`` when it is due already."""
    left = row.get("due_in_s")
    if left is None:
        return "-"
    return f"{str(row['due_at'])[:16].replace('T', ' ')} (in {_left(left)})"


def _left(seconds: float | None) -> str:
    if seconds is None:
        return "done"
    sign = "-" if seconds < 0 else ""
    s = int(abs(seconds))
    return f"{sign}{s // 3600}h{(s % 3600) // 60:02d}m" if s >= 3600 else f"{sign}{s // 60}m{s % 60:02d}s"


incidents_app = typer.Typer(
    help="Incidents of node isolation: list, show a timeline, acknowledge.",
    invoke_without_command=True,
    no_args_is_help=False,
)


@incidents_app.callback()
def incidents_list(
    ctx: typer.Context,
    open_only: bool = typer.Option(False, "--open", help="only incidents not closed"),
    database: str | None = typer.Option(None, "--database", help=DB_HELP),
    service: str | None = typer.Option(None, "--service", help=SERVICE_HELP),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """List incidents (newest first) with their SLA timers."""
    if ctx.invoked_subcommand is not None:
        return
    from fleet.service.views import incident_view

    store = _open(database, service, existing=True)
    now = _now()
    rows = [incident_view(i, now) for i in store.incidents(open_only=open_only)]
    if as_json:
        print_json(rows)
        return
    _print_incidents(rows)


@incidents_app.command("show")
def incidents_show(
    incident_id: str = typer.Argument(..., help="incident id"),
    database: str | None = typer.Option(None, "--database", help=DB_HELP),
    service: str | None = typer.Option(None, "--service", help=SERVICE_HELP),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """One incident and its timeline: states, actions taken, notifications, acknowledgments."""
    from fleet.service.views import incident_view
    from fleet.timefmt import parse_iso_utc

    store = _open(database, service, existing=True)
    inc = store.incident(incident_id)
    if inc is None:
        known = [i.id for i in store.incidents()][:5]
        fail(f"unknown incident {incident_id!r}" + (f"; recent: {', '.join(known)}" if known else ""))
    timeline: list[dict[str, Any]] = []
    for entry in (inc.body or {}).get("timeline", []):
        timeline.append(
            {
                "at": entry["at"],
                "what": f"state {entry['state']}",
                "detail": f"{entry.get('reason', '')} {entry.get('detail', '')}".strip(),
            }
        )
    for ev in store.incident_events(incident_id):
        timeline.append({"at": ev.at.isoformat(), "what": ev.kind, "detail": f"{ev.detail} ({ev.actor})"})
    for d in store.decisions(kind="isolation"):
        if d.incident_id == incident_id:
            timeline.append(
                {
                    "at": d.at.isoformat(),
                    "what": f"action {d.action}",
                    "detail": f"{d.outcome} {d.request_id or ''} {d.error or ''}".strip(),
                }
            )
    timeline.sort(key=lambda e: parse_iso_utc(e["at"]))
    view = {**incident_view(inc, _now()), "timeline": timeline}
    if as_json:
        print_json(view)
        return
    console.print(
        f"[bold]{escape(inc.id)}[/] "
        + escape(f"{inc.group_name}/{inc.instance_id}: {inc.state} ({inc.cause})")
    )
    console.print(
        f"respond by {view['respond_by']} ({_left(view['respond_by_s_left'])}), "
        f"isolate by {view['isolate_by']} ({_left(view['isolate_by_s_left'])})",
        highlight=False,
    )
    for e in timeline:
        console.print(escape(f"  {e['at'][:19]}  {e['what']:<22} {e['detail']}"), highlight=False)


@incidents_app.command("ack")
def incidents_ack(
    incident_id: str = typer.Argument(..., help="incident id"),
    by: str = typer.Option(os.environ.get("USER", "operator"), "--by", help="who acknowledges"),
    database: str | None = typer.Option(None, "--database", help=DB_HELP),
    service: str | None = typer.Option(None, "--service", help=SERVICE_HELP),
) -> None:
    """Acknowledge an incident as a human (stops the respond-by clock)."""
    from fleet.service.store import MAX_HUMAN_NAME_CHARS, AckOutcome, human_actor

    problem = text_problem(by, MAX_HUMAN_NAME_CHARS)
    if problem:
        fail(f"--by: {problem}")
    store = _open(database, service, existing=True)
    now = _now()
    found = store.acknowledge_incident(incident_id, by, now)
    if found == AckOutcome.UNKNOWN:
        fail(f"unknown incident {incident_id!r}")
    if found == AckOutcome.OTHER_SERVICE:
        fail(_other_service(store, incident_id))
    if found == AckOutcome.CLOSED:
        fail(
            f"incident {incident_id!r} is closed: nothing to acknowledge (fleet incidents show {incident_id})"
        )
    store.add_request("ack", now, incident_id=incident_id, actor=human_actor(by))
    console.print(escape(f"{incident_id} acknowledged by {by}"), highlight=False)


def _other_service(store: Any, incident_id: str) -> str:
    """Why an ack of another service's incident is refused, in one line naming that service."""
    owner = store.incident_owner(incident_id)
    return (
        f"incident {incident_id!r} belongs to service {owner!r}, not {store.service!r}: "
        f"acknowledge it with --service {owner} (or FLEET_SERVICE_NAME={owner})"
    )


def isolate(
    instance_id: str = typer.Argument(..., help="ECS instance id, e.g. i-..."),
    reason: str = typer.Option(..., "--reason", help="why (recorded in the incident)"),
    by: str = typer.Option(os.environ.get("USER", "operator"), "--by"),
    database: str | None = typer.Option(None, "--database", help=DB_HELP),
    service: str | None = typer.Option(None, "--service", help=SERVICE_HELP),
) -> None:
    """Isolate an instance by hand, through the same workflow (surge first, guardrails, SLA timers)."""
    if not instance_id.strip() or not reason.strip():
        fail("isolate needs an instance id and a non-empty --reason")
    _check_request_text(instance_id, reason, by)
    store = _open(database, service, existing=True)
    rid = store.add_request("isolate", _now(), instance_id=instance_id, reason=reason, actor=by)
    _warn_if_unknown(store, instance_id)
    _queued(store, f"isolation of {instance_id}", rid, instance_id)


def _warn_if_unknown(store: Any, instance_id: str) -> None:
    """Say at once when no group held the instance at the service's last read: the leader refuses such a
    request (a typo, another region's instance), and nothing shows that refusal to the operator."""
    lists = store.instance_lists()
    known = {row.get("instance_id") for _, rows in lists.values() for row in rows if isinstance(row, dict)}
    if not lists or instance_id in known:
        return
    read_at = max(at for at, _ in lists.values())
    err_console.print(
        escape(
            f"warning: {instance_id} was in none of the groups ({', '.join(sorted(lists))}) at the service's "
            f"last read ({read_at.isoformat(timespec='seconds')}): unless it has joined one since, the "
            "leader refuses the request: check the id"
        ),
        highlight=False,
        soft_wrap=True,
    )


def release(
    instance_id: str = typer.Argument(..., help="ECS instance id"),
    by: str = typer.Option(os.environ.get("USER", "operator"), "--by"),
    database: str | None = typer.Option(None, "--database", help=DB_HELP),
    service: str | None = typer.Option(None, "--service", help=SERVICE_HELP),
) -> None:
    """Return an isolated instance to service (ExitStandby) and close its incident."""
    if not instance_id.strip():
        fail("release needs an instance id, e.g. fleet release i-...")
    from fleet.service.store import NOT_RELEASABLE

    _check_request_text(instance_id, "", by)
    store = _open(database, service, existing=True)
    if not store.releasable(instance_id):
        # queued anyway, the leader would find nothing to act on and the instance would stay where it is
        fail(
            f"{instance_id} {NOT_RELEASABLE} (fleet incidents --open lists what fleet isolated; an instance "
            "put in Standby outside fleet is returned with ESS ExitStandby)"
        )
    rid = store.add_request("release", _now(), instance_id=instance_id, actor=by)
    _queued(store, f"release of {instance_id}", rid, instance_id)


def replace(
    instance_id: str = typer.Argument(..., help="ECS instance id"),
    by: str = typer.Option(os.environ.get("USER", "operator"), "--by"),
    database: str | None = typer.Option(None, "--database", help=DB_HELP),
    service: str | None = typer.Option(None, "--service", help=SERVICE_HELP),
) -> None:
    """Replace an instance under an open incident (one held for diagnosis, say): RemoveInstances, and ESS
    launches its replacement."""
    if not instance_id.strip():
        fail("replace needs an instance id, e.g. fleet replace i-...")
    from fleet.service.store import NO_INCIDENT

    _check_request_text(instance_id, "", by)
    store = _open(database, service, existing=True)
    if not store.releasable(instance_id):
        fail(f"{instance_id} {NO_INCIDENT}: nothing to replace (fleet isolate it first)")
    rid = store.add_request("replace", _now(), instance_id=instance_id, actor=by)
    _queued(store, f"replacement of {instance_id}", rid, instance_id)


def _warn_if_no_leader(store: Any, rid: int) -> None:
    """Say at once when no replica holds the service's lease (every shard's expired: the service was
    stopped, or its replicas died): the request waits, queued, until one runs again."""
    from fleet.service.views import shard_leases

    expiries = [expires_at for *_, expires_at in shard_leases(store)]
    now = _now()
    if not expiries or any(now < at for at in expiries):
        return  # never ran under a lease (refused earlier when unknown), or a leader acts on its next tick
    last = max(expiries).isoformat(timespec="seconds")
    err_console.print(
        escape(
            f"warning: no replica of service {store.service!r} holds its lease (the last expired at "
            f"{last[:19]}): the request waits until fleet serve runs again (fleet cancel-request {rid} "
            "withdraws it)"
        ),
        highlight=False,
        soft_wrap=True,
    )


def _queued(store: Any, what: str, rid: int, instance_id: str) -> None:
    """Say a request is queued, and when ESS could not be read for the instance's group at the leader's
    last tick, that it waits for ESS and why (it is applied once ESS answers)."""
    from fleet.service.ess_reach import outage_for_instance

    _warn_if_no_leader(store, rid)
    outage = outage_for_instance(store, instance_id)
    if outage is None:
        console.print(
            escape(
                f"{what} queued (request {rid}); the leader acts on its next tick "
                f"(fleet cancel-request {rid} withdraws it before then)"
            ),
            highlight=False,
        )
        return
    console.print(
        escape(
            f"{what} queued (request {rid}), and it waits: ESS cannot be read for group {outage.group} "
            f"since {outage.since.isoformat(timespec='seconds')} ({outage.error}); the leader applies it "
            "once ESS answers (fleet status shows it queued)"
        ),
        highlight=False,
        soft_wrap=True,
    )


def reset_breaker(
    group: str = typer.Argument(..., help="the group's name in fleet.yaml"),
    reason: str = typer.Option(..., "--reason", help="why automatic isolation may go on (recorded)"),
    by: str = typer.Option(os.environ.get("USER", "operator"), "--by"),
    database: str | None = typer.Option(None, "--database", help=DB_HELP),
    service: str | None = typer.Option(None, "--service", help=SERVICE_HELP),
) -> None:
    """Reset a group's isolation circuit breaker: only a human ends it (docs/policies.md, guardrails)."""
    if not reason.strip():
        fail("reset-breaker needs a non-empty --reason")
    problem = text_problem(group, MAX_HOLDER_CHARS)
    if problem:
        fail(f"group: {problem}")
    _check_request_text("-", reason, by)
    from fleet.service.views import status_from_store

    store = _open(database, service, existing=True)
    known = sorted({g["name"] for g in status_from_store(store, _now(), [])["groups"]})
    if group not in known:  # a typo would be refused by the leader, in a record nobody reads
        fail(f"group {group!r}: this service has decided no such group; it has: {', '.join(known) or 'none'}")
    rid = store.add_request("reset_breaker", _now(), group_name=group, reason=reason, actor=by)
    _warn_if_no_leader(store, rid)
    console.print(
        escape(f"breaker reset of {group} queued (request {rid}); the leader acts on its next tick"),
        highlight=False,
    )


def cancel_request(
    request_id: str = typer.Argument(..., help="the request's number (fleet status lists the queued ones)"),
    reason: str = typer.Option("", "--reason", help="why it is withdrawn (recorded)"),
    by: str = typer.Option(os.environ.get("USER", "operator"), "--by", help="who withdraws it"),
    database: str | None = typer.Option(None, "--database", help=DB_HELP),
    service: str | None = typer.Option(None, "--service", help=SERVICE_HELP),
) -> None:
    """Withdraw a queued isolate, release, replace or reset-breaker before the leader takes it."""
    from fleet.service.store import CancelOutcome
    from fleet.service.views import cancel_refusal, request_id_problem, request_what

    problem = request_id_problem(request_id)
    if problem:
        fail(f"{problem} (fleet status lists the queued requests)")
    _check_request_text("-", reason, by)
    rid = int(request_id)
    store = _open(database, service, existing=True)
    found, req = store.cancel_request(rid, by, _now(), reason=reason)
    if found == CancelOutcome.CANCELLED and req is not None:
        console.print(escape(f"request {rid} ({request_what(req)}) cancelled by {by}"), highlight=False)
        return
    refusal = cancel_refusal(found, req, rid, store.service)
    if found == CancelOutcome.OTHER_SERVICE and req is not None:
        refusal += f": cancel it with --service {req.service}"
    fail(refusal)


def requests(
    limit: str = typer.Option(
        "50", "--limit", help="how many (1-500): the queued ones first, then the newest handled"
    ),
    database: str | None = typer.Option(None, "--database", help=DB_HELP),
    service: str | None = typer.Option(None, "--service", help=SERVICE_HELP),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output (GET /requests' shape)"),
) -> None:
    """Operator requests: the queued ones (why each waits) and what became of the newest handled ones."""
    from rich.table import Table

    from fleet.service.views import request_limit_problem, request_log_view, request_target

    problem = request_limit_problem(limit.strip())
    if problem:
        fail(f"--{problem}")
    store = _open(database, service, existing=True)
    rows = store.request_log(int(limit))
    if as_json:
        print_json({"service": store.service, "requests": [request_log_view(r) for r in rows]})
        return
    if not rows:
        console.print(escape(f"no operator requests for service {store.service}"), highlight=False)
        return
    views = [request_log_view(r) for r in rows]
    # the queued ones in the line fleet status prints; the handled ones in a table with how each ended
    _print_requests([v for v in views if v["handled_at"] is None])
    handled = [v for v in views if v["handled_at"] is not None]
    if not handled:
        return
    table = Table()
    for col in ("id", "request", "by", "queued", "handled", "outcome"):
        table.add_column(col, no_wrap=col == "id")
    for v in handled:
        table.add_row(
            str(v["id"]),
            escape(f"{v['kind']} {request_target(v)}"),
            escape(v["by"] or "-"),
            v["queued_at"][:19],
            v["handled_at"][:19],
            escape(v["outcome"] or "handled"),
        )
    console.print(table)


def _check_request_text(instance_id: str, reason: str, by: str) -> None:
    """An operator request's text as the store can hold it (PostgreSQL refuses NUL and long ids)."""
    problem = text_problem(instance_id, MAX_INSTANCE_ID_CHARS)
    if problem:
        fail(f"instance id: {problem}")
    if "\x00" in reason:
        fail("--reason must not contain NUL characters")
    problem = text_problem(by, MAX_HOLDER_CHARS)
    if problem:
        fail(f"--by: {problem}")


def sla_report(
    since: str = typer.Option("7d", "--since", help="how far back, e.g. 24h, 7d"),
    database: str | None = typer.Option(None, "--database", help=DB_HELP),
    service: str | None = typer.Option(None, "--service", help=SERVICE_HELP),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Incidents in a window: time to respond, time to isolate, SLA breaches."""
    from rich.table import Table

    from fleet.service.views import sla_report as build_sla_report

    start = _since_time(since)  # flags first, before the store is opened
    store = _open(database, service, existing=True)
    report = build_sla_report(store, start, _now())
    summary, rows = report["summary"], report["incidents"]
    if as_json:
        print_json(report)
        return
    table = Table()
    table.add_column("id", no_wrap=True)
    for col in ("instance", "state", "respond", "isolate", "breach"):
        table.add_column(col)
    for r in rows:
        breach = ",".join(k for k in ("respond", "isolate") if r[f"{k}_breached"]) or "-"
        table.add_row(
            escape(r["id"]),
            escape(r["instance_id"]),
            escape(r["state"]),
            _dur(r["time_to_respond_s"]),
            _dur(r["time_to_isolate_s"]),
            breach,
        )
    console.print(table)
    console.print(
        f"{summary['incidents']} incident(s); breaches: respond {summary['respond_breaches']}, "
        f"isolate {summary['isolate_breaches']}; median respond {_dur(summary['median_time_to_respond_s'])}, "
        f"isolate {_dur(summary['median_time_to_isolate_s'])}",
        highlight=False,
    )


def _dur(seconds: float | None) -> str:
    return "-" if seconds is None else _left(seconds)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("status")(status)
    app.command("decisions")(decisions)
    app.add_typer(incidents_app, name="incidents")
    app.command("isolate")(isolate)
    app.command("release")(release)
    app.command("replace")(replace)
    app.command("reset-breaker")(reset_breaker)
    app.command("cancel-request")(cancel_request)
    app.command("requests")(requests)
    app.command("sla-report")(sla_report)
