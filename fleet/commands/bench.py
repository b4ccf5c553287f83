"""`fleet bench service`: the service at scale, as real replicas against the fake cloud (docs/service.md)."""

from __future__ import annotations

import math

import typer

from fleet.commands._common import fail, print_json
from fleet.commands.simulate import bench_app  # `fleet bench` is shared with the simulator's benchmarks


def register(app: typer.Typer) -> None:
    """Nothing to add: ``service`` joins the existing ``fleet bench`` group (fleet.commands.simulate)."""


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

    if groups < 1 or instances < 1 or replicas < 1:
        fail("--groups, --instances and --replicas must be at least 1")
    if not (math.isfinite(latency_ms) and latency_ms >= 0) or not (
        math.isfinite(duration_s) and duration_s > 0
    ):
        fail("--latency-ms must be >= 0 and --duration-s > 0 (finite)")
    if not (math.isfinite(interval_s) and interval_s > 0):
        fail("--interval-s must be a positive number")
    if replicas > 1 and not (database or "").startswith("postgresql"):
        fail("--replicas above 1 needs --database postgresql+psycopg://... (SQLite serves one replica)")
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
        report = run(opts, progress=lambda s: status.update(s))
    if as_json:
        print_json(report)
        return
    for key, value in report.items():
        if key != "per_replica":
            typer.echo(f"{key}: {value}")
