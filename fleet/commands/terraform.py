"""`fleet terraform`: export the module's variables from fleet.yaml, and check modules against the schema."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import typer

from fleet.commands._common import console, fail, load_config_or_exit, parse_at, write_atomically

terraform_app = typer.Typer(
    name="terraform",
    help="The Terraform module's variables from the service's config, and offline checks of the module.",
    no_args_is_help=True,
)


# `fleet terraform check` parses HCL with python-hcl2, an extra of its own (the export needs nothing extra).
HCL_MODULE = "hcl2"
HCL_INSTALL_HINT = "pip install 'gpu-fleet[terraform]'"


def register(app: typer.Typer) -> None:
    app.add_typer(terraform_app, name="terraform")


@terraform_app.command("export")
def export(
    config_path: Path = typer.Option(..., "--config", "-c", help="fleet.yaml, as the service runs it."),
    output: Path = typer.Option(
        Path("terraform.tfvars.json"), "--output", "-o", help="Where to write the variables ('-' for stdout)."
    ),
    group: str | None = typer.Option(None, "--group", help="The group to export (when there are several)."),
    at: str | None = typer.Option(
        None, "--at", help="ISO 8601 instant the scheduled tasks' first launches follow (default: now)."
    ),
    scheduled_tasks: bool = typer.Option(
        True, "--scheduled-tasks/--no-scheduled-tasks",
        help="Export the schedule floors as ESS scheduled tasks (off: the service's mirroring holds them).",
    ),
) -> None:
    """Write terraform.tfvars.json (bounds, alarm thresholds and metric names, scheduled floors in UTC)."""
    from fleet.terraform.export import ExportError, build_tfvars

    now = datetime.now(UTC) if at is None else parse_at(at)
    config = load_config_or_exit(config_path)
    try:
        tfvars = build_tfvars(config, group, now=now, scheduled_tasks=scheduled_tasks)
    except ExportError as exc:
        fail(f"{config_path}: {exc}")
    text = json.dumps(tfvars, indent=2) + "\n"
    if str(output) == "-":
        typer.echo(text, nl=False)
        return
    _write_atomically(output, text)
    console.print(f"wrote {output} ({len(tfvars)} variables, group {tfvars['name']})", highlight=False)


def _write_atomically(path: Path, text: str) -> None:
    """Write next to the target and rename, so a failure never leaves half a file."""
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        fail(f"--output: directory {directory} does not exist")
    try:
        write_atomically(path, text)
    except OSError as exc:
        fail(f"--output: cannot write {path}: {exc.strerror or exc}")


@terraform_app.command("check")
def check(
    directories: list[Path] = typer.Argument(..., help="Module directories (each checked on its own)."),
    schema: Path | None = typer.Option(
        None, "--schema", envvar="FLEET_TERRAFORM_SCHEMA",
        help="alicloud-schema.json (default: ../shared/terraform/alicloud-schema.json next to the repo).",
    ),
    tfvars: list[Path] = typer.Option(
        [], "--var-file", help="tfvars or tfvars.json whose values are checked too (repeatable)."
    ),
) -> None:
    """Check modules against the provider schema offline: arguments, required ones, enumerated values."""
    try:
        from fleet.terraform.check import check_module, default_schema_path, load_schema
        from fleet.terraform.hcl import HclError, load_hcl_tfvars, load_json_tfvars
    except ModuleNotFoundError as exc:
        if exc.name != HCL_MODULE:
            raise
        fail(f"fleet terraform check needs python-hcl2, which is not installed: {HCL_INSTALL_HINT}")

    schema_path = schema or default_schema_path()
    try:
        loaded = load_schema(schema_path)
    except (OSError, ValueError) as exc:
        fail(f"--schema: cannot read {schema_path}: {exc}")
    inputs: dict[str, list[object]] = {}
    for path in tfvars:
        try:
            values = load_json_tfvars(path) if path.name.endswith(".json") else load_hcl_tfvars(path)
        except OSError as exc:
            fail(f"--var-file: cannot read {path}: {exc.strerror or exc}")
        except UnicodeDecodeError as exc:
            fail(f"--var-file: {path}: not UTF-8 text (byte {exc.start})")
        except (HclError, ValueError) as exc:
            # HCL errors name the file already; JSON ones do not
            fail(f"--var-file: {exc}" if str(path) in str(exc) else f"--var-file: {path}: {exc}")
        for key, value in values.items():
            inputs.setdefault(key, []).append(value)
    problems = []
    for directory in directories:
        if not directory.is_dir():
            fail(f"{directory}: not a directory")
        try:
            problems.extend(check_module(directory, loaded, inputs=inputs))
        except HclError as exc:
            fail(str(exc))
    for problem in problems:
        typer.echo(str(problem), err=True)
    if problems:
        raise typer.Exit(1)
    console.print(f"{len(directories)} module(s) match the provider schema", highlight=False)
