"""Request traces: one record type and the readers of the trace formats, text in, requests out.

Pure like the rest of ``sizing``: the shell reads the file and hands over its text and a name for messages.
Two readers, for two jobs:

* :func:`parse_columns` (and :func:`read_trace`, row by row) finds the time and token columns by name in any
  of the published per-request traces (Azure LLM CSV with datetimes, BurstGPT CSV with seconds, Mooncake
  JSONL with milliseconds) and in gateways' logs (OpenAI-style usage, nested or not; LiteLLM spend logs;
  Alibaba Cloud SLS exports) and skips rows with zero tokens (BurstGPT's failed requests): what ``fleet size
  --trace`` sizes for and ``fleet simulate --workload trace:FILE`` replays;
* :func:`parse_azure_csv` and :func:`parse_mooncake_jsonl` read the two formats the simulator replays,
  strictly (the exact header or keys), sorted and restarted at 0 s, every request at least one token each way.

Bad text raises :class:`TraceError` with one line that names the source and the row.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
_PROMPT_KEYS = ("contexttokens", "request tokens", "input_length", "prompt_tokens", "input_tokens")
_OUTPUT_KEYS = ("generatedtokens", "response tokens", "output_length", "output_tokens", "completion_tokens")
AZURE_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
# The byte-order mark Excel writes at the start of a UTF-8 CSV: read as text it is glued to the first column's
# name ("\ufeffTIMESTAMP"), so a reader that decodes with plain utf-8 passes it on; the parsers drop it.
BOM = "\ufeff"


# ------------------------------------------------------------------------------------ any trace, by columns
def _json_line(source: str, number: int, line: str) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{source}: line {number}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    except RecursionError:  # the parser recurses per level: 100,000 nested '[' exhaust the stack
        raise TraceError(f"{source}: line {number}: nested too deeply to be a trace row") from None


_HEADER_AGAIN = object()  # what _rows gives for a CSV row that repeats the header


# Any: rows are CSV dicts of strings or whatever JSON each line holds; each is checked where it is read
def _rows(lines: Iterable[str], source: str, *, jsonl: bool) -> Iterator[Any]:
    """The rows one at a time, as the lines come (a file of a million rows is never held whole)."""
    lines = _without_bom(lines)
    if jsonl:
        first = True
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            # a JSON array, pretty-printed ("[" alone on the first line) or on one line
            array = first and line.strip() == "["
            value = None if array else _json_line(source, n, line)
            if array or (first and isinstance(value, list)):
                raise TraceError(
                    f"{source}: holds a JSON array, not JSON lines (one object a line): "
                    "convert it with jq -c '.[]'"
                )
            first = False
            yield value
        return
    try:
        reader = csv.reader(lines)
        header = next(reader, None)
        if header is None:
            return
        _check_header(source, header)
        for values in reader:
            if not values:
                continue
            # a header again: logs exported in parts and joined with cat carry one per part
            yield _HEADER_AGAIN if values == header else dict(zip(header, values, strict=False))
    except csv.Error as exc:
        raise TraceError(f"{source}: cannot parse the trace ({exc})") from None


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
    """A nested object of a row: a JSON object, or in a CSV (``json_text``) a cell holding one as text (an SLS
    export quotes a JSON field so)."""
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
    source: str, rows: Iterator[Any], json_text: bool
) -> tuple[tuple[Column, Column, Column], list[Any]]:
    """The time, prompt and output columns, from the first row that has all three (within
    ``LOOKAHEAD_ROWS``), and the rows read to find them."""
    read: list[Any] = []
    for row in rows:
        read.append(row)
        if row is _HEADER_AGAIN:
            continue
        if not isinstance(row, dict):
            break
        found = [_find(row, keys, json_text) for keys in (_TIME_KEYS, _PROMPT_KEYS, _OUTPUT_KEYS)]
        if found[0] is not None and found[1] is not None and found[2] is not None:
            return (found[0], found[1], found[2]), read
        if len(read) >= LOOKAHEAD_ROWS:
            break
    names = _names(read[0], json_text) if read and isinstance(read[0], dict) else []
    raise TraceError(
        f"{source}: needs a time column ({'/'.join(_TIME_KEYS)}), "
        f"prompt tokens ({'/'.join(_PROMPT_KEYS)}) "
        f"and output tokens ({'/'.join(_OUTPUT_KEYS)}), at the top of a row or in an object in it "
        f"(usage.prompt_tokens); found {', '.join(names) or 'none'}"
    )


# A numeric time above this is epoch milliseconds, whatever the format says (year 5138 in seconds, 1973 in
# milliseconds): a gateway log's epoch-ms column read as seconds replayed a thousand times too slowly. The
# same rule as the CLI's other epoch inputs (fleet/diagnose/model.py).
EPOCH_MS_ABOVE = 1e11
# Above these, epoch microseconds (1973 in us, year 5138 in ms) and nanoseconds (1973 in ns): Go and Java
# gateways and OpenTelemetry exports write them, and read as milliseconds they replayed 1000 x too slowly.
EPOCH_US_ABOVE = 1e14
EPOCH_NS_ABOVE = 1e17
# In JSON lines a number is milliseconds from the start (Mooncake), except from here up: epoch seconds (2001
# on; 11.6 days of milliseconds), as an OpenAI-style ``created`` is; read as milliseconds it replayed a log
# 1000 x too fast.
EPOCH_S_ABOVE = 1e9


def _time_divisor(first: float, millis: bool) -> float:
    """What a trace's numeric times are divided by to give seconds, from the magnitude of its first one (so a
    file keeps one unit): epoch ns, us or ms by size, epoch seconds, else the format's unit."""
    size = abs(first)
    for above, divisor in ((EPOCH_NS_ABOVE, 1e9), (EPOCH_US_ABOVE, 1e6), (EPOCH_MS_ABOVE, 1000.0)):
        if size > above:
            return divisor
    return 1000.0 if millis and size < EPOCH_S_ABOVE else 1.0


def parse_columns(text: str, source: str, *, jsonl: bool) -> tuple[TraceRequest, ...]:
    """Requests of a trace (``jsonl``: one JSON object a line, else CSV with a header), sorted by arrival.

    Rows with zero tokens (failed requests in BurstGPT) are skipped; fewer than two usable requests fail.
    Numeric times are seconds, in JSON lines milliseconds (Mooncake's ``timestamp``), except a column named
    ``arrival_s``: its name says seconds, in either format; and epoch times in either, whose unit the first
    row's size tells (:func:`_time_divisor`: seconds, milliseconds, microseconds or nanoseconds)."""
    return read_trace(io.StringIO(text, newline=""), source, jsonl=jsonl).requests


def parse_trace(text: str, source: str, *, jsonl: bool) -> tuple[tuple[TraceRequest, ...], float | None]:
    """``parse_columns``'s requests, and from the same rows the share of the prompt tokens in a prefix seen
    before (``prefix_share``; None for CSV, which carries no prefix ids)."""
    got = read_trace(io.StringIO(text, newline=""), source, jsonl=jsonl)
    return got.requests, got.prefix_share


@dataclass(frozen=True, slots=True)
class TraceRead:
    """What :func:`read_trace` read: the requests sorted by arrival, the prefix share of a JSONL trace with
    Mooncake's ``hash_ids`` (None otherwise), how many rows it had and why it skipped those it skipped."""

    requests: tuple[TraceRequest, ...]
    prefix_share: float | None = None
    rows: int = 0
    skipped: tuple[tuple[str, int], ...] = ()

    def skipped_note(self) -> str | None:
        """``N of M rows skipped: ...`` with the count of each reason, None when none was skipped."""
        return _skipped_note(self.rows, self.skipped)


# Why a row is skipped, in the order the note lists them.
NO_TOKENS = "with no token counts"
ZERO_TOKENS = "with zero tokens (failed requests)"
NEGATIVE_TOKENS = "with negative token counts"
NO_TIME = "with no time"
BAD_TIME = "with a time that is not finite"
HEADER_AGAIN = "repeating the header"
_REASONS = (ZERO_TOKENS, NO_TOKENS, NEGATIVE_TOKENS, NO_TIME, BAD_TIME, HEADER_AGAIN)
# Cell text that means no value: what exports write for a null.
_EMPTY = frozenset({"", "null", "none", "nan", "n/a", "na", "-"})


def _skipped_note(rows: int, skipped: tuple[tuple[str, int], ...]) -> str | None:
    total = sum(count for _, count in skipped)
    if not total:
        return None
    return f"{total} of {rows} rows skipped: " + ", ".join(f"{count} {why}" for why, count in skipped)


def read_trace(lines: Iterable[str], source: str, *, jsonl: bool) -> TraceRead:
    """:func:`parse_columns` over lines as a file gives them (opened with ``newline=""``), read one row at a
    time: the shell hands over an open file, plain or gzip, and only the requests are kept."""
    rows = _rows(lines, source, jsonl=jsonl)
    first = next(rows, None)
    while first is _HEADER_AGAIN:  # a header repeated before any row: skip to the first row
        first = next(rows, None)
    if not isinstance(first, dict):
        raise TraceError(f"{source}: the trace has no request rows")
    shares = _PrefixShare() if jsonl else None
    skips: dict[str, int] = {}
    requests, seen = _requests(source, itertools.chain((first,), rows), jsonl, shares, skips)
    out = tuple(sorted(requests, key=lambda r: r.arrival_s))
    skipped = tuple((why, skips[why]) for why in _REASONS if skips.get(why))
    if len(out) < 2:
        note = _skipped_note(seen, skipped)
        raise TraceError(f"{source}: fewer than two usable requests" + (f" ({note})" if note else ""))
    return TraceRead(out, shares.value() if shares is not None else None, seen, skipped)


def _requests(
    source: str, rows: Iterator[Any], jsonl: bool, shares: _PrefixShare | None, skips: dict[str, int]
) -> tuple[list[TraceRequest], int]:
    """The usable requests of the rows, in file order, and how many rows there were; ``skips`` counts the
    rows skipped by reason."""
    json_text = not jsonl  # a CSV's cells may hold JSON objects as text
    (tkey, pkey, okey), read = _columns(source, rows, json_text)
    millis = jsonl and tkey[-1].strip().lower() != "arrival_s"
    out: list[TraceRequest] = []
    zone: bool | None = None  # whether the first datetime had a zone
    t0: datetime | None = None
    divisor: float | None = None
    seen = 0
    for n, row in enumerate(itertools.chain(read, rows), start=2):
        seen += 1
        if row is _HEADER_AGAIN:
            skips[HEADER_AGAIN] = skips.get(HEADER_AGAIN, 0) + 1
            continue
        if not isinstance(row, dict):
            raise TraceError(f"{source}: row {n}: not an object of named fields")
        if shares is not None:
            shares.add(row)
        prompt = _tokens(source, n, "prompt", _get(row, pkey, json_text))
        output = _tokens(source, n, "output", _get(row, okey, json_text))
        raw = _get(row, tkey, json_text)
        why: str | None = None
        if prompt is None or output is None:
            skips[NO_TOKENS] = skips.get(NO_TOKENS, 0) + 1
            continue
        if prompt < 0 or output < 0:
            why = NEGATIVE_TOKENS
        elif prompt == 0 or output == 0:
            why = ZERO_TOKENS
        elif raw is None or (type(raw) is str and raw.strip().lower() in _EMPTY):
            why = NO_TIME
        if why is not None:
            skips[why] = skips.get(why, 0) + 1
            continue
        t = _number(raw)
        if t is not None:
            divisor = divisor or _time_divisor(t, millis)
            t = t / divisor if divisor != 1.0 else t
        else:
            stamp = _datetime(source, n, raw)
            if zone is None:
                zone, t0 = stamp.tzinfo is not None, stamp
            elif zone != (stamp.tzinfo is not None):
                has = "has no zone where the first row's has one" if zone else "has a zone, the first one not"
                raise TraceError(f"{source}: row {n}: time {raw!r} {has}: give every time the same way")
            assert t0 is not None
            t = (stamp - t0).total_seconds()
        if not math.isfinite(t):
            skips[BAD_TIME] = skips.get(BAD_TIME, 0) + 1
            continue
        out.append(TraceRequest(t, prompt, output))
    return out, seen


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
    return value is None or (isinstance(value, str) and value.strip().lower() in _EMPTY)


def _tokens(source: str, n: int, what: str, value: object) -> int | None:
    """A token count as a whole number; None where the row has none (an empty cell, a JSON null)."""
    if type(value) is int:
        return value
    if type(value) is str:
        try:
            return int(value)
        except ValueError:
            pass
    if _missing(value):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]  # checked: TypeError below
        return int(number)
    except (TypeError, ValueError):
        raise TraceError(f"{source}: row {n}: {what} tokens {value!r} is not a number") from None
    except OverflowError:  # 1e400, inf
        raise TraceError(f"{source}: row {n}: {what} tokens {value!r} is not a finite number") from None


def _datetime(source: str, n: int, raw: object) -> datetime:
    try:
        return datetime.fromisoformat(str(raw).strip())
    except ValueError:
        raise TraceError(
            f"{source}: row {n}: time {raw!r} is neither a number nor an ISO-8601 datetime"
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
