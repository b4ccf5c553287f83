"""The simulation's shared types: what a run is asked (options, hardware), what it records (minute points,
the result), and what it ticks (a controller). The runner, the cloud glue (``cloudview``), the engine and the
report all import them from here, so none of them imports another to get a type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any


class Policy(StrEnum):
    """Who controls the group in a run: our service, a baseline, or the hindsight oracle."""

    OURS = "ours"
    STATIC_PEAK = "static-peak"
    ESS_ALARM = "ess-alarm"
    TARGET_TRACKING = "target-tracking"
    KPA = "kpa"
    ORACLE = "oracle"


POLICIES = tuple(p.value for p in Policy)

# The longest run `fleet simulate` accepts: the ServeGen traces hold 14 days, and a simulated day costs about
# a minute of CPU, so anything longer is a typo (``--hours 1e9``), not a plan.
MAX_HOURS = 14 * 24.0

# A Monday 00:00 in Asia/Shanghai: ServeGen's window 0 starts at local midnight, and weekday schedules apply.
DEFAULT_START = datetime(2026, 3, 2, 0, 0, tzinfo=UTC) - timedelta(hours=8)


@dataclass(frozen=True)
class Hardware:
    """What each instance of the group is: the model served, the GPU, and what it costs."""

    model: str = "Qwen2.5-14B"
    instance_type: str = "ecs.gn7i-2x.8xlarge"
    gpu: str = "A10"
    gpus_per_instance: int = 2
    tp: int = 2
    price_cny_per_hour: float = 29.24
    max_model_len: int = 8192


@dataclass(frozen=True)
class SimOptions:
    hours: float = 24.0
    policy: str = "ours"
    start: datetime = DEFAULT_START
    seed: int = 0
    tick_s: float = 15.0  # the service's tick (its production default); baselines keep their own period
    sync_s: float = 5.0  # how often the world reads the group's instances and the cloud clock moves
    step_s: float = 2.0  # the engines' step (the balancer sees load at this resolution)
    publish_s: float = 15.0
    boot_s: float = 60.0  # ECS boot inside the cold start; the rest is loading weights
    queue_limit: int = 64
    slo_ttft_ms: float = 800.0
    static_size: int | None = None
    # The fleet already serving when the run starts (at least the config's floor); the scenario sizes it for
    # the
    # first minutes' load so that no policy starts from a cold, undersized fleet.
    initial_size: int | None = None
    queue_target: float = 2.0  # the target-tracking baseline's target (the config's queue rule)
    # Requests one instance serves within the SLO, from the capacity test (``scenario.capacity_test``): the
    # start fleet, static-peak, kpa and oracle are sized with it.
    capacity_rps: float | None = None
    # The KPA baseline's target concurrency per instance (running + waiting) at that capacity.
    kpa_target: float | None = None
    # Instances each minute's arrivals need at ``capacity_rps`` (hindsight: what the oracle plans from).
    oracle_need: tuple[int, ...] = ()
    # The oracle as the *level oracle* (``fleet.sim.oracle.level_need``): this margin over each 10-minute
    # window's known mean rate, blind to the clumps inside it, and no hindsight corrections.
    oracle_level_headroom: float | None = None
    # The world's engines are this much (in %, at most) slower or faster than the sizing engine predicts:
    # drawn per run and per instance from ``seed`` (``fleet.sim.modelerror``). 0: the world is the model.
    model_error_pct: float = 0.0
    # Days of demand history the service starts with (``fleet.sim.history``; ``--history-days``).
    history_days: int = 0
    # Instances the workload's 1-minute peak needs at the calibrated capacity (before clamping to max_size).
    peak_need: int | None = None
    # Economical mode: ordering a stopped instance's start to serving (None: the cold start).
    restart_s: float | None = None
    # Settings the group's Terraform would give the fake group (capacity bench): called once it exists.
    group_setup: Callable[[Any, str], None] | None = None


@dataclass
class MinutePoint:
    minute: int
    at: str
    arrivals: int
    completed: int
    rejected: int
    ttft_p99_ms: float | None
    desired: int
    in_service: int
    serving: int
    pending: int
    standby: int
    temperature_max_c: float
    gpu_util_avg_pct: float
    billed: int = 0  # instances billed at the minute's end: in the group (any state) or draining out of it
    cost_cny: float = 0.0  # the run's cost so far at the minute's end, as the summary's cost_cny bills it


@dataclass
class SimResult:
    summary: dict[str, Any]
    series: list[MinutePoint]
    incidents: list[dict[str, Any]]
    fault_log: list[dict[str, Any]]
    decisions: list[dict[str, Any]]
    options: SimOptions
    hardware: Hardware
    workload: str
    group_name: str
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class Controller:
    """What the runner ticks: the real service for ``ours``, a baseline otherwise."""

    name: str

    def tick(self, now: datetime) -> Any: ...
