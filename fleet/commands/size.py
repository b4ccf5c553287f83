"""`fleet size`: which instance type, TP, count and vLLM settings carry a model's load, at what cost.

The shell part only: it reads the files (config.json, prices.yaml, traces), passes their contents to the pure
``sizing`` package, renders tables or JSON, writes the optional plot, and picks the exit code
(0: an option fits and meets the SLOs; 1: none does; 2: bad input).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
import yaml
from rich import box
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from fleet.commands._common import console, err_console, fail, print_json, wide_console, write_atomically

if TYPE_CHECKING:  # sizing loads on first use of the command
    from sizing.traces import TraceRequest

EXIT_NO_FIT = 1


def register(app: typer.Typer) -> None:
    from fleet.commands import size_calibrate

    size_app = typer.Typer(
        invoke_without_command=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        help=size.__doc__,
    )
    size_app.callback()(size)
    size_calibrate.register(size_app)
    app.add_typer(size_app, name="size")


def size(
    ctx: typer.Context,
    model: str | None = typer.Option(
        None, "--model", help="A catalog model (e.g. Qwen2.5-7B, Llama-3.1-8B)."
    ),
    config: Path | None = typer.Option(
        None, "--config", help="A Hugging Face config.json for any other model."
    ),
    dtype: str = typer.Option(
        "auto", "--dtype", help="auto, bf16, fp16, fp8, int8, awq or gptq (4-bit), mxfp4 (gpt-oss)."
    ),
    kv_cache_dtype: str = typer.Option("auto", "--kv-cache-dtype", help="auto or fp8."),
    gpu: str | None = typer.Option(None, "--gpu", help="Evaluate this GPU (no instance type, no price)."),
    instance_type: str | None = typer.Option(
        None, "--instance-type", help="Evaluate this Alibaba instance type."
    ),
    tp: int | None = typer.Option(
        None, "--tp", help="Tensor parallel size (default: every size the instance's GPUs allow; 1 on --gpu)."
    ),
    max_model_len: int | None = typer.Option(None, "--max-model-len", help="Default: the model's limit."),
    gpu_memory_utilization: float = typer.Option(
        0.90, "--gpu-memory-utilization", help="Share of the device."
    ),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="Fix vLLM's max_num_seqs."),
    vllm_version: str | None = typer.Option(
        None,
        "--vllm-version",
        help="The vLLM release to size for, e.g. 0.19.0 (CUDA graphs count inside util from 0.21); "
        "default: the current release.",
    ),
    max_num_batched_tokens: int | None = typer.Option(
        None, "--max-num-batched-tokens", help="Fix the budget."
    ),
    gpu_memory_gib: float | None = typer.Option(
        None,
        "--gpu-memory-gib",
        help="Memory CUDA sees per GPU of the --gpu or --instance-type, GiB (for cards reporting less "
        "than the catalog's).",
    ),
    qps: float | None = typer.Option(None, "--qps", help="Target load, requests per second (fleet-wide)."),
    prompt_tokens: int | None = typer.Option(
        None, "--prompt-tokens", help="Mean prompt length (default 1000)."
    ),
    output_tokens: int | None = typer.Option(
        None, "--output-tokens", help="Mean output length (default 200)."
    ),
    trace: Path | None = typer.Option(
        None,
        "--trace",
        help="A request trace: Azure/BurstGPT CSV, Mooncake JSONL, or a gateway log (OpenAI usage, LiteLLM, "
        "SLS), plain or .gz (docs/simulator.md).",
    ),
    trace_time_unit: str | None = typer.Option(
        None,
        "--trace-time-unit",
        help="The unit of the trace's numeric times (s, ms, us, ns) where their size leaves it a guess.",
    ),
    slo_ttft_p99_ms: float | None = typer.Option(
        None, "--slo-ttft-p99-ms", help="P99 time to first token, ms."
    ),
    slo_tpot_p99_ms: float | None = typer.Option(
        None, "--slo-tpot-p99-ms", help="P99 time per output token, ms."
    ),
    region: str | None = typer.Option(None, "--region", help="Price region (default cn-hangzhou)."),
    top: int | None = typer.Option(None, "--top", help="Show only the best K options."),
    plot: Path | None = typer.Option(
        None, "--plot", help="Write a latency-throughput plot (SVG) of the best."
    ),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    prices: Path | None = typer.Option(
        None, "--prices", help="prices.yaml overriding the shipped estimates."
    ),
    prefix_hit: float = typer.Option(
        0.0,
        "--prefix-hit",
        help="Share of each prompt found in vLLM's prefix cache (a running fleet's "
        "vllm_prefix_cache_hit_ratio from the node agent); 0 = none.",
    ),
    length_cv: float = typer.Option(
        0.0, "--length-cv", help="Token-length spread (lognormal CV; 0 = fixed)."
    ),
    seed: int = typer.Option(0, "--seed", help="Random seed of the simulated arrivals."),
    calibration: Path | None = typer.Option(
        None, "--calibration", help="A calibration file from `fleet size calibrate` (your own vLLM log)."
    ),
    explain: bool = typer.Option(
        False, "--explain", help="Print the memory and speed breakdown of the best option, term by term."
    ),
) -> None:
    """Size a vLLM deployment: memory, speed, latency under load, cost, and the vLLM command line.

    With --gpu or --instance-type it evaluates that deployment; without, it searches every instance type x TP
    x max_num_seqs and ranks them, cheapest meeting the SLOs first, each other option with the reason it lost.
    `fleet size calibrate LOG` turns your own vLLM startup log into a --calibration file.
    """
    if ctx.invoked_subcommand is not None:
        return
    import sizing
    from sizing.latency import Workload
    from sizing.search import SLO, Settings, search

    _check_exclusive(model, config, gpu, instance_type, trace, prompt_tokens, output_tokens)
    if trace_time_unit is not None and trace is None:
        fail("--trace-time-unit: it is the unit of --trace's times: give it with --trace")
    _check_ranges(
        top,
        counts={
            "--tp": tp,
            "--max-model-len": max_model_len,
            "--max-num-seqs": max_num_seqs,
            "--max-num-batched-tokens": max_num_batched_tokens,
            "--prompt-tokens": prompt_tokens,
            "--output-tokens": output_tokens,
        },
        positives={
            "--qps": qps,
            "--slo-ttft-p99-ms": slo_ttft_p99_ms,
            "--slo-tpot-p99-ms": slo_tpot_p99_ms,
            "--gpu-memory-gib": gpu_memory_gib,
        },
        length_cv=length_cv,
        prefix_hit=prefix_hit,
    )
    if plot is not None:
        if plot.suffix.lower() != ".svg":
            fail(f"--plot: {plot} must end in .svg (the plot is SVG)")
        _check_writable(plot, "--plot")

    try:
        # ignored: exactly one of MODEL and --config is set, checked above
        shape = sizing.find_model(model) if model is not None else _read_model_config(config)  # type: ignore[arg-type]
        cal = read_calibration(calibration) if calibration is not None else None
        book = sizing.price_book(_read_yaml(prices), str(prices)) if prices else sizing.price_book()
        if region is not None:
            book.price(next(iter(sizing.load_instances().values())), region)  # validates the region name
        requests, shared = _read_trace(trace, trace_time_unit) if trace is not None else ((), None)
        workload = Workload(
            qps=qps,
            prompt_tokens=prompt_tokens or 1000,
            output_tokens=output_tokens or 200,
            length_cv=length_cv,
            trace=requests,
            prefix_hit=prefix_hit,
            trace_prefix_share=shared,
        )
        slo = SLO(slo_ttft_p99_ms, slo_tpot_p99_ms)
        _check_lengths(shape, workload, max_model_len, (prompt_tokens, output_tokens), qps is not None)
        sized_len = None
        if max_model_len is None and (prompt_tokens or output_tokens or requests):
            from sizing.latency import workload_max_model_len

            sized_len = max_model_len = workload_max_model_len(workload, shape.max_position)
        settings = Settings(
            dtype=dtype,
            kv_cache_dtype=kv_cache_dtype,
            tp=(tp or 1) if gpu is not None else tp,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            gpu_memory_gib=gpu_memory_gib,
            calibration=cal,
            search_quantized=dtype == "auto" and gpu is None,
            vllm_version=vllm_version,
        )
        the_gpu = sizing.find_gpu(gpu) if gpu is not None else None
        pool = [sizing.find_instance(instance_type)] if instance_type is not None else None
        _check_settings(shape, settings, the_gpu, pool)
        has_load = qps is not None or trace is not None
        with _progress(enabled=has_load and gpu is None and not as_json) as report:
            result = search(
                shape,
                settings=settings,
                workload=workload,
                slo=slo,
                prices=book,
                region=region,
                instances=pool,
                gpu=the_gpu,
                top=top or 3,
                seed=seed,
                progress=report,
            )
    except sizing.SizingInputError as exc:
        fail(str(exc))

    best = result.best
    if plot is not None:
        if best is None or best.deployment is None:
            fail("--plot: no option fits, so there is nothing to plot")
        _write_plot(plot, best, workload, slo, seed)
    # the best option; when none fits, the first one that has a memory plan (so the breakdown shows why)
    target = best or next((c for c in result.candidates if c.plan is not None and c.perf is not None), None)
    explained = _explanation(target, workload) if explain and target is not None else None
    from fleet.commands.size_fallback import fallback_json, render_fallback  # issue 17: spot and the ladder

    if as_json:
        doc = {**_with_trace_warnings(result.to_json(top), requests), **fallback_json(result)}
        if explain:
            doc["explain"] = explained.to_json() if explained is not None else None
        print_json(doc)
    else:
        _render(result, shape, top, has_load, requests, plot)
        render_fallback(result)
        for line in _notes(cal, calibration, best, sized_len, workload):
            console.print(f"  {line}", highlight=False, soft_wrap=True)
        if explained is not None:
            render_explanation(explained)
    if best is None:
        raise typer.Exit(EXIT_NO_FIT)


def _notes(cal: Any, calibration: Path | None, best: Any, sized_len: int | None, workload: Any) -> list[str]:
    """Lines under the table: the calibration used, a max_model_len sized from the workload, and what share
    of a trace's prompts its prefix cache could serve."""
    out = []
    if cal is not None:
        out.append(f"calibration: {calibration} ({_calibration_note(cal, best)})")
    if sized_len is not None:
        out.append(
            f"max_model_len {sized_len:,} sized from the workload's token lengths (--max-model-len sets it)"
        )
    shared = workload.trace_prefix_share
    if shared is not None and workload.prefix_hit == 0.0:
        out.append(
            f"prefix cache: {shared:.0%} of this trace's prompt tokens repeat an earlier request's prefix; "
            f"sized for no hit (--prefix-hit {shared:.2f} is the most a cache holding them all and a router "
            "keeping prefixes together could give)"
        )
    return out


# ------------------------------------------------------------------------------------------------ inputs
def read_calibration(path: Path) -> Any:
    """A calibration file (YAML or JSON) as the sizing core's Calibration, or one line and exit 2."""
    import sizing
    from sizing.calibration import calibration_from_dict

    data = _read_yaml(path)
    try:
        return calibration_from_dict(data)
    except sizing.SizingInputError as exc:
        fail(f"{path}: {exc}")


def _check_exclusive(
    model: str | None,
    config: Path | None,
    gpu: str | None,
    instance_type: str | None,
    trace: Path | None,
    prompt_tokens: int | None,
    output_tokens: int | None,
) -> None:
    """Flags that exclude or require each other."""
    if (model is None) == (config is None):
        fail("give exactly one of --model NAME or --config FILE")
    if gpu is not None and instance_type is not None:
        fail("give at most one of --gpu and --instance-type")
    if trace is not None and (prompt_tokens is not None or output_tokens is not None):
        fail("--trace gives the token lengths; drop --prompt-tokens/--output-tokens")


def _check_ranges(
    top: int | None,
    *,
    counts: dict[str, int | None],
    positives: dict[str, float | None],
    length_cv: float,
    prefix_hit: float = 0.0,
) -> None:
    """Counts at least 1, positive finite numbers, a finite spread >= 0, a prefix hit share in [0, 1)."""
    if top is not None and top < 1:
        fail(f"--top must be at least 1, got {top}")
    for name, value in counts.items():
        if value is not None and value < 1:
            fail(f"{name} must be at least 1, got {value}")
    for name, number in positives.items():
        if number is not None and not (number > 0 and math.isfinite(number)):
            fail(f"{name} must be a positive number, got {number:g}")
    qps = positives.get("--qps")
    if qps is not None and qps > MAX_QPS:
        fail(f"--qps must be at most {MAX_QPS:g} requests per second, got {qps:g}")
    if not (length_cv >= 0 and math.isfinite(length_cv)):
        fail(f"--length-cv must be a number >= 0, got {length_cv:g}")
    if length_cv > MAX_LENGTH_CV:
        fail(f"--length-cv must be at most {MAX_LENGTH_CV:g}, got {length_cv:g}")
    if not (0.0 <= prefix_hit < 1.0):
        fail(f"--prefix-hit must be a share in [0, 1), got {prefix_hit:g}")


def _read_model_config(path: Path) -> Any:
    import sizing

    try:
        text = path.read_text(encoding="utf-8-sig")  # json refuses a byte-order mark (Notepad writes one)
    except OSError as exc:
        fail(f"{path}: {exc.strerror or exc}")
    except UnicodeDecodeError as exc:
        fail(f"{path}: not UTF-8 text (byte {exc.start})")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})")
    except RecursionError:  # the parser recurses per level: 100,000 nested '[' exhaust the stack
        fail(f"{path}: nested too deeply to be a config.json")
    name = (path.parent.name if path.name == "config.json" and path.parent.name else path.stem) or str(path)
    try:
        return sizing.model_from_hf_config(data, name=name)
    except sizing.SizingInputError as exc:
        # the library names the model; the user needs the file they passed
        message = str(exc).removeprefix(f"{name}: ")
        fail(f"{path}: {message}")


def _read_yaml(path: Path) -> Any:
    """A YAML (or JSON) file's data, or one line naming the file and the problem, exit 2."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        fail(f"{path}: {exc.strerror or exc}")
    except UnicodeDecodeError as exc:
        fail(f"{path}: not UTF-8 text (byte {exc.start})")
    except yaml.YAMLError as exc:
        fail(f"{path}: not valid YAML ({str(exc).splitlines()[0]})")
    except RecursionError:  # PyYAML composes nested collections recursively
        fail(f"{path}: nested too deeply to read as YAML")


def _read_trace(path: Path, unit: str | None) -> tuple[tuple[TraceRequest, ...], float | None]:
    """Requests of a trace file (sizing.traces.read_trace, row by row, plain or ``.gz``): Azure LLM,
    BurstGPT, Mooncake or a gateway's log; and the share of its prompt tokens in a prefix seen before, where
    its rows say (Mooncake's hash_ids). The byte-order mark Excel and Notepad put before a CSV's first column
    name is dropped."""
    from fleet.sim.workload import TIME_UNITS, WorkloadError, read_trace_file

    if unit is not None and unit not in TIME_UNITS:
        fail(f"--trace-time-unit: {unit!r} is not one of {', '.join(TIME_UNITS)}")
    try:
        got = read_trace_file(path, unit=unit)
    except WorkloadError as exc:
        fail(str(exc))
    guess = f"{got.unit_guess} (--trace-time-unit {got.unit_hint})" if got.unit_guess else None
    for note in (got.skipped_note(), guess, got.repeated_note()):
        if note:
            err_console.print(
                f"[yellow]warning:[/] {escape(str(path))}: {escape(note)}", highlight=False, soft_wrap=True
            )
    return got.requests, got.prefix_share


def _check_settings(shape: Any, settings: Any, the_gpu: Any, pool: Any) -> None:
    """Bad combinations that vLLM itself refuses at start-up: fail with one line before any work."""
    import sizing
    from sizing.memory import DTYPES, KV_CACHE_DTYPES

    if settings.dtype not in DTYPES:
        raise sizing.SizingInputError(f"--dtype {settings.dtype!r} is not one of {', '.join(DTYPES)}")
    if settings.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise sizing.SizingInputError(f"--kv-cache-dtype {settings.kv_cache_dtype!r} is not auto or fp8")
    if not 0 < settings.gpu_memory_utilization <= 1:
        raise sizing.SizingInputError(
            f"--gpu-memory-utilization must be in (0, 1], got {settings.gpu_memory_utilization}"
        )
    if settings.vllm_version is not None:
        from sizing.memory import version_tuple

        try:
            version_tuple(settings.vllm_version)
        except sizing.SizingInputError:
            raise sizing.SizingInputError(
                f"--vllm-version {settings.vllm_version!r} is not a release like 0.19.0"
            ) from None
    if settings.max_model_len is not None and settings.max_model_len > shape.max_position:
        raise sizing.SizingInputError(
            f"--max-model-len {settings.max_model_len} is above {shape.name}'s limit of {shape.max_position}"
        )
    if settings.tp is not None:
        from sizing.memory import check_tp

        check_tp(shape, settings.tp)
        if pool and settings.tp > pool[0].gpus:
            raise sizing.SizingInputError(
                f"impossible TP: {pool[0].name} has {pool[0].gpus} GPU(s), --tp is {settings.tp}"
            )
    _check_visible_gib(settings.gpu_memory_gib, the_gpu or (sizing.find_gpu(pool[0].gpu) if pool else None))
    _check_calibrated_engine(settings.calibration, settings.vllm_version)
    if the_gpu is not None or pool:
        from sizing.memory import resolve_dtype

        g = the_gpu or sizing.find_gpu(pool[0].gpu)
        resolve_dtype(shape, g, settings.dtype)


def _check_calibrated_engine(cal: Any, vllm_version: str | None) -> None:
    """A calibration keeps its log's engine: a V0 one cannot size a release that has only V1."""
    import sizing
    from sizing.calibration import check_engine

    if cal is None or vllm_version is None:
        return
    try:
        check_engine(cal.engine, vllm_version)
    except sizing.SizingInputError:
        raise sizing.SizingInputError(
            f"--vllm-version {vllm_version}: the --calibration file is of vLLM's V0 engine, which vLLM "
            "removed in 0.11.0; calibrate on a log of that release"
        ) from None


MAX_QPS = 1e6  # far beyond any fleet: larger values are typos or overflow probes (issue 14)
# A token-length spread (lognormal CV) of 10: the Azure 2023 traces (../shared/traces) spread by 0.8-2.2; far
# above it nearly every token sits in a handful of requests, and from ~1e154 the lognormal overflows.
MAX_LENGTH_CV = 10.0


def _check_visible_gib(visible_gib: float | None, gpu: Any) -> None:
    """--gpu-memory-gib is what CUDA sees of the card evaluated: never more than the catalog's visible memory
    of it (its GB label is more than CUDA ever reports: an A10's 24 GB show as 22.07 GiB; 1e308 overflowed the
    KV-cache token count), and only with --gpu or --instance-type (a search gave every GPU kind that memory,
    60 GiB to a T4)."""
    import sizing

    if visible_gib is None:
        return
    if gpu is None:
        raise sizing.SizingInputError(
            "--gpu-memory-gib is the memory of one card: give it with --gpu or --instance-type "
            "(a search would give every GPU kind that much)"
        )
    if visible_gib > gpu.visible_gib:
        raise sizing.SizingInputError(
            f"--gpu-memory-gib {visible_gib:g} is more than the {gpu.name} shows CUDA "
            f"({gpu.visible_gib:g} GiB; the flag is for cards reporting less)"
        )


def _check_lengths(
    shape: Any, workload: Any, max_model_len: int | None, given: tuple[int | None, int | None], load: bool
) -> None:
    """A request longer than the context is refused by vLLM: size nothing for it (it reported TTFT 0 ms).

    Only requests there are: the lengths given, or the default mix a --qps load runs. Without either nothing
    is sent, and a short --max-model-len for a memory-only look was refused over lengths nobody gave."""
    import sizing

    prompt_given, output_given = given
    if workload.trace or not (load or prompt_given or output_given):
        return  # a trace's over-long requests are counted and warned about after the search
    limit = max_model_len or shape.max_position
    total = workload.prompt_tokens + workload.output_tokens
    if total > limit:
        what = f"--max-model-len {max_model_len}" if max_model_len else f"{shape.name}'s context of {limit}"
        default = " (the default)"
        raise sizing.SizingInputError(
            f"--prompt-tokens {workload.prompt_tokens}{'' if prompt_given else default} + --output-tokens "
            f"{workload.output_tokens}{'' if output_given else default} = {total} tokens exceed {what} "
            "tokens: vLLM would refuse every request"
        )


def _check_writable(path: Path, flag: str) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        fail(f"{flag}: directory {directory} does not exist")


# ------------------------------------------------------------------------------------------------ output
class _progress:
    """A transient progress bar on stderr for long searches; a no-op callback otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and err_console.is_terminal
        self._bar: Progress | None = None
        self._task: Any = None

    def __enter__(self) -> Any:
        if not self.enabled:
            return None
        self._bar = Progress(
            TextColumn("simulating options"),
            BarColumn(),
            MofNCompleteColumn(),
            console=err_console,
            transient=True,
        )
        self._bar.__enter__()
        self._task = self._bar.add_task("search", total=None)
        return self._update

    def _update(self, done: int, total: int) -> None:
        assert self._bar is not None
        self._bar.update(self._task, completed=done, total=total)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


def _write_plot(path: Path, best: Any, workload: Any, slo: Any, seed: int) -> None:
    from sizing.latency import knee_sweep
    from sizing.plot import latency_throughput_svg

    dep = best.deployment
    if best.max_num_seqs:
        from dataclasses import replace

        dep = replace(dep, max_num_seqs=best.max_num_seqs)
    sweep = knee_sweep(dep, workload, seed=seed)
    title = f"{dep.model.name} on {dep.tp} x {dep.gpu.name} (max_num_seqs {best.max_num_seqs})"
    svg = latency_throughput_svg(sweep, title, slo.ttft_p99_ms, slo.tpot_p99_ms)
    try:
        write_atomically(path, svg)
    except OSError as exc:
        fail(f"--plot: {path}: {exc.strerror or exc}")


def _explanation(best: Any, workload: Any) -> Any:
    from sizing.explain import explain

    dep = best.deployment
    if best.max_num_seqs:
        from dataclasses import replace

        dep = replace(dep, max_num_seqs=best.max_num_seqs)
    return explain(dep, best.plan, best.perf, int(workload.mean_prompt_tokens))


def _calibration_note(cal: Any, best: Any) -> str:
    if best is None or best.deployment is None:
        return "no option to apply it to"
    from dataclasses import replace

    import sizing

    dep = best.deployment
    if not cal.applies_to_gpu(dep.gpu):
        return f"not applied: it is for {cal.gpu}, the best option runs on {dep.gpu.name}"
    scope = (
        f"all terms applied: {cal.model} on {cal.tp} x {cal.gpu}"
        if cal.applies_to(dep.model, dep.gpu, dep.tp, best.plan.dtype)
        else f"{cal.gpu} terms applied (logged on {cal.model}, TP {cal.tp})"
    )
    plain = sizing.plan_memory(replace(dep, calibration=None, gpu=sizing.find_gpu(dep.gpu.name)))
    return f"{scope}; KV cache {best.plan.kv_cache_tokens:,} tokens, {plain.kv_cache_tokens:,} uncalibrated"


def render_explanation(ex: Any) -> None:
    """The --explain breakdown: memory per GPU, then the batch-1 decode step."""
    table = Table(title="memory per GPU", header_style="bold", box=box.SIMPLE_HEAD)
    for col in ("term", "GiB", "source"):
        table.add_column(col, justify="right" if col == "GiB" else "left", overflow="fold")
    for t in ex.memory:
        table.add_row(t.name + (" *" if t.calibrated else ""), f"{t.gib:.3f}", t.source)
    console.print(table)
    speed = Table(title=f"batch-1 decode step ({ex.bound}-bound)", header_style="bold", box=box.SIMPLE_HEAD)
    for col in ("term", "ms", "source"):
        speed.add_column(col, justify="right" if col == "ms" else "left", overflow="fold")
    for s in ex.speed:
        speed.add_row(s.name + (" *" if s.calibrated else ""), f"{s.ms:.3f}", s.source)
    speed.add_row("step", f"{ex.decode_step_ms:.3f}", "max(reads, compute) + fixed, per-layer, TP terms")
    console.print(speed)
    if any(t.calibrated for t in ex.memory) or any(s.calibrated for s in ex.speed):
        console.print("* : from the calibration file", highlight=False)


def _fmt(x: Any, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def _render_notes(j: dict[str, Any], slo: Any, requests: Any) -> None:
    """The best option's warnings; under a load (``slo`` given) a note when no latency SLO ranked it."""
    for w in j["warnings"]:
        console.print(f"  [yellow]warning:[/] {w}", highlight=False, soft_wrap=True)
    if slo is not None and not slo.given:
        console.print(
            "  [yellow]note:[/] no latency SLO given (--slo-ttft-p99-ms, --slo-tpot-p99-ms): ranked on cost "
            "at the offered load alone, whatever the latency above",
            highlight=False,
            soft_wrap=True,
        )
    too_long = _too_long_warning(requests, j["max_model_len"])
    if too_long is not None:
        console.print(f"  [yellow]warning:[/] {too_long}", highlight=False)


def _too_long_warning(requests: Any, max_model_len: int | None) -> str | None:
    """How many of a trace's requests vLLM would refuse at ``max_model_len``, or None when none (or no plan).
    The table prints it under the best option; --json carries it in each option's warnings."""
    if not requests or max_model_len is None:
        return None
    too_long = sum(1 for r in requests if r.prompt_tokens >= max_model_len)
    if not too_long:
        return None
    return f"{too_long} of {len(requests)} trace requests are longer than max_model_len and would be refused"


def _with_trace_warnings(doc: dict[str, Any], requests: Any) -> dict[str, Any]:
    """--json's options with the same trace-length warning the table prints (the search does not see it)."""
    for cand in doc["candidates"]:
        line = _too_long_warning(requests, cand.get("max_model_len"))
        if line is not None:
            cand["warnings"].append(line)
    return doc


# A tied option is worth a note when its P99 TTFT or TPOT is at most this share of the best's.
FASTER_TIE_SHARE = 0.8


def _faster_at_the_same_cost(result: Any, best: dict[str, Any]) -> None:
    """A note when an option at the best's cost (it lost the tie on its weights or TP) has a clearly lower
    P99 TTFT or TPOT at the offered load: the checkpoint's own weights win ties, but that speed is free."""
    from sizing.search import Verdict, checkpoint_note

    faster: list[tuple[tuple[float, float], Any, dict[str, Any], list[tuple[float, float]]]] = []
    for c in result.candidates:
        if c.verdict is not Verdict.SAME_COST:
            continue
        j = c.to_json(result.workload)
        raw = [(j.get(k), best.get(k)) for k in ("p99_ttft_ms", "p99_tpot_ms")]
        pairs = [(float(a), float(b)) for a, b in raw if a is not None and b is not None]
        if len(pairs) < len(raw):
            continue
        if not any(mine <= FASTER_TIE_SHARE * theirs for mine, theirs in pairs):
            continue
        ratios = [mine / theirs if theirs > 0 else 1.0 for mine, theirs in pairs]
        faster.append(((max(ratios), sum(ratios)), c, j, pairs))
    if not faster:
        return
    _, c, j, pairs = min(faster, key=lambda f: f[0])  # the fastest of them: its slower latency the lowest
    (ttft, best_ttft), (tpot, best_tpot) = pairs
    quantized = j["dtype"] != best["dtype"]
    where = (j["instance_type"] or j["gpu"]).removeprefix("ecs.")
    what = f"{j.get('instances') or 1} x {where} at TP {j['tp']} with {j['dtype']} weights"
    ranked = result.slo is not None and result.slo.given
    why = [] if ranked else ["a latency SLO ranks on it"]
    if quantized:
        why.append("check the quantized output on your own evaluation")
        if c.deployment is not None and checkpoint_note(c.deployment.model, j["dtype"]):
            why.append(f"no {j['dtype']} checkpoint of the model is published: you would make one")
    within = " and within the SLOs" if ranked else ""
    console.print(
        f"  [yellow]note:[/] at the same cost{within}, {what} gives P99 TTFT {ttft:.0f} ms and TPOT "
        f"{tpot:.1f} ms against {best_ttft:.0f} / {best_tpot:.1f}" + (f" ({'; '.join(why)})" if why else ""),
        highlight=False,
        soft_wrap=True,
    )


def _context_hint(candidates: Any) -> None:
    """When the nearest miss holds the weights but not one max_model_len request: how long a context fits."""
    near = candidates[0] if candidates else None
    if near is None or near.fits or near.plan is None or near.plan.max_model_len_that_fits <= 0:
        return
    plan = near.plan
    where = (near.instance_type or near.gpu).removeprefix("ecs.")
    console.print(
        f"  one {plan.max_model_len:,}-token request (max_model_len) fits no option; the longest that fits "
        f"is {plan.max_model_len_that_fits:,} tokens ({where}, TP {near.tp}, {plan.dtype}): size it to your "
        "requests with --max-model-len, or let --prompt-tokens/--output-tokens or --trace size it",
        highlight=False,
        soft_wrap=True,
    )


def _render(
    result: Any, shape: Any, top: int | None, has_load: bool, requests: Any, plot: Path | None
) -> None:
    wl = result.workload
    rows = result.candidates[: top or 15]
    best = result.best
    best_j = best.to_json(wl) if best is not None else None
    table = Table(title=f"{shape.name}: options, best first", header_style="bold", box=box.SIMPLE_HEAD)
    for col in ("#", "instance type", "GPUs", "TP", "weights", "KV tokens"):
        table.add_column(col, justify="left" if col == "instance type" else "right", no_wrap=True)
    if has_load:
        for col in ("seqs", "count", "P99 TTFT ms", "P99 TPOT ms", "CNY/h", "CNY/Mtok"):
            table.add_column(col, justify="right", no_wrap=True)
    else:
        table.add_column("CNY/h", justify="right", no_wrap=True)
    table.add_column("verdict", overflow="fold")
    for i, c in enumerate(rows, start=1):
        j = c.to_json(wl)
        cells = [
            str(i),
            (j["instance_type"] or "-").removeprefix("ecs."),
            f"{j['gpus']}x {j['gpu']}",
            str(j["tp"]),
            j["dtype"] or "-",
            _fmt(j["kv_cache_tokens"], ",") if j["fits"] else "-",
        ]
        if has_load:
            est = "~" if j.get("estimated") else ""
            cells += [
                _fmt(j.get("max_num_seqs"), "d") if j["fits"] else "-",
                est + _fmt(j.get("instances"), "d") if j.get("instances") else "-",
                _fmt(j.get("p99_ttft_ms"), ".0f"),
                _fmt(j.get("p99_tpot_ms"), ".1f"),
                est + _fmt(j.get("cost_cny_per_hour")) if j.get("cost_cny_per_hour") is not None else "-",
                _fmt(j.get("cost_cny_per_million_tokens"), ".3f"),
            ]
        else:
            cells.append(_fmt(j.get("price_cny_per_hour")))
        cells.append(j["brief"] or j["reason"])
        table.add_row(*cells)
    # A wide table rather than rich's squeezed columns: a narrow terminal wraps lines, pipes keep them whole.
    wide_console(150).print(table)
    if len(result.candidates) > len(rows):
        console.print(f"({len(result.candidates) - len(rows)} more options: --top or --json shows them)")
    if has_load:
        console.print("~ : count and cost estimated in closed form, not simulated", highlight=False)
    if best_j is None:
        console.print(
            "[bold red]no option fits[/]" + (" and meets the SLOs" if has_load else ""), highlight=False
        )
        _context_hint(result.candidates)
        return
    j = best_j
    console.print(
        f"[bold]best:[/] {j['instance_type'] or j['gpu']} x {j.get('instances') or 1}", highlight=False
    )
    console.print(f"  {j['vllm_command']}", highlight=False, soft_wrap=True)
    console.print(
        f"  weights {j['weights_gib']:.2f} GiB/GPU; KV cache {j['kv_cache_gib']:.2f} GiB/GPU = "
        f"{j['kv_cache_tokens']:,} tokens ({j['max_concurrency']:.2f}x max_model_len {j['max_model_len']:,})",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        f"  batch-1 TPOT {j['decode_tpot_ms']:.1f} ms; prefill {j['prefill_tokens_per_s']:,} tokens/s",
        highlight=False,
    )
    if has_load:
        console.print(
            f"  at {wl.rate:.3g} req/s: P50/P99 TTFT {j['p50_ttft_ms']:.0f}/{j['p99_ttft_ms']:.0f} ms, "
            f"P50/P99 TPOT {j['p50_tpot_ms']:.1f}/{j['p99_tpot_ms']:.1f} ms; "
            f"headroom {_fmt(j['headroom_pct'], '.0f')}%; queue limit {j['queue_limit']} waiting per engine "
            "(beyond it, fail fast)",
            highlight=False,
            soft_wrap=True,
        )
        if j["cost_cny_per_hour"] is not None:
            note = (
                " (estimated prices: check DescribePrice, override with --prices)"
                if j["price_estimate"]
                else ""
            )
            console.print(
                f"  CNY {j['cost_cny_per_hour']:.2f}/h (CNY {j['cost_cny_per_month']:,.0f} a month), "
                f"CNY {j['cost_cny_per_million_tokens']:.3f} per million tokens{note}",
                highlight=False,
                soft_wrap=True,
            )
    _render_notes(j, result.slo if has_load else None, requests)
    if has_load:
        _faster_at_the_same_cost(result, j)
    if plot is not None:
        console.print(f"  wrote {plot}", highlight=False)
