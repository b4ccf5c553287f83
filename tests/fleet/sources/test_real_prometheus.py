"""PrometheusSource against a real Prometheus scraping a fake DCGM exporter and a fake vLLM every second.

Each test owns its instance ids, so tests share one Prometheus (session fixture) without seeing each other's
series. Values are set on the exporters, then read back through the source once Prometheus has scraped them
(polls bounded in time, never timing assertions).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from fleet.cloud.errors import InvalidRequest
from fleet.service.observe import combine
from fleet.service.sources import PrometheusSource
from policies import metrics as pm

from .conftest import E2E_BUCKETS_S, TPOT_BUCKETS_S, TTFT_BUCKETS_S, expected_quantile_ms, wait_for

SW_THERMAL, POWER_CAP = int(pm.ThrottleReason.SW_THERMAL), int(pm.ThrottleReason.SW_POWER_CAP)


@pytest.fixture(scope="module", autouse=True)
def seeded(exporters, real_prometheus):
    """Every test's exporter values, set at once so that one scrape serves them all."""
    exporters.set_gpu("i-temp", 0, DCGM_FI_DEV_GPU_TEMP=61)
    exporters.set_gpu("i-temp", 1, DCGM_FI_DEV_GPU_TEMP=91)
    exporters.set_gpu("i-thr", 0, DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=SW_THERMAL)
    exporters.set_gpu("i-thr", 1, DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=POWER_CAP)
    exporters.set_gpu("i-evt", 0, DCGM_FI_DEV_CLOCKS_EVENT_REASONS=int(pm.ThrottleReason.HW_SLOWDOWN))
    exporters.set_gpu("i-bw", 0, DCGM_FI_PROF_DRAM_ACTIVE=0.5, DCGM_FI_DEV_MEM_COPY_UTIL=20)
    exporters.set_gpu("i-bw2", 0, DCGM_FI_DEV_MEM_COPY_UTIL=30)
    exporters.set_gpu("i-fb", 0, DCGM_FI_DEV_FB_USED=18000, DCGM_FI_DEV_FB_FREE=6000)
    exporters.set_gpu("i-g", 0, DCGM_FI_DEV_GPU_UTIL=87, DCGM_FI_DEV_POWER_USAGE=143.5)
    exporters.set_gpu("i-clk", 0, DCGM_FI_DEV_SM_CLOCK=1500, DCGM_FI_DEV_MAX_SM_CLOCK=1500)
    exporters.set_gpu("i-clk", 1, DCGM_FI_DEV_SM_CLOCK=1200, DCGM_FI_DEV_MAX_SM_CLOCK=1500)
    exporters.set_gpu("i-clk2", 0, DCGM_FI_DEV_SM_CLOCK=1200)
    exporters.set_vllm("i-q", waiting=7, running=12, kv_usage=0.42)
    exporters.set_vllm("i-kv", kv_usage=0.3, kv_metric="vllm:gpu_cache_usage_perc")
    exporters.set_vllm("i-lat", rate_per_s=20.0, ttft_s=0.2, tpot_s=0.04, e2e_s=1.2)
    exporters.set_vllm("i-idle", rate_per_s=0.0)
    exporters.set_gpu("i-ts", 0, DCGM_FI_DEV_GPU_TEMP=50)
    exporters.set_vllm("i-gone", waiting=3)
    exporters.set_vllm("i-busy", running=4, rate_per_s=5.0)
    exporters.set_vllm("i-hung", running=3, rate_per_s=5.0)
    exporters.set_vllm("i-rest", rate_per_s=0.0)
    exporters.set_gpu("i-nov", 0, DCGM_FI_DEV_GPU_TEMP=40)
    for iid in ("i-dp-hung", "i-dp-busy", "i-dp-idle"):  # two data-parallel engines each
        exporters.set_vllm(iid, engine="0", running=4, rate_per_s=5.0)
    exporters.set_vllm("i-dp-hung", engine="1", running=3, rate_per_s=5.0)
    exporters.set_vllm("i-dp-busy", engine="1", running=2, rate_per_s=3.0)
    exporters.set_vllm("i-dp-idle", engine="1", rate_per_s=0.0)


@pytest.fixture
def source(real_prometheus):
    return PrometheusSource(real_prometheus.url)


def _read(source, canonical, iid, timeout_s=15.0):
    """The instance's combined sample once Prometheus has it (as the Observer combines per-GPU points)."""
    points = wait_for(
        lambda: [p for p in source.read_last(canonical, [iid]) if p.instance_id == iid],
        timeout_s,
        f"{canonical} of {iid} in Prometheus",
    )
    return combine(canonical, points)


def _seen(real_prometheus, promql):
    wait_for(lambda: real_prometheus.has(promql), 15, f"Prometheus to scrape {promql}")


def test_hottest_gpu_is_the_instance_temperature(exporters, source):
    assert _read(source, pm.GPU_TEMPERATURE_C, "i-temp").value == 91


def test_throttle_reasons_are_ored_over_gpus(exporters, source):
    assert int(_read(source, pm.GPU_THROTTLE_REASONS, "i-thr").value) == SW_THERMAL | POWER_CAP


def test_newer_clocks_event_reasons_name_is_read(exporters, source):
    assert int(_read(source, pm.GPU_THROTTLE_REASONS, "i-evt").value) == int(pm.ThrottleReason.HW_SLOWDOWN)


def test_dram_active_is_preferred_to_mem_copy_util(exporters, source):
    assert _read(source, pm.GPU_MEM_BW_UTIL_PCT, "i-bw").value == pytest.approx(50)


def test_mem_copy_util_is_the_fallback_without_profiling_metrics(exporters, source):
    assert _read(source, pm.GPU_MEM_BW_UTIL_PCT, "i-bw2").value == pytest.approx(30)


def test_memory_used_percent_from_used_and_free(exporters, source):
    assert _read(source, pm.GPU_MEM_USED_PCT, "i-fb").value == pytest.approx(75)


def test_gauges_util_and_power_read_through(exporters, source):
    assert _read(source, pm.GPU_UTIL_PCT, "i-g").value == 87
    assert _read(source, pm.GPU_POWER_W, "i-g").value == pytest.approx(143.5)


def test_sm_clock_ratio_of_the_slowest_gpu(exporters, source):
    assert _read(source, pm.GPU_SM_CLOCK_RATIO, "i-clk").value == pytest.approx(0.8)


def test_sm_clock_ratio_without_max_clock_is_unknown(exporters, source, real_prometheus):
    _seen(real_prometheus, 'DCGM_FI_DEV_SM_CLOCK{instance_id="i-clk2"}')
    assert source.read_last(pm.GPU_SM_CLOCK_RATIO, ["i-clk2"]) == []


def test_vllm_queue_running_and_kv_cache(exporters, source):
    assert _read(source, pm.QUEUE_WAITING, "i-q").value == 7
    assert _read(source, pm.REQUESTS_RUNNING, "i-q").value == 12
    assert _read(source, pm.KV_CACHE_USAGE_PCT, "i-q").value == pytest.approx(42)


def test_older_gpu_cache_usage_name_is_read(exporters, source):
    assert _read(source, pm.KV_CACHE_USAGE_PCT, "i-kv").value == pytest.approx(30)


def _up_becomes(source, iid, value, what):
    wait_for(
        lambda: [p for p in source.read_last(pm.VLLM_UP, [iid]) if p.value == value],
        20,
        f"vllm_up of {iid} to read {value}: {what}",
    )


def test_vllm_up_reads_progress_and_a_stall(exporters, real_prometheus):
    source = PrometheusSource(real_prometheus.url, rate_window="5s")  # a stall window of 5 s, not a minute
    _up_becomes(source, "i-busy", 1, "serving")
    _up_becomes(source, "i-rest", 1, "idle: nothing in flight is no stall")
    _up_becomes(source, "i-nov", 0, "only its GPUs are scraped")
    _up_becomes(source, "i-hung", 1, "serving")
    exporters.set_vllm("i-hung", rate_per_s=0.0)  # requests stay in flight, nothing finishes or moves
    _up_becomes(source, "i-hung", 0, "stalled")
    assert [p.value for p in source.read_last(pm.VLLM_UP, ["i-busy"])] == [1]
    exporters.set_vllm("i-hung", rate_per_s=5.0)
    _up_becomes(source, "i-hung", 1, "moving again")


def test_vllm_up_reads_a_stall_of_one_data_parallel_engine_beside_a_busy_one(exporters, real_prometheus):
    source = PrometheusSource(real_prometheus.url, rate_window="5s")
    _up_becomes(source, "i-dp-busy", 1, "both engines serving")
    _up_becomes(source, "i-dp-idle", 1, "one engine serving, the other idle: nothing in flight is no stall")
    _up_becomes(source, "i-dp-hung", 1, "both engines serving")
    # engine 1 keeps its requests and stops moving; engine 0 serves on, so the server's sums still move
    exporters.set_vllm("i-dp-hung", engine="1", rate_per_s=0.0)
    _up_becomes(source, "i-dp-hung", 0, "engine 1 stalled")
    assert [p.value for p in source.read_last(pm.VLLM_UP, ["i-dp-hung"])] == [0]  # one point per instance
    both = source.read_last(pm.VLLM_UP, ["i-dp-busy", "i-dp-idle"])
    assert sorted((p.instance_id, p.value) for p in both) == [("i-dp-busy", 1), ("i-dp-idle", 1)]
    exporters.set_vllm("i-dp-hung", engine="1", rate_per_s=5.0)
    _up_becomes(source, "i-dp-hung", 1, "engine 1 moving again")


def test_latency_percentiles_from_the_histograms(exporters, source):
    checks = [
        (pm.TTFT_P99_MS, TTFT_BUCKETS_S, 0.2, 0.99),
        (pm.TPOT_P99_MS, TPOT_BUCKETS_S, 0.04, 0.99),
        (pm.E2E_P99_MS, E2E_BUCKETS_S, 1.2, 0.99),
        (pm.LATENCY_P95_MS, E2E_BUCKETS_S, 1.2, 0.95),
    ]
    for canonical, bounds, latency_s, q in checks:
        got = _read(source, canonical, "i-lat").value
        assert got == pytest.approx(expected_quantile_ms(bounds, latency_s, q)), canonical


def test_no_requests_in_the_window_gives_no_latency(exporters, source, real_prometheus):
    series = 'vllm:time_to_first_token_seconds_count{instance_id="i-idle"}'
    _seen(real_prometheus, f"count_over_time({series}[1m]) > 2")  # enough samples for a rate
    assert source.read_last(pm.TTFT_P99_MS, ["i-idle"]) == []


def test_points_carry_the_scrape_time(exporters, source):
    sample = _read(source, pm.GPU_TEMPERATURE_C, "i-ts")
    age_s = (datetime.now(UTC) - sample.at).total_seconds()
    assert 0 <= age_s < 30  # a 1 s scrape interval: the newest sample is the last scrape, not an old one


def test_a_vanished_exporter_reads_as_unknown(exporters, source, real_prometheus):
    assert _read(source, pm.QUEUE_WAITING, "i-gone").value == 3
    exporters.drop("i-gone")
    wait_for(
        lambda: source.read_last(pm.QUEUE_WAITING, ["i-gone"]) == [], 15, "the dropped series to go stale"
    )


def test_xid_is_dated_once_and_keeps_its_date(exporters, real_prometheus):
    source = PrometheusSource(real_prometheus.url, xid_step_s=1, xid_lookback_s=600)
    exporters.set_gpu("i-xid", 0, DCGM_FI_DEV_XID_ERRORS=0)
    exporters.set_gpu("i-xid", 1, DCGM_FI_DEV_XID_ERRORS=0)
    assert _read(source, pm.GPU_XID, "i-xid").value == 0
    set_at = time.time()
    exporters.set_gpu("i-xid", 1, DCGM_FI_DEV_XID_ERRORS=79)
    first = wait_for(
        lambda: [p for p in source.read_last(pm.GPU_XID, ["i-xid"]) if p.value == 79], 15, "XID 79"
    )
    [xid] = first
    assert xid.dimensions["gpu"] == "1"
    assert xid.timestamp.timestamp() >= set_at - 1  # dated when it changed, not when the series began
    _seen(real_prometheus, f"vector(time()) > {xid.timestamp.timestamp() + 3}")  # a few scrapes later
    [again] = [p for p in source.read_last(pm.GPU_XID, ["i-xid"]) if p.value == 79]
    assert again.timestamp == xid.timestamp


def test_a_promql_error_from_the_server_is_an_invalid_request(real_prometheus):
    source = PrometheusSource(real_prometheus.url, rate_window="not-a-duration")
    with pytest.raises(InvalidRequest) as info:
        source.read_last(pm.TTFT_P99_MS, ["i-a"])
    assert info.value.code == "Prometheus.bad_data"
