"""The `fleet` command: thin typer commands that parse, call, render and pick an exit code.

Each area registers its commands from its own module (``fleet/commands/*.py``) so that the
command surface stays in one list here while the code stays with its area.
"""

from __future__ import annotations

import importlib
import sys

import typer

app = typer.Typer(
    name="fleet",
    help="Fleet automation for LLM inference on Alibaba Cloud GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Modules under fleet.commands, each exposing ``register(app: typer.Typer) -> None``.
COMMAND_MODULES: list[str] = [
    "size",
    "agent",
    "terraform",
    "serve",
    "policy",
    "simulate",
    "fake_cloud",
    "diagnose",
    "forecast",
    "bench",
]


def _register_all() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"fleet.commands.{name}").register(app)


@app.command("version")
def version() -> None:
    """Print the version."""
    from fleet import __version__

    typer.echo(__version__)


@app.callback()
def _root() -> None:
    """Fleet automation for LLM inference on Alibaba Cloud GPUs."""


_register_all()


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (tests call ``main([...])``)."""
    try:
        app(args=argv if argv is not None else sys.argv[1:], prog_name="fleet")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
