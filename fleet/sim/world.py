"""The simulated world inside the fake cloud: GPU instances that boot, load weights, serve, heat up and fail.

Each instance that appears in the scaling group (the fake ESS creates it) boots and loads its weights for the
config's cold start, then serves requests with continuous batching through one stepwise vLLM engine from the
sizing model. A least-outstanding-requests load balancer spreads arrivals over the instances that are
InService, not in Standby, healthy and loaded; beyond a per-instance queue limit a request is rejected, as a
gateway with ``max_num_waiting`` would. Every publish period each instance writes its metrics to the fake
CloudMonitor, both the node agent's custom metrics and the ``acs_ecs_dashboard`` GPU metrics, with a
temperature from a first-order thermal model; a hot GPU throttles its clock and so slows its engine. Faults
(an overheating GPU, an XID, an ECS system event) are injected at given times.

The world never decides anything about capacity: it only reacts to what the cloud's state says, like real
nodes.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from fleet.agent.vllm import E2E_BUCKETS_S, STALL_S, TPOT_BUCKETS_S, TTFT_BUCKETS_S, histogram_quantile
from fleet.sim.thermal import GpuThermal, ThermalParams
from fleet.sim.workload import Request
from policies import metrics as pm

# the period's observations -> (their buckets, the (published name, quantile) the node agent sends of them)
_LATENCY_METRICS = {
    "ttft": (TTFT_BUCKETS_S, (("vllm_ttft_p99_ms", 0.99),)),
    "tpot": (TPOT_BUCKETS_S, (("vllm_tpot_p99_ms", 0.99),)),
    "e2e": (E2E_BUCKETS_S, (("vllm_e2e_p99_ms", 0.99), ("vllm_e2e_p95_ms", 0.95))),
}

# The XIDs that leave a GPU unusable until it is reset or replaced: those the default isolation rules answer
# (policies.metrics, from NVIDIA's XID catalogue: HARDWARE_XIDS replace, RESET_XIDS reboot). Any other code
# (the application XIDs 13, 31, 43, 45 among them) is raised by a faulty program and the GPU keeps working.
DISABLING_XIDS = frozenset(pm.HARDWARE_XIDS) | frozenset(pm.RESET_XIDS)


class ServingEngine(Protocol):
    """What the world needs of one instance's engine: the sizing package's :class:`sizing.InstanceEngine`."""

    speed_factor: float

    def submit(self, request_id: Any, arrival_s: float, prompt_tokens: int, output_tokens: int) -> bool: ...

    def output_tokens_for(self, prompt_tokens: int, output_tokens: int) -> int: ...

    def advance(self, until_s: float) -> list[Any]: ...

    @property
    def num_waiting(self) -> int: ...

    @property
    def num_running(self) -> int: ...

    @property
    def kv_usage(self) -> float: ...

    @property
    def busy_fraction(self) -> float: ...

    @property
    def memory_busy_fraction(self) -> float: ...


# Builds a fresh engine whose clock starts at the given simulated second, rejecting beyond ``max_waiting``.
EngineFactory = Callable[[float, int], ServingEngine]


@dataclass(frozen=True)
class WorldParams:
    """How the simulated instances behave; the defaults are those of the demo."""

    cold_start_s: float = 180.0  # ordering to serving, from the group's spec
    queue_limit: int = 64  # waiting requests per instance beyond which the engine rejects (vLLM max waiting)
    gpus_per_instance: int = 1
    publish_period_s: float = 15.0  # the node agent's scrape period: its rates and percentiles are over one
    # vLLM takes gpu_memory_utilization (0.90) of the card at start-up: the low end of what a healthy engine
    # reads (NVML adds the driver's reserve on real cards, up to about 93); a rule "above 90" stays quiet here
    gpu_mem_reserved_pct: float = 90.0
    reboot_s: float = 60.0  # an ECS reboot, before the weights load again
    drain_timeout_s: float = 300.0  # the drain lifecycle hook's heartbeat timeout (terraform drain_timeout_s)
    thermal: ThermalParams = field(default_factory=ThermalParams)
    step_s: float = 1.0  # engines advance in steps of this size; the balancer sees load at this resolution
    # Economical mode: ordering the start of a stopped instance to serving (disks kept, weights load from the
    # local disk); None: as long as a fresh instance's cold start.
    restart_s: float | None = None


class SimInstance:
    """One GPU instance as the world sees it: lifecycle, engine, GPUs and the period's latencies."""

    def __init__(
        self,
        instance_id: str,
        appeared_s: float,
        ready_s: float,
        engine: ServingEngine,
        gpus: list[GpuThermal],
    ) -> None:
        self.instance_id = instance_id
        self.appeared_s = appeared_s
        self.ready_s = ready_s
        self.removed_s: float | None = None
        # Latencies observed this publish period (s), as vLLM's histograms count them: a TTFT when the first
        # token is sampled (from the engine, where it reports them), TPOT and E2E when the request ends.
        self.latency: dict[str, list[float]] = {"ttft": [], "tpot": [], "e2e": []}
        self.engine: ServingEngine
        self.streams_ttft: bool  # the engine reports each TTFT as it is sampled (``attach``)
        self.attach(engine)
        self.gpus = gpus
        self.lifecycle = "Pending"  # the ESS lifecycle state last seen ("Rebooting" while ECS restarts it)
        self.hw_fault_xid: int | None = None  # a hardware XID: the GPU is unusable until reset
        # vLLM exited (engine-crash): it serves nothing until this time (inf: until the instance is rebooted
        # or released; a finite time: its supervisor started it again and it has reloaded by then)
        self.engine_down_until_s: float | None = None
        # the node agent stopped (agent-down): it sends nothing until this time (inf: until a reboot starts it
        # again); vLLM serves on, and CloudMonitor's own agent still reports the GPUs (acs_ecs_dashboard)
        self.agent_down_until_s: float | None = None
        # vLLM's engine hangs (engine-hang): since this time nothing it holds moves, while its API server
        # answers (the balancer keeps sending) and its GPUs spin (util 100 %: falsely busy); until a reboot
        self.engine_hung_s: float | None = None
        # launched from a broken image or template (bad-launch): vLLM never comes up, reboots or not
        self.never_serves = False
        self.out_dead = False  # it served nothing when it went into Standby (engine down, GPU lost)
        # XIDs raised since the last publish: the node agent drains NVML's event set each period and sends
        # ``gpu_xid`` (the last code) only in a period that had one, so an application XID's repeat is a new
        # sample (a hardware one keeps being reported while its GPU stays unusable: ``instance_metrics``)
        self.xids: list[int] = []
        self.outstanding = 0
        self.inflight: dict[int, int] = {}  # request id -> the output tokens its engine will produce
        self.busy_s = 0.0  # engine busy time since the last publish
        self.memory_s = 0.0  # of it, the time its iterations spent streaming weights and KV
        self.engine_start_s = appeared_s
        self.drain_until_s = 0.0
        self.last_advance_s = appeared_s
        self.util = 0.0  # GPU utilization over the last publish period, 0..1
        self.memory_util = 0.0  # memory-bandwidth (DRAM active) share over the last publish period, 0..1
        self.completed = 0
        # How much faster (>1) or slower than the sizing engine this instance's engine runs (--model-error).
        self.model_speed = 1.0
        # Arrivals since the last publish (count, prompt tokens, output tokens), and the last period's totals:
        # the node agent's demand metrics are over one period, the difference of vLLM's counters between two
        # scrapes (fleet.agent.vllm).
        self.arrived = [0, 0, 0]
        self.demand: tuple[int, int, int] | None = None

    def attach(self, engine: ServingEngine) -> None:
        """Serve with ``engine`` from now on, its first tokens reported as they come where it can."""
        self.engine = engine
        self.streams_ttft = hasattr(engine, "first_tokens")
        if self.streams_ttft:
            engine.first_tokens = []  # type: ignore[attr-defined]  # the sizing engine's optional report
        for values in self.latency.values():
            values.clear()

    def speed(self) -> float:
        """The engine's speed: the slowest GPU's clock ratio (tensor-parallel ranks run in lock step)."""
        return min(g.clock_ratio for g in self.gpus)

    def serving(self, now_s: float) -> bool:
        return (
            self.lifecycle == "InService"
            and self.hw_fault_xid is None
            and now_s >= self.ready_s
            and self.removed_s is None
            and not self.engine_down(now_s)
        )

    def engine_down(self, now_s: float) -> bool:
        """vLLM is not running (crashed, and not yet started again by its supervisor or a reboot)."""
        return self.engine_down_until_s is not None and now_s < self.engine_down_until_s

    def agent_down(self, now_s: float) -> bool:
        """The node agent is not running (stopped, and not yet started again by itself or a reboot)."""
        return self.agent_down_until_s is not None and now_s < self.agent_down_until_s


@dataclass
class Fault:
    """An injected fault: ``kind`` ``overheat``, ``xid``, ``event``, ``engine-crash``, ``engine-hang`` or
    ``agent-down`` on an instance (``target`` an index or instance id), or a capacity fault on the cloud."""

    kind: str
    at_s: float
    target: str = "0"
    xid: int = 79
    event_code: str = "SystemMaintenance.Reboot"
    extra_c: float = 35.0
    fired: bool = False
    instance_id: str | None = None
    # Capacity faults (issue 17), fired on the cloud rather than on an instance:
    instance_type: str = ""  # stockout: the type sold out
    zone: str | None = None  # stockout: one zone, or every zone
    # stockout: how long; engine-crash: until its supervisor has vLLM serving again, agent-down: until the
    # agent runs again (0: never by itself)
    for_s: float = 0.0
    share: float = 0.25  # spot-reclaim: the share of the group's spot instances reclaimed
    product: str = ""  # api-outage: the cloud product whose API answers 503 (ess, ecs or cms)
    extra_s: float = 600.0  # slow-launch: how much longer than the cold start a launch takes to serve

    @property
    def cloud_wide(self) -> bool:
        return self.kind in CLOUD_FAULT_KINDS


@dataclass
class MinuteStats:
    """Requests by the minute they arrived in: their TTFTs (rejected or lost ones as infinity)."""

    arrivals: int = 0
    rejected: int = 0
    completed: int = 0
    ttfts_ms: list[float] = field(default_factory=list)


class World:
    """The requests and the instances; driven by :meth:`run_until` from the runner's virtual-time loop."""

    def __init__(
        self,
        cloud: Any,
        group_id: str,
        engine_factory: EngineFactory,
        params: WorldParams,
        requests: Sequence[Request],
        faults: Iterable[Fault] = (),
        *,
        instance_lister: Callable[[Any, str], dict[str, str]] | None = None,
        model_speed: Callable[[int], float] | None = None,
    ) -> None:
        self.cloud = cloud
        self.group_id = group_id
        self.engine_factory = engine_factory
        self.p = params
        self.requests = requests
        self.next_req = 0
        self.faults = sorted(faults, key=lambda f: f.at_s)
        self._outages: list[tuple[float, Any]] = []  # (end, the fake's fault rule) of api-outages under way
        self.list_instances = instance_lister or list_group_instances
        self.instances: dict[str, SimInstance] = {}
        self.gone: list[SimInstance] = []
        self.draining: list[SimInstance] = []  # left the group, finishing their in-flight requests
        self.minutes: dict[int, MinuteStats] = {}
        self.now_s = 0.0
        self.next_publish_s = 0.0
        self.total_requests = 0
        self.total_rejected = 0
        self.total_dropped = 0
        self.total_completed = 0
        # still in flight when the run (and its drain) ended: a hung engine's, or one past the drain
        self.total_unfinished = 0
        self.all_ttfts_ms: list[float] = []
        self.all_tpots_ms: list[float] = []
        self.fault_log: list[dict[str, Any]] = []
        self._req_seq = 0
        self._arrival: dict[int, float] = {}
        self.model_speed = model_speed
        self.instances_seen = 0
        # bad-launch: instances launched within [from, until) never get vLLM up (a broken image or template)
        self._bad_launch: list[tuple[float, float]] = []
        # slow-launch: instances launched within [from, until) serve this much later than the cold start
        self._slow_launch: list[tuple[float, float, float]] = []

    # ------------------------------------------------------------------------------------------- lifecycle

    def sync(self, *, prewarmed: bool = False) -> None:
        """Match the world's instances to the group's: new ones boot and load, vanished ones stop (their
        in-flight requests are lost), and one that ECS restarts loses its work and loads again."""
        states = self.list_instances(self.cloud, self.group_id)
        now = self.now_s
        for iid, state in states.items():
            inst = self.instances.get(iid)
            if inst is None:
                ready = now if prewarmed else now + self.p.cold_start_s
                if not prewarmed:
                    # overlapping slow-launch windows: the slowest of those in force
                    ready += max((w[2] for w in self._slow_launch if _during(w[:2], now)), default=0.0)
                gpus = [GpuThermal.at_idle(self.p.thermal) for _ in range(self.p.gpus_per_instance)]
                inst = SimInstance(iid, now, ready, self.engine_factory(now, self.p.queue_limit), gpus)
                if self.model_speed is not None:
                    inst.model_speed = self.model_speed(self.instances_seen)
                if any(_during(w, now) for w in self._bad_launch):
                    inst.never_serves = True
                    inst.engine_down_until_s = math.inf
                self.instances_seen += 1
                self.instances[iid] = inst
            if state == "Standby" and inst.lifecycle != "Standby":
                # the guardrail rations serving capacity: one that served nothing as it went out took none
                inst.out_dead = not self._serving_engine(inst)
            if state == "Rebooting" and inst.lifecycle != "Rebooting":
                self._reboot(inst)
            elif state == "Stopped" and inst.lifecycle != "Stopped":
                # Economical mode's scale-in: the drain hook lets its requests finish, as on a release.
                inst.ready_s = math.inf
                inst.drain_until_s = now + self.p.drain_timeout_s
            elif state in ("Pending", "Pending:Wait") and inst.lifecycle in ("Rebooting", "Stopped"):
                # Economical mode: a stopped instance is started again; it serves after the restart time.
                if inst.lifecycle == "Stopped":
                    self._fresh_engine(inst)
                restart_s = self.p.cold_start_s if self.p.restart_s is None else self.p.restart_s
                inst.ready_s = now + restart_s
                self.fault_log.append({"at_s": now, "instance_id": iid, "event": "restarted"})
            inst.lifecycle = state
        for iid in [i for i in self.instances if i not in states]:
            inst = self.instances.pop(iid)
            was = inst.lifecycle
            inst.lifecycle = "Removed"
            if inst.outstanding and inst.hw_fault_xid is None and was != "Rebooting":
                # The group's drain lifecycle hook (terraform module) holds the instance until its in-flight
                # requests finish, up to the hook's timeout; the balancer already stopped sending to it.
                inst.drain_until_s = now + self.p.drain_timeout_s
                self.draining.append(inst)
            else:
                self._retire(inst)

    def _retire(self, inst: SimInstance) -> None:
        self._drop_inflight(inst)
        inst.removed_s = self.now_s
        self.gone.append(inst)

    def _reboot(self, inst: SimInstance) -> None:
        """An ECS reboot: in-flight work is lost; the GPU resets, which clears a hardware XID and the injected
        cooling fault (a stuck fan controller); the weights load again once the instance is back."""
        self._fresh_engine(inst)
        # Back after the reboot plus the weights load (the cold start less the instance's first boot).
        inst.ready_s = self.now_s + self.p.reboot_s + max(0.0, self.p.cold_start_s - self.p.reboot_s)
        self.fault_log.append({"at_s": self.now_s, "instance_id": inst.instance_id, "event": "rebooted"})

    def _fresh_engine(self, inst: SimInstance) -> None:
        """The instance's vLLM starts over (a reboot, or a stopped instance started again): what was still in
        flight is lost and the GPUs reset (clearing a hardware XID and the injected cooling fault)."""
        self._new_engine(inst)
        inst.hw_fault_xid = None
        inst.engine_down_until_s = math.inf if inst.never_serves else None  # a reboot mends no image
        inst.agent_down_until_s = None
        inst.engine_hung_s = None
        inst.xids.clear()
        for g in inst.gpus:
            g.extra_c = 0.0

    def _new_engine(self, inst: SimInstance) -> None:
        """vLLM's process ends: what it had in flight is lost, and the next process starts empty."""
        self._drop_inflight(inst)
        inst.attach(self.engine_factory(self.now_s, self.p.queue_limit))
        inst.engine_start_s = inst.last_advance_s = self.now_s

    def _drop_inflight(self, inst: SimInstance) -> None:
        for rid in inst.inflight:
            self._minute(self._arrival.pop(rid)).ttfts_ms.append(math.inf)
            self.total_dropped += 1
        inst.inflight.clear()
        inst.outstanding = 0

    def _minute(self, t_s: float) -> MinuteStats:
        m = int(t_s // 60)
        stats = self.minutes.get(m)
        if stats is None:
            stats = self.minutes[m] = MinuteStats()
        return stats

    # ------------------------------------------------------------------------------------------- the loop

    def run_until(self, end_s: float) -> None:
        """Advance the world to ``end_s`` in engine steps: faults, arrivals through the balancer, engines,
        temperatures, and the metrics every publish period."""
        while self.now_s < end_s - 1e-9:
            step_end = min(end_s, self.now_s + self.p.step_s)
            self._fire_faults(step_end)
            self._dispatch(step_end)
            for inst in self.instances.values():
                self._advance_instance(inst, step_end)
                if inst.outstanding and inst.lifecycle == "Stopped" and step_end >= inst.drain_until_s:
                    self._drop_inflight(inst)  # the drain hook's timeout
            if self.draining:
                for inst in self.draining:
                    self._advance_instance(inst, step_end)
                done = [i for i in self.draining if not i.outstanding or step_end >= i.drain_until_s]
                for inst in done:
                    self.draining.remove(inst)
                    self._retire(inst)
            self.now_s = step_end
            if self.now_s >= self.next_publish_s - 1e-9:
                self.publish()
                self.next_publish_s += self.p.publish_period_s

    def _dispatch(self, until_s: float) -> None:
        """The balancer: each arrival goes to the serving instance with the fewest outstanding requests."""
        reqs = self.requests
        i = self.next_req
        if i >= len(reqs) or reqs[i].arrival_s >= until_s:
            return
        now = self.now_s
        pool = [inst for inst in self.instances.values() if inst.serving(now)]
        while i < len(reqs) and reqs[i].arrival_s < until_s:
            r = reqs[i]
            i += 1
            self.total_requests += 1
            stats = self._minute(r.arrival_s)
            stats.arrivals += 1
            if not pool:  # no backend: the gateway answers 503 at once
                stats.rejected += 1
                stats.ttfts_ms.append(math.inf)
                self.total_rejected += 1
                continue
            best = min(pool, key=_OUTSTANDING)
            self._req_seq += 1
            rid = self._req_seq
            self._arrival[rid] = r.arrival_s
            # what the engine will produce: a request stops where prompt + output reach max_model_len
            output = best.engine.output_tokens_for(r.prompt_tokens, r.output_tokens)
            accepted = best.engine.submit(rid, max(r.arrival_s, now), r.prompt_tokens, r.output_tokens)
            best.inflight[rid] = output
            best.outstanding += 1
            if accepted:  # a prompt past max_model_len is refused at vLLM's API: none of its counters see it
                arrived = best.arrived
                arrived[0] += 1
                arrived[1] += r.prompt_tokens
                arrived[2] += output
        self.next_req = i

    def _advance_instance(self, inst: SimInstance, step_end: float) -> None:
        # An idle engine need not be advanced: it jumps to the next arrival by itself.
        if inst.outstanding and inst.hw_fault_xid is None and inst.removed_s is None:
            if inst.engine_hung_s is not None:
                return  # hung: nothing in it moves
            eng = inst.engine
            speed = inst.speed() * inst.model_speed
            if eng.speed_factor != speed:
                eng.speed_factor = speed
            for done in eng.advance(step_end):
                self._finished(inst, done)
            if inst.streams_ttft:
                firsts = eng.first_tokens  # type: ignore[attr-defined]
                inst.latency["ttft"].extend(firsts)
                firsts.clear()
            span = step_end - max(inst.last_advance_s, inst.engine_start_s)
            inst.busy_s += eng.busy_fraction * span
            inst.memory_s += eng.memory_busy_fraction * span
            inst.last_advance_s = step_end

    def _finished(self, inst: SimInstance, done: Any) -> None:
        rid = done.request_id
        if inst.inflight.pop(rid, None) is None:
            return
        arrival_s = self._arrival.pop(rid)
        inst.outstanding -= 1
        stats = self._minute(arrival_s)
        if done.rejected:  # the instance's waiting queue was full
            stats.rejected += 1
            stats.ttfts_ms.append(math.inf)
            self.total_rejected += 1
            return
        ttft_ms = done.ttft_s * 1000.0
        tpot_ms = done.tpot_s * 1000.0
        inst.completed += 1
        if not inst.streams_ttft:
            inst.latency["ttft"].append(done.ttft_s)
        inst.latency["tpot"].append(done.tpot_s)
        inst.latency["e2e"].append(done.e2e_s)
        stats.ttfts_ms.append(ttft_ms)
        stats.completed += 1
        self.total_completed += 1
        self.all_ttfts_ms.append(ttft_ms)
        self.all_tpots_ms.append(tpot_ms)

    # ------------------------------------------------------------------------------------------- metrics

    def _engine_running(self, inst: SimInstance) -> bool:
        """Whether the instance's vLLM runs: loaded, not crashed, and not lost with its GPU to a hardware XID
        (CUDA errors kill vLLM's workers; it stays down until the GPU is reset)."""
        return self.now_s >= inst.ready_s and not inst.engine_down(self.now_s) and inst.hw_fault_xid is None

    def served_nothing(self, states: Mapping[str, str]) -> frozenset[str]:
        """The instances whose isolation took no serving capacity (the guardrail's count leaves them out):
        launched broken, or serving nothing as they went into Standby. One that ``states`` (the group's
        lifecycle states now) shows in Standby before the world's next sync has seen it go there is judged
        now, as that sync will judge it: a tick moves instances between the world's syncs."""
        return frozenset(
            iid
            for iid, inst in self.instances.items()
            if inst.never_serves
            or inst.out_dead
            or (
                states.get(iid) == "Standby"
                and inst.lifecycle != "Standby"
                and not self._serving_engine(inst)
            )
        )

    def _serving_engine(self, inst: SimInstance) -> bool:
        """Whether the instance's engine can serve now: running (``_engine_running``) and not hung."""
        return self._engine_running(inst) and inst.engine_hung_s is None

    def instance_metrics(self, inst: SimInstance) -> tuple[dict[str, float], dict[str, float]]:
        """(custom, acs_ecs_dashboard) metrics of one instance now, as its agents would report them."""
        eng = inst.engine
        up = self._engine_running(inst)
        # the agent reads a hung engine (work in flight, no progress for its STALL_S) as down, and still
        # publishes what vLLM's /metrics says
        stalled = (
            up
            and inst.engine_hung_s is not None
            and inst.outstanding > 0
            and self.now_s - inst.engine_hung_s >= STALL_S
        )
        custom = {
            "vllm_up": 0.0 if stalled or not up else 1.0,
            "gpu_throttle_reasons": float(max(g.throttle_reasons for g in inst.gpus)),
            "gpu_sm_clock_ratio": inst.speed(),
            # the share of the period the engine's iterations spent streaming weights and KV (DCGM's DRAM
            # active): high while decode is bandwidth-bound, low under compute-bound prefill
            "gpu_mem_bw_util": 100.0 * inst.memory_util if up else 0.0,
        }
        if up:  # with no vLLM to scrape the agent sends only its GPU readings: no queue, latency or demand
            custom.update(
                {
                    "vllm_num_requests_waiting": float(eng.num_waiting),
                    "vllm_num_requests_running": float(eng.num_running),
                    "vllm_kv_cache_usage_pct": 100.0 * eng.kv_usage,
                    **self.demand_metrics(inst),
                    **self.latency_metrics(inst),
                }
            )
        if inst.xids:
            custom["gpu_xid"] = float(inst.xids[-1])
        elif inst.hw_fault_xid is not None:
            # a GPU a hardware XID left unusable stays faulted until it is reset: reported every period, as
            # the agent reports a lost GPU every period (and a DCGM-style "last XID" source keeps its code)
            custom["gpu_xid"] = float(inst.hw_fault_xid)
        dash = {
            "instance_gpu_gpu_usedutilization": 100.0 * inst.util,
            "instance_gpu_memory_usedutilization": self.p.gpu_mem_reserved_pct,
            "instance_gpu_gpu_temperature": max(g.temperature_c for g in inst.gpus),
            "instance_gpu_power_readings_power_draw": sum(g.power_w(inst.util) for g in inst.gpus)
            / len(inst.gpus),
        }
        return custom, dash

    def latency_metrics(self, inst: SimInstance) -> dict[str, float]:
        """The node agent's percentiles over the last period: from vLLM's histogram buckets of the period's
        observations, interpolated as the agent does (``fleet.agent.vllm.histogram_quantile``); a period
        in which nothing was observed sends none."""
        out: dict[str, float] = {}
        for key, (bounds, sent) in _LATENCY_METRICS.items():
            values = sorted(inst.latency[key])
            if not values:
                continue
            cumulative = {le: float(bisect_right(values, le)) for le in bounds}
            cumulative[math.inf] = float(len(values))
            for name, q in sent:
                value = histogram_quantile(q, cumulative)
                if value is not None:
                    out[name] = value * 1000.0
        return out

    def demand_metrics(self, inst: SimInstance) -> dict[str, float]:
        """The node agent's demand signals over the last period, as it derives them from the difference of
        vLLM's counters between two scrapes (``fleet.agent.vllm``): arrivals per second at this instance and,
        when any arrived, the mean prompt and output tokens per request (a mean of nothing is not sent). The
        output is what the engine produces (stopped at ``max_model_len``), not the trace's nominal length."""
        if inst.demand is None:
            return {}
        n, prompt, output = inst.demand
        out = {"vllm_request_rate": n / self.p.publish_period_s}
        if n:
            out["vllm_prompt_tokens_per_request"] = prompt / n
            out["vllm_output_tokens_per_request"] = output / n
        return out

    def _roll_demand(self, inst: SimInstance) -> None:
        inst.demand = (inst.arrived[0], inst.arrived[1], inst.arrived[2])
        inst.arrived = [0, 0, 0]

    def publish(self) -> None:
        """Each instance's metrics for the last period, as the node agent and the ECS monitoring agent send
        them. Instances still booting publish nothing: their agents are not up yet. A booted instance whose
        vLLM is still loading the weights (new, rebooted, or started again) sends what the agents send
        without vLLM: its GPUs' readings and ``vllm_up`` 0."""
        now = self.now_s
        ts_ms = int(self.cloud.now().timestamp() * 1000)
        period = self.p.publish_period_s
        for inst in self.instances.values():
            inst.util = min(1.0, inst.busy_s / period) if inst.hw_fault_xid is None else 0.0
            inst.memory_util = min(1.0, inst.memory_s / period) if inst.hw_fault_xid is None else 0.0
            if inst.engine_hung_s is not None:
                inst.util = 1.0  # a hung collective spins: the GPUs read busy while nothing moves
                inst.memory_util = 0.0  # on the interconnect, not on memory
            inst.busy_s = inst.memory_s = 0.0
            # Utilization is constant over the period, so one exponential step per period is exact.
            for g in inst.gpus:
                g.step(period, inst.util)
            if inst.lifecycle not in ("InService", "Standby"):
                continue
            if now >= inst.ready_s:
                self._roll_demand(inst)  # from the first period vLLM is up: its counters start then
            custom, dash = self.instance_metrics(inst)
            for values in inst.latency.values():
                values.clear()  # the next period's histograms start empty
            inst.xids.clear()  # drained: the next period reports only its own
            dims = {"instanceId": inst.instance_id}
            if inst.agent_down(now):
                custom = {}  # the node agent is not running: none of its metrics reach CloudMonitor
            for name, value in custom.items():
                self.cloud.put_custom_metric(name, dims, value, ts_ms)
            for name, value in dash.items():
                self.cloud.publish_metric("acs_ecs_dashboard", name, dims, value, ts_ms)

    # ------------------------------------------------------------------------------------------- faults

    def _fire_faults(self, until_s: float) -> None:
        for end_s, rule in self._outages:
            if end_s < until_s:
                self.cloud.remove_fault(rule)
                self.fault_log.append({"at_s": end_s, "instance_id": None, "event": "api-outage-over"})
        self._outages = [o for o in self._outages if o[0] >= until_s]
        for f in self.faults:
            if f.fired or f.at_s >= until_s:
                continue
            if f.cloud_wide:
                f.fired = True
                self._cloud_fault(f)
                continue
            inst = self._fault_target(f)
            if inst is None:
                continue  # no instance to hit yet: try again next step
            f.fired = True
            f.instance_id = inst.instance_id
            self.inject(f, inst)

    def _cloud_fault(self, f: Fault) -> None:
        """A stock-out of a type (for a while), a spot reclaim of a share of the group's spot instances, or an
        outage of a product's API (for a while)."""
        from datetime import UTC, datetime

        entry: dict[str, Any] = {"at_s": self.now_s, "instance_id": None, "event": f.kind}
        now = datetime.fromtimestamp(self.cloud.now_s(), UTC)
        if f.kind == "api-outage":
            # the region's API for the product fails every call with a 503 until it is lifted
            rule = self.cloud.inject_fault(None, code="ServiceUnavailable", status=503, product=f.product)
            self._outages.append((self.now_s + f.for_s, rule))
            entry.update(product=f.product, for_s=f.for_s)
        elif f.kind == "bad-launch":
            # a window of its own: an overlapping one neither cuts it short nor stretches it
            self._bad_launch.append((self.now_s, self.now_s + f.for_s if f.for_s > 0 else math.inf))
            if f.for_s > 0:
                entry["for_s"] = f.for_s
        elif f.kind == "slow-launch":
            self._slow_launch.append(
                (self.now_s, self.now_s + f.for_s if f.for_s > 0 else math.inf, f.extra_s)
            )
            entry["extra_s"] = f.extra_s
            if f.for_s > 0:
                entry["for_s"] = f.for_s
        elif f.kind == "stockout":
            end = datetime.fromtimestamp(self.cloud.now_s() + f.for_s, UTC)
            self.cloud.schedule_sold_out(f.instance_type, now, end, zone_id=f.zone)
            entry.update(instance_type=f.instance_type, zone=f.zone, for_s=f.for_s)
        else:
            spot = sorted(
                iid
                for iid in self.instances
                if (e := self.cloud.ecs.instances.get(iid)) is not None
                and e.spot_strategy != "NoSpot"
                and not e.lock_reasons
            )
            victims = spot[: math.ceil(len(spot) * f.share)] if spot else []
            for iid in victims:
                self.cloud.reclaim_spot(iid)
            entry.update(share=f.share, reclaimed=victims)
        self.fault_log.append(entry)

    def _fault_target(self, f: Fault) -> SimInstance | None:
        if f.target.startswith("i-"):
            return self.instances.get(f.target)
        serving = sorted(
            (i for i in self.instances.values() if i.serving(self.now_s)),
            key=lambda i: (i.appeared_s, i.instance_id),
        )
        if not serving:
            return None
        return serving[int(f.target) % len(serving)]

    def inject(self, f: Fault, inst: SimInstance) -> None:
        """Apply one fault to one instance now."""
        entry: dict[str, Any] = {"at_s": self.now_s, "instance_id": inst.instance_id, "event": f.kind}
        if f.kind == "overheat":
            inst.gpus[0].extra_c = f.extra_c
            entry["extra_c"] = f.extra_c
        elif f.kind == "xid":
            inst.xids.append(f.xid)
            entry["xid"] = f.xid
            if f.xid in DISABLING_XIDS:
                inst.hw_fault_xid = f.xid
                self._drop_inflight(inst)
        elif f.kind == "event":
            self.cloud.add_system_event(inst.instance_id, f.event_code)
            entry["code"] = f.event_code
        elif f.kind == "engine-crash":
            # vLLM exits (a CUDA OOM, an NCCL timeout); the next process serves only once a supervisor or
            # a reboot starts it
            self._new_engine(inst)
            inst.engine_down_until_s = self._until(f, entry)
        elif f.kind == "engine-hang":
            inst.engine_hung_s = self.now_s
        elif f.kind == "agent-down":
            # the node agent exits (or the node loses its way to CloudMonitor): its metrics stop
            inst.agent_down_until_s = self._until(f, entry)
        else:  # parse_fault_spec only lets the instance kinds through
            raise ValueError(f"unknown fault kind {f.kind!r}")
        self.fault_log.append(entry)

    def _until(self, f: Fault, entry: dict[str, Any]) -> float:
        """When a fault with ``for`` ends by itself (noted in its log entry); without one, never."""
        if f.for_s <= 0:
            return math.inf
        entry["for_s"] = f.for_s
        return self.now_s + f.for_s

    # ------------------------------------------------------------------------------------------- views

    def serving_count(self) -> int:
        return sum(1 for i in self.instances.values() if i.serving(self.now_s))

    def finish(self, drain_s: float = 900.0) -> None:
        """End of the run: no more arrivals; the requests in flight run to completion (up to ``drain_s``) so
        that their TTFT counts in the minute they arrived in; whatever is still unfinished counts as a
        miss (a hung engine's never run)."""
        end = self.now_s + drain_s
        for inst in [*self.instances.values(), *self.draining]:
            if inst.outstanding and inst.hw_fault_xid is None and inst.engine_hung_s is None:
                for done in inst.engine.advance(end):
                    self._finished(inst, done)
            for rid in inst.inflight:
                self._minute(self._arrival[rid]).ttfts_ms.append(math.inf)
                self.total_unfinished += 1


_OUTSTANDING = operator.attrgetter("outstanding")


def list_group_instances(cloud: Any, group_id: str) -> dict[str, str]:
    """The group's instances and their ESS lifecycle states, read from the fake's backend; an instance whose
    ECS status is not Running (a reboot in progress) shows as ``Rebooting``."""
    raise NotImplementedError("bound once the fake cloud's backend lands")


# ------------------------------------------------------------------------------------------------ fault SPEC

FAULT_KINDS = (
    "overheat",
    "xid",
    "event",
    "engine-crash",
    "engine-hang",
    "agent-down",
    "bad-launch",
    "slow-launch",
    "stockout",
    "spot-reclaim",
    "api-outage",
)
CLOUD_FAULT_KINDS = ("stockout", "spot-reclaim", "api-outage", "bad-launch", "slow-launch")
# The faults that strike one instance: what a baseline, which isolates nothing, leaves as an open incident.
NODE_FAULT_KINDS = tuple(k for k in FAULT_KINDS if k not in CLOUD_FAULT_KINDS)


def unfired(faults: Iterable[Fault]) -> list[str]:
    """What each fault that never fired aimed at, and why it found nothing, in a few words each."""
    out = []
    for f in faults:
        if f.fired:
            continue
        at = f"{f.kind} at {f.at_s / 60:g} min"
        if f.target.startswith("i-"):
            out.append(f"{at} on {f.target}: no such instance in the group from then to the end")
        else:
            out.append(f"{at} on instance {f.target}: no instance serving from then to the end")
    return out


def injected(fault_log: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fault log's injected faults, one entry each, without what the world notes beside them (an ECS
    reboot, a stopped instance started again, the end of an API outage)."""
    return [entry for entry in fault_log if entry["event"] in FAULT_KINDS]


# api-outage: the products whose API the service calls; the world itself writes past the API
OUTAGE_PRODUCTS = ("ess", "ecs", "cms")
_FAULT_KEYS = {"at", "instance", "extra_c", "zone", "for", "share", "extra"}


class FaultSpecError(ValueError):
    """A fault SPEC that cannot be used; the message names the problem in one line."""


def parse_duration_s(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``3h``, ``1h30m``, ``1d`` -> seconds (the policy's own duration syntax)."""
    from policies.spec import parse_duration

    return parse_duration(text)


# NVIDIA's XID codes run to about 150 (the driver's "Xid Errors" catalogue); a code far past that is a typo.
MAX_XID = 999


def parse_fault_spec(text: str) -> Fault:
    """``overheat,at=10h[,instance=N|i-...][,extra_c=35]``, ``xid:79,at=3h``,
    ``event:SystemFailure.Reboot,at=5h``, ``engine-crash,at=2h[,for=10m]`` (vLLM exits; with ``for`` its
    supervisor has it serving again after that long, without it stays down until a reboot),
    ``agent-down,at=2h[,for=10m]`` (the node agent stops sending; vLLM serves on; the same ``for``),
    ``engine-hang,at=2h`` (vLLM's engine stops moving while its API server answers, until a reboot),
    ``api-outage:cms,at=6h,for=30m`` (the product's API answers every call with a 503 meanwhile),
    ``bad-launch,at=6h[,for=3h]`` (every instance launched meanwhile never gets vLLM up: a broken image),
    ``slow-launch,at=6h[,for=3h][,extra=10m]`` (every instance launched meanwhile serves ``extra`` later than
    the cold start: a slow model store).

    ``instance`` picks the Nth serving instance (oldest first, modulo their count) when the fault fires, or an
    instance id; it defaults to 0.
    """
    head, _, rest = text.strip().partition(",")
    kind, sep, arg = head.partition(":")
    kind = kind.strip().lower()
    if kind not in FAULT_KINDS:
        raise FaultSpecError(f"fault {text!r}: unknown kind {kind!r}; one of {', '.join(FAULT_KINDS)}")
    params: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise FaultSpecError(f"fault {text!r}: {item!r} is not key=value")
        key = key.strip().lower()
        if key in params:
            raise FaultSpecError(f"fault {text!r}: {key} is given twice")
        params[key] = value.strip()
    unknown = sorted(set(params) - _FAULT_KEYS)
    if unknown:
        raise FaultSpecError(
            f"fault {text!r}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_FAULT_KEYS))}"
        )
    if "at" not in params:
        raise FaultSpecError(f"fault {text!r}: needs at=TIME from the start, e.g. at=10h30m")
    try:
        at_s = parse_duration_s(params["at"])
    except ValueError:
        raise FaultSpecError(
            f"fault {text!r}: at={params['at']!r} is not a duration like 90s, 10m, 3h"
        ) from None
    fault = Fault(kind=kind, at_s=at_s, target=params.get("instance", "0"))
    if not (fault.target.startswith("i-") or fault.target.isdigit()):
        raise FaultSpecError(f"fault {text!r}: instance must be an index (0, 1, ...) or an instance id i-...")
    if "extra" in params and kind != "slow-launch":
        hint = " (an overheat's is extra_c)" if kind == "overheat" else ""
        raise FaultSpecError(f"fault {text!r}: extra is for slow-launch{hint}")
    if "extra_c" in params and kind != "overheat":
        raise FaultSpecError(f"fault {text!r}: extra_c does not apply to {kind} (it is an overheat's)")
    if "instance" in params and kind in CLOUD_FAULT_KINDS:
        # a cloud-wide fault picks no instance: a spot reclaim takes its share of the group's spot ones
        raise FaultSpecError(f"fault {text!r}: instance does not apply to {kind}")
    _kind_argument(text, fault, bool(sep), arg, params)
    if "extra_c" in params:
        try:
            fault.extra_c = float(params["extra_c"])
        except ValueError:
            raise FaultSpecError(f"fault {text!r}: extra_c must be a number of degrees") from None
        if not -100.0 <= fault.extra_c <= 200.0:  # NaN fails this too
            raise FaultSpecError(f"fault {text!r}: extra_c must be between -100 and 200 degrees")
    return fault


def _kind_argument(text: str, fault: Fault, sep: bool, arg: str, params: dict[str, str]) -> None:
    """What follows ``KIND:`` (and the kind's own keys)."""
    kind = fault.kind
    if kind in ("engine-crash", "agent-down"):
        _timed_node_fault(text, fault, arg, params)
    elif kind == "api-outage":
        _api_outage(text, fault, arg, params)
    elif kind in ("bad-launch", "slow-launch"):
        _launch_fault(text, fault, arg, params)
    elif kind in CLOUD_FAULT_KINDS or {"zone", "for", "share"} & set(params):
        _capacity_fault(text, fault, arg, params)
    elif kind == "xid":
        try:
            fault.xid = int(arg)
        except ValueError:
            raise FaultSpecError(f"fault {text!r}: xid needs its code, e.g. xid:79") from None
        if not 1 <= fault.xid <= MAX_XID:
            raise FaultSpecError(f"fault {text!r}: an XID code is between 1 and {MAX_XID}, got {fault.xid}")
    elif kind == "event":
        category, dot, name = arg.partition(".")
        if not (category.strip() and dot and name.strip()):
            raise FaultSpecError(
                f"fault {text!r}: event needs an ECS event code, e.g. event:SystemFailure.Reboot"
            )
        fault.event_code = arg
    elif sep and arg:
        raise FaultSpecError(f"fault {text!r}: {kind} takes no :argument")


def _timed_node_fault(text: str, fault: Fault, arg: str, params: dict[str, str]) -> None:
    """``engine-crash|agent-down,at=T[,instance=N][,for=D]``: down until a reboot, or for D."""
    kind = fault.kind
    if arg:
        raise FaultSpecError(f"fault {text!r}: {kind} takes no :argument")
    misplaced = {"zone", "share", "extra_c"} & set(params)
    if misplaced:
        raise FaultSpecError(f"fault {text!r}: {', '.join(sorted(misplaced))} does not apply to {kind}")
    if "for" in params:
        fault.for_s = _for_s(text, params, "5m, 1h", " (leave it out: down until a reboot)")


def _api_outage(text: str, fault: Fault, arg: str, params: dict[str, str]) -> None:
    """``api-outage:PRODUCT,at=T,for=D``: every call to the product's API answers 503 for D."""
    if arg not in OUTAGE_PRODUCTS:
        raise FaultSpecError(
            f"fault {text!r}: api-outage needs the product, one of {', '.join(OUTAGE_PRODUCTS)} "
            "(e.g. api-outage:cms)"
        )
    misplaced = {"zone", "share", "extra_c", "instance"} & set(params)
    if misplaced:
        raise FaultSpecError(f"fault {text!r}: {', '.join(sorted(misplaced))} does not apply to api-outage")
    if "for" not in params:
        raise FaultSpecError(f"fault {text!r}: api-outage needs for=DURATION, e.g. for=20m")
    fault.for_s = _for_s(text, params, "10m, 1h")
    fault.product = arg


def _for_s(text: str, params: dict[str, str], examples: str, hint: str = "") -> float:
    """The fault's ``for=`` duration in seconds, positive."""
    try:
        for_s = parse_duration_s(params["for"])
    except ValueError:
        raise FaultSpecError(
            f"fault {text!r}: for={params['for']!r} is not a duration like {examples}"
        ) from None
    if for_s <= 0:
        raise FaultSpecError(f"fault {text!r}: for must be positive{hint}")
    return for_s


def _during(window: tuple[float, float], now_s: float) -> bool:
    """Whether ``now_s`` falls in a launch fault's ``[from, until)``."""
    return window[0] <= now_s < window[1]


def _launch_fault(text: str, fault: Fault, arg: str, params: dict[str, str]) -> None:
    """``bad-launch,at=T[,for=D]``: every instance launched from T (for D, or to the end) never serves;
    ``slow-launch,at=T[,for=D][,extra=E]``: every one serves E (default 10m) later than the cold start."""
    kind = fault.kind
    if arg:
        raise FaultSpecError(f"fault {text!r}: {kind} takes no :argument")
    # (extra on any other kind than slow-launch is refused by parse_fault_spec)
    misplaced = {"zone", "share", "extra_c", "instance"} & set(params)
    if misplaced:
        raise FaultSpecError(f"fault {text!r}: {', '.join(sorted(misplaced))} does not apply to {kind}")
    if "for" in params:
        fault.for_s = _for_s(text, params, "1h, 3h", " (leave it out: to the end of the run)")
    if "extra" in params:
        try:
            fault.extra_s = parse_duration_s(params["extra"])
        except ValueError:
            raise FaultSpecError(
                f"fault {text!r}: extra={params['extra']!r} is not a duration like 5m, 20m"
            ) from None
        if not 0 < fault.extra_s <= 86400:
            raise FaultSpecError(f"fault {text!r}: extra must be positive and at most a day")


def _capacity_fault(text: str, fault: Fault, arg: str, params: dict[str, str]) -> None:
    """``stockout:TYPE[,zone=Z],at=T,for=D`` and ``spot-reclaim,at=T[,share=S]`` (issue 17)."""
    if fault.kind not in CLOUD_FAULT_KINDS:
        raise FaultSpecError(
            f"fault {text!r}: zone, for and share are for stockout and spot-reclaim faults "
            "(for also for engine-crash, agent-down, api-outage, bad-launch and slow-launch)"
        )
    if fault.kind == "stockout":
        if not arg.startswith("ecs."):
            raise FaultSpecError(
                f"fault {text!r}: stockout needs an instance type, e.g. stockout:ecs.gn7i-c8g1.2xlarge"
            )
        if "for" not in params:
            raise FaultSpecError(f"fault {text!r}: stockout needs for=DURATION, e.g. for=2h")
        fault.for_s = _for_s(text, params, "30m, 2h")
        fault.instance_type = arg
        if "zone" in params and not params["zone"]:
            raise FaultSpecError(f"fault {text!r}: zone= needs a zone id, e.g. zone=cn-hangzhou-h")
        fault.zone = params.get("zone") or None
    else:
        if arg:
            raise FaultSpecError(f"fault {text!r}: spot-reclaim takes no :argument")
        try:
            fault.share = float(params.get("share", "0.25"))
        except ValueError:
            raise FaultSpecError(f"fault {text!r}: share must be a number in (0, 1]") from None
        if not 0 < fault.share <= 1:
            raise FaultSpecError(f"fault {text!r}: share must be in (0, 1], got {fault.share}")
    misplaced = ({"share"} if fault.kind == "stockout" else {"for", "zone"}) & set(params)
    if misplaced:
        raise FaultSpecError(f"fault {text!r}: {', '.join(sorted(misplaced))} does not apply to {fault.kind}")
