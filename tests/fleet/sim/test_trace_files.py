"""Users' own request logs read as traces: gzip, big files read row by row, gateway export shapes."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import pytest

from fleet.cli import main
from fleet.sim.workload import WorkloadError, build_workload, load_columns, read_trace_file

CSV = "timestamp,prompt_tokens,completion_tokens\n0,100,20\n1.5,200,30\n3,50,5\n"
JSONL = (
    '{"timestamp": 0, "input_length": 10, "output_length": 3}\n'
    '{"timestamp": 2000, "input_length": 20, "output_length": 4}\n'
)


@pytest.mark.parametrize(("name", "text"), [("log.csv.gz", CSV), ("log.jsonl.gz", JSONL)])
def test_a_gzip_compressed_trace_reads_as_the_plain_one(tmp_path: Path, name: str, text: str) -> None:
    plain = tmp_path / name.removesuffix(".gz")
    plain.write_text(text)
    packed = tmp_path / name
    packed.write_bytes(gzip.compress(text.encode()))
    assert load_columns(packed) == load_columns(plain)
    assert len(build_workload(f"trace:{packed},loop=false", 60.0)) == len(load_columns(plain))


def test_a_broken_gzip_file_is_one_line_naming_it(tmp_path: Path, capsys) -> None:
    path = tmp_path / "log.csv.gz"
    path.write_bytes(gzip.compress(CSV.encode())[:30])  # cut short, as a download that stopped
    with pytest.raises(WorkloadError, match="not a readable gzip file"):
        read_trace_file(path)
    path.write_bytes(b"not gzip at all")
    code = main(["simulate", "--workload", f"trace:{path}", "--hours", "1", "--json"])
    err = capsys.readouterr().err
    assert code == 2 and f"{path}: not a readable gzip file" in err and "Traceback" not in err


def test_a_big_trace_is_read_row_by_row_not_held_whole(tmp_path: Path) -> None:
    # the reader held the whole text and a dict per row besides the requests: a million-row gateway log
    # took gigabytes; now what stays is the requests (and the sort's list of them)
    rows = 20_000
    path = tmp_path / "big.csv"
    with path.open("w") as handle:
        handle.write("timestamp,model,user,prompt_tokens,completion_tokens,total_tokens,status\n")
        for i in range(rows):
            handle.write(
                f"{i * 0.01:.2f},qwen2.5-14b-instruct,user-{i % 97},{100 + i % 7},{20 + i % 5},0,ok\n"
            )
    tracemalloc.start()
    try:
        got = load_columns(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(got) == rows
    # 850 bytes a row before (the text, a dict a row, the requests), 180 now (the requests, restarted at 0 s)
    assert peak < rows * 400, f"peak {peak / 1e6:.1f} MB for {rows} rows"


SKIPPY = "timestamp,prompt_tokens,completion_tokens\n0,10,2\n60,,2\n120,-5,2\n180,10,0\n240,11,3\n300,11,3\n"
SKIPPED = "3 of 6 rows skipped: 1 with zero tokens (failed requests), 1 with no token counts, 1 with negative"


def test_fleet_size_warns_of_skipped_rows_on_stderr_not_in_its_json(tmp_path: Path, capsys) -> None:
    path = tmp_path / "gw.csv"
    path.write_text(SKIPPY)
    code = main(["size", "--model", "Qwen2.5-14B", "--trace", str(path), "--top", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["workload"]["trace_requests"] == 3
    assert f"warning: {path}: {SKIPPED}" in " ".join(err.split())


def test_fleet_simulate_warns_of_skipped_rows_once_before_the_run(tmp_path: Path, capsys) -> None:
    path = tmp_path / "gw.csv"
    path.write_text(SKIPPY)
    # a bad fault ends the command right after the workload is checked: the warning comes before any run
    code = main(["simulate", "--workload", f"trace:{path}", "--hours", "1", "--fault", "bogus", "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert " ".join(err.split()).count(SKIPPED) == 1


def test_hours_past_the_end_of_a_trace_played_once_are_warned_of_once(tmp_path: Path, capsys) -> None:
    # the run went on idle after the trace's last request, and its GPU-hours grew with nothing said
    path = tmp_path / "gw.csv"
    path.write_text("timestamp,prompt_tokens,completion_tokens\n0,10,2\n1800,11,3\n")
    argv = ["simulate", "--workload", f"trace:{path},loop=false,speed=2", "--hours", "2", "--fault", "bogus"]
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    err = " ".join(err.split())
    assert code == 2 and out == ""
    assert (
        err.count("with loop=false ends at 0.25 h (900 s) of the 2 h run: the last 1.75 h have no requests")
        == 1
    )
    assert "--hours 0.25" in err
    for quiet in (f"trace:{path},speed=2", f"trace:{path},loop=false,speed=2"):
        hours = "2" if "loop" not in quiet else "0.25"
        main(["simulate", "--workload", quiet, "--hours", hours, "--fault", "bogus", "--json"])
        assert "ends at" not in capsys.readouterr().err
