"""The `fleet` entry point itself."""

from fleet import __version__
from fleet.cli import main


def test_version_prints_the_package_version(capsys):
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip() == __version__


def test_unknown_command_exits_2():
    assert main(["no-such-command"]) == 2
