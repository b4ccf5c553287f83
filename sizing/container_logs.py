"""Container runtimes' log files, unwrapped to the lines the program wrote.

Pure: lines in, lines out. A log copied from a node (``/var/log/pods/.../0.log``, ``/var/log/containers``,
``/var/lib/docker/containers/ID/ID-json.log``) is not what the program printed but the runtime's record of
it:

* **CRI** (containerd, CRI-O: every Kubernetes node since dockershim left): ``TIMESTAMP STREAM TAG MESSAGE``,
  the tag ``F`` for a full line and ``P`` for a partial one: the runtime cuts a line longer than its buffer
  (16 KiB in containerd and CRI-O) into partial records followed by a full one (the Kubernetes CRI logging
  design, ``kubelet/kuberuntime/logs``);
* **Docker json-file**: one JSON object a record, ``{"log": "...\\n", "stream": "stdout", "time": "..."}``;
  a line longer than 16 KiB is cut the same way, each record but the last without the trailing ``\\n`` in its
  ``log`` (moby ``daemon/logger/jsonfilelog``).

Read as they are, a long line (a gateway's JSON access record with the request's messages, vLLM's engine
config) comes out in pieces with a timestamp in the middle: the readers lost the row or misread a number cut
in two. :class:`ContainerLog` tells the format from the first record that is not blank and joins the pieces
per stream (stdout and stderr records interleave); a file of any other kind passes through unchanged.
"""

from __future__ import annotations

import enum
import itertools
import json
import re
from collections.abc import Iterable, Iterator

# containerd writes "TIMESTAMP STREAM TAG MESSAGE\n", TAG being P or F, possibly followed by ":"-joined extra
# tags (the CRI's LogTagDelimiter); the timestamp is RFC 3339 with nanoseconds.
_CRI = re.compile(
    r"^(\d{4}-\d\d-\d\dT[0-9:.]+(?:Z|[+-]\d\d:?\d\d)) (stdout|stderr) ([PF])(?::\S*)? ?(.*)$", re.S
)
_DOCKER_START = re.compile(r'^\s*\{\s*"log"\s*:')


class LogKind(enum.Enum):
    """What a log file holds: the program's own lines, or a container runtime's records of them."""

    PLAIN = "plain"
    CRI = "cri"
    DOCKER_JSON = "docker-json"


def _line_end(line: str) -> str:
    return line.removesuffix("\n").removesuffix("\r")


def _docker_record(line: str) -> tuple[str, str] | None:
    """The stream and text of a json-file record; None where the line is not one."""
    if not _DOCKER_START.match(line):
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("log"), str):
        return None
    stream = record.get("stream")
    return (stream if isinstance(stream, str) else "", record["log"])


def detect(line: str) -> LogKind:
    """The kind of log whose first record (not blank) is ``line``."""
    if _CRI.match(_line_end(line)):
        return LogKind.CRI
    if _docker_record(line) is not None:
        return LogKind.DOCKER_JSON
    return LogKind.PLAIN


class ContainerLog:
    """The lines a program wrote, from the lines of its log file (as a file gives them, ends kept).

    Iterating gives ``(number, line)``: the line number in the file where the program's line begins (its
    first partial record) and the line, ending in ``\\n`` where the program ended it. ``kind`` says what the
    file is once the first record has been read. Records of a wrapped log that are not the runtime's (a line
    pasted in) pass through as they are."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = lines
        self.kind = LogKind.PLAIN

    def __iter__(self) -> Iterator[tuple[int, str]]:
        numbered = enumerate(self._lines, start=1)
        for number, line in numbered:
            if line.strip():
                self.kind = detect(line)
                break
            yield number, line
        else:
            return
        if self.kind is LogKind.PLAIN:  # the common case, at the speed of the file's own lines
            yield number, line
            yield from numbered
            return
        yield from self._joined(itertools.chain([(number, line)], numbered))

    def _joined(self, numbered: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
        pending: dict[str, tuple[int, list[str]]] = {}  # per stream: where the line began, its pieces
        for number, line in numbered:
            piece = self._piece(line)
            if piece is None:
                yield number, line
                continue
            stream, text, full = piece
            start, parts = pending.pop(stream, (number, []))
            parts.append(text)
            if full:
                yield start, _join(parts)
            else:
                pending[stream] = (start, parts)
        # a file cut while a long line was being written: what arrived of it
        for start, parts in sorted(pending.values()):
            yield start, _join(parts)

    def _piece(self, line: str) -> tuple[str, str, bool] | None:
        """(stream, text, whether the program's line ends here) of one record; None where it is not one."""
        if self.kind is LogKind.CRI:
            match = _CRI.match(_line_end(line))
            if match is None:
                return None
            full = match.group(3) == "F"
            return match.group(2), match.group(4) + ("\n" if full else ""), full
        record = _docker_record(line)
        if record is None:
            return None
        stream, text = record
        return stream, text, text.endswith("\n")


def _join(parts: list[str]) -> str:
    """The pieces of one line as one. The runtime cut it at a byte count, maybe inside a character: a file
    read keeping the bytes it could not decode (``surrogateescape``) has that character's bytes at the end of
    one piece and the start of the next, whole again once joined."""
    joined = "".join(parts)
    if len(parts) == 1:
        return joined
    try:
        return joined.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate of another kind (a JSON "\ud800"): nothing to mend
        return joined


def unwrap_text(text: str) -> str:
    """The program's own text of a log that may be a container runtime's (:class:`ContainerLog`)."""
    log = ContainerLog(text.splitlines(keepends=True))
    lines = [line for _, line in log]
    return text if log.kind is LogKind.PLAIN else "".join(lines)
