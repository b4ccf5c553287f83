"""`fleet terraform check` on an install without python-hcl2: one line naming the extra, not a traceback."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from fleet.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_without_hcl2_check_is_one_line_naming_the_extra(monkeypatch, capsys, module_dir):
    # as on an install without the extra: `import hcl2` fails, and nothing of fleet.terraform is loaded yet
    monkeypatch.setitem(sys.modules, "hcl2", None)
    for name in ("fleet.terraform.check", "fleet.terraform.hcl"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert main(["terraform", "check", str(module_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "python-hcl2" in err and "gpu-fleet[terraform]" in err and "Traceback" not in err


def test_the_terraform_extra_installs_python_hcl2():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(req.startswith("python-hcl2") for req in extras["terraform"])
