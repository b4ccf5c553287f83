"""`fleet bench service`: the service at scale, as real replicas against the fake cloud (docs/service.md)."""

from __future__ import annotations

import math

import typer

from fleet.commands._common import fail, print_json
from fleet.commands.simulate import bench_app  # `fleet bench` is shared with the simulator's benchmarks

# The fake's ESS refuses a MaxSize above 2000 (as ESS does); the bench gives a group twice its instances.
MAX_INSTANCES = 1000
# 20 times the documented 500-group run (docs/service.md): more is a typo that fills memory before a tick.
MAX_GROUPS = 10_000
MAX_REPLICAS = 32  # each replica is a process (and 8 lease shards): more than any host here runs at once
MAX_DURATION_S = 86400.0  # a day of ticking: a longer benchmark is a typo


def register(app: typer.Typer) -> None:
    """Nothing to add: ``service`` joins the existing ``fleet bench`` group (fleet.commands.simulate)."""


def _check_sizes(groups: int, instances: int, replicas: int) -> None:
    for flag, value, top in (
        ("--groups", groups, MAX_GROUPS),
        ("--instances", instances, MAX_INSTANCES),
        ("--replicas", replicas, MAX_REPLICAS),
    ):
        if not 1 <= value <= top:
            fail(f"{flag} must be between 1 and {top}, got {value}")


def _check_times(latency_ms: float, duration_s: float, interval_s: float) -> None:
    """Finite and bounded: a latency past the SDK's read timeout times every call out, an interval outside
    what `fleet serve` accepts makes every replica exit."""
    from fleet.cloud.clients import READ_TIMEOUT_MS
    from fleet.config import MAX_TICK_INTERVAL_S, MIN_TICK_INTERVAL_S

    if not (math.isfinite(latency_ms) and 0 <= latency_ms <= READ_TIMEOUT_MS):
        fail(
            f"--latency-ms must be between 0 and {READ_TIMEOUT_MS} (the SDK read timeout), got {latency_ms:g}"
        )
    if not (math.isfinite(duration_s) and 0 < duration_s <= MAX_DURATION_S):
        fail(f"--duration-s must be above 0 and at most {MAX_DURATION_S:g}, got {duration_s:g}")
    low, high = MIN_TICK_INTERVAL_S, MAX_TICK_INTERVAL_S
    if not (math.isfinite(interval_s) and low <= interval_s <= high):
        fail(f"--interval-s must be between {low:g} and {high:g} s, got {interval_s:g}")


def _check_database_url(url: str) -> None:
    """A URL SQLAlchemy can use, before any replica starts (each would exit on it, one after another)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        make_url(url).get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        fail(f"--database: {type(exc).__name__}: {str(exc).splitlines()[0]}")


@bench_app.command("service")
def service(
    groups: int = typer.Option(..., "--groups", help="scaling groups in the fake"),
    instances: int = typer.Option(..., "--instances", help="InService instances per group"),
    latency_ms: float = typer.Option(40.0, "--latency-ms", help="added to every cloud API call"),
    replicas: int = typer.Option(1, "--replicas", help="fleet serve processes"),
    database: str | None = typer.Option(
        None, "--database", help="shared store (PostgreSQL for several replicas; default SQLite, one replica)"
    ),
    duration_s: float = typer.Option(90.0, "--duration-s", help="how long the replicas tick"),
    interval_s: float = typer.Option(5.0, "--interval-s", help="tick interval of the replicas"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """N groups x M instances, L ms per call, R replicas: tick p50/p99, calls per tick, RSS, handover."""
    from rich.console import Console

    from fleet.sim.service_bench import BenchOptions, run

    _check_sizes(groups, instances, replicas)
    _check_times(latency_ms, duration_s, interval_s)
    if replicas > 1 and not (database or "").startswith("postgresql"):
        fail("--replicas above 1 needs --database postgresql+psycopg://... (SQLite serves one replica)")
    if database is not None:
        _check_database_url(database)
    err = Console(stderr=True)
    opts = BenchOptions(
        groups=groups,
        instances=instances,
        latency_ms=latency_ms,
        replicas=replicas,
        database_url=database,
        duration_s=duration_s,
        tick_interval_s=interval_s,
        ttl_s=max(15.0, 3 * interval_s),
    )
    with err.status("benchmarking the service") as status:
        try:
            report = run(opts, progress=lambda s: status.update(s))
        except RuntimeError as exc:  # a replica exited (its own one-line error is in the message)
            fail(f"bench service: {exc}")
    if as_json:
        print_json(report)
        return
    for key, value in report.items():
        if key != "per_replica":
            typer.echo(f"{key}: {value}")
