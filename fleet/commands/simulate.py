"""`fleet simulate` and `fleet bench autoscale`: the simulated fleet on real traces, and the benchmark."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from fleet.commands._common import console, err_console, fail, load_config_or_exit, print_json

bench_app = typer.Typer(
    name="bench",
    help="Benchmarks run in the simulator (autoscaling policies; more to come).",
    no_args_is_help=True,
    add_completion=False,
)


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
    app.add_typer(bench_app, name="bench")


def _check_report_path(report: Path) -> None:
    """Before the run, so a long simulation never ends on a report it cannot write."""
    if report.is_dir():
        fail(f"--report: {report} is a directory")
    try:
        report.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--report: cannot create {report.parent}: {exc.strerror or exc}")
    if not os.access(report.parent, os.W_OK) or (report.exists() and not os.access(report, os.W_OK)):
        fail(f"--report: cannot write {report}: permission denied")


def _load(config: Path | None) -> Any:
    from fleet.sim.scenario import DEFAULT_CONFIG

    path = config or DEFAULT_CONFIG
    if not path.is_file():
        fail(f"{path}: no such config file" + ("" if config else " (the embedded default is missing)"))
    cfg = load_config_or_exit(path, env={})
    if not cfg.groups:
        fail(f"{path}: groups: the simulator needs at least one scaling group")
    return cfg


def _hardware(model: str, instance_type: str, region: str) -> Any:
    from fleet.sim.engine import HardwareError, resolve_hardware

    try:
        return resolve_hardware(model, instance_type, region)
    except HardwareError as exc:
        fail(f"--model/--instance-type: {exc}")


def simulate(
    config: Path | None = typer.Option(
        None, "--config", help="fleet.yaml (default: the embedded examples/sim/fleet.yaml).", dir_okay=False
    ),
    workload: str = typer.Option(
        None,
        "--workload",
        help="KIND:NAME[,key=value...], e.g. servegen:m-small,day=2,peak=30 (docs/simulator.md).",
    ),
    hours: float = typer.Option(24.0, "--hours", help="Simulated hours."),
    fault: list[str] = typer.Option(
        [], "--fault", help="KIND[:ARG],at=TIME[,instance=N], e.g. overheat,at=10h (repeatable)."
    ),
    policy: str = typer.Option("ours", "--policy", help="ours | static-peak | ess-alarm | target-tracking."),
    report: Path | None = typer.Option(None, "--report", help="Write a self-contained HTML report here."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    model: str = typer.Option("Qwen2.5-14B", "--model", help="Model every instance serves (sizing catalog)."),
    instance_type: str = typer.Option("ecs.gn7i-2x.8xlarge", "--instance-type", help="ECS instance type."),
    seed: int = typer.Option(0, "--seed", help="Seed of the fake cloud and the workload when it names none."),
    tick_s: float = typer.Option(
        60.0,
        "--tick-s",
        help="Simulated seconds between ticks of our service (production: 15; 60 keeps a simulated day under "
        "two minutes). Baselines keep their own documented periods.",
    ),
) -> None:
    """Simulate a GPU fleet in the in-process fake cloud under one policy and summarise the run."""
    from dataclasses import replace

    from fleet.sim.scenario import DEFAULT_WORKLOAD
    from fleet.sim.scenario import simulate as run_sim
    from fleet.sim.types import POLICIES, SimOptions
    from fleet.sim.workload import WorkloadError, parse_workload_spec

    if policy not in POLICIES:
        fail(f"--policy: unknown policy {policy!r}; one of {', '.join(POLICIES)}")
    if not hours > 0:
        fail(f"--hours: must be positive, got {hours:g}")
    if not tick_s > 0:
        fail(f"--tick-s: must be positive, got {tick_s:g}")
    embedded = config is None and workload is None
    workload = workload or DEFAULT_WORKLOAD
    try:
        spec = parse_workload_spec(workload)
    except WorkloadError as exc:
        fail(f"--workload: {exc}")
    if "seed" not in spec.params:
        workload = f"{workload},seed={seed}"
    faults = _faults(fault, embedded, hours)
    cfg = _load(config)
    hw = _hardware(model, instance_type, cfg.region)
    if report is not None:
        _check_report_path(report)
    opts = replace(SimOptions(), seed=seed, tick_s=tick_s)
    if not json_out:
        err_console.print(
            f"simulating {hours:g} h of {workload} under {policy} ({hw.model} on {hw.instance_type})"
        )
    try:
        result = run_sim(cfg, workload, hours, faults=faults, policy=policy, hardware=hw, options=opts)
    except FileNotFoundError as exc:
        fail(f"--workload: trace file missing: {exc.filename} (set FLEET_TRACES_DIR)")
    except WorkloadError as exc:  # a trace file unreadable or malformed, found only when the run loads it
        fail(f"--workload: {exc}")
    _warn_unfired(result, len(faults))
    if report is not None:
        _write_report(report, result)
    if json_out:
        print_json(result.summary)
    else:
        _print_summary(result)
        if report is not None:
            console.print(f"report: {report}")
    if result.summary["invariant_violations"]:
        raise typer.Exit(1)


def _faults(texts: list[str], embedded: bool, hours: float) -> list[Any]:
    """The --fault specs parsed (the embedded defaults on a long run given none), each before the end."""
    from fleet.sim.scenario import DEFAULT_FAULTS
    from fleet.sim.world import FaultSpecError, parse_fault_spec

    fault_texts = list(texts) or (list(DEFAULT_FAULTS) if embedded and hours >= 12 else [])
    try:
        faults = [parse_fault_spec(f) for f in fault_texts]
    except FaultSpecError as exc:
        fail(f"--fault: {exc}")
    for text, parsed in zip(fault_texts, faults, strict=True):
        if parsed.at_s >= hours * 3600:
            fail(f"--fault: fault {text!r} is at {parsed.at_s / 3600:g} h, after the run's end ({hours:g} h)")
    return faults


def _warn_unfired(result: Any, asked: int) -> None:
    fired = sum(1 for entry in result.fault_log if entry["event"] != "rebooted")
    if fired < asked:
        # a fault waits for its target; an instance id that never appears means it never fired
        err_console.print(
            f"[yellow]warning:[/] {asked - fired} of {asked} fault(s) never fired: "
            "no instance to hit (an instance=i-... that never existed?)",
            highlight=False,
            soft_wrap=True,
        )


def _write_report(report: Path, result: Any) -> None:
    from fleet.sim.report import render_html

    try:
        report.write_text(render_html(result), encoding="utf-8")
    except OSError as exc:
        fail(f"--report: cannot write {report}: {exc.strerror or exc}")


def _print_summary(result: Any) -> None:
    from rich.table import Table

    s = result.summary
    console.print(
        f"{result.workload} under {result.options.policy}: {result.options.hours:g} simulated hours in "
        f"{result.wall_s:.0f} s",
        highlight=False,
    )
    table = Table()
    table.add_column("field")
    table.add_column("value", justify="right")
    for key, value in s.items():
        if key in ("incidents", "invariant_violations"):
            value = len(value)
        table.add_row(key, str(value))
    console.print(table)
    for inc in s["incidents"]:
        console.print(
            f"incident {inc['instance_id']} {inc['cause']}: detected {inc['detected_at']}, responded "
            f"{inc['responded_at']}, isolated {inc['isolated_at']}, action {inc['action']}"
        )
    for v in s["invariant_violations"]:
        console.print(f"[red]invariant violation[/] {v['kind']} at {v['at']}: {v['detail']}")


@bench_app.command("autoscale")
def bench_autoscale(
    json_out: bool = typer.Option(False, "--json", help="Print {workload: {policy: summary}} as JSON."),
    config: Path | None = typer.Option(
        None, "--config", help="fleet.yaml (default: the embedded one).", dir_okay=False
    ),
    quick: bool = typer.Option(False, "--quick", help="One simulated hour per workload (a smoke run)."),
) -> None:
    """The autoscaling benchmark: each workload under ours and the three baselines, one table per workload."""
    from fleet.sim.scenario import BENCH_WORKLOADS
    from fleet.sim.scenario import bench_autoscale as run_bench

    cfg = _load(config)
    workloads = [(n, s, 1.0 if quick else h) for n, s, h in BENCH_WORKLOADS]

    def progress(label: str) -> None:
        if not json_out:
            err_console.print(f"running {label}")

    results = run_bench(cfg, workloads=workloads, progress=progress)
    if json_out:
        print_json(results)
    else:
        print_bench_tables(results)
    if any(r["invariant_violations"] for per in results.values() for r in per.values()):
        raise typer.Exit(1)


def print_bench_tables(results: dict[str, dict[str, dict[str, Any]]], out: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    # Wide enough for the eight columns even when stdout is not a terminal (rich then assumes 80).
    con = out or Console(width=max(console.width, 110))
    for name, per in results.items():
        table = Table(title=name)
        for col in ("policy", "SLO min", "GPU-h", "CNY", "actions", "P99 TTFT", "rejected", "max inst"):
            table.add_column(col, justify="right" if col != "policy" else "left", no_wrap=True)
        for pol, s in per.items():
            table.add_row(
                pol,
                str(s["slo_violation_minutes"]),
                f"{s['gpu_hours']:.1f}",
                f"{s['cost_cny']:.0f}",
                str(s["scale_actions"]),
                f"{s['ttft_p99_ms']:.0f}",
                str(s["rejected"]),
                str(s["max_instances"]),
            )
        con.print(table)
