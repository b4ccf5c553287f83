"""What real vLLM servers and real GPUs hand the agent: /metrics pages as prometheus_client writes them
(``_created`` stamps, several engines, escaped labels, NaN), restarts that counters alone do not show, and
NVML answers beyond "Not Supported" (Unknown Error, a GPU NVML can no longer open or no longer lists)."""

from __future__ import annotations

import pynvml
import pytest

from fleet.agent.fake_nvml import FakeGpu, FakeNvml
from fleet.agent.nvml import GpuCollector
from fleet.agent.sample import Sample, gpu_values, instance_values
from fleet.agent.vllm import VllmCollector, VllmReading, parse_metrics

MODEL = "Qwen/Qwen3-8B"


def _page(
    success: float,
    ttft_fast: float,
    ttft_all: float,
    created: float = 1.75e9,
    *,
    start_s: float | None = 1.75e9,
    extra: str = "",
) -> str:
    """A V1 page as prometheus_client 0.20+ writes it: HELP/TYPE, ``_total`` and ``_created`` samples."""
    labels = f'engine="0",model_name="{MODEL}"'
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{labels}}} 0.0",
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{labels}}} 0.0",
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{{labels},finished_reason="stop"}} {success}',
        "# HELP vllm:request_success_created Count of successfully processed requests.",
        "# TYPE vllm:request_success_created gauge",
        f'vllm:request_success_created{{{labels},finished_reason="stop"}} {created:e}',
        "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
        "# TYPE vllm:time_to_first_token_seconds histogram",
        f"vllm:time_to_first_token_seconds_sum{{{labels}}} {ttft_all * 0.1}",
        f'vllm:time_to_first_token_seconds_bucket{{{labels},le="0.1"}} {ttft_fast}',
        f'vllm:time_to_first_token_seconds_bucket{{{labels},le="1.0"}} {ttft_all}',
        f'vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {ttft_all}',
        f"vllm:time_to_first_token_seconds_count{{{labels}}} {ttft_all}",
        "# HELP vllm:time_to_first_token_seconds_created Histogram of time to first token in seconds.",
        "# TYPE vllm:time_to_first_token_seconds_created gauge",
        f"vllm:time_to_first_token_seconds_created{{{labels}}} {created:e}",
    ]
    if start_s is not None:
        lines += [
            "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
            "# TYPE process_start_time_seconds gauge",
            f"process_start_time_seconds {start_s:e}",
        ]
    return "\n".join(lines) + "\n" + extra


def _two_scrapes(first: str, second: str, window_s: float = 10.0) -> VllmReading:
    pages = iter([first, second])
    collector = VllmCollector("http://127.0.0.1:8000/metrics", fetch=lambda url: next(pages))
    collector.read(0.0)
    return collector.read(window_s)


# -- vLLM /metrics ------------------------------------------------------------------------------------------


def test_a_restart_whose_counters_climbed_past_the_old_ones_is_seen_by_the_created_stamp():
    # 5 requests before the restart; the new process served 8 (all under 100 ms) before the next scrape
    before = _page(success=5, ttft_fast=0, ttft_all=5, created=1.75e9, start_s=1.75e9)
    after = _page(success=8, ttft_fast=8, ttft_all=8, created=1.75e9 + 600, start_s=1.75e9 + 590)
    reading = _two_scrapes(before, after)
    assert reading.request_rate_per_s == pytest.approx(8 / 10.0)  # differencing said 3
    assert reading.ttft.count == 8.0
    assert reading.ttft.p99_ms is not None and reading.ttft.p99_ms <= 100.0  # differencing said 1 s


def test_a_changed_process_start_time_alone_marks_a_restart():
    before = _page(success=5, ttft_fast=0, ttft_all=5, start_s=1.75e9)
    # a server that stamps no _created series (PROMETHEUS_DISABLE_CREATED_SERIES) but did restart
    after = _page(success=8, ttft_fast=8, ttft_all=8, start_s=1.75e9 + 590)
    before = "\n".join(line for line in before.splitlines() if "_created" not in line) + "\n"
    after = "\n".join(line for line in after.splitlines() if "_created" not in line) + "\n"
    assert _two_scrapes(before, after).request_rate_per_s == pytest.approx(0.8)


def test_a_label_set_first_seen_with_its_own_created_stamp_is_not_a_restart():
    labels = f'engine="0",model_name="{MODEL}",finished_reason="length"'
    length = (
        f"vllm:request_success_total{{{labels}}} 1.0\n"
        f"vllm:request_success_created{{{labels}}} 1.7500006e+09\n"
    )
    before = _page(success=100, ttft_fast=100, ttft_all=100)
    after = _page(success=110, ttft_fast=110, ttft_all=110, extra=length)
    assert _two_scrapes(before, after).request_rate_per_s == pytest.approx((10 + 1) / 10.0)


def test_a_page_from_a_server_with_two_engines_nan_and_escaped_labels_reads_as_vllm_means_it():
    text = (
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="team \\"a\\"\\\\b"} 3.0\n'
        'vllm:num_requests_waiting{engine="1",model_name="team \\"a\\"\\\\b"} 4.0\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 2.5e-01\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} NaN\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 1.0e+00\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 2\n'
    )
    parsed = parse_metrics(text.replace("\n", "\r\n"))
    labels = [labels for labels, _ in parsed.samples["vllm:num_requests_waiting"]]
    assert labels[0]["model_name"] == 'team "a"\\b'
    reading = VllmCollector("u", fetch=lambda url: text).read(0.0)
    assert (reading.num_requests_waiting, reading.num_requests_running) == (7.0, 3.0)
    assert reading.kv_cache_usage_pct == pytest.approx(25.0)


def _dp_page(*engines: tuple[float, float, float, float, float], created_series: bool = True) -> str:
    """A data-parallel server's page: one (success, ttft_fast, ttft_all, created, waiting) per engine, each
    engine's series labelled with its rank, as vLLM writes them with --data-parallel-size."""
    lines = [
        "# TYPE vllm:num_requests_waiting gauge",
        "# TYPE vllm:request_success_total counter",
        "# TYPE vllm:time_to_first_token_seconds histogram",
        "# TYPE process_start_time_seconds gauge",
        "process_start_time_seconds 1.75e+09",
    ]
    for rank, (success, fast, every, created, waiting) in enumerate(engines):
        labels = f'engine="{rank}",model_name="{MODEL}"'
        lines += [
            f"vllm:num_requests_waiting{{{labels}}} {waiting}",
            f'vllm:request_success_total{{{labels},finished_reason="stop"}} {success}',
            f'vllm:time_to_first_token_seconds_bucket{{{labels},le="0.1"}} {fast}',
            f'vllm:time_to_first_token_seconds_bucket{{{labels},le="1.0"}} {every}',
            f'vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {every}',
            f"vllm:time_to_first_token_seconds_count{{{labels}}} {every}",
            f"vllm:time_to_first_token_seconds_sum{{{labels}}} {every * 0.5}",
        ]
        if created_series:
            lines += [
                f'vllm:request_success_created{{{labels},finished_reason="stop"}} {created:e}',
                f"vllm:time_to_first_token_seconds_created{{{labels}}} {created:e}",
            ]
    # the exposition groups a family's samples: sort them into families as prometheus_client writes them
    header, body = lines[:5], lines[5:]
    order = ["vllm:num_requests_waiting", "vllm:request_success_total", "vllm:request_success_created"]
    order += ["vllm:time_to_first_token_seconds_", "vllm:time_to_first_token_seconds_created"]
    body.sort(key=lambda line: max(i for i, prefix in enumerate(order) if line.startswith(prefix)))
    return "\n".join(header + body) + "\n"


def test_one_data_parallel_engine_restarting_resets_its_series_alone():
    # engine 0 served 10 requests in the window (over 100 ms each); engine 1 restarted (a new _created stamp)
    # and served 5, under 100 ms: the window holds 15 requests, not engine 0's 1010 of its lifetime
    before = _dp_page((1000, 0, 1000, 1.75e9, 2), (1000, 0, 1000, 1.75e9, 3))
    after = _dp_page((1010, 0, 1010, 1.75e9, 2), (5, 5, 5, 1.75e9 + 600, 0))
    reading = _two_scrapes(before, after)
    assert reading.request_rate_per_s == pytest.approx(15 / 10.0)
    assert reading.ttft.count == 15.0
    # 10 of 15 in (0.1, 1] s: the P50 lies in that bucket, not at engine 0's lifetime of slow requests
    assert reading.ttft.p50_ms == pytest.approx(100 + 900 * (7.5 - 5) / 10)
    # arrivals: 15 finished; engine 0's queue held (2 -> 2), engine 1 lost its 3 in the restart (from zero: 0)
    assert reading.arrival_rate_per_s == pytest.approx(15 / 10.0)


@pytest.mark.parametrize(
    ("engine0_after", "expected_rate"),
    [(1100, (100 + 5) / 10.0), (2000, (1000 + 5) / 10.0)],  # the sum fell; the sum rose (by 5)
)
def test_a_data_parallel_engine_whose_counters_fell_resets_alone_without_created_stamps(
    engine0_after, expected_rate
):
    before = _dp_page((1000, 0, 1000, 0, 0), (1000, 0, 1000, 0, 0), created_series=False)
    after = _dp_page((engine0_after, 0, engine0_after, 0, 0), (5, 5, 5, 0, 0), created_series=False)
    reading = _two_scrapes(before, after)
    assert reading.request_rate_per_s == pytest.approx(expected_rate)
    assert reading.ttft.count == engine0_after - 1000 + 5


def _dp_progress_page(
    *engines: tuple[float, float, float, float], created: tuple[float, ...] | None = None
) -> str:
    """A server's page, one engine per (running, requests finished, prompt tokens, generated tokens)."""
    lines = []
    for name, column in (
        ("vllm:num_requests_running", 0),
        ("vllm:request_success_total", 1),
        ("vllm:prompt_tokens_total", 2),
        ("vllm:generation_tokens_total", 3),
    ):
        lines.append(f"# TYPE {name.removesuffix('_total')} {'gauge' if column == 0 else 'counter'}")
        for rank, values in enumerate(engines):
            labels = f'engine="{rank}",model_name="{MODEL}"'
            if column == 1:
                labels += ',finished_reason="stop"'
            lines.append(f"{name}{{{labels}}} {values[column]}")
    if created is not None:  # each engine's request-success series' _created stamp
        lines.append("# TYPE vllm:request_success_created gauge")
        for rank, stamp in enumerate(created):
            labels = f'engine="{rank}",model_name="{MODEL}",finished_reason="stop"'
            lines.append(f"vllm:request_success_created{{{labels}}} {stamp:e}")
    lines.append("# TYPE vllm:num_requests_waiting gauge")
    lines += [
        f'vllm:num_requests_waiting{{engine="{rank}",model_name="{MODEL}"}} 0' for rank in range(len(engines))
    ]
    return "\n".join(lines) + "\n"


def _dp_readings(engine1_running: float, engine1_moves: bool, periods: int = 6) -> list[VllmReading]:
    """Readings every 15 s of a two-engine server: engine 0 serves (4 running, 2 finished and 500 tokens a
    period); engine 1 holds ``engine1_running`` and moves as engine 0 does or not at all."""
    pages = []
    for k in range(periods):
        served = (4, 2 * k, 300 * k, 200 * k)
        other = served if engine1_moves else (0, 0, 0, 0)
        pages.append(_dp_progress_page(served, (engine1_running, *other[1:])))
    collector = VllmCollector("http://127.0.0.1:8000/metrics", fetch=lambda url: pages.pop(0))
    return [collector.read(15.0 * k) for k in range(periods)]


def test_one_hung_data_parallel_engine_next_to_a_serving_one_reads_down():
    """Engine 1 holds 3 requests and computes nothing while engine 0 serves: the server's sums move, engine
    1's series do not. A minute of that is the hung engine the stall check is for."""
    readings = _dp_readings(engine1_running=3, engine1_moves=False)
    assert [r.stalled_s for r in readings[1:4]] == [15.0, 30.0, 45.0] and all(r.up for r in readings[:4])
    last = readings[-1]
    assert not last.up and last.stalled_s == 75.0
    assert last.error == (
        f'engine stalled: {{engine="1",model_name="{MODEL}"}}: 3 requests in flight and no token computed '
        "for 75 s"
    )
    assert last.request_rate_per_s == pytest.approx(2 / 15)  # engine 0's work is still published


def test_a_restart_of_the_serving_engine_does_not_restart_the_hung_engines_stall():
    """Engine 0 restarts 30 s into engine 1's hang (a new _created stamp, its counters from zero): that is
    engine 0's own restart; engine 1 still stands still, and reads down a minute after it stopped."""
    pages = []
    for k in range(6):
        restarted = k >= 2
        served = (4, 2 * (k - 2), 300 * (k - 2), 200 * (k - 2)) if restarted else (4, 2 * k, 300 * k, 200 * k)
        stamps = (1.75e9 + 600 if restarted else 1.75e9, 1.75e9)
        pages.append(_dp_progress_page(served, (3, 0, 0, 0), created=stamps))
    collector = VllmCollector("http://127.0.0.1:8000/metrics", fetch=lambda url: pages.pop(0))
    readings = [collector.read(15.0 * k) for k in range(6)]
    assert [r.stalled_s for r in readings[1:5]] == [15.0, 30.0, 45.0, 60.0]
    assert not readings[4].up and 'engine="1"' in (readings[4].error or "")


@pytest.mark.parametrize(
    ("engine1_running", "engine1_moves"),
    [(4, True), (0, False)],  # both serving; engine 1 idle (nothing in flight, nothing counted)
)
def test_data_parallel_engines_serving_or_idle_never_read_stalled(engine1_running, engine1_moves):
    readings = _dp_readings(engine1_running, engine1_moves)
    assert all(r.up and r.stalled_s is None for r in readings)


# -- NVML ---------------------------------------------------------------------------------------------------


def _failing(gpus: list[FakeGpu], call: str, gpu_index: int, code: int) -> FakeNvml:
    """The fake NVML with one entry point answering the NVML return ``code`` for one GPU."""
    nvml = FakeNvml(gpus)
    real = getattr(nvml, call)

    def failing(*args):
        index = args[0] if call == "nvmlDeviceGetHandleByIndex" else args[0].index
        if index == gpu_index:
            raise pynvml.NVMLError(code)
        return real(*args)

    setattr(nvml, call, failing)
    return nvml


def test_an_unknown_error_on_one_field_leaves_the_fields_after_it_read():
    # some boards answer "Unknown Error" for the power draw; ECC and clock reasons come after it
    nvml = _failing([FakeGpu(ecc_uncorrected=2)], "nvmlDeviceGetPowerUsage", 0, pynvml.NVML_ERROR_UNKNOWN)
    reading = GpuCollector(nvml).read().gpus[0]
    assert reading.power_w is None and "Unknown" in (reading.error or "")
    assert reading.ecc_uncorrected_volatile == 2 and reading.clock_event_reasons_raw == 0
    assert reading.power_limit_w == pytest.approx(500.0) and not reading.lost


def test_an_unknown_error_from_the_legacy_throttle_call_does_not_lose_the_ecc_reading():
    gpu = FakeGpu(legacy_driver=True, ecc_uncorrected=1)
    nvml = _failing([gpu], "nvmlDeviceGetCurrentClocksThrottleReasons", 0, pynvml.NVML_ERROR_UNKNOWN)
    reading = GpuCollector(nvml).read().gpus[0]
    assert reading.clock_event_reasons_raw is None and reading.ecc_uncorrected_volatile == 1


def test_a_gpu_nvml_cannot_open_with_unknown_error_counts_as_lost():
    # nvidia-smi: "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error" after XID 79
    nvml = _failing([FakeGpu(), FakeGpu()], "nvmlDeviceGetHandleByIndex", 1, pynvml.NVML_ERROR_UNKNOWN)
    snap = GpuCollector(nvml).read()
    assert snap.nvml_ok and snap.lost_count == 1
    assert snap.gpus[1].lost and not snap.gpus[0].lost
    assert gpu_values(snap.gpus[1]) == {"gpu_device_lost": 1.0}


def _driver_reload(collector: GpuCollector, nvml: FakeNvml) -> None:
    """The driver stops answering for a period (the agent re-initialises NVML the period after)."""
    nvml.driver_unloaded = True
    assert not collector.read().nvml_ok
    nvml.driver_unloaded = False


def test_a_gpu_no_longer_listed_after_nvml_restarts_is_reported_lost():
    gpus = [FakeGpu(uuid=f"GPU-{board}") for board in "abcd"]
    nvml = FakeNvml(gpus)
    collector = GpuCollector(nvml)
    assert collector.read().lost_count == 0
    _driver_reload(collector, nvml)
    gpus.pop(1)  # the driver comes back without the GPU that fell off the bus
    snap = collector.read()
    assert snap.nvml_ok and len(snap.gpus) == 4 and snap.lost_count == 1
    assert [g.uuid for g in snap.gpus] == ["GPU-a", "GPU-c", "GPU-d", "GPU-b"]
    gone = snap.gpus[3]
    # index 1 is GPU-c's now (NVML renumbers): the vanished GPU is reported beside the listed ones
    assert gone.lost and gone.index == 3 and gone.error == "no longer listed by NVML"
    assert gone.pci_bus_id == "00000000:00:08.0"  # where it was when last seen
    values = instance_values(Sample(instance_id="i-1", clock=None, gpu=snap, vllm=VllmReading(up=False)))
    assert (values["gpu_count"], values["gpu_lost"]) == (4.0, 1.0)


def test_a_gpu_that_is_listed_again_is_no_longer_reported_lost():
    gpus = [FakeGpu(uuid="GPU-a"), FakeGpu(uuid="GPU-b")]
    nvml = FakeNvml(gpus)
    collector = GpuCollector(nvml)
    collector.read()
    _driver_reload(collector, nvml)
    hidden = gpus.pop()
    assert collector.read().lost_count == 1
    _driver_reload(collector, nvml)
    gpus.append(hidden)
    snap = collector.read()
    assert snap.lost_count == 0 and len(snap.gpus) == 2
