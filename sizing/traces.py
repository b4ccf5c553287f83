"""Request traces: one record type and the readers of the trace formats, text in, requests out.

Pure like the rest of ``sizing``: the shell reads the file and hands over its text and a name for messages.
Two readers, for two jobs:

* :func:`parse_columns` (and :func:`read_trace`, row by row) finds the time and token columns by name in any
  of the published per-request traces (Azure LLM CSV with datetimes, BurstGPT CSV with seconds, Mooncake
  JSONL with milliseconds) and in gateways' logs (OpenAI-style usage, nested or not; LiteLLM spend logs;
  Alibaba Cloud SLS exports; Higress's ai_log), also as a container runtime keeps them on the node
  (:mod:`sizing.container_logs`), and skips rows with zero tokens (BurstGPT's failed requests): what ``fleet
  size --trace`` sizes for and ``fleet simulate --workload trace:FILE`` replays;
* :func:`parse_azure_csv` and :func:`parse_mooncake_jsonl` read the two formats the simulator replays,
  strictly (the exact header or keys), sorted and restarted at 0 s, every request at least one token each way.

Bad text raises :class:`TraceError` with one line that names the source and the line in it.
"""

from __future__ import annotations

import collections
import csv
import enum
import io
import itertools
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sizing.container_logs import ContainerLog, LogKind
from sizing.errors import SizingInputError


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace: when it arrives (seconds from the trace's start) and its token counts."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int


class TraceError(SizingInputError):
    """A trace that cannot be read; the message names the source (and the row) in one line."""


# Column names as the published traces and the gateways' logs spell them, lower-cased: LiteLLM's spend logs
# (startTime), Alibaba Cloud SLS exports (__time__), OpenAI-style responses (created), others' created_at.
_TIME_KEYS = (
    "timestamp",
    "arrival_s",
    "arrival_time",
    "time",
    "starttime",
    "start_time",
    "__time__",
    "created",
    "created_at",
    "request_time",
)
# Higress's ai-statistics plugin logs input_token / output_token in its "ai_log" field, a JSON object as text.
_PROMPT_KEYS = (
    "contexttokens",
    "request tokens",
    "input_length",
    "prompt_tokens",
    "input_tokens",
    "input_token",
)
_OUTPUT_KEYS = (
    "generatedtokens",
    "response tokens",
    "output_length",
    "output_tokens",
    "completion_tokens",
    "output_token",
)
AZURE_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
# The byte-order mark Excel writes at the start of a UTF-8 CSV: read as text it is glued to the first column's
# name ("\ufeffTIMESTAMP"), so a reader that decodes with plain utf-8 passes it on; the parsers drop it.
BOM = "\ufeff"


# ------------------------------------------------------------------------------------ any trace, by columns
def _json_line(source: str, number: int, line: str) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        if line.strip() == "{":  # jq's default output, one field a line
            raise TraceError(
                f"{source}: line {number}: a JSON object over several lines, not JSON lines (one object a "
                "line): convert it with jq -c ."
            ) from None
        raise TraceError(f"{source}: line {number}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    except RecursionError:  # the parser recurses per level: 100,000 nested '[' exhaust the stack
        raise TraceError(f"{source}: line {number}: nested too deeply to be a trace row") from None


_HEADER_AGAIN = object()  # what _rows gives for a CSV row that repeats the header
_NOT_JSON = object()  # what _rows gives for a log's line that is not JSON (the program's other output)
_NOT_ROW = object()  # what _rows gives for a log's line that is not a CSV row of the header's width


class _LogRow(dict[str, str]):
    """A CSV row among a program's other output: one whose token cells are not numbers is one of its other
    lines that happens to have the header's width (``WARNING: slow, retrying, 3 s``), skipped, not refused."""


# Any: rows are CSV dicts of strings or whatever JSON each line holds; each is checked where it is read
def _rows(
    lines: Iterable[str], source: str, *, jsonl: bool, other_lines: bool = False
) -> Iterator[tuple[int, Any]]:
    """The rows one at a time with their line in the file (a JSON line's first piece in a container's log;
    where a CSV row spans several, the line it ends on), as the lines come (a file of a million rows is never
    held whole). A container runtime's log (CRI, Docker json-file) is unwrapped first, its long lines
    joined again (:mod:`sizing.container_logs`)."""
    log = ContainerLog(_without_bom(lines))
    if jsonl:
        yield from _json_rows(log, source, other_lines)
        return
    numbered = iter(log)
    head: list[tuple[int, str]] = []  # up to the header line, to see its delimiter
    for item in numbered:
        head.append(item)
        if item[1].strip():
            break
    if other_lines or log.kind is not LogKind.PLAIN:
        yield from _log_csv_rows(itertools.chain(head, numbered), source)
        return
    number = 0

    def text() -> Iterator[str]:
        nonlocal number
        for number, line in itertools.chain(head, numbered):  # noqa: B007  # the line each row ends on
            yield line

    try:
        reader = csv.reader(text(), delimiter=_delimiter(head[-1][1] if head else ""))
        header = next(reader, None)
        if header is None:
            raise TraceError(f"{source}: the file is empty")
        _check_header(source, header)
        for values in reader:
            if not values:
                continue
            # a header again: logs exported in parts and joined with cat carry one per part
            row = _HEADER_AGAIN if values == header else dict(zip(header, values, strict=False))
            yield number, row
    except csv.Error as exc:
        raise TraceError(f"{source}: line {number}: cannot parse the trace ({exc})") from None


def _cells(line: str, delimiter: str) -> list[str] | None:
    """One line's CSV cells, None where it is blank or not CSV."""
    if not line.strip():
        return None
    if '"' not in line:  # nothing quoted: the cells as the csv module would give them
        return line.rstrip("\r\n").split(delimiter)
    try:
        return next(csv.reader([line], delimiter=delimiter), None)
    except csv.Error:
        return None


def _names_columns(cells: list[str]) -> int:
    """How much CSV cells name of a trace's header: 2 a time, a prompt and an output column, 1 a time column
    only (the counts may be in a JSON cell: an SLS export's ``usage``), else 0."""
    names = {cell.strip().lower(): "" for cell in cells}
    if _find(names, _TIME_KEYS, False) is None:
        return 0
    return 2 if all(_find(names, keys, False) is not None for keys in (_PROMPT_KEYS, _OUTPUT_KEYS)) else 1


def _log_csv_rows(numbered: Iterator[tuple[int, str]], source: str) -> Iterator[tuple[int, Any]]:
    """CSV rows among a program's other output (a container runtime's log, a log named neither ``.csv`` nor
    ``.tsv``), each line read on its own: the header is the first line that names the three columns, else
    the first that names a time column (within ``LOOKAHEAD_ROWS``); a line before it or after it that is
    not a row of its width is ``_NOT_ROW``, to be counted, not refused (an unclosed quote in a message no
    longer swallows the rows after it)."""
    ahead: list[tuple[int, str]] = []
    found: dict[int, int] = {}  # how much a line names (_names_columns): the first line's index in ahead
    for number, line in numbered:
        ahead.append((number, line))
        cells = _cells(line, _delimiter(line))
        named = _names_columns(cells) if cells is not None else 0
        if named:
            found.setdefault(named, len(ahead) - 1)
        if named == 2 or len(ahead) >= LOOKAHEAD_ROWS:
            break
    if not found:
        first = next((cells for _, line in ahead if (cells := _cells(line, _delimiter(line)))), None)
        if first is None:
            raise TraceError(f"{source}: the file is empty")
        names = [cell.strip().lower() for cell in first]
        raise TraceError(f"{source}: no line of the log is a CSV header: {_missing_columns(names)}")
    at = found.get(2, found.get(1, 0))
    delimiter = _delimiter(ahead[at][1])
    header = _cells(ahead[at][1], delimiter) or []
    _check_header(source, header)
    for number, line in ahead[:at]:
        if line.strip():
            yield number, _NOT_ROW  # the program's lines before its header (start-up messages)
    for number, line in itertools.chain(ahead[at + 1 :], numbered):
        if not line.strip():
            continue
        cells = _cells(line, delimiter)
        if cells == header:
            yield number, _HEADER_AGAIN
        elif cells is None or len(cells) != len(header):
            yield number, _NOT_ROW
        else:
            yield number, _LogRow(zip(header, cells, strict=True))


def _json_rows(log: ContainerLog, source: str, other_lines: bool) -> Iterator[tuple[int, Any]]:
    """JSON lines; in a program's log (``other_lines``, or a container runtime's) a line that is not JSON is
    the program's other output (a start-up message), given as ``_NOT_JSON`` to be counted, not refused."""
    first, blank = True, True
    for n, line in log:
        stripped = line.strip()
        if not stripped:
            continue
        blank = False
        mixed = other_lines or log.kind is not LogKind.PLAIN
        if mixed and not stripped.startswith(("{", "[")):
            yield n, _NOT_JSON  # a gateway container's start-up messages among its access records
            continue
        # a JSON array, pretty-printed ("[" alone on the first line) or on one line
        array = first and stripped == "["
        value = None if array else _json_line(source, n, line)
        if array or (first and isinstance(value, list)):
            raise TraceError(
                f"{source}: holds a JSON array, not JSON lines (one object a line): "
                "convert it with jq -c '.[]'"
            )
        first = False
        yield n, value
    if blank:
        raise TraceError(f"{source}: the file is empty")


def _delimiter(header: str) -> str:
    """A comma, unless the header has none and has tabs (a TSV export: Hive, spreadsheets) or semicolons (a
    spreadsheet saved where the comma is the decimal mark)."""
    if "," not in header:
        for other in ("\t", ";"):
            if other in header:
                return other
    return ","


def _check_header(source: str, header: list[str]) -> None:
    """A column the reader may use named twice is refused: which of the two holds the counts is a guess (the
    last one was taken)."""
    wanted = set(_TIME_KEYS + _PROMPT_KEYS + _OUTPUT_KEYS)
    names = [h.strip().lower() for h in header]
    twice = sorted({n for n in names if n in wanted and names.count(n) > 1})
    if twice:
        raise TraceError(f"{source}: the header names {', '.join(twice)} twice: keep one column of each")


def _without_bom(lines: Iterable[str]) -> Iterator[str]:
    first = True
    for line in lines:
        yield line.removeprefix(BOM) if first else line
        first = False


# How many rows the column search reads ahead for token counts nested in an object that the first rows lack
# (an OpenAI-style log whose failed requests come first with "usage": null).
LOOKAHEAD_ROWS = 1000
_NESTED_DEPTH = 3  # usage.prompt_tokens; response.body.usage.prompt_tokens (an OpenAI batch output)

# A column: its name, or the path to it through objects nested in a row (``("usage", "prompt_tokens")``).
Column = tuple[str, ...]


def _as_object(value: object, json_text: bool) -> dict[str, Any] | None:
    """A nested object of a row: a JSON object, or (``json_text``) a CSV cell or a JSON string holding one as
    text (an SLS export quotes a JSON field so; Higress logs its ai_log so)."""
    if isinstance(value, dict):
        return value
    if json_text and isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            got = json.loads(value)
        except (ValueError, RecursionError):
            return None
        return got if isinstance(got, dict) else None
    return None


def _find(row: dict[str, Any], names: tuple[str, ...], json_text: bool, depth: int = 0) -> Column | None:
    """The first of ``names`` in the row (case and spaces around ignored), else in objects nested in it."""
    keys = {k.strip().lower(): k for k in row if isinstance(k, str)}
    for name in names:
        if name in keys:
            return (keys[name],)
    if depth >= _NESTED_DEPTH:
        return None
    for key, value in row.items():
        inner = _as_object(value, json_text)
        if inner is not None and isinstance(key, str):
            found = _find(inner, names, False, depth + 1)
            if found is not None:
                return (key, *found)
    return None


def _get(row: dict[str, Any], column: Column, json_text: bool) -> Any:
    """The row's value at ``column``; None where the row lacks it."""
    value: Any = row.get(column[0])
    if len(column) == 1:
        return value
    for key in column[1:]:
        inner = _as_object(value, json_text)
        if inner is None:
            return None
        value = inner.get(key)
    return value


def _names(row: dict[str, Any], json_text: bool) -> list[str]:
    """The row's column names, with those of its nested objects as ``usage.prompt_tokens``."""
    out: list[str] = []
    for key, value in row.items():
        if not isinstance(key, str):
            continue
        out.append(key.strip().lower())
        inner = _as_object(value, json_text)
        if inner is not None:
            out.extend(f"{key.strip().lower()}.{k.strip().lower()}" for k in inner if isinstance(k, str))
    return out


def _columns(
    source: str, rows: Iterator[tuple[int, Any]], json_text: bool
) -> tuple[tuple[Column, Column, Column], list[tuple[int, Any]]]:
    """The time, prompt and output columns, from the first row that has all three (within
    ``LOOKAHEAD_ROWS``), and the rows read to find them."""
    read: list[tuple[int, Any]] = []
    for number, row in rows:
        read.append((number, row))
        if id(row) in _SENTINELS:
            continue
        if not isinstance(row, dict):
            break
        found = [_find(row, keys, json_text) for keys in (_TIME_KEYS, _PROMPT_KEYS, _OUTPUT_KEYS)]
        if found[0] is not None and found[1] is not None and found[2] is not None:
            return (found[0], found[1], found[2]), read
        if len(read) >= LOOKAHEAD_ROWS:
            break
    first = next((row for _, row in read if isinstance(row, dict)), None)
    names = _names(first, json_text) if first is not None else []
    raise TraceError(f"{source}: {_missing_columns(names)}")


def _missing_columns(names: list[str]) -> str:
    """What a file without the three columns lacks, in one line; a log with only a total count is told that
    the split is what the model needs (prefill and decode cost differently: no split can be guessed)."""
    found = ", ".join(names) or "none"
    if any(n.split(".")[-1] in _TOTAL_KEYS for n in names):
        return (
            f"has total tokens but not the prompt / output split the sizing model needs (prefill and decode "
            f"cost differently); log both counts (OpenAI-style usage.prompt_tokens and "
            f"usage.completion_tokens, or input_tokens and output_tokens); found {found}"
        )
    return (
        f"needs a time column ({'/'.join(_TIME_KEYS)}), "
        f"prompt tokens ({'/'.join(_PROMPT_KEYS)}) "
        f"and output tokens ({'/'.join(_OUTPUT_KEYS)}), at the top of a row or in an object in it "
        f"(usage.prompt_tokens); found {found}"
    )


_TOTAL_KEYS = ("total_tokens", "totaltokens", "total tokens", "total_token", "tokens")


class TimeUnit(enum.Enum):
    """The unit of a trace's numeric times, and what they are divided by to give seconds."""

    S = "s"
    MS = "ms"
    US = "us"
    NS = "ns"

    @property
    def divisor(self) -> float:
        return {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[self.value]


# A numeric time above this is epoch milliseconds, whatever the format says (year 5138 in seconds, 1973 in
# milliseconds): a gateway log's epoch-ms column read as seconds replayed a thousand times too slowly. The
# same rule as the CLI's other epoch inputs (fleet/diagnose/model.py).
EPOCH_MS_ABOVE = 1e11
# Above these, epoch microseconds (1973 in us, year 5138 in ms) and nanoseconds (1973 in ns): Go and Java
# gateways and OpenTelemetry exports write them, and read as milliseconds they replayed 1000 x too slowly.
EPOCH_US_ABOVE = 1e14
EPOCH_NS_ABOVE = 1e17
# A column with numbers on both sides of one of these sizes is of one unit where it runs on across it: its
# smallest number above within this factor of its largest below (milliseconds from the start pass 1e11 3.2
# years in); an epoch-ms time (1.4e12 and more since 2015) among smaller ones is at least 14 times them.
CROSSING_GAP = 2.0
_EPOCH_UNITS = ((EPOCH_NS_ABOVE, TimeUnit.NS), (EPOCH_US_ABOVE, TimeUnit.US), (EPOCH_MS_ABOVE, TimeUnit.MS))
# In JSON lines a number is milliseconds from the start (Mooncake), unless the column's smallest time is a
# date in epoch seconds that a log could hold: 2015-01-01 (1.42e9) to 2100-01-01 (4.1e9). Below 1e9 both
# readings agree on ms (epoch seconds before 2001 are no LLM's); between 1e9 and 1.42e9, or past 4.1e9, a
# trace is milliseconds from its start (11.6 days and more into it). In between it is a guess, and said so.
EPOCH_S_FROM = 1_420_070_400.0
EPOCH_S_UNTIL = 4_102_444_800.0
# Columns that are epoch seconds by their format's definition: OpenAI's created, SLS's __time__.
_EPOCH_S_NAMES = frozenset({"created", "__time__"})


def _magnitude(value: float) -> TimeUnit | None:
    """The epoch unit a time's size alone tells (milliseconds and finer), None below epoch milliseconds."""
    size = abs(value)
    for above, unit in _EPOCH_UNITS:
        if size > above:
            return unit
    return None


def _band(value: float) -> tuple[float, float]:
    """The sizes (exclusive, inclusive) that share ``value``'s :func:`_magnitude`: one comparison a row."""
    edges = (-1.0, EPOCH_MS_ABOVE, EPOCH_US_ABOVE, EPOCH_NS_ABOVE, math.inf)
    size = abs(value)
    return next((lo, hi) for lo, hi in itertools.pairwise(edges) if size <= hi)


def time_unit(name: str, low: float, *, jsonl: bool) -> tuple[TimeUnit, bool]:
    """The unit of a column of numeric times named ``name`` whose smallest time is ``low``, and whether that
    is a guess (epoch seconds or milliseconds from the start, both plausible): epoch ns, us or ms by size;
    seconds in a CSV or a column named ``arrival_s``; in JSON lines milliseconds (Mooncake), except epoch
    seconds under a name that means them or at a size that reads as a date of 2015-2099."""
    unit = _magnitude(low)
    if unit is not None:
        return unit, False
    if not jsonl or name == "arrival_s":
        return TimeUnit.S, False
    if low < 1e9:
        return TimeUnit.MS, False
    if name in _EPOCH_S_NAMES:
        return TimeUnit.S, False
    if EPOCH_S_FROM <= low < EPOCH_S_UNTIL:
        return TimeUnit.S, True
    return TimeUnit.MS, False


def parse_columns(text: str, source: str, *, jsonl: bool) -> tuple[TraceRequest, ...]:
    """Requests of a trace (``jsonl``: one JSON object a line, else CSV with a header), sorted by arrival.

    Rows with zero tokens (failed requests in BurstGPT) are skipped; fewer than two usable requests fail.
    Numeric times are read in the unit :func:`time_unit` tells from the whole column."""
    return read_trace(io.StringIO(text, newline=""), source, jsonl=jsonl).requests


def parse_trace(text: str, source: str, *, jsonl: bool) -> tuple[tuple[TraceRequest, ...], float | None]:
    """``parse_columns``'s requests, and from the same rows the share of the prompt tokens in a prefix seen
    before (``prefix_share``; None for CSV, which carries no prefix ids)."""
    got = read_trace(io.StringIO(text, newline=""), source, jsonl=jsonl)
    return got.requests, got.prefix_share


@dataclass(frozen=True, slots=True)
class TraceRead:
    """What :func:`read_trace` read: the requests sorted by arrival, the prefix share of a JSONL trace with
    Mooncake's ``hash_ids`` (None otherwise), how many rows it had and why it skipped those it skipped, and
    where its numeric times' unit was a guess, the guess (``unit_guess``: one line to warn with) and the unit
    to give where it is not so (``unit_hint``)."""

    requests: tuple[TraceRequest, ...]
    prefix_share: float | None = None
    rows: int = 0
    skipped: tuple[tuple[str, int], ...] = ()
    unit_guess: str | None = None
    unit_hint: str = "ms"  # the time unit to give where the guess is not so

    def skipped_note(self) -> str | None:
        """``N of M rows skipped: ...`` with the count of each reason, None when none was skipped."""
        return _skipped_note(self.rows, self.skipped)

    def repeated_note(self) -> str | None:
        """A warning where many requests repeat another one exactly (the same time and token counts), as a
        log exported or collected twice gives (its load read double); None otherwise. They are kept: a
        client replaying one prompt at a coarse clock repeats rows too."""
        seen = collections.Counter((r.arrival_s, r.prompt_tokens, r.output_tokens) for r in self.requests)
        repeats = sum(n - 1 for n in seen.values())
        if repeats < REPEATED_MIN or repeats < REPEATED_SHARE * len(self.requests):
            return None
        return (
            f"{repeats} of {len(self.requests)} requests repeat another exactly "
            "(same time and token counts): a log exported or collected twice reads as twice the load; "
            "remove the copies if that is so"
        )


# Repeated requests are warned of from this many, and this share of the requests, on (TraceRead.repeated_note)
REPEATED_MIN = 10
REPEATED_SHARE = 0.1

# Why a row is skipped, in the order the note lists them.
NO_TOKENS = "with no token counts"
ZERO_TOKENS = "with zero tokens (failed requests)"
NEGATIVE_TOKENS = "with negative token counts"
NO_TIME = "with no time"
BAD_TIME = "with a time that is not finite"
HEADER_AGAIN = "repeating the header"
NOT_JSON = "not JSON (the log's other lines)"
NOT_ROW = "not rows of the CSV trace (the log's other lines)"
_REASONS = (ZERO_TOKENS, NO_TOKENS, NEGATIVE_TOKENS, NO_TIME, BAD_TIME, HEADER_AGAIN, NOT_JSON, NOT_ROW)
_SENTINELS = {id(_HEADER_AGAIN): HEADER_AGAIN, id(_NOT_JSON): NOT_JSON, id(_NOT_ROW): NOT_ROW}
# Cell text that means no value: what exports write for a null.
_EMPTY = frozenset({"", "null", "none", "nan", "n/a", "na", "-"})
# More tokens than any model's context (the longest, Llama 4 Scout's, is 10M): a count past this is a
# corrupt cell or a byte count, and summed into a sizing it overflowed the simulator's arithmetic.
MAX_TOKENS = 100_000_000


def _skipped_note(rows: int, skipped: tuple[tuple[str, int], ...]) -> str | None:
    total = sum(count for _, count in skipped)
    if not total:
        return None
    return f"{total} of {rows} rows skipped: " + ", ".join(f"{count} {why}" for why, count in skipped)


def read_trace(
    lines: Iterable[str],
    source: str,
    *,
    jsonl: bool,
    unit: TimeUnit | None = None,
    other_lines: bool = False,
) -> TraceRead:
    """:func:`parse_columns` over lines as a file gives them (opened with ``newline=""``), read one row at a
    time: the shell hands over an open file, plain or gzip, and only the requests are kept. ``unit`` is the
    unit of numeric times where the user gave it; without, the column tells (:func:`time_unit`).
    ``other_lines``: a trace in a program's log among its other output, as in a container runtime's log
    (whatever this says): JSON lines whose lines that are not JSON are skipped and counted, or a CSV whose
    header is the first line naming the columns and whose lines that are not rows of its width are."""
    rows = _rows(lines, source, jsonl=jsonl, other_lines=other_lines)
    pending: list[tuple[int, Any]] = []
    for item in rows:  # rows before the first request row: a header repeated, a container's own lines
        pending.append(item)
        if id(item[1]) not in _SENTINELS:
            break
    if not pending or not isinstance(pending[-1][1], dict):
        raise TraceError(f"{source}: the trace has no request rows")
    shares = _PrefixShare() if jsonl else None
    times = _Times(source, jsonl, unit)
    skips: dict[str, int] = {}
    requests, seen = _requests(source, itertools.chain(pending, rows), times, shares, skips)
    out = tuple(sorted(times.in_seconds(requests), key=lambda r: r.arrival_s))
    skipped = tuple((why, skips[why]) for why in _REASONS if skips.get(why))
    if len(out) < 2:
        note = _skipped_note(seen, skipped)
        raise TraceError(f"{source}: fewer than two usable requests" + (f" ({note})" if note else ""))
    prefix = shares.value() if shares is not None else None
    return TraceRead(out, prefix, seen, skipped, times.guess, times.hint)


class _Times:
    """A trace's times as they are read: datetimes to seconds from the first, numbers kept as they are
    written until the whole column is seen, then put in seconds in the unit it tells (:func:`time_unit`).
    Refuses a column that mixes datetimes and numbers, zones and none, or numbers of two epoch units."""

    def __init__(self, source: str, jsonl: bool, unit: TimeUnit | None) -> None:
        self.source, self.jsonl, self.unit = source, jsonl, unit
        self.name = ""
        self.kind: str | None = None  # "number" or "datetime", from the first time read
        self.zone: bool | None = None  # whether the first datetime had a zone
        self.t0: datetime | None = None
        self.low: tuple[float, int, object] | None = None  # the smallest number, its line and text
        # per band of sizes (_band) the column has numbers in: its first row's line and text, the smallest
        # and the largest size in it
        self.bands: dict[tuple[float, float], list[Any]] = {}
        self.band: tuple[float, float] | None = None  # the last number's band, to look up once a band
        self.guess: str | None = None
        self.hint = "ms"  # the unit the guess's alternative is

    def read(self, n: int, raw: object) -> float:
        """The row's time: seconds for a datetime, the number as written for a number."""
        t = _number(raw)
        kind = "number" if t is not None else "datetime"
        if self.kind is None:
            self.kind = kind
        elif kind != self.kind:
            raise TraceError(
                f"{self.source}: line {n}: time {raw!r} is a {kind} where the first row's is a {self.kind}: "
                "give every time the same way"
            )
        if t is not None:
            self._check_unit(n, t, raw)
            return t
        stamp = _datetime(self.source, n, raw)
        if self.zone is None:
            self.zone, self.t0 = stamp.tzinfo is not None, stamp
        elif self.zone != (stamp.tzinfo is not None):
            has = (
                "has no zone where the first row's has one"
                if self.zone
                else "has a zone, the first one's not"
            )
            raise TraceError(f"{self.source}: line {n}: time {raw!r} {has}: give every time the same way")
        assert self.t0 is not None
        return (stamp - self.t0).total_seconds()

    def _check_unit(self, n: int, t: float, raw: object) -> None:
        if self.unit is not None or not math.isfinite(t):
            return
        size = abs(t)
        if self.band is None or not self.band[0] < size <= self.band[1]:
            self.band = _band(t)
        seen = self.bands.get(self.band)
        if seen is None:
            self.bands[self.band] = [n, raw, size, size]
        elif size < seen[2]:
            seen[2] = size
        elif size > seen[3]:
            seen[3] = size
        if self.low is None or t < self.low[0]:
            self.low = (t, n, raw)

    def _across(self, unit: TimeUnit) -> TimeUnit:
        """The unit of a column that runs on across 1e11 (:meth:`_one_unit`): milliseconds from the start
        where its smallest time tells seconds (past 1e11 no seconds are: 3,170 years), and the reading said,
        as microseconds from the start pass 1e11 27.8 hours in and nanoseconds 100 s in."""
        assert self.low is not None
        if unit is TimeUnit.S:
            unit = TimeUnit.MS
        high = max(seen[3] for seen in self.bands.values())
        days = (high - self.low[0]) / unit.divisor / 86_400
        self.hint = "us"
        self.guess = (
            f"numeric times run from {self.low[2]!r} past 1e11 (the size of epoch ms) without a gap: "
            f"read as {_UNIT_WORDS[unit]} from the trace's start ({days:.0f} days); if they are "
            "microseconds or nanoseconds from it, give that time unit"
        )
        return unit

    def _one_unit(self) -> bool:
        """Whether the numbers run on across a band's edge; refuses numbers of two units: sizes in two bands
        of :func:`_magnitude` with a gap between them. A
        column that runs on across a band's edge (milliseconds from the start past 1e11, 3.2 years in) is of
        one unit: the smallest size past the edge is within ``CROSSING_GAP`` times the largest below it, where
        an epoch-ms time (1.4e12 and more since 2015) among smaller numbers is 14 times them and more."""
        if len(self.bands) < 2:
            return False
        order = sorted(self.bands)
        groups = [[order[0]]]
        for lower, upper in itertools.pairwise(order):
            if lower[1] == upper[0] and self.bands[upper][2] <= CROSSING_GAP * self.bands[lower][3]:
                groups[-1].append(upper)
            else:
                groups.append([upper])
        if len(groups) == 1:
            return True
        first = min(self.bands, key=lambda band: self.bands[band][0])  # the band of the column's first row
        home = next(group for group in groups if first in group)
        other = min((b for b in self.bands if b not in home), key=lambda band: self.bands[band][0])
        line, text, size = self.bands[first][:3]
        n, raw, other_size = self.bands[other][:3]
        raise TraceError(
            f"{self.source}: line {n}: time {raw!r} ({_unit_words(other_size)}) is not in the unit of line "
            f"{line}'s {text!r} ({_unit_words(size)}): give every time in one unit"
        )

    def in_seconds(self, requests: list[TraceRequest]) -> list[TraceRequest]:
        """The requests with numeric times put in seconds (datetimes already are)."""
        if self.kind != "number" or (self.low is None and self.unit is None):
            return requests
        unit = self.unit
        if unit is None:
            assert self.low is not None
            unit, guessed = time_unit(self.name, self.low[0], jsonl=self.jsonl)
            if self._one_unit():
                unit = self._across(unit)
            elif guessed:
                self.guess = (
                    f"numeric times read as epoch seconds (the smallest, {self.low[2]!r}, as "
                    f"{datetime.fromtimestamp(self.low[0], UTC):%Y-%m-%dT%H:%M:%SZ}); if they are "
                    "milliseconds from the trace's start, give the time unit ms"
                )
        if unit is TimeUnit.S:
            return requests
        d = unit.divisor
        return [TraceRequest(r.arrival_s / d, r.prompt_tokens, r.output_tokens) for r in requests]


_UNIT_WORDS = {
    TimeUnit.S: "seconds",
    TimeUnit.MS: "milliseconds",
    TimeUnit.US: "microseconds",
    TimeUnit.NS: "nanoseconds",
}


def _unit_words(value: float) -> str:
    unit = _magnitude(value)
    return f"epoch {unit.value} by its size" if unit is not None else "too small for epoch ms"


def _requests(
    source: str,
    rows: Iterator[tuple[int, Any]],
    times: _Times,
    shares: _PrefixShare | None,
    skips: dict[str, int],
) -> tuple[list[TraceRequest], int]:
    """The usable requests of the rows, in file order, with their times as :class:`_Times` reads them, and
    how many rows there were; ``skips`` counts the rows skipped by reason."""
    json_text = True  # a CSV's cells, and a JSON line's strings (Higress's ai_log), may hold JSON as text
    (tkey, pkey, okey), read = _columns(source, rows, json_text)
    times.name = tkey[-1].strip().lower()
    out: list[TraceRequest] = []
    seen = 0
    for n, row in itertools.chain(read, rows):
        seen += 1
        why = _SENTINELS.get(id(row))
        if why is not None:
            skips[why] = skips.get(why, 0) + 1
            continue
        if not isinstance(row, dict):
            raise TraceError(f"{source}: line {n}: not an object of named fields")
        if shares is not None:
            shares.add(row)
        request = _request(source, n, row, (tkey, pkey, okey), times)
        if isinstance(request, str):
            skips[request] = skips.get(request, 0) + 1
        else:
            out.append(request)
    return out, seen


def _request(
    source: str, n: int, row: dict[str, Any], columns: tuple[Column, Column, Column], times: _Times
) -> TraceRequest | str:
    """The row's request (its time as :class:`_Times` reads it), or why it is skipped. A row among a
    program's other output whose token cells are not numbers is one of its other lines."""
    tkey, pkey, okey = columns
    json_text = True
    prompt_cell, output_cell = _get(row, pkey, json_text), _get(row, okey, json_text)
    try:
        prompt_count = _count(source, n, "prompt", prompt_cell)
        output_count = _count(source, n, "output", output_cell)
    except TraceError:
        if isinstance(row, _LogRow):
            return NOT_ROW
        raise
    prompt = _bounded(source, n, "prompt", prompt_count, prompt_cell)
    output = _bounded(source, n, "output", output_count, output_cell)
    raw = _get(row, tkey, json_text)
    if prompt is None or output is None:
        return NO_TOKENS
    if prompt < 0 or output < 0:
        return NEGATIVE_TOKENS
    if prompt == 0 or output == 0:
        return ZERO_TOKENS
    if raw is None or (type(raw) is str and raw.strip().lower() in _EMPTY):
        return NO_TIME
    t = times.read(n, raw)
    if not math.isfinite(t):
        return BAD_TIME
    return TraceRequest(t, prompt, output)


def _number(raw: object) -> float | None:
    """A time as a number, None where it is text that is not one (a datetime)."""
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        return None
    try:
        return float(raw)
    except ValueError:
        return None
    except OverflowError:  # an int past a float's range
        return math.inf


def _missing(value: object) -> bool:
    """An empty cell, a JSON null, or a NaN (what pandas and Python's json write for a missing number)."""
    if isinstance(value, float):
        return math.isnan(value)
    return value is None or (isinstance(value, str) and value.strip().lower() in _EMPTY)


def _bounded(source: str, n: int, what: str, count: int | None, value: object) -> int | None:
    """A token count (:func:`_count` of ``value``) within any model's context; None where the row has none."""
    if count is not None and count > MAX_TOKENS:
        raise TraceError(
            f"{source}: line {n}: {what} tokens {value!r} is more than any model's context "
            f"({MAX_TOKENS:,}): not a token count"
        )
    return count


def _count(source: str, n: int, what: str, value: object) -> int | None:
    if type(value) is int:
        return value
    if type(value) is str:
        try:
            return int(value)
        except ValueError:
            pass
    if _missing(value):
        return None
    if isinstance(value, bool):  # JSON true is no count (Python's int 1)
        raise TraceError(f"{source}: line {n}: {what} tokens {value!r} is not a number")
    try:
        number = float(value)  # type: ignore[arg-type]  # checked: TypeError below
        return int(number)
    except (TypeError, ValueError):
        raise TraceError(f"{source}: line {n}: {what} tokens {value!r} is not a number") from None
    except OverflowError:  # 1e400, inf
        raise TraceError(f"{source}: line {n}: {what} tokens {value!r} is not a finite number") from None


# A zone written as a name after the time (SQL exports, Go's time.String): "2024-12-06 10:00:00 UTC".
_UTC_NAMES = (" UTC", " GMT", " +0000 UTC")


def _datetime(source: str, n: int, raw: object) -> datetime:
    text = str(raw).strip()
    for name in _UTC_NAMES:
        if text.endswith(name):
            text = text.removesuffix(name) + "+00:00"
            break
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        pass
    try:  # an access log's local time (nginx $time_local, Apache %t): 06/Dec/2024:10:00:00 +0800
        return datetime.strptime(text.strip("[]"), "%d/%b/%Y:%H:%M:%S %z")
    except ValueError:
        raise TraceError(
            f"{source}: line {n}: time {raw!r} is neither a number nor an ISO-8601 datetime"
        ) from None


# --------------------------------------------------------------------------- the simulator's two formats
def _parse_azure_timestamp(text: str) -> datetime:
    # Azure writes 7 fractional digits (100 ns ticks); datetime takes at most 6, so drop the last one.
    text = text.strip()
    if "." in text:
        head, frac = text.split(".", 1)
        text = f"{head}.{frac[:6]}"
    return datetime.fromisoformat(text)


def parse_azure_csv(text: str, source: str) -> list[TraceRequest]:
    """Azure LLM inference trace (``TIMESTAMP,ContextTokens,GeneratedTokens``); arrivals from the first."""
    # no trailing newline in the published files: splitlines copes
    rows = list(csv.reader(text.removeprefix(BOM).splitlines()))
    if not rows or [c.strip() for c in rows[0]] != AZURE_HEADER:
        raise TraceError(f"{source}: expected the header TIMESTAMP,ContextTokens,GeneratedTokens")
    stamps: list[tuple[datetime, int, int]] = []
    for line_no, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        try:
            stamps.append((_parse_azure_timestamp(row[0]), int(row[1]), int(row[2])))
        except (ValueError, IndexError):
            raise TraceError(
                f"{source}:{line_no}: not a TIMESTAMP,ContextTokens,GeneratedTokens row"
            ) from None
    if not stamps:
        raise TraceError(f"{source}: no requests")
    stamps.sort(key=lambda s: s[0])
    t0 = stamps[0][0]
    return [TraceRequest((ts - t0).total_seconds(), max(1, p), max(1, o)) for ts, p, o in stamps]


MOONCAKE_HASH_BLOCK = 512  # tokens per hash_ids entry in the Mooncake traces (their README)


def prefix_share(rows: Iterable[Any]) -> float | None:
    """The share of a JSONL trace's prompt tokens (its rows, as JSON read them) that repeat a prefix some
    earlier request already had (Mooncake's ``hash_ids``: one id per 512-token prefix block, equal ids for
    equal prefixes), with an unbounded cache: an upper bound on the prefix-cache hit share; None when the rows
    carry no hash_ids."""
    shares = _PrefixShare()
    for row in rows:
        shares.add(row)
    return shares.value()


class _PrefixShare:
    """:func:`prefix_share` one row at a time, so a trace is read once."""

    def __init__(self) -> None:
        self.seen: set[object] = set()
        self.hit = self.total = 0
        self.valid = True

    def add(self, row: Any) -> None:
        if not self.valid:
            return
        try:
            ids, length = row["hash_ids"], int(row["input_length"])
        except (ValueError, KeyError, TypeError):
            self.valid = False
            return
        if not isinstance(ids, list):
            self.valid = False
            return
        run = 0
        for block in ids:
            if not isinstance(block, (int, str)) or block not in self.seen:
                break
            run += 1
        self.hit += min(run * MOONCAKE_HASH_BLOCK, length)
        self.total += length
        self.seen.update(b for b in ids if isinstance(b, (int, str)))

    def value(self) -> float | None:
        return self.hit / self.total if self.valid and self.total else None


def parse_mooncake_jsonl(text: str, source: str) -> list[TraceRequest]:
    """Mooncake FAST'25 trace (``timestamp`` in ms from the start, ``input_length``, ``output_length``)."""
    out: list[TraceRequest] = []
    for line_no, line in enumerate(text.removeprefix(BOM).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out.append(
                TraceRequest(
                    float(row["timestamp"]) / 1000.0,
                    max(1, int(row["input_length"])),
                    max(1, int(row["output_length"])),
                )
            )
        except (ValueError, KeyError, TypeError):
            raise TraceError(
                f"{source}:{line_no}: not a Mooncake row (timestamp, input_length, output_length)"
            ) from None
    if not out:
        raise TraceError(f"{source}: no requests")
    out.sort(key=lambda r: r.arrival_s)
    t0 = out[0].arrival_s
    return [TraceRequest(r.arrival_s - t0, r.prompt_tokens, r.output_tokens) for r in out]
