"""`fleet bench capacity` (issue 17): GPU capacity that is sold out, reclaimed or restarted, each scenario run
with ours, ours without the feature and ESS-native behaviour (the same group settings, ESS's own fallback,
the ESS alarm rule instead of the service).

The simulated world runs one engine kind per group, so the stock-out scenario falls back to a type with the
same GPUs (``ecs.gn7i-c32g1.16xlarge``: two A10s like the default ``ecs.gn7i-2x.8xlarge``, more vCPUs and
RAM) and the engine physics stay right.

Scenarios (the default day: ServeGen m-small day 2, ramp from 06:00, peak at 09:00 Shanghai time):
- ``stockout``: the primary type is sold out from 06:00 for 2 h;
- ``spot``: a spot tier above an on-demand base of 2 (70 % of the rest spot), with a quarter of the spot
  instances reclaimed at 09:00, against the same day all on demand;
- ``economical``: economical mode (recycle) against release on the same day.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fleet.sim.scenario import DEFAULT_WORKLOAD, simulate
from fleet.sim.types import SimOptions
from fleet.sim.world import Fault, parse_fault_spec

PRIMARY = "ecs.gn7i-2x.8xlarge"
SAME_GPU_FALLBACK = "ecs.gn7i-c32g1.16xlarge"
SPOT_MIX = {"on_demand_base": 2, "spot_percentage_above_base": 70}
# Economical mode: starting a stopped instance skips creating it and pulling the image; its weights still load
# from the local disk. The figure is the simulator's input (ECS boot 60 s of the 240 s cold start skipped, the
# weights read from a warm local disk in about a third of the time): measure yours and set it.
RESTART_S = 100.0


@dataclass(frozen=True)
class Variant:
    name: str
    policy: str = "ours"
    spec: dict[str, Any] = field(default_factory=dict)  # fleet.yaml keys of the group
    faults: tuple[str, ...] = ()
    config_types: tuple[str, ...] = ()  # the scaling configuration's InstanceTypes (ESS's own fallback)
    spot: bool = False  # the fake group's spot mix (COST_OPTIMIZED, SpotAsPriceGo) from SPOT_MIX
    recycle: bool = False
    restart_s: float | None = None


def scenarios(hours: float) -> dict[str, list[Variant]]:
    stockout = (f"stockout:{PRIMARY},at=6h,for=2h",)
    reclaim = ("spot-reclaim,at=9h,share=0.25",)
    ladder = {"instance_types": [PRIMARY, SAME_GPU_FALLBACK]}
    mix = {"instance_types": [PRIMARY], "capacity_mix": SPOT_MIX}
    return {
        "stockout": [
            Variant("no-stockout", spec=ladder),
            Variant("ours", spec=ladder, faults=stockout),
            Variant("ours-without-fallback", faults=stockout),
            Variant(
                "ess-native", policy="ess-alarm", faults=stockout, config_types=(PRIMARY, SAME_GPU_FALLBACK)
            ),
        ],
        "spot": [
            Variant("on-demand"),
            Variant("ours-spot", spec=mix, spot=True),
            Variant("ours-spot-reclaim", spec=mix, spot=True, faults=reclaim),
            Variant("ours-without-spot-handling-reclaim", spot=True, faults=reclaim),
            Variant("ess-native-spot-reclaim", policy="ess-alarm", spot=True, faults=reclaim),
        ],
        "economical": [
            Variant("release"),
            Variant("ours-recycle", spec={"economical_mode": True}, recycle=True, restart_s=RESTART_S),
            Variant("ess-native-recycle", policy="ess-alarm", recycle=True, restart_s=RESTART_S),
        ],
    }


def _setup(v: Variant) -> Callable[[Any, str], None]:
    """What the group's Terraform settings would make of the fake group."""

    def setup(cloud: Any, group_id: str) -> None:
        group = cloud.ess.groups[group_id]
        config = cloud.ess.configurations[group.active_config_id]
        if v.config_types:
            config.instance_types = list(v.config_types)
        if v.recycle:
            group.scaling_policy = "recycle"
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


def run_variant(config: Any, v: Variant, hours: float, workload: str = DEFAULT_WORKLOAD) -> dict[str, Any]:
    group = config.groups[0].model_copy(update=v.spec)
    cfg = config.model_copy(update={"groups": type(config.groups)([group, *config.groups[1:]])})
    faults: list[Fault] = [parse_fault_spec(f) for f in v.faults]
    options = SimOptions(group_setup=_setup(v), restart_s=v.restart_s)
    result = simulate(cfg, workload, hours, faults=faults, policy=v.policy, options=options)
    s = result.summary
    return {
        "slo_violation_minutes": s["slo_violation_minutes"],
        "gpu_hours": s["gpu_hours"],
        "cost_cny": s["cost_cny"],
        "ttft_p99_ms": s["ttft_p99_ms"],
        "rejected": s["rejected"],
        "max_instances": s["max_instances"],
        "wall_s": round(result.wall_s, 1),
    }


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
    so = results.get("stockout")
    if so:
        extra = so["ours"]["slo_violation_minutes"] - so["no-stockout"]["slo_violation_minutes"]
        lines.append(f"stockout: ours loses {extra} SLO-violation minute(s) to the stock-out (target <= 1)")
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
        lines.append(
            f"economical: restart to serving {RESTART_S:.0f} s vs the cold start (the simulator's input); "
            f"cost {ec['ours-recycle']['cost_cny']} vs {ec['release']['cost_cny']} CNY with disks counted"
        )
    return lines
