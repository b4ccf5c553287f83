"""Workloads for the simulator: real request traces replayed, and ServeGen rate curves and synthetic traffic
shapes turned into arrivals.

Three sources live in ``../shared/traces`` (see its README for shapes and licences):

* the Azure LLM inference traces (Splitwise, 2023): one hour of per-request arrivals with token counts, as CSV
  with naive timestamps carrying 7 fractional digits and no trailing newline;
* the Mooncake FAST'25 traces: JSONL with millisecond offsets and token counts;
* the ServeGen aggregates: request rate per 600 s window over days, with the rate-weighted inter-arrival CV.

A workload is a list of :class:`Request` sorted by arrival, built deterministically from a seed. Replays are
time- and rate-scalable and loop to fill the simulated duration; ServeGen curves are scaled to a target peak
and sampled with Gamma inter-arrivals at each window's recorded CV, drawing request sizes from a per-request
trace. Synthetic shapes (a flash crowd, a ramp, a step, ...: ``fleet.sim.shapes``) are Poisson arrivals at a
rate that a few parameters give, with sizes drawn the same way.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import math
import os
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from fleet.sim.shapes import SHAPE_NAMES, SHAPES, TIME_FIELDS, Shape, make_shape, shape_arrivals
from sizing.container_logs import ContainerLog, LogKind, detect
from sizing.traces import (
    TimeUnit,
    TraceError,
    TraceRead,
    TraceRequest,
    parse_azure_csv,
    parse_mooncake_jsonl,
    read_trace,
)

# The shared traces sit next to the repository (../shared from the root) in development and in CI.
TRACES_ENV = "FLEET_TRACES_DIR"


def traces_dir() -> Path:
    """Where the shared traces are: ``$FLEET_TRACES_DIR``, else ``../shared/traces`` beside the repository."""
    env = os.environ.get(TRACES_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".." / "shared" / "traces"


class WorkloadError(ValueError):
    """A workload spec or trace file that cannot be used; the message names the problem in one line."""


# One inference request: when it arrives (seconds from the start of the run) and its token counts. The one
# record type of traces, shared with the sizing model (sizing/traces.py reads the trace formats).
Request = TraceRequest


@dataclass(frozen=True, slots=True)
class RateWindow:
    """One ServeGen window: start (seconds from the trace's local midnight), mean rate, inter-arrival CV."""

    start_s: float
    rate_rps: float
    iat_cv: float


@dataclass(frozen=True)
class RateCurve:
    """A request-rate curve in fixed windows (ServeGen: 600 s)."""

    windows: tuple[RateWindow, ...]
    window_s: float = 600.0
    name: str = ""

    def day(self, index: int) -> RateCurve:
        """The windows of day ``index`` (0-based), restarted at 0 s."""
        per_day = int(round(86400 / self.window_s))
        chunk = self.windows[index * per_day : (index + 1) * per_day]
        if not chunk:
            raise WorkloadError(f"{self.name}: day {index} is past the trace's {self.days()} day(s)")
        base = chunk[0].start_s
        return RateCurve(
            tuple(RateWindow(w.start_s - base, w.rate_rps, w.iat_cv) for w in chunk), self.window_s, self.name
        )

    def days(self) -> int:
        return max(1, math.ceil(len(self.windows) * self.window_s / 86400))


# --------------------------------------------------------------------------------------------------- loaders


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")  # a trace saved by Excel starts with a byte-order mark
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path}: not UTF-8 text (byte {exc.start}): not a trace") from None


def load_azure_csv(path: Path | str) -> list[Request]:
    """Azure LLM inference trace (``TIMESTAMP,ContextTokens,GeneratedTokens``); arrivals from the first."""
    path = Path(path)
    try:
        return parse_azure_csv(_read_text(path), str(path))
    except TraceError as exc:
        raise WorkloadError(str(exc)) from None


def load_mooncake_jsonl(path: Path | str) -> list[Request]:
    """Mooncake FAST'25 trace (``timestamp`` in ms from the start, ``input_length``, ``output_length``)."""
    path = Path(path)
    try:
        return parse_mooncake_jsonl(_read_text(path), str(path))
    except TraceError as exc:
        raise WorkloadError(str(exc)) from None


def _suffix(path: Path) -> str:
    """The file's kind by its name, before any ``.gz``: ``.csv`` of ``log.csv.gz``."""
    suffixes = [x.lower() for x in path.suffixes]
    if suffixes[-1:] == [".gz"]:
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def trace_is_jsonl(path: Path) -> bool:
    """Whether a trace file holds JSON lines by its name: ``.jsonl``, ``.ndjson`` or ``.json``, before any
    ``.gz``. A file of a name that says neither this nor CSV (``access.log``) is JSON lines when one of its
    first lines is a JSON object (:func:`read_trace_file` looks)."""
    return _suffix(path) in {".jsonl", ".ndjson", ".json"}


_GZIP_MAGIC = b"\x1f\x8b"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _open_trace(path: Path) -> IO[str]:
    """The file as text lines, through gzip when it is gzip (its first two bytes say so, whatever its name:
    logrotate's ``access.log.1`` compressed in place, a ``.gz`` that was already unpacked); the byte-order
    mark Excel writes before a CSV's first column name is dropped."""
    with path.open("rb") as raw:
        head = raw.read(2)
    if head == _GZIP_MAGIC:
        errors = "surrogateescape" if _is_cri(path, packed=True) else "strict"
        return gzip.open(path, "rt", encoding="utf-8-sig", errors=errors, newline="")
    if head in _UTF16_BOMS:  # PowerShell's > and Excel's "Unicode text" save so
        return path.open(encoding="utf-16", newline="")
    errors = "surrogateescape" if _is_cri(path, packed=False) else "strict"
    return path.open(encoding="utf-8-sig", errors=errors, newline="")


def _is_cri(path: Path, *, packed: bool) -> bool:
    """Whether the file is a CRI log. containerd cuts a long line at a byte count, often inside a character
    of more than one byte (Chinese text in a request's messages): each piece alone is not UTF-8, so such a
    file is decoded keeping the bytes it cannot (``surrogateescape``) and the joined line decoded again
    (:class:`sizing.container_logs.ContainerLog`)."""
    with gzip.open(path, "rb") if packed else path.open("rb") as raw:
        first = raw.readline(4096)
    return detect(first.decode("utf-8", "replace")) is LogKind.CRI


def _looks_jsonl(path: Path) -> bool:
    """Whether a line among the first thousand, as the program wrote it (a container runtime's record
    unwrapped), is a JSON object: a gateway's access log named ``.log`` or ``.txt``, its start-up messages
    first (``kubectl logs``). No CSV line begins with a brace."""
    with _open_trace(path) as handle:
        for _, line in ContainerLog(itertools.islice(handle, 1000)):
            if line.lstrip("\ufeff").lstrip().startswith("{"):
                return True
    return False


TIME_UNITS = tuple(unit.value for unit in TimeUnit)


def read_trace_file(path: Path | str, *, unit: str | None = None) -> TraceRead:
    """A per-request trace file read row by row (a file of millions of rows is never held whole), plain or
    gzip-compressed; JSON lines by its name or its first line, else CSV; the columns are found by name
    (``sizing.traces``). ``unit`` is the unit of numeric times (``s``, ``ms``, ``us``, ``ns``) where the user
    gave it. Each call parses the file: a command that needs it in several steps reads it once and hands
    the result on."""
    path = Path(path)
    if unit is not None and unit not in TIME_UNITS:
        raise WorkloadError(f"{path}: time unit {unit!r} is not one of {', '.join(TIME_UNITS)}")
    try:
        named = trace_is_jsonl(path)
        # a program's log (its other lines are skipped); a name that says CSV is CSV
        log = not named and _suffix(path) not in {".csv", ".tsv"}
        found = log and _looks_jsonl(path)
        with _open_trace(path) as handle:
            given = TimeUnit(unit) if unit is not None else None
            return read_trace(handle, str(path), jsonl=named or found, unit=given, other_lines=log)
    except TraceError as exc:
        raise WorkloadError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(
            f"{path}: not UTF-8 text (byte {exc.start}): save it as UTF-8 (or UTF-16 with a byte-order mark)"
        ) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise WorkloadError(f"{path}: not a readable gzip file ({exc or 'cut short'})") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc.strerror or exc})") from None


def restarted(read: TraceRead) -> tuple[Request, ...]:
    """The requests of a trace read, restarted at 0 s (rows with zero tokens were skipped by the read)."""
    t0 = read.requests[0].arrival_s
    return tuple(TraceRequest(r.arrival_s - t0, r.prompt_tokens, r.output_tokens) for r in read.requests)


def load_columns(path: Path | str) -> list[Request]:
    """Any per-request trace whose time and token columns ``fleet size --trace`` finds by name (Azure LLM,
    BurstGPT, Mooncake, or the user's own CSV / JSONL, plain or ``.gz``): rows with zero tokens skipped,
    restarted at 0 s."""
    return list(restarted(read_trace_file(path)))


def load_servegen(path: Path | str, window_s: float = 600.0, *, fill_gaps: bool = True) -> RateCurve:
    """ServeGen 600 s aggregate (``window_start_s,total_rate_rps,active_clients,rate_weighted_iat_cv``).

    Windows of zero rate are the traces' collection gaps (the traces' README), not quiet hours: a service of
    a thousand requests a second does not stop for ten minutes. With ``fill_gaps`` (the default) they are
    filled by :func:`fill_collection_gaps`; without, they stay zero and nothing arrives in them.
    """
    path = Path(path)
    reader = csv.DictReader(_read_text(path).splitlines())
    windows: list[RateWindow] = []
    for line_no, row in enumerate(reader, start=2):
        try:
            windows.append(
                RateWindow(
                    float(row["window_start_s"]),
                    float(row["total_rate_rps"]),
                    float(row["rate_weighted_iat_cv"]),
                )
            )
        except (ValueError, KeyError, TypeError):
            raise WorkloadError(f"{path}:{line_no}: not a ServeGen aggregate row") from None
    if not windows:
        raise WorkloadError(f"{path}: no windows")
    windows.sort(key=lambda w: w.start_s)
    curve = RateCurve(tuple(windows), window_s, path.stem)
    return fill_collection_gaps(curve) if fill_gaps else curve


# How far a gap's fill looks for the same time of day with data: up to a week either side.
GAP_REFERENCE_DAYS = 7


def fill_collection_gaps(curve: RateCurve) -> RateCurve:
    """The curve with each run of zero-rate windows filled from the same windows of the nearest day that has
    data there (and at the run's two edges), scaled to meet the run's neighbours: the ratio of the curve to
    that day at the window before the run, moving linearly to the ratio at the window after it. So a gap
    keeps the day's shape at the level around it; the inter-arrival CV is the reference window's. A run
    with no such day is filled linearly between its neighbours; a curve with no data at all is returned as
    it is."""
    rates = [w.rate_rps for w in curve.windows]
    n = len(rates)
    if all(r > 0 for r in rates) or not any(r > 0 for r in rates):
        return curve
    per_day = int(round(86400 / curve.window_s))
    filled = list(curve.windows)
    i = 0
    while i < n:
        if rates[i] > 0:
            i += 1
            continue
        end = i
        while end + 1 < n and rates[end + 1] <= 0:
            end += 1
        for k, (rate, cv) in enumerate(_gap_fill(curve.windows, rates, i, end, per_day)):
            filled[i + k] = RateWindow(curve.windows[i + k].start_s, rate, cv)
        i = end + 1
    return RateCurve(tuple(filled), curve.window_s, curve.name)


def _gap_fill(
    windows: Sequence[RateWindow], rates: Sequence[float], first: int, last: int, per_day: int
) -> list[tuple[float, float]]:
    """(rate, CV) for the gap ``first..last`` (inclusive) of zero-rate windows."""
    n = len(rates)
    left = first - 1 if first > 0 else None
    right = last + 1 if last + 1 < n else None
    span = [j for j in (left, right) if j is not None] + list(range(first, last + 1))
    # How far each gap window lies from its left edge to its right one, for the linear blends below.
    fracs = [(j, (j - first + 1) / (last - first + 2)) for j in range(first, last + 1)]
    for days in range(1, GAP_REFERENCE_DAYS + 1):
        for shift in (-days * per_day, days * per_day):
            if all(0 <= j + shift < n and rates[j + shift] > 0 for j in span):
                ratio_l = rates[left] / rates[left + shift] if left is not None else None
                ratio_r = rates[right] / rates[right + shift] if right is not None else None
                return [
                    (rates[j + shift] * _between(ratio_l, ratio_r, frac), windows[j + shift].iat_cv)
                    for j, frac in fracs
                ]
    rate_l = rates[left] if left is not None else None
    rate_r = rates[right] if right is not None else None
    cv_l = windows[left].iat_cv if left is not None else None
    cv_r = windows[right].iat_cv if right is not None else None
    return [(_between(rate_l, rate_r, frac), _between(cv_l, cv_r, frac)) for _, frac in fracs]


def _between(a: float | None, b: float | None, frac: float) -> float:
    """``a`` moving linearly to ``b`` at ``frac`` in [0, 1]; one missing: the other (never both)."""
    if a is None:
        assert b is not None
        return b
    if b is None:
        return a
    return a + (b - a) * frac


# ------------------------------------------------------------------------------------------------ generators


def replay(
    trace: Sequence[Request],
    duration_s: float,
    *,
    speed: float = 1.0,
    rate: float = 1.0,
    loop: bool = True,
    seed: int = 0,
) -> list[Request]:
    """Replay a per-request trace for ``duration_s``.

    ``speed`` compresses time (2.0 plays the hour in 30 minutes, so the rate doubles too); ``rate``
    multiplies the
    request count at the same pace: each request is kept ``floor(rate)`` times plus once more with probability
    ``rate - floor(rate)``, copies spread by a small seeded jitter so they do not land on the same instant.
    The trace loops (each pass shifted by its span) until ``duration_s`` is filled, unless ``loop`` is false.
    """
    if speed <= 0 or rate <= 0:
        raise WorkloadError("replay: speed and rate must be positive")
    if not trace:
        return []
    if loop:
        check_loopable(trace)
    rng = random.Random(seed)
    # One pass lasts the trace's span plus the mean gap, so a loop does not put two arrivals at the seam.
    span_s = trace[-1].arrival_s - trace[0].arrival_s
    period_s = (span_s + span_s / max(1, len(trace) - 1)) / speed
    whole, frac = int(rate), rate - int(rate)
    out: list[Request] = []
    offset = 0.0
    while offset < duration_s:
        for r in trace:
            t = offset + r.arrival_s / speed
            if t >= duration_s:
                break
            copies = whole + (1 if frac and rng.random() < frac else 0)
            for c in range(copies):
                jitter = rng.uniform(0.0, 0.05) if c else 0.0
                out.append(Request(t + jitter, r.prompt_tokens, r.output_tokens))
        if not loop:
            break
        offset += period_s
    out.sort(key=lambda r: r.arrival_s)
    return [r for r in out if r.arrival_s < duration_s]


def check_loopable(trace: Sequence[Request], name: str = "the trace") -> None:
    """A looped replay repeats the trace every span: a trace whose requests all arrive at one instant has
    none (the loop would never advance), and says so in one line."""
    if len(trace) > 1 and trace[-1].arrival_s <= trace[0].arrival_s:
        raise WorkloadError(
            f"{name}: its {len(trace)} requests all arrive at the same instant: a loop has no span to repeat "
            "(add loop=false to play them once)"
        )


def from_rate_curve(
    curve: RateCurve,
    duration_s: float,
    *,
    peak_rps: float,
    sizes: Sequence[Request],
    seed: int = 0,
    start_offset_s: float = 0.0,
    cv_cap: float | None = 8.0,
    max_prompt_tokens: int | None = None,
) -> list[Request]:
    """Arrivals following ``curve`` scaled so its highest window over the run is ``peak_rps``.

    Inside each window, inter-arrival gaps are Gamma distributed with that window's recorded CV (shape
    ``1/CV^2``,
    mean ``1/rate``): CV 1 is Poisson, larger is burstier. ``cv_cap`` bounds the CV: ServeGen's figure is a
    per-client CV weighted by rate, and a few windows record values in the hundreds (one client firing a
    batch),
    which as a whole-fleet Gamma shape would put a window's load in one instant; ``None`` uses the CV as
    recorded. ``start_offset_s`` starts the run that far into the curve (the curve repeats when the run is
    longer).
    Request sizes are drawn uniformly from ``sizes`` (a per-request trace).
    """
    if peak_rps <= 0:
        raise WorkloadError("rate curve: peak must be positive")
    if not sizes:
        raise WorkloadError("rate curve: no request sizes to draw from")
    rng = random.Random(seed)
    span_s = len(curve.windows) * curve.window_s

    def window_at(t_s: float) -> RateWindow:
        idx = int(((t_s + start_offset_s) % span_s) // curve.window_s)
        return curve.windows[idx]

    # Scale by the highest window that the run actually covers.
    n_windows = int(math.ceil(duration_s / curve.window_s)) + 1
    covered = [window_at(i * curve.window_s) for i in range(n_windows)]
    top = max(w.rate_rps for w in covered)
    if top <= 0:
        raise WorkloadError(f"{curve.name}: the selected windows have no traffic")
    scale = peak_rps / top

    out: list[Request] = []
    t = 0.0
    while t < duration_s:
        w = window_at(t)
        rate = w.rate_rps * scale
        window_end = (math.floor((t + start_offset_s) / curve.window_s) + 1) * curve.window_s - start_offset_s
        if rate <= 0:  # a collection gap: nothing arrives until the next window
            t = window_end
            continue
        cv = window_cv(w.iat_cv, cv_cap)
        shape = 1.0 / (cv * cv)
        gap = rng.gammavariate(shape, 1.0 / (rate * shape))
        if t + gap >= window_end:
            # Memoryless enough at these scales: restart the draw at the boundary with the next window's rate.
            t = window_end
            continue
        t += gap
        if t >= duration_s:
            break
        s = sizes[rng.randrange(len(sizes))]
        prompt = s.prompt_tokens if max_prompt_tokens is None else min(s.prompt_tokens, max_prompt_tokens)
        out.append(Request(t, prompt, s.output_tokens))
    return out


def window_cv(recorded: float, cap: float | None) -> float:
    """The inter-arrival CV a window's arrivals are drawn with: the recorded one (1, Poisson, where none is
    recorded), at most ``cap``."""
    cv = recorded if recorded > 0 else 1.0
    return cv if cap is None else min(cv, cap)


# ------------------------------------------------------------------------------------------------ the SPEC


TRACE_FILES = {
    ("azure", "conv"): "azure2023_conv.csv",
    ("azure", "code"): "azure2023_code.csv",
    ("mooncake", "conversation"): "mooncake_fast25_conversation.jsonl",
    ("mooncake", "synthetic"): "mooncake_fast25_synthetic.jsonl",
}
SERVEGEN_NAMES = (
    "language_m-large",
    "language_m-mid",
    "language_m-small",
    "multimodal_mm-image",
    "reason_deepseek-r1",
)
SIZE_SOURCES = {
    "azure-conv": ("azure", "conv"),
    "azure-code": ("azure", "code"),
    "mooncake-conversation": ("mooncake", "conversation"),
    "mooncake-synthetic": ("mooncake", "synthetic"),
}

_REPLAY_KEYS = {"speed", "rate", "loop", "seed"}
_TRACE_KEYS = _REPLAY_KEYS | {"time_unit"}
_CURVE_KEYS = {"peak", "day", "sizes", "cv_cap", "seed", "start_h", "gaps"}
_SHAPE_KEYS = {"sizes", "seed", "start_h"}  # and the shape's own (fleet.sim.shapes.SHAPES)
# The kinds whose arrivals are generated from a rate, with sizes drawn from one of SIZE_SOURCES (``sizes=``).
CURVE_KINDS = ("servegen", "shape")
# A shape's run starts at 10:00 local unless start_h says otherwise: the replays' start, in business hours.
SHAPE_START_H = 10.0


@dataclass(frozen=True)
class WorkloadSpec:
    """A parsed workload SPEC: ``KIND:NAME[,key=value...]``.

    * ``servegen:NAME`` (``language_m-large``, ``m-large``, ...): keys ``peak`` (req/s at the busiest window,
      default 20), ``day`` (0-based, default 0), ``start_h`` (hour of the curve to start at, default 0),
      ``sizes`` (``azure-conv`` default, ``azure-code``, ``mooncake-conversation``, ``mooncake-synthetic``),
      ``cv_cap`` (default 8, ``none`` for the recorded CV), ``gaps`` (``fill`` default: the trace's
      collection gaps filled, see :func:`load_servegen`; ``zero``: nothing arrives in them), ``seed``.
    * ``azure:conv|code`` and ``mooncake:conversation|synthetic``: keys ``speed`` (time compression, default
      1), ``rate`` (request multiplier, default 1), ``loop`` (``true``/``false``, default true), ``seed``.
    * ``trace:PATH``: the user's own per-request trace (CSV or ``.jsonl``, columns found by name as ``fleet
      size --trace`` finds them; PATH relative to the working directory), with the replay keys and
      ``time_unit`` (``s``, ``ms``, ``us``, ``ns``: the unit of numeric times, where the column's size would
      leave it a guess).
    * ``shape:NAME`` (``ramp``, ``flash``, ``step``, ``silence``, ``sine``, ``spikes``, ``drop``, ``noise``):
      Poisson arrivals at a synthetic rate (:mod:`fleet.sim.shapes`); keys the shape's own (``base``,
      ``peak``, ``after`` in req/s; ``at``, ``for``, ``hold``, ``period``, ``every``, ``width`` as durations
      like ``40m``), ``sizes`` (as ``servegen``), ``start_h`` (hour of the day the run starts at, default 10),
      ``seed``.
    """

    kind: str
    name: str
    params: dict[str, str] = field(default_factory=dict)
    text: str = ""

    @property
    def seed(self) -> int:
        return int(self.params.get("seed", "0"))


def parse_workload_spec(text: str) -> WorkloadSpec:
    """Parse ``KIND:NAME[,key=value...]``; raises :class:`WorkloadError` with the nearest valid names."""
    head, _, rest = text.strip().partition(",")
    kind, sep, name = head.partition(":")
    kind, name = kind.strip().lower(), name.strip()
    if not sep or not name:
        raise WorkloadError(
            f"workload {text!r}: expected KIND:NAME[,key=value...], e.g. servegen:m-large,peak=30"
        )
    params: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise WorkloadError(f"workload {text!r}: {item!r} is not key=value")
        key = key.strip().lower()
        if key in params:
            raise WorkloadError(f"workload {text!r}: {key} is given twice")
        params[key] = value.strip()
    name, allowed = _resolve_trace(kind, name, params, text)
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise WorkloadError(
            f"workload {text!r}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )
    _check_values(params, text, kind)
    return WorkloadSpec(kind, name, params, text.strip())


def _resolve_trace(kind: str, name: str, params: dict[str, str], text: str) -> tuple[str, set[str]]:
    """The trace's full name and the keys its kind takes; WorkloadError names the valid ones."""
    if kind == "servegen":
        full = (
            name
            if name in SERVEGEN_NAMES
            else next((n for n in SERVEGEN_NAMES if n.endswith("_" + name)), "")
        )
        if not full:
            raise WorkloadError(
                f"workload {text!r}: unknown ServeGen trace {name!r}; one of {', '.join(SERVEGEN_NAMES)}"
            )
        if params.get("sizes", "azure-conv") not in SIZE_SOURCES:
            raise WorkloadError(f"workload {text!r}: sizes must be one of {', '.join(SIZE_SOURCES)}")
        return full, _CURVE_KEYS
    if kind in ("azure", "mooncake"):
        names = [n for k, n in TRACE_FILES if k == kind]
        if name not in names:
            raise WorkloadError(
                f"workload {text!r}: unknown {kind} trace {name!r}; one of {', '.join(names)}"
            )
        return name, _REPLAY_KEYS
    if kind == "trace":
        return name, _TRACE_KEYS
    if kind == "shape":
        return _resolve_shape(name, params, text)
    raise WorkloadError(
        f"workload {text!r}: unknown kind {kind!r}; one of servegen, azure, mooncake, trace, shape"
    )


def _resolve_shape(name: str, params: dict[str, str], text: str) -> tuple[str, set[str]]:
    """A shape's name and keys; its own values are checked here (durations, rates, how they fit together)."""
    name = name.lower()
    if name not in SHAPES:
        raise WorkloadError(f"workload {text!r}: unknown shape {name!r}; one of {', '.join(SHAPE_NAMES)}")
    if params.get("sizes", "azure-conv") not in SIZE_SOURCES:
        raise WorkloadError(f"workload {text!r}: sizes must be one of {', '.join(SIZE_SOURCES)}")
    allowed = _SHAPE_KEYS | set(SHAPES[name].defaults)
    if set(params) <= allowed:
        try:
            make_shape(name, params)
        except ValueError as exc:
            raise WorkloadError(f"workload {text!r}: {exc}") from None
    return name, allowed


def _check_values(params: dict[str, str], text: str, kind: str) -> None:
    """Numbers where numbers are wanted (positive for rates; a shape's may be 0 where another of its rates
    is not), and loop a boolean."""
    positive = ("speed", "rate") if kind == "shape" else ("peak", "speed", "rate")
    for key in params:
        # (a shape's times are durations, checked as the shape resolved)
        if key in ("sizes", "loop", "gaps") or key in TIME_FIELDS:
            continue
        if key == "time_unit":
            if params[key] not in TIME_UNITS:
                raise WorkloadError(f"workload {text!r}: time_unit must be one of {', '.join(TIME_UNITS)}")
            continue
        if key == "cv_cap" and params[key].lower() == "none":
            continue
        try:
            value = float(params[key])
        except ValueError:
            raise WorkloadError(f"workload {text!r}: {key}={params[key]!r} is not a number") from None
        if key in positive and value <= 0:
            raise WorkloadError(f"workload {text!r}: {key} must be positive")
        _check_bounds(key, value, text)
    if params.get("loop", "true").lower() not in ("true", "false"):
        raise WorkloadError(f"workload {text!r}: loop must be true or false")
    if params.get("gaps", "fill").lower() not in ("fill", "zero"):
        raise WorkloadError(f"workload {text!r}: gaps must be fill or zero")


# What a workload may ask, so that an absurd size is one line and not a run that never ends or a crash: a
# peak (or a shape's base or after) of 1,000 req/s is ~50 times what the default fleet's 40 instances serve,
# a rate of 100 copies each request 100 times, and the ServeGen traces hold 14 days.
_BOUNDS: dict[str, tuple[float, float]] = {
    "peak": (0.0, 1000.0),
    "base": (0.0, 1000.0),
    "after": (0.0, 1000.0),
    "rate": (0.0, 100.0),
    "speed": (0.001, 1000.0),
    "day": (0.0, 13.0),
    "start_h": (0.0, 14 * 24.0),
    "cv_cap": (0.01, 1000.0),
    "seed": (0.0, 2.0**63),
}


def _check_bounds(key: str, value: float, text: str) -> None:
    lo, hi = _BOUNDS.get(key, (-math.inf, math.inf))
    if not (math.isfinite(value) and lo <= value <= hi):
        raise WorkloadError(f"workload {text!r}: {key} must be between {lo:g} and {hi:g}, got {value:g}")
    if key in ("day", "seed") and value != int(value):
        raise WorkloadError(f"workload {text!r}: {key} must be a whole number, got {value:g}")


# The bundled traces, by folder and name: immutable files, parsed once per process.
_CACHE: dict[tuple[str, str], tuple[Request, ...]] = {}


def load_trace(
    kind: str,
    name: str,
    directory: Path | None = None,
    *,
    user_trace: TraceRead | None = None,
    unit: str | None = None,
) -> tuple[Request, ...]:
    """A per-request trace by kind and name. A bundled one is loaded once per process; the user's file
    (kind ``trace``) is ``user_trace``, the file as the command read it (:func:`read_trace_file`), else read
    now: it may change between runs of one process, and a command that needs it in several steps reads it
    once and hands the read to each; ``unit`` is its ``time_unit``."""
    if kind == "trace":
        return restarted(user_trace if user_trace is not None else read_trace_file(name, unit=unit))
    directory = directory or traces_dir()
    key = (str(directory), f"{kind}:{name}")
    if key not in _CACHE:
        path = directory / TRACE_FILES[(kind, name)]
        loader = load_azure_csv if kind == "azure" else load_mooncake_jsonl
        _CACHE[key] = tuple(loader(path))
    return _CACHE[key]


def servegen_path(name: str, directory: Path | None = None) -> Path:
    """The ServeGen aggregate file of the trace ``name`` (the full name, e.g. ``language_m-large``)."""
    return (directory or traces_dir()) / "servegen" / f"servegen_{name}_aggregate_600s.csv"


def curve_offset_s(spec: WorkloadSpec) -> float:
    """Where a ``servegen`` run starts on its trace's curve: ``start_h`` hours into day ``day``. The run goes
    on into the days after it, as the clock does (the curve repeats only past the trace's last day)."""
    p = spec.params
    return float(p.get("day", "0")) * 86400.0 + float(p.get("start_h", "0")) * 3600.0


def fills_gaps(spec: WorkloadSpec) -> bool:
    """Whether a ``servegen`` spec fills the trace's collection gaps (``gaps=fill``, the default)."""
    return spec.params.get("gaps", "fill").lower() == "fill"


def size_source(spec: WorkloadSpec) -> str | None:
    """The SIZE_SOURCES name a generated workload (``servegen``, ``shape``) draws its sizes from; None for a
    replay, whose sizes are its own."""
    return spec.params.get("sizes", "azure-conv") if spec.kind in CURVE_KINDS else None


def curve_sizes(spec: WorkloadSpec, directory: Path | None = None) -> tuple[Request, ...]:
    """The per-request trace a generated workload (``servegen``, ``shape``) draws its sizes from."""
    return load_trace(*SIZE_SOURCES[spec.params.get("sizes", "azure-conv")], directory)


def cv_cap_of(spec: WorkloadSpec) -> float | None:
    """A ``servegen`` spec's ``cv_cap`` (default 8; ``none``: the CV as recorded)."""
    text = spec.params.get("cv_cap", "8")
    return None if text.lower() == "none" else float(text)


def shape_of(spec: WorkloadSpec) -> Shape:
    """The shape of a ``shape:`` spec with its parameters resolved (the spec was checked as it was parsed)."""
    return make_shape(spec.name, spec.params)


def shape_start_h(spec: WorkloadSpec) -> float:
    """The hour of the day a ``shape:`` run starts at: ``start_h``, else 10:00 (``SHAPE_START_H``)."""
    return float(spec.params.get("start_h", SHAPE_START_H))


def build_workload(
    spec: WorkloadSpec | str,
    duration_s: float,
    *,
    directory: Path | None = None,
    max_prompt_tokens: int | None = None,
    user_trace: TraceRead | None = None,
) -> list[Request]:
    """The requests of ``spec`` over ``duration_s``, deterministic for the spec's seed; a ``trace:PATH``
    spec replays ``user_trace`` where the caller has read the file already (:func:`load_trace`)."""
    if isinstance(spec, str):
        spec = parse_workload_spec(spec)
    directory = directory or traces_dir()
    p = spec.params
    if spec.kind == "shape":
        reqs = shape_arrivals(shape_of(spec), duration_s, curve_sizes(spec, directory), seed=spec.seed)
        return reqs if max_prompt_tokens is None else cut_prompts(reqs, max_prompt_tokens)
    if spec.kind == "servegen":
        curve = load_servegen(servegen_path(spec.name, directory), fill_gaps=fills_gaps(spec))
        day = int(float(p.get("day", "0")))
        curve.day(day)  # a day past the trace's end is refused here
        return from_rate_curve(
            curve,
            duration_s,
            peak_rps=float(p.get("peak", "20")),
            sizes=curve_sizes(spec, directory),
            seed=spec.seed,
            start_offset_s=curve_offset_s(spec),
            cv_cap=cv_cap_of(spec),
            max_prompt_tokens=max_prompt_tokens,
        )
    unit = spec.params.get("time_unit")
    trace = load_trace(spec.kind, spec.name, directory, user_trace=user_trace, unit=unit)
    loop = p.get("loop", "true").lower() == "true"
    if loop:
        check_loopable(trace, spec.name)
    reqs = replay(
        trace,
        duration_s,
        speed=float(p.get("speed", "1")),
        rate=float(p.get("rate", "1")),
        loop=loop,
        seed=spec.seed,
    )
    return reqs if max_prompt_tokens is None else cut_prompts(reqs, max_prompt_tokens)


def cut_prompts(requests: Sequence[Request], max_prompt_tokens: int) -> list[Request]:
    """The requests with each prompt longer than ``max_prompt_tokens`` cut to it (vLLM rejects a prompt past
    ``max_model_len``; the simulated gateway truncates it instead)."""
    cap = max_prompt_tokens
    return [r if r.prompt_tokens <= cap else Request(r.arrival_s, cap, r.output_tokens) for r in requests]


def peak_rate_rps(requests: Sequence[Request], window_s: float = 60.0) -> float:
    """The highest arrival rate over fixed windows of ``window_s`` (the 1-minute peak by default)."""
    if not requests:
        return 0.0
    counts: dict[int, int] = {}
    for r in requests:
        k = int(r.arrival_s // window_s)
        counts[k] = counts.get(k, 0) + 1
    return max(counts.values()) / window_s
