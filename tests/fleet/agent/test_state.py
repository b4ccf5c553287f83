"""The agent's state across its restarts in one boot (fleet.agent.state): the GPUs whose fall it counted."""

from __future__ import annotations

import json

import pytest

from fleet.agent.fake_nvml import FakeGpu, FakeNvml
from fleet.agent.nvml import GpuCollector
from fleet.agent.state import FallsFile, read_boot_id
from fleet.cli import main


def _xids(collector: GpuCollector) -> list[tuple[int | None, int]]:
    return [(e.gpu_index, e.xid) for e in collector.read().xid_events]


def test_a_fall_counted_before_a_restart_is_not_counted_again_until_the_gpu_is_read_whole(tmp_path):
    path = str(tmp_path / "gpu-falls.json")
    gpus = [FakeGpu(), FakeGpu()]
    first = GpuCollector(FakeNvml(gpus), falls_file=FallsFile(path, "boot-1"))
    first.read()
    gpus[1].lose(with_xid=False)
    assert _xids(first) == [(1, 79)]
    assert json.loads((tmp_path / "gpu-falls.json").read_text()) == {
        "boot_id": "boot-1",
        "falls": [{"index": 1, "bus_id": "00000000:00:08.0"}],  # its bus id when last read whole
    }
    restarted = GpuCollector(FakeNvml(gpus), falls_file=FallsFile(path, "boot-1"))
    assert _xids(restarted) == []  # still lost: the same fall
    gpus[1].is_lost = False  # a reset: read whole again, the fall is over
    assert _xids(restarted) == []
    assert json.loads((tmp_path / "gpu-falls.json").read_text())["falls"] == []
    gpus[1].lose(with_xid=False)
    assert _xids(restarted) == [(1, 79)]  # a second fall


@pytest.mark.parametrize(
    "content",
    ["", "{not json", "[]", '{"boot_id": "boot-0", "falls": [{"index": 0, "bus_id": null}]}'],
    ids=["empty", "not json", "not an object", "another boot"],
)
def test_a_state_file_that_is_not_this_boots_is_no_state(tmp_path, content):
    path = tmp_path / "gpu-falls.json"
    path.write_text(content)
    gpu = FakeGpu()
    gpu.lose(with_xid=False)
    assert _xids(GpuCollector(FakeNvml([gpu]), falls_file=FallsFile(str(path), "boot-1"))) == [(0, 79)]


def test_malformed_entries_are_skipped_and_the_rest_kept(tmp_path):
    path = tmp_path / "gpu-falls.json"
    falls = [{"index": "1"}, {"index": -1}, {"index": True}, {"index": 0, "bus_id": 7}, {"index": 2}, 3]
    path.write_text(json.dumps({"boot_id": "boot-1", "falls": falls}))
    assert FallsFile(str(path), "boot-1").load() == {2: None}


def test_without_a_boot_id_nothing_is_kept_or_trusted(tmp_path):
    path = tmp_path / "gpu-falls.json"
    path.write_text(json.dumps({"boot_id": None, "falls": [{"index": 0, "bus_id": None}]}))
    falls = FallsFile(str(path), None)
    assert falls.load() == {}
    assert falls.save({1: None}) and json.loads(path.read_text())["falls"] == [{"index": 0, "bus_id": None}]


def test_a_state_file_that_cannot_be_written_is_logged_once_and_the_gpus_still_read(tmp_path, caplog):
    gpu = FakeGpu()
    collector = GpuCollector(FakeNvml([gpu]), falls_file=FallsFile(str(tmp_path / "gone" / "f.json"), "b"))
    gpu.lose(with_xid=False)
    assert _xids(collector) == [(0, 79)]
    collector.read()  # still lost: written again each period, logged once
    collector.read()
    warnings = [r for r in caplog.records if "not written" in r.getMessage()]
    assert len(warnings) == 1


def test_the_boot_id_is_read_from_proc_and_none_where_it_cannot_be(tmp_path):
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("6f1c1a2e-0d4b-4c1e-9d1e-2b7f5c3a9e10\n")
    assert read_boot_id(str(boot_id)) == "6f1c1a2e-0d4b-4c1e-9d1e-2b7f5c3a9e10"
    assert read_boot_id(str(tmp_path / "missing")) is None


def test_a_state_dir_that_is_not_a_directory_is_one_line_exit_2(capsys, tmp_path):
    code = main(
        ["agent", "--once", "--no-publish", "--instance-id", "i-1", "--state-dir", str(tmp_path / "x")]
    )
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "--state-dir" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
