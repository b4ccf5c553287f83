"""Helpers shared by the CLI commands: one-line errors, JSON output, the rich console."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from collections.abc import Mapping

    from fleet.config import FleetConfig

console = Console()
err_console = Console(stderr=True)

EXIT_INVALID = 2  # bad input: scripts can trust this code


def fail(message: str, code: int = EXIT_INVALID) -> NoReturn:
    """Print one clear line on stderr and exit: never a traceback for bad input."""
    # escaped: messages quote user input and formats like "[time, value]", which rich would take as markup
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def fail_lines(lines: list[str], code: int = EXIT_INVALID) -> NoReturn:
    """Print several problems, one clear line each (as ``fleet validate`` does), then exit."""
    for line in lines[:-1]:
        err_console.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
    fail(lines[-1] if lines else "invalid input", code)


def load_config_or_exit(path: Path | str, env: Mapping[str, str] | None = None) -> FleetConfig:
    """fleet.yaml for a command: every problem as ``file: field: reason``, one per line, and exit 2."""
    from fleet.config import ConfigError, load_config

    try:
        return load_config(path, env=env)
    except ConfigError as exc:
        fail_lines(list(exc.problems) or [f"{path}: invalid config"])


def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON on stdout (pydantic models and dataclasses are welcome)."""
    sys.stdout.write(json.dumps(_jsonable(obj), indent=2, sort_keys=False, default=str) + "\n")


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(obj)
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    return obj
