"""CloudMonitor state: metric series, custom metrics, resource metric rules and their alert logs.

Series are keyed by (namespace, metric, dimensions) and hold parallel arrays sorted by time (timestamps in
ms, values and each point's min and max), so a window is two bisects; an index from (dimension key, value) to
series makes the usual "these 50 instances" filter a few dict lookups. Points older than the retention window
(default 7 days of fake time, the CMS retention for periods under 60 s) are dropped as new points arrive.

Custom metrics (PutCustomMetric) live under ``acs_customMetric_<account id>`` with the dimensions
``{"groupId": "<GroupId>", "dimension": "k1=v1&k2=v2"}`` (the reported dimensions in key order), as
CloudMonitor returns them."""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleet.testing.core.errors import AliyunError, invalid

if TYPE_CHECKING:
    from fleet.testing.cloud import FakeCloud

COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "GreaterThanOrEqualToThreshold": lambda v, t: v >= t,
    "GreaterThanThreshold": lambda v, t: v > t,
    "LessThanOrEqualToThreshold": lambda v, t: v <= t,
    "LessThanThreshold": lambda v, t: v < t,
    "NotEqualToThreshold": lambda v, t: v != t,
    "EqualToThreshold": lambda v, t: v == t,
}
LEVELS = (("Critical", "CRITICAL"), ("Warn", "WARN"), ("Info", "INFO"))
STATISTICS = ("Average", "Minimum", "Maximum", "Sum", "SampleCount")


class Series:
    """One time series. Each point is a value (its average) with its own minimum and maximum, which differ for
    points that already aggregate several samples (``instance_gpu_*`` across an instance's GPUs)."""

    __slots__ = ("dims", "match", "times_ms", "values", "mins", "maxs")

    def __init__(self, dims: dict[str, str], match: dict[str, str]) -> None:
        self.dims = dims  # what rows print
        self.match = match  # what filters may name (a superset of dims for custom metrics)
        self.times_ms: list[int] = []
        self.values: list[float] = []
        self.mins: list[float] = []
        self.maxs: list[float] = []

    def add(
        self, ts_ms: int, value: float, cutoff_ms: int, low: float | None = None, high: float | None = None
    ) -> None:
        times = self.times_ms
        low = value if low is None else low
        high = value if high is None else high
        if not times or ts_ms >= times[-1]:
            times.append(ts_ms)
            self.values.append(value)
            self.mins.append(low)
            self.maxs.append(high)
        else:
            i = bisect.bisect_right(times, ts_ms)
            times.insert(i, ts_ms)
            self.values.insert(i, value)
            self.mins.insert(i, low)
            self.maxs.insert(i, high)
        if times[0] < cutoff_ms:
            drop = bisect.bisect_left(times, cutoff_ms)
            del times[:drop]
            del self.values[:drop]
            del self.mins[:drop]
            del self.maxs[:drop]

    def stats(self, lo: int, hi: int) -> dict[str, float]:
        """Average, Minimum, Maximum, Sum and SampleCount of the points ``lo:hi``."""
        values = self.values[lo:hi]
        total = sum(values)
        return {
            "Average": total / len(values),
            "Minimum": min(self.mins[lo:hi]),
            "Maximum": max(self.maxs[lo:hi]),
            "Sum": total,
            "SampleCount": float(len(values)),
        }

    def window(self, start_ms: int | None, end_ms: int) -> tuple[int, int]:
        """Indices of points in (start, end] (CMS windows are left-open)."""
        lo = 0 if start_ms is None else bisect.bisect_right(self.times_ms, start_ms)
        hi = bisect.bisect_right(self.times_ms, end_ms)
        return lo, hi


@dataclass
class MetricRule:
    rule_id: str
    rule_name: str
    namespace: str
    metric_name: str
    resources: list[dict[str, str]]
    contact_groups: str
    escalations: dict[str, dict[str, Any]]
    period_s: int
    interval_s: int
    silence_time_s: int
    no_data_policy: str
    webhook: str | None
    send_ok: bool
    effective_interval: str | None
    labels: list[dict[str, str]]
    created_ms: int
    updated_ms: int
    enabled: bool = True
    alert_state: str = "INSUFFICIENT_DATA"
    version: int = 0
    streaks: dict[tuple[tuple[str, str], ...], tuple[str, int]] = field(default_factory=dict)
    resource_states: dict[tuple[tuple[str, str], ...], str] = field(default_factory=dict)
    last_sent_ms: dict[tuple[tuple[str, str], ...], int] = field(default_factory=dict)

    def as_api(self) -> dict[str, Any]:
        escalations = {}
        for level, _ in LEVELS:
            spec = self.escalations.get(level)
            if spec:
                escalations[level] = {
                    "Statistics": spec.get("Statistics"),
                    "ComparisonOperator": spec.get("ComparisonOperator"),
                    "Threshold": str(spec.get("Threshold")),
                    "Times": int(spec.get("Times", 1)),
                }
        return {
            "RuleId": self.rule_id,
            "RuleName": self.rule_name,
            "Namespace": self.namespace,
            "MetricName": self.metric_name,
            "Resources": json.dumps(self.resources),
            "Dimensions": json.dumps(self.resources),
            "ContactGroups": self.contact_groups,
            "Escalations": escalations,
            "Period": str(self.period_s),
            "SilenceTime": self.silence_time_s,
            "NoDataPolicy": self.no_data_policy,
            "Webhook": self.webhook,
            "SendOK": self.send_ok,
            "EffectiveInterval": self.effective_interval,
            "AlertState": self.alert_state,
            "EnableState": self.enabled,
            "SourceType": "METRIC",
            "GmtCreate": self.created_ms,
            "GmtUpdate": self.updated_ms,
            "Labels": {"Labels": [{"Key": x.get("Key"), "Value": x.get("Value")} for x in self.labels]},
        }


def dimension_string(dimensions: Mapping[str, str]) -> str:
    """``k1=v1&k2=v2`` in key order: how CMS prints the dimensions of a custom metric."""
    return "&".join(f"{k}={dimensions[k]}" for k in sorted(dimensions))


class CmsBackend:
    def __init__(self, cloud: FakeCloud) -> None:
        self.cloud = cloud
        self.series: dict[tuple[str, str], dict[tuple[tuple[str, str], ...], Series]] = {}
        self._index: dict[tuple[str, str], dict[tuple[str, str], list[Series]]] = {}
        self.rules: dict[str, MetricRule] = {}
        self.alert_logs: list[dict[str, Any]] = []
        self.webhook_calls: list[dict[str, Any]] = []
        # Called with each alert the rules raise (the fake never reaches the network): tests and the simulator
        # may subscribe here instead of running a webhook receiver.
        self.on_alert: list[Callable[[dict[str, Any]], None]] = []
        self.max_alert_logs = 10000

    # ---- writing -------------------------------------------------------------------------------------------
    def put_point(
        self,
        namespace: str,
        metric: str,
        dimensions: Mapping[str, Any],
        value: float,
        timestamp_ms: int | None = None,
        match_extra: Mapping[str, str] | None = None,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> None:
        if not namespace or not metric:
            raise ValueError("a metric point needs a namespace and a metric name")
        dims = {str(k): str(v) for k, v in dimensions.items()}
        now_ms = int(self.cloud.now_s() * 1000)
        ts_ms = now_ms if timestamp_ms is None else int(timestamp_ms)
        key = (namespace, metric)
        by_dims = self.series.get(key)
        if by_dims is None:
            by_dims = self.series[key] = {}
            self._index[key] = {}
        dims_key = tuple(sorted(dims.items()))
        series = by_dims.get(dims_key)
        if series is None:
            match = {**dims, **(match_extra or {})}
            series = by_dims[dims_key] = Series(dims, match)
            index = self._index[key]
            for pair in match.items():
                index.setdefault(pair, []).append(series)
        series.add(
            ts_ms,
            float(value),
            now_ms - int(self.cloud.metric_retention_s * 1000),
            None if minimum is None else float(minimum),
            None if maximum is None else float(maximum),
        )

    def put_custom(
        self,
        name: str,
        group_id: str,
        dimensions: Mapping[str, Any],
        value: float,
        timestamp_ms: int | None = None,
    ) -> None:
        dims = {str(k): str(v) for k, v in dimensions.items()}
        self.put_point(
            self.cloud.custom_namespace,
            name,
            {"groupId": str(group_id), "dimension": dimension_string(dims)},
            value,
            timestamp_ms,
            match_extra=dims,
        )

    # ---- reading -------------------------------------------------------------------------------------------
    def matching(self, namespace: str, metric: str, filters: list[dict[str, str]] | None) -> list[Series]:
        key = (namespace, metric)
        by_dims = self.series.get(key)
        if not by_dims:
            return []
        if not filters:
            return list(by_dims.values())
        index = self._index[key]
        found: dict[int, Series] = {}
        for wanted in filters:
            wanted = {k: str(v) for k, v in wanted.items() if k != "userId"}
            if not wanted:
                return list(by_dims.values())
            # Look up by the most selective pair: ``groupId=0`` matches all custom series, ``dimension`` one.
            candidates = min((index.get(pair, ()) for pair in wanted.items()), key=len)
            for series in candidates:
                if all(series.match.get(k) == v for k, v in wanted.items()):
                    found[id(series)] = series
        return list(found.values())

    def _row(self, namespace: str, series: Series, ts_ms: int, lo: int, hi: int) -> dict[str, Any]:
        stats = series.stats(lo, hi)
        row: dict[str, Any] = {
            "timestamp": ts_ms,
            "userId": self.cloud.account_id,
            **series.dims,
            "Average": stats["Average"],
            "Minimum": stats["Minimum"],
            "Maximum": stats["Maximum"],
        }
        if namespace.startswith("acs_customMetric_"):
            row["Sum"] = stats["Sum"]
            row["SampleCount"] = hi - lo
        return row

    def rows(
        self,
        namespace: str,
        metric: str,
        filters: list[dict[str, str]] | None,
        start_ms: int | None,
        end_ms: int,
        period_s: int | None,
    ) -> list[dict[str, Any]]:
        """Every point (or per-period aggregate) in (start, end], ordered by time then series."""
        out: list[dict[str, Any]] = []
        for series in self.matching(namespace, metric, filters):
            lo, hi = series.window(start_ms, end_ms)
            if lo >= hi:
                continue
            times = series.times_ms
            if not period_s:
                for i in range(lo, hi):
                    out.append(self._row(namespace, series, times[i], i, i + 1))
                continue
            step = period_s * 1000
            bucket, first = times[lo] // step * step, lo
            for i in range(lo, hi):
                b = times[i] // step * step
                if b != bucket:
                    out.append(self._row(namespace, series, bucket, first, i))
                    bucket, first = b, i
            out.append(self._row(namespace, series, bucket, first, hi))
        out.sort(key=lambda r: r["timestamp"])
        return out

    def last_rows(
        self,
        namespace: str,
        metric: str,
        filters: list[dict[str, str]] | None,
        start_ms: int | None,
        end_ms: int,
        period_s: int | None,
    ) -> list[dict[str, Any]]:
        """The latest point (or the latest period's aggregate) of each series."""
        out = []
        for series in self.matching(namespace, metric, filters):
            lo, hi = series.window(start_ms, end_ms)
            if lo >= hi:
                continue
            if not period_s:
                out.append(self._row(namespace, series, series.times_ms[hi - 1], hi - 1, hi))
                continue
            step = period_s * 1000
            bucket = series.times_ms[hi - 1] // step * step
            first = max(lo, bisect.bisect_left(series.times_ms, bucket))
            out.append(self._row(namespace, series, bucket, first, hi))
        return out

    def aggregate_rows(
        self, namespace: str, metric: str, filters: list[dict[str, str]] | None, start_ms: int, end_ms: int
    ) -> list[dict[str, Any]]:
        """One aggregate per series over (start, end] (DescribeMetricData)."""
        out = []
        for series in self.matching(namespace, metric, filters):
            lo, hi = series.window(start_ms, end_ms)
            if lo < hi:
                out.append(self._row(namespace, series, start_ms, lo, hi))
        return out

    def custom_metric_list(
        self, group_id: str | None, metric_name: str | None, dimension: str | None
    ) -> list[dict[str, Any]]:
        namespace = self.cloud.custom_namespace
        result = []
        for (ns, metric), by_dims in self.series.items():
            if ns != namespace or (metric_name and metric != metric_name):
                continue
            for series in by_dims.values():
                if group_id and series.dims.get("groupId") != group_id:
                    continue
                if dimension and series.dims.get("dimension") != dimension:
                    continue
                result.append(
                    {
                        "MetricName": metric,
                        "GroupId": series.dims.get("groupId"),
                        "Dimension": series.dims.get("dimension"),
                        "Md5": hashlib.md5(f"{metric}|{series.dims.get('dimension')}".encode()).hexdigest(),
                    }
                )
        return result

    # ---- rules and alerts ----------------------------------------------------------------------------------
    def put_resource_metric_rule(self, rule: MetricRule) -> MetricRule:
        existing = self.rules.get(rule.rule_id)
        if existing is not None:
            rule.created_ms = existing.created_ms
            rule.version = existing.version + 1
            rule.enabled = existing.enabled
        self.rules[rule.rule_id] = rule
        self._arm(rule, self.cloud.now_s() + rule.interval_s)
        return rule

    def delete_rules(self, rule_ids: Iterable[str]) -> None:
        for rule_id in rule_ids:
            rule = self.rules.pop(rule_id, None)
            if rule is not None:
                rule.version += 1

    def _arm(self, rule: MetricRule, due_s: float) -> None:
        version = rule.version

        def evaluate(at: float) -> None:
            if self.rules.get(rule.rule_id) is not rule or rule.version != version:
                return
            if rule.enabled:
                self.evaluate(rule, at)
            self._arm(rule, at + rule.interval_s)

        self.cloud.timers.schedule(due_s, evaluate, f"cms rule {rule.rule_id}")

    def evaluate(self, rule: MetricRule, at: float) -> None:
        """Check each resource's statistic over the last Period against the levels, Critical first; a level
        that holds for ``Times`` consecutive evaluations raises an alert (silenced for SilenceTime)."""
        end_ms = int(at * 1000)
        start_ms = end_ms - rule.period_s * 1000 - 1  # the evaluation window includes its first instant
        filters = [r for r in rule.resources if r.get("resource") != "_ALL"] or None
        any_alarm = False
        any_data = False
        for series in self.matching(rule.namespace, rule.metric_name, filters):
            key = tuple(sorted(series.dims.items()))
            lo, hi = series.window(start_ms, end_ms)
            if lo >= hi:
                continue
            any_data = True
            stats = series.stats(lo, hi)
            breached = None
            for level, level_name in LEVELS:
                spec = rule.escalations.get(level)
                if not spec:
                    continue
                compare = COMPARISONS.get(spec.get("ComparisonOperator", ""))
                value = stats.get(spec.get("Statistics", "Average"))
                if compare is not None and value is not None and compare(value, float(spec["Threshold"])):
                    breached = (level, level_name, int(spec.get("Times", 1)), value)
                    break
            previous_state = rule.resource_states.get(key, "OK")
            if breached is None:
                rule.streaks.pop(key, None)
                if previous_state == "ALARM":
                    rule.resource_states[key] = "OK"
                    if rule.send_ok:
                        self._alert(rule, series, "OK", "OK", stats["Average"], at)
                else:
                    rule.resource_states[key] = "OK"
                continue
            level, level_name, times, value = breached
            streak_level, count = rule.streaks.get(key, (level, 0))
            count = count + 1 if streak_level == level else 1
            rule.streaks[key] = (level, count)
            if count >= times:
                any_alarm = True
                last_ms = rule.last_sent_ms.get(key)
                silenced = (
                    previous_state == "ALARM"
                    and last_ms is not None
                    and end_ms - last_ms < rule.silence_time_s * 1000
                )
                rule.resource_states[key] = "ALARM"
                if not silenced:
                    rule.last_sent_ms[key] = end_ms
                    self._alert(rule, series, level_name, level, value, at)
            elif previous_state == "ALARM":
                any_alarm = True
        if any_alarm:
            rule.alert_state = "ALARM"
        elif any_data:
            rule.alert_state = "OK"
        elif rule.no_data_policy != "KEEP_LAST_STATE":
            rule.alert_state = "INSUFFICIENT_DATA" if rule.no_data_policy != "OK" else "OK"

    def _alert(
        self, rule: MetricRule, series: Series, level_name: str, level: str, value: float, at: float
    ) -> None:
        spec = rule.escalations.get(level, {})
        entry = {
            "LogId": self.cloud.new_id("log-", 16),
            "AlertTime": str(int(at * 1000)),
            "RuleId": rule.rule_id,
            "RuleName": rule.rule_name,
            "Namespace": rule.namespace,
            "MetricName": rule.metric_name,
            "InstanceId": series.dims.get("instanceId", ""),
            "Level": level_name,
            "SendStatus": "0",
            "Product": rule.namespace.removeprefix("acs_"),
            "Dimensions": [{"Key": k, "Value": v} for k, v in series.dims.items()],
            "Escalation": {
                "Level": level_name,
                "Times": int(spec.get("Times", 1)) if spec else 1,
                "Expression": f"${spec.get('Statistics', 'Average')} "
                f"{spec.get('ComparisonOperator', '')} {spec.get('Threshold', '')}"
                if spec
                else "ok",
            },
            "Message": f"{rule.metric_name}={value:.4g}",
            "ContactGroups": rule.contact_groups.split(","),
            "WebhookList": [{"url": rule.webhook, "code": "200", "message": "recorded by the fake"}]
            if rule.webhook
            else [],
        }
        self.alert_logs.append(entry)
        if len(self.alert_logs) > self.max_alert_logs:
            del self.alert_logs[: len(self.alert_logs) - self.max_alert_logs]
        if rule.webhook:
            self.webhook_calls.append({"url": rule.webhook, "alert": entry})
        for listener in self.on_alert:
            listener(entry)

    def state(self) -> dict[str, Any]:
        return {
            "series": [
                {
                    "namespace": ns,
                    "metric": metric,
                    "dimensions": s.dims,
                    "points": len(s.times_ms),
                    "last": s.values[-1] if s.values else None,
                }
                for (ns, metric), by_dims in self.series.items()
                for s in by_dims.values()
            ][:2000],
            "rules": {
                rid: {"AlertState": r.alert_state, "EnableState": r.enabled, "MetricName": r.metric_name}
                for rid, r in self.rules.items()
            },
            "alert_logs": len(self.alert_logs),
        }


def parse_dimension_filter(raw: Any) -> list[dict[str, str]] | None:
    """The ``Dimensions`` parameter: a JSON object, or an array of up to 50 objects."""
    if raw is None or raw == "" or raw == [] or raw == {}:
        return None
    if isinstance(raw, dict):
        return [raw]
    if isinstance(raw, list) and all(isinstance(x, dict) for x in raw):
        if len(raw) > 50:
            raise invalid("Dimensions may list at most 50 objects.")
        return raw
    raise AliyunError("InvalidParameter", "Dimensions must be a JSON object or an array of objects.", 400)
