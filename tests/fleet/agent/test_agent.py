"""The agent loop with fakes: fake NVML, fake vLLM on 127.0.0.1, a recording CMS sink, a fake clock."""

from __future__ import annotations

import threading
import urllib.request

import pynvml
import pytest
from agent_doubles import RecordingSink
from prometheus_client.parser import text_string_to_metric_families

from fleet.agent.clock import ManualAgentClock
from fleet.agent.fake_nvml import FakeGpu, FakeNvml
from fleet.agent.prom import make_registry, serve
from fleet.agent.publish import CmsPublisher
from fleet.agent.run import Agent, AgentConfig
from fleet.agent.sample import INSTANCE_METRICS_READ_BY_SERVICE, instance_values, to_points

HW_THERMAL = pynvml.nvmlClocksEventReasonHwThermalSlowdown
SW_POWER = pynvml.nvmlClocksEventReasonSwPowerCap
INSTANCE = "i-bp1agent000000001"


def make_agent(url: str, nvml=None, clock=None, sink=None, period_s: float = 15.0) -> Agent:
    return Agent(
        AgentConfig(instance_id=INSTANCE, vllm_url=url, period_s=period_s),
        nvml=nvml if nvml is not None else FakeNvml([FakeGpu(), FakeGpu()]),
        clock=clock or ManualAgentClock(),
        publisher=CmsPublisher(sink) if sink is not None else None,
    )


def test_run_takes_one_sample_per_period_on_the_clock(vllm_server):
    clock = ManualAgentClock()
    start = clock.monotonic()
    taken = make_agent(vllm_server.url, clock=clock).run(threading.Event(), max_samples=3)
    assert taken == 3
    assert clock.monotonic() - start == pytest.approx(45.0)


def test_published_queue_depth_is_what_vllm_reported(vllm_server):
    sink = RecordingSink(INSTANCE)
    agent = make_agent(vllm_server.url, sink=sink)
    agent.prime()
    vllm_server.state.waiting = 42
    agent.step()
    assert sink.values("vllm_num_requests_waiting") == [42.0]


def test_every_name_the_service_reads_is_published_when_available(vllm_server):
    gpus = [FakeGpu(), FakeGpu()]
    clock = ManualAgentClock()
    agent = make_agent(vllm_server.url, nvml=FakeNvml(gpus), clock=clock)
    agent.prime()
    vllm_server.state.finish_requests(50, ttft_s=0.3, tpot_s=0.03, e2e_s=2.0)
    gpus[0].push_xid(94)
    clock.advance(15)
    names = set(instance_values(agent.step()))
    assert set(INSTANCE_METRICS_READ_BY_SERVICE) <= names


def test_the_prefix_cache_hit_ratio_is_published_where_vllm_exports_it(vllm_server):
    clock = ManualAgentClock()
    agent = make_agent(vllm_server.url, nvml=FakeNvml([FakeGpu()]), clock=clock)
    vllm_server.state.prefix_queries, vllm_server.state.prefix_hits = 0.0, 0.0
    agent.prime()
    vllm_server.state.prefix_queries, vllm_server.state.prefix_hits = 4000.0, 1000.0
    clock.advance(15)
    assert instance_values(agent.step())["vllm_prefix_cache_hit_ratio"] == pytest.approx(0.25)
    clock.advance(15)  # nothing looked up since: no value, rather than a zero that reads "no hits"
    assert "vllm_prefix_cache_hit_ratio" not in instance_values(agent.step())


def test_instance_aggregates_over_gpus(vllm_server):
    gpus = [
        FakeGpu(clock_event_reasons=HW_THERMAL, mem_util_pct=40, sm_clock_mhz=1980),
        FakeGpu(
            clock_event_reasons=SW_POWER | pynvml.nvmlClocksEventReasonGpuIdle,
            mem_util_pct=95,
            sm_clock_mhz=990,
        ),
    ]
    agent = make_agent(vllm_server.url, nvml=FakeNvml(gpus))
    agent.prime()
    values = instance_values(agent.step())
    assert values["gpu_throttle_reasons"] == HW_THERMAL | SW_POWER | pynvml.nvmlClocksEventReasonGpuIdle
    assert values["gpu_throttled"] == 1.0
    assert values["gpu_mem_bw_util"] == 95.0  # max
    assert values["gpu_sm_clock_ratio"] == pytest.approx(0.5)  # min


def test_an_idle_gpu_is_not_throttled(vllm_server):
    agent = make_agent(
        vllm_server.url, nvml=FakeNvml([FakeGpu(clock_event_reasons=pynvml.nvmlClocksEventReasonGpuIdle)])
    )
    agent.prime()
    values = instance_values(agent.step())
    assert values["gpu_throttle_reasons"] == pynvml.nvmlClocksEventReasonGpuIdle
    assert values["gpu_throttled"] == 0.0


def test_gpu_xid_is_published_only_in_a_period_with_an_xid(vllm_server):
    gpus = [FakeGpu(), FakeGpu()]
    sink = RecordingSink(INSTANCE)
    agent = make_agent(vllm_server.url, nvml=FakeNvml(gpus), sink=sink)
    agent.prime()
    agent.step()
    gpus[1].push_xid(48)
    agent.step()
    agent.step()
    assert sink.values("gpu_xid") == [48.0]
    assert sink.values("gpu_device_xid", {"instanceId": INSTANCE, "gpu": "1"}) == [48.0]


@pytest.mark.parametrize(
    ("pushed", "published"),
    [
        ([63, 13], 63.0),  # row remap pending, then an application fault: the reset-class XID is reported
        ([119, 45], 119.0),  # GSP timeout, then the preemptive cleanup of the killed engine
        ([94, 79, 13], 79.0),  # a hardware XID outranks a reset-class one
        ([13, 31], 31.0),  # only application XIDs: the last
    ],
)
def test_gpu_xid_reports_the_periods_most_severe_xid(vllm_server, pushed, published):
    gpus = [FakeGpu()]
    sink = RecordingSink(INSTANCE)
    agent = make_agent(vllm_server.url, nvml=FakeNvml(gpus), sink=sink)
    agent.prime()
    for code in pushed:
        gpus[0].push_xid(code)
    agent.step()
    assert sink.values("gpu_xid") == [published]


def test_per_gpu_points_carry_the_gpu_dimension(vllm_server):
    gpus = [FakeGpu(temperature_c=51), FakeGpu(temperature_c=88)]
    agent = make_agent(vllm_server.url, nvml=FakeNvml(gpus))
    agent.prime()
    temps = {
        p.dimensions["gpu"]: p.value for p in to_points(agent.step()) if p.name == "gpu_device_temperature_c"
    }
    assert temps == {"0": 51.0, "1": 88.0}


def test_instance_level_points_have_only_the_instance_dimension(vllm_server):
    agent = make_agent(vllm_server.url)
    agent.prime()
    for point in to_points(agent.step()):
        if not point.name.startswith("gpu_device_"):
            assert point.dimensions == {"instanceId": INSTANCE}


def test_gpu_lost_mid_run_keeps_the_loop_going(vllm_server):
    gpus = [FakeGpu(), FakeGpu()]
    clock = ManualAgentClock()
    sink = RecordingSink(INSTANCE)
    agent = make_agent(vllm_server.url, nvml=FakeNvml(gpus), clock=clock, sink=sink)
    stop = threading.Event()
    seen = []

    def on_sample(sample):
        seen.append(sample)
        if len(seen) == 1:
            gpus[0].lose()

    assert agent.run(stop, max_samples=3, on_sample=on_sample) == 3
    assert sink.values("gpu_lost") == [0.0, 1.0, 1.0]
    assert sink.values("gpu_device_lost", {"instanceId": INSTANCE, "gpu": "0"}) == [0.0, 1.0, 1.0]
    assert sink.values("gpu_xid") == [79.0]
    assert len(sink.values("gpu_device_temperature_c", {"instanceId": INSTANCE, "gpu": "1"})) == 3


def test_nvml_missing_still_publishes_vllm_and_says_so(vllm_server):
    sink = RecordingSink(INSTANCE)
    vllm_server.state.waiting = 3
    agent = make_agent(vllm_server.url, nvml=FakeNvml(library_missing=True), sink=sink)
    agent.prime()
    sample = agent.step()
    assert not sample.gpu.nvml_ok
    assert sink.values("gpu_nvml_up") == [0.0]
    assert sink.values("vllm_num_requests_waiting") == [3.0]
    assert sink.values("gpu_throttle_reasons") == []


def test_vllm_down_is_published_as_vllm_up_0_and_gpus_still_are(closed_port_url):
    sink = RecordingSink(INSTANCE)
    agent = make_agent(closed_port_url, sink=sink)
    assert agent.run(threading.Event(), max_samples=2) == 2
    assert sink.values("vllm_up") == [0.0, 0.0]
    assert sink.values("vllm_num_requests_waiting") == []
    assert len(sink.values("gpu_device_util_pct", {"instanceId": INSTANCE, "gpu": "0"})) == 2


def test_an_unexpected_failure_in_one_period_does_not_stop_the_loop(vllm_server):
    calls = {"n": 0}

    def flaky_fetch(url: str) -> str:
        calls["n"] += 1
        if calls["n"] == 2:  # the first period's scrape (after the priming one)
            raise RuntimeError("boom")
        return vllm_server.state.render()

    agent = Agent(
        AgentConfig(instance_id=INSTANCE, vllm_url=vllm_server.url),
        nvml=FakeNvml(),
        clock=ManualAgentClock(),
        vllm_fetch=flaky_fetch,
    )
    assert agent.run(threading.Event(), max_samples=3) == 2
    assert agent.counters().sample_errors_total == 1


def test_a_failed_baseline_scrape_does_not_stop_the_agent(vllm_server):
    calls = {"n": 0}

    def fetch(url: str) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("vLLM answered nonsense while priming")
        return vllm_server.state.render()

    agent = Agent(
        AgentConfig(instance_id=INSTANCE, vllm_url=vllm_server.url),
        nvml=FakeNvml(),
        clock=ManualAgentClock(),
        vllm_fetch=fetch,
    )
    assert agent.run(threading.Event(), max_samples=2) == 2


def test_clock_jump_is_repaired_in_published_timestamps(vllm_server):
    clock = ManualAgentClock()
    sink = RecordingSink(INSTANCE)
    agent = make_agent(vllm_server.url, clock=clock, sink=sink)
    agent.prime()
    first = agent.step().timestamp_ms
    clock.advance(15)
    clock.step_wall(10 * 365 * 86_400)  # the wall clock leaps a decade
    second = agent.step().timestamp_ms
    assert second - first == 15_000
    assert agent.counters().clock_repairs_total == 1


def test_stop_event_ends_the_loop(vllm_server):
    stop = threading.Event()
    agent = make_agent(vllm_server.url)
    taken = agent.run(stop, on_sample=lambda s: stop.set())
    assert taken == 1


def test_prometheus_endpoint_serves_the_latest_sample(vllm_server):
    gpus = [FakeGpu(temperature_c=77, clock_event_reasons=HW_THERMAL)]
    agent = make_agent(vllm_server.url, nvml=FakeNvml(gpus))
    agent.prime()
    vllm_server.state.waiting = 9
    agent.step()
    server, _ = serve(make_registry(agent.prometheus_collector()), "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("vllm_num_requests_waiting", (("instance_id", INSTANCE),))] == 9.0
    assert samples[("gpu_device_temperature_c", (("gpu", "0"), ("instance_id", INSTANCE)))] == 77.0
    reason_key = (
        "gpu_device_clock_event_reason",
        (("gpu", "0"), ("instance_id", INSTANCE), ("reason", "hw_thermal_slowdown")),
    )
    assert samples[reason_key] == 1.0
    assert samples[("fleet_agent_samples_total", ())] == 1.0


def test_several_vllm_servers_on_one_instance_add_up():
    from conftest import FakeVllmState

    from fleet.agent.vllm import ScrapeError

    urls = ["http://127.0.0.1:8000/metrics", "http://127.0.0.1:8001/metrics"]
    engines = {url: FakeVllmState() for url in urls}
    dead: set[str] = set()

    def fetch(url: str) -> str:
        if url in dead:
            raise ScrapeError(f"{url}: connection refused")
        return engines[url].render()

    clock = ManualAgentClock()
    agent = Agent(
        AgentConfig(instance_id=INSTANCE, vllm_url=urls[0], more_vllm_urls=(urls[1],)),
        nvml=FakeNvml(),
        clock=clock,
        vllm_fetch=fetch,
    )
    agent.prime()
    first, second = engines.values()
    first.waiting, second.waiting = 3, 4
    first.kv_fraction, second.kv_fraction = 0.2, 0.6
    first.finish_requests(30, ttft_s=0.2, tpot_s=0.03, e2e_s=1.0, prompt_each=400)
    second.finish_requests(10, ttft_s=2.5, tpot_s=0.03, e2e_s=3.0, prompt_each=1200)
    clock.advance(15)
    vllm = agent.step().vllm
    assert vllm.up and vllm.num_requests_waiting == 7
    assert vllm.kv_cache_usage_pct == pytest.approx(60.0)  # the fullest engine
    assert vllm.request_rate_per_s == pytest.approx(40 / 15)
    assert vllm.prompt_tokens_per_request == pytest.approx((30 * 400 + 10 * 1200) / 40)  # per request
    assert vllm.ttft.p99_ms is not None and vllm.ttft.p99_ms >= 2000  # the slow engine's tail stands
    dead.add(urls[1])  # one server dies: the node is degraded, the other's load still counts
    clock.advance(15)
    vllm = agent.step().vllm
    assert not vllm.up and "8001" in (vllm.error or "") and vllm.num_requests_waiting == 3


def test_a_failed_sensor_publishes_no_temperature_and_leaves_the_max_to_the_others(vllm_server):
    gpus = [FakeGpu(temperature_c=255), FakeGpu(temperature_c=64)]
    agent = make_agent(vllm_server.url, nvml=FakeNvml(gpus))
    agent.prime()
    sample = agent.step()
    temps = {p.dimensions["gpu"]: p.value for p in to_points(sample) if p.name == "gpu_device_temperature_c"}
    assert temps == {"1": 64.0}
    assert instance_values(sample)["gpu_temperature_max_c"] == 64.0


def test_a_gpu_nvml_answers_gpu_is_lost_for_publishes_xid_79(vllm_server):
    # no XID event came (a vGPU, or the fall was before the agent registered): NVML's GPU_IS_LOST alone
    # must raise what the default rules replace a node for
    gpus = [FakeGpu(), FakeGpu()]
    agent = make_agent(vllm_server.url, nvml=FakeNvml(gpus))
    agent.prime()
    gpus[1].lose(with_xid=False)
    sample = agent.step()
    values = instance_values(sample)
    assert values["gpu_xid"] == 79.0 and values["gpu_lost"] == 1.0
    per_gpu = {p.dimensions["gpu"]: p.value for p in to_points(sample) if p.name == "gpu_device_xid"}
    assert per_gpu == {"1": 79.0}


def test_row_remapping_publishes_the_worst_gpu_and_nothing_where_unsupported(vllm_server):
    gpus = [
        FakeGpu(),
        FakeGpu(row_remap_pending=True),
        FakeGpu(row_remap_pending=None, row_remap_failure=None),
    ]
    agent = make_agent(vllm_server.url, nvml=FakeNvml(gpus))
    agent.prime()
    sample = agent.step()
    assert instance_values(sample)["gpu_row_remap"] == 1.0
    per_gpu = {p.dimensions["gpu"]: p.value for p in to_points(sample) if p.name == "gpu_device_row_remap"}
    assert per_gpu == {"0": 0.0, "1": 1.0}  # GPU 2 cannot say: no point rather than a healthy-looking 0
    gpus[0].row_remap_failure = True
    assert instance_values(agent.step())["gpu_row_remap"] == 2.0
    unsupported = [FakeGpu(row_remap_pending=None, row_remap_failure=None)]
    agent = make_agent(vllm_server.url, nvml=FakeNvml(unsupported))
    agent.prime()
    assert "gpu_row_remap" not in instance_values(agent.step())
