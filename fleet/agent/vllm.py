"""The local vLLM server's Prometheus ``/metrics``: scrape, parse, and turn cumulative counters into windows.

vLLM exposes latency as cumulative histograms and requests as cumulative counters. The agent keeps the
previous scrape and differences the two, so percentiles and rates describe the last period only (the same
thing Prometheus' ``histogram_quantile(rate(...[w]))`` computes). A restart between scrapes resets vLLM's
counters: everything counted since the restart happened inside the window, so the new cumulative values are
the window's own. A restart is seen by a counter that went down, or by a series' ``_created`` stamp (or
``process_start_time_seconds``) that changed: a server that restarted and got busy can have climbed past the
old counts before the next scrape, and differencing then would lose what it served before it caught up.

Each series (label set) is differenced on its own and the windows are then added up, as Prometheus'
``sum(increase(...))`` does: a server with several data-parallel engines labels each engine's series
(``engine="0"``, ``engine="1"``), and one engine that restarts resets its own series only. Adding the
engines up first made one engine's restart a reset of all, counting the others' lifetime totals as the
window's (or, where the others had grown more than it lost, hiding the restart and its window).

Metric names follow vLLM's ``/metrics`` (both the V0 names and the V1 renames are accepted, newest first).
Scraping uses urllib on purpose: the fake cloud intercepts ``requests``, and the local server must stay local.
"""

from __future__ import annotations

import http.client
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
# vLLM reports KV cache usage as a fraction (1.0 = full) despite the "perc" suffix; V1 renamed it.
KV_CACHE_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
TTFT = ("vllm:time_to_first_token_seconds",)
# vLLM V1 renamed the per-token latency histogram to inter_token_latency; older servers only have the first.
TPOT = ("vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds")
E2E = ("vllm:e2e_request_latency_seconds",)
REQUEST_SUCCESS = "vllm:request_success_total"
PREEMPTIONS = ("vllm:num_preemptions_total",)
GENERATION_TOKENS = "vllm:generation_tokens_total"
# Prefill tokens processed: with the generated tokens and the finished requests, the engine's progress.
# Requests in flight and none of those for STALL_S is an engine that hangs (an NCCL collective that never
# returns, a stuck EngineCore) while its API server still answers: vllm_up reads 0 then. A minute is far
# beyond one engine step (chunked prefill computes a few thousand tokens per step).
PROMPT_TOKENS = "vllm:prompt_tokens_total"
STALL_S = 60.0
# Per-request token histograms (observed when a request finishes): their _sum/_count give tokens per request.
PROMPT_TOKENS_HIST = ("vllm:request_prompt_tokens",)
OUTPUT_TOKENS_HIST = ("vllm:request_generation_tokens",)
# Automatic prefix caching (V1): prompt tokens looked up in the prefix cache and those found, as counters;
# their window's ratio is the share of prompts the cache served (``fleet size --prefix-hit``).
# vLLM 0.8-0.9 named them gpu_prefix_cache_* (renamed by vllm#18354, the old names kept a while as deprecated)
PREFIX_CACHE_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
PREFIX_CACHE_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")

# vLLM's histogram bucket bounds (s) of the three latencies (vLLM V1, ``vllm/v1/metrics/loggers.py``): the
# agent interpolates inside a bucket, so a P99 between 2.5 s and 5 s reads wherever the bucket's counts put
# it, not the exact value. The simulator's agent and the tests' fake vLLM servers count in them.
TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TPOT_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
E2E_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
)  # fmt: skip
QUANTILES = (0.50, 0.95, 0.99)
# The process collector's start time: prometheus_client serves it on Linux unless vLLM runs in multiprocess
# mode (several API servers), where the ``_created`` stamps are absent too: only a decrease shows a restart.
PROCESS_START = "process_start_time_seconds"
SCRAPE_TIMEOUT_S = 2.0
# The whole answer, however it trickles in: well inside the shortest period (5 s), so a scrape never
# overruns it; vLLM serves its page in milliseconds
SCRAPE_DEADLINE_S = 4.0
SCRAPE_CHUNK_BYTES = 64 * 1024
# vLLM's page is tens of KiB; anything far larger is not it, and must not eat the agent's memory.
MAX_METRICS_BYTES = 16 * 1024 * 1024


# A series' labels, sorted: which engine, model and finish reason it counts.
SeriesKey = tuple[tuple[str, str], ...]
# One metric's values by label set.
Series = dict[SeriesKey, float]


def series_key(labels: dict[str, str], without: str | None = None) -> SeriesKey:
    return tuple(sorted((name, value) for name, value in labels.items() if name != without))


class ScrapeError(Exception):
    """The metrics endpoint could not be read or parsed."""


def fetch_metrics_text(
    url: str, timeout_s: float = SCRAPE_TIMEOUT_S, deadline_s: float = SCRAPE_DEADLINE_S
) -> str:
    """GET ``url`` and return its body; ScrapeError for anything but a whole 2xx body within ``deadline_s``.

    ``timeout_s`` bounds each socket read; ``deadline_s`` the whole answer: a server that drips its page a few
    bytes a second never trips the first, and held the agent (and its signals) for nine minutes. A body
    shorter than its Content-Length (the server closed mid-page) is refused: its missing histograms were read
    as absent, and the next window then published their lifetime percentiles."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (operator-given local URL)
            chunks: list[bytes] = []
            size = 0
            while size <= MAX_METRICS_BYTES:
                # read1: what one read gives (read(n) waits for n bytes or the end, past any deadline)
                chunk = resp.read1(min(SCRAPE_CHUNK_BYTES, MAX_METRICS_BYTES + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if time.monotonic() - started > deadline_s:
                    raise ScrapeError(f"{url}: the answer took longer than {deadline_s:g} s; not read")
            declared = resp.headers.get("Content-Length")
    except urllib.error.HTTPError as exc:
        raise ScrapeError(f"{url}: HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", exc)
        raise ScrapeError(f"{url}: {reason}") from exc
    body = b"".join(chunks)
    if len(body) > MAX_METRICS_BYTES:
        raise ScrapeError(f"{url}: answer larger than {MAX_METRICS_BYTES} bytes; not vLLM's /metrics")
    if declared is not None and declared.isdigit() and len(body) < int(declared):
        raise ScrapeError(f"{url}: the answer ended after {len(body)} of its {declared} bytes")
    return body.decode("utf-8", errors="replace")


@dataclass
class ParsedMetrics:
    """Samples by name (``_bucket``/``_total`` suffixes kept), each a list of (labels, value)."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        return name in self.samples

    def first_present(self, names: Iterable[str], suffix: str = "") -> str | None:
        for name in names:
            if name + suffix in self.samples:
                return name
        return None

    def total(self, name: str) -> float | None:
        """Sum over every label set (several models or engines on one server add up)."""
        values = [v for _, v in self.samples.get(name, []) if not math.isnan(v)]
        return sum(values) if values else None

    def maximum(self, name: str) -> float | None:
        values = [v for _, v in self.samples.get(name, []) if not math.isnan(v)]
        return max(values) if values else None

    def series(self, name: str) -> Series | None:
        """Values by label set (NaN left out); None when the page has no value of ``name``."""
        out = {
            series_key(labels): value for labels, value in self.samples.get(name, []) if not math.isnan(value)
        }
        return out or None

    def counter(self, name: str) -> CounterSeries | None:
        """A counter (``..._total``) or a histogram's ``_sum``/``_count``, by label set."""
        values = self.series(name)
        if values is None:
            return None
        base = name.removesuffix("_total").removesuffix("_sum").removesuffix("_count")
        return CounterSeries(created=base + "_created", values=values)

    def histogram(self, name: str) -> HistogramSeries:
        """Cumulative bucket counts by upper bound, per label set (less ``le``)."""
        out: dict[SeriesKey, dict[float, float]] = {}
        for labels, value in self.samples.get(name + "_bucket", []):
            try:
                upper = float(labels.get("le", "nan"))
            except ValueError:
                continue
            if math.isnan(upper) or not math.isfinite(value):
                continue
            out.setdefault(series_key(labels, without="le"), {})[upper] = value
        return HistogramSeries(created=name + "_created", buckets=out)

    def restart_marks(self) -> dict[tuple[str, SeriesKey], float]:
        """Per series, what changes only when the server restarts: every vLLM ``_created`` stamp (the time
        prometheus_client created the counter or histogram series) and ``process_start_time_seconds``."""
        marks: dict[tuple[str, SeriesKey], float] = {}
        for name, samples in self.samples.items():
            if name == PROCESS_START or (name.startswith("vllm:") and name.endswith("_created")):
                for labels, value in samples:
                    if not math.isnan(value):
                        marks[(name, series_key(labels))] = value
        return marks


@dataclass(frozen=True)
class CounterSeries:
    """One counter's values by label set, and the name of its ``_created`` stamps."""

    created: str
    values: Series


@dataclass(frozen=True)
class HistogramSeries:
    """One histogram's cumulative buckets by label set, and the name of its ``_created`` stamps."""

    created: str
    buckets: dict[SeriesKey, dict[float, float]]


@dataclass(frozen=True)
class Restarts:
    """The series that restarted between two scrapes, by their ``_created`` stamps (a fall of a counter is
    seen where it is differenced)."""

    everything: bool = False  # process_start_time_seconds changed: the whole server restarted
    created: frozenset[tuple[str, SeriesKey]] = frozenset()  # the _created stamps that changed

    def of(self, created: str, key: SeriesKey) -> bool:
        """Whether the series ``key`` whose stamps are named ``created`` restarted."""
        return self.everything or (created, key) in self.created

    def __bool__(self) -> bool:
        return self.everything or bool(self.created)


def restarts(now: dict[tuple[str, SeriesKey], float], before: dict[tuple[str, SeriesKey], float]) -> Restarts:
    """The series present in both scrapes that were created anew (a series first seen now is not a restart:
    vLLM creates some label sets on first use)."""
    changed = {key for key, value in now.items() if key in before and before[key] != value}
    return Restarts(
        everything=any(name == PROCESS_START for name, _ in changed),
        created=frozenset(key for key in changed if key[0] != PROCESS_START),
    )


def parse_metrics(text: str) -> ParsedMetrics:
    """Parse Prometheus text exposition; ScrapeError when it is not that."""
    parsed = ParsedMetrics()
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                series = (sample.name, tuple(sorted(sample.labels.items())))
                if series in seen:  # Prometheus refuses such a scrape; summed, it doubled the queue
                    raise ScrapeError(f"not a valid exposition: series {sample.name} is listed twice")
                seen.add(series)
                parsed.samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    except (ValueError, TypeError, IndexError) as exc:
        raise ScrapeError(f"not Prometheus text: {exc}") from exc
    return parsed


def bucket_delta(
    current: dict[float, float], previous: dict[float, float] | None, reset: bool = False
) -> dict[float, float]:
    """Per-window cumulative buckets: current minus previous, or current alone after a counter reset (one the
    caller saw, or a bucket that went down)."""
    if previous is None:
        return dict(current)
    reset = reset or any(current.get(le, 0.0) < count for le, count in previous.items())
    if reset:
        return dict(current)
    return {le: count - previous.get(le, 0.0) for le, count in current.items()}


def histogram_quantile(q: float, cumulative: dict[float, float]) -> float | None:
    """The q-quantile from cumulative buckets, interpolating linearly inside a bucket (as Prometheus does).

    None when the window holds no observation. A rank that falls in the ``+Inf`` bucket answers the largest
    finite bound: the histogram cannot say more, and saying "infinite" would poison every max() downstream.
    """
    if not cumulative:
        return None
    bounds = sorted(cumulative)
    total = cumulative[bounds[-1]] if math.isinf(bounds[-1]) else max(cumulative.values())
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for upper in bounds:
        count = cumulative[upper]
        if count >= rank:
            if math.isinf(upper):
                finite = [b for b in bounds if not math.isinf(b)]
                return finite[-1] if finite else None
            in_bucket = count - lower_count
            if in_bucket <= 0:
                return upper
            return lower_bound + (upper - lower_bound) * (rank - lower_count) / in_bucket
        lower_bound, lower_count = upper, count
    return None


def counter_delta(current: float | None, previous: float | None, reset: bool = False) -> float | None:
    """The increase of a counter over the window (a reset, seen by the caller or by a decrease, counts from
    zero)."""
    if current is None or previous is None:
        return None
    return current if reset or current < previous else current - previous


def series_delta(
    now: CounterSeries | None, before: CounterSeries | None, restarted: Restarts
) -> float | None:
    """A counter's increase over the window, each label set differenced on its own and the increases added:
    a series that restarted (its stamp changed, or its count fell) counts from zero, one first seen now counts
    whole (vLLM creates a label set on its first use), one gone counts nothing. None without a baseline."""
    if now is None or before is None:
        return None
    total = 0.0
    for key, value in now.values.items():
        delta = counter_delta(value, before.values.get(key, 0.0), restarted.of(now.created, key))
        total += delta or 0.0
    return total


def histogram_window(
    now: HistogramSeries, before: HistogramSeries | None, restarted: Restarts
) -> dict[float, float]:
    """The window's cumulative buckets: each label set's ``bucket_delta``, added up by bound."""
    out: dict[float, float] = {}
    previous = before.buckets if before is not None else {}
    for key, current in now.buckets.items():
        delta = bucket_delta(current, previous.get(key), restarted.of(now.created, key))
        for upper, count in delta.items():
            out[upper] = out.get(upper, 0.0) + count
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


@dataclass
class LatencyQuantiles:
    """P50/P95/P99 of one histogram over the window, in milliseconds (None: no observation in the window)."""

    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    count: float = 0.0


@dataclass
class VllmReading:
    """What vLLM said this period."""

    up: bool
    error: str | None = None
    num_requests_waiting: float | None = None
    num_requests_running: float | None = None
    kv_cache_usage_pct: float | None = None
    ttft: LatencyQuantiles = field(default_factory=LatencyQuantiles)
    tpot: LatencyQuantiles = field(default_factory=LatencyQuantiles)
    e2e: LatencyQuantiles = field(default_factory=LatencyQuantiles)
    request_rate_per_s: float | None = None
    # demand (issue 16): arrivals = completions + the growth of what is in flight (waiting + running)
    arrival_rate_per_s: float | None = None
    prompt_tokens_per_request: float | None = None
    output_tokens_per_request: float | None = None
    prefix_cache_hit_ratio: float | None = None  # cached / looked-up prompt tokens in the window
    generation_tokens_per_s: float | None = None
    preemptions: float | None = None  # in the window
    window_s: float | None = None  # None on the first scrape: there is nothing to difference yet
    stalled_s: float | None = None  # how long work has been in flight with no token computed (None: moving)


@dataclass
class _Previous:
    monotonic_s: float
    histograms: dict[str, HistogramSeries]
    counters: dict[str, CounterSeries | None]
    in_flight: Series | None = None  # waiting + running, by label set
    marks: dict[tuple[str, SeriesKey], float] = field(default_factory=dict)


class VllmCollector:
    """Scrapes vLLM every period and keeps the previous scrape to window the cumulative series."""

    def __init__(self, url: str, fetch: Callable[[str], str] = fetch_metrics_text) -> None:
        self.url = url
        self._fetch = fetch
        self._previous: _Previous | None = None
        # since when work in flight has made no progress: the whole server's (None), or one engine's
        self._stalled_since: dict[SeriesKey | None, float] = {}

    def read(self, monotonic_s: float) -> VllmReading:
        try:
            parsed = parse_metrics(self._fetch(self.url))
        except ScrapeError as exc:
            # Keep the previous scrape: when vLLM comes back, its counters either continue (a blip) or have
            # reset (a restart), and the difference handles both.
            return VllmReading(up=False, error=str(exc))
        if not parsed.has(WAITING) and not parsed.has(RUNNING):
            return VllmReading(up=False, error=f"{self.url}: no {WAITING} (is this vLLM's /metrics?)")

        reading = VllmReading(
            up=True,
            num_requests_waiting=parsed.total(WAITING),
            num_requests_running=parsed.total(RUNNING),
        )
        kv_name = parsed.first_present(KV_CACHE_USAGE)
        if kv_name is not None:
            fraction = parsed.maximum(kv_name)  # the fullest engine is the one that preempts
            reading.kv_cache_usage_pct = None if fraction is None else 100.0 * fraction

        histograms: dict[str, HistogramSeries] = {}
        for key, names in (("ttft", TTFT), ("tpot", TPOT), ("e2e", E2E)):
            name = parsed.first_present(names, "_bucket")
            if name is not None:
                histograms[key] = parsed.histogram(name)
        counters = {
            "success": parsed.counter(REQUEST_SUCCESS),
            "generation": parsed.counter(GENERATION_TOKENS),
            "prompt": parsed.counter(PROMPT_TOKENS),
            "preemptions": _first_counter(parsed, PREEMPTIONS),
            "prefix_queries": _first_counter(parsed, PREFIX_CACHE_QUERIES),
            "prefix_hits": _first_counter(parsed, PREFIX_CACHE_HITS),
        }
        for key, names in (("prompt", PROMPT_TOKENS_HIST), ("output", OUTPUT_TOKENS_HIST)):
            name = parsed.first_present(names, "_sum")
            counters[f"{key}_sum"] = parsed.counter(name + "_sum") if name else None
            counters[f"{key}_count"] = parsed.counter(name + "_count") if name else None
        in_flight = _add_series(parsed.series(WAITING), parsed.series(RUNNING))

        previous = self._previous
        marks = parsed.restart_marks()
        self._previous = _Previous(monotonic_s, histograms, counters, in_flight, marks)
        if previous is None:
            return reading
        window_s = monotonic_s - previous.monotonic_s
        if window_s <= 0:
            return reading
        reading.window_s = window_s
        restarted = restarts(marks, previous.marks)
        for key, current in histograms.items():
            if key not in previous.histograms and not restarted:
                continue  # no baseline (the last scrape lacked it): its lifetime counts are not this window's
            delta = histogram_window(current, previous.histograms.get(key), restarted)
            p50, p95, p99 = (_ms(histogram_quantile(q, delta)) for q in QUANTILES)
            total = max(delta.values()) if delta else 0.0
            setattr(reading, key, LatencyQuantiles(p50_ms=p50, p95_ms=p95, p99_ms=p99, count=total))
        success = series_delta(counters["success"], previous.counters.get("success"), restarted)
        reading.request_rate_per_s = None if success is None else success / window_s
        generation = series_delta(counters["generation"], previous.counters.get("generation"), restarted)
        reading.generation_tokens_per_s = None if generation is None else generation / window_s
        reading.preemptions = series_delta(
            counters["preemptions"], previous.counters.get("preemptions"), restarted
        )
        _demand(reading, counters, previous, in_flight, success, window_s, restarted)
        self._judge_progress(reading, counters, in_flight, previous, restarted, monotonic_s)
        return reading

    def _judge_progress(
        self,
        reading: VllmReading,
        counters: dict[str, CounterSeries | None],
        in_flight: Series | None,
        previous: _Previous,
        restarted: Restarts,
        monotonic_s: float,
    ) -> None:
        """An engine with requests in flight (waiting or running) at both ends of the window that finished
        none and computed no token (prefill or decode) made no progress; after STALL_S of that it is reported
        down.

        The server is judged as a whole, and each of its data-parallel engines (a label set of the in-flight
        gauges, ``engine="1"``) on its own, by the counter series that carry its labels: one hung engine
        next to a busy one moves the server's sums, and only its own series show it stand still."""
        now = in_flight or {}
        before = previous.in_flight or {}
        groups: dict[SeriesKey | None, tuple[float, float]] = {
            None: (sum(now.values()), sum(before.values()))
        }
        if len(now) > 1:
            groups.update({key: (value, before.get(key, 0.0)) for key, value in now.items()})
        since: dict[SeriesKey | None, float] = {}
        for group, (now_n, before_n) in groups.items():
            if now_n > 0 and before_n > 0 and _stood_still(group, counters, previous.counters, restarted):
                since[group] = self._stalled_since.get(group, previous.monotonic_s)
        self._stalled_since = since
        if not since:
            return
        reading.stalled_s = monotonic_s - min(since.values())
        hung = [group for group, start in since.items() if monotonic_s - start >= STALL_S]
        if not hung:
            return
        reading.up = False
        # the whole server hung says it all; otherwise name each engine that did
        named = [None] if None in hung else hung
        reading.error = "; ".join(
            f"engine stalled: {_labels(group)}{groups[group][0]:g} requests in flight and no token computed "
            f"for {monotonic_s - since[group]:g} s"
            for group in named
        )


def _stood_still(
    group: SeriesKey | None,
    counters: dict[str, CounterSeries | None],
    before: dict[str, CounterSeries | None],
    restarted: Restarts,
) -> bool:
    """Whether the progress counters (requests finished, prompt and generated tokens) of ``group`` (None: the
    whole server; else one engine's labels) all stood still over the window. Not when none of them can say
    (absent, no baseline, no series of the engine's) or when one of its series restarted."""
    if group is None:
        if restarted:
            return False
        moved = [
            series_delta(counters[k], before.get(k), restarted) for k in ("success", "generation", "prompt")
        ]
    else:
        if restarted.everything or any(set(group) <= set(key) for _, key in restarted.created):
            return False
        moved = [
            _engine_delta(group, counters[k], before.get(k), restarted)
            for k in ("success", "generation", "prompt")
        ]
    known = [delta for delta in moved if delta is not None]
    return bool(known) and max(known) <= 0


def _engine_delta(
    group: SeriesKey, now: CounterSeries | None, before: CounterSeries | None, restarted: Restarts
) -> float | None:
    """``series_delta`` over the series whose labels include ``group``'s; None when there are none."""
    if now is None or before is None:
        return None
    mine = {key: value for key, value in now.values.items() if set(group) <= set(key)}
    if not mine:
        return None
    return series_delta(CounterSeries(now.created, mine), before, restarted)


def _labels(group: SeriesKey | None) -> str:
    """An engine's labels as Prometheus writes them, and a colon; nothing for the whole server."""
    if not group:
        return ""
    return "{" + ",".join(f'{name}="{value}"' for name, value in group) + "}: "


def combine(readings: Sequence[VllmReading]) -> VllmReading:
    """One instance's reading from its vLLM servers' (several servers on their own ports, one per GPU or
    group of GPUs): queues, rates and token counts add up; the fullest KV cache and the slowest engine's
    latency percentiles stand for the instance (a request that lands there waits that long); it is up only
    when every server is (one dead server is a degraded node), and the down ones' errors are joined."""
    if len(readings) == 1:
        return readings[0]
    up = [r for r in readings if r.up]
    errors = [r.error for r in readings if not r.up and r.error]
    out = VllmReading(up=len(up) == len(readings), error="; ".join(errors) or None)
    for name in (
        "num_requests_waiting",
        "num_requests_running",
        "request_rate_per_s",
        "arrival_rate_per_s",
        "generation_tokens_per_s",
        "preemptions",
    ):
        setattr(out, name, _sum_known(*(getattr(r, name) for r in up)))
    out.kv_cache_usage_pct = _max_known(*(r.kv_cache_usage_pct for r in up))
    out.window_s = _max_known(*(r.window_s for r in up))
    out.stalled_s = _max_known(*(r.stalled_s for r in up))
    for name in ("ttft", "tpot", "e2e"):
        parts = [getattr(r, name) for r in up if getattr(r, name).count > 0]
        if parts:
            setattr(
                out,
                name,
                LatencyQuantiles(
                    p50_ms=_max_known(*(q.p50_ms for q in parts)),
                    p95_ms=_max_known(*(q.p95_ms for q in parts)),
                    p99_ms=_max_known(*(q.p99_ms for q in parts)),
                    count=sum(q.count for q in parts),
                ),
            )
    for name in ("prompt_tokens_per_request", "output_tokens_per_request", "prefix_cache_hit_ratio"):
        # weighted by each server's completions: the instance's mean over its requests
        pairs = [(getattr(r, name), r.request_rate_per_s or 0.0) for r in up if getattr(r, name) is not None]
        if not pairs:
            continue
        weight = sum(w for _, w in pairs)
        if weight <= 0:
            pairs, weight = [(v, 1.0) for v, _ in pairs], float(len(pairs))
        setattr(out, name, sum(v * w for v, w in pairs) / weight)
    return out


def _first_counter(parsed: ParsedMetrics, names: Sequence[str]) -> CounterSeries | None:
    """The first of ``names`` the page has (the current name before an older one)."""
    name = parsed.first_present(names)
    return parsed.counter(name) if name is not None else None


def _add_series(*parts: Series | None) -> Series | None:
    """Several metrics' values added by label set (the waiting and the running requests of each engine)."""
    known = [part for part in parts if part is not None]
    if not known:
        return None
    out: Series = {}
    for part in known:
        for key, value in part.items():
            out[key] = out.get(key, 0.0) + value
    return out


def _max_known(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _sum_known(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _demand(
    reading: VllmReading,
    now: dict[str, CounterSeries | None],
    previous: _Previous,
    in_flight: Series | None,
    success: float | None,
    window_s: float,
    restarted: Restarts,
) -> None:
    """Arrival rate and tokens per request over the window (vLLM counts requests when they finish).

    Arrivals are the completions plus the growth of the requests in flight; a restart (a counter reset) loses
    what was in flight, so the growth is counted from zero then.
    """
    before = previous.counters
    if success is not None:
        growth = _in_flight_growth(
            in_flight, previous.in_flight, now["success"], before.get("success"), restarted
        )
        reading.arrival_rate_per_s = max(0.0, success + growth) / window_s
    for key, attr in (("prompt", "prompt_tokens_per_request"), ("output", "output_tokens_per_request")):
        total = series_delta(now.get(f"{key}_sum"), before.get(f"{key}_sum"), restarted)
        count = series_delta(now.get(f"{key}_count"), before.get(f"{key}_count"), restarted)
        if total is not None and count:
            setattr(reading, attr, total / count)
    queries = series_delta(now.get("prefix_queries"), before.get("prefix_queries"), restarted)
    hits = series_delta(now.get("prefix_hits"), before.get("prefix_hits"), restarted)
    if queries and hits is not None:
        reading.prefix_cache_hit_ratio = min(1.0, hits / queries)


def _in_flight_growth(
    now: Series | None,
    before: Series | None,
    success: CounterSeries | None,
    success_before: CounterSeries | None,
    restarted: Restarts,
) -> float:
    """The growth of the requests in flight over the window, by label set (an engine's waiting + running).

    An engine that restarted lost what it had in flight, so its growth counts from zero: one whose labels
    belong to a request-success series that restarted (its stamp changed, or its count fell). A label set
    first seen now counts whole, one gone counts nothing.
    """
    if now is None or before is None:
        return 0.0
    reset_keys: list[set[tuple[str, str]]] = []
    if success is not None:
        earlier = success_before.values if success_before is not None else {}
        reset_keys = [
            set(key)
            for key, value in success.values.items()
            if restarted.of(success.created, key) or value < earlier.get(key, value)
        ]
    growth = 0.0
    for key, value in now.items():
        lost = restarted.everything or any(set(key) <= reset for reset in reset_keys)
        growth += value if lost or key not in before else value - before[key]
    return growth
