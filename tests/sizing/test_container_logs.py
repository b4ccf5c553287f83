"""Container runtimes' log files unwrapped: CRI and Docker json-file records, long lines joined again."""

from __future__ import annotations

import json

from sizing.container_logs import ContainerLog, LogKind, unwrap_text

# containerd and CRI-O cut a line at 16 KiB; the Docker daemon too
CUT = 16 * 1024


def cri(lines: list[tuple[str, str]], at: str = "2024-12-06T10:00:00.123456789Z") -> list[str]:
    """The records containerd writes for (stream, line) pairs: a line past CUT as P records, then an F."""
    out = []
    for stream, line in lines:
        pieces = [line[i : i + CUT] for i in range(0, len(line), CUT)] or [""]
        for k, piece in enumerate(pieces):
            tag = "F" if k == len(pieces) - 1 else "P"
            out.append(f"{at} {stream} {tag} {piece}\n")
    return out


def docker(lines: list[tuple[str, str]]) -> list[str]:
    """The records of Docker's json-file driver: each piece of a cut line without the final newline."""
    out = []
    for stream, line in lines:
        text = line + "\n"
        for i in range(0, len(text), CUT):
            record = {"log": text[i : i + CUT], "stream": stream, "time": "2024-12-06T10:00:00.1Z"}
            out.append(json.dumps(record) + "\n")
    return out


LONG = json.dumps({"messages": "x" * 40_000, "usage": {"prompt_tokens": 12345}})


def test_a_cri_line_cut_into_partial_records_is_joined_with_where_it_began() -> None:
    records = cri([("stdout", "first"), ("stdout", LONG), ("stdout", "last")])
    assert len(records) == 5  # LONG took three records
    log = ContainerLog(records)
    assert list(log) == [(1, "first\n"), (2, LONG + "\n"), (5, "last\n")]
    assert log.kind is LogKind.CRI


def test_partial_records_of_two_streams_are_joined_per_stream() -> None:
    out = cri([("stdout", LONG)])
    err = cri([("stderr", "INFO: Started server process [1]")])
    records = [out[0], err[0], out[1], out[2]]  # stderr written while stdout's long line was being cut
    assert [line for _, line in ContainerLog(records)] == ["INFO: Started server process [1]\n", LONG + "\n"]


def test_a_docker_json_file_line_cut_at_16_kib_is_joined() -> None:
    records = docker([("stdout", "first"), ("stdout", LONG)])
    assert len(records) == 4
    log = ContainerLog(records)
    assert list(log) == [(1, "first\n"), (2, LONG + "\n")]
    assert log.kind is LogKind.DOCKER_JSON


def test_a_file_cut_while_a_long_line_was_written_gives_what_arrived() -> None:
    records = cri([("stdout", "first"), ("stdout", LONG)])[:-1]
    assert [line for _, line in ContainerLog(records)] == ["first\n", LONG[: 2 * CUT]]


def test_a_plain_log_passes_through_unchanged() -> None:
    lines = ["\n", '{"log": 1}\n', "2024-12-06T10:00:00Z INFO started\r\n"]
    log = ContainerLog(lines)
    assert list(log) == list(enumerate(lines, start=1))
    assert log.kind is LogKind.PLAIN


def test_cri_records_with_a_zone_offset_and_an_empty_message_are_read() -> None:
    records = ["2024-12-06T18:00:00.5+08:00 stdout F \n", "2024-12-06T18:00:00.5+08:00 stdout F done\n"]
    assert [line for _, line in ContainerLog(records)] == ["\n", "done\n"]


def test_unwrap_text_keeps_a_plain_text_as_it_is() -> None:
    text = "a\r\nb"
    assert unwrap_text(text) is text
    assert unwrap_text("".join(cri([("stdout", "a"), ("stdout", LONG)]))) == "a\n" + LONG + "\n"
