"""The `fleet` entry point itself."""

import subprocess
import sys

from fleet import __version__
from fleet.cli import main


def test_version_prints_the_package_version(capsys):
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip() == __version__


def test_unknown_command_exits_2():
    assert main(["no-such-command"]) == 2


def test_python_dash_m_fleet_runs_the_cli_with_its_exit_code():
    """``python -m fleet`` is the ``fleet`` command: same output, same exit code (2: unknown command)."""
    run = [sys.executable, "-m", "fleet"]
    ok = subprocess.run([*run, "version"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and __version__ in ok.stdout
    bad = subprocess.run([*run, "no-such-command"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
