"""`fleet terraform`: export the module's variables from fleet.yaml, and check modules against the schema."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from fleet.commands._common import console, err_console, fail, load_config_or_exit, parse_at, write_atomically

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
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="Where to write ('-' for stdout). One group: a file (default terraform.tfvars.json). Several "
        "groups: a directory (default .) that gets one <group>.tfvars.json per group.",
    ),
    group: str | None = typer.Option(None, "--group", help="Export only this group."),
    at: str | None = typer.Option(
        None, "--at", help="ISO 8601 instant the scheduled tasks' first launches follow (default: now)."
    ),
    scheduled_tasks: bool = typer.Option(
        True,
        "--scheduled-tasks/--no-scheduled-tasks",
        help="Export the schedule floors as ESS scheduled tasks (off: the service's mirroring holds them).",
    ),
) -> None:
    """Write the module's variables (bounds, alarm thresholds and metric names, scheduled floors in UTC) for
    every group of the config, or the one named by --group."""
    from fleet.terraform.export import ExportError, build_all_tfvars, build_tfvars, calendar_warning

    now = datetime.now(UTC) if at is None else parse_at(at)
    config = load_config_or_exit(config_path)
    try:
        if group is not None or len(config.groups) == 1:
            one = build_tfvars(config, group, now=now, scheduled_tasks=scheduled_tasks)
            by_group = {one["name"]: one}
        else:
            by_group = build_all_tfvars(config, now=now, scheduled_tasks=scheduled_tasks)
    except ExportError as exc:
        fail(f"{config_path}: {exc}")
    if scheduled_tasks:
        for spec in config.groups:
            warning = calendar_warning(spec, now) if spec.name in by_group else None
            if warning:
                err_console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False, soft_wrap=True)
    if len(by_group) == 1:
        (tfvars,) = by_group.values()
        _write_one(output or Path("terraform.tfvars.json"), tfvars)
    else:
        _write_each(output or Path("."), by_group)


def _write_one(output: Path, tfvars: dict[str, object]) -> None:
    text = json.dumps(tfvars, indent=2) + "\n"
    if str(output) == "-":
        typer.echo(text, nl=False)
        return
    _write_atomically(output, text)
    console.print(f"wrote {output} ({len(tfvars)} variables, group {tfvars['name']})", highlight=False)


def _write_each(output: Path, by_group: dict[str, dict[str, object]]) -> None:
    """Several groups: the module holds one group, so each gets its own variables file (applied in its own
    workspace or root module); '-' prints them as one object by group name."""
    if str(output) == "-":
        typer.echo(json.dumps(by_group, indent=2))
        return
    if not output.is_dir():
        fail(
            f"--output: {output} is not a directory; the config has {len(by_group)} groups "
            f"({', '.join(by_group)}): give a directory for one <group>.tfvars.json each, or --group NAME"
        )
    for name, tfvars in by_group.items():
        _write_atomically(output / f"{name}.tfvars.json", json.dumps(tfvars, indent=2) + "\n")
    console.print(
        f"wrote {len(by_group)} files to {output}: " + ", ".join(f"{n}.tfvars.json" for n in by_group),
        highlight=False,
    )


def _write_atomically(path: Path, text: str) -> None:
    """Write next to the target and rename, so a failure never leaves half a file."""
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        fail(f"--output: directory {directory} does not exist")
    if path.is_dir():
        fail(f"--output: {path} is a directory; give a file name, e.g. {path / 'terraform.tfvars.json'}")
    try:
        write_atomically(path, text)
    except OSError as exc:
        fail(f"--output: cannot write {path}: {exc.strerror or exc}")


def _load_schema_or_exit(path: Path, load_schema: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """The provider schema at ``path``, or one line naming the file and what is wrong with it, exit 2."""
    loaded: object
    try:
        loaded = load_schema(path)
    except (OSError, ValueError) as exc:
        fail(f"--schema: cannot read {path}: {exc}")
    except AttributeError:  # load_schema takes the top level's items: a list or a scalar has none
        loaded = None
    problem = _schema_problem(loaded)
    if problem:
        fail(f"--schema: {path} is not a provider schema: {problem}")
    assert isinstance(loaded, dict)  # _schema_problem says so
    return loaded


def _schema_problem(loaded: object) -> str | None:
    """Why ``loaded`` is not a provider schema ({resource type: {argument: spec}}), or None: another JSON file
    would otherwise report every resource of the module as unknown (exit 1) or crash."""
    if not isinstance(loaded, dict):
        return "the top level must be an object of resource types such as alicloud_ess_scaling_group"
    if not loaded:
        return "it names no resource type"
    for name, arguments in loaded.items():
        if not isinstance(arguments, dict) or not all(isinstance(a, dict) for a in arguments.values()):
            return f"{name}: expected an object of arguments, each with its spec"
    return None


@terraform_app.command("check")
def check(
    directories: list[Path] = typer.Argument(..., help="Module directories (each checked on its own)."),
    schema: Path | None = typer.Option(
        None,
        "--schema",
        envvar="FLEET_TERRAFORM_SCHEMA",
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

    loaded = _load_schema_or_exit(schema or default_schema_path(), load_schema)
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
        if not any(directory.glob("*.tf")):
            fail(f"{directory}: no .tf files: not a Terraform module")
        try:
            problems.extend(check_module(directory, loaded, inputs=inputs))
        except HclError as exc:
            fail(str(exc))
    for problem in problems:
        typer.echo(str(problem), err=True)
    if problems:
        raise typer.Exit(1)
    console.print(f"{len(directories)} module(s) match the provider schema", highlight=False)
