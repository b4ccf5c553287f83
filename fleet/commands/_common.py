"""Helpers shared by the CLI commands: one-line errors, JSON output, the rich console."""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from collections.abc import Mapping

    from fleet.config import FleetConfig

# Piped output (a file, grep, a CI log) has no terminal to fit: rich would assume 80 columns and cut instance
# types and IDs in tables with an ellipsis, and break long lines. It gets PIPE_WIDTH instead; a terminal, or
# COLUMNS set by the user, keeps its own width.
PIPE_WIDTH = 160


def _width(stream: Any) -> int | None:
    return None if "COLUMNS" in os.environ or stream.isatty() else PIPE_WIDTH


console = Console(width=_width(sys.stdout))
err_console = Console(stderr=True, width=_width(sys.stderr))


def wide_console(min_width: int) -> Console:
    """The console, or one at least ``min_width`` wide for a table a narrow terminal would squeeze: the
    terminal wraps its lines instead, and every cell stays whole."""
    if console.width >= min_width:
        return console
    return Console(width=min_width, highlight=False, force_terminal=console.is_terminal)


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
        cfg = load_config(path, env=env)
    except ConfigError as exc:
        fail_lines(list(exc.problems) or [f"{path}: invalid config"])
    problems = capacity_problems(cfg)
    if problems:  # every command refuses them, not only `fleet validate`: the service would order them
        fail_lines([f"{path}: {p}" for p in problems])
    return cfg


def capacity_problems(cfg: FleetConfig) -> list[str]:
    """Each group's ``instance_types`` against the sizing catalog and its ``model`` (issue 17), as
    ``groups.NAME.instance_types: reason``."""
    from sizing.fallback import instance_type_problems

    return [
        f"groups.{g.name}.{p}" for g in cfg.groups for p in instance_type_problems(g.model, g.instance_types)
    ]


def check_profiles(cfg: FleetConfig, config: Path | str) -> None:
    """Every account a group names must be a profile the credentials chain can find: one line, exit 2.
    (`fleet serve` would otherwise sign that account's calls with the default chain: another account's
    keys.)"""
    from fleet.cloud.clients import known_profiles

    if not any(g.account for g in cfg.groups):
        return
    known = known_profiles(os.environ)
    for g in cfg.groups:
        if g.account and g.account not in known:
            fail(
                f"{config}: groups[{g.name}].account: profile {g.account!r} is not in the Alibaba Cloud "
                "credentials (~/.alibabacloud/credentials.ini, $ALIBABA_CLOUD_CREDENTIALS_FILE, "
                "~/.aliyun/config.json)"
            )


def quiet_credential_logs() -> None:
    """alibabacloud_credentials logs each failed refresh with its traceback on the "credentials" logger; the
    cloud adapters turn the same failure into a NoCredentials error that the command reports in one line."""
    import logging

    logging.getLogger("credentials").setLevel(logging.CRITICAL)


def parse_window(text: str, option: str) -> float:
    """A positive duration given on the command line (``30m``, ``4h``, ``7d``, ``1h30m``, plain seconds) in
    seconds, or one clear line and exit 2 that says what is wrong: not a duration, negative or zero (a window
    of zero length holds nothing to report), or longer than the 366 days any window of this tool may be."""
    from policies.spec import DurationRangeError, parse_duration

    body = text.strip()
    negative = body.startswith("-")
    try:
        seconds = parse_duration(body[1:] if negative else body)
    except DurationRangeError as exc:  # its size, not its syntax
        fail(f"{option}: {text!r}: {exc}")
    except ValueError:
        fail(f"{option}: {text!r} is not a duration; write e.g. 30m, 4h or 7d")
    if negative or not seconds > 0:
        fail(f"{option}: {text!r} must be positive")
    return seconds


def parse_at(value: str, option: str = "--at", *, naive_as_utc: bool = False) -> datetime:
    """An aware ISO 8601 instant given on the command line, or one clear line and exit 2; ``naive_as_utc``:
    a time without a zone is read as UTC (where a command documents it) instead of refused."""
    from fleet.timefmt import outside_calendar, parse_iso

    try:
        at = parse_iso(value)
    except ValueError:
        fail(f"{option}: {value!r} is not an ISO 8601 instant such as 2026-12-01T08:00:00Z")
    if at.tzinfo is None and naive_as_utc:
        at = at.replace(tzinfo=UTC)
    if at.tzinfo is None or at.utcoffset() is None:
        fail(f"{option}: {value!r} has no timezone; add Z or an offset such as +08:00")
    too_far = outside_calendar(at)
    if too_far is not None:
        fail(f"{option}: {too_far}")
    return at


def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON on stdout (pydantic models and dataclasses are welcome)."""
    sys.stdout.write(json.dumps(_finite(_jsonable(obj)), indent=2, sort_keys=False, default=str) + "\n")


def _finite(obj: Any) -> Any:
    """NaN and infinities as null: ``json.dumps`` writes them as bare NaN/Infinity, which strict parsers
    (Go, JavaScript's JSON.parse, jq) refuse, and a ``--json`` output must always parse."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


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


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` next to ``path`` and rename it into place, so a failure never leaves half a file.

    Raises ``OSError`` (the temporary file removed): the command words the error for its own option."""
    directory = path.parent if str(path.parent) else Path(".")
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; the user's umask decides, as for any file
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
