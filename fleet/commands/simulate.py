"""`fleet simulate` and `fleet bench autoscale`: the simulated fleet on real traces, and the benchmark."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from fleet.commands._common import (
    console,
    err_console,
    fail,
    load_config_or_exit,
    print_json,
    wide_console,
    write_atomically,
)

if TYPE_CHECKING:  # imported where used: the CLI starts without the simulator's modules
    from sizing.traces import TraceRead

DAY_HOURS = 24.0  # fleet simulate's --hours by default, but for a shape (its own window)

bench_app = typer.Typer(
    name="bench",
    help="Benchmarks run in the simulator (autoscaling policies; more to come).",
    no_args_is_help=True,
    add_completion=False,
)


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
    app.add_typer(bench_app, name="bench")


def _check_report_path(report: Path, inputs: tuple[Path, ...] = ()) -> Path:
    """Before the run, so a long simulation never ends on a report it cannot write, nor writes it over one
    of its own ``inputs`` (the config, the trace); nothing is created here, so a refused run leaves nothing.
    Returns where the report will be written (:func:`_report_target`)."""
    target = _report_target(report)
    if _exists(target) and target.is_dir():
        fail(f"--report: {report} is a directory")
    for source in inputs:
        if _exists(target) and source.exists() and os.path.samefile(target, source):
            fail(f"--report: {report} is the run's own input {source}: the report would overwrite it")
    folder = next(p for p in (target.parent, *target.parent.parents) if _exists(p))
    # the folder the report (or its first missing folder) goes in: written to, and gone through
    writable = os.access(folder, os.W_OK | os.X_OK)
    if not writable or (_exists(target) and not os.access(target, os.W_OK)):
        fail(f"--report: cannot write {report}: permission denied")
    return target


def _report_target(report: Path) -> Path:
    """The file ``report`` names once its missing folders exist: its existing part as the system resolves it
    (links followed), the rest read as written, since folders still to be made hold no links (so ``sub/..``
    is the folder ``sub`` would be made in, and ``sub`` need not be made). A path through a file is refused.
    """
    existing = Path(report.anchor) if report.is_absolute() else Path(".")
    parts = report.parts[1:] if report.is_absolute() else report.parts
    for i, part in enumerate(parts):
        step = existing / part
        if not _exists(step):
            if not existing.is_dir():
                fail(f"--report: {existing} is a file, not a directory")
            return Path(os.path.normpath(Path(os.path.realpath(existing)).joinpath(*parts[i:])))
        existing = step
    return report


def _exists(path: Path) -> bool:
    """Whether ``path`` exists, False where the system will not say (a folder that cannot be gone through)."""
    try:
        return path.exists()
    except OSError:
        return False


def _load(config: Path | None) -> Any:
    from fleet.sim.scenario import DEFAULT_CONFIG

    path = config or DEFAULT_CONFIG
    # (a directory is refused here, in one line, rather than by the option's dir_okay: a usage box)
    if path.is_dir():
        fail(f"--config: {path} is a directory; give the fleet.yaml file")
    if not path.is_file():
        fail(f"{path}: no such config file" + ("" if config else " (the embedded default is missing)"))
    cfg = load_config_or_exit(path, env={})
    if not cfg.groups:
        fail(f"{path}: groups: the simulator needs at least one scaling group")
    return cfg


def _one_group(cfg: Any, config: Path | None, bench: str) -> None:
    """A benchmark runs the config's one group: with several it would pick one silently."""
    if len(cfg.groups) > 1:
        names = ", ".join(g.name for g in cfg.groups)
        fail(f"{config}: the {bench} benchmark runs one group; this config has {len(cfg.groups)} ({names})")


def _group_index(cfg: Any, config: Path | None, group: str | None) -> int:
    """The group to simulate: the only one, or the one ``--group`` names (one world holds one group)."""
    names = [g.name for g in cfg.groups]
    if group is not None:
        if group not in names:
            fail(f"--group: no group {group!r} in the config; its groups: {', '.join(names)}")
        return names.index(group)
    if len(names) > 1:
        fail(
            f"{config}: {len(names)} groups ({', '.join(names)}); the simulator runs one group at a time: "
            "pick it with --group NAME"
        )
    return 0


def _check_numbers(hours: float, tick_s: float, model_error: float, seed: int = 0) -> None:
    """Bounded before anything is built, so an absurd size is one line, not an hour of work or a crash."""
    import math

    from fleet.sim.modelerror import MAX_MODEL_ERROR_PCT
    from fleet.sim.types import MAX_HOURS

    if not (math.isfinite(hours) and 0 < hours <= MAX_HOURS):
        fail(f"--hours: must be above 0 and at most {MAX_HOURS:g} (14 days), got {hours:g}")
    if not (math.isfinite(tick_s) and 1 <= tick_s <= 3600):
        fail(f"--tick-s: must be between 1 and 3600 seconds, got {tick_s:g}")
    if not (math.isfinite(model_error) and 0 <= model_error <= MAX_MODEL_ERROR_PCT):
        fail(f"--model-error: must be between 0 and {MAX_MODEL_ERROR_PCT:g} (%), got {model_error:g}")
    if not 0 <= seed < 2**63:
        # (as the workload's seed= it was refused naming --workload and a SPEC nobody wrote)
        fail(f"--seed: must be a whole number from 0 to 2**63 - 1, got {seed}")


def _read_user_trace(spec: Any) -> TraceRead | None:
    """The user's trace file of a ``trace:PATH`` workload (None for the others), read here once: the bound,
    the warnings and the run are each handed this read, so a million-row log is parsed once per run and
    every step sees the same rows."""
    if spec.kind != "trace":
        return None
    from fleet.sim.workload import WorkloadError, read_trace_file

    try:
        return read_trace_file(spec.name, unit=spec.params.get("time_unit"))
    except WorkloadError as exc:
        fail(f"--workload: {exc}")


def _check_size(spec: Any, hours: float, user_trace: TraceRead | None) -> None:
    from fleet.sim.scenario import MAX_REQUESTS, requests_upper_bound

    try:
        bound = requests_upper_bound(spec, hours, user_trace)
    except FileNotFoundError as exc:
        fail(f"--workload: trace file missing: {exc.filename} (set FLEET_TRACES_DIR)")
    if bound > MAX_REQUESTS:
        fail(
            f"--workload/--hours: up to {bound:,.0f} requests, more than one run simulates "
            f"({MAX_REQUESTS:,}): lower the peak, rate or speed, or the hours"
        )


def _declared_hardware(
    spec: Any, model: str | None, instance_type: str | None
) -> tuple[str, str, int | None]:
    """The flags, else what the group's capacity model says it runs (``predictive.model``, ``instance_type``
    and ``max_model_len``: simulating a config simulates its deployment), else the simulator's defaults."""
    from fleet.sim.types import Hardware

    pred = spec.predictive
    default = Hardware()
    return (
        model or pred.model or default.model,
        instance_type or pred.instance_type or default.instance_type,
        pred.max_model_len,
    )


def _hardware(model: str, instance_type: str, max_model_len: int | None, region: str) -> Any:
    from fleet.sim.engine import HardwareError, make_engine_factory, resolve_hardware

    try:
        hardware = resolve_hardware(model, instance_type, region, max_model_len)
        make_engine_factory(hardware)  # the model must fit before anything is simulated
    except HardwareError as exc:
        what = f" at predictive.max_model_len {max_model_len}" if max_model_len else ""
        fail(f"--model/--instance-type{what}: {exc}")
    return hardware


def _warn_trace(spec: Any, user_trace: TraceRead | None) -> None:
    """A user's trace whose rows were skipped (no, zero or negative token counts, no time, a header again)
    says how many and why, once, on stderr; one whose numeric times' unit was a guess says what it took; one
    whose requests often repeat exactly (a log read twice) says how many."""
    if user_trace is None:
        return
    from rich.markup import escape

    guess = (
        f"{user_trace.unit_guess} (trace:FILE,time_unit={user_trace.unit_hint})"
        if user_trace.unit_guess
        else None
    )
    for note in (user_trace.skipped_note(), guess, user_trace.repeated_note()):
        if note:
            err_console.print(
                f"[yellow]warning:[/] {escape(spec.name)}: {escape(note)}", highlight=False, soft_wrap=True
            )


def _warn_trace_end(spec: Any, hours: float, user_trace: TraceRead | None) -> None:
    """A replay played once (``loop=false``) that ends before ``--hours`` leaves the rest of the run without
    requests, while the fleet's floor goes on costing: the GPU-hours and cost grow with hours of nothing. Say
    where the trace ends, once, on stderr."""
    import math

    from rich.markup import escape

    from fleet.sim.workload import CURVE_KINDS, load_trace

    if spec.kind in CURVE_KINDS or spec.params.get("loop", "true").lower() == "true":
        return
    # a bundled one: loaded once a process
    trace = load_trace(spec.kind, spec.name, user_trace=user_trace, unit=spec.params.get("time_unit"))
    if not trace:
        return
    end_s = (trace[-1].arrival_s - trace[0].arrival_s) / float(spec.params.get("speed", "1"))
    idle_s = hours * 3600.0 - end_s
    if idle_s < 60.0:  # under a tick of the service: nothing to say
        return
    err_console.print(
        f"[yellow]warning:[/] {escape(spec.kind)}:{escape(spec.name)} with loop=false ends at "
        f"{end_s / 3600:.2f} h ({end_s:,.0f} s) of the {hours:g} h run: the last {idle_s / 3600:.2f} h "
        "have no requests, and the fleet's GPU-hours and cost still count them (give --hours "
        f"{math.ceil(end_s / 36) / 100:g} or drop loop=false)",
        highlight=False,
        soft_wrap=True,
    )


def _warn_tp(spec: Any, hardware: Any) -> None:
    """The world runs one engine over all of an instance's GPUs: a group that declares a smaller
    ``predictive.tp`` (several engines per instance) is simulated as something else than it runs."""
    tp = spec.predictive.tp
    if tp is not None and tp != hardware.tp:
        err_console.print(
            f"[yellow]warning:[/] predictive.tp {tp}: the simulator runs one engine over all "
            f"{hardware.gpus_per_instance} GPUs of {hardware.instance_type} (tensor parallel {hardware.tp}), "
            f"not {hardware.gpus_per_instance // tp} engines of tensor parallel {tp}: its capacity per "
            "instance is not the deployment's",
            highlight=False,
            soft_wrap=True,
        )


def simulate(
    config: Path | None = typer.Option(
        None, "--config", help="fleet.yaml (default: the embedded examples/sim/fleet.yaml)."
    ),
    workload: str = typer.Option(
        None,
        "--workload",
        help="KIND:NAME[,key=value...], e.g. servegen:m-small,day=2,peak=30 or shape:flash,peak=20 "
        "(docs/simulator.md).",
    ),
    hours: float | None = typer.Option(
        None, "--hours", help="Simulated hours. Default: 24, a shape: workload's own window (2 h, sine 3 h)."
    ),
    fault: list[str] = typer.Option(
        [], "--fault", help="KIND[:ARG],at=TIME[,instance=N], e.g. overheat,at=10h (repeatable)."
    ),
    policy: str = typer.Option(
        "ours", "--policy", help="ours | static-peak | ess-alarm | target-tracking | kpa | oracle."
    ),
    group: str | None = typer.Option(
        None, "--group", help="The group to simulate when the config has several."
    ),
    model_error: float = typer.Option(
        0.0,
        "--model-error",
        help="PCT: the world's engines run up to PCT percent slower or faster than the sizing engine "
        "predicts (drawn per run and per instance from --seed).",
    ),
    history_days: int = typer.Option(
        0,
        "--history-days",
        help="N: our service starts with N days of demand history (the trace's preceding days; ServeGen).",
    ),
    report: Path | None = typer.Option(None, "--report", help="Write a self-contained HTML report here."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    model: str | None = typer.Option(
        None,
        "--model",
        help="Model every instance serves (sizing catalog). Default: the group's predictive.model, else "
        "Qwen2.5-14B.",
    ),
    instance_type: str | None = typer.Option(
        None,
        "--instance-type",
        help="ECS instance type. Default: the group's predictive.instance_type, else ecs.gn7i-2x.8xlarge.",
    ),
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
    _check_numbers(DAY_HOURS if hours is None else hours, tick_s, model_error, seed)
    from fleet.sim.history import MAX_HISTORY_DAYS

    if not 0 <= history_days <= MAX_HISTORY_DAYS:
        fail(f"--history-days: must be between 0 and {MAX_HISTORY_DAYS}, got {history_days}")
    embedded = config is None and workload is None
    workload = workload or DEFAULT_WORKLOAD
    try:
        spec = parse_workload_spec(workload)
    except WorkloadError as exc:
        fail(f"--workload: {exc}")
    hours = _run_hours(spec, hours)
    if "seed" not in spec.params:
        workload = f"{workload},seed={seed}"
    user_trace = _read_user_trace(spec)
    try:
        _check_size(spec, hours, user_trace)  # a bundled trace missing surfaces here
    except WorkloadError as exc:
        fail(f"--workload: {exc}")
    _warn_trace(spec, user_trace)
    _warn_trace_end(spec, hours, user_trace)
    faults = _faults(fault, embedded, hours)
    cfg = _load(config)
    index = _group_index(cfg, config, group)
    hw = _hardware(*_declared_hardware(cfg.groups[index], model, instance_type), cfg.region)
    _warn_tp(cfg.groups[index], hw)
    report_to: Path | None = None
    if report is not None:
        trace = (Path(spec.name),) if spec.kind == "trace" else ()
        report_to = _check_report_path(report, (*((config,) if config else ()), *trace))
    opts = replace(
        SimOptions(), seed=seed, tick_s=tick_s, model_error_pct=model_error, history_days=history_days
    )
    if not json_out:
        err_console.print(
            f"simulating {hours:g} h of {workload} under {policy} ({hw.model} on {hw.instance_type})"
        )
    try:
        result = run_sim(
            cfg,
            workload,
            hours,
            faults=faults,
            policy=policy,
            hardware=hw,
            options=opts,
            group_index=index,
            user_trace=user_trace,
        )
    except FileNotFoundError as exc:
        fail(f"--workload: trace file missing: {exc.filename} (set FLEET_TRACES_DIR)")
    except WorkloadError as exc:  # what only the trace can tell: unreadable, malformed, a day past its end
        fail(f"--workload: {exc}")
    if result.extra.get("history") and not json_out:
        err_console.print(str(result.extra["history"]))
    _warn_unfired(result, len(faults))
    _warn_missed(result, cfg.groups[index], hw.instance_type)
    _warn_default_slo(cfg.groups[index], result.summary)
    _warn_capped(result.summary)
    _warn_oracle(result.summary)
    if report is not None and report_to is not None:
        _write_report(report_to, result, cfg.groups[index], shown=report)
    if json_out:
        print_json(result.summary)
    else:
        _print_summary(result)
        if report is not None:
            console.print(f"report: {report}")
    if result.summary["invariant_violations"]:
        raise typer.Exit(1)


def _run_hours(spec: Any, hours: float | None) -> float:
    """``--hours``, else a day, or the window a ``shape:`` workload is made for (after it, its last rate
    would just go on)."""
    if hours is not None:
        return hours
    if spec.kind == "shape":
        from fleet.sim.shapes import SHAPES

        return SHAPES[spec.name].hours
    return DAY_HOURS


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


def _warn_default_slo(spec: Any, summary: dict[str, Any]) -> None:
    """A group that states no P99 TTFT SLO is judged by the simulator's default: say so, and at what."""
    if spec.slo_ttft_p99_ms is None:
        err_console.print(
            f"[yellow]warning:[/] the group states no P99 TTFT SLO (predictive.ttft_p99_ms, or a ttft_p99_ms "
            f"scale-out rule): its minutes are judged at {summary['slo_ttft_p99_ms']:g} ms",
            highlight=False,
            soft_wrap=True,
        )


def _warn_capped(summary: dict[str, Any]) -> None:
    if summary.get("exceeds_max_size"):
        err_console.print(
            f"[yellow]warning:[/] the workload's 1-minute peak needs {summary['peak_instances_needed']} "
            f"instances, more than the group's max_size {summary['max_size']}: every policy is capped there",
            highlight=False,
            soft_wrap=True,
        )


def _oracle_unconverged(summary: dict[str, Any]) -> str:
    return (
        f"the oracle still breaks the SLO for {summary['slo_violation_minutes']} judged minutes after "
        f"{summary['oracle_passes']} passes (the cap): its GPU-hours are a floor that does not meet the SLO"
    )


def _warn_oracle(summary: dict[str, Any]) -> None:
    if summary.get("oracle_converged") is False:
        err_console.print(
            f"[yellow]warning:[/] {_oracle_unconverged(summary)}", highlight=False, soft_wrap=True
        )


def _warn_missed(result: Any, spec: Any, instance_type: str) -> None:
    """Capacity faults that fired on nothing the group has: a spot reclaim with no spot instance to take, a
    stock-out of a type the group never orders."""
    ordered = {instance_type, *(spec.instance_types or ())}
    for entry in result.fault_log:
        at = f"{entry['at_s'] / 60:g} min"
        if entry["event"] == "spot-reclaim" and not entry.get("reclaimed"):
            what = f"spot-reclaim at {at} reclaimed nothing: the group had no spot instance (capacity_mix)"
        elif entry["event"] == "stockout" and entry.get("instance_type") not in ordered:
            what = (
                f"the stock-out of {entry.get('instance_type')} at {at} touched nothing: the group orders "
                + ", ".join(sorted(ordered))
            )
        else:
            continue
        err_console.print(f"[yellow]warning:[/] {what}", highlight=False, soft_wrap=True)


def _warn_unfired(result: Any, asked: int) -> None:
    from fleet.sim.world import injected

    fired = len(injected(result.fault_log))
    if fired < asked:
        # a fault waits for its target: an instance id that never appears, or an index while nothing serves
        why = "; ".join(result.summary.get("unfired_faults", [])) or "no instance to hit"
        err_console.print(
            f"[yellow]warning:[/] {asked - fired} of {asked} fault(s) never fired: {why}",
            highlight=False,
            soft_wrap=True,
        )


def _write_report(report: Path, result: Any, spec: Any, shown: Path | None = None) -> None:
    """Write the report to ``report`` (its missing folders made now, after the run), errors naming ``shown``
    (the path as the user gave it)."""
    from fleet.sim.report import render_html, report_timezone, temperature_limits_c

    shown = shown or report
    try:
        report.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(report, render_html(result, report_timezone(spec), temperature_limits_c(spec)))
    except OSError as exc:
        fail(f"--report: cannot write {shown}: {exc.strerror or exc}")


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
        None,
        "--config",
        help="fleet.yaml (default: the embedded one); its group's predictive.model and instance_type are the "
        "hardware every run serves on.",
    ),
    quick: bool = typer.Option(
        False,
        "--quick",
        help="A smoke run: one simulated hour per workload (with --sweep: the first two days of each trace).",
    ),
    only: list[str] = typer.Option(
        [], "--workload", help="Run only the benchmark workload(s) of this name (repeatable)."
    ),
    only_policies: list[str] = typer.Option(
        [],
        "--policy",
        help="Run only this policy (repeatable; ours also runs at 20 % model error). Default: all six.",
    ),
    sweep: str | None = typer.Option(
        None,
        "--sweep",
        help="servegen: ours, static-peak and oracle over every day of the three ServeGen language traces; "
        "shapes: ours, static-peak and kpa on each synthetic traffic shape (shape:NAME workloads).",
    ),
    jobs: int = typer.Option(
        1, "--jobs", help="Simulations to run at once, one process each (up to the machine's cores)."
    ),
    days: str | None = typer.Option(
        None,
        "--days",
        help="With --sweep: only these days of each trace, e.g. 2-5,9 (0 is a trace's first day).",
    ),
) -> None:
    """The autoscaling benchmark: each workload under ours, the four baselines and the oracle."""
    from fleet.sim.scenario import BENCH_WORKLOADS

    if not 1 <= jobs <= (os.cpu_count() or 1):
        fail(f"--jobs: must be between 1 and this machine's {os.cpu_count() or 1} cores, got {jobs}")
    cfg = _load(config)
    _one_group(cfg, config, "autoscaling")
    hw = _hardware(*_declared_hardware(cfg.groups[0], None, None), cfg.region)  # as fleet simulate runs it
    _warn_tp(cfg.groups[0], hw)
    if sweep is not None:
        _run_sweep(cfg, _sweep_plan(sweep, bool(only or only_policies), days, quick), json_out, jobs, hw)
        return
    if days is not None:
        fail("--days: only with --sweep (the benchmark's workloads are named days)")
    names = [n for n, _, _ in BENCH_WORKLOADS]
    unknown = [w for w in only if w not in names]
    if unknown:
        fail(f"--workload: unknown benchmark workload {unknown[0]!r}; one of {', '.join(names)}")
    workloads = [(n, s, 1.0 if quick else h) for n, s, h in BENCH_WORKLOADS if not only or n in only]
    from fleet.sim.scenario import BENCH_MODEL_ERROR_PCT, BENCH_POLICIES, bench_runs
    from fleet.sim.scenario import bench_autoscale as run_bench

    bad = [p for p in only_policies if p not in BENCH_POLICIES]
    if bad:
        fail(f"--policy: unknown policy {bad[0]!r}; one of {', '.join(BENCH_POLICIES)}")
    policies = tuple(p for p in BENCH_POLICIES if not only_policies or p in only_policies)
    runs = len(bench_runs(workloads, policies, BENCH_MODEL_ERROR_PCT))
    with _progress_bar(runs) as progress:
        results = run_bench(
            cfg, workloads=workloads, policies=policies, hardware=hw, progress=progress, jobs=jobs
        )
    if json_out:
        print_json(results)
    else:
        print_bench_tables(results)
    if any(r["invariant_violations"] for per in results.values() for r in per.values()):
        raise typer.Exit(1)


def _sweep_plan(
    name: str, chosen: bool, days: str | None, quick: bool
) -> tuple[Any, list[int] | None, float | None]:
    """The sweep ``--sweep`` names, the ServeGen days it runs (None: every day) and the hours of each run
    (None: the sweep's own); ``chosen``: --workload or --policy was given, which a sweep does not take."""
    from fleet.sim.sweep import SHAPE_QUICK_HOURS, Sweep, parse_days

    if name not in {s.value for s in Sweep}:
        fail(f"--sweep: unknown sweep {name!r}; one of {', '.join(s.value for s in Sweep)}")
    sweep = Sweep(name)
    if chosen:
        what = "the oracle on every day" if sweep is Sweep.SERVEGEN else "kpa on every shape"
        fail(f"--workload/--policy: not with --sweep (the sweep runs ours, static-peak and {what})")
    if sweep is Sweep.SHAPES:
        if days is not None:
            fail("--days: only with --sweep servegen (the shapes sweep runs each shape once)")
        return sweep, None, SHAPE_QUICK_HOURS if quick else None
    if days is not None and quick:
        fail("--days: not with --quick (which runs days 0-1 of each trace)")
    if days is None:
        return sweep, [0, 1] if quick else None, None
    try:
        return sweep, parse_days(days), None
    except ValueError as exc:
        fail(f"--days: {exc}")


def _run_sweep(
    cfg: Any, plan: tuple[Any, list[int] | None, float | None], json_out: bool, jobs: int, hardware: Any
) -> None:
    """The sweep of ``plan`` (:func:`_sweep_plan`): a progress bar on stderr, the JSON or the tables on
    stdout."""
    from fleet.sim.sweep import Sweep, run_sweep, sweep_runs

    sweep, days, hours = plan
    workloads, policies = sweep_runs(sweep, days, hours)
    with _progress_bar(len(workloads) * len(policies)) as progress:
        out = run_sweep(
            cfg, sweep=sweep, days=days, hours=hours, progress=progress, jobs=jobs, hardware=hardware
        )
    if json_out:
        print_json(out)
    elif sweep is Sweep.SHAPES:
        print_bench_tables(out["workloads"])
        print_sweep_table(
            out["distribution"], title="Shapes sweep: per policy over the shapes", count="shapes"
        )
    else:
        print_sweep_table(out["distribution"])
    if any(r["invariant_violations"] for per in out["workloads"].values() for r in per.values()):
        raise typer.Exit(1)


class _progress_bar:  # noqa: N801 - used as a context manager, like rich's own
    """A rich progress bar on stderr over ``total`` runs; calling it names the run that starts."""

    def __init__(self, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=False,
        )
        self.task = self.bar.add_task("starting", total=total)
        self.started = 0

    def __enter__(self) -> _progress_bar:
        self.bar.start()
        return self

    def __call__(self, label: str) -> None:
        if self.started:
            self.bar.advance(self.task)
        self.started += 1
        self.bar.update(self.task, description=label)

    def __exit__(self, *exc: object) -> None:
        if self.started and exc[0] is None:
            self.bar.advance(self.task)
            self.bar.update(self.task, description="done")
        self.bar.stop()


def print_sweep_table(
    dist: dict[str, dict[str, Any]],
    out: Any = None,
    *,
    title: str = "ServeGen sweep: per policy over the days",
    count: str = "days",
) -> None:
    from rich.table import Table

    con = out or wide_console(110)
    table = Table(title=title)
    cols = ("policy", count, "GPU-h / oracle median", "p90", "max", "SLO min median", "max", f"{count} > 0")
    for col in cols:
        table.add_column(col, justify="right" if col != "policy" else "left", no_wrap=True)
    for pol, d in dist.items():
        ratio = d.get("gpu_hours_vs_oracle", {})
        slo = d.get("slo_violation_minutes", {})
        table.add_row(
            pol,
            str(d["days"]),
            *(f"{ratio[k]:.2f}" if k in ratio else "-" for k in ("median", "p90", "max")),
            *(f"{slo[k]:g}" if k in slo else "-" for k in ("median", "max")),
            str(d["days_with_violations"]),
        )
    con.print(table)
    for pol, d in dist.items():
        if d.get("unconverged_days"):
            con.print(
                f"  {pol} still breaks the SLO after the cap of passes on "
                f"{', '.join(d['unconverged_days'])}: the ratios to it are too low there",
                highlight=False,
            )


@bench_app.command("capacity")
def bench_capacity(
    json_out: bool = typer.Option(False, "--json", help="Print {scenario: {variant: summary}} as JSON."),
    config: Path | None = typer.Option(None, "--config", help="fleet.yaml (default: the embedded one)."),
    hours: float = typer.Option(12.0, "--hours", help="Simulated hours per run (from local midnight)."),
    scenario: list[str] = typer.Option(
        [], "--scenario", help="stockout, stockout-surge, spot or economical (repeatable)."
    ),
) -> None:
    """Stock-outs, spot reclaims, economical mode: ours, ours without the feature, ESS-native (issue 17)."""
    from fleet.sim.capacity_bench import bench_capacity as run_bench
    from fleet.sim.capacity_bench import scenarios, verdicts

    known = set(scenarios(hours))
    bad = [s for s in scenario if s not in known]
    if bad:
        fail(f"--scenario: {', '.join(bad)} unknown; one of {', '.join(sorted(known))}")
    if not 6.0 < hours <= 48.0:
        fail(f"--hours: {hours} must be above 6 (the stock-out starts at 06:00) and at most 48")
    cfg = _load(config)
    _one_group(cfg, config, "capacity")

    def progress(label: str) -> None:
        if not json_out:
            err_console.print(f"running {label}")

    results = run_bench(cfg, hours=hours, only=scenario, progress=progress)
    if json_out:
        print_json({"results": results, "verdicts": verdicts(results)})
        return
    print_bench_tables(results)
    for line in verdicts(results):
        console.print(line, highlight=False)


def print_bench_tables(results: dict[str, dict[str, dict[str, Any]]], out: Any = None) -> None:
    from rich.table import Table

    con = out or wide_console(110)  # the nine columns, whole

    for name, per in results.items():
        table = Table(title=name)
        cols = (
            *("policy", "SLO min", "GPU-h", "vs oracle", "CNY"),
            *("actions", "P99 TTFT", "rejected", "max inst"),
        )
        for col in cols:
            table.add_column(col, justify="right" if col != "policy" else "left", no_wrap=True)
        for pol, s in per.items():
            warm = s.get("warmup_violation_minutes")
            table.add_row(
                pol,
                f"{s['slo_violation_minutes']}" + (f" (+{warm})" if warm else ""),
                f"{s['gpu_hours']:.1f}",
                f"{s['gpu_hours_vs_oracle']:.2f}" if "gpu_hours_vs_oracle" in s else "-",
                f"{s['cost_cny']:.0f}",
                str(s["scale_actions"]),
                "-" if s["ttft_p99_ms"] is None else f"{s['ttft_p99_ms']:.0f}",
                str(s["rejected"]),
                str(s["max_instances"]),
            )
        con.print(table)
        if any(s.get("warmup_violation_minutes") for s in per.values()):
            warmup = next(s["warmup_minutes"] for s in per.values() if "warmup_minutes" in s)
            con.print(
                f"  {name}: (+N) are minutes over the SLO in the first {warmup}, before any policy's first "
                "order serves: not judged",
                highlight=False,
            )
        oracle = per.get("oracle")
        if oracle is not None and oracle.get("oracle_converged") is False:
            con.print(f"  {name}: {_oracle_unconverged(oracle)}", highlight=False)
        capped = next((s for s in per.values() if s.get("exceeds_max_size")), None)
        if capped is not None:
            con.print(
                f"  {name}: the 1-minute peak needs {capped['peak_instances_needed']} instances, more than "
                f"max_size {capped['max_size']}: every policy is capped there",
                highlight=False,
            )
