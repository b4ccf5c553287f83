"""`fleet size calibrate LOG`: turn your own vLLM startup log (and optionally a `vllm bench serve` result)
into a calibration file that `fleet size --calibration FILE` uses.

Shell only: reads the files, takes the deployment the log does not state from the flags, calls
``sizing.calibration``, writes the file and prints what it corrected and by how much.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
import yaml
from rich import box
from rich.table import Table

from fleet.commands._common import console, fail, print_json, write_atomically


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)


def calibrate(
    log: Path = typer.Argument(
        ...,
        help="A vLLM startup log (the lines vLLM prints while it starts; gzip or UTF-16 too; - for stdin).",
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write the calibration file (YAML)."),
    bench: Path | None = typer.Option(
        None, "--bench", help="A `vllm bench serve --save-result` JSON of the same deployment."
    ),
    model: str | None = typer.Option(None, "--model", help="Catalog model (default: the one the log names)."),
    config: Path | None = typer.Option(
        None, "--config", help="A Hugging Face config.json for any other model."
    ),
    gpu: str | None = typer.Option(None, "--gpu", help="The GPU the log ran on (e.g. A10, L20, H20)."),
    instance_type: str | None = typer.Option(None, "--instance-type", help="Or the Alibaba instance type."),
    tp: int | None = typer.Option(None, "--tp", help="Tensor parallel size (default: the log's, else 1)."),
    dtype: str = typer.Option("auto", "--dtype", help="Weight format, as for `fleet size`."),
    max_model_len: int | None = typer.Option(None, "--max-model-len", help="Default: the log's."),
    gpu_memory_utilization: float | None = typer.Option(
        None, "--gpu-memory-utilization", help="Default: the log's, else 0.90."
    ),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="Default: the log's, else vLLM's."),
    max_num_batched_tokens: int | None = typer.Option(
        None, "--max-num-batched-tokens", help="Default: the log's, else vLLM's."
    ),
    engine: str | None = typer.Option(None, "--engine", help="v0 or v1 (default: from the log's wording)."),
    as_json: bool = typer.Option(False, "--json", help="Print the calibration as JSON too."),
) -> None:
    """Calibrate the sizing model on one vLLM startup log; prints each corrected term and by how much."""
    import sizing
    from sizing.calibration import bench_from_json, calibration_from_dict, calibration_to_dict
    from sizing.calibration import calibrate as derive
    from sizing.vllm_log import parse_startup_log

    if gpu is None and instance_type is None:
        fail("give the GPU the log ran on: --gpu NAME or --instance-type TYPE")
    if gpu is not None and instance_type is not None:
        fail("give one of --gpu and --instance-type (the instance type names its GPU)")
    _check_flags(tp, max_model_len, max_num_seqs, max_num_batched_tokens, gpu_memory_utilization)
    if model is not None and config is not None:
        fail("give at most one of --model and --config")
    text = _read_text(log)
    try:
        facts = parse_startup_log(text)
    except sizing.SizingInputError as exc:
        fail(f"{log}: {exc}")
    _check_against_log(
        facts,
        {
            "--tp": (tp, facts.tp),
            "--max-model-len": (max_model_len, facts.max_model_len),
            "--gpu-memory-utilization": (gpu_memory_utilization, facts.gpu_memory_utilization),
            "--max-num-seqs": (max_num_seqs, facts.max_num_seqs),
            "--max-num-batched-tokens": (max_num_batched_tokens, facts.max_num_batched_tokens),
        },
    )
    result = _read_json(bench) if bench is not None else None
    try:
        shape = _model(model, config, facts)
        the_gpu = (
            sizing.find_gpu(gpu) if gpu else sizing.find_gpu(sizing.find_instance(instance_type or "").gpu)
        )
        dep = sizing.Deployment(
            shape,
            the_gpu,
            _given(tp, facts.tp or 1),
            dtype=dtype,
            max_model_len=_given(max_model_len, facts.max_model_len or facts.concurrency_len),
            gpu_memory_utilization=_given(gpu_memory_utilization, facts.gpu_memory_utilization or 0.90),
            max_num_seqs=_given(max_num_seqs, facts.max_num_seqs),
            max_num_batched_tokens=_given(max_num_batched_tokens, facts.max_num_batched_tokens),
            engine=engine or facts.engine or "v1",
        )
        bench_result = bench_from_json(result) if result is not None else None
        source = "<stdin>" if str(log) == "-" else log.name
        if facts.starts > 1:
            source += f" (start {facts.start_read} of {facts.starts})"
        cal = derive(facts, dep, bench_result, source=source)
        before = sizing.plan_memory(dep)
        after = sizing.plan_memory(sizing.calibration.apply_calibration(dep, cal))
    except sizing.SizingInputError as exc:
        fail(str(exc))
    doc = calibration_to_dict(cal)
    try:
        calibration_from_dict(doc)  # never write a file that `fleet size --calibration` would refuse
    except sizing.SizingInputError as exc:
        fail(f"{log}: its figures give a calibration out of range ({exc})")
    try:
        write_atomically(out, yaml.safe_dump(doc, sort_keys=False))
    except OSError as exc:
        fail(f"--out: {out}: {exc.strerror or exc}")
    if as_json:
        print_json(doc)
        return
    _render(cal, facts, before, after, out)


def _check_flags(
    tp: int | None,
    max_model_len: int | None,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None,
    gpu_memory_utilization: float | None,
) -> None:
    """The deployment's flags as `fleet size` takes them: a 0 is refused, never read as "not given" (it fell
    through to the log's own value)."""
    import math

    counts = {
        "--tp": tp,
        "--max-model-len": max_model_len,
        "--max-num-seqs": max_num_seqs,
        "--max-num-batched-tokens": max_num_batched_tokens,
    }
    for name, value in counts.items():
        if value is not None and value < 1:
            fail(f"{name} must be at least 1, got {value}")
    util = gpu_memory_utilization
    if util is not None and not (math.isfinite(util) and 0 < util <= 1):
        fail(f"--gpu-memory-utilization must be in (0, 1], got {util:g}")


def _check_against_log(facts: Any, flags: dict[str, tuple[Any, Any]]) -> None:
    """The flags fill in what the log does not state; one that says otherwise than the log would calibrate a
    deployment that never ran (--tp 2 on a TP 1 log halved the model's KV bytes per token and wrote the
    log's pool against them)."""
    for name, (given, logged) in flags.items():
        if given is not None and logged is not None and given != logged:
            fail(f"{name} {given}: the log ran with {logged}; drop {name} (the log states it)")


def _given(flag: Any, default: Any) -> Any:
    """The flag when given, else the log's value (or vLLM's default)."""
    return default if flag is None else flag


def _model(model: str | None, config: Path | None, facts: Any) -> Any:
    import sizing

    if config is not None:
        from fleet.commands.size import _read_model_config

        return _read_model_config(config)
    name = model or facts.model
    if name is None:
        fail("the log names no model: give --model NAME or --config FILE")
    return sizing.find_model(name)


def _read_text(path: Path) -> str:
    """The log's text: ``-`` reads standard input (``docker logs vllm 2>&1 | fleet size calibrate -``)."""
    import sizing
    from sizing.vllm_log import decode_log

    try:
        data = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError as exc:
        fail(f"{path}: {exc.strerror or exc}")
    if not data.strip():
        if str(path) == "-":  # `docker logs` writes the container's stderr on its own stderr
            fail("standard input is empty: pipe the log in with its stderr (docker logs NAME 2>&1 | ...)")
        fail(f"{path}: the file is empty: give the lines vLLM printed while it started")
    try:
        return decode_log(data)
    except sizing.SizingInputError as exc:
        fail(f"{path}: {exc}")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        fail(f"{path}: {exc.strerror or exc}")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        fail(f"{path}: not a vllm bench serve result JSON ({exc})")
    except RecursionError:  # the parser recurses per level: 100,000 nested '[' exhaust the stack
        fail(f"{path}: nested too deeply to be a vllm bench serve result JSON")


def _render(cal: Any, facts: Any, before: Any, after: Any, out: Path) -> None:
    table = Table(
        title=f"calibration: {cal.model} on {cal.tp} x {cal.gpu} "
        f"(vLLM {cal.vllm_version or '?'}, {cal.engine})",
        header_style="bold",
        box=box.SIMPLE_HEAD,
    )
    for col in ("term", "scope", "log", "model said", "model was off by"):
        table.add_column(col, justify="left" if col in ("term", "scope") else "right", no_wrap=True)
    for t in cal.terms:
        table.add_row(
            t.name,
            t.scope.value,
            f"{t.logged:.3f} {t.unit}",
            f"{t.predicted:.3f} {t.unit}",
            f"{t.error_pct:+.1f}%",
        )
    console.print(table)
    logged = facts.kv_cache_tokens or (facts.gpu_blocks * 16 if facts.gpu_blocks else None)
    line = (
        f"  KV cache: {before.kv_cache_tokens:,} tokens uncalibrated -> {after.kv_cache_tokens:,} calibrated"
    )
    if logged:
        line += f" (the log: {logged:,})"
    console.print(line, highlight=False)
    if facts.starts > 1:
        console.print(f"  {_starts_note(facts)}", highlight=False)
    console.print(f"  wrote {out}: use it with `fleet size --calibration {out}`", highlight=False)


def _starts_note(facts: Any) -> str:
    """Which start of a log with several (a restart, a changed flag) the calibration is of."""
    note = f"the log holds {facts.starts} starts of vLLM: calibrated on start {facts.start_read}"
    if facts.start_read == facts.starts:
        return note + " (the last)"
    later = facts.starts - facts.start_read
    plural = "s" if later > 1 else ""
    return note + f", the last that sized its KV cache ({later} later start{plural} stopped before it)"
