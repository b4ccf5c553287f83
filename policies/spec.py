"""The policy part of fleet.yaml as pydantic models: bounds, schedules, metric rules, stabilization,
isolation rules and guardrails of each scaling group.

Durations are written as ``30s``, ``10m``, ``4h``, ``1h30m`` or a number of seconds and are held as
seconds (fields end in ``_s``; the YAML key is the short name, e.g. ``for``). Every model forbids unknown
keys so that a typo is an error naming the field, never a silently ignored setting.
"""

from __future__ import annotations

import difflib
import fnmatch
import math
import re
from datetime import date, datetime, time, timedelta
from enum import Enum, StrEnum
from typing import Annotated, Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from policies import metrics as m
from policies.capacity import CapacityMix, ZoneSpec
from policies.capacity import duplicates as capacity_duplicates

# ---- value types -------------------------------------------------------------------------------------------

_DURATION_PATTERN = r"^(\d+(\.\d+)?d)?(\d+(\.\d+)?h)?(\d+(\.\d+)?m)?(\d+(\.\d+)?s)?$"
_DURATION_RE = re.compile(
    r"^\s*(?:(\d+(?:\.\d+)?)d)?\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s)?\s*$"
)


# Any: a field validator sees the raw value parsed from YAML or JSON, of whatever type the user wrote
def parse_duration(value: Any) -> float:
    """Seconds from ``30s``, ``10m``, ``4h``, ``1h30m``, ``7d`` or a plain number of seconds (at most
    ``MAX_DURATION_S``)."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 30s, 10m or 4h")
    if isinstance(value, int | float):
        return _checked_duration(float(value))
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            match = _DURATION_RE.match(text)
            if not text or not match or not any(match.groups()):
                raise ValueError(f"{value!r} is not a duration; write e.g. 30s, 10m, 4h or 1h30m") from None
            d, h, mi, s = (float(g) if g else 0.0 for g in match.groups())
            seconds = d * 86400 + h * 3600 + mi * 60 + s
        return _checked_duration(seconds)
    raise ValueError("expected a duration like 30s, 10m or 4h")


MAX_DURATION_S = 366 * 86400.0  # no window, hold or history of this tool is longer than a year


class DurationRangeError(ValueError):
    """A duration that reads as one, out of range (infinite, negative, longer than MAX_DURATION_S); a plain
    ValueError from :func:`parse_duration` is text that is no duration at all."""


def _checked_duration(seconds: float) -> float:
    if not math.isfinite(seconds):
        raise DurationRangeError("a duration must be a finite number of seconds")
    if seconds < 0:
        raise DurationRangeError("a duration cannot be negative")
    if seconds > MAX_DURATION_S:
        raise DurationRangeError("a duration cannot be longer than 366d")
    return seconds


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": _DURATION_PATTERN},
            ],
            "description": "seconds, or a duration such as 30s, 10m, 4h, 1h30m, 7d",
        }
    ),
]

_WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


# Any: a field validator sees the raw value parsed from YAML or JSON, of whatever type the user wrote
def parse_weekdays(value: Any) -> tuple[int, ...]:
    """Weekday numbers (Monday = 0) from ``mon-fri``, ``sat,sun``, ``fri-mon``, ``daily`` or a list."""
    if value is None:
        return tuple(range(7))
    if isinstance(value, list | tuple):
        parts = [str(v) for v in value]
    elif isinstance(value, str):
        parts = [p for p in re.split(r"[,\s]+", value.strip().lower()) if p]
    else:
        raise ValueError("expected weekdays such as mon-fri, sat,sun or daily")
    days: set[int] = set()
    for part in parts:
        part = part.strip().lower()
        if part in ("daily", "*", "all", "every day"):
            days.update(range(7))
            continue
        if "-" in part:
            a, b = (x.strip() for x in part.split("-", 1))
            start, end = _weekday(a), _weekday(b)
            i = start
            while True:  # ranges may wrap: fri-mon
                days.add(i)
                if i == end:
                    break
                i = (i + 1) % 7
        else:
            days.add(_weekday(part))
    if not days:
        raise ValueError("no weekdays given")
    return tuple(sorted(days))


_FULL_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def _weekday(name: str) -> int:
    if name in _WEEKDAYS:
        return _WEEKDAYS.index(name)
    if name in _FULL_WEEKDAYS:
        return _FULL_WEEKDAYS.index(name)
    near = difflib.get_close_matches(name, _WEEKDAYS, n=1) or difflib.get_close_matches(
        name, _FULL_WEEKDAYS, n=1
    )
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise ValueError(f"unknown weekday {name!r}{hint}; use mon, tue, wed, thu, fri, sat, sun")


Weekdays = Annotated[
    tuple[int, ...],
    BeforeValidator(parse_weekdays),
    PlainSerializer(lambda days: ",".join(_WEEKDAYS[d] for d in days), return_type=str),
    WithJsonSchema(
        {
            "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
            "description": "weekdays: mon-fri, sat,sun, fri-mon (wraps), daily, or a list of names",
        }
    ),
]


# Any: a field validator sees the raw value parsed from YAML or JSON, of whatever type the user wrote
def parse_clock(value: Any) -> time:
    """``HH:MM`` (24 h); ``24:00`` means the end of the day and is held as 00:00."""
    if isinstance(value, time):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        # YAML 1.1 reads an unquoted 09:00 as the sexagesimal number 540
        value = f"{value // 60:02d}:{value % 60:02d}"
    if not isinstance(value, str) or not re.fullmatch(r"\d{1,2}:\d{2}", value.strip()):
        raise ValueError(f'{value!r} is not a time of day; write HH:MM, e.g. "09:00"')
    hh, mm = (int(x) for x in value.strip().split(":"))
    if (hh, mm) == (24, 0):
        return time(0, 0)
    if hh > 23 or mm > 59:
        raise ValueError(f"{value!r} is not a time of day (00:00-24:00)")
    return time(hh, mm)


ClockTime = Annotated[
    time,
    BeforeValidator(parse_clock),
    PlainSerializer(lambda t: t.strftime("%H:%M"), return_type=str),
    WithJsonSchema({"type": "string", "pattern": r"^\d{1,2}:\d{2}$", "description": "HH:MM"}),
]


# Any: a field validator sees the raw value parsed from YAML or JSON, of whatever type the user wrote
def parse_count_or_percent(value: Any) -> int | str:
    """An instance count (``2``) or a percentage of the group (``"20%"``)."""
    if isinstance(value, bool):
        raise ValueError('expected a count such as 2 or a percentage such as "20%"')
    if isinstance(value, int):
        if value < 0:
            raise ValueError("cannot be negative")
        return value
    if isinstance(value, float) and value.is_integer():
        return parse_count_or_percent(int(value))
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("%"):
            try:
                pct = float(text[:-1])
            except ValueError:
                raise ValueError(f"{value!r} is not a percentage") from None
            if not math.isfinite(pct):
                raise ValueError(f"{value!r} is not a finite percentage")
            if pct < 0:
                raise ValueError("cannot be negative")
            return f"{pct:g}%"
        if text.isdigit():
            return int(text)
    raise ValueError(f'{value!r}: expected a count such as 2 or a percentage such as "20%"')


CountOrPercent = Annotated[
    int | str,
    BeforeValidator(parse_count_or_percent),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"^\d+(\.\d+)?%$"}],
            "description": 'an instance count or a percentage of the group such as "20%"',
        }
    ),
]


def resolve_count(value: int | str, base: int, minimum: int = 0, round_up: bool = False) -> int:
    """A count, or a percentage of ``base`` (rounded down unless ``round_up``), never below ``minimum``."""
    if isinstance(value, int):
        return max(minimum, value)
    pct = float(value[:-1]) / 100.0
    raw = base * pct
    # the epsilon keeps 20% of 10 at exactly 2 despite binary floating point
    count = -int(-raw // 1) if round_up and raw % 1 > 1e-9 else int(raw + 1e-9)
    return max(minimum, count)


def _suggest(name: str, valid: list[str] | tuple[str, ...] | frozenset[str]) -> str:
    near = difflib.get_close_matches(name, sorted(valid), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


# ---- models ------------------------------------------------------------------------------------------------


class _Model(BaseModel):
    # NaN and infinity are never a setting: a NaN threshold never fires, an infinite one breaks the JSON out
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_yaml_booleans(cls, value: Any, info: ValidationInfo) -> Any:  # Any: raw input, passed on
        # YAML 1.1 reads yes/no/on/off as booleans, and pydantic would take True as the number 1
        # (`min_size: yes` was a floor of one); a boolean is only a boolean where the field is one
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            if not _admits_bool(annotation):
                raise ValueError(f"{str(value).lower()} (a YAML yes/no/on/off) is not a value of this field")
        return value


def _admits_bool(annotation: Any) -> bool:  # Any: a type annotation
    """Whether a field's type takes a boolean as itself (bool, an optional bool, Any) or converts one itself
    (an enum: predictive ``mode: on``)."""
    if annotation is bool or annotation is Any:
        return True
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return True
    return any(_admits_bool(arg) for arg in get_args(annotation))


def _check_share(metric: str | None, above: float | None, below: float | None) -> None:
    """A threshold on a percentage that no share can cross: above 100 never holds, below it always does."""
    if metric not in m.PERCENT_METRICS:
        return
    if above is not None and above >= 100:
        raise ValueError(f"above {above:g}: {metric} is a share in percent (0-100), so the rule never fires")
    if below is not None and below > 100:
        raise ValueError(f"below {below:g}: {metric} is a share in percent (0-100), so the rule always holds")


def _known_zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown timezone {value!r}; use an IANA name such as Asia/Shanghai") from None
    return value


class Schedule(_Model):
    """A recurring window that raises the floor (and may cap the group) while it is active.

    Either ``days`` + ``start`` + ``end`` (local time in ``timezone``; ``end`` earlier than ``start`` means
    the window runs past midnight into the next day; equal means 24 hours, so 00:00-24:00 is the whole day) or
    ``cron`` (the window's start, evaluated in ``timezone``)
    + ``duration``.
    """

    name: str
    timezone: str = "Asia/Shanghai"
    days: Weekdays | None = None
    start: ClockTime | None = None
    end: ClockTime | None = None
    cron: str | None = None
    duration_s: Duration | None = Field(default=None, alias="duration")
    floor: int = Field(
        default=0,
        ge=0,
        validation_alias=AliasChoices("min", "floor"),
        serialization_alias="min",
        description="instances kept InService + Pending while the window is active",
    )
    ceiling: int | None = Field(
        default=None,
        ge=0,
        validation_alias=AliasChoices("max", "ceiling"),
        serialization_alias="max",
        description="optional cap while the window is active (see docs/policies.md for overlaps)",
    )

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        return _known_zone(value)

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        if value is not None and not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a cron expression (minute hour day month weekday)")
        return value

    @model_validator(mode="after")
    def _one_form(self) -> Schedule:
        hours = self.start is not None or self.end is not None
        if self.cron is not None:
            if hours:
                raise ValueError("give either cron + duration or start + end, not both")
            if not self.duration_s:
                raise ValueError("a cron window needs a positive duration, e.g. duration: 9h")
            if self.days is not None:
                raise ValueError(
                    "days does not apply to a cron window (put the weekdays in the cron expression)"
                )
        else:
            if self.start is None or self.end is None:
                raise ValueError("a window needs start and end (HH:MM) or cron + duration")
            if self.duration_s is not None:
                raise ValueError("duration applies only to cron windows")
        if self.ceiling is not None and self.ceiling < self.floor:
            raise ValueError(f"max ({self.ceiling}) is below min ({self.floor})")
        return self

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def weekdays(self) -> tuple[int, ...]:
        return self.days if self.days is not None else tuple(range(7))


# ---- calendar ----------------------------------------------------------------------------------------------

# a holiday run, or a run of makeup workdays, longer than this is a typo in a year (2072 for 2027)
MAX_DAY_SPAN_DAYS = 366


# Any: a field validator sees the raw value parsed from YAML or JSON, of whatever type the user wrote
def parse_day_span(value: Any) -> tuple[date, date]:
    """The first and last day of ``2027-02-06`` (one day) or ``2027-02-06..2027-02-13`` (both included);
    YAML reads an unquoted date as a ``date``."""
    if isinstance(value, datetime):
        raise ValueError(f"{value.isoformat()} is a time; give a date, e.g. 2027-02-06")
    if isinstance(value, date):
        return value, value
    if not isinstance(value, str):
        raise ValueError(f"{value!r}: expected a date (2027-02-06) or a range (2027-02-06..2027-02-13)")
    parts = [p.strip() for p in value.strip().split("..")]
    if len(parts) > 2 or not all(parts):
        raise ValueError(f"{value!r}: expected a date (2027-02-06) or a range (2027-02-06..2027-02-13)")
    first, last = _iso_day(parts[0]), _iso_day(parts[-1])
    if last < first:
        raise ValueError(f"{value!r}: the range ends before it starts; write the earlier date first")
    if (last - first).days >= MAX_DAY_SPAN_DAYS:
        raise ValueError(f"{value!r}: a range of {(last - first).days + 1} days; at most {MAX_DAY_SPAN_DAYS}")
    return first, last


def _iso_day(text: str) -> date:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        raise ValueError(f"{text!r} is not a date; write YYYY-MM-DD, e.g. 2027-02-06")
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a date ({exc})") from None


def _span_text(span: tuple[date, date]) -> str:
    first, last = span
    return first.isoformat() if first == last else f"{first.isoformat()}..{last.isoformat()}"


DaySpan = Annotated[
    tuple[date, date],
    BeforeValidator(parse_day_span),
    PlainSerializer(_span_text, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^\d{4}-\d{2}-\d{2}(\.\.\d{4}-\d{2}-\d{2})?$",
            "description": "a date (2027-02-06) or a range of dates, both included (2027-02-06..2027-02-13)",
        }
    ),
]


# Any: a field validator sees the raw value parsed from YAML or JSON, of whatever type the user wrote
def parse_one_weekday(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 6:
        return value
    if not isinstance(value, str):
        raise ValueError("expected one weekday: mon, tue, wed, thu, fri, sat or sun")
    return _weekday(value.strip().lower())


OneWeekday = Annotated[
    int,
    BeforeValidator(parse_one_weekday),
    PlainSerializer(lambda d: _WEEKDAYS[d], return_type=str),
    WithJsonSchema({"type": "string", "enum": list(_WEEKDAYS), "description": "one weekday"}),
]


_WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


class Calendar(_Model):
    """Days whose type differs from their weekday's: public holidays (an office's load falls to a weekend's)
    and makeup workdays (a Saturday or Sunday that is an official workday, China's 调休).

    Each schedule reads the dates in its own ``timezone``. On a holiday a ``days`` window applies as on
    ``holiday_like`` (Sunday), on a makeup workday as on ``workday_like`` (Monday): ``mon-fri`` business hours
    are off on a holiday and on on a makeup Saturday, a ``sat,sun`` window the other way round.
    """

    holidays: tuple[DaySpan, ...] = Field(
        default=(), description="non-working days, each read as holiday_like (dates or ranges a..b)"
    )
    workdays: tuple[DaySpan, ...] = Field(
        default=(), description="makeup working days, each read as workday_like (dates or ranges a..b)"
    )
    holiday_like: OneWeekday = Field(default=6, description="the weekday a holiday is read as (sun)")
    workday_like: OneWeekday = Field(default=0, description="the weekday a makeup workday is read as (mon)")

    @model_validator(mode="after")
    def _disjoint(self) -> Calendar:
        problems = _overlaps("holidays", self.holidays) + _overlaps("workdays", self.workdays)
        for h in self.holidays:
            for w in self.workdays:
                if h[0] <= w[1] and w[0] <= h[1]:
                    both = max(h[0], w[0])
                    problems.append(
                        f"{both.isoformat()} is both a holiday ({_span_text(h)}) and a workday "
                        f"({_span_text(w)}); list it once"
                    )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def weekday_of(self, day: date) -> int:
        """The weekday (Monday = 0) a schedule reads ``day`` as: the calendar's on an exception."""
        if any(first <= day <= last for first, last in self.holidays):
            return self.holiday_like
        if any(first <= day <= last for first, last in self.workdays):
            return self.workday_like
        return day.weekday()

    def describe(self, day: date) -> str | None:
        """``holiday 2027-02-11 (as Sunday)`` or ``makeup workday 2027-02-20 (as Monday)``; None for a day the
        calendar leaves alone: what a floor's reason names when the calendar changed it."""
        if any(first <= day <= last for first, last in self.holidays):
            return f"holiday {day.isoformat()} (as {_WEEKDAY_NAMES[self.holiday_like]})"
        if any(first <= day <= last for first, last in self.workdays):
            return f"makeup workday {day.isoformat()} (as {_WEEKDAY_NAMES[self.workday_like]})"
        return None

    def exception_days(self, first: date, last: date) -> list[date]:
        """The holidays and makeup workdays from ``first`` to ``last`` (both included), in order."""
        out: set[date] = set()
        for lo, hi in (*self.holidays, *self.workdays):
            day = max(lo, first)
            while day <= min(hi, last):
                out.add(day)
                day += timedelta(days=1)
        return sorted(out)


def _overlaps(key: str, spans: tuple[tuple[date, date], ...]) -> list[str]:
    ordered = sorted(spans)
    return [
        f"{key}: {_span_text(b)} overlaps {_span_text(a)}; list each day once"
        for a, b in zip(ordered, ordered[1:], strict=False)
        if b[0] <= a[1]
    ]


def weekday_of(calendar: Calendar | None, day: date) -> int:
    """``day``'s weekday as a schedule reads it under ``calendar`` (none: its own)."""
    return day.weekday() if calendar is None else calendar.weekday_of(day)


Aggregation = Literal["per_instance", "mean", "max", "min", "sum"]


class MetricRule(_Model):
    """A scaling rule in LLM terms: ``{metric: ttft_p99_ms, above: 800, for: 60s}``.

    Scale-out rules use ``above`` and scale-in rules ``below``. ``above`` may be written ``"2x"`` together
    with ``baseline`` (a value in the metric's unit) for "twice the baseline". ``target`` sets the
    per-instance target of the target form (desired = ceil(total / target)); it defaults to the threshold for
    ``queue_waiting_per_instance``; otherwise the ratio form desired = ceil(N * value / threshold) applies.
    """

    metric: str
    above: float | None = None
    below: float | None = None
    baseline: float | None = Field(default=None, gt=0)
    for_s: Duration = Field(default=0.0, alias="for")
    target: float | None = Field(default=None, gt=0)
    aggregate: Aggregation | None = None

    @model_validator(mode="before")
    @classmethod
    def _ratio_threshold(cls, data: Any) -> Any:  # Any: a "before" validator sees and returns raw input
        if isinstance(data, dict):
            for key in ("above", "below"):
                raw = data.get(key)
                if isinstance(raw, str) and raw.strip().lower().endswith("x"):
                    try:
                        factor = float(raw.strip()[:-1])
                    except ValueError:
                        raise ValueError(f"{key}: {raw!r} is neither a number nor a factor like 2x") from None
                    baseline = data.get("baseline")
                    if not isinstance(baseline, int | float) or isinstance(baseline, bool) or baseline <= 0:
                        raise ValueError(f"{key}: {raw!r} needs a positive baseline (in the metric's unit)")
                    data = {**data, key: factor * float(baseline)}
        return data

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        if value not in m.GROUP_METRICS:
            raise ValueError(
                f"unknown metric {value!r}{_suggest(value, list(m.GROUP_METRICS))}; valid: "
                + ", ".join(sorted(m.GROUP_METRICS))
            )
        return value

    @model_validator(mode="after")
    def _share_within_100(self) -> MetricRule:
        _check_share(self.metric, self.above, self.below)
        return self

    @property
    def threshold(self) -> float:
        # ignored: the validator requires exactly one of above and below, so this is never None
        return self.above if self.above is not None else self.below  # type: ignore[return-value]

    @property
    def target_form(self) -> bool:
        return self.metric == m.QUEUE_WAITING_PER_INSTANCE or self.target is not None

    @property
    def per_instance_target(self) -> float:
        return self.target if self.target is not None else self.threshold

    @property
    def aggregation(self) -> str:
        return self.aggregate or m.GROUP_METRICS[self.metric][1]

    @property
    def label(self) -> str:
        op = ">" if self.above is not None else "<"
        return f"{self.metric} {op} {self.threshold:g} for {self.for_s:g}s"


class ScaleOutRule(MetricRule):
    @model_validator(mode="after")
    def _above_only(self) -> ScaleOutRule:
        if self.above is None or self.below is not None:
            raise ValueError("a scale_out rule needs 'above' (and no 'below')")
        if self.above <= 0:
            raise ValueError("above must be positive")
        return self


class ScaleInRule(MetricRule):
    @model_validator(mode="after")
    def _below_only(self) -> ScaleInRule:
        if self.below is None or self.above is not None:
            raise ValueError("a scale_in rule needs 'below' (and no 'above')")
        if self.below <= 0:
            raise ValueError("below must be positive (a rule below 0 could never hold)")
        return self


class Stabilization(_Model):
    """Fast up, slow down; defaults follow the Kubernetes HPA and Knative/AIBrix KPA (docs/policies.md)."""

    scale_in_window_s: Duration = Field(
        default=600.0,
        alias="scale_in_window",
        description="scale in only to the highest recommendation seen in this window (HPA-style)",
    )
    tolerance: float = Field(default=0.1, ge=0, lt=1, description="ignore changes within this fraction")
    max_step_up: CountOrPercent = Field(default="100%", description="per decision: a count or % of current")
    max_step_down: CountOrPercent = Field(default=1, description="per decision: a count or % of current")
    scale_in_cooldown_s: Duration = Field(default=120.0, alias="scale_in_cooldown")
    panic_threshold: float = Field(
        default=2.0, gt=1, description="a scale-out rule at this multiple of its threshold fires at once"
    )
    panic_hold_s: Duration = Field(default=180.0, alias="panic_hold", description="no scale-in after a panic")
    stale_after_s: Duration = Field(
        default=120.0,
        alias="stale_after",
        gt=0,
        description="a metric sample older than this is unknown (0 would make every sample unknown)",
    )


class PredictiveMode(StrEnum):
    """What the predictive scaler does: nothing, record what it would do (AWS's ForecastOnly), or act."""

    OFF = "off"
    FORECAST_ONLY = "forecast-only"
    ON = "on"


# the context the capacity model sizes a group's engine for when its predictive section sets no max_model_len
DEFAULT_MAX_MODEL_LEN = 8192
VLLM_SETTINGS = ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization")
# The smallest chunked-prefill budget a group or a snapshot may name: vLLM's block size (16 tokens); a budget
# below it is a typo, not a running engine.
MIN_BATCHED_TOKENS = 16


class Predictive(_Model):
    """Capacity-model, predictive scaling of one group (docs/policies.md, "Predictive scaling").

    Capacity per instance comes from the sizing engine for ``model`` on ``instance_type`` (the same model as
    ``fleet size``) at the observed token mix, or from ``capacity_rps`` when a team measured it.
    """

    mode: PredictiveMode = PredictiveMode.OFF
    horizon_s: Duration | None = Field(
        default=None,
        alias="horizon",
        description="how far ahead capacity is planned; default cold_start + 2 min, never below cold_start",
    )
    headroom: float = Field(
        default=0.7,
        ge=0,
        le=5,
        description="square-root staffing beta: R + headroom x sqrt(R) x sqrt((1 + dispersion) / 2)",
    )
    history_s: Duration = Field(
        default=7 * 86400.0, alias="history", ge=3600, description="demand history the forecast reads"
    )
    model: str | None = Field(default=None, description="the served model, as `fleet size --model` names it")
    instance_type: str | None = Field(default=None, description="ECS instance type of the group")
    tp: int | None = Field(default=None, ge=1, description="tensor parallel size; default all GPUs")
    max_model_len: int | None = Field(default=None, ge=256)
    max_num_seqs: int | None = Field(
        default=None, ge=1, description="vLLM's max_num_seqs on the group; default the sizing engine's"
    )
    max_num_batched_tokens: int | None = Field(
        default=None,
        ge=MIN_BATCHED_TOKENS,
        description="vLLM's max_num_batched_tokens (the chunked-prefill budget); default the sizing engine's",
    )
    gpu_memory_utilization: float | None = Field(
        default=None, gt=0, le=1, description="vLLM's gpu_memory_utilization, in (0, 1]; default 0.9"
    )
    capacity_rps: float | None = Field(
        default=None, gt=0, description="measured requests/s one instance serves within the SLOs"
    )
    ttft_p99_ms: float | None = Field(
        default=None, gt=0, description="P99 TTFT SLO; default the ttft_p99_ms scale-out threshold"
    )
    tpot_p99_ms: float | None = Field(default=None, gt=0, description="P99 TPOT SLO (optional)")
    prefix_hit: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description=(
            "share of each prompt vLLM finds in its prefix cache (the node agent's"
            " vllm_prefix_cache_hit_ratio on the running fleet), as `fleet size --prefix-hit`: held in the KV"
            " cache, not computed"
        ),
    )
    scale_in_margin: float = Field(
        default=0.1, ge=0, lt=1, description="scale in only when the forecast fits in fewer with this margin"
    )
    max_step_down: CountOrPercent = Field(default="10%", description="per decision, at least one instance")
    correction_bound: float = Field(
        default=0.25,
        ge=0,
        lt=1,
        description=(
            "each factor of the online correction of capacity (the engines' speed, the SLO's feedback) stays"
            " within 1 +/- this"
        ),
    )
    learned_floors: bool = Field(
        default=True, description="mirror the forecast's lower-quantile floor as ESS scheduled tasks"
    )
    timezone: str | None = Field(
        default=None,
        description=(
            "IANA zone whose clock the demand follows: the forecast's 'same time yesterday and a week ago' is"
            " read on it (23 or 25 hours back across a daylight-saving change); default whole days in UTC"
        ),
    )
    rules_ceiling: float | None = Field(
        default=1.5,
        ge=1,
        le=10,
        description=(
            "while the demand is known, the rules' scale-out goes no higher than this times the observed "
            "load in instances, or the forecast's target if more (null: uncapped)"
        ),
    )

    @property
    def vllm_settings(self) -> dict[str, int | float]:
        """The vLLM settings the section sets (of ``VLLM_SETTINGS``), for the sizing engine's Deployment; the
        others are left at the sizing engine's defaults."""
        return {name: value for name in VLLM_SETTINGS if (value := getattr(self, name)) is not None}

    @property
    def seasonal_zone(self) -> ZoneInfo | None:
        return ZoneInfo(self.timezone) if self.timezone is not None else None

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str | None) -> str | None:
        return None if value is None else _known_zone(value)

    @property
    def mirrors_learned_floors(self) -> bool:
        """Whether the learned floors are written as ESS scheduled tasks (mode ``on``, learned floors)."""
        return self.mode == PredictiveMode.ON and self.learned_floors

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_booleans(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare on / off as a boolean: `mode: on` must still mean "on"
        if value is True:
            return PredictiveMode.ON
        if value is False:
            return PredictiveMode.OFF
        return value

    @model_validator(mode="after")
    def _capacity_source(self) -> Predictive:
        sized = self.capacity_rps is not None or bool(self.model and self.instance_type)
        if self.mode != PredictiveMode.OFF and not sized:
            raise ValueError("predictive needs model and instance_type (sizing engine) or capacity_rps")
        return self

    @model_validator(mode="after")
    def _batch_budget(self) -> Predictive:
        # vLLM refuses to start with a chunked-prefill budget below one token for each sequence
        budget, seqs = self.max_num_batched_tokens, self.max_num_seqs
        if budget is not None and seqs is not None and budget < seqs:
            raise ValueError(
                f"max_num_batched_tokens {budget} is below max_num_seqs {seqs}; vLLM needs at least one token"
                " a sequence"
            )
        return self


IsolationAction = Literal["reboot", "replace", "hold"]
ACTION_SEVERITY: dict[str, int] = {"reboot": 0, "hold": 1, "replace": 2}

_INSTANCE_THRESHOLD_METRICS = frozenset(m.INSTANCE_METRICS) - {m.GPU_XID, m.GPU_THROTTLE_REASONS}


_ONE_DETECTOR = "give one detector: metric, throttle_reasons, xids, events, peer_factor or absent_for"


def _a(kind: str) -> str:
    """The rule kind with its article: "an event", "a throttle"."""
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


class IsolationRule(_Model):
    """One way a node is judged faulty, and what to do about it.

    Exactly one detector: ``metric`` + ``above``/``below`` (+ ``for``; with ``repeat`` > 1, that many episodes
    of the condition within ``window``, each begun after it had cleared and held for ``for``),
    ``throttle_reasons`` (+ ``samples``), ``xids`` (+ ``repeat`` within ``window``), ``events`` (ECS system
    event code patterns, ``*`` wildcards), ``peer_factor`` (the instance's ``metric`` above that multiple
    of its peers' median for ``for``), or ``absent_for`` (no fresh ``metric`` from the instance for that long
    while its peers send theirs: its node agent stopped, or the node hangs).
    """

    name: str | None = None
    metric: str | None = None
    above: float | None = None
    below: float | None = None
    for_s: Duration = Field(default=0.0, alias="for")
    throttle_reasons: tuple[str, ...] | None = None
    samples: int = Field(default=1, ge=1, description="consecutive samples (throttle rules)")
    xids: tuple[int, ...] | None = None
    repeat: int = Field(
        default=1,
        ge=1,
        description=(
            "occurrences needed within window: XIDs, or a metric rule's episodes (the condition began again "
            "after it had cleared, each held for `for`)"
        ),
    )
    window_s: Duration = Field(default=600.0, alias="window")
    events: tuple[str, ...] | None = None
    peer_factor: float | None = Field(default=None, gt=1)
    absent_for_s: Duration | None = Field(
        default=None,
        alias="absent_for",
        description="the instance has sent no fresh sample of `metric` for this long while its peers have",
    )
    min_peers: int = Field(default=3, ge=1)
    min_value: float = Field(default=0.0, ge=0, description="outlier rules ignore values below this")
    action: IsolationAction = "reboot"

    @field_validator("throttle_reasons")
    @classmethod
    def _known_reasons(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None:
            if not value:
                raise ValueError("list at least one throttle reason")
            for name in value:
                if name not in m.THROTTLE_REASON_NAMES:
                    raise ValueError(
                        f"unknown throttle reason {name!r}{_suggest(name, list(m.THROTTLE_REASON_NAMES))}; "
                        "valid: " + ", ".join(m.THROTTLE_REASON_NAMES)
                    )
        return value

    def _detectors_given(self) -> list[str]:
        """The detector kinds this rule names, in ``kind``'s order (a valid rule names at most one)."""
        return [
            k
            for k, on in (
                ("xid", self.xids is not None),
                ("event", self.events is not None),
                ("throttle", self.throttle_reasons is not None),
                ("outlier", self.peer_factor is not None),
                ("absent", self.absent_for_s is not None),
            )
            if on
        ]

    @model_validator(mode="after")
    def _one_detector(self) -> IsolationRule:
        kinds = self._detectors_given()
        if len(kinds) > 1:
            raise ValueError(_ONE_DETECTOR)
        if kinds:
            kind = kinds[0]
            if kind == "outlier" and self.metric is None:
                raise ValueError("an outlier rule needs the metric to compare, e.g. metric: ttft_p99_ms")
            if kind == "absent" and self.metric is None:
                raise ValueError("an absent_for rule needs the metric it waits for, e.g. metric: vllm_up")
            if kind == "absent" and (self.absent_for_s or 0.0) <= 0:
                raise ValueError("absent_for must be positive, e.g. 10m")
            if kind != "outlier" and (self.above is not None or self.below is not None):
                raise ValueError(f"above/below do not apply to {_a(kind)} rule")
            if kind in ("xid", "event", "throttle") and self.metric is not None:
                raise ValueError(f"metric does not apply to {_a(kind)} rule")
            if kind == "xid" and not self.xids:
                raise ValueError("list at least one XID")
            if kind == "event" and not self.events:
                raise ValueError("list at least one event code pattern, e.g. SystemFailure.*")
            if kind != "xid" and self.repeat > 1:
                raise ValueError(f"repeat does not apply to {_a(kind)} rule (only to xids and metric rules)")
        else:
            if self.metric is None:
                raise ValueError(_ONE_DETECTOR)
            if (self.above is None) == (self.below is None):
                raise ValueError("a metric rule needs exactly one of above or below")
        if self.metric is not None and self.kind == "metric":
            _check_share(self.metric, self.above, self.below)
        if self.metric is not None and self.metric not in _INSTANCE_THRESHOLD_METRICS:
            raise ValueError(
                f"unknown instance metric {self.metric!r}"
                f"{_suggest(self.metric, _INSTANCE_THRESHOLD_METRICS)}; "
                "valid: " + ", ".join(sorted(_INSTANCE_THRESHOLD_METRICS))
            )
        return self

    @property
    def kind(self) -> str:
        """``xid``, ``event``, ``throttle``, ``outlier``, ``absent``, or ``metric`` (a threshold)."""
        return next(iter(self._detectors_given()), "metric")

    def matches_event(self, code: str) -> bool:
        """Whether an ECS system event's code (e.g. ``SystemFailure.Reboot``) is one of ``events``' patterns;
        never for a rule that reads no events."""
        return any(fnmatch.fnmatchcase(code, pattern) for pattern in self.events or ())

    @property
    def rule_id(self) -> str:
        """A stable name for the rule (its ``name``, or one derived from the detector)."""
        if self.name:
            return self.name
        if self.kind == "xid":
            return "xid_" + "_".join(str(x) for x in self.xids or ())
        if self.kind == "event":
            return "event_" + "_".join(e.replace("*", "").rstrip(".").lower() for e in self.events or ())
        if self.kind == "throttle":
            return "throttle_" + "_".join(self.throttle_reasons or ())
        if self.kind == "outlier":
            return f"{self.metric}_outlier"
        if self.kind == "absent":
            return f"{self.metric}_absent"
        op = "above" if self.above is not None else "below"
        return f"{self.metric}_{op}_{self.above if self.above is not None else self.below:g}"


def default_isolation_rules() -> tuple[IsolationRule, ...]:
    """The rules of issue 3 when a group lists none (power cap is left out: a busy GPU hits it normally)."""
    return (
        IsolationRule(name="gpu_overheat", metric=m.GPU_TEMPERATURE_C, above=85, for_s=120, action="reboot"),
        # vLLM pre-allocates --gpu-memory-utilization (0.9 by default) of every GPU at start-up, and NVML
        # counts the driver's reserve beside it: a healthy engine reads 90-93 %. "Memory over 90 %" is memory
        # beyond that reservation (a leak, a stray process), so the default is 95.
        IsolationRule(
            name="gpu_memory_full", metric=m.GPU_MEM_USED_PCT, above=95, for_s=300, action="reboot"
        ),
        IsolationRule(
            name="gpu_throttled",
            throttle_reasons=("hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"),
            samples=4,
            action="reboot",
        ),
        # vLLM died or hung on a node whose GPUs look fine (CUDA OOM, an NCCL timeout, a crashed worker): it
        # serves nothing while ESS and the load balancer may still count it. A reboot starts vLLM again.
        IsolationRule(
            name="engine_down", metric=m.VLLM_UP, below=m.ENGINE_DOWN_BELOW, for_s=120, action="reboot"
        ),
        # vLLM that keeps dying and coming back (a supervisor restarts it; each crash loses the requests in
        # flight): every outage is shorter than engine_down waits, so count them instead.
        IsolationRule(
            name="engine_restarting",
            metric=m.VLLM_UP,
            below=m.ENGINE_DOWN_BELOW,
            for_s=30,
            repeat=3,
            window_s=3600,
            action="reboot",
        ),
        # The node agent stopped sending (it died, or the node hangs) while its peers' agents report: nothing
        # on the node can be judged, and its missing metrics hold every scale-in of the group. A reboot starts
        # the agent again; one that does not come back is replaced when the health check times out.
        IsolationRule(name="agent_silent", metric=m.VLLM_UP, absent_for_s=600, action="reboot"),
        IsolationRule(name="xid_hardware", xids=m.HARDWARE_XIDS, action="replace"),
        # XIDs a GPU reset clears (row remap pending, GSP timeout, the driver asking for a reset): a reboot is
        # the reset on ECS; one that comes back after it fails the health check and the node is replaced.
        # Application XIDs (13, 31, 43, 45) isolate nothing: NVIDIA's action is to restart the application.
        IsolationRule(name="xid_reset", xids=m.RESET_XIDS, action="reboot"),
        # Row remapping as NVML reads it now: an XID 63 / 64 raised while the agent was down is not lost.
        IsolationRule(
            name="row_remap_failure",
            metric=m.GPU_ROW_REMAP,
            above=m.ROW_REMAP_FAILURE - 0.5,
            action="replace",
        ),
        IsolationRule(
            name="row_remap_pending", metric=m.GPU_ROW_REMAP, above=m.ROW_REMAP_PENDING - 0.5, action="reboot"
        ),
        IsolationRule(name="ecs_system_failure", events=("SystemFailure.*",), action="replace"),
        IsolationRule(name="ecs_maintenance", events=("SystemMaintenance.*",), action="reboot"),
        IsolationRule(
            name="latency_outlier",
            metric=m.TTFT_P99_MS,
            peer_factor=3.0,
            for_s=300,
            min_value=200,
            action="hold",
        ),
    )


class Breaker(_Model):
    """More than ``max_isolations`` automatic incidents opened within ``window`` pauses automatic isolation
    until a human resets it (NVSentinel's breaker, counted per group)."""

    max_isolations: CountOrPercent = 3
    window_s: Duration = Field(default=3600.0, alias="window")


class Guardrails(_Model):
    max_isolated: CountOrPercent | None = Field(
        default=None, description="instances out of service for isolation at once; default max(1, 20%)"
    )
    breaker: Breaker = Field(default_factory=Breaker)
    block_scale_in_while_isolating: bool = Field(
        default=True, description="no scale-in while an isolated instance has no replacement in service"
    )

    def max_isolated_for(self, group_size: int) -> int:
        if self.max_isolated is None:
            return max(1, resolve_count("20%", group_size))
        return resolve_count(self.max_isolated, group_size)


# the default health check's room beyond the cold start (an ECS reboot, a slow disk)
HEALTH_CHECK_LOAD_MARGIN_S = 300.0


class IsolationSpec(_Model):
    enabled: bool = True
    respond_within_s: Duration = Field(default=900.0, alias="respond_within")
    isolate_within_s: Duration = Field(default=14400.0, alias="isolate_within")
    at_risk_fraction: float = Field(
        default=0.75,
        gt=0,
        lt=1,
        description="flag an SLA at risk once this fraction of its window has passed",
    )
    drain_timeout_s: Duration = Field(default=600.0, alias="drain_timeout")
    health_check_timeout_s: Duration = Field(default=900.0, alias="health_check_timeout")
    max_reboots: int = Field(
        default=2, ge=0, description="reboots of one instance per day before replacing it"
    )
    rules: tuple[IsolationRule, ...] = Field(default_factory=default_isolation_rules)

    @model_validator(mode="after")
    def _unique_rule_ids(self) -> IsolationSpec:
        seen: set[str] = set()
        for rule in self.rules:
            if rule.rule_id in seen:
                raise ValueError(f"two isolation rules are named {rule.rule_id!r}; give them distinct names")
            seen.add(rule.rule_id)
        if self.isolate_within_s < self.respond_within_s:
            raise ValueError(
                f"isolate_within ({self.isolate_within_s:g} s) is shorter than respond_within "
                f"({self.respond_within_s:g} s): an incident is isolated after it is responded to"
            )
        return self


# ESS accepts MinSize and MaxSize from 0 to 2000 instances (CreateScalingGroup / ModifyScalingGroup).
ESS_MAX_GROUP_SIZE = 2000


class GroupSpec(_Model):
    """The policy of one ESS scaling group."""

    name: str = Field(min_length=1)
    scaling_group_id: str | None = None
    scaling_group_name: str | None = None
    min_size: int = Field(ge=0, le=ESS_MAX_GROUP_SIZE)
    max_size: int = Field(ge=1, le=ESS_MAX_GROUP_SIZE)
    warm_floor: int = Field(default=2, ge=0, description="never fewer InService + Pending instances")
    cold_start_s: Duration = Field(
        default=180.0, description="order-to-serving time; floors start this early"
    )
    schedules: tuple[Schedule, ...] = ()
    calendar: Calendar | None = Field(
        default=None,
        description="holidays and makeup workdays the schedules honour (default: the top level's calendar)",
    )
    scale_out: tuple[ScaleOutRule, ...] = ()
    scale_in: tuple[ScaleInRule, ...] = ()
    stabilization: Stabilization = Field(default_factory=Stabilization)
    isolation: IsolationSpec = Field(default_factory=IsolationSpec)
    guardrails: Guardrails = Field(default_factory=Guardrails)
    predictive: Predictive = Field(default_factory=Predictive)
    # GPU capacity (issue 17, policies/capacity.py): the fallback ladder and how capacity is bought.
    model: str | None = Field(
        default=None,
        description="the model served (sizing catalog name): instance_types are checked to hold it",
    )
    instance_types: tuple[str, ...] = Field(
        default=(), description="instance types in priority order: the fallback ladder"
    )
    zones: tuple[ZoneSpec, ...] = Field(
        default=(), description="zones (with their vSwitches) in priority order"
    )
    capacity_mix: CapacityMix | None = None
    economical_mode: bool = Field(
        default=False, description="scale in by stopping (ESS ScalingPolicy recycle): restarts are faster"
    )

    @model_validator(mode="after")
    def _capacity_keys(self) -> GroupSpec:
        problems = capacity_duplicates(self.instance_types, self.zones)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="before")
    @classmethod
    def _cold_start_alias(cls, data: Any) -> Any:  # Any: a "before" validator sees and returns raw input
        if isinstance(data, dict) and "cold_start" in data and "cold_start_s" not in data:
            data = {**data, "cold_start_s": data["cold_start"]}
            data.pop("cold_start")
        return data

    @model_validator(mode="after")
    def _consistent_bounds(self) -> GroupSpec:
        problems = []
        if self.min_size > self.max_size:
            problems.append(f"min_size ({self.min_size}) is above max_size ({self.max_size})")
        if self.warm_floor > self.max_size:
            problems.append(f"warm_floor ({self.warm_floor}) is above max_size ({self.max_size})")
        for sched in self.schedules:
            if sched.floor > self.max_size:
                problems.append(
                    f"schedule {sched.name!r}: min ({sched.floor}) is above max_size ({self.max_size})"
                )
            base = max(self.min_size, self.warm_floor)
            if sched.ceiling is not None and sched.ceiling < base:
                problems.append(
                    f"schedule {sched.name!r}: max ({sched.ceiling}) is below the group's floor ({base})"
                )
        horizon = self.predictive.horizon_s
        if horizon is not None and horizon < self.cold_start_s:
            problems.append(
                f"predictive horizon ({horizon:g}s) is below cold_start_s ({self.cold_start_s:g}s): capacity "
                "ordered now arrives after it"
            )
        iso = self.isolation
        configured_short = self._health_check_timeout_set and iso.health_check_timeout_s < self.cold_start_s
        if configured_short and self._health_check_waits_for_engine:
            problems.append(
                f"isolation health_check_timeout ({iso.health_check_timeout_s:g}s) is below cold_start_s "
                f"({self.cold_start_s:g}s): after a reboot the health check waits for vLLM to serve, which "
                "takes the cold start, so every rebooted node would be replaced"
            )
        names = [s.name for s in self.schedules]
        for name in sorted({n for n in names if names.count(n) > 1}):
            problems.append(f"two schedules are named {name!r}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _no_flapping_thresholds(self) -> GroupSpec:
        """A scale-in threshold above the scale-out threshold of the same metric: every value between them
        asks for both, so the group scales out and in by turns (flapping). An equal one is only warned of."""
        problems = [
            f"scale_in rule {low.label!r} is above scale_out rule {high.label!r}: a value between "
            f"{high.threshold:g} and {low.threshold:g} scales out and in by turns (flapping); keep the "
            "scale-in threshold below the scale-out one"
            for low, high in threshold_pairs(self)
            if low.threshold > high.threshold
        ]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def _health_check_waits_for_engine(self) -> bool:
        iso = self.isolation
        return iso.enabled and any(r.metric in m.ENGINE_HEALTH_METRICS for r in iso.rules)

    @property
    def _health_check_timeout_set(self) -> bool:
        return "health_check_timeout_s" in self.isolation.model_fields_set

    @property
    def health_check_timeout_s(self) -> float:
        """How long the health check after a reboot waits: as configured; left at its default where it waits
        for the engine (a ``vllm_up`` rule), at least the cold start plus ``HEALTH_CHECK_LOAD_MARGIN_S``, so a
        model whose weights load longer than the default is not replaced after every reboot."""
        return self.health_check_timeout_after(float(self.cold_start_s))

    def health_check_timeout_after(self, load_s: float) -> float:
        """``health_check_timeout_s`` where an engine takes ``load_s`` to load (at least the cold start: what
        launches here were seen to take, ``policies.launch_verdicts.load_time_s``)."""
        timeout = float(self.isolation.health_check_timeout_s)
        if self._health_check_timeout_set or not self._health_check_waits_for_engine:
            return timeout
        return max(timeout, max(load_s, float(self.cold_start_s)) + HEALTH_CHECK_LOAD_MARGIN_S)

    @property
    def calendar_zone(self) -> ZoneInfo | None:
        """The clock the forecast reads the calendar's dates on: the predictive timezone, else the first
        schedule's (the schedules read them on their own), else None (UTC)."""
        if self.predictive.timezone is not None:
            return ZoneInfo(self.predictive.timezone)
        return self.schedules[0].zone if self.schedules else None

    @property
    def base_floor(self) -> int:
        return max(self.min_size, self.warm_floor)

    @property
    def horizon_s(self) -> float:
        """The forecast horizon: configured, else the cold start plus two minutes (a tick, an activity)."""
        h = self.predictive.horizon_s
        return float(h) if h is not None else float(self.cold_start_s) + 120.0

    @property
    def slo_ttft_p99_ms(self) -> float | None:
        if self.predictive.ttft_p99_ms is not None:
            return self.predictive.ttft_p99_ms
        for rule in self.scale_out:
            if rule.metric == m.TTFT_P99_MS and rule.above is not None:
                return float(rule.above)
        return None


def threshold_pairs(spec: GroupSpec) -> list[tuple[ScaleInRule, ScaleOutRule]]:
    """Each scale-in rule with each scale-out rule on the same metric and aggregation (comparable values)."""
    return [
        (low, high)
        for low in spec.scale_in
        for high in spec.scale_out
        if low.metric == high.metric and low.aggregation == high.aggregation
    ]


class PolicySpec(_Model):
    """The policy part of fleet.yaml: the groups. ``fleet.config.FleetConfig`` has the same ``groups``."""

    groups: tuple[GroupSpec, ...] = ()

    @model_validator(mode="after")
    def _unique_names(self) -> PolicySpec:
        names = [g.name for g in self.groups]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError("group names must be unique: " + ", ".join(dupes))
        return self

    def group(self, name: str) -> GroupSpec | None:
        for g in self.groups:
            if g.name == name:
                return g
        return None
