"""Running a labelled diagnosis scenario in the simulator, and reading its window back like production.

A scenario (:mod:`fleet.sim.diagnose_scenarios`) names a fleet, a workload shape and faults. This module
builds the simulated world of :mod:`fleet.sim` inside the in-process fake cloud, runs it on virtual time (with
the real service ticking when the scenario autoscales), then reads the metrics the simulated instances
published to the fake CloudMonitor through :func:`fleet.diagnose.reader.read_window`, over the SDK adapters,
exactly as ``fleet diagnose`` does against a real account, and diagnoses that window.

The simulator's own faults (an overheating GPU, an XID, a system event) are used as they are. Three more are
added here, by wrapping the pieces the world is built from rather than editing it:

* ``power_cap``: the instance's GPUs run under a low enforced power limit: NVML's SW power-cap reason set and
  the SM clock held at ``clock_ratio`` under load, while the card stays cool;
* ``slow_node``: the instance's engine runs ``slowdown`` times slower with normal clocks and temperatures (a
  host problem: a PCIe link trained down, a noisy neighbour), which only its latency shows;
* ``agent_down``: the node agent is not running on the instance (``*``: on every instance), so none of its
  custom metrics reach CloudMonitor; the ECS monitoring agent's GPU metrics still do.

The world publishes what the node agent would, plus the completed-request rate the agent derives from vLLM's
``request_success`` counter (``vllm_request_rate_per_s``), which the capacity rules read.
"""

from __future__ import annotations

import math
import random
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from fleet.diagnose.model import Finding, Window
from fleet.sim.thermal import THROTTLE_SW_POWER_CAP, GpuThermal
from fleet.sim.workload import Request
from fleet.sim.world import Fault, SimInstance, World

START = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)  # a Monday, 10:00 in Shanghai


# ---- the extra faults --------------------------------------------------------------------------------------
@dataclass
class PowerCappedGpu(GpuThermal):
    """A GPU under a low enforced power limit: above ``busy_util`` the clock drops to ``cap_clock_ratio``."""

    cap_clock_ratio: float = 0.7
    cap_w: float = 150.0
    busy_util: float = 0.2
    last_util: float = 0.0

    def step(self, dt_s: float, util: float) -> float:
        self.last_util = util
        return super().step(dt_s, util * self.cap_clock_ratio)  # less power, less heat

    @property
    def capped(self) -> bool:
        return self.last_util >= self.busy_util

    @property
    def throttle_reasons(self) -> int:
        return super().throttle_reasons | (THROTTLE_SW_POWER_CAP if self.capped else 0)

    @property
    def clock_ratio(self) -> float:
        base = super().clock_ratio
        return min(base, self.cap_clock_ratio) if self.capped else base

    def power_w(self, util: float) -> float:
        return min(self.cap_w, super().power_w(util))


class SlowEngine:
    """An engine that runs ``slowdown`` times slower than its clock says (a host problem, not the GPU)."""

    def __init__(self, inner: Any, slowdown: float) -> None:
        self._inner = inner
        self._slowdown = slowdown
        self._speed = inner.speed_factor
        inner.speed_factor = self._speed / slowdown

    @property
    def speed_factor(self) -> float:
        return self._speed

    @speed_factor.setter
    def speed_factor(self, value: float) -> None:
        self._speed = value
        self._inner.speed_factor = value / self._slowdown

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class AgentFilter:
    """The fake cloud as seen by instances whose node agent is down: their custom metrics never arrive."""

    def __init__(self, cloud: Any) -> None:
        self._cloud = cloud
        self.down: set[str] = set()
        self.all_down = False

    def put_custom_metric(
        self, name: str, dimensions: dict[str, str], value: float, ts_ms: Any = None
    ) -> None:
        iid = dimensions.get("instanceId", "")
        if self.all_down or iid in self.down:
            return
        self._cloud.put_custom_metric(name, dimensions, value, ts_ms)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cloud, name)


EXTRA_FAULT_KINDS = ("power_cap", "slow_node", "agent_down")


class DiagWorld(World):
    """The simulator's world with the extra faults and the agent's completed-request rate."""

    def __init__(self, *args: Any, agent: AgentFilter, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent = agent
        self._completed_at_publish: dict[str, int] = {}
        self.slowdown = 3.0

    def inject(self, f: Fault, inst: SimInstance) -> None:
        if f.kind == "power_cap":
            inst.gpus = [
                PowerCappedGpu(g.params, g.temperature_c, g.extra_c, cap_clock_ratio=0.65) for g in inst.gpus
            ]
        elif f.kind == "slow_node":
            inst.engine = SlowEngine(inst.engine, self.slowdown)
        elif f.kind == "agent_down":
            if f.target == "*":
                self.agent.all_down = True
            else:
                self.agent.down.add(inst.instance_id)
        else:
            super().inject(f, inst)
            return
        self.fault_log.append({"at_s": self.now_s, "instance_id": inst.instance_id, "event": f.kind})

    def _fault_target(self, f: Fault) -> SimInstance | None:
        if f.target == "*":
            return next(iter(self.instances.values()), None)
        return super()._fault_target(f)

    def instance_metrics(self, inst: SimInstance) -> tuple[dict[str, float], dict[str, float]]:
        custom, dash = super().instance_metrics(inst)
        before = self._completed_at_publish.get(inst.instance_id, 0)
        self._completed_at_publish[inst.instance_id] = inst.completed
        custom["vllm_request_rate_per_s"] = (inst.completed - before) / self.p.publish_period_s
        return custom, dash


# ---- workloads ---------------------------------------------------------------------------------------------
def size_pool(kind: str) -> Sequence[Request]:
    """Request sizes to draw from: a trace's, or a fixed synthetic mix."""
    from fleet.sim.workload import load_trace

    if kind == "azure-conv":
        return load_trace("azure", "conv")
    if kind == "mooncake":
        return load_trace("mooncake", "conversation")
    if kind.startswith("fixed:"):  # fixed:PROMPT:OUTPUT
        _, p, o = kind.split(":")
        return (Request(0.0, int(p), int(o)),)
    raise ValueError(f"unknown size pool {kind!r}; azure-conv, mooncake or fixed:PROMPT:OUTPUT")


def arrivals(
    rate_steps: Sequence[tuple[float, float]],
    duration_s: float,
    sizes: Sequence[Request],
    *,
    cv: float = 1.0,
    seed: int = 0,
    max_prompt_tokens: int = 7680,
) -> list[Request]:
    """Requests for a piecewise-constant rate ``[(from_s, rps), ...]``: Gamma inter-arrivals with
    coefficient of variation ``cv`` (1: Poisson), sizes drawn from ``sizes``."""
    rng = random.Random(seed)
    shape = 1.0 / (cv * cv)
    out: list[Request] = []
    t = 0.0
    steps = sorted(rate_steps)
    while True:
        rate = next((r for s, r in reversed(steps) if s <= t), steps[0][1])
        if rate <= 0:
            nxt = next((s for s, _ in steps if s > t), None)
            if nxt is None:
                break
            t = nxt
            continue
        t += rng.gammavariate(shape, 1.0 / (rate * shape))
        if t >= duration_s:
            break
        s = sizes[rng.randrange(len(sizes))]
        out.append(Request(t, min(s.prompt_tokens, max_prompt_tokens), max(1, s.output_tokens)))
    return out


# ---- running -----------------------------------------------------------------------------------------------
@dataclass
class ScenarioRun:
    """What one scenario produced: the window read back, the findings, and how the world behaved."""

    window: Window
    findings: list[Finding]
    fault_log: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


def load_scenario_config(data: dict[str, Any]) -> Any:
    """A FleetConfig from a mapping, validated like fleet.yaml (no FLEET_ environment)."""
    from fleet.config import load_config

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fleet.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return load_config(path, env={})


def run_scenario(sc: Any, *, progress: Callable[[str], None] | None = None) -> ScenarioRun:
    """Simulate ``sc`` (a :class:`fleet.sim.diagnose_scenarios.Scenario`) and diagnose its last window."""
    from fleet.diagnose.reader import context_for, read_window
    from fleet.diagnose.rules import diagnose
    from fleet.sim import cloudview
    from fleet.sim.types import Hardware
    from fleet.sim.world import WorldParams
    from fleet.testing import ManualClock, mock_aliyun
    from sizing import (
        Deployment,
        InstanceEngine,
        find_gpu,
        find_instance,
        find_model,
        perf_for,
        plan_memory,
    )

    config = load_scenario_config(sc.config())
    spec = config.groups[0]
    inst_type = find_instance(sc.instance_type)
    hw = Hardware(
        model=sc.model,
        instance_type=inst_type.name,
        gpu=inst_type.gpu,
        gpus_per_instance=inst_type.gpus,
        tp=inst_type.gpus,
        max_model_len=sc.max_model_len,
    )
    dep = Deployment(
        find_model(sc.model),
        find_gpu(inst_type.gpu),
        tp=inst_type.gpus,
        max_model_len=sc.max_model_len,
        max_num_seqs=sc.max_num_seqs,
    )
    plan = plan_memory(dep)
    perf = perf_for(dep, plan)

    def factory(start_s: float, max_waiting: int) -> Any:
        return InstanceEngine(dep, max_waiting=max_waiting, start_s=start_s, plan=plan, perf=perf)

    duration_s = sc.minutes * 60.0
    requests = arrivals(
        sc.rate_steps,
        duration_s,
        size_pool(sc.sizes),
        cv=sc.cv,
        seed=sc.seed,
        max_prompt_tokens=sc.max_model_len - 512,
    )
    faults = [Fault(kind=k, at_s=at * 60.0, target=str(t)) for k, at, t in sc.faults]
    clock = ManualClock(START)
    tick_s, sync_s = 15.0, 5.0
    with mock_aliyun(
        boot_seconds=min(60.0, spec.cold_start_s),
        seed=sc.seed,
        account_id=config.account_id,
        clock=clock,
        metric_retention_s=3 * 3600.0,
        sleep_latency=False,
    ) as cloud:
        group_id = cloudview.create_group(
            cloud, spec, hw, sc.instances, region=config.region, max_size=max(spec.max_size, sc.instances)
        )
        config = cloudview.bind_group(config, 0, group_id)
        spec = config.groups[0]
        agent = AgentFilter(cloud)
        params = WorldParams(
            cold_start_s=float(spec.cold_start_s),
            queue_limit=sc.queue_limit,
            gpus_per_instance=hw.gpus_per_instance,
            publish_period_s=15.0,
            step_s=1.0,
        )
        world = DiagWorld(
            agent,
            group_id,
            factory,
            params,
            requests,
            faults,
            instance_lister=lambda _c, gid: cloudview.list_group_instances(cloud, gid),
            agent=agent,
        )
        world.sync(prewarmed=True)
        world.publish()
        world.next_publish_s = 15.0
        controller = None
        clients = cloudview.make_clients(config)
        service = None
        if sc.autoscale:
            from fleet.service.app import build_service

            service = build_service(config, clients, database_url="sqlite://", clock=clock.now, dry_run=False)
            controller = service
        t, next_tick = 0.0, 0.0
        while t < duration_s - 1e-9:
            if controller is not None and t >= next_tick - 1e-9:
                controller.tick(cloud.now())
                cloud.tick()
                next_tick += tick_s
            end = min(duration_s, t + sync_s, next_tick if controller is not None else math.inf)
            world.run_until(end)
            cloud.advance(end - t)
            t = end
            world.sync()
        now = cloud.now()
        window_start = now - timedelta(minutes=sc.window_minutes)
        ctx = context_for(spec, model=sc.model, instance_type=inst_type.name, region=config.region)
        ctx.max_num_seqs = plan.max_num_seqs
        ctx.max_model_len = plan.max_model_len
        ctx.max_num_batched_tokens = plan.max_num_batched_tokens
        ctx.queue_limit = sc.queue_limit
        # The team knows its request mix (fleet diagnose --prompt-tokens/--output-tokens): the workload's.
        if requests:
            ctx.prompt_tokens_mean = round(sum(r.prompt_tokens for r in requests) / len(requests))
            ctx.output_tokens_mean = round(sum(r.output_tokens for r in requests) / len(requests))
        window = read_window(
            clients,
            spec,
            start=window_start,
            end=now,
            period_s=15,
            context=ctx,
            store=getattr(service, "store", None),
        )
        stats = {
            "requests": world.total_requests,
            "completed": world.total_completed,
            "rejected": world.total_rejected,
            "instances_end": len(world.instances),
        }
        fault_log = list(world.fault_log)
    return ScenarioRun(window=window, findings=diagnose(window), fault_log=fault_log, stats=stats)
