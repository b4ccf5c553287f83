"""`fleet bench capacity` (issue 17): GPU capacity that is sold out, reclaimed or restarted, each scenario run
with ours, ours without the feature and ESS-native behaviour (the same group settings, ESS's own fallback,
the ESS alarm rule instead of the service).

The simulated world runs one engine kind per group, so the stock-out scenario falls back to a type with the
same GPUs (``ecs.gn7i-c32g1.16xlarge``: two A10s like the default ``ecs.gn7i-2x.8xlarge``, more vCPUs and
RAM) and the engine physics stay right.

Scenarios (the default day: ServeGen m-small day 2, ramp from 06:00, peak at 09:00 Shanghai time):
- ``stockout``: the primary type is sold out from 06:00 for 2 h;
- ``stockout-surge``: a harder day (m-large day 9, 14:00-21:00) whose evening surge the 2 h stock-out covers;
- ``spot``: a spot tier above an on-demand base of 2 (70 % of the rest spot), with a quarter of the spot
  instances reclaimed at 09:00, against the same day all on demand;
- ``economical``: economical mode (recycle) against release on the same day, both with the startup modelled
  from the weights (``fleet.sim.capacity_startup``); the runs measure each instance's order to serving.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fleet.sim.capacity_startup import Startup, StartupFigures, checkpoint_bytes, model_startup
from fleet.sim.scenario import DEFAULT_WORKLOAD, simulate
from fleet.sim.types import Hardware, SimOptions
from fleet.sim.world import Fault, parse_fault_spec

PRIMARY = "ecs.gn7i-2x.8xlarge"
SAME_GPU_FALLBACK = "ecs.gn7i-c32g1.16xlarge"
SPOT_MIX = {"on_demand_base": 2, "spot_percentage_above_base": 70}
# A harder day for the stock-out: ServeGen m-large day 9, whose load roughly triples within half an hour at
# 18:30 (its steepest ramp; the default day only gains half again from 07:00 to 09:00), run 14:00-21:00 with
# the primary sold out 17:30-19:30, over the surge.
SURGE_WORKLOAD = "servegen:m-large,day=9,peak=15,start_h=14"
SURGE_HOURS = 7.0
SURGE_STOCKOUT_AT = "3h30m"


def startup() -> Startup:
    """Economical mode's two paths to serving for the simulated model (``fleet.sim.capacity_startup``): the
    economical scenario runs every variant with this fresh cold start and this restart, and measures both."""
    return model_startup(checkpoint_bytes(Hardware().model), StartupFigures())


@dataclass(frozen=True)
class Variant:
    name: str
    policy: str = "ours"
    spec: dict[str, Any] = field(default_factory=dict)  # fleet.yaml keys of the group
    faults: tuple[str, ...] = ()
    config_types: tuple[str, ...] = ()  # the scaling configuration's InstanceTypes (ESS's own fallback)
    spot: bool = False  # the fake group's spot mix (COST_OPTIMIZED, SpotAsPriceGo) from SPOT_MIX
    recycle: bool = False
    restart_s: float | None = None  # a stopped instance's start to serving (world)
    boot_s: float | None = None  # ECS create + boot of a fresh instance (fake ECS; default SimOptions.boot_s)
    ecs_start_s: float | None = None  # ECS start of a stopped instance (fake ECS restart_seconds)
    # A scenario with its own day: the workload and its length (None: the default day for --hours).
    workload: str | None = None
    hours: float | None = None


def scenarios(hours: float) -> dict[str, list[Variant]]:
    stockout = (f"stockout:{PRIMARY},at=6h,for=2h",)
    reclaim = ("spot-reclaim,at=9h,share=0.25",)
    ladder = {"instance_types": [PRIMARY, SAME_GPU_FALLBACK]}
    mix = {"instance_types": [PRIMARY], "capacity_mix": SPOT_MIX}
    surge_out = (f"stockout:{PRIMARY},at={SURGE_STOCKOUT_AT},for=2h",)
    return {
        "stockout": [
            Variant("no-stockout", spec=ladder),
            Variant("ours", spec=ladder, faults=stockout),
            Variant("ours-without-fallback", faults=stockout),
            Variant(
                "ess-native", policy="ess-alarm", faults=stockout, config_types=(PRIMARY, SAME_GPU_FALLBACK)
            ),
        ],
        "stockout-surge": [
            replace(v, workload=SURGE_WORKLOAD, hours=SURGE_HOURS)
            for v in (
                Variant("no-stockout", spec=ladder),
                Variant("ours", spec=ladder, faults=surge_out),
                Variant("ours-without-fallback", faults=surge_out),
                Variant(
                    "ess-native",
                    policy="ess-alarm",
                    faults=surge_out,
                    config_types=(PRIMARY, SAME_GPU_FALLBACK),
                ),
            )
        ],
        "spot": [
            Variant("on-demand"),
            Variant("ours-spot", spec=mix, spot=True),
            Variant("ours-spot-reclaim", spec=mix, spot=True, faults=reclaim),
            Variant("ours-without-spot-handling-reclaim", spot=True, faults=reclaim),
            Variant("ess-native-spot-reclaim", policy="ess-alarm", spot=True, faults=reclaim),
        ],
        "economical": _economical(),
    }


def _economical() -> list[Variant]:
    st = startup()
    cold = {"cold_start_s": math.ceil(st.fresh_s)}
    return [
        replace(
            v,
            boot_s=st.fresh["ecs_create_boot"],
            ecs_start_s=st.restart["ecs_start"],
            restart_s=round(st.restart_s, 1),
        )
        for v in (
            Variant("release", spec=cold),
            Variant("ours-recycle", spec={**cold, "economical_mode": True}, recycle=True),
            Variant("ess-native-recycle", policy="ess-alarm", spec=cold, recycle=True),
        )
    ]


def _setup(v: Variant) -> Callable[[Any, str], None]:
    """What the group's Terraform settings would make of the fake group."""

    def setup(cloud: Any, group_id: str) -> None:
        group = cloud.ess.groups[group_id]
        config = cloud.ess.configurations[group.active_config_id]
        if v.config_types:
            config.instance_types = list(v.config_types)
        if v.recycle:
            group.scaling_policy = "recycle"
        if v.ecs_start_s is not None:
            cloud.restart_seconds = float(v.ecs_start_s)
        if v.spot:
            cloud.ess.set_capacity_mix(
                group,
                multi_az_policy="COST_OPTIMIZED",
                on_demand_base_capacity=SPOT_MIX["on_demand_base"],
                on_demand_percentage_above_base=100 - SPOT_MIX["spot_percentage_above_base"],
                spot_instance_pools=None,
                spot_instance_remedy=v.policy != "ours",  # ESS replaces on its own; ours does it itself
                compensate_with_on_demand=True,
            )
            config.spot_strategy = "SpotAsPriceGo"

    return setup


def variant_config(config: Any, v: Variant) -> Any:
    """The config with the variant's group keys, validated as fleet.yaml would be (``model_copy(update=...)``
    would leave ``capacity_mix`` a plain dict, which the service cannot read)."""
    base = config.groups[0]
    group = type(base).model_validate({**base.model_dump(), **v.spec})
    return config.model_copy(update={"groups": type(config.groups)([group, *config.groups[1:]])})


def run_variant(config: Any, v: Variant, hours: float, workload: str = DEFAULT_WORKLOAD) -> dict[str, Any]:
    """One variant's run; a variant with its own day (``workload``, ``hours``) ignores the arguments'."""
    workload = v.workload or workload
    hours = v.hours or hours
    cfg = variant_config(config, v)
    faults: list[Fault] = [parse_fault_spec(f) for f in v.faults]
    options = SimOptions(group_setup=_setup(v), restart_s=v.restart_s)
    if v.boot_s is not None:
        options = replace(options, boot_s=v.boot_s)
    result = simulate(cfg, workload, hours, faults=faults, policy=v.policy, options=options)
    s = result.summary
    out = {
        "slo_violation_minutes": s["slo_violation_minutes"],
        "gpu_hours": s["gpu_hours"],
        "cost_cny": s["cost_cny"],
        "ttft_p99_ms": s["ttft_p99_ms"],
        "rejected": s["rejected"],
        "max_instances": s["max_instances"],
        "scale_actions": s["scale_actions"],
        "wall_s": round(result.wall_s, 1),
    }
    for key in CAPACITY_FIELDS:
        if key in s:
            out[key] = s[key]
    reclaimed = [i for f in result.fault_log if f.get("event") == "spot-reclaim" for i in f["reclaimed"]]
    if reclaimed:
        out["reclaimed"] = len(reclaimed)
    return out


# What the billing adds to a run's summary (``fleet.sim.capacity.Billing.summary``) when the run had it.
CAPACITY_FIELDS = (
    "stopped_instance_hours",
    "stopped_disk_cost_cny",
    "spot_instance_hours",
    "scale_out_to_serving_s",
)


def bench_capacity(
    config: Any,
    *,
    hours: float = 12.0,
    only: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, variants in scenarios(hours).items():
        if only and name not in only:
            continue
        out[name] = {}
        for v in variants:
            if progress is not None:
                progress(f"{name} / {v.name}")
            out[name][v.name] = run_variant(config, replace(v), hours)
    return out


def verdicts(results: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The issue's targets, each as met or missed with the figures."""
    lines = []
    for name in ("stockout", "stockout-surge"):
        so = results.get(name)
        if so:
            ref = so["no-stockout"]["slo_violation_minutes"]
            extra = so["ours"]["slo_violation_minutes"] - ref
            without = so["ours-without-fallback"]["slo_violation_minutes"] - ref
            lines.append(
                f"{name}: ours loses {extra} SLO-violation minute(s) to the stock-out (target <= 1), "
                f"ours without the fallback {without}"
            )
    sp = results.get("spot")
    if sp:
        base, spot, hit = sp["on-demand"], sp["ours-spot"], sp["ours-spot-reclaim"]
        saving = 1 - spot["cost_cny"] / base["cost_cny"] if base["cost_cny"] else 0.0
        extra = hit["slo_violation_minutes"] - base["slo_violation_minutes"]
        lines.append(
            f"spot: {saving:.0%} lower cost (target >= 30%), reclaim costs {extra} SLO minute(s) (<= 2)"
        )
    ec = results.get("economical")
    if ec:
        lines.append(economical_verdict(ec))
    return lines


def economical_verdict(ec: dict[str, dict[str, Any]]) -> str:
    """Measured scale-out to serving (median) of the restarted instances against the fresh ones."""
    ours, release = ec["ours-recycle"], ec["release"]
    times = ours.get("scale_out_to_serving_s", {})
    fresh = times.get("fresh") or release.get("scale_out_to_serving_s", {}).get("fresh")
    restarted = times.get("restarted")
    cost = (
        f"cost {ours['cost_cny']} vs {release['cost_cny']} CNY "
        f"(stopped disks {ours.get('stopped_disk_cost_cny', 0)} CNY counted)"
    )
    if not fresh or not restarted:
        return f"economical: no restarted and fresh instances to compare in the run; {cost}"
    ratio = restarted["p50"] / fresh["p50"]
    return (
        f"economical: restarted instances served {restarted['p50']:.0f} s after their order (median of "
        f"{restarted['count']}), fresh ones {fresh['p50']:.0f} s ({fresh['count']}): {ratio:.2f} of a fresh "
        f"instance (target <= 0.50); {cost}"
    )
