"""Helpers shared by the CLI commands: one-line errors, JSON output, the rich console."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

console = Console()
err_console = Console(stderr=True)

EXIT_INVALID = 2  # bad input: scripts can trust this code


def fail(message: str, code: int = EXIT_INVALID) -> NoReturn:
    """Print one clear line on stderr and exit: never a traceback for bad input."""
    # escaped: messages quote user input and formats like "[time, value]", which rich would take as markup
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


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
