"""Latency under load: workloads, percentiles, the single-instance simulator and the knee sweep."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sizing import Deployment, SizingInputError, find_gpu, find_model
from sizing.latency import (
    TraceRequest,
    Workload,
    capacity_estimate,
    find_knee,
    knee_sweep,
    percentile,
    simulate,
    tpot_floor_s,
)
from sizing.memory import plan_memory
from sizing.perf import perf_for

DEP = Deployment(find_model("Qwen2.5-7B"), find_gpu("A10"), max_model_len=8192)


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=50), st.floats(0, 1))
def test_a_percentile_lies_between_the_smallest_and_largest_value(values, q):
    assert min(values) <= percentile(values, q) <= max(values)


def test_percentiles_interpolate_like_numpy():
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([10, 20], 0.99) == pytest.approx(19.9)


def test_poisson_arrivals_come_at_the_asked_rate():
    reqs = Workload(qps=4.0).stream(4000, seed=1)
    assert len(reqs) / reqs[-1].arrival_s == pytest.approx(4.0, rel=0.05)


def test_lognormal_lengths_keep_the_mean():
    reqs = Workload(qps=1.0, prompt_tokens=800, output_tokens=100, length_cv=1.0).stream(6000, seed=2)
    assert sum(r.prompt_tokens for r in reqs) / len(reqs) == pytest.approx(800, rel=0.06)
    assert len({r.prompt_tokens for r in reqs}) > 100


def _trace(n=100, gap=0.5):
    return tuple(TraceRequest(i * gap, 100 + i, 10 + i) for i in range(n))


def test_a_trace_keeps_its_own_rate_and_lengths_without_qps():
    wl = Workload(trace=_trace())
    assert wl.rate == pytest.approx(2.0)
    reqs = wl.stream(50)
    assert [r.prompt_tokens for r in reqs[:3]] == [100, 101, 102]


def test_qps_rescales_a_traces_clock():
    reqs = Workload(qps=8.0, trace=_trace()).stream(99)
    assert (len(reqs) - 1) / (reqs[-1].arrival_s - reqs[0].arrival_s) == pytest.approx(8.0, rel=1e-6)


def test_each_of_n_replicas_gets_every_nth_trace_request():
    reqs = Workload(trace=_trace()).stream(20, seed=0, replicas=4)
    gaps = {round(b.arrival_s - a.arrival_s, 9) for a, b in zip(reqs, reqs[1:], strict=False)}
    assert gaps == {2.0}


def test_a_short_trace_is_looped_to_give_enough_requests():
    reqs = Workload(trace=_trace(10)).stream(25)
    assert len(reqs) == 25 and all(b.arrival_s > a.arrival_s for a, b in zip(reqs, reqs[1:], strict=False))


def test_a_workload_without_rate_is_refused_when_a_rate_is_needed():
    with pytest.raises(SizingInputError, match="qps"):
        _ = Workload().rate


@pytest.mark.parametrize("cv", [float("nan"), float("inf"), -0.1])
def test_a_workload_refuses_a_length_cv_that_is_not_a_finite_non_negative_number(cv):
    with pytest.raises(SizingInputError, match="length cv"):
        Workload(qps=1.0, length_cv=cv)


def test_latency_grows_with_load():
    light = simulate(DEP, Workload(qps=0.5), num_requests=400)
    heavy = simulate(DEP, Workload(qps=3.0), num_requests=400)
    assert heavy.ttft_p99_ms > light.ttft_p99_ms
    assert heavy.tpot_p50_ms > light.tpot_p50_ms


def test_percentiles_are_ordered():
    r = simulate(DEP, Workload(qps=2.0, length_cv=0.8), num_requests=400)
    assert r.ttft_p50_ms <= r.ttft_p95_ms <= r.ttft_p99_ms
    assert r.e2e_p50_ms <= r.e2e_p99_ms and r.queue_p50_ms <= r.queue_p99_ms
    assert r.ttft_p99_ms <= r.e2e_p99_ms


def test_throughput_follows_the_offered_load_below_saturation():
    r = simulate(DEP, Workload(qps=1.0), num_requests=600)
    assert r.throughput_rps == pytest.approx(1.0, rel=0.15)


def test_the_closed_form_capacity_is_close_to_the_simulated_saturation():
    from sizing import InstanceEngine

    engine = InstanceEngine(DEP)
    cap, _ = capacity_estimate(engine.plan, engine.perf, 1000, 200)
    saturated = simulate(DEP, Workload(qps=cap * 3), num_requests=800)
    assert saturated.throughput_rps == pytest.approx(cap, rel=0.3)


def test_a_tpot_slo_lowers_the_estimated_capacity():
    from sizing import InstanceEngine

    engine = InstanceEngine(DEP)
    free, n_free = capacity_estimate(engine.plan, engine.perf, 1000, 200)
    bound, n_bound = capacity_estimate(engine.plan, engine.perf, 1000, 200, slo_tpot_p99_ms=50)
    assert bound < free and n_bound < n_free


def test_the_knee_of_a_hockey_stick_is_where_it_bends():
    xs = list(range(10))
    ys = [10 + x for x in xs[:7]] + [40, 120, 400]
    assert find_knee(xs, ys) == 6


def test_a_straight_line_has_its_knee_at_the_end():
    assert find_knee([0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6]) == 5


def test_the_knee_sweep_finds_a_knee_before_latency_explodes():
    sweep = knee_sweep(DEP, Workload(prompt_tokens=1000, output_tokens=200), points=10, num_requests=300)
    rates = [p.rate_rps for p in sweep.points]
    assert rates == sorted(rates)
    assert 0 < sweep.knee_index < len(rates) - 1
    k, pts = sweep.knee_index, sweep.points
    slope_before = (pts[k].e2e_p99_ms - pts[0].e2e_p99_ms) / (pts[k].rate_rps - pts[0].rate_rps)
    slope_after = (pts[k + 1].e2e_p99_ms - pts[k].e2e_p99_ms) / (pts[k + 1].rate_rps - pts[k].rate_rps)
    assert slope_after > 1.5 * slope_before


def test_an_overloaded_instance_is_flagged_even_without_slos():
    from sizing import InstanceEngine

    engine = InstanceEngine(DEP)
    cap, _ = capacity_estimate(engine.plan, engine.perf, 1000, 200)
    over = simulate(DEP, Workload(qps=cap * 1.5), num_requests=600)
    under = simulate(DEP, Workload(qps=cap * 0.5), num_requests=600)
    assert not over.stable and not over.meets(None, None) and "overloaded" in over.missed(None, None)
    assert under.stable and under.meets(None, None)


def test_a_heavy_tailed_overload_is_flagged_though_a_short_run_drains_calm():
    # Qwen2.5-7B FP8 on one L20 at 50 req/s of 1,000 / 200 tokens, lengths lognormal with CV 10, prefix hit
    # 0.99: 1,000 requests end with 2 waiting and a 51 ms P99 TTFT (the few long ones still running, the
    # short ones past them), 20,000 with 6,000 waiting; the engine's fullest batch serves about 46 req/s
    dep = Deployment(find_model("Qwen2.5-7B"), find_gpu("L20"), dtype="fp8")
    wl = Workload(qps=50, prompt_tokens=1000, output_tokens=200, length_cv=10, prefix_hit=0.99)
    short = simulate(dep, wl, num_requests=1000)
    assert short.backlog_at_end <= 5 and short.ttft_p99_ms < 500  # what the short run alone shows
    assert short.throughput_limit_rps < 50 and not short.stable
    assert not short.meets(500, 50) and "fullest batch" in short.missed(500, 50)
    calm = simulate(
        dep, Workload(qps=25, prompt_tokens=1000, output_tokens=200, length_cv=10, prefix_hit=0.99)
    )
    assert calm.stable and not calm.over_limits


def test_in_service_concurrency_beyond_what_the_engine_holds_is_an_overload():
    report = simulate(DEP, Workload(qps=0.5), num_requests=300)
    assert report.stable
    assert not replace(report, concurrency_limit=report.concurrency_needed * 0.9).stable
    assert "requests in service at once" in replace(report, concurrency_limit=1.0).missed(None, None)


@pytest.mark.parametrize(
    ("gpu", "dtype", "prompt", "output", "rate"),
    [
        ("L20", "bf16", 1000, 200, 0.01),
        ("L20", "bf16", 1000, 200, 0.2),
        ("A10", "awq", 8000, 200, 0.05),
        ("A10", "awq", 1000, 50, 0.05),
    ],
)
def test_the_tpot_floor_is_under_the_simulated_p99_at_its_load(gpu, dtype, prompt, output, rate):
    # The search refuses a TPOT SLO in closed form only over this floor, so it must never exceed what the
    # engine gives: at a near-idle load (a prefill lands in a few requests' decode) and a busier one.
    dep = Deployment(find_model("Qwen2.5-7B"), find_gpu(gpu), dtype=dtype, max_model_len=16384)
    plan = plan_memory(dep)
    perf = perf_for(dep, plan)
    load = Workload(qps=rate, prompt_tokens=prompt, output_tokens=output)
    sim = simulate(dep, load, plan=plan, perf=perf)
    floor_ms = tpot_floor_s(plan, perf, prompt, output, min_rate_rps=rate) * 1000
    alone_ms = tpot_floor_s(plan, perf, prompt, output) * 1000  # one request's own decode step
    assert alone_ms <= floor_ms <= sim.tpot_p99_ms
