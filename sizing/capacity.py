"""The request rate one instance serves within its SLOs at a token mix: the capacity test of ``fleet size``.

Poisson arrivals at a rate, prompt and output lengths lognormal around the mix's means (``length_cv``: real
traces are heavy-tailed, and a fixed length would promise a P99 TTFT no real mix gets), simulated with the
stepwise engine; the highest rate whose P99 TTFT (and TPOT) meet the SLOs, by bisection on a geometric grid.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from sizing.latency import LatencyReport, Workload, simulate
from sizing.memory import Deployment, plan_memory
from sizing.perf import perf_for

DEFAULT_LENGTH_CV = 1.0
CAPACITY_REQUESTS = 1500  # simulated requests per probe: enough for a P99, fast enough to tabulate online


def largest_passing(
    passes: Callable[[float], bool], lo: float, hi: float, *, iterations: int, within: float = 1.03
) -> float:
    """Bisection on a geometric grid: the largest value in [lo, hi] found to pass (``lo`` is assumed to),
    to within a factor ``within``, in at most ``iterations`` probes. The capacity tests' search: a rate
    either meets the SLOs or does not, and the answer matters to a few percent, not to a request."""
    for _ in range(iterations):
        mid = math.sqrt(lo * hi)
        if passes(mid):
            lo = mid
        else:
            hi = mid
        if hi / lo < within:
            break
    return lo


def _probe(
    deployment: Deployment,
    prompt_tokens: float,
    output_tokens: float,
    length_cv: float,
    seed: int,
    num_requests: int,
    prefix_hit: float = 0.0,
) -> Callable[[float], LatencyReport] | None:
    """The instance's latency report at a Poisson rate for this mix; None when the model does not fit."""
    plan = plan_memory(deployment)
    if not plan.fits:
        return None
    perf = perf_for(deployment, plan)  # a hybrid model reads its full-attention layers per context token
    p = max(1, round(prompt_tokens))
    o = max(1, round(output_tokens))
    if deployment.max_model_len:
        p = min(p, max(1, deployment.max_model_len - o - 1))

    def report(rate: float) -> LatencyReport:
        wl = Workload(qps=rate, prompt_tokens=p, output_tokens=o, length_cv=length_cv, prefix_hit=prefix_hit)
        return simulate(deployment, wl, num_requests=num_requests, seed=seed, plan=plan, perf=perf)

    return report


def capacity_rps(
    deployment: Deployment,
    prompt_tokens: float,
    output_tokens: float,
    ttft_p99_ms: float | None,
    tpot_p99_ms: float | None = None,
    *,
    length_cv: float = DEFAULT_LENGTH_CV,
    seed: int = 0,
    iterations: int = 10,
    num_requests: int = CAPACITY_REQUESTS,
    prefix_hit: float = 0.0,
) -> float:
    """Highest Poisson rate (req/s) one instance of ``deployment`` serves within the SLOs; 0 if none.
    ``prefix_hit``: the share of each prompt found in the prefix cache (``Workload.prefix_hit``)."""
    report = _probe(deployment, prompt_tokens, output_tokens, length_cv, seed, num_requests, prefix_hit)
    if report is None:
        return 0.0

    def meets(rate: float) -> bool:
        return report(rate).meets(ttft_p99_ms, tpot_p99_ms)

    lo, hi = 0.01, 256.0
    if not meets(lo):
        return 0.0
    return largest_passing(meets, lo, hi, iterations=iterations)


def in_service_curve(
    deployment: Deployment,
    prompt_tokens: float,
    output_tokens: float,
    rates: Sequence[float],
    *,
    length_cv: float = DEFAULT_LENGTH_CV,
    seed: int = 0,
    num_requests: int = CAPACITY_REQUESTS,
    prefix_hit: float = 0.0,
) -> tuple[tuple[float, float], ...]:
    """(rate, mean seconds a request spends admitted) at each Poisson rate: by Little's law an instance
    serving ``rate`` holds ``rate x seconds`` requests running. What the online correction compares the
    fleet's running requests with (an engine slower than the model holds more at the same rate)."""
    report = _probe(deployment, prompt_tokens, output_tokens, length_cv, seed, num_requests, prefix_hit)
    if report is None:
        return ()
    return tuple((r, report(r).in_service_mean_s) for r in rates if r > 0)
