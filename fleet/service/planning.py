"""What `fleet forecast` shows: the demand forecast, capacity per instance and the planned capacity for the
coming hours of one group, from the store's demand history or a history file.

The same pure functions as the service (``policies.forecast``, ``policies.scaling.demand.staffing``) over
the same capacity table, so the command shows what the service would plan.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from fleet.service.capacity_table import CapacityTable
from fleet.service.demand import STEP_S, DemandReading, minute_of
from fleet.service.sanitize import MAX_REQUEST_RATE_PER_INSTANCE, MAX_TOKENS_PER_REQUEST
from policies import forecast as fc
from policies.model import DemandSeries, ForecastState
from policies.scaling.demand import staffing
from policies.schedule import bounds
from policies.spec import ESS_MAX_GROUP_SIZE, GroupSpec

# A group's rate beyond what the largest scaling group could be sent, as the service's boundary check judges
# one instance's: a row past it is a unit or column mix-up, and one such minute set the forecast's mean for
# the same hour of the next day and week (1e308 printed a 300-digit forecast).
MAX_GROUP_RPS = ESS_MAX_GROUP_SIZE * MAX_REQUEST_RATE_PER_INSTANCE


class HistoryFileError(ValueError):
    """A --history file that cannot be read as demand rows."""


def read_history_file(path: Path) -> list[DemandReading]:
    """Rows from CSV (``at,request_rate_rps[,prompt_tokens,output_tokens]`` with a header) or JSON (a list of
    objects with the same keys); ``at`` ISO 8601 with a zone. A refusal names a CSV's line in the file and a
    JSON list's row."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # Excel writes a byte-order mark before "at"
    except FileNotFoundError:
        raise HistoryFileError(f"{path}: history file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HistoryFileError(f"{path}: cannot read: {exc}") from None
    if not text.strip():
        raise HistoryFileError(f"{path}: the file is empty")
    try:
        records: list[Any]
        lines: list[int] = []  # a CSV record's line in the file (where it ends)
        if text.lstrip()[:1] in ("[", "{"):
            loaded = json.loads(text)
            if not isinstance(loaded, list):
                raise HistoryFileError(
                    f"{path}: JSON history must be a list of rows, got {type(loaded).__name__}"
                )
            records = loaded
        else:
            reader = csv.DictReader(io.StringIO(text, newline=""))
            records = []
            for record in reader:
                records.append(record)
                lines.append(reader.line_num)
            missing = {"at", "request_rate_rps"} - set(reader.fieldnames or ())
            if records and missing:
                named = ", ".join(sorted(missing))
                raise HistoryFileError(
                    f"{path}: the CSV header must name at and request_rate_rps (no {named})"
                )
    except (json.JSONDecodeError, csv.Error) as exc:
        raise HistoryFileError(f"{path}: not CSV or a JSON list: {exc}") from None
    except RecursionError:
        raise HistoryFileError(f"{path}: JSON nested too deeply") from None
    where = [f"line {n}" for n in lines] if lines else [f"row {n}" for n in range(1, len(records) + 1)]
    rows = [_reading(path, at, rec) for at, rec in zip(where, records, strict=True)]
    if not rows:
        raise HistoryFileError(f"{path}: no rows")
    return sorted(rows, key=lambda r: r.at)


def _reading(path: Path, where: str, rec: Any) -> DemandReading:
    """One row of a history file; ``where`` names it in a refusal (``line 3``, ``row 2``)."""
    from fleet.timefmt import outside_calendar, parse_iso

    if not isinstance(rec, dict):
        raise HistoryFileError(f"{path}: {where}: not an object with at and request_rate_rps")
    try:
        at = parse_iso(str(rec["at"]))
        if at.tzinfo is None:
            raise ValueError("no timezone")
        too_far = outside_calendar(at)
        if too_far is not None:
            raise ValueError(f"at {too_far}")
        rps = _rate(rec["request_rate_rps"])
        prompt = _opt(rec.get("prompt_tokens"), "prompt_tokens")
        output = _opt(rec.get("output_tokens"), "output_tokens")
    except (KeyError, TypeError, ValueError) as exc:
        what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise HistoryFileError(f"{path}: {where}: {what}") from None
    return DemandReading(at, rps, prompt, output)


def _rate(value: Any) -> float:
    rps = float(value)
    if not (math.isfinite(rps) and rps >= 0):
        raise ValueError("request_rate_rps must be a number >= 0")
    if rps > MAX_GROUP_RPS:
        per = f"{ESS_MAX_GROUP_SIZE} instances x {MAX_REQUEST_RATE_PER_INSTANCE:g} req/s"
        limit = f"at most {MAX_GROUP_RPS:g}: {per}"
        raise ValueError(f"request_rate_rps {rps:g} is beyond what any scaling group is sent ({limit})")
    return rps


def _opt(value: Any, name: str) -> float | None:
    """A token count, or None when the row leaves it out; a count under one token is refused (clamped to
    one, it would make every request tiny and the capacity per instance many times what it is)."""
    if value is None or value == "":
        return None
    tokens = float(value)
    if not (math.isfinite(tokens) and 1 <= tokens <= MAX_TOKENS_PER_REQUEST):
        raise ValueError(f"{name} must be a number from 1 to {MAX_TOKENS_PER_REQUEST:,.0f}, got {value!r}")
    return tokens


def series_of(rows: Sequence[DemandReading], until: datetime, history_s: float) -> DemandSeries | None:
    """Minute buckets of ``rows`` in the ``history_s`` before ``until`` (the mean of rows in a minute)."""
    start = minute_of(until - timedelta(seconds=history_s))
    end = minute_of(until)
    sums: dict[datetime, list[float]] = {}
    for r in rows:
        m = minute_of(r.at)
        if start <= m <= end:
            sums.setdefault(m, []).append(r.rps)
    if not sums:
        return None
    first = min(sums)
    n = int((end - first).total_seconds() // STEP_S) + 1
    rps: list[float | None] = [None] * n
    for m, vals in sums.items():
        rps[int((m - first).total_seconds() // STEP_S)] = sum(vals) / len(vals)
    return DemandSeries(start=first, step_s=STEP_S, rps=rps)


def mix_of(rows: Sequence[DemandReading], until: datetime) -> tuple[float | None, float | None]:
    recent = [r for r in rows if until - timedelta(minutes=30) <= r.at <= until]
    out: list[float | None] = []
    for attr in ("prompt_tokens", "output_tokens"):
        pairs = [(getattr(r, attr), max(r.rps, 1e-6)) for r in recent if getattr(r, attr) is not None]
        w = sum(x for _, x in pairs)
        out.append(sum(v * x for v, x in pairs) / w if pairs and w > 0 else None)
    return out[0], out[1]


@dataclass(frozen=True)
class PlannedHour:
    start: datetime
    mean_rps: float
    upper_rps: float
    lower_rps: float
    planned_instances: int
    learned_floor: int

    def to_json(self) -> dict[str, Any]:
        return {
            "start": self.start.isoformat(),
            "forecast_rps": round(self.mean_rps, 3),
            "forecast_upper_rps": round(self.upper_rps, 3),
            "forecast_lower_rps": round(self.lower_rps, 3),
            "planned_instances": self.planned_instances,
            "learned_floor": self.learned_floor,
        }


@dataclass(frozen=True)
class ForecastView:
    group: str
    at: datetime
    method: str
    capacity_per_instance_rps: float | None
    capacity_source: str
    prompt_tokens: float
    output_tokens: float
    burstiness: float
    horizon_s: float
    horizon: fc.Forecast
    hours: list[PlannedHour]
    history: DemandSeries | None

    @property
    def horizon_unknown(self) -> bool:
        """No forecast over the horizon: too few minutes of demand in the last ``LEVEL_WINDOW_S`` for a
        level."""
        return self.horizon.method == fc.Method.NONE

    def to_json(self) -> dict[str, Any]:
        h = self.horizon
        return {
            "group": self.group,
            "at": self.at.isoformat(),
            "method": self.method,
            "capacity_per_instance_rps": None
            if self.capacity_per_instance_rps is None
            else round(self.capacity_per_instance_rps, 4),
            "capacity_source": self.capacity_source,
            "prompt_tokens": round(self.prompt_tokens, 1),
            "output_tokens": round(self.output_tokens, 1),
            "burstiness": round(self.burstiness, 3),
            "horizon_s": self.horizon_s,
            "level_rps": None if h.level_rps is None else round(h.level_rps, 3),
            # no recent level, no forecast over the horizon (the service's own abstains then): unknown, not 0
            "forecast_rps": None if self.horizon_unknown else round(h.mean_rps, 3),
            "forecast_upper_rps": None if self.horizon_unknown else round(h.upper_rps, 3),
            "hours": [p.to_json() for p in self.hours],
        }


def plan_forecast(
    spec: GroupSpec,
    rows: Sequence[DemandReading],
    at: datetime,
    hours: int,
    table: CapacityTable | None = None,
    state: ForecastState | None = None,
) -> ForecastView:
    """The forecast for ``hours`` after ``at`` from ``rows`` (history up to ``at``)."""
    state = state or ForecastState()
    table = table or CapacityTable()
    series = series_of(rows, at, float(spec.predictive.history_s))
    prompt, output = mix_of(rows, at)
    cap = table.lookup(spec, prompt, output)
    rps = None if cap.rps is None else cap.rps * state.correction
    zone, calendar, calendar_zone = spec.predictive.seasonal_zone, spec.calendar, spec.calendar_zone
    near = fc.forecast(
        series, at, spec.horizon_s, state, zone=zone, calendar=calendar, calendar_zone=calendar_zone
    )
    burst = fc.burstiness(series, at, cap=fc.STAFFING_MAX_BURSTINESS)
    planned: list[PlannedHour] = []
    hours_ahead = fc.hourly(
        series,
        at,
        hours,
        state,
        horizon_s=spec.horizon_s,
        zone=zone,
        calendar=calendar,
        calendar_zone=calendar_zone,
    )
    for h in hours_ahead:
        floor = bounds(spec, h.start).floor
        want = (
            floor if rps is None else max(floor, staffing(h.upper_rps / rps, spec.predictive.headroom, burst))
        )
        learned = floor if rps is None else max(floor, math.ceil(h.lower_rps / rps - 1e-9))
        planned.append(
            PlannedHour(h.start, h.mean_rps, h.upper_rps, h.lower_rps, min(want, spec.max_size), learned)
        )
    method = fc.Method.SEASONAL.value if planned else near.method.value
    return ForecastView(
        spec.name,
        at,
        method,
        rps,
        cap.source,
        cap.prompt_tokens,
        cap.output_tokens,
        burst,
        spec.horizon_s,
        near,
        planned,
        series,
    )


def svg_plot(view: ForecastView, width: int = 900, height: int = 320) -> str:
    """A self-contained SVG: the last day of demand, and the hourly forecast with its quantiles."""
    pts: list[tuple[float, float]] = []
    if view.history is not None:
        t0 = view.history.start.timestamp()
        for i, v in enumerate(view.history.rps):
            t = t0 + i * view.history.step_s
            if v is not None and t >= view.at.timestamp() - 86400:
                pts.append((t, v))
    fut = [(p.start.timestamp() + 1800, p.mean_rps, p.upper_rps, p.lower_rps) for p in view.hours]
    ts = [t for t, _ in pts] + [f[0] for f in fut] or [view.at.timestamp(), view.at.timestamp() + 1]
    ys = [v for _, v in pts] + [f[2] for f in fut] or [1.0]
    tmin, tmax = min(ts), max(max(ts), min(ts) + 1)
    ymax = max(max(ys), 1e-6) * 1.1
    pad = 40

    def xy(t: float, v: float) -> str:
        x = pad + (t - tmin) / (tmax - tmin) * (width - 2 * pad)
        y = height - pad - v / ymax * (height - 2 * pad)
        return f"{x:.1f},{y:.1f}"

    def line(points: list[str], color: str, dash: str = "") -> str:
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        return (
            f'<polyline fill="none" stroke="{color}" stroke-width="1.5"{extra} points="{" ".join(points)}"/>'
        )

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="11">',
        f'<text x="{pad}" y="16">{view.group}: demand (req/s), forecast from {view.at:%Y-%m-%d %H:%MZ}, '
        f"peak {ymax / 1.1:.2f}</text>",
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#999"/>',
    ]
    if pts:
        parts.append(line([xy(t, v) for t, v in pts], "#555"))
    if fut:
        parts.append(line([xy(t, m) for t, m, _, _ in fut], "#1f77b4"))
        parts.append(line([xy(t, u) for t, _, u, _ in fut], "#d62728", "4 3"))
        parts.append(line([xy(t, lo) for t, _, _, lo in fut], "#2ca02c", "4 3"))
    parts.append(
        f'<text x="{pad}" y="{height - 8}">grey: observed; blue: forecast; red: upper; green: lower (learned '
        "floor)</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
