"""CloudMonitor (CMS 2019-01-01) adapter: read instance and custom metrics, publish custom metrics.

Wire facts this relies on (../shared/reference/aliyun-api.md section 2):
- `Dimensions` is a JSON string holding an array of at most 50 filter objects; answers page with NextToken.
- `Datapoints` comes back as a JSON *string* of rows: `timestamp` (ms), the dimension keys (`instanceId`,
  `userId`, per-GPU `gpuId`) and the statistics (`Average`, `Maximum`, `Minimum`; custom data may carry
  `value`).
- Custom metrics are read under Namespace `acs_customMetric_<account id>` and filtered by
  `{"groupId": "0", "dimension": "instanceId=i-..."}` (the reported dimensions as key=value joined by `&`).
- PutCustomMetric takes at most 21 `MetricList.N` entries per call; Dimensions and Values are JSON strings.
- CMS answers some failures with HTTP 200 and `Success: false`; the SDK raises nothing, so we check.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any, Protocol, TypeVar

from alibabacloud_cms20190101 import models as m

from fleet.cloud import paging
from fleet.cloud.errors import CloudError, classify
from fleet.cloud.paging import TokenWalk
from fleet.cloud.retry import RetryPolicy, call
from fleet.cloud.types import CustomMetric, MetricPoint, parse_time, to_epoch_ms

ACTIONS: tuple[str, ...] = ("DescribeMetricLast", "DescribeMetricList", "PutCustomMetric")

MAX_DIMENSIONS_PER_CALL = 50  # DescribeMetricList/Last accept at most 50 dimension objects [DOC]
MAX_CUSTOM_METRICS_PER_CALL = 21  # PutCustomMetric MetricList.N, N <= 21 [DOC]
MAX_LENGTH = 1440  # DescribeMetricList/Last Length upper bound [DOC]
# Above this many instances, DescribeMetricLast reads the metric's whole namespace (no Dimensions, pages of
# MAX_LENGTH rows) and keeps the instances asked for: 10,000 instances cost 7 pages instead of 200 calls of
# 50 dimensions. Below it, the dimension batches are cheaper (the namespace may hold instances of other
# fleets: acs_ecs_dashboard holds every ECS instance of the region).
NAMESPACE_SCAN_MIN_IDS = 4 * MAX_DIMENSIONS_PER_CALL
MAX_GPUS_PER_INSTANCE = 16  # per-GPU rows: no ECS GPU instance type has more than 16 GPUs
CUSTOM_NAMESPACE_PREFIX = "acs_customMetric_"
CUSTOM_GROUP_ID = "0"  # GroupId 0: the metric belongs to no application group

_NOT_STATS = frozenset({"timestamp"})
# The statistic keys of a row: read as numbers even when sent as text ("12.5"), never kept as dimensions. A
# key outside this set that holds text is a dimension (userId, instanceId and gpuId are numeric text too).
_STATISTICS = frozenset({"Average", "Maximum", "Minimum", "Sum", "SampleCount", "value", "Value"})

T = TypeVar("T")


class CmsSdkClient(Protocol):
    """The methods of `alibabacloud_cms20190101.client.Client` this adapter calls."""

    def describe_metric_last(self, request: m.DescribeMetricLastRequest) -> Any: ...
    def describe_metric_list(self, request: m.DescribeMetricListRequest) -> Any: ...
    def put_custom_metric(self, request: m.PutCustomMetricRequest) -> Any: ...


class CmsApi(Protocol):
    """What the service needs from CloudMonitor."""

    @property
    def custom_namespace(self) -> str: ...
    def metric_last(
        self, namespace: str, metric: str, instance_ids: Sequence[str], statistic: str = "Average"
    ) -> list[MetricPoint]: ...
    def metric_list(
        self,
        namespace: str,
        metric: str,
        instance_ids: Sequence[str],
        start: datetime,
        end: datetime,
        period_s: int = 15,
        statistic: str = "Average",
    ) -> list[MetricPoint]: ...
    def put_custom_metrics(self, metrics: Sequence[CustomMetric]) -> None: ...


class CmsAdapter:
    """CmsApi over the official CMS SDK client."""

    product = "cms"

    def __init__(
        self,
        client: CmsSdkClient,
        account_id: str,
        retry: RetryPolicy | None = None,
        region: str | None = None,
    ):
        self._client = client
        self._account_id = str(account_id)
        self._retry = retry or RetryPolicy()
        self._region = region

    def __repr__(self) -> str:
        return f"CmsAdapter(account_id={self._account_id!r}, region={self._region!r})"

    @property
    def custom_namespace(self) -> str:
        return f"{CUSTOM_NAMESPACE_PREFIX}{self._account_id}"

    def metric_last(
        self, namespace: str, metric: str, instance_ids: Sequence[str], statistic: str = "Average"
    ) -> list[MetricPoint]:
        """The latest point of `metric` for each instance (one per GPU for per-GPU metrics)."""
        points: list[MetricPoint] = []
        wanted = set(instance_ids)
        if len(wanted) > NAMESPACE_SCAN_MIN_IDS:
            for row in self._rows(
                "DescribeMetricLast",
                partial(self._last_request, namespace, metric, None, length=MAX_LENGTH),
                self._client.describe_metric_last,
            ):
                point = _point(namespace, metric, row, statistic, "DescribeMetricLast")
                if point.instance_id in wanted:
                    points.append(point)
            return points
        for dims in _dimension_batches(namespace, instance_ids):
            for row in self._rows(
                "DescribeMetricLast",
                partial(self._last_request, namespace, metric, dims),
                self._client.describe_metric_last,
            ):
                points.append(_point(namespace, metric, row, statistic, "DescribeMetricLast"))
        return points

    def metric_list(
        self,
        namespace: str,
        metric: str,
        instance_ids: Sequence[str],
        start: datetime,
        end: datetime,
        period_s: int = 15,
        statistic: str = "Average",
    ) -> list[MetricPoint]:
        """Every point of `metric` in (start, end] at `period_s` resolution, ordered by instance then time."""
        start_ms, end_ms = str(to_epoch_ms(start)), str(to_epoch_ms(end))
        points: list[MetricPoint] = []
        for dims in _dimension_batches(namespace, instance_ids):
            for row in self._rows(
                "DescribeMetricList",
                partial(self._list_request, namespace, metric, dims, start_ms, end_ms, period_s),
                self._client.describe_metric_list,
                max_pages=_list_pages(len(json.loads(dims)), (end - start).total_seconds(), period_s),
            ):
                points.append(_point(namespace, metric, row, statistic, "DescribeMetricList"))
        points.sort(key=lambda p: (p.instance_id or "", p.timestamp))
        return points

    def put_custom_metrics(self, metrics: Sequence[CustomMetric]) -> None:
        items = list(metrics)
        for start in range(0, len(items), MAX_CUSTOM_METRICS_PER_CALL):
            batch = [
                m.PutCustomMetricRequestMetricList(
                    metric_name=cm.name,
                    group_id=str(cm.group_id),
                    dimensions=json.dumps(dict(cm.dimensions), separators=(",", ":"), sort_keys=True),
                    values=json.dumps({"value": float(cm.value)}, separators=(",", ":")),
                    time=str(to_epoch_ms(cm.timestamp)),
                    type="0",  # raw data points; CMS aggregates them
                )
                for cm in items[start : start + MAX_CUSTOM_METRICS_PER_CALL]
            ]
            req = m.PutCustomMetricRequest(region_id=self._region, metric_list=batch)
            # Re-sending the same points is harmless, so 5xx and lost answers are retried too.
            self._call("PutCustomMetric", partial(_checked_call, self._client.put_custom_metric, req))

    # -- plumbing ------------------------------------------------------------------------------------------

    def _last_request(
        self, namespace: str, metric: str, dims: str | None, token: str | None, length: int | None = None
    ) -> m.DescribeMetricLastRequest:
        return m.DescribeMetricLastRequest(
            region_id=self._region,
            namespace=namespace,
            metric_name=metric,
            dimensions=dims,
            next_token=token,
            length=None if length is None else str(length),
        )

    def _list_request(
        self,
        namespace: str,
        metric: str,
        dims: str,
        start_ms: str,
        end_ms: str,
        period_s: int,
        token: str | None,
    ) -> m.DescribeMetricListRequest:
        return m.DescribeMetricListRequest(
            region_id=self._region,
            namespace=namespace,
            metric_name=metric,
            dimensions=dims,
            start_time=start_ms,
            end_time=end_ms,
            period=str(int(period_s)),
            length=str(MAX_LENGTH),
            next_token=token,
        )

    def _call(self, action: str, fn: Callable[[], T]) -> T:
        return call(self._retry, self.product, action, fn)

    def _rows(
        self,
        action: str,
        make_request: Callable[[str | None], Any],
        method: Callable[[Any], Any],
        max_pages: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        token: str | None = None
        walk = TokenWalk(action, max_pages=max_pages)
        while True:
            req = make_request(token)
            resp = self._call(action, partial(_checked_call, method, req))
            rows = _datapoints(resp.body.datapoints, action)
            yield from rows
            token = walk.follow(resp.body.next_token, len(rows))
            if token is None:
                return


def _list_pages(instances: int, window_s: float, period_s: int) -> int | None:
    """The most pages a DescribeMetricList walk may take: twice what the window can hold at one row per GPU
    per period, when that is above the walk's default bound (a diagnosis over days), else the default."""
    rows = instances * MAX_GPUS_PER_INSTANCE * (max(0.0, window_s) / max(1, period_s) + 1)
    pages = 2 * math.ceil(rows / MAX_LENGTH)
    return pages if pages > paging.MAX_PAGES else None


def _dimension_batches(namespace: str, instance_ids: Sequence[str]) -> Iterator[str]:
    ids = list(dict.fromkeys(instance_ids))  # de-duplicated, order kept
    custom = namespace.startswith(CUSTOM_NAMESPACE_PREFIX)
    for start in range(0, len(ids), MAX_DIMENSIONS_PER_CALL):
        chunk = ids[start : start + MAX_DIMENSIONS_PER_CALL]
        if custom:
            dims: list[dict[str, str]] = [
                {"groupId": CUSTOM_GROUP_ID, "dimension": f"instanceId={iid}"} for iid in chunk
            ]
        else:
            dims = [{"instanceId": iid} for iid in chunk]
        yield json.dumps(dims, separators=(",", ":"))


def _checked_call(method: Callable[[Any], Any], request: Any) -> Any:
    return _checked(method(request))


def _checked(resp: Any) -> Any:
    """Raise for a CMS answer that is HTTP 200 but says it failed (Success false or a non-200 Code)."""
    body = getattr(resp, "body", None)
    if body is None:
        return resp
    success = getattr(body, "success", None)
    code = getattr(body, "code", None)
    failed = success is False or (code is not None and str(code) not in ("200", ""))
    if not failed:
        return resp
    code_s = str(code) if code not in (None, "") else "Unknown"
    status = int(code_s) if code_s.isdigit() else 400
    message = getattr(body, "message", None) or "CMS reported Success=false"
    raise classify(code_s, status)(code_s, str(message), getattr(body, "request_id", None), status)


def _datapoints(raw: Any, action: str) -> list[dict[str, Any]]:
    if raw in (None, "", "[]"):
        return []
    if isinstance(raw, str):
        try:
            rows = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise CloudError("InvalidDatapoints", f"Datapoints is not JSON: {exc}", action=action) from exc
    else:
        rows = raw
    if not isinstance(rows, list):
        raise CloudError("InvalidDatapoints", "Datapoints is not a JSON array", action=action)
    return [row for row in rows if isinstance(row, dict)]


def _number(value: Any) -> float | None:
    """A statistic's value: a JSON number, or text holding one; None for anything else (a missing value,
    which the service treats as unknown)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _timestamp(metric: str, raw: Any, action: str) -> datetime:
    """A row's time (epoch milliseconds, as a number or text). A row without one, or with one no clock can
    hold, makes the whole answer InvalidDatapoints: its age cannot be known, so nothing in it is trusted."""
    if isinstance(raw, bool):
        raise CloudError("InvalidDatapoints", f"a {metric} datapoint has timestamp {raw!r}", action=action)
    try:
        timestamp = parse_time(raw)
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        raise CloudError(
            "InvalidDatapoints", f"a {metric} datapoint has timestamp {raw!r}: {exc}", action=action
        ) from exc
    if timestamp is None:
        raise CloudError("InvalidDatapoints", f"a {metric} datapoint has no timestamp", action=action)
    return timestamp


def _parse_dimension(text: str) -> dict[str, str]:
    """'gpu=0&instanceId=i-1' -> {'gpu': '0', 'instanceId': 'i-1'} (custom metric dimension strings)."""
    out: dict[str, str] = {}
    for pair in text.split("&"):
        key, sep, value = pair.partition("=")
        if sep and key:
            out[key] = value
    return out


def _point(namespace: str, metric: str, row: Mapping[str, Any], statistic: str, action: str) -> MetricPoint:
    dims: dict[str, str] = {}
    stats: dict[str, float] = {}
    for key, value in row.items():
        if key in _NOT_STATS:
            continue
        if key in _STATISTICS:
            number = _number(value)
            if number is not None:
                stats[key] = number
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            stats[key] = float(value)
        elif key == "dimension" and isinstance(value, str):
            dims.update(_parse_dimension(value))
        elif value is not None:
            dims[key] = str(value)
    value = stats.get(statistic)
    if value is None:
        value = stats.get("value", stats.get("Value"))
    timestamp = _timestamp(metric, row.get("timestamp"), action)
    return MetricPoint(
        namespace=namespace,
        metric=metric,
        instance_id=dims.get("instanceId"),
        timestamp=timestamp,
        value=value,
        dimensions=dims,
        stats=stats,
    )
