"""CMS request handlers. Success bodies carry ``Code: "200"`` and ``Success: true``; ``Datapoints`` is a JSON
string; lists are wrapped (``Alarms.Alarm``)."""

from __future__ import annotations

import json
import math
from typing import Any

from fleet.testing.cms.models import (
    COMPARISONS,
    LEVELS,
    STATISTICS,
    CmsBackend,
    MetricRule,
    parse_dimension_filter,
)
from fleet.testing.core.errors import AliyunError, invalid
from fleet.testing.core.params import loads_json, parse_float, parse_time_ms
from fleet.testing.core.responses import BaseResponse, page_bounds

MAX_CUSTOM_METRICS_PER_CALL = 21  # PutCustomMetric MetricList.N, N <= 21 (aliyun-api.md section 2)
MAX_HYBRID_METRICS_PER_CALL = 100
MAX_LENGTH = 1440
DEFAULT_LENGTH = 1000
DEFAULT_WINDOW_S = 3600
MAX_WINDOW_S = 31 * 86400
PERIODS = (15, 60, 300, 900, 3600)


def _ok(**extra: Any) -> dict[str, Any]:
    return {"Code": "200", "Message": "", "Success": True, **extra}


class CmsResponse(BaseResponse):
    ACTIONS = frozenset(
        {
            "PutCustomMetric",
            "DescribeCustomMetricList",
            "PutHybridMonitorMetricData",
            "DescribeMetricLast",
            "DescribeMetricList",
            "DescribeMetricData",
            "PutResourceMetricRule",
            "DescribeMetricRuleList",
            "DeleteMetricRules",
            "EnableMetricRules",
            "DisableMetricRules",
            "DescribeAlertLogList",
        }
    )

    @property
    def cms(self) -> CmsBackend:
        return self.cloud.cms

    # ---- writing -------------------------------------------------------------------------------------------
    def put_custom_metric(self) -> dict[str, Any]:
        metrics = self.params.objects("MetricList")
        if not metrics:
            raise AliyunError("MissingParameter.MetricList", "MetricList is required.", 400)
        if len(metrics) > MAX_CUSTOM_METRICS_PER_CALL:
            raise invalid(f"MetricList may hold at most {MAX_CUSTOM_METRICS_PER_CALL} metrics per call.")
        parsed = []
        for i, item in enumerate(metrics, 1):
            name = item.get("MetricName")
            if not name:
                raise AliyunError(
                    "MissingParameter.MetricName", f"MetricList.{i}.MetricName is required.", 400
                )
            dims = _json_obj(item.get("Dimensions"), f"MetricList.{i}.Dimensions")
            values = _json_obj(item.get("Values"), f"MetricList.{i}.Values")
            value = _finite(values.get("value", values.get("Average", values.get("Sum"))))
            if value is None:
                raise invalid(f'MetricList.{i}.Values needs a finite numeric "value".')
            ts = item.get("Time")
            parsed.append(
                (
                    name,
                    str(item.get("GroupId", "0")),
                    dims,
                    value,
                    None if ts in (None, "") else parse_time_ms(str(ts), f"MetricList.{i}.Time"),
                )
            )
        for name, group_id, dims, value, ts_ms in parsed:
            self.cms.put_custom(name, group_id, dims, value, ts_ms)
        return {"Code": "200", "Message": "success"}

    def put_hybrid_monitor_metric_data(self) -> dict[str, Any]:
        namespace = self.params.req("Namespace")
        metrics = self.params.objects("MetricList")
        if not metrics:
            raise AliyunError("MissingParameter.MetricList", "MetricList is required.", 400)
        if len(metrics) > MAX_HYBRID_METRICS_PER_CALL:
            raise invalid(f"MetricList may hold at most {MAX_HYBRID_METRICS_PER_CALL} metrics per call.")
        parsed = []
        for i, item in enumerate(metrics, 1):
            name = item.get("Name")
            if not name or item.get("Value") in (None, ""):
                raise AliyunError("MissingParameter", f"MetricList.{i}.Name and .Value are required.", 400)
            labels = item.get("Labels") or {}
            dims = {
                # put_point stringifies dimension names, so str() here changes nothing but the type
                str(lab.get("Key")): lab.get("Value")
                for _, lab in sorted(labels.items(), key=lambda kv: int(kv[0]))
                if isinstance(lab, dict)
            }
            value = parse_float(item["Value"], f"MetricList.{i}.Value")
            ts = item.get("TS")
            if ts not in (None, "") and not (isinstance(ts, str) and ts.isascii() and ts.isdigit()):
                raise invalid(f"MetricList.{i}.TS must be epoch milliseconds, got {ts!r}.")
            parsed.append((name, dims, value, None if ts in (None, "") else int(ts)))
        for name, dims, value, ts_ms in parsed:
            self.cms.put_point(namespace, name, dims, value, ts_ms)
        return {"Code": "Success", "Success": True, "ErrorDetail": []}

    # ---- reading -------------------------------------------------------------------------------------------
    def _query(self) -> tuple[str, str, list[dict[str, str]] | None, int | None, int, int | None]:
        p = self.params
        namespace, metric = p.req("Namespace"), p.req("MetricName")
        filters = parse_dimension_filter(p.json("Dimensions"))
        period_s = p.int("Period")
        if period_s is not None and (period_s <= 0 or period_s % 15):
            raise invalid(f"Period {period_s} is not a multiple of 15 seconds.")
        now_ms = int(self.cloud.now_s() * 1000)
        end_ms = p.time_ms("EndTime")
        start_ms = p.time_ms("StartTime")
        end_ms = now_ms if end_ms is None else end_ms
        if start_ms is not None and start_ms > end_ms:
            raise invalid("StartTime must be earlier than EndTime.")
        if start_ms is not None and end_ms - start_ms > MAX_WINDOW_S * 1000:
            raise invalid("The time range may span at most 31 days.")
        return namespace, metric, filters, start_ms, end_ms, period_s

    def _page(self, rows: list[dict[str, Any]], period_s: int | None) -> dict[str, Any]:
        p = self.params
        length = p.int("Length", DEFAULT_LENGTH)
        if not 1 <= length <= MAX_LENGTH:
            raise invalid(f"Length must be within 1-{MAX_LENGTH}.")
        token = p.str("NextToken")
        offset = 0
        if token:
            try:
                offset = int(token.removeprefix("fake-"))
            except ValueError:
                raise invalid(f"NextToken {token!r} is not valid.") from None
        chunk = rows[offset : offset + length]
        next_token = f"fake-{offset + length}" if offset + length < len(rows) else None
        return _ok(
            Datapoints=json.dumps(chunk),
            NextToken=next_token,
            Period=None if period_s is None else str(period_s),
        )

    def describe_metric_list(self) -> dict[str, Any]:
        namespace, metric, filters, start_ms, end_ms, period_s = self._query()
        if start_ms is None:
            start_ms = end_ms - DEFAULT_WINDOW_S * 1000
        return self._page(self.cms.rows(namespace, metric, filters, start_ms, end_ms, period_s), period_s)

    def describe_metric_last(self) -> dict[str, Any]:
        namespace, metric, filters, start_ms, end_ms, period_s = self._query()
        return self._page(
            self.cms.last_rows(namespace, metric, filters, start_ms, end_ms, period_s), period_s
        )

    def describe_metric_data(self) -> dict[str, Any]:
        namespace, metric, filters, start_ms, end_ms, period_s = self._query()
        if start_ms is None:
            start_ms = end_ms - (period_s or 60) * 1000
        rows = self.cms.aggregate_rows(namespace, metric, filters, start_ms, end_ms)
        return {
            "Code": "200",
            "Message": "",
            "Datapoints": json.dumps(rows),
            "Period": None if period_s is None else str(period_s),
        }

    def describe_custom_metric_list(self) -> dict[str, Any]:
        p = self.params
        items = self.cms.custom_metric_list(p.str("GroupId"), p.str("MetricName"), p.str("Dimension"))
        number, size = page_bounds(p, 10, None)
        chunk = items[(number - 1) * size : number * size]
        return {
            "Code": "200",
            "Message": "",
            "Result": json.dumps({"MetricList": chunk, "Total": len(items)}),
        }

    # ---- rules ---------------------------------------------------------------------------------------------
    def put_resource_metric_rule(self) -> dict[str, Any]:
        p = self.params
        rule_id = p.req("RuleId")
        resources = p.json("Resources", [])
        if isinstance(resources, dict):
            resources = [resources]
        if not isinstance(resources, list):
            raise invalid("Resources must be a JSON array.")
        escalations = p.nested("Escalations")
        if not any(escalations.get(level) for level, _ in LEVELS):
            raise AliyunError(
                "MissingParameter.Escalations",
                "At least one of Escalations.Critical/Warn/Info is required.",
                400,
            )
        for level, _ in LEVELS:
            spec = escalations.get(level)
            if not spec:
                continue
            missing = [
                k for k in ("Statistics", "ComparisonOperator", "Threshold", "Times") if not spec.get(k)
            ]
            if missing:
                raise invalid(f"Escalations.{level} needs {', '.join(missing)}.")
            if spec["ComparisonOperator"] not in COMPARISONS:
                raise invalid(
                    f"Escalations.{level}.ComparisonOperator {spec['ComparisonOperator']!r} is not one "
                    f"of {', '.join(COMPARISONS)}."
                )
            if spec["Statistics"] not in STATISTICS:
                raise invalid(
                    f"Escalations.{level}.Statistics {spec['Statistics']!r} is not one of "
                    f"{', '.join(STATISTICS)}."
                )
            try:
                float(spec["Threshold"])
                int(spec["Times"])
            except ValueError:
                raise invalid(f"Escalations.{level}.Threshold/Times must be numbers.") from None
        contact_groups = p.req("ContactGroups")
        period_s = _at_least_one(p.int("Period", 60), "Period")
        now_ms = int(self.cloud.now_s() * 1000)
        rule = MetricRule(
            rule_id=rule_id,
            rule_name=p.str("RuleName") or rule_id,
            namespace=p.req("Namespace"),
            metric_name=p.req("MetricName"),
            resources=resources,
            contact_groups=contact_groups,
            escalations=escalations,
            period_s=period_s,
            interval_s=_at_least_one(p.int("Interval", period_s), "Interval"),
            silence_time_s=_at_least_one(p.int("SilenceTime", 86400), "SilenceTime"),
            no_data_policy=p.str("NoDataPolicy", "KEEP_LAST_STATE") or "KEEP_LAST_STATE",
            webhook=p.str("Webhook"),
            send_ok=bool(p.bool("SendOK", False)),
            effective_interval=p.str("EffectiveInterval"),
            labels=p.objects("Labels"),
            created_ms=now_ms,
            updated_ms=now_ms,
        )
        self.cms.put_resource_metric_rule(rule)
        return _ok()

    def describe_metric_rule_list(self) -> dict[str, Any]:
        p = self.params
        rules = list(self.cms.rules.values())
        if p.str("RuleIds"):
            wanted = {x.strip() for x in p.req("RuleIds").split(",")}
            rules = [r for r in rules if r.rule_id in wanted]
        for key, attr in (
            ("RuleName", "rule_name"),
            ("Namespace", "namespace"),
            ("MetricName", "metric_name"),
            ("AlertState", "alert_state"),
        ):
            if p.str(key):
                rules = [r for r in rules if getattr(r, attr) == p.str(key)]
        if p.bool("EnableState") is not None:
            rules = [r for r in rules if r.enabled == p.bool("EnableState")]
        number, size = page_bounds(p, 100, None, "Page")
        chunk = rules[(number - 1) * size : number * size]
        return {
            "Code": 200,
            "Message": "",
            "Success": True,
            "Total": str(len(rules)),
            "Alarms": {"Alarm": [r.as_api() for r in chunk]},
        }

    def delete_metric_rules(self) -> dict[str, Any]:
        ids = self.params.list("Id")
        if not ids:
            raise AliyunError("MissingParameter.Id", "Id is required.", 400)
        self.cms.delete_rules(ids)
        return _ok()

    def _enable(self, enabled: bool) -> dict[str, Any]:
        ids = self.params.list("RuleId")
        if not ids:
            raise AliyunError("MissingParameter.RuleId", "RuleId is required.", 400)
        for rule_id in ids:
            rule = self.cms.rules.get(rule_id)
            if rule is not None:
                rule.enabled = enabled
        return _ok()

    def enable_metric_rules(self) -> dict[str, Any]:
        return self._enable(True)

    def disable_metric_rules(self) -> dict[str, Any]:
        return self._enable(False)

    def describe_alert_log_list(self) -> dict[str, Any]:
        p = self.params
        now_ms = int(self.cloud.now_s() * 1000)
        end_ms = p.time_ms("EndTime") or now_ms
        start_ms = p.time_ms("StartTime")
        if start_ms is None:
            start_ms = end_ms - _at_least_one(p.int("LastMin", 60), "LastMin") * 60 * 1000
        logs = [x for x in self.cms.alert_logs if start_ms <= int(x["AlertTime"]) <= end_ms]
        for key in ("Namespace", "MetricName", "RuleId", "RuleName", "Level", "SendStatus"):
            if p.str(key):
                logs = [x for x in logs if x.get(key) == p.str(key)]
        logs.reverse()  # newest first
        number, size = page_bounds(p, 10, None)
        return _ok(AlertLogList=logs[(number - 1) * size : number * size], PageNumber=number, PageSize=size)


def _finite(value: Any) -> float | None:
    """A JSON number as a float, or None for anything else: a bool, a string, or a number beyond float's
    range (``1e999`` parses as infinity), which a Datapoints string could only print as invalid JSON."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _json_obj(raw: Any, name: str) -> dict[str, Any]:
    if raw in (None, ""):
        return {}
    try:
        value = loads_json(raw) if isinstance(raw, str) else raw
    except ValueError:
        raise invalid(f"{name} is not valid JSON.") from None
    if not isinstance(value, dict):
        raise invalid(f"{name} must be a JSON object.")
    return value


def _at_least_one(value: int | None, name: str) -> int:
    """A count of seconds or minutes the API takes from 1 (0 was read as the default, a negative as is)."""
    if value is None or value < 1:
        raise invalid(f"{name} must be at least 1, got {value}.")
    return value
