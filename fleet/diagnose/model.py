"""The values diagnosis works on: a metrics window of one group, its context, and the findings.

A :class:`Window` is everything the analysis core looks at for one scaling group over ``[start, end]``: the
per-instance time series of the canonical policy metrics (``policies.metrics``) plus a few diagnosis-only ones
the node agent also publishes (:data:`EXTRA_METRICS`), what ESS says about each instance (state, when it was
created), the scale-outs seen in the window, the service's recent decisions, read errors, and the group's
context from the config (SLOs, cold start, model and instance type for the sizing model).

The same shapes round-trip through JSON (the snapshot format of ``fleet diagnose --snapshot``, documented in
docs/diagnose.md), so a window saved from the cloud or from the simulator can be diagnosed again offline.
Nothing here does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from fleet.timefmt import EARLIEST, LATEST, isoformat, outside_calendar, parse_iso_utc
from policies import metrics as pm
from policies.model import LifecycleState
from policies.spec import MAX_DURATION_S, MIN_BATCHED_TOKENS

SNAPSHOT_VERSION = 1

# Diagnosis-only metrics the node agent publishes besides the policy ones (fleet/agent/sample.py):
# canonical name here -> custom metric name in CloudMonitor.
REQUEST_RATE_RPS = "request_rate_rps"  # completed requests per second (vLLM request_success rate)
PREEMPTIONS = "preemptions"  # sequences preempted in the agent's window (KV cache ran out)
VLLM_UP = "vllm_up"  # 1 while the agent can scrape vLLM
GENERATION_TOKENS_PER_S = "generation_tokens_per_s"
EXTRA_METRICS: dict[str, str] = {
    REQUEST_RATE_RPS: "vllm_request_rate_per_s",
    PREEMPTIONS: "vllm_preemptions",
    VLLM_UP: "vllm_up",
    GENERATION_TOKENS_PER_S: "vllm_generation_tokens_per_s",
}

SEVERITIES = ("critical", "warning", "info")

# What a sample of each known metric can be: none is below zero (counts, latencies, rates, power, NVML's
# clock ratio, reason mask and XID code; NVML reports the temperature as an unsigned integer too), and a
# percentage is at most 100. A sample outside is a broken exporter or an edited file, not data: the snapshot
# loader drops it and says so in the window's errors.
KNOWN_METRICS = frozenset(pm.INSTANCE_METRICS) | frozenset(EXTRA_METRICS)
VALID_RANGE: dict[str, tuple[float, float]] = {
    m: (0.0, 100.0 if m.endswith("_pct") else math.inf) for m in KNOWN_METRICS
}

# Instance lifecycle states that serve traffic (ESS names; Protected instances serve too).
SERVING_STATES = frozenset({LifecycleState.IN_SERVICE, LifecycleState.PROTECTED})


class SnapshotError(ValueError):
    """A snapshot file that cannot be used; the message names the field and the problem in one line."""


Series = list[tuple[datetime, float]]


@dataclass
class InstanceWindow:
    """One instance over the window: its ESS state now, when it was created, and its metric series."""

    instance_id: str
    state: str = "InService"
    created_at: datetime | None = None
    metrics: dict[str, Series] = field(default_factory=dict)

    def values(self, metric: str) -> list[float]:
        return [v for _, v in self.metrics.get(metric, ())]


@dataclass
class GroupContext:
    """What the config and the sizing catalog say about the group (``None``: not known)."""

    name: str
    cold_start_s: float = 240.0
    slo_ttft_p99_ms: float | None = None
    slo_tpot_p99_ms: float | None = None
    model: str | None = None
    instance_type: str | None = None
    min_size: int | None = None
    max_size: int | None = None
    warm_floor: int | None = None
    max_num_seqs: int | None = None  # vLLM's, when known; else the sizing model's default for the deployment
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None  # vLLM's chunked-prefill budget; else the sizing default
    queue_limit: int | None = None  # max waiting requests per instance at the gateway, when there is one
    publish_period_s: float = 15.0  # the node agent's period
    region: str | None = None
    prompt_tokens_mean: float | None = None  # the request mix, for the sizing model's capacity
    output_tokens_mean: float | None = None


@dataclass
class Window:
    """One group's metrics window and context: the input of :func:`fleet.diagnose.rules.diagnose`."""

    group: GroupContext
    start: datetime
    end: datetime
    instances: list[InstanceWindow] = field(default_factory=list)
    scale_outs: list[tuple[datetime, int, int]] = field(default_factory=list)  # (at, from, to)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # reads that failed (e.g. "Throttled.User: ...")
    source: str = "snapshot"

    @property
    def duration_s(self) -> float:
        return max(1.0, (self.end - self.start).total_seconds())

    def instance(self, instance_id: str) -> InstanceWindow | None:
        return next((i for i in self.instances if i.instance_id == instance_id), None)


@dataclass
class Finding:
    """One diagnosis: what is wrong, how sure and how bad, where, the evidence, why, and what to change."""

    kind: str
    severity: str
    scope: list[str]
    evidence: dict[str, Any]
    explanation: str
    fix: str
    group: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "group": self.group,
            "scope": list(self.scope),
            "evidence": _clean(self.evidence),
            "explanation": self.explanation,
            "fix": self.fix,
        }


def _clean(obj: Any) -> Any:
    """JSON-safe evidence: floats rounded, infinities as None, datetimes as ISO strings."""
    if isinstance(obj, float):
        return None if not math.isfinite(obj) else round(obj, 3)
    if isinstance(obj, datetime):
        return isoformat(obj)
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


# ------------------------------------------------------------------------------------------------ snapshot JS
def window_to_json(w: Window) -> dict[str, Any]:
    g = w.group
    return {
        "version": SNAPSHOT_VERSION,
        "group": {k: v for k, v in g.__dict__.items() if v is not None},
        "start": isoformat(w.start),
        "end": isoformat(w.end),
        "source": w.source,
        "instances": [
            {
                "instance_id": i.instance_id,
                "state": i.state,
                **({"created_at": isoformat(i.created_at)} if i.created_at else {}),
                "metrics": {
                    m: [[isoformat(t), round(v, 4)] for t, v in series]
                    for m, series in sorted(i.metrics.items())
                },
            }
            for i in w.instances
        ],
        "scale_outs": [{"at": isoformat(at), "from": a, "to": b} for at, a, b in w.scale_outs],
        "decisions": _clean(w.decisions),
        "errors": list(w.errors),
    }


def parse_time(value: Any, where: str) -> datetime:
    """An ISO 8601 time (``Z`` or an offset; naive means UTC) or epoch seconds / milliseconds, in UTC and
    within the calendar the shell plans around (:data:`fleet.timefmt.EARLIEST` .. :data:`LATEST`)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _epoch_time(value, where)
    if isinstance(value, str):
        try:
            at = parse_iso_utc(value)
            too_far = outside_calendar(at)
        except (ValueError, OverflowError):
            raise SnapshotError(f"{where}: {value!r} is not an ISO 8601 time") from None
        if too_far is not None:
            raise SnapshotError(f"{where}: {too_far}")
        return at.astimezone(UTC)
    raise SnapshotError(f"{where}: expected a time (ISO 8601 string or epoch number), got {value!r}")


def _epoch_time(value: float, where: str) -> datetime:
    """Epoch seconds, or milliseconds when above 1e11 (year 5138 in seconds, 1973 in milliseconds)."""
    if not math.isfinite(value):
        raise SnapshotError(f"{where}: {value!r} is not a time (epoch seconds must be a finite number)")
    seconds = value / 1000.0 if value > 1e11 else float(value)
    if not EARLIEST.timestamp() <= seconds <= LATEST.timestamp():
        raise SnapshotError(f"{where}: epoch {value!r} is outside {EARLIEST.year}..{LATEST.year - 1}")
    return datetime.fromtimestamp(seconds, UTC)


_GROUP_FIELDS = {f for f in GroupContext.__dataclass_fields__}


def _check_group_field(key: str, value: Any, where: str) -> None:
    """The type each GroupContext field declares (annotations are strings here: ``float | None`` ...)."""
    kind = str(GroupContext.__dataclass_fields__[key].type)
    if value is None and "None" in kind:
        return
    if kind.startswith("str"):
        if not isinstance(value, str):
            raise SnapshotError(f"{where}: expected a string, got {value!r}")
        return
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value < 0:
        raise SnapshotError(f"{where}: expected a non-negative number, got {value!r}")
    if kind.startswith("int") and value != int(value):
        raise SnapshotError(f"{where}: expected a whole number, got {value!r}")
    if key.endswith("_s") and value > MAX_DURATION_S:  # the rules step through time by these
        raise SnapshotError(f"{where}: {value!r} s is longer than {MAX_DURATION_S / 86400:.0f} days")
    if key == "max_num_batched_tokens" and value < MIN_BATCHED_TOKENS:
        raise SnapshotError(
            f"{where}: the chunked-prefill budget must be at least {MIN_BATCHED_TOKENS} tokens, got {value!r}"
        )
    if key == "publish_period_s" and value <= 0:  # the window's slack and the rules' sample spacing
        raise SnapshotError(f"{where}: the agent's period must be positive, got {value!r}")


def window_from_json(data: Any, where: str = "snapshot") -> Window:
    """A :class:`Window` from its JSON form; :class:`SnapshotError` names the first bad field."""
    if not isinstance(data, Mapping):
        raise SnapshotError(f"{where}: expected an object with group, start, end, instances")
    version = data.get("version", SNAPSHOT_VERSION)
    if version != SNAPSHOT_VERSION:
        raise SnapshotError(f"{where}.version: {version!r} is not supported (expected {SNAPSHOT_VERSION})")
    group = _group_from_json(data.get("group"), f"{where}.group")
    for name in ("start", "end"):
        if name not in data:
            raise SnapshotError(f"{where}.{name}: missing (the window's bounds)")
    start = parse_time(data["start"], f"{where}.start")
    end = parse_time(data["end"], f"{where}.end")
    if end <= start:
        raise SnapshotError(f"{where}.end: must be after start")
    raw_instances = data.get("instances", [])
    if not isinstance(raw_instances, list):
        raise SnapshotError(f"{where}.instances: expected a list")
    instances = [_instance_from_json(raw, f"{where}.instances[{n}]") for n, raw in enumerate(raw_instances)]
    _refuse_repeats([i.instance_id for i in instances], f"{where}.instances", "instance_id")
    notes = _drop_outside(instances, start, end, group.publish_period_s) + _drop_invalid(instances)
    notes += _kv_fraction_as_percent(instances)
    scale_outs = [
        _scale_out_from_json(raw, f"{where}.scale_outs[{n}]")
        for n, raw in enumerate(data.get("scale_outs", []) or [])
    ]
    decisions = data.get("decisions", []) or []
    errors = data.get("errors", []) or []
    if not isinstance(decisions, list) or not isinstance(errors, list):
        raise SnapshotError(f"{where}: decisions and errors must be lists")
    return Window(
        group=group,
        start=start,
        end=end,
        instances=instances,
        scale_outs=scale_outs,
        decisions=list(decisions),
        errors=[str(e) for e in errors] + notes,
        source=str(data.get("source", "snapshot")),
    )


def _group_from_json(raw_group: Any, where: str) -> GroupContext:
    if not isinstance(raw_group, Mapping) or not isinstance(raw_group.get("name"), str):
        raise SnapshotError(f"{where}: expected an object with at least a name")
    unknown = sorted(set(raw_group) - _GROUP_FIELDS)
    if unknown:
        raise SnapshotError(
            f"{where}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(sorted(_GROUP_FIELDS))}"
        )
    for key, value in raw_group.items():
        _check_group_field(key, value, f"{where}.{key}")
    tokens, seqs = raw_group.get("max_num_batched_tokens"), raw_group.get("max_num_seqs")
    if tokens is not None and seqs and tokens < seqs:  # vLLM's scheduler refuses to start with this
        raise SnapshotError(
            f"{where}.max_num_batched_tokens: {tokens} is below max_num_seqs {seqs}; vLLM needs at least one "
            "token a sequence"
        )
    _check_catalog_names(raw_group, where)
    return GroupContext(**dict(raw_group))


def _check_catalog_names(raw_group: Mapping[str, Any], where: str) -> None:
    """``model`` and ``instance_type`` must be in the sizing catalog, as ``--model`` and ``--instance-type``
    must: an unknown one would silently drop the fixes' numbers."""
    from sizing.catalog import find_instance, find_model
    from sizing.errors import SizingInputError

    for key, find in (("model", find_model), ("instance_type", find_instance)):
        value = raw_group.get(key)
        if value is None:
            continue
        try:
            find(value)
        except SizingInputError as exc:
            raise SnapshotError(f"{where}.{key}: {exc}") from None


def _instance_from_json(raw: Any, at: str) -> InstanceWindow:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("instance_id"), str):
        raise SnapshotError(f"{at}: expected an object with instance_id")
    raw_metrics = raw.get("metrics", {})
    if not isinstance(raw_metrics, Mapping):
        raise SnapshotError(f"{at}.metrics: expected an object of metric name -> [[time, value], ...]")
    metrics = {
        str(metric): _series_from_json(points, f"{at}.metrics.{metric}")
        for metric, points in raw_metrics.items()
    }
    created = raw.get("created_at")
    return InstanceWindow(
        instance_id=raw["instance_id"],
        state=str(raw.get("state", "InService")),
        created_at=parse_time(created, f"{at}.created_at") if created is not None else None,
        metrics=metrics,
    )


def _series_from_json(points: Any, where: str) -> Series:
    """``[[time, value], ...]`` in time order; points without a value (null) are dropped."""
    if not isinstance(points, list):
        raise SnapshotError(f"{where}: expected a list of [time, value] pairs")
    series: Series = []
    for k, point in enumerate(points):
        if not (isinstance(point, list | tuple) and len(point) == 2):
            raise SnapshotError(f"{where}[{k}]: expected [time, value]")
        value = point[1]
        if value is None:
            continue
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise SnapshotError(f"{where}[{k}]: value {value!r} is not a number")
        series.append((parse_time(point[0], f"{where}[{k}]"), float(value)))
    series.sort(key=lambda p: p[0])
    return series


def _drop_outside(
    instances: list[InstanceWindow], start: datetime, end: datetime, period_s: float
) -> list[str]:
    """Remove the samples outside ``[start, end]`` give or take one period (a sample stamped at the end of its
    period, a clock a little off): evidence must lie in the window the report names. One note for them all."""
    slack = timedelta(seconds=max(1.0, period_s))
    low, high = start - slack, end + slack
    dropped = 0
    where: set[str] = set()
    for inst in instances:
        for metric, series in inst.metrics.items():
            kept = [(t, v) for t, v in series if low <= t <= high]
            if len(kept) < len(series):
                dropped += len(series) - len(kept)
                where.add(inst.instance_id)
                inst.metrics[metric] = kept
    if not dropped:
        return []
    return [
        f"{dropped} sample(s) of {len(where)} instance(s) ({', '.join(sorted(where)[:3])}"
        f"{', ...' if len(where) > 3 else ''}) outside the window {isoformat(start)} - {isoformat(end)} "
        "dropped"
    ]


def _drop_invalid(instances: list[InstanceWindow]) -> list[str]:
    """Remove the samples outside their metric's :data:`VALID_RANGE`; one note per instance and metric."""
    notes: list[str] = []
    for inst in instances:
        for metric, series in inst.metrics.items():
            low, high = VALID_RANGE.get(metric, (-math.inf, math.inf))
            bad = [(t, v) for t, v in series if not low <= v <= high and math.isfinite(v)]
            if not bad:
                continue
            inst.metrics[metric] = [p for p in series if p not in bad]
            allowed = f"outside {low:g}..{high:g}" if math.isfinite(high) else f"below {low:g}"
            notes.append(
                f"{inst.instance_id} {metric}: {len(bad)} sample(s) {allowed} dropped as invalid "
                f"(the first: {bad[0][1]:g} at {isoformat(bad[0][0])})"
            )
    return notes


def _kv_fraction_as_percent(instances: list[InstanceWindow]) -> list[str]:
    """``kv_cache_usage_pct`` written as vLLM's 0-1 fraction (``gpu_cache_usage_perc``) instead of the
    canonical 0-100: read as a fraction when every sample of the window is at most 1 while requests were
    preempted (vLLM preempts only with its KV cache full, so "under 1%" cannot be meant); a note says so."""
    kv = [v for i in instances for v in i.values(pm.KV_CACHE_USAGE_PCT)]
    preempted = any(v > 0 for i in instances for v in i.values(PREEMPTIONS))
    if not kv or not preempted or max(kv) > 1.0:
        return []
    for inst in instances:
        if pm.KV_CACHE_USAGE_PCT in inst.metrics:
            inst.metrics[pm.KV_CACHE_USAGE_PCT] = [
                (t, v * 100.0) for t, v in inst.metrics[pm.KV_CACHE_USAGE_PCT]
            ]
    return [
        "kv_cache_usage_pct: every sample is at most 1 while requests were preempted, so it was read as a "
        f"0-1 fraction and scaled to the canonical 0-100; max {max(kv):g} -> {100 * max(kv):g}%"
    ]


# No scaling group comes near this many instances (ESS caps MaxSize far lower); a bound keeps the counts
# integers the rules can do arithmetic on.
MAX_INSTANCE_COUNT = 100_000


def _scale_out_from_json(raw: Any, at: str) -> tuple[datetime, int, int]:
    if not isinstance(raw, Mapping) or "at" not in raw:
        raise SnapshotError(f"{at}: expected an object with at, from, to")
    counts = [_instance_count(raw.get(key, 0), f"{at}.{key}") for key in ("from", "to")]
    if counts[1] <= counts[0]:  # the cold-start rule reads the instances a scale-out added
        raise SnapshotError(f"{at}: a scale-out goes up; from {counts[0]} to {counts[1]} does not")
    return (parse_time(raw["at"], f"{at}.at"), counts[0], counts[1])


def _instance_count(value: Any, where: str) -> int:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not 0 <= value <= MAX_INSTANCE_COUNT or value != int(value):
        raise SnapshotError(
            f"{where}: expected a whole number of instances 0..{MAX_INSTANCE_COUNT}, got {value!r}"
        )
    return int(value)


def windows_from_json(data: Any, where: str = "snapshot") -> list[Window]:
    """One window, or ``{"windows": [...]}`` holding several (one per group)."""
    if isinstance(data, Mapping) and "windows" in data:
        raw = data["windows"]
        if not isinstance(raw, list) or not raw:
            raise SnapshotError(f"{where}.windows: expected a non-empty list of windows")
        windows = [window_from_json(w, f"{where}.windows[{n}]") for n, w in enumerate(raw)]
        _refuse_repeats([w.group.name for w in windows], f"{where}.windows", "group.name")
        return windows
    return [window_from_json(data, where)]


def _refuse_repeats(names: list[str], where: str, key: str) -> None:
    """One entry per instance in a window and one window per group: a repeat would be counted twice."""
    first: dict[str, int] = {}
    for n, name in enumerate(names):
        if name in first:
            raise SnapshotError(
                f"{where}[{n}].{key}: {name!r} repeats {where.rsplit('.', 1)[-1]}[{first[name]}]"
            )
        first[name] = n
