"""Latency under load: run a request stream through one :class:`InstanceEngine` and report percentiles,
plus the sweep that finds the knee of the latency-throughput curve.

The request stream is either Poisson arrivals with token lengths drawn from a distribution, or a trace given
as data (arrival time, prompt tokens, output tokens per request; the shell parses the trace files). A fleet of
``replicas`` identical instances behind a round-robin balancer is simulated by giving one instance every
``replicas``-th request: each sees ``qps / replicas``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from sizing.engine import CompletedRequest, InstanceEngine
from sizing.errors import SizingInputError
from sizing.memory import Deployment, MemoryPlan
from sizing.perf import PerfModel
from sizing.stats import percentile
from sizing.traces import TraceRequest


@dataclass(frozen=True)
class Workload:
    """The load one deployment must carry.

    Without a trace: Poisson arrivals at ``qps``, prompt/output lengths with the given means, fixed when
    ``length_cv`` is 0 and lognormal with that coefficient of variation otherwise. With a trace: its arrivals
    and lengths; ``qps``, when given, rescales the trace's clock so its mean rate becomes ``qps``.
    """

    qps: float | None = None
    prompt_tokens: int = 1000
    output_tokens: int = 200
    length_cv: float = 0.0
    trace: tuple[TraceRequest, ...] = ()
    # share of each prompt vLLM finds in its prefix cache (automatic prefix caching, on by default in V1):
    # vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total of a running fleet; 0 sizes for none
    prefix_hit: float = 0.0
    # the trace's own prompts: the share of their tokens in a prefix an earlier one had (Mooncake's hash_ids),
    # an upper bound on prefix_hit; None when the trace does not say
    trace_prefix_share: float | None = None

    def __post_init__(self) -> None:
        if self.qps is not None and not (self.qps > 0 and math.isfinite(self.qps)):
            raise SizingInputError(f"qps must be a positive number, got {self.qps}")
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise SizingInputError("prompt and output tokens must be at least 1")
        if not (self.length_cv >= 0 and math.isfinite(self.length_cv)):
            raise SizingInputError(f"length cv must be >= 0, got {self.length_cv}")
        if self.trace and len(self.trace) < 2:
            raise SizingInputError("a trace needs at least two requests")
        if not (0.0 <= self.prefix_hit < 1.0):
            raise SizingInputError(f"prefix hit must be in [0, 1), got {self.prefix_hit}")

    @property
    def trace_rate(self) -> float:
        if not self.trace:
            return 0.0
        span = self.trace[-1].arrival_s - self.trace[0].arrival_s
        return (len(self.trace) - 1) / span if span > 0 else float(len(self.trace))

    @property
    def rate(self) -> float:
        """Mean arrival rate, req/s."""
        if self.qps is not None:
            return self.qps
        if self.trace:
            return self.trace_rate
        raise SizingInputError("the workload needs --qps (or a trace)")

    @property
    def mean_prompt_tokens(self) -> float:
        if self.trace:
            return sum(r.prompt_tokens for r in self.trace) / len(self.trace)
        return float(self.prompt_tokens)

    @property
    def mean_output_tokens(self) -> float:
        if self.trace:
            return sum(r.output_tokens for r in self.trace) / len(self.trace)
        return float(self.output_tokens)

    def with_qps(self, qps: float) -> Workload:
        return replace(self, qps=qps)

    def stream(self, num_requests: int, seed: int = 0, replicas: int = 1) -> list[TraceRequest]:
        """The requests one of ``replicas`` round-robin instances sees, ``num_requests`` of them."""
        rng = random.Random(seed)
        if self.trace:
            scale = self.trace_rate / self.rate if self.qps else 1.0  # stretch the clock to the asked rate
            t0 = self.trace[0].arrival_s
            out: list[TraceRequest] = []
            lap = (self.trace[-1].arrival_s - t0) * scale + 1.0 / self.rate
            i = rng.randrange(replicas)  # which replica's share
            while len(out) < num_requests:
                laps, j = divmod(i, len(self.trace))  # loop the trace when it is too short
                r = self.trace[j]
                out.append(
                    TraceRequest(laps * lap + (r.arrival_s - t0) * scale, r.prompt_tokens, r.output_tokens)
                )
                i += replicas
            return out
        rate = self.rate / replicas
        t = 0.0
        out = []
        for _ in range(num_requests):
            t += rng.expovariate(rate)
            out.append(
                TraceRequest(t, self._length(rng, self.prompt_tokens), self._length(rng, self.output_tokens))
            )
        return out

    def _length(self, rng: random.Random, mean: int) -> int:
        if self.length_cv <= 0:
            return mean
        sigma2 = math.log(1 + self.length_cv**2)
        return max(1, round(rng.lognormvariate(math.log(mean) - sigma2 / 2, math.sqrt(sigma2))))


LENGTH_QUANTILE_Z = 3.09  # max_model_len covers the 99.9th percentile of lognormal token lengths
MAX_MODEL_LEN_STEP = 1024  # rounded up to a multiple of this


def workload_max_model_len(workload: Workload, limit: int) -> int:
    """The ``max_model_len`` a workload needs: its longest request (a trace) or the 99.9th percentile of
    prompt plus output (lognormal lengths), rounded up to 1024 tokens and capped at the model's limit.

    A smaller max_model_len leaves more KV cache per request slot and passes vLLM's start-up check on cards
    where the model's full context would not fit (issue 21)."""
    need: float
    if workload.trace:
        need = max(r.prompt_tokens + r.output_tokens for r in workload.trace)
    else:
        need = _quantile(workload.prompt_tokens, workload.length_cv) + _quantile(
            workload.output_tokens, workload.length_cv
        )
    return min(limit, math.ceil(need / MAX_MODEL_LEN_STEP) * MAX_MODEL_LEN_STEP)


def _quantile(mean: int, cv: float) -> float:
    if cv <= 0:
        return float(mean)
    sigma2 = math.log(1 + cv**2)
    return mean * math.exp(LENGTH_QUANTILE_Z * math.sqrt(sigma2) - sigma2 / 2)


@dataclass(frozen=True)
class LatencyReport:
    """Latency percentiles (ms) and throughput of one instance at one offered load."""

    rate_rps: float  # offered to this instance
    requests: int
    rejected: int  # refused at arrival (prompt longer than max_model_len, or a full queue)
    preemptions: int
    ttft_p50_ms: float
    ttft_p95_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p95_ms: float
    tpot_p99_ms: float
    e2e_p50_ms: float
    e2e_p95_ms: float
    e2e_p99_ms: float
    queue_p50_ms: float
    queue_p95_ms: float
    queue_p99_ms: float
    throughput_rps: float
    output_tokens_per_s: float
    busy_fraction: float
    backlog_at_end: int = 0  # requests still waiting when the arrivals stopped
    in_service_mean_s: float = (
        0.0  # mean time a served request spends admitted (first scheduled to last token)
    )
    # the requests the engine can run at once (max_num_seqs, or its KV cache over a mean request's tokens)
    concurrency_limit: float = math.inf
    # the most requests/s the engine serves at this mix, at its fullest batch (capacity_estimate, no SLO)
    throughput_limit_rps: float = math.inf

    @property
    def concurrency_needed(self) -> float:
        """Requests in service at once in the steady state of this load (Little's law: rate x time in
        service); above ``concurrency_limit`` the engine cannot hold them."""
        return self.rate_rps * self.in_service_mean_s

    @property
    def stable(self) -> bool:
        """The instance keeps up: an overloaded one ends the arrivals with a backlog that grew all along
        (more than 5% of the requests; a steady queue stays far below that), or needs more requests in service
        than it holds. A heavy-tailed mix shows the second before the first: its few long requests are still
        running when a short run's arrivals stop, the short ones have flowed past them, nothing waits yet."""
        return self.backlog_at_end <= max(5, 0.05 * self.requests) and not self.over_limits

    @property
    def over_limits(self) -> bool:
        """The load needs more requests in service than the engine holds, or more than its fullest batch
        serves: overloaded in the steady state however calm a short run looks."""
        return self.concurrency_needed > self.concurrency_limit or self.rate_rps > self.throughput_limit_rps

    def meets(self, slo_ttft_p99_ms: float | None, slo_tpot_p99_ms: float | None) -> bool:
        """Both SLOs (when given) hold at P99, and the instance is not overloaded."""
        ok_ttft = slo_ttft_p99_ms is None or self.ttft_p99_ms <= slo_ttft_p99_ms
        ok_tpot = slo_tpot_p99_ms is None or self.tpot_p99_ms <= slo_tpot_p99_ms
        return ok_ttft and ok_tpot and self.stable

    def missed(self, slo_ttft_p99_ms: float | None, slo_tpot_p99_ms: float | None) -> str:
        """Which SLO this load misses, in words ('' when none)."""
        parts = []
        if slo_ttft_p99_ms is not None and self.ttft_p99_ms > slo_ttft_p99_ms:
            parts.append(f"P99 TTFT {self.ttft_p99_ms:.0f} ms > {slo_ttft_p99_ms:g} ms")
        if slo_tpot_p99_ms is not None and self.tpot_p99_ms > slo_tpot_p99_ms:
            parts.append(f"P99 TPOT {self.tpot_p99_ms:.1f} ms > {slo_tpot_p99_ms:g} ms")
        if self.rate_rps > self.throughput_limit_rps:
            parts.append(
                f"overloaded: {self.rate_rps:.3g} req/s is above the {self.throughput_limit_rps:.3g} its "
                "fullest batch serves"
            )
        elif self.concurrency_needed > self.concurrency_limit:
            parts.append(
                f"overloaded: {self.concurrency_needed:.0f} requests in service at once in the steady state, "
                f"it holds {self.concurrency_limit:.0f}"
            )
        elif not self.stable:
            parts.append(f"overloaded: {self.backlog_at_end} requests still waiting when arrivals stop")
        return ", ".join(parts)


def summarize(
    done: Sequence[CompletedRequest],
    rate_rps: float,
    busy_fraction: float,
    backlog_at_end: int = 0,
    concurrency_limit: float = math.inf,
    throughput_limit_rps: float = math.inf,
) -> LatencyReport:
    served = [r for r in done if not r.rejected]
    ms = 1000.0
    ttft = [r.ttft_s * ms for r in served]
    tpot = [r.tpot_s * ms for r in served if r.output_tokens > 1]
    e2e = [r.e2e_s * ms for r in served]
    queue = [r.queue_s * ms for r in served]
    if served:
        first = min(r.arrival_s for r in served)
        last = max(r.finish_s for r in served)
        span = max(last - first, 1e-9)
    else:
        span = 1.0
    return LatencyReport(
        rate_rps=rate_rps,
        requests=len(done),
        rejected=len(done) - len(served),
        preemptions=sum(r.preemptions for r in served),
        ttft_p50_ms=percentile(ttft, 0.5),
        ttft_p95_ms=percentile(ttft, 0.95),
        ttft_p99_ms=percentile(ttft, 0.99),
        tpot_p50_ms=percentile(tpot, 0.5),
        tpot_p95_ms=percentile(tpot, 0.95),
        tpot_p99_ms=percentile(tpot, 0.99),
        e2e_p50_ms=percentile(e2e, 0.5),
        e2e_p95_ms=percentile(e2e, 0.95),
        e2e_p99_ms=percentile(e2e, 0.99),
        queue_p50_ms=percentile(queue, 0.5),
        queue_p95_ms=percentile(queue, 0.95),
        queue_p99_ms=percentile(queue, 0.99),
        throughput_rps=len(served) / span,
        output_tokens_per_s=sum(r.output_tokens for r in served) / span,
        busy_fraction=busy_fraction,
        backlog_at_end=backlog_at_end,
        in_service_mean_s=sum(r.e2e_s - r.queue_s for r in served) / len(served) if served else 0.0,
        concurrency_limit=concurrency_limit,
        throughput_limit_rps=throughput_limit_rps,
    )


TPOT_MEAN_SHARE = 0.8  # capacity_estimate keeps the mean iteration at this share of a P99 TPOT SLO
TPOT_FLOOR_SHARE = 0.02  # tpot_floor_s counts the prefills this share of requests sees (a P99, with margin)
DEFAULT_REQUESTS = 1000  # per simulated load: enough for a P99 from ten requests, fast enough for a search


def simulate(
    deployment: Deployment,
    workload: Workload,
    *,
    replicas: int = 1,
    num_requests: int = DEFAULT_REQUESTS,
    seed: int = 0,
    max_waiting: int | None = None,
    warmup_fraction: float = 0.1,
    plan: MemoryPlan | None = None,
    perf: PerfModel | None = None,
) -> LatencyReport:
    """Run one instance's share of ``workload`` (1/``replicas`` of it) and report its latency.

    The first ``warmup_fraction`` of requests (an empty engine's unrepresentatively short queues) are left out
    of the percentiles.
    """
    engine = InstanceEngine(deployment, max_waiting=max_waiting, plan=plan, perf=perf)
    reqs = workload.stream(num_requests, seed=seed, replicas=replicas)
    hit = workload.prefix_hit
    for i, r in enumerate(reqs):
        engine.submit(i, r.arrival_s, r.prompt_tokens, r.output_tokens, int(r.prompt_tokens * hit))
    end = reqs[-1].arrival_s
    done = engine.advance(end)
    busy = engine.busy_fraction
    backlog = engine.num_waiting
    done += engine.advance(end + 1e7)  # drain
    skip = int(len(reqs) * warmup_fraction)
    # ignored: the engine's ids are Hashable; this simulator submits ints (the requests' indices)
    kept = [r for r in done if r.request_id >= skip]  # type: ignore[operator]
    n = max(1, len(reqs))
    prompt = sum(r.prompt_tokens for r in reqs) / n
    output = sum(r.output_tokens for r in reqs) / n
    most, _ = capacity_estimate(engine.plan, engine.perf, prompt, output, prefix_hit_share=hit)
    limit = _concurrency_limit(engine.plan, prompt + output / 2)
    return summarize(kept, workload.rate / replicas, busy, backlog, limit, most or math.inf)


def _concurrency_limit(plan: MemoryPlan, held: float) -> float:
    """How many requests the engine holds at once: max_num_seqs, or its KV cache over a mean request's
    tokens mid-decode (``held``: its prompt and half its output; on a hybrid, its windows or state too)."""
    return min(float(plan.max_num_seqs), kv_held_requests(plan, held))


def kv_held_requests(plan: MemoryPlan, held: float) -> float:
    """How many requests of ``held`` tokens each the KV cache holds (on a hybrid, their windows or state
    too), whatever max_num_seqs says."""
    local = plan.local
    if local is not None:
        held += local.local_tokens(round(held))
    return plan.kv_context_tokens / max(held, 1.0)


# -------------------------------------------------------------------------------------------- capacity
def capacity_estimate(
    plan: MemoryPlan,
    perf: PerfModel,
    prompt_tokens: float,
    output_tokens: float,
    slo_tpot_p99_ms: float | None = None,
    max_num_seqs: int | None = None,
    prefix_hit_share: float = 0.0,
) -> tuple[float, int]:
    """Closed-form steady state of one instance: (requests/s it sustains, the batch size it runs at).

    With N sequences decoding, each iteration costs the decode step plus the prefill tokens that arrive
    meanwhile: tau = tau_dec(N) + c_prefill x P x N / O, and throughput is N / (O x tau). N is capped by
    max_num_seqs, the KV cache, and (with a TPOT SLO) the largest batch whose iteration stays under it.
    The simulator checks the result; the search uses it to rank and to pick starting counts.
    """
    p, o = max(prompt_tokens, 1.0), max(output_tokens, 1.0)
    seqs = max_num_seqs or plan.max_num_seqs
    # a hybrid model's local groups hold a window (or a state) per sequence and read it every step, beside
    # the context its full-attention layers hold and read
    local = plan.local
    per_seq_kv = p + o / 2 + 8 + (local.local_tokens(round(p + o)) if local else 0.0)
    n_max = max(1, min(seqs, int(plan.kv_context_tokens / per_seq_kv)))
    window_read = local.read_per_held * local.local_tokens(round(p + o / 2)) if local else 0.0
    c_prefill = _prefill_s_per_token(plan, perf, p, prefix_hit_share)

    def tau(n: int) -> float:
        context = n * (p + o / 2 + window_read)
        a, b = perf.decode_affine(n, context)
        return a + b * context + c_prefill * p * n / o

    n = n_max
    if slo_tpot_p99_ms is not None:
        # P99 TPOT sits above the mean iteration; keep the mean at 80% of the SLO (estimate).
        limit = slo_tpot_p99_ms / 1000.0 * TPOT_MEAN_SHARE
        lo, hi = 1, n_max
        if tau(1) > limit:
            return 0.0, 0
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if tau(mid) <= limit:
                lo = mid
            else:
                hi = mid - 1
        n = lo
    return n / (o * tau(n)), n


def _prefill_s_per_token(plan: MemoryPlan, perf: PerfModel, p: float, prefix_hit_share: float) -> float:
    """Seconds one prompt token of a mean ``p``-token prompt costs to prefill inside a decode batch (its
    cached share skipped)."""
    prefill_flops = perf.linear_flops_per_token + perf.attn_flops(1, p / 2)
    c_prefill = prefill_flops / perf.compute_flops + perf.comm_s_per_token
    return c_prefill * plan.computed_share(prefix_hit_share)  # cached prompt tokens are not computed


def single_stream_step_s(
    plan: MemoryPlan,
    perf: PerfModel,
    prompt_tokens: float,
    output_tokens: float,
    prefix_hit_share: float = 0.0,
) -> tuple[float, float]:
    """The mean iteration of :func:`capacity_estimate` at a batch of one, in its two parts: (the decode step
    of one sequence mid-output, the next request's prefill spread over this one's output tokens). Their sum
    over 80% of a TPOT SLO is why the estimate finds no batch size that meets it."""
    p, o = max(prompt_tokens, 1.0), max(output_tokens, 1.0)
    local = plan.local
    window_read = local.read_per_held * local.local_tokens(round(p + o / 2)) if local else 0.0
    context = p + o / 2 + window_read
    a, b = perf.decode_affine(1, context)
    return a + b * context, _prefill_s_per_token(plan, perf, p, prefix_hit_share) * p / o


def tpot_floor_s(
    plan: MemoryPlan,
    perf: PerfModel,
    prompt_tokens: float,
    output_tokens: float,
    prefix_hit_share: float = 0.0,
    min_rate_rps: float = 0.0,
) -> float:
    """A lower bound on the P99 TPOT of one engine at any load of at least ``min_rate_rps`` Poisson arrivals
    of fixed-length requests (0: any load at all): one request's own decode step at a batch of one, plus the
    prefills that at least one request in fifty sees start while it decodes. Each costs at least its
    prompt's prefill alone less the decode steps it rides in (a mixed iteration is no faster than its chunk
    alone). What no count of instances can go under, where :func:`capacity_estimate`'s mean iteration at a
    batch of one (the next request's prefill always arriving) is a saturated engine's."""
    p, o = max(prompt_tokens, 1.0), max(output_tokens, 1.0)
    decode_s, _ = single_stream_step_s(plan, perf, p, o, prefix_hit_share)
    if min_rate_rps <= 0 or o < 2:
        return decode_s
    computed = max(1, math.floor(p * plan.computed_share(prefix_hit_share)))
    budget = plan.max_num_batched_tokens
    prefill_s = perf.prefill_s(computed, budget)
    extra_s = max(0.0, prefill_s - math.ceil(computed / budget) * perf.decode_step_s(1, p + o))
    # a prefill that starts in the window ends inside this request's decode: the window is its decode less
    # one prefill, at the shortest step (the prompt's context alone)
    window_s = max(0.0, (o - 1) * perf.decode_step_s(1, p) - prefill_s)
    return decode_s + _poisson_quantile(min_rate_rps * window_s, TPOT_FLOOR_SHARE) * extra_s / (o - 1)


def _poisson_quantile(mean: float, tail: float) -> int:
    """The largest k with P(Poisson(mean) >= k) >= ``tail``."""
    k, term, below = 0, math.exp(-mean), 0.0  # below: P(X < k)
    while 1.0 - below - term >= tail:  # P(X >= k + 1)
        below += term
        k += 1
        term *= mean / k
    return k


# ----------------------------------------------------------------------------------------------- knee
@dataclass(frozen=True)
class KneeSweep:
    """Latency against offered load for one instance, and the knee of that curve."""

    points: tuple[LatencyReport, ...]
    knee_index: int
    metric: str = "e2e_p99_ms"
    notes: tuple[str, ...] = field(default=())

    @property
    def knee(self) -> LatencyReport:
        return self.points[self.knee_index]

    @property
    def knee_rate_rps(self) -> float:
        return self.knee.rate_rps


KNEE_TOLERANCE = 0.5  # a P99 more than 1.5x its low-load linear trend counts as super-linear


def find_knee(xs: Sequence[float], ys: Sequence[float], tolerance: float = KNEE_TOLERANCE) -> int:
    """Index of the knee: the last point before P99 leaves its linear trend (fitted by least squares on the
    lowest quarter of the loads, at least three points) by more than ``tolerance`` of the trend."""
    n = len(xs)
    if n < 4:
        return n - 1
    k = max(3, n // 4)
    mx, my = sum(xs[:k]) / k, sum(ys[:k]) / k
    sxx = sum((x - mx) ** 2 for x in xs[:k])
    slope = sum((x - mx) * (y - my) for x, y in zip(xs[:k], ys[:k], strict=True)) / sxx if sxx > 0 else 0.0
    slope = max(slope, 0.0)  # latency does not fall with load; noise must not tilt the trend down
    knee = 0
    for i in range(n):
        trend = my + slope * (xs[i] - mx)
        if ys[i] > trend * (1.0 + tolerance):
            break
        knee = i
    return knee


def knee_sweep(
    deployment: Deployment,
    workload: Workload,
    *,
    rates: Sequence[float] | None = None,
    points: int = 16,
    num_requests: int = DEFAULT_REQUESTS,
    seed: int = 0,
    plan: MemoryPlan | None = None,
    perf: PerfModel | None = None,
) -> KneeSweep:
    """Simulate one instance at a range of loads (default: 5% to 130% of its estimated capacity) and find the
    knee of P99 end-to-end latency against load."""
    engine = InstanceEngine(deployment, plan=plan, perf=perf)
    plan, perf = engine.plan, engine.perf
    if rates is None:
        p, o = workload.mean_prompt_tokens, workload.mean_output_tokens
        cap, _ = capacity_estimate(plan, perf, p, o, prefix_hit_share=workload.prefix_hit)
        rates = [cap * (0.05 + 1.25 * i / (points - 1)) for i in range(points)]
    reports = tuple(
        simulate(deployment, workload.with_qps(r), num_requests=num_requests, seed=seed, plan=plan, perf=perf)
        for r in rates
    )
    idx = find_knee([r.rate_rps for r in reports], [r.e2e_p99_ms for r in reports])
    return KneeSweep(reports, idx)
