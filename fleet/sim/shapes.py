"""Synthetic traffic shapes: a flash crowd, a ramp, a step, a silence, a sine, spikes, a drop and flat noise
as request-rate functions of time, and the Poisson arrivals that follow them.

The questions an autoscaler must answer well on traffic no trace records ("what does it do when ten times the
load arrives in a minute, then leaves?") asked reproducibly, without hand-written CSVs: ``shape:NAME`` in a
workload SPEC (``fleet.sim.workload``). Each shape is a rate in req/s over the seconds of the run, named by a
few parameters (``base``, ``peak``, ``at``, ``for``, ...) whose defaults are the shapes probed on 2026-12-07
(docs/simulator.md, "Unseen workloads"); arrivals are a Poisson process thinned from the shape's highest rate
(Lewis and Shedler's method: exact for any rate under that bound), with one request at 0 s so that every run
starts with its first request, as a replayed CSV of the shape does.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from policies.spec import DurationRangeError, parse_duration
from sizing.traces import TraceRequest as Request


@dataclass(frozen=True)
class Shape:
    """One shape with its parameters resolved: rates in req/s, times in seconds from the run's start."""

    name: str
    base_rps: float = 0.0
    peak_rps: float = 0.0
    after_rps: float = 0.0
    at_s: float = 0.0
    for_s: float = 0.0
    hold_s: float = 0.0
    period_s: float = 0.0
    every_s: float = 0.0
    width_s: float = 0.0

    def rate_rps(self, t_s: float) -> float:
        """The request rate the shape asks for ``t_s`` seconds into the run."""
        return SHAPES[self.name].rate(self, t_s)

    @property
    def top_rps(self) -> float:
        """The highest rate the shape reaches (the rate the arrivals are thinned from)."""
        return max(getattr(self, RATE_FIELDS[key]) for key in SHAPES[self.name].rates)


def _ramp(s: Shape, t: float) -> float:
    if t < s.at_s:
        return s.base_rps
    if t < s.at_s + s.for_s:
        return s.base_rps + (s.peak_rps - s.base_rps) * (t - s.at_s) / s.for_s
    return s.peak_rps if t < s.at_s + s.for_s + s.hold_s else s.after_rps


def _flash(s: Shape, t: float) -> float:
    return s.peak_rps if s.at_s <= t < s.at_s + s.for_s else s.base_rps


def _step(s: Shape, t: float) -> float:
    return s.base_rps if t < s.at_s else s.peak_rps


def _silence(s: Shape, t: float) -> float:
    return 0.0 if t < s.at_s else s.peak_rps


def _sine(s: Shape, t: float) -> float:
    mid, amplitude = (s.peak_rps + s.base_rps) / 2, (s.peak_rps - s.base_rps) / 2
    return mid + amplitude * math.sin(2 * math.pi * t / s.period_s)


def _spikes(s: Shape, t: float) -> float:
    return s.peak_rps if t % s.every_s < s.width_s else s.base_rps


def _drop(s: Shape, t: float) -> float:
    return s.peak_rps if t < s.at_s else s.base_rps


def _noise(s: Shape, t: float) -> float:
    return s.base_rps


@dataclass(frozen=True)
class ShapeKind:
    """A shape's rate function, its parameters' defaults (as written in a SPEC) and the window it is made
    for (the hours the sweep runs it)."""

    rate: Callable[[Shape, float], float]
    defaults: Mapping[str, str]
    hours: float
    summary: str

    @property
    def rates(self) -> tuple[str, ...]:
        return tuple(k for k in self.defaults if k in RATE_FIELDS)


# The SPEC's keys and the fields they set: rates in req/s, times as durations (``90s``, ``40m``, ``1h30m``).
RATE_FIELDS = {"base": "base_rps", "peak": "peak_rps", "after": "after_rps"}
TIME_FIELDS = {
    "at": "at_s",
    "for": "for_s",
    "hold": "hold_s",
    "period": "period_s",
    "every": "every_s",
    "width": "width_s",
}
# Times that must be above zero (a ramp of no length, a sine of no period); the others may be 0.
_POSITIVE_TIMES = ("for", "period", "every", "width")

# The defaults are the shapes probed on 2026-12-07 (docs/simulator.md, "Unseen workloads"): 2 h windows, the
# sine 3 h.
SHAPES: dict[str, ShapeKind] = {
    "ramp": ShapeKind(
        _ramp,
        {"base": "0.5", "peak": "12", "at": "0", "for": "60m", "hold": "30m", "after": "1"},
        2.0,
        "base until at, rising linearly to peak over for, held for hold, then after",
    ),
    "flash": ShapeKind(
        _flash, {"base": "1", "peak": "12", "at": "40m", "for": "8m"}, 2.0, "base, and peak from at for for"
    ),
    "step": ShapeKind(_step, {"base": "2", "peak": "10", "at": "30m"}, 2.0, "base, then peak from at"),
    "silence": ShapeKind(_silence, {"peak": "8", "at": "70m"}, 2.0, "nothing until at, then peak"),
    "sine": ShapeKind(
        _sine, {"base": "1", "peak": "10", "period": "90m"}, 3.0, "between base and peak over period"
    ),
    "spikes": ShapeKind(
        _spikes,
        {"base": "1", "peak": "25", "every": "5m", "width": "20s"},
        2.0,
        "base, and peak for the first width of every every",
    ),
    "drop": ShapeKind(_drop, {"peak": "10", "base": "0.5", "at": "30m"}, 2.0, "peak, then base from at"),
    "noise": ShapeKind(_noise, {"base": "4"}, 2.0, "a flat base"),
}
SHAPE_NAMES = tuple(SHAPES)


def make_shape(name: str, params: Mapping[str, str]) -> Shape:
    """The shape ``name`` with ``params`` (SPEC text, e.g. ``{"at": "40m", "peak": "20"}``) over its
    defaults. Raises ValueError naming the key; keys the shape does not take are the caller's to refuse."""
    kind = SHAPES[name]
    values: dict[str, float] = {}
    for key, default in kind.defaults.items():
        text = params.get(key, default)
        if key in RATE_FIELDS:
            values[RATE_FIELDS[key]] = _rate(key, text)
        else:
            values[TIME_FIELDS[key]] = _time(key, text)
    shape = Shape(name, **values)
    if shape.top_rps <= 0:
        raise ValueError(f"{'/'.join(kind.rates)}: the shape has no traffic; give a rate above 0")
    if name == "spikes" and shape.width_s >= shape.every_s:
        raise ValueError("width must be shorter than every (a spike as long as its period is a flat rate)")
    return shape


def _rate(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{key}={text!r} is not a rate in req/s") from None
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{key} must be a rate of 0 req/s or more, got {text}")
    return value


def _time(key: str, text: str) -> float:
    try:
        seconds = parse_duration(text)
    except DurationRangeError as exc:
        raise ValueError(f"{key}={text!r}: {exc}") from None
    except ValueError:
        raise ValueError(f"{key}={text!r} is not a duration like 90s, 40m or 1h30m") from None
    if key in _POSITIVE_TIMES and seconds <= 0:
        raise ValueError(f"{key} must be longer than 0 s")
    return seconds


def shape_arrivals(
    shape: Shape, duration_s: float, sizes: Sequence[Request], *, seed: int = 0
) -> list[Request]:
    """Poisson arrivals at the shape's rate over ``duration_s``, the first at 0 s, each with a size drawn
    uniformly from ``sizes``; deterministic for ``seed``. Candidates come at the shape's top rate and each is
    kept with probability rate(t) / top (thinning). The sizes are drawn from a stream of their own, so that
    one seed gives the same arrival times whatever trace the sizes come from."""
    if not sizes:
        raise ValueError("no request sizes to draw from")
    rng = random.Random(seed)
    size_rng = random.Random(f"sizes:{seed}")  # a str seed goes through SHA-512, never hash()
    top = shape.top_rps

    def drawn(at_s: float) -> Request:
        s = sizes[size_rng.randrange(len(sizes))]
        return Request(at_s, s.prompt_tokens, s.output_tokens)

    out = [drawn(0.0)]
    t = 0.0
    while True:
        t += rng.expovariate(top)
        if t >= duration_s:
            return out
        if rng.random() * top < shape.rate_rps(t):
            out.append(drawn(t))
