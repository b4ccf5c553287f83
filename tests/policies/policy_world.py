"""A tiny simulated group for policy tests: applies a Plan as the service and ESS would, on a virtual clock.

Deliberately simple: ESS moves Pending instances to InService after the cold start, honours DesiredCapacity by
launching or removing (victims from the plan's scale_in_order), and the isolation steps take effect at the
next observation. Load is a demand in "instances' worth" of traffic; the queue per instance grows when the
serving instances fall short of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from policy_builders import GROUP

from policies import (
    GroupSnapshot,
    InstanceSnapshot,
    MetricSample,
    Notification,
    Plan,
    Snapshot,
    StepAction,
    StepOutcome,
    XidEvent,
)


@dataclass
class Node:
    instance_id: str
    state: str
    created_at: datetime
    ready_at: datetime
    hot: bool = False  # GPU temperature above 85 C until rebooted (thermal paste, fan) or replaced
    rebooted_at: datetime | None = None
    xids: list[XidEvent] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    ttft_ms: float | None = None
    engine_down: bool = False  # vLLM exited: the agent reports vllm_up 0 until a reboot starts it again
    silent: bool = False  # the node agent stopped: no metrics at all until a reboot starts it again
    never_serves: bool = False  # launched broken (image, model store): vLLM never comes up, a reboot or not
    loads_until: datetime | None = None  # launched slow (a slow model store): vLLM down until then
    gpu_util_pct: float | None = None  # CloudMonitor's GPU utilization, if not what the engine's state gives
    out_serving: bool = False  # its engine ran as it went into Standby: it took serving capacity out
    # its temperature sensor dies at the next reboot: the agent leaves the reading out (None), or a source
    # that does not filter passes on what the sensor answers (0 or 255 C)
    sensor_dies_at_reboot: bool = False
    dead_sensor_reads: float | None = None
    thermal_throttle: bool = False  # the GPU throttles itself for heat (sw/hw thermal slowdown)


class World:
    def __init__(
        self,
        start: datetime,
        n: int,
        cold_start_s: float = 180.0,
        demand: Callable[[datetime], float] | None = None,
        notify: bool = True,
        reboot_fixes: bool = True,
    ) -> None:
        self.now = start
        self.cold_start_s = cold_start_s
        self.demand = demand or (lambda at: 1.0)
        self.notify = notify
        self.reboot_fixes = reboot_fixes
        self.nodes: dict[str, Node] = {}
        self.desired = n
        self.counter = 0
        self.outage: tuple[datetime, datetime] | None = None
        # ECS's API down until then: a reboot step errors (the service records no outcome, as for a transient
        # error, and tries the same step again when the plan asks for it)
        self.ecs_down_until: datetime | None = None
        # ESS's API down until then: an EnterStandby step errors (tried again when the plan asks for it)
        self.ess_down_until: datetime | None = None
        self.pending_notifications: list[Notification] = []
        self.pending_outcomes: list[StepOutcome] = []
        self.operator_actions: list = []
        self.removed: list[str] = []
        self.launched = 0
        self.broken_launches = False  # while set, every instance launched never serves
        self.slow_launch_s = 0.0  # every instance launched loads this much longer than the cold start
        self.actions: list[tuple[datetime, str, str]] = []  # (at, action, instance) actually performed
        self.errors: list[tuple[datetime, str, str]] = []  # (at, action, instance) tried and errored
        for _ in range(n):
            self._launch(ready=True)

    # ---- ESS ---------------------------------------------------------------------------------------------
    def _launch(self, ready: bool = False) -> Node:
        self.counter += 1
        iid = f"i-{self.counter:04d}"
        node = Node(
            iid,
            "InService" if ready else "Pending",
            self.now - timedelta(days=1) if ready else self.now,
            self.now if ready else self.now + timedelta(seconds=self.cold_start_s),
        )
        self.nodes[iid] = node
        if not ready:
            self.launched += 1
            node.never_serves = node.engine_down = self.broken_launches
            if self.slow_launch_s:
                node.loads_until = node.ready_at + timedelta(seconds=self.slow_launch_s)
        return node

    def counted(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.state in ("InService", "Pending", "Standby")]

    def serving(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.state == "InService"]

    def engine_runs(self, node: Node) -> bool:
        """Whether the node's vLLM runs now: not crashed, not loading after a reboot, not launched slow."""
        now = self.now
        loading = node.rebooted_at is not None and now < node.rebooted_at + timedelta(
            seconds=max(60.0, self.cold_start_s)
        )
        slow = node.loads_until is not None and now < node.loads_until
        return node.state != "Pending" and not (node.engine_down or loading or slow)

    def serving_out(self) -> list[str]:
        """The nodes in Standby that took serving capacity out (their engine ran as they went), as the
        guardrail ``max_isolated`` rations it."""
        return sorted(n.instance_id for n in self.nodes.values() if n.state == "Standby" and n.out_serving)

    def apply(self, plan: Plan) -> None:
        gp = plan.group(GROUP)
        assert gp is not None
        for step in gp.steps:
            node = self.nodes.get(step.instance_id)
            told = any(n.incident_id == step.incident_id for n in self.pending_notifications)
            if step.action == StepAction.ACKNOWLEDGE and self.notify and not told:
                self.pending_notifications.append(
                    Notification(incident_id=step.incident_id, at=self.now, channel="dingtalk")
                )
            if node is None:
                continue
            if step.action == StepAction.ENTER_STANDBY:
                self._enter_standby(node)
            elif step.action == StepAction.REBOOT and self.ecs_down_until and self.now < self.ecs_down_until:
                self.errors.append((self.now, "reboot", node.instance_id))
            elif step.action == StepAction.REBOOT:
                node.rebooted_at = self.now
                if self.reboot_fixes:
                    node.hot = False
                    node.engine_down = node.never_serves
                    node.silent = False
                node.xids = []
                # a reboot ends what a reboot was asked for; a redeploy, stop or release stays pending
                node.events = [e for e in node.events if not e["code"].endswith(".Reboot")]
                self.actions.append((self.now, "reboot", node.instance_id))
                self.pending_outcomes.append(StepOutcome(step_id=step.step_id, ok=True, at=self.now))
            elif step.action == StepAction.EXIT_STANDBY and node.state == "Standby":
                node.state = "InService"
                self.actions.append((self.now, "exit_standby", node.instance_id))
            elif step.action == StepAction.REMOVE and node.state != "Removed":
                node.state = "Removed"
                self.removed.append(node.instance_id)
                if step.inputs.get("decrease_desired_capacity", True):  # else ESS replaces it in place
                    self.desired -= 1
                self.actions.append((self.now, "remove", node.instance_id))
        if gp.desired_capacity is not None:
            self.desired = gp.desired_capacity
        counted = self.counted()
        while len(counted) < self.desired:
            counted.append(self._launch())
        if len(counted) > self.desired:
            victims = [i for i in gp.scale_in_order if self.nodes[i].state in ("InService", "Pending")]
            for iid in victims[: len(counted) - self.desired]:
                self.nodes[iid].state = "Removed"
                self.removed.append(iid)

    def _enter_standby(self, node: Node) -> None:
        if self.ess_down_until and self.now < self.ess_down_until:
            self.errors.append((self.now, "enter_standby", node.instance_id))
        elif node.state == "InService":
            node.state = "Standby"
            node.out_serving = self.engine_runs(node)
            self.actions.append((self.now, "enter_standby", node.instance_id))

    # ---- time and observation ----------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        for node in self.nodes.values():
            if node.state == "Pending" and node.ready_at <= self.now:
                node.state = "InService"

    def observe(self) -> Snapshot:
        now = self.now
        serving = self.serving()
        demand = self.demand(now)
        short = max(0.0, demand - len(serving))
        # a shortfall queues requests and stretches time to first token
        per_instance = (short * 8.0 + 0.2 * demand) / max(1, len(serving))
        ttft_ms = 300.0 + 700.0 * short
        in_outage = self.outage is not None and self.outage[0] <= now < self.outage[1]
        instances = []
        for node in sorted(self.nodes.values(), key=lambda n: n.instance_id):
            if node.state == "Removed":
                continue
            metrics: dict[str, MetricSample] = {}
            # after a reboot the agent reports within a minute; vLLM serves once the weights are loaded again
            booting = node.rebooted_at is not None and now < node.rebooted_at + timedelta(seconds=60)
            if not in_outage and node.state != "Pending" and not booting and not node.silent:
                standby = node.state == "Standby"
                engine_down = not self.engine_runs(node)
                values = {
                    "queue_waiting": 0.0 if standby else per_instance,
                    "requests_running": 0.0 if standby else 4.0,
                    "gpu_temperature_c": 91.0 if node.hot else 66.0,
                    "ttft_p99_ms": node.ttft_ms if node.ttft_ms is not None else ttft_ms,
                    "gpu_throttle_reasons": 0x60 if node.thermal_throttle else 0.0,
                    "vllm_up": 0.0 if engine_down else 1.0,
                    # CloudMonitor's own agent: idle GPUs under a dead or loading engine
                    "gpu_util_pct": node.gpu_util_pct
                    if node.gpu_util_pct is not None
                    else (0.0 if engine_down else 60.0),
                }
                if node.sensor_dies_at_reboot and node.rebooted_at is not None:
                    if node.dead_sensor_reads is None:
                        del values["gpu_temperature_c"]
                    else:
                        values["gpu_temperature_c"] = node.dead_sensor_reads
                if engine_down:  # no vLLM to scrape: only the agent's GPU readings and vllm_up
                    for name in ("queue_waiting", "requests_running", "ttft_p99_ms"):
                        del values[name]
                metrics = {k: MetricSample(value=v, at=now) for k, v in values.items()}
            instances.append(
                InstanceSnapshot(
                    instance_id=node.instance_id,
                    lifecycle_state=node.state,
                    created_at=node.created_at,
                    metrics=metrics,
                    xids=list(node.xids),
                    events=node.events,
                )
            )
        group = GroupSnapshot(
            name=GROUP,
            desired_capacity=self.desired,
            instances=instances,
            notifications=self.pending_notifications,
            outcomes=self.pending_outcomes,
            operator_actions=self.operator_actions,
        )
        return Snapshot(taken_at=now, groups=[group])
