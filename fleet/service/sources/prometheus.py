"""Prometheus as a metric source: PromQL over the HTTP API (``/api/v1/query``, ``/api/v1/query_range``).

The expressions come from ``fleet.service.sources.mappings`` (DCGM exporter and vLLM series -> canonical
policy metrics). Results are matched to ECS instance ids by one label (config ``instance_label``, default
``instance_id``), which the scrape config attaches to every target of the fleet; config ``labels`` adds
matchers to every selector (a cluster or environment label, say).

Times. An instant query's result is stamped with the evaluation time, which says nothing about how old the
data is; so each read also asks for the newest raw sample's own time per instance (``timestamp()`` of the
series the expression reads), and that is the point's time: a target that stopped being scraped ages like a
CloudMonitor metric that stopped arriving, and goes stale under the policies' ``stale_after``. An instance
that this second query leaves out has no point: its value's age is unknown. The age is measured on
Prometheus' clock (its evaluation time less the sample's) and the point dated that long before the answer
came, on the service's clock: a skew between the two clocks neither ages nor freshens a point.

XIDs. ``DCGM_FI_DEV_XID_ERRORS`` is a gauge holding the last XID code, not an event stream: the same value is
scraped again and again. The policies count XID events by (instance, code, time), so an XID is dated by when
the gauge took its current value, found with a range query on a step-aligned grid (the same grid every tick,
hence the same date every tick). An XID whose value has not changed within ``xid_lookback_s`` cannot be dated
and is left out: it was recorded when it happened if the service was running then.

Unknown, never zero: an instance missing from the result, a NaN (``histogram_quantile`` with no requests in
the window) or an infinite value gives no point. HTTP failures, PromQL errors and malformed answers raise the
service's ``CloudError`` subclasses (``NetworkError``, ``ServerError``, ``InvalidRequest``) with codes
``Prometheus.<errorType>``, which the Observer records and counts like any cloud API error.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests

from fleet.cloud.errors import CloudError, InvalidRequest, NetworkError, ServerError, Throttled
from fleet.cloud.types import MetricPoint
from fleet.service.sources.mappings import DEFAULT_RATE_WINDOW, GPU_LABEL, PROMQL_MAPPINGS, PromMapping
from policies import metrics as pm

log = logging.getLogger(__name__)

NAMESPACE = "prometheus"  # MetricPoint.namespace of every point this source returns
MAX_ANSWER_BYTES = 64 * 2**20  # the most of one answer read (config metrics_source.max_answer_mib)
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_REGEX_SPECIALS = set(r"\.^$*+?()[]{}|")


@dataclass(frozen=True)
class Sample:
    """One series of an instant-vector result: its labels, value and the evaluation time."""

    labels: dict[str, str]
    value: float
    at: datetime


@dataclass(frozen=True)
class Series:
    """One series of a range-query result: its labels and (time, value) points in time order."""

    labels: dict[str, str]
    points: list[tuple[datetime, float]]


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _number(text: Any) -> float:
    """Prometheus sends values as strings: "1.5", "NaN", "+Inf"."""
    return float(text)


def promql_string(value: str) -> str:
    """A double-quoted PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def regex_alternation(values: Sequence[str]) -> str:
    """An RE2 alternation matching exactly ``values`` (fully anchored, as PromQL's =~ always is)."""
    return "|".join("".join("\\" + c if c in _REGEX_SPECIALS else c for c in v) for v in sorted(set(values)))


def redacted(url: str) -> str:
    """``url`` without the password of its user info (``http://user:pass@host`` -> ``http://user:***@host``),
    for messages and logs: basic-auth credentials ride in the URL and must not be written anywhere."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@" + parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=netloc))


def _labels(row: Mapping[str, Any]) -> dict[str, str]:
    """A series' labels, which Prometheus sends as strings; anything else is a malformed answer."""
    labels = row.get("metric") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise TypeError(f"labels must map strings to strings, got {labels!r:.100}")
    return dict(labels)


_LONG_REGEX = re.compile(r'=~"(?:[^"\\]|\\.){60,}"')


def _brief(promql: str) -> str:
    """A query for a message: the instance regex (the fleet's every id) elided, at most 300 characters."""
    short = _LONG_REGEX.sub('=~"..."', promql)
    return short if len(short) <= 300 else short[:297] + "..."


# what parsing a malformed answer raises: a missing key, a wrong type, a time no datetime can hold
_PARSE_ERRORS = (KeyError, IndexError, TypeError, ValueError, AttributeError, ArithmeticError, OSError)


def _malformed(endpoint: str, exc: Exception) -> ServerError:
    return ServerError(
        "Prometheus.BadResponse", f"malformed result: {type(exc).__name__}: {exc}", action=endpoint
    )


class PrometheusClient:
    """The two HTTP API calls this source needs; requests.Session underneath (tests swap the session)."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10.0,
        session: requests.Session | None = None,
        bearer_token: str | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_answer_bytes = max_answer_bytes
        self.session = session or requests.Session()
        if bearer_token:  # Thanos, Mimir, Grafana Cloud and proxies in front of Prometheus
            self.session.headers["Authorization"] = f"Bearer {bearer_token}"

    def query(self, promql: str, notes: list[str] | None = None) -> list[Sample]:
        """Evaluate ``promql`` now; the result must be an instant vector. The answer's warnings are added to
        ``notes``."""
        data = self._call("query", {"query": promql}, notes)
        if data.get("resultType") != "vector":
            raise InvalidRequest(
                "Prometheus.BadResultType",
                f"expected an instant vector, got {data.get('resultType')!r} for {_brief(promql)}",
                action="query",
            )
        try:
            return [
                Sample(
                    labels=_labels(row),
                    value=_number(row["value"][1]),
                    at=_utc(float(row["value"][0])),
                )
                for row in data.get("result") or []
            ]
        except _PARSE_ERRORS as exc:
            raise _malformed("query", exc) from None

    def query_range(
        self, promql: str, start: datetime, end: datetime, step_s: float, notes: list[str] | None = None
    ) -> list[Series]:
        """Evaluate ``promql`` at every ``step_s`` from ``start`` to ``end`` (a range vector per series)."""
        data = self._call(
            "query_range",
            {
                "query": promql,
                "start": f"{start.timestamp():.3f}",
                "end": f"{end.timestamp():.3f}",
                "step": f"{step_s:g}",
            },
            notes,
        )
        if data.get("resultType") != "matrix":
            raise InvalidRequest(
                "Prometheus.BadResultType",
                f"expected a range vector, got {data.get('resultType')!r} for {_brief(promql)}",
                action="query_range",
            )
        try:
            return [
                Series(
                    labels=_labels(row),
                    points=[(_utc(float(ts)), _number(text)) for ts, text in row.get("values") or []],
                )
                for row in data.get("result") or []
            ]
        except _PARSE_ERRORS as exc:
            raise _malformed("query_range", exc) from None

    def _call(self, endpoint: str, form: dict[str, str], notes: list[str] | None = None) -> dict[str, Any]:
        # POST with a form body: a group's instance-id regex can outgrow a URL
        url = f"{self.url}/api/v1/{endpoint}"
        shown = redacted(url)
        # a complete answer or an error: Thanos would otherwise drop an unreachable store's series and say so
        # only in a warning (Prometheus ignores the parameter)
        form = {**form, "partial_response": "false"}
        started = time.monotonic()
        try:
            # never followed: a 301/302/303 turns the POST into a GET without the query (answered with a
            # baffling "invalid parameter query"), and any redirect would be taken again at every query
            resp = self.session.post(
                url, data=form, timeout=self.timeout_s, allow_redirects=False, stream=True
            )
            with resp:
                text = self._read(resp, shown, endpoint, form["query"], started + self.timeout_s)
        except requests.RequestException as exc:
            raise NetworkError(
                "Prometheus.Unreachable", f"{shown}: {type(exc).__name__}: {exc}", action=endpoint
            ) from None
        data, warnings = self._answer(resp, text, shown, endpoint)
        if notes is not None:
            notes += [w for w in warnings if w not in notes]
        return data

    def _read(self, resp: requests.Response, shown: str, endpoint: str, promql: str, deadline: float) -> str:
        """The answer's text, read up to ``max_answer_bytes`` (decompressed): a larger answer is refused
        before it is held whole in memory, by its Content-Length where it sends one. Read by what has arrived
        (``read1``), and given up once ``timeout_s`` has passed since the query was sent (``deadline``): the
        socket's timeout bounds only each wait, so a server trickling its answer a few bytes at a time held
        the tick for as long as it liked."""
        limit = self.max_answer_bytes

        def too_large(size: str) -> InvalidRequest:
            return InvalidRequest(
                "Prometheus.AnswerTooLarge",
                f"{shown}: the answer to {_brief(promql)} is {size} the {limit} bytes "
                "metrics_source.max_answer_mib allows: does the query match far more series than the group's "
                "(the instance_label and labels)?",
                status=resp.status_code,
                action=endpoint,
            )

        declared = resp.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit and "content-encoding" not in resp.headers:
            raise too_large(f"{declared} bytes, over")
        raw = bytearray()
        read1 = getattr(resp.raw, "read1", None)
        chunks = (
            # (urllib3 answers None, not b"", for a response already closed: the end of it either way)
            iter(lambda: read1(64 * 1024, decode_content=True) or b"", b"")
            if read1 is not None
            else resp.iter_content(chunk_size=64 * 1024)
        )
        for chunk in chunks:
            raw += chunk
            if len(raw) > limit:
                raise too_large("over")
            if time.monotonic() > deadline:
                raise NetworkError(
                    "Prometheus.Unreachable",
                    f"{shown}: the answer to {_brief(promql)} took longer than metrics_source.timeout_s "
                    f"({self.timeout_s:g} s) to arrive ({len(raw)} bytes so far): a server trickling it",
                    action=endpoint,
                )
        try:
            return raw.decode(resp.encoding or "utf-8", errors="replace")
        except LookupError:  # a charset no codec knows: Prometheus' API is UTF-8 JSON
            return raw.decode("utf-8", errors="replace")

    def _answer(
        self, resp: requests.Response, text: str, shown: str, endpoint: str
    ) -> tuple[dict[str, Any], list[str]]:
        """The ``data`` and ``warnings`` of a successful answer; every other answer as the CloudError it
        stands for."""
        if resp.is_redirect:
            target = redacted(str(resp.headers.get("location")))
            raise InvalidRequest(
                "Prometheus.Redirected",
                f"{shown} redirects (HTTP {resp.status_code}) to {target}: set the metrics_source url to the "
                "address Prometheus answers at (its base URL, without /api/v1)",
                status=resp.status_code,
                action=endpoint,
            )
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        if resp.status_code in (401, 403):
            reason = "no or wrong credentials" if resp.status_code == 401 else "forbidden"
            raise InvalidRequest(
                f"Prometheus.HTTP{resp.status_code}",
                f"{shown} refused the request (HTTP {resp.status_code}, {reason}): {_why(body, text)}; "
                "for basic auth put them in the url (https://user:password@host), "
                "for a token set the metrics_source bearer_token_env",
                status=resp.status_code,
                action=endpoint,
            )
        if resp.status_code == 429:  # Mimir, Cortex and proxies in front of Prometheus limit query rates
            raise Throttled(
                "Prometheus.HTTP429",
                f"{shown} throttled the query (HTTP 429): {_why(body, text)}",
                status=429,
                action=endpoint,
                retry_after_s=_retry_after(resp.headers.get("retry-after")),
            )
        if not isinstance(body, dict):
            cls: type[CloudError] = ServerError if resp.status_code >= 500 or resp.ok else InvalidRequest
            code = "Prometheus.BadResponse" if resp.ok else f"Prometheus.HTTP{resp.status_code}"
            # a 404 page: the url is not where Prometheus' API answers (a path prefix missing or extra)
            hint = "; is the metrics_source url Prometheus' base URL?" if resp.status_code == 404 else ""
            raise cls(
                code,
                f"{shown}: not a Prometheus API answer: {text[:200]!r}{hint}",
                status=resp.status_code,
                action=endpoint,
            )
        if body.get("status") != "success":
            code = "Prometheus." + str(body.get("errorType") or f"HTTP{resp.status_code}")
            cls = ServerError if resp.status_code >= 500 else InvalidRequest
            message = str(body.get("error") or "query failed")
            raise cls(code, message, status=resp.status_code, action=endpoint)
        if body.get("isPartial") is True:
            # VictoriaMetrics cluster: some vmstorage nodes did not answer; a sum over an instance's servers
            # or a percentile could be computed from part of its series, so nothing of it is used
            raise ServerError(
                "Prometheus.PartialResponse",
                f"{shown}: partial answer (isPartial: some storage nodes did not answer)",
                status=resp.status_code,
                action=endpoint,
            )
        # a complete answer with something to say (a Thanos store that was skipped, PromQL's note that a
        # rate() reads a series that is no counter): the data is used; the Observer logs the warning (once
        # while it repeats) and shows it in /status
        warnings = [" ".join(str(w).split())[:300] for w in body.get("warnings") or []]
        for warning in warnings:
            log.debug("prometheus %s warning: %s", endpoint, warning)
        data = body.get("data")
        if not isinstance(data, dict):
            raise ServerError("Prometheus.BadResponse", f"{shown}: answer without data", action=endpoint)
        return data, warnings


def _retry_after(value: str | None) -> float | None:
    """A Retry-After of seconds (the form these servers send); None for a date or junk."""
    try:
        seconds = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _why(body: object, text: str) -> str:
    """The error a refusing server gave: Prometheus' JSON ``error``, else the start of its text."""
    if isinstance(body, dict) and body.get("error"):
        return str(body["error"])[:200]
    return repr(text[:200])


class PrometheusSource:
    """Canonical policy metrics read from Prometheus; see the module docstring for times and XIDs."""

    kind = "prometheus"

    def __init__(
        self,
        url: str,
        *,
        labels: Mapping[str, str] | None = None,
        instance_label: str = "instance_id",
        rate_window: str = DEFAULT_RATE_WINDOW,
        xid_lookback_s: int = 3600,
        xid_step_s: int = 30,
        timeout_s: float = 10.0,
        session: requests.Session | None = None,
        bearer_token: str | None = None,
        clock: Callable[[], float] = time.time,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        labels = dict(labels or {})
        for name in (instance_label, *labels):
            if not _LABEL_NAME.match(name):
                raise ValueError(f"{name!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
        if instance_label in labels:
            raise ValueError(f"labels must not set the instance label {instance_label!r}")
        self.client = PrometheusClient(
            url,
            timeout_s=timeout_s,
            session=session,
            bearer_token=bearer_token,
            max_answer_bytes=max_answer_bytes,
        )
        self.labels = labels
        self.instance_label = instance_label
        self.rate_window = rate_window
        self.xid_lookback_s = xid_lookback_s
        self.xid_step_s = xid_step_s
        self.clock = clock
        # per thread (reads run in parallel), the warnings of its last read of each metric until taken;
        # thread-local, so a read nobody takes the warnings of (a drain's, a diagnosis') goes with its thread
        self._local = threading.local()

    # -- PromQL ---------------------------------------------------------------------------------------
    def matchers(self, instance_ids: Sequence[str]) -> str:
        """The label matchers of every selector, without braces: the instances, then the configured labels."""
        parts = [f"{self.instance_label}=~{promql_string(regex_alternation(instance_ids))}"]
        parts += [f"{k}={promql_string(v)}" for k, v in sorted(self.labels.items())]
        return ",".join(parts)

    def expression(self, canonical: str, instance_ids: Sequence[str]) -> str:
        """The PromQL that yields ``canonical`` for ``instance_ids``."""
        return self._mapping(canonical).render(
            self.instance_label, "{" + self.matchers(instance_ids) + "}", self.rate_window
        )

    def freshness_expression(self, canonical: str, instance_ids: Sequence[str]) -> str:
        """Per instance, the time of the newest raw sample among the series ``canonical`` is computed from."""
        # one timestamp() per series name: timestamp() drops the name, and two names with the same labels in
        # one vector would be an error; `or` keeps one per label set, all scraped together from one target
        sel = "{" + self.matchers(instance_ids) + "}"
        stamps = " or ".join(f"timestamp({name}{sel})" for name in self._mapping(canonical).series)
        return f"max by ({self.instance_label}) ({stamps})"

    def describe(self, canonical: str) -> str:
        return self._mapping(canonical).render(self.instance_label, "{...}", self.rate_window)

    @staticmethod
    def _mapping(canonical: str) -> PromMapping:
        try:
            return PROMQL_MAPPINGS[canonical]
        except KeyError:
            raise ValueError(f"no PromQL mapping for metric {canonical!r}") from None

    # -- reads ----------------------------------------------------------------------------------------
    def take_warnings(self, canonical: str) -> list[str]:
        """What Prometheus warned of in this thread's last read of ``canonical`` (forgotten once taken)."""
        kept: dict[str, list[str]] = getattr(self._local, "warnings", {})
        return kept.pop(canonical, [])

    def _noted(self, canonical: str, notes: list[str]) -> None:
        if not hasattr(self._local, "warnings"):
            self._local.warnings = {}
        self._local.warnings[canonical] = notes

    def read_last(self, canonical: str, instance_ids: Sequence[str]) -> list[MetricPoint]:
        notes: list[str] = []
        self._noted(canonical, notes)  # filled as the queries answer; a failed read leaves what it had
        ids = [i for i in instance_ids if i]
        if not ids:
            return []
        if canonical == pm.GPU_XID:
            return self._read_xids(ids, notes)
        mapping = self._mapping(canonical)
        samples = self.client.query(self.expression(canonical, ids), notes)
        fresh = self._newest_samples(canonical, ids, notes)
        wanted = set(ids)
        points = []
        for s in samples:
            iid = s.labels.get(self.instance_label)
            if iid not in wanted or not math.isfinite(s.value):
                continue  # NaN: no requests in the window; +Inf: beyond the top bucket. Unknown.
            at = fresh.get(iid)
            if at is None:
                # no raw sample time (it went between the two queries, or a series the row does not name):
                # a value of unknown age is unknown, never dated by the evaluation as if fresh
                continue
            points.append(self._point(canonical, mapping, iid, s.labels, s.value, at))
        return points

    def _newest_samples(self, canonical: str, ids: list[str], notes: list[str]) -> dict[str | None, datetime]:
        """Per instance, its newest raw sample's time (the freshness query), on this service's clock.

        The sample's age is read on Prometheus' clock alone (the evaluation time it answered with, less the
        sample's): dated by Prometheus' clock and aged by ours, a Prometheus a minute ahead put every point
        in the future (dropped: every metric unknown) and one a minute behind made every point stale."""
        stamps = self.client.query(self.freshness_expression(canonical, ids), notes)
        answered_at = self.clock()
        try:
            return {
                s.labels.get(self.instance_label): _utc(answered_at - (s.at.timestamp() - s.value))
                for s in stamps
                if math.isfinite(s.value)
            }
        except _PARSE_ERRORS as exc:  # a time no datetime can hold
            raise _malformed("query", exc) from None

    def read_range(
        self, canonical: str, instance_ids: Sequence[str], start: datetime, end: datetime, step_s: int = 15
    ) -> list[MetricPoint]:
        notes: list[str] = []
        self._noted(canonical, notes)
        ids = [i for i in instance_ids if i]
        if not ids:
            return []
        mapping = self._mapping(canonical)
        wanted = set(ids)
        points = []
        for series in self.client.query_range(self.expression(canonical, ids), start, end, step_s, notes):
            iid = series.labels.get(self.instance_label)
            if iid not in wanted:
                continue
            points += [
                self._point(canonical, mapping, iid, series.labels, v, at)
                for at, v in series.points
                if math.isfinite(v)
            ]
        return points

    def _read_xids(self, ids: list[str], notes: list[str]) -> list[MetricPoint]:
        """Per GPU, the current XID code dated by when the gauge took it (see the module docstring)."""
        mapping = self._mapping(pm.GPU_XID)
        step = self.xid_step_s
        end_ts = math.floor(self.clock() / step) * step  # a fixed grid: the same dates every tick
        start_ts = end_ts - self.xid_lookback_s
        wanted = set(ids)
        points = []
        for series in self.client.query_range(
            self.expression(pm.GPU_XID, ids), _utc(start_ts), _utc(end_ts), step, notes
        ):
            iid = series.labels.get(self.instance_label)
            values = [(at, v) for at, v in series.points if math.isfinite(v)]
            if iid not in wanted or not values:
                continue
            last_at, code = values[-1]
            if code == 0:
                points.append(self._point(pm.GPU_XID, mapping, iid, series.labels, 0.0, last_at))
                continue
            first = len(values) - 1
            while first > 0 and values[first - 1][1] == code:
                first -= 1
            since = values[first][0]
            if first == 0 and since.timestamp() <= start_ts:
                log.debug(
                    "XID %g on %s older than the %ss lookback: not dated", code, iid, self.xid_lookback_s
                )
                continue
            points.append(self._point(pm.GPU_XID, mapping, iid, series.labels, code, since))
        return points

    def _point(
        self,
        canonical: str,
        mapping: PromMapping,
        iid: str,
        labels: Mapping[str, str],
        value: float,
        at: datetime,
    ) -> MetricPoint:
        dims = {"instanceId": iid}
        if mapping.per_gpu and GPU_LABEL in labels:
            dims["gpu"] = labels[GPU_LABEL]
        return MetricPoint(
            namespace=NAMESPACE, metric=canonical, instance_id=iid, timestamp=at, value=value, dimensions=dims
        )
