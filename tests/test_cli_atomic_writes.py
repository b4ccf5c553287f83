"""A command's output file is replaced whole or not at all: a write that fails (a full disk) leaves the file
that was there before intact, no temporary file beside it, and one error line.

The failure is injected at ``io.open``, which every text write goes through (``Path.write_text`` and the
``os.fdopen`` of a temporary file alike): the handle writes half of what it is given and then raises ENOSPC.
"""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path
from typing import Any

import pytest

from fleet.cli import main
from fleet.sim.workload import traces_dir

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "fleet.yaml")
SNAPSHOTS = ROOT / "examples" / "snapshots"
DIAGNOSE = ROOT / "examples" / "diagnose"
BEFORE = "the previous file, whole\n"


class _HalfThenFull:
    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def write(self, text: str) -> int:
        self._handle.write(text[: len(text) // 2])
        self._handle.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> _HalfThenFull:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()


@pytest.fixture
def full_disk(tmp_path, monkeypatch):
    """``tmp_path / "out"`` holding one file, ``BEFORE``; from then on writes there fill the disk halfway."""
    out = tmp_path / "out"
    out.mkdir()
    real_open = io.open
    for name in ("history.json", "window.json", "report.html"):
        (out / name).write_text(BEFORE)

    def fake_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = real_open(file, mode, *args, **kwargs)
        name = os.readlink(f"/proc/self/fd/{file}") if isinstance(file, int) else os.fspath(file)
        if "w" in mode and Path(name).parent == out:
            return _HalfThenFull(handle)
        return handle

    monkeypatch.setattr(io, "open", fake_open)
    return out


def _assert_untouched(out: Path, target: Path, capsys: Any) -> None:
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Traceback" not in err
    assert target.read_text() == BEFORE
    leftovers = sorted(p.name for p in out.iterdir())
    assert leftovers == ["history.json", "report.html", "window.json"]  # no temporary file left behind


def test_plan_save_history_on_a_full_disk_keeps_the_previous_history(full_disk, capsys):
    target = full_disk / "history.json"
    argv = ["plan", "--config", EXAMPLE, "--snapshot", str(SNAPSHOTS / "overheating-node.json")]
    assert main([*argv, "--save-history", str(target)]) == 2
    _assert_untouched(full_disk, target, capsys)


def test_diagnose_save_on_a_full_disk_keeps_the_previous_snapshot(full_disk, capsys):
    target = full_disk / "window.json"
    argv = ["diagnose", "--snapshot", str(DIAGNOSE / "falsely-busy-queue.json"), "--save", str(target)]
    assert main(argv) == 2
    _assert_untouched(full_disk, target, capsys)


@pytest.mark.skipif(
    not (traces_dir() / "azure2023_conv.csv").exists(), reason=f"shared traces not found at {traces_dir()}"
)
def test_simulate_report_on_a_full_disk_keeps_the_previous_report(full_disk, capsys):
    target = full_disk / "report.html"
    argv = ["simulate", "--workload", "azure:conv,rate=0.3", "--hours", "0.08", "--report", str(target)]
    assert main(argv) == 2
    _assert_untouched(full_disk, target, capsys)
