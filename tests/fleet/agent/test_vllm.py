"""vLLM /metrics: parsing, windowed percentiles from cumulative buckets, counter resets, vLLM down."""

from __future__ import annotations

import math

import pytest

from fleet.agent.vllm import (
    VllmCollector,
    bucket_delta,
    counter_delta,
    histogram_quantile,
)

INF = math.inf


def test_quantile_interpolates_inside_the_bucket():
    # 100 observations: 50 in (0, 0.1], 50 in (0.1, 0.2]; the median sits at the 0.1 boundary,
    # the 99th percentile 98% of the way through the second bucket.
    buckets = {0.1: 50.0, 0.2: 100.0, INF: 100.0}
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.1 + 0.1 * 49 / 50)


def test_quantile_in_the_inf_bucket_answers_the_largest_finite_bound():
    assert histogram_quantile(0.99, {0.5: 1.0, 1.0: 2.0, INF: 10.0}) == 1.0


def test_quantile_of_an_empty_window_is_none():
    assert histogram_quantile(0.99, {0.1: 0.0, INF: 0.0}) is None
    assert histogram_quantile(0.99, {}) is None


def test_bucket_delta_subtracts_the_previous_scrape():
    assert bucket_delta({0.1: 15.0, INF: 30.0}, {0.1: 10.0, INF: 20.0}) == {0.1: 5.0, INF: 10.0}


def test_bucket_delta_after_a_reset_is_the_new_cumulative():
    assert bucket_delta({0.1: 2.0, INF: 3.0}, {0.1: 10.0, INF: 20.0}) == {0.1: 2.0, INF: 3.0}


def test_counter_delta_handles_reset():
    assert counter_delta(130.0, 100.0) == 30.0
    assert counter_delta(7.0, 100.0) == 7.0
    assert counter_delta(7.0, None) is None


def test_first_scrape_has_gauges_but_no_window(vllm_server):
    vllm_server.state.waiting, vllm_server.state.running = 7, 12
    vllm_server.state.finish_requests(100, ttft_s=0.3, tpot_s=0.02, e2e_s=2.2)
    reading = VllmCollector(vllm_server.url).read(monotonic_s=0.0)
    assert reading.up
    assert (reading.num_requests_waiting, reading.num_requests_running) == (7, 12)
    assert reading.window_s is None and reading.ttft.p99_ms is None and reading.request_rate_per_s is None


def test_percentiles_cover_only_the_window(vllm_server):
    state = vllm_server.state
    collector = VllmCollector(vllm_server.url)
    state.finish_requests(1000, ttft_s=4.0, tpot_s=0.5, e2e_s=45.0)  # a slow past, before the window
    collector.read(monotonic_s=0.0)
    state.finish_requests(100, ttft_s=0.03, tpot_s=0.02, e2e_s=0.9)
    reading = collector.read(monotonic_s=15.0)
    assert reading.window_s == 15.0
    # Every request of the window had TTFT in (0.02, 0.04]: P50 and P99 lie in that bucket, in ms.
    assert 20.0 < reading.ttft.p50_ms <= reading.ttft.p99_ms <= 40.0
    assert 10.0 < reading.tpot.p99_ms <= 25.0
    assert 800.0 < reading.e2e.p95_ms <= reading.e2e.p99_ms <= 1000.0
    assert reading.request_rate_per_s == pytest.approx(100 / 15)
    assert reading.generation_tokens_per_s == pytest.approx(100 * 100 / 15)


def test_p99_sees_the_slow_tail(vllm_server):
    state = vllm_server.state
    collector = VllmCollector(vllm_server.url)
    collector.read(monotonic_s=0.0)
    state.finish_requests(95, ttft_s=0.05, tpot_s=0.02, e2e_s=1.0)
    state.finish_requests(5, ttft_s=3.0, tpot_s=0.02, e2e_s=1.0)
    reading = collector.read(monotonic_s=15.0)
    assert reading.ttft.p50_ms <= 60.0
    assert 2500.0 < reading.ttft.p99_ms <= 5000.0


def test_vllm_restart_between_scrapes_counts_from_zero(vllm_server):
    state = vllm_server.state
    collector = VllmCollector(vllm_server.url)
    state.finish_requests(5000, ttft_s=2.0, tpot_s=0.2, e2e_s=30.0)
    collector.read(monotonic_s=0.0)
    state.restart()
    state.finish_requests(30, ttft_s=0.03, tpot_s=0.02, e2e_s=0.9)
    reading = collector.read(monotonic_s=15.0)
    assert reading.request_rate_per_s == pytest.approx(30 / 15)
    assert reading.ttft.p99_ms <= 40.0


def test_no_requests_in_the_window_publishes_no_latency(vllm_server):
    collector = VllmCollector(vllm_server.url)
    vllm_server.state.finish_requests(10, ttft_s=0.03, tpot_s=0.02, e2e_s=0.9)
    collector.read(monotonic_s=0.0)
    reading = collector.read(monotonic_s=15.0)
    assert reading.ttft.p99_ms is None and reading.request_rate_per_s == 0.0


def test_kv_cache_fraction_becomes_percent_under_either_name(vllm_server):
    for name in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
        vllm_server.state.kv_name, vllm_server.state.kv_fraction = name, 0.87
        assert VllmCollector(vllm_server.url).read(0.0).kv_cache_usage_pct == pytest.approx(87.0)


def test_inter_token_latency_is_used_when_time_per_output_token_is_absent(vllm_server):
    state = vllm_server.state
    state.tpot_name = "vllm:inter_token_latency_seconds"
    collector = VllmCollector(vllm_server.url)
    collector.read(0.0)
    state.finish_requests(10, ttft_s=0.03, tpot_s=0.06, e2e_s=0.9)
    assert 50.0 < collector.read(15.0).tpot.p99_ms <= 75.0


def test_vllm_down_is_reported(closed_port_url):
    reading = VllmCollector(closed_port_url).read(0.0)
    assert not reading.up and reading.error


def test_http_error_is_reported_as_down(vllm_server):
    vllm_server.state.status = 503
    reading = VllmCollector(vllm_server.url).read(0.0)
    assert not reading.up and "503" in reading.error


def test_a_page_without_vllm_metrics_is_down(vllm_server):
    vllm_server.state.body_override = (
        "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n"
    )
    reading = VllmCollector(vllm_server.url).read(0.0)
    assert not reading.up and "vllm:num_requests_waiting" in reading.error


def test_garbage_is_down_not_a_crash(vllm_server):
    vllm_server.state.body_override = "<html>not prometheus</html>\n{{{"
    assert not VllmCollector(vllm_server.url).read(0.0).up


def test_window_survives_vllm_being_down_for_a_period(vllm_server, closed_port_url):
    state = vllm_server.state
    collector = VllmCollector(vllm_server.url)
    collector.read(0.0)
    state.status = 503
    assert not collector.read(15.0).up
    state.status = 200
    state.finish_requests(60, ttft_s=0.03, tpot_s=0.02, e2e_s=0.9)
    reading = collector.read(30.0)
    assert reading.window_s == 30.0 and reading.request_rate_per_s == pytest.approx(2.0)


def test_demand_is_arrivals_and_tokens_per_request_over_the_window(vllm_server):
    from fleet.agent.vllm import VllmCollector

    collector = VllmCollector(vllm_server.url)
    vllm_server.state.running, vllm_server.state.waiting = 4, 0
    collector.read(0.0)
    # in 15 s: 30 finished (600 prompt and 120 output tokens each) and in flight grew from 4 to 10
    vllm_server.state.finish_requests(
        30, ttft_s=0.2, tpot_s=0.02, e2e_s=1.0, tokens_each=120, prompt_each=600
    )
    vllm_server.state.running, vllm_server.state.waiting = 7, 3
    r = collector.read(15.0)
    assert r.arrival_rate_per_s == pytest.approx((30 + 6) / 15)
    assert r.prompt_tokens_per_request == pytest.approx(600)
    assert r.output_tokens_per_request == pytest.approx(120)


def test_demand_after_a_restart_counts_from_zero(vllm_server):
    from fleet.agent.vllm import VllmCollector

    collector = VllmCollector(vllm_server.url)
    vllm_server.state.finish_requests(100, ttft_s=0.2, tpot_s=0.02, e2e_s=1.0)
    vllm_server.state.running = 8
    collector.read(0.0)
    vllm_server.state.restart()
    vllm_server.state.finish_requests(10, ttft_s=0.2, tpot_s=0.02, e2e_s=1.0)
    vllm_server.state.running = 2
    r = collector.read(10.0)
    # everything since the restart is the window's: 10 finished + 2 in flight (the 8 before were lost)
    assert r.arrival_rate_per_s == pytest.approx(12 / 10)


def test_an_engine_with_work_in_flight_and_no_progress_for_a_minute_reads_down(vllm_server):
    """vLLM's API server answers while its engine hangs (an NCCL collective that never returns): requests
    stay running and no token is computed. A minute of that is reported as down; any progress clears it."""
    from fleet.agent.vllm import STALL_S, VllmCollector

    collector = VllmCollector(vllm_server.url)
    vllm_server.state.running, vllm_server.state.waiting = 3, 1
    collector.read(0.0)
    readings = {t: collector.read(t) for t in (15.0, 30.0, 45.0)}
    assert all(r.up for r in readings.values()) and readings[45.0].stalled_s == 45.0
    vllm_server.state.waiting = 9  # arrivals pile up behind it
    r = collector.read(STALL_S + 15.0)
    assert not r.up and "stalled" in (r.error or "") and r.stalled_s == STALL_S + 15.0
    assert r.num_requests_waiting == 9  # what it reports is still published
    vllm_server.state.prompt_tokens += 2000  # a prefill step: it moves again
    r = collector.read(STALL_S + 30.0)
    assert r.up and r.stalled_s is None


def test_an_idle_engine_or_one_finishing_requests_never_reads_stalled(vllm_server):
    from fleet.agent.vllm import VllmCollector

    collector = VllmCollector(vllm_server.url)
    collector.read(0.0)
    assert all(collector.read(15.0 * k).up for k in range(1, 8))  # nothing running: idle, not stalled
    vllm_server.state.running = 4
    for k in range(8, 16):
        vllm_server.state.finish_requests(1, ttft_s=0.2, tpot_s=0.02, e2e_s=1.0)
        r = collector.read(15.0 * k)
        assert r.up and r.stalled_s is None


def test_the_prefix_cache_hit_ratio_is_the_windows_hits_over_its_lookups(vllm_server):
    from fleet.agent.vllm import VllmCollector

    state = vllm_server.state
    collector = VllmCollector(vllm_server.url)
    assert collector.read(0.0).prefix_cache_hit_ratio is None  # not exported: nothing published
    state.prefix_queries, state.prefix_hits = 10_000.0, 2_000.0
    collector.read(15.0)
    state.prefix_queries, state.prefix_hits = 18_000.0, 8_000.0  # 6,000 of 8,000 looked up in the window
    assert collector.read(30.0).prefix_cache_hit_ratio == pytest.approx(0.75)
    assert collector.read(45.0).prefix_cache_hit_ratio is None  # no lookup in the window: unknown, not 0
    state.restart()
    state.prefix_queries, state.prefix_hits = 1_000.0, 100.0
    assert collector.read(60.0).prefix_cache_hit_ratio == pytest.approx(0.1)  # counted from the restart
