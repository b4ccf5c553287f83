"""The simulated world on its own: the balancer, serving, metrics and fault injection (a stub cloud)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleet.sim.engine import make_engine_factory, resolve_hardware
from fleet.sim.workload import Request
from fleet.sim.world import Fault, FaultSpecError, World, WorldParams, parse_duration_s, parse_fault_spec
from policies import metrics as pm


class StubCloud:
    """Just what the world calls on the fake cloud: the clock, metric writes and system events."""

    def __init__(self) -> None:
        self.t0 = datetime(2026, 3, 2, tzinfo=UTC)
        self.world: World | None = None
        self.custom: list[tuple[str, dict, float]] = []
        self.dash: list[tuple[str, dict, float]] = []
        self.events: list[tuple[str, str]] = []

    def now(self) -> datetime:
        return self.t0 + timedelta(seconds=self.world.now_s if self.world else 0.0)

    def now_s(self) -> float:
        return self.now().timestamp()

    def put_custom_metric(self, name, dims, value, ts_ms=None):
        self.custom.append((name, dims, value))

    def publish_metric(self, ns, name, dims, value, ts_ms=None):
        self.dash.append((name, dims, value))

    def add_system_event(self, instance_id, code, *a, **k):
        self.events.append((instance_id, code))
        return "e-1"

    def last(self, name: str, instance_id: str) -> float:
        rows = [v for n, d, v in self.custom + self.dash if n == name and d["instanceId"] == instance_id]
        return rows[-1]


@pytest.fixture(scope="module")
def factory():
    return make_engine_factory(resolve_hardware("Qwen2.5-7B", "ecs.gn7i-c8g1.2xlarge"))


def make_world(factory, states: dict[str, str], requests, faults=(), **params) -> tuple[World, StubCloud]:
    cloud = StubCloud()
    p = WorldParams(**params)
    world = World(cloud, "asg-1", factory, p, requests, faults, instance_lister=lambda _c, _g: dict(states))
    cloud.world = world
    world.sync(prewarmed=True)
    return world, cloud


def steady(rate: float, seconds: float, prompt: int = 500, output: int = 100) -> list[Request]:
    n = int(rate * seconds)
    return [Request(i / rate, prompt, output) for i in range(n)]


def test_balancer_spreads_load_evenly_over_serving_instances(factory):
    states = {"i-a": "InService", "i-b": "InService", "i-c": "InService"}
    world, _ = make_world(factory, states, steady(6.0, 60.0))
    world.run_until(70.0)
    done = [world.instances[i].completed for i in states]
    assert sum(done) == 360
    assert max(done) - min(done) <= 0.1 * max(done)


def test_balancer_skips_standby_and_loading_instances(factory):
    states = {"i-a": "InService", "i-b": "Standby", "i-c": "Pending"}
    world, _ = make_world(factory, states, steady(2.0, 30.0))
    world.instances["i-c"].ready_s = 1e9  # still loading weights
    world.run_until(40.0)
    assert world.instances["i-a"].completed == 60
    assert world.instances["i-b"].completed == 0 and world.instances["i-c"].completed == 0


def test_balancer_prefers_the_instance_with_fewer_outstanding_requests(factory):
    states = {"i-a": "InService", "i-b": "InService"}
    world, _ = make_world(factory, states, [Request(0.5, 100, 50)])
    world.instances["i-a"].outstanding = 5  # busy with earlier work
    world.run_until(1.0)
    assert world.instances["i-b"].outstanding == 1


def test_requests_beyond_the_queue_limit_are_rejected(factory):
    states = {"i-a": "InService"}
    burst = [Request(0.0, 4000, 400) for _ in range(400)]
    world, _ = make_world(factory, states, burst, queue_limit=8)
    world.run_until(5.0)
    assert world.total_rejected > 0
    assert world.instances["i-a"].engine.num_waiting <= 8


def test_no_serving_instance_means_every_request_is_rejected(factory):
    world, _ = make_world(factory, {"i-a": "Standby"}, steady(1.0, 10.0))
    world.run_until(12.0)
    assert world.total_rejected == 10 and world.total_completed == 0


def test_instances_publish_queue_latency_and_gpu_metrics(factory):
    world, cloud = make_world(factory, {"i-a": "InService"}, steady(1.5, 120.0))
    world.run_until(120.0)
    names = {n for n, _, _ in cloud.custom} | {n for n, _, _ in cloud.dash}
    for name in (
        "vllm_num_requests_waiting",
        "vllm_num_requests_running",
        "vllm_ttft_p99_ms",
        "vllm_tpot_p99_ms",
        "vllm_e2e_p99_ms",
        "gpu_throttle_reasons",
        "gpu_mem_bw_util",
        "instance_gpu_gpu_usedutilization",
        "instance_gpu_memory_usedutilization",
        "instance_gpu_gpu_temperature",
        "instance_gpu_power_readings_power_draw",
    ):
        assert name in names, name
    assert 0 < cloud.last("instance_gpu_gpu_usedutilization", "i-a") <= 100
    assert cloud.last("vllm_ttft_p99_ms", "i-a") > 0
    assert "gpu_xid" not in names  # as the node agent: only a period that drained an XID sends one


def test_an_idle_instance_reports_no_utilization(factory):
    world, cloud = make_world(factory, {"i-a": "InService"}, [])
    world.run_until(60.0)
    assert cloud.last("instance_gpu_gpu_usedutilization", "i-a") == 0.0


def test_overheat_fault_raises_temperature_past_85_and_throttles(factory):
    fault = parse_fault_spec("overheat,at=60s,instance=0")
    world, cloud = make_world(factory, {"i-a": "InService", "i-b": "InService"}, steady(2.0, 900.0), [fault])
    world.run_until(900.0)
    hot = fault.instance_id
    cool = ({"i-a", "i-b"} - {hot}).pop()
    assert cloud.last("instance_gpu_gpu_temperature", hot) > 85.0
    assert cloud.last("instance_gpu_gpu_temperature", cool) < 80.0
    assert cloud.last("gpu_throttle_reasons", hot) > 0 and cloud.last("gpu_throttle_reasons", cool) == 0
    assert cloud.last("gpu_sm_clock_ratio", hot) < 1.0


def test_hardware_xid_takes_the_instance_out_of_the_balancer(factory):
    fault = parse_fault_spec("xid:79,at=10s,instance=i-a")
    world, cloud = make_world(factory, {"i-a": "InService", "i-b": "InService"}, steady(2.0, 60.0), [fault])
    world.run_until(60.0)
    assert cloud.last("gpu_xid", "i-a") == 79.0
    sent = [v for n, d, v in cloud.custom if n == "gpu_xid" and d["instanceId"] == "i-a"]
    assert len(sent) >= 3 and set(sent) == {79.0}  # reported every period while the GPU stays unusable
    assert not world.instances["i-a"].serving(world.now_s)
    assert world.instances["i-b"].completed > world.instances["i-a"].completed


@pytest.mark.parametrize("code", sorted({*pm.HARDWARE_XIDS, *pm.RESET_XIDS}))
def test_every_xid_the_default_rules_answer_takes_the_gpu_out(factory, code):
    # one list of codes: what the default xid_hardware / xid_reset rules act on is what the world disables
    fault = parse_fault_spec(f"xid:{code},at=10s,instance=i-a")
    world, _ = make_world(factory, {"i-a": "InService"}, steady(1.0, 60.0), [fault])
    world.run_until(30.0)
    assert not world.instances["i-a"].serving(world.now_s)


@pytest.mark.parametrize(
    ("code", "action"),
    [(c, "replace") for c in pm.HARDWARE_XIDS] + [(c, "reboot") for c in pm.RESET_XIDS],
)
def test_the_simulators_config_answers_each_xid_the_world_disables_as_the_default_rules_do(code, action):
    # The world takes the GPU out for every hardware and reset-class code; the embedded config must answer
    # each as the default rules do. Its copy predated xid_reset: a 143, 156 or 158 matched no XID rule and
    # waited 7 minutes for engine_down, and a 63 or 94 replaced a node a reboot mends.
    from fleet.config import load_config
    from fleet.sim.scenario import DEFAULT_CONFIG

    rules = load_config(DEFAULT_CONFIG, env={}).groups[0].isolation.rules
    assert [r.action for r in rules if r.kind == "xid" and code in (r.xids or ())] == [action]


def test_application_xid_is_reported_but_the_instance_keeps_serving(factory):
    fault = parse_fault_spec("xid:13,at=10s,instance=i-a")
    world, cloud = make_world(factory, {"i-a": "InService"}, steady(1.0, 60.0), [fault])
    world.run_until(60.0)
    assert cloud.last("gpu_xid", "i-a") == 13.0
    assert world.instances["i-a"].serving(world.now_s)


def test_each_xid_is_one_sample_so_a_repeat_reads_as_a_repeat(factory):
    faults = [parse_fault_spec(f"xid:13,at={t}s,instance=i-a") for t in (10, 130, 250)]
    world, cloud = make_world(factory, {"i-a": "InService"}, steady(1.0, 300.0), faults)
    world.run_until(300.0)
    sent = [v for n, d, v in cloud.custom if n == "gpu_xid" and d["instanceId"] == "i-a"]
    assert sent == [13.0, 13.0, 13.0]  # one per XID, none in the periods between


def test_system_event_fault_is_raised_in_ecs(factory):
    fault = parse_fault_spec("event:SystemFailure.Reboot,at=5s,instance=i-a")
    world, cloud = make_world(factory, {"i-a": "InService"}, [], [fault])
    world.run_until(10.0)
    assert cloud.events == [("i-a", "SystemFailure.Reboot")]


def test_an_engine_crash_stops_serving_and_reports_vllm_down_but_the_gpus(factory):
    fault = parse_fault_spec("engine-crash,at=20s,instance=i-a")
    states = {"i-a": "InService", "i-b": "InService"}
    world, cloud = make_world(factory, states, steady(2.0, 120.0, prompt=3000, output=400), [fault])
    world.run_until(60.0)
    assert world.total_dropped > 0  # what it was serving is lost
    assert not world.instances["i-a"].serving(world.now_s) and world.instances["i-b"].serving(world.now_s)
    done_a = world.instances["i-a"].completed
    world.run_until(120.0)
    assert world.instances["i-a"].completed == done_a  # the balancer sends it nothing more
    assert cloud.last("vllm_up", "i-a") == 0.0 and cloud.last("vllm_up", "i-b") == 1.0
    last_minute = [n for n, d, _ in cloud.custom[-20:] if d["instanceId"] == "i-a"]
    assert "vllm_num_requests_waiting" not in last_minute and "vllm_ttft_p99_ms" not in last_minute
    assert "gpu_throttle_reasons" in last_minute  # the agent still reads the GPUs
    assert cloud.last("instance_gpu_gpu_usedutilization", "i-a") == 0.0


def test_a_crashed_engine_serves_again_after_a_reboot_or_its_supervisor(factory):
    states = {"i-a": "InService", "i-b": "InService"}
    faults = [
        parse_fault_spec("engine-crash,at=10s,instance=i-a"),
        parse_fault_spec("engine-crash,at=10s,instance=i-b,for=5m"),
    ]
    world, _ = make_world(factory, states, steady(1.0, 900.0), faults, cold_start_s=120.0, reboot_s=30.0)
    world.run_until(60.0)
    assert not any(i.serving(world.now_s) for i in world.instances.values())
    world.run_until(320.0)
    assert world.instances["i-b"].serving(world.now_s)  # restarted by its supervisor after 5 minutes
    assert not world.instances["i-a"].serving(world.now_s)  # nothing restarts it on its own
    states["i-a"] = "Rebooting"
    world.sync()
    states["i-a"] = "InService"
    world.sync()
    world.run_until(world.now_s + 130.0)  # the reboot and the weights' load
    assert world.instances["i-a"].serving(world.now_s)


def test_a_stopped_agent_sends_nothing_while_vllm_serves_on_until_it_runs_again(factory):
    states = {"i-a": "InService", "i-b": "InService", "i-c": "InService"}
    faults = [
        parse_fault_spec("agent-down,at=10s,instance=i-a"),
        parse_fault_spec("agent-down,at=10s,instance=i-b,for=2m"),
    ]
    world, cloud = make_world(factory, states, steady(2.0, 600.0), faults, cold_start_s=120.0, reboot_s=30.0)
    world.run_until(100.0)
    since, dash_since = len(cloud.custom), len(cloud.dash)
    done_a = world.instances["i-a"].completed
    world.run_until(110.0)
    sent = {d["instanceId"] for _, d, _ in cloud.custom[since:]}
    assert sent == {"i-c"}  # the two agents are down
    assert world.instances["i-a"].completed > done_a  # vLLM serves on
    dash = {d["instanceId"] for n, d, _ in cloud.dash[dash_since:] if n == "instance_gpu_gpu_temperature"}
    assert "i-a" in dash  # CloudMonitor's own agent still reports its GPUs
    world.run_until(200.0)
    since = len(cloud.custom)
    world.run_until(215.0)
    assert {d["instanceId"] for _, d, _ in cloud.custom[since:]} == {"i-b", "i-c"}  # restarted after 2m
    states["i-a"] = "Rebooting"
    world.sync()
    states["i-a"] = "InService"
    world.sync()
    since = len(cloud.custom)
    world.run_until(world.now_s + 20.0)
    assert "i-a" in {d["instanceId"] for _, d, _ in cloud.custom[since:]}  # a reboot starts it again


def test_a_hung_engine_keeps_its_requests_reads_busy_and_is_reported_down_after_the_agents_stall(factory):
    from fleet.agent.vllm import STALL_S

    states = {"i-a": "InService", "i-b": "InService"}
    fault = parse_fault_spec("engine-hang,at=5s,instance=i-a")
    world, cloud = make_world(factory, states, steady(2.0, 600.0, prompt=3000, output=400), [fault])
    world.run_until(30.0)
    assert world.instances["i-a"].serving(world.now_s)  # its server answers: the balancer still sends
    done_a = world.instances["i-a"].completed
    world.run_until(5.0 + STALL_S - 15.0)
    assert world.instances["i-a"].completed == done_a and world.instances["i-a"].outstanding > 0
    assert cloud.last("vllm_up", "i-a") == 1.0  # not a minute without progress yet
    assert cloud.last("instance_gpu_gpu_usedutilization", "i-a") == 100.0  # spinning: falsely busy
    world.run_until(5.0 + STALL_S + 30.0)
    assert cloud.last("vllm_up", "i-a") == 0.0 and cloud.last("vllm_up", "i-b") == 1.0
    # /metrics still answers: the requests it holds are in flight there
    queue = ("vllm_num_requests_waiting", "vllm_num_requests_running")
    assert sum(cloud.last(name, "i-a") for name in queue) > 0
    states["i-a"] = "Rebooting"
    world.sync()
    assert world.total_dropped > 0  # what it held is lost
    states["i-a"] = "InService"
    world.sync()
    assert world.instances["i-a"].engine_hung_s is None


def test_a_reboot_loses_work_and_clears_the_cooling_fault(factory):
    states = {"i-a": "InService"}
    fault = Fault("overheat", 0.0, target="i-a")
    world, _ = make_world(factory, states, steady(2.0, 30.0), [fault])
    world.run_until(10.0)
    states["i-a"] = "Rebooting"
    world.sync()
    assert world.total_dropped > 0
    assert world.instances["i-a"].gpus[0].extra_c == 0.0
    states["i-a"] = "InService"
    world.sync()
    assert not world.instances["i-a"].serving(world.now_s)  # loading its weights again


def test_a_removed_instance_drains_its_in_flight_requests(factory):
    states = {"i-a": "InService", "i-b": "InService"}
    world, _ = make_world(factory, states, steady(4.0, 20.0, prompt=3000, output=400))
    world.run_until(10.0)
    before = world.instances["i-b"].completed
    del states["i-b"]
    world.sync()
    assert "i-b" not in world.instances and world.draining
    world.run_until(200.0)
    gone = world.gone[-1]
    assert gone.instance_id == "i-b" and gone.completed > before and world.total_dropped == 0


def test_draining_stops_at_the_hook_timeout(factory):
    states = {"i-a": "InService"}
    world, _ = make_world(factory, states, steady(4.0, 20.0, prompt=3000, output=2000), drain_timeout_s=5.0)
    world.run_until(10.0)
    del states["i-a"]
    world.sync()
    world.run_until(20.0)
    assert not world.draining and world.total_dropped > 0


@pytest.mark.parametrize("text,seconds", [("90", 90.0), ("90s", 90.0), ("10m", 600.0), ("1h30m", 5400.0)])
def test_durations_parse(text: str, seconds: float):
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("meltdown,at=1h", "unknown kind"),
        ("overheat", "needs at="),
        ("xid:abc,at=1h", "xid needs its code"),
        ("event:Reboot,at=1h", "ECS event code"),
        ("overheat,at=1h,instance=first", "instance must be"),
        ("overheat,at=soon", "not a duration"),
        ("overheat,at=1h,color=red", "unknown key"),
        ("overheat,at=nan", "not a duration"),
        ("overheat,at=inf", "not a duration"),
        ("overheat,at=5m,extra_c=nan", "extra_c must be between"),
        ("overheat,at=5m,extra_c=1e9", "extra_c must be between"),
        ("engine-crash:oom,at=1h", "takes no :argument"),
        ("engine-crash,at=1h,for=0s", "for must be positive"),
        ("engine-crash,at=1h,for=soon", "not a duration"),
        ("engine-crash,at=1h,share=0.5", "does not apply to engine-crash"),
        ("agent-down:dead,at=1h", "agent-down takes no :argument"),
        ("engine-hang:nccl,at=1h", "engine-hang takes no :argument"),
        ("engine-hang,at=1h,for=5m", "for also for engine-crash"),
        ("agent-down,at=1h,zone=cn-hangzhou-h", "does not apply to agent-down"),
        ("overheat,at=1h,for=5m", "zone, for and share are for"),
        ("bad-launch:image,at=1h", "bad-launch takes no :argument"),
        ("bad-launch,at=1h,instance=2", "instance does not apply to bad-launch"),
        ("bad-launch,at=1h,for=0s", "for must be positive"),
        ("bad-launch,at=1h,extra=5m", "extra is for slow-launch"),
        ("overheat,at=1h,extra=5m", "an overheat's is extra_c"),
        ("slow-launch,at=1h,extra=0s", "extra must be positive"),
        ("slow-launch,at=1h,extra=soon", "is not a duration"),
        ("slow-launch,at=1h,instance=2", "instance does not apply to slow-launch"),
        # keys a kind does not use were taken and ignored (2026-12-07): a reclaim of "instance 2" took its
        # share of the spot instances, an XID's extra_c heated nothing, an event code "." matched no rule
        ("spot-reclaim,at=1h,instance=2", "instance does not apply to spot-reclaim"),
        ("stockout:ecs.gn7i-2x.8xlarge,at=1h,for=1h,instance=i-abc", "instance does not apply to stockout"),
        ("xid:79,at=1h,extra_c=50", "extra_c does not apply to xid"),
        ("engine-hang,at=1h,extra_c=50", "extra_c does not apply to engine-hang"),
        ("stockout:ecs.gn7i-2x.8xlarge,at=1h,for=1h,extra_c=5", "extra_c does not apply to stockout"),
        ("event:SystemFailure.Reboot,at=1h,extra_c=5", "extra_c does not apply to event"),
        ("event:.,at=1h", "ECS event code"),
        ("event:SystemFailure.,at=1h", "ECS event code"),
        ("event:.Reboot,at=1h", "ECS event code"),
    ],
)
def test_bad_fault_specs_name_the_problem(text: str, fragment: str):
    with pytest.raises(FaultSpecError, match=fragment):
        parse_fault_spec(text)


def test_a_bad_launch_is_cloud_wide_and_lasts_to_the_end_or_for_its_duration():
    fault = parse_fault_spec("bad-launch,at=6h")
    assert fault.cloud_wide and fault.at_s == 6 * 3600 and fault.for_s == 0
    assert parse_fault_spec("bad-launch,at=6h,for=3h").for_s == 3 * 3600


def test_a_slow_launch_serves_its_extra_time_after_the_cold_start_while_it_lasts(factory):
    fault = parse_fault_spec("slow-launch,at=10s,for=1m,extra=5m")
    assert fault.cloud_wide and fault.extra_s == 300 and parse_fault_spec("slow-launch,at=1h").extra_s == 600
    states = {"i-a": "InService"}
    world, _ = make_world(factory, states, [], faults=[fault])
    world.run_until(20.0)
    states["i-b"] = "InService"
    world.sync()
    cold = world.p.cold_start_s
    assert world.instances["i-b"].ready_s == pytest.approx(20.0 + cold + 300.0)
    world.run_until(100.0)  # past its minute: launches load in the cold start again
    states["i-c"] = "InService"
    world.sync()
    assert world.instances["i-c"].ready_s == pytest.approx(100.0 + cold)


def test_overlapping_launch_faults_each_keep_their_own_window(factory):
    # a second bad-launch (or slow-launch) replaced the first one's window: a short one inside a long one
    # ended both, and launches after it served (or loaded in the plain cold start)
    faults = [
        parse_fault_spec("bad-launch,at=10s,for=10m"),
        parse_fault_spec("bad-launch,at=20s,for=20s"),
        parse_fault_spec("slow-launch,at=10s,for=10m,extra=5m"),
        parse_fault_spec("slow-launch,at=20s,for=20s,extra=1m"),
    ]
    states = {"i-a": "InService"}
    world, _ = make_world(factory, states, [], faults=faults)
    cold = world.p.cold_start_s
    for at, iid in ((30.0, "i-b"), (60.0, "i-c")):
        world.run_until(at)
        states[iid] = "InService"
        world.sync()
        assert world.instances[iid].never_serves
        assert world.instances[iid].ready_s == pytest.approx(at + cold + 300.0)  # the slowest in force


def test_instances_publish_the_demand_arriving_at_them_over_the_last_period(factory):
    states = {"i-a": "InService", "i-b": "InService"}
    # 4 req/s with prompts of 300 and outputs of 50 for the first 60 s: each instance gets about 2 req/s.
    world, cloud = make_world(factory, states, steady(4.0, 60.0, prompt=300, output=50))
    world.run_until(60.0)
    rates = [cloud.last("vllm_request_rate", i) for i in states]
    assert sum(rates) == pytest.approx(4.0, rel=0.05)
    # the arrivals stop at 60 s: the next period's rate is 0 (a minute's window would still read 3 req/s)
    world.run_until(75.0)
    assert sum(cloud.last("vllm_request_rate", i) for i in states) == 0.0
    assert cloud.last("vllm_prompt_tokens_per_request", "i-a") == pytest.approx(300.0)
    assert cloud.last("vllm_output_tokens_per_request", "i-b") == pytest.approx(50.0)


def test_demand_counts_the_output_an_engine_produces_not_the_traces_nominal_one(factory):
    # max_model_len 8192: a 7,000-token prompt leaves room for 1,192 output tokens, and vLLM stops there; the
    # world published the trace's 3,000, a demand the engines never served
    world, cloud = make_world(
        factory, {"i-a": "InService"}, [Request(1.0, 7000, 3000), Request(2.0, 500, 100)]
    )
    world.run_until(15.0)
    assert cloud.last("vllm_output_tokens_per_request", "i-a") == pytest.approx((8192 - 7000 + 100) / 2)
    assert cloud.last("vllm_prompt_tokens_per_request", "i-a") == pytest.approx(3750.0)


def test_a_prompt_past_max_model_len_is_refused_and_counted_in_no_demand(factory):
    # vLLM answers such a request 400 at its API: its counters, and so the agent's demand, never see it
    requests = [Request(1.0, 9000, 100), Request(2.0, 500, 100)]
    world, cloud = make_world(factory, {"i-a": "InService"}, requests)
    world.run_until(15.0)
    assert world.total_rejected == 1
    assert cloud.last("vllm_request_rate", "i-a") == pytest.approx(1 / 15.0)
    assert cloud.last("vllm_prompt_tokens_per_request", "i-a") == pytest.approx(500.0)
    assert cloud.last("vllm_output_tokens_per_request", "i-a") == pytest.approx(100.0)


def test_demand_rate_falls_to_zero_once_arrivals_stop_and_token_means_are_not_sent(factory):
    world, cloud = make_world(factory, {"i-a": "InService"}, steady(2.0, 30.0))
    world.run_until(30.0)
    assert cloud.last("vllm_request_rate", "i-a") > 1.0
    cloud.custom.clear()
    world.run_until(120.0)  # whole periods without arrivals
    assert cloud.last("vllm_request_rate", "i-a") == 0.0
    sent = {n for n, _, _ in cloud.custom[-4:]}
    assert "vllm_prompt_tokens_per_request" not in sent


def test_latency_percentiles_are_the_agents_over_one_period_from_vllms_buckets(factory):
    from fleet.agent.vllm import histogram_quantile
    from fleet.sim.world import TTFT_BUCKETS_S

    world, cloud = make_world(factory, {"i-a": "InService"}, [Request(1.0, 2000, 1500)])
    world.run_until(15.0)
    inst = world.instances["i-a"]
    # the first token came within the period, the answer is still being written: vLLM counts the TTFT now
    assert inst.completed == 0
    [ttft_ms] = [v for n, _, v in cloud.custom if n == "vllm_ttft_p99_ms"]
    assert "vllm_e2e_p99_ms" not in {n for n, _, _ in cloud.custom}
    # one observation in its bucket: the agent interpolates to 99 % of the way through it, not the exact value
    upper = next(b for b in TTFT_BUCKETS_S if b * 1000 >= ttft_ms)
    lower = max((b for b in TTFT_BUCKETS_S if b < upper), default=0.0)
    expected = histogram_quantile(0.99, {lower: 0.0, upper: 1.0, float("inf"): 1.0})
    assert ttft_ms == pytest.approx(expected * 1000)
    cloud.custom.clear()
    world.run_until(30.0)  # nothing new got a first token: the next period sends no TTFT
    assert "vllm_ttft_p99_ms" not in {n for n, _, _ in cloud.custom}


def test_model_error_makes_each_instance_slower_or_faster_than_the_sizing_engine(factory):
    from fleet.sim.modelerror import ModelError

    # Light load, so each TTFT is one prefill: at half the predicted speed it takes twice as long.
    reqs = steady(0.5, 60.0, prompt=2000, output=50)
    exact, _ = make_world(factory, {"i-a": "InService"}, reqs)
    exact.run_until(120.0)
    cloud = StubCloud()
    world = World(
        cloud,
        "asg-1",
        factory,
        WorldParams(),
        reqs,
        instance_lister=lambda _c, _g: {"i-a": "InService"},
        model_speed=lambda _ordinal: 0.5,
    )
    cloud.world = world
    world.sync(prewarmed=True)
    world.run_until(120.0)
    assert world.instances["i-a"].model_speed == 0.5
    ratio = sum(world.all_ttfts_ms) / sum(exact.all_ttfts_ms)
    assert len(world.all_ttfts_ms) == len(exact.all_ttfts_ms) == 30
    assert ratio == pytest.approx(2.0, rel=0.1)
    assert ModelError.draw(0.0, 1).speed(3) == 1.0


@pytest.mark.parametrize(
    ("body", "closed_min", "respond_by_min", "breached"),
    [
        ({}, 10, 15, False),  # closed before its deadline, nobody responded: no breach
        ({}, 20, 15, True),  # closed after it: a breach
        ({}, None, 15, True),  # open at the run's end, past it
        ({"admitted_at": "2026-03-02T00:05:00+00:00"}, None, 15, False),  # the service responded in time
        ({}, 10, 5, True),  # the incident's own respond_by (set when it opened), not today's config's
    ],
)
def test_the_simulators_incidents_judge_the_response_clock_as_the_sla_report(
    body, closed_min, respond_by_min, breached
):
    from types import SimpleNamespace

    from fleet.config import load_config
    from fleet.service.store import IncidentRecord
    from fleet.service.views import sla_row
    from fleet.sim.cloudview import incidents
    from fleet.sim.scenario import DEFAULT_CONFIG
    from fleet.sim.types import SimOptions

    start = datetime(2026, 3, 2, tzinfo=UTC)
    opts = SimOptions(hours=0.5, start=start)
    closed = None if closed_min is None else start + timedelta(minutes=closed_min)
    rec = IncidentRecord(
        id="inc-1",
        service="fleet",
        group_name="chat",
        instance_id="i-a",
        state="open" if closed is None else "closed",
        detected_at=start,
        updated_at=start,
        respond_by=start + timedelta(minutes=respond_by_min),
        isolate_by=start + timedelta(hours=4),
        closed_at=closed,
        body=body,
    )
    controller = SimpleNamespace(store=SimpleNamespace(incidents=lambda: [rec]))
    spec = load_config(DEFAULT_CONFIG, env={}).groups[0]
    (row,) = incidents(controller, None, opts, spec)
    if not body:  # the report reads acknowledgments, the simulator every response step: the same when none
        assert row["sla_breached"] is sla_row(rec, start + timedelta(hours=0.5))["respond_breached"]
    assert row["sla_breached"] is breached


def test_the_guardrail_check_leaves_out_dead_nodes_a_tick_moved_into_standby_before_the_worlds_sync(factory):
    # Two nodes whose GPUs fell off the bus (hardware XIDs) serve nothing: the service isolates both at once,
    # taking no serving capacity. The tick moves them into Standby; the invariant check runs right after it,
    # before the world's next sync has seen them go. Judged by what the world knew at its last sync, they
    # read as two serving nodes out, past a max_isolated of 1 (a min_size = max_size group, 2026-12-07).
    from types import SimpleNamespace

    from fleet.sim import cloudview
    from fleet.sim.invariants import InvariantChecker

    faults = [parse_fault_spec("xid:79,at=5s,instance=i-a"), parse_fault_spec("xid:48,at=5s,instance=i-b")]
    states = {"i-a": "InService", "i-b": "InService", "i-c": "InService", "i-d": "InService"}
    world, _ = make_world(factory, states, steady(2.0, 60.0), faults)
    world.run_until(30.0)
    moved = {**states, "i-a": "Standby", "i-b": "Standby"}
    ess = SimpleNamespace(
        groups={"asg-1": SimpleNamespace(instance_ids=list(moved), desired_capacity=4)},
        instances={iid: SimpleNamespace(lifecycle_state=s) for iid, s in moved.items()},
        activities={},
    )
    checker = InvariantChecker(min_size=4, max_size=4, max_isolated=1)
    cloudview.check(checker, world, SimpleNamespace(ess=ess), "asg-1", datetime(2026, 3, 2, tzinfo=UTC), 0.0)
    assert checker.violations == []
    # two serving nodes out are still two
    moved = {**states, "i-c": "Standby", "i-d": "Standby"}
    ess.instances = {iid: SimpleNamespace(lifecycle_state=s) for iid, s in moved.items()}
    cloudview.check(checker, world, SimpleNamespace(ess=ess), "asg-1", datetime(2026, 3, 2, tzinfo=UTC), 0.0)
    assert [v["kind"] for v in checker.violations] == ["guardrail"]
