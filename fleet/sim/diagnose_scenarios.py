"""Labelled simulator scenarios for the diagnosis benchmark: one per finding kind, plus healthy controls.

Each scenario produces its cause on purpose, with the simulator's fault injection and a workload shape, on a
small fleet of Qwen2.5-14B on two A10s (``ecs.gn7i-2x.8xlarge``, the simulator's default hardware) and for a
short virtual time, and names the one kind the diagnosis must find (``None`` for a healthy control, where it
must find nothing). Rates are set against the sizing model's capacity of one instance for the scenario's
request mix (see the comments), so that "overloaded" and "healthy" mean what they say.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# (kind, minute it fires, target: an index among serving instances, an instance id, or "*")
FaultSpec = tuple[str, float, str]


@dataclass(frozen=True)
class Scenario:
    name: str
    expected: str | None  # the finding kind that must be found; None: a healthy control
    description: str
    rate_steps: tuple[tuple[float, float], ...]  # (from second, requests/s for the whole group)
    minutes: float = 14.0
    window_minutes: float = 8.0
    instances: int = 4
    sizes: str = "azure-conv"
    cv: float = 1.0
    faults: tuple[FaultSpec, ...] = ()
    autoscale: bool = False
    queue_limit: int = 64
    max_num_seqs: int | None = None
    max_model_len: int = 8192
    cold_start_s: float = 240.0
    slo_ttft_ms: float = 2000.0
    slo_tpot_ms: float | None = None
    max_size: int | None = None
    warm_floor: int = 2
    model: str = "Qwen2.5-14B"
    instance_type: str = "ecs.gn7i-2x.8xlarge"
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def config(self) -> dict[str, Any]:
        """The scenario's fleet.yaml as a mapping."""
        scale_out: list[dict[str, Any]] = [{"metric": "ttft_p99_ms", "above": self.slo_ttft_ms, "for": "60s"}]
        if self.slo_tpot_ms is not None:
            scale_out.append({"metric": "tpot_p99_ms", "above": self.slo_tpot_ms, "for": "60s"})
        if self.autoscale:
            scale_out.insert(0, {"metric": "queue_waiting_per_instance", "above": 2, "for": "30s"})
        group: dict[str, Any] = {
            "name": f"diag-{self.name}",
            "scaling_group_name": f"diag-{self.name}",
            "min_size": min(self.instances, self.warm_floor),
            "max_size": self.max_size or (self.instances * 3 if self.autoscale else self.instances),
            "warm_floor": min(self.instances, self.warm_floor),
            "cold_start_s": self.cold_start_s,
            "scale_out": scale_out,
            "isolation": {"enabled": False},
        }
        if self.autoscale:
            group["scale_in"] = [{"metric": "queue_waiting_per_instance", "below": 0.5, "for": "10m"}]
        return {"region": "cn-hangzhou", "account_id": "1234567890", "groups": [group]}


def bursts(
    high_rps: float, low_rps: float, on_s: float, off_s: float, total_s: float
) -> tuple[tuple[float, float], ...]:
    """Rate steps alternating ``high_rps`` for ``on_s`` and ``low_rps`` for ``off_s`` over ``total_s``."""
    steps: list[tuple[float, float]] = []
    t = 0.0
    while t < total_s:
        steps.append((t, high_rps))
        steps.append((t + on_s, low_rps))
        t += on_s + off_s
    return tuple(steps)


# Capacity notes (sizing model, Qwen2.5-14B on 2 x A10, KV cache ~44.7k tokens): Azure conversation requests
# (mean prompt ~1150, output ~210 tokens) fill the KV cache at ~40 sequences and one instance completes about
# 2 requests/s flat out. Short chat (300 in / 120 out) with max_num_seqs 32 is bounded by the batch, not the
# KV cache, at roughly 6 requests/s per instance.
SHORT = "fixed:300:120"

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "healthy-steady",
        None,
        "Azure conversation mix at about 40% of the fleet's capacity: nothing is wrong.",
        rate_steps=((0.0, 3.2),),
    ),
    Scenario(
        "healthy-bursty-light",
        None,
        "Short chat at about a third of capacity with bursty arrivals (CV 2): still healthy.",
        rate_steps=((0.0, 8.0),),
        sizes=SHORT,
        cv=2.0,
        max_num_seqs=32,
        seed=3,
    ),
    Scenario(
        "overheating-gpu",
        "thermal_throttling",
        "One GPU's cooling fails (the simulator's overheat fault, +35 C) at a moderate load.",
        rate_steps=((0.0, 4.0),),
        faults=(("overheat", 2.0, "1"),),
    ),
    Scenario(
        "power-cap",
        "power_throttling",
        "One instance's GPUs run under a low enforced power limit: power-cap reason, clock at 65%, a cool "
        "card.",
        rate_steps=((0.0, 4.0),),
        faults=(("power_cap", 2.0, "2"),),
    ),
    Scenario(
        "slow-node",
        "node_outlier",
        "One host is three times slower with normal clocks and temperature (a degraded link, a noisy "
        "neighbour).",
        rate_steps=((0.0, 8.0),),
        sizes=SHORT,
        max_num_seqs=32,
        faults=(("slow_node", 1.0, "0"),),
    ),
    Scenario(
        "undersized-high-load",
        "undersized_fleet",
        "Very short chat at about twice what four instances serve at their full batch, sustained; scaling "
        "is capped at four.",
        # 120 in / 60 out: the batch reaches the default max_num_seqs (256, past the sizing model's latency
        # knee of ~214) with the KV cache ~80% full, so neither setting holds it back: only instances do
        rate_steps=((0.0, 200.0),),
        sizes="fixed:120:60",
        minutes=12.0,
    ),
    Scenario(
        "batch-at-max-num-seqs",
        "queue_backlog",
        "Short chat at about twice what four instances serve with max_num_seqs 32, the KV cache ~20% used: "
        "the cap, not the GPUs or the instance count, limits throughput.",
        rate_steps=((0.0, 45.0),),
        sizes=SHORT,
        max_num_seqs=32,
    ),
    Scenario(
        "kv-pressure-long-context",
        "kv_cache_pressure",
        "Mooncake long-context conversations (prompts of several thousand tokens) fill the KV cache.",
        rate_steps=((0.0, 1.2),),
        sizes="mooncake",
    ),
    Scenario(
        "cold-start-after-ramp",
        "cold_start",
        "Load triples in a step; the service scales out, but new instances need 4 min to load.",
        # two instances serve ~10/s; 20/s needs five at 80% load, and the service may add up to four
        rate_steps=((0.0, 6.0), (300.0, 20.0)),
        sizes=SHORT,
        max_num_seqs=32,
        instances=2,
        autoscale=True,
        minutes=12.0,
        window_minutes=8.0,
    ),
    Scenario(
        "agent-not-running",
        "metrics_missing",
        "The node agent is not running anywhere: only CloudMonitor's own GPU metrics arrive.",
        rate_steps=((0.0, 3.2),),
        faults=(("agent_down", 0.0, "*"),),
    ),
    Scenario(
        "falsely-busy-queue",
        "queue_backlog",
        "Bursty short chat at about the fleet's throughput with an unbounded gateway queue: GPUs at 100%, "
        "completions flat, requests waiting.",
        # mean 17.5 requests/s against ~19.6 the four serve: bursts of 30/s for 45 s, 10/s for 75 s
        rate_steps=bursts(30.0, 10.0, 45.0, 75.0, 14 * 60.0),
        sizes=SHORT,
        max_num_seqs=32,
        queue_limit=100000,
        seed=1,
    ),
    Scenario(
        "gpu-fell-off-the-bus",
        "gpu_xid_error",
        "One instance's GPU raises XID 79 (fallen off the bus: the simulator's xid fault) at moderate load.",
        rate_steps=((0.0, 3.2),),
        faults=(("xid", 3.0, "2"),),
    ),
    Scenario(
        "bandwidth-bound-decode",
        "memory_bandwidth_bound",
        "Long outputs at a high batch with a tight TPOT SLO: decode streams weights and KV cache.",
        # ~9.5/s keeps the batch at ~67 sequences and the KV cache at ~70% (not full), where TPOT is past the
        # SLO; memory reads ~80% busy, near the ~84% a bandwidth-limited decode reaches at TP 2 over PCIe
        rate_steps=((0.0, 9.5),),
        sizes="fixed:200:600",
        slo_tpot_ms=45.0,
    ),
    Scenario(
        "slo-under-long-prompts",
        "slo_violated_unexplained",
        "The healthy Azure conversation load under a TTFT SLO its long prompts miss on idle GPUs: no queue, "
        "no fault, nothing in the metrics explains the latency.",
        # the mean ~1150-token prompt alone prefills in ~0.26 s; P99 TTFT at ~40% load is ~1.3 s
        rate_steps=((0.0, 3.2),),
        slo_ttft_ms=600.0,
    ),
)


def by_name(name: str) -> Scenario:
    for sc in SCENARIOS:
        if sc.name == name:
            return sc
    raise KeyError(f"unknown scenario {name!r}; one of {', '.join(s.name for s in SCENARIOS)}")
