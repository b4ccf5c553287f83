"""GPU-hour and cost accounting of the simulated fleet with economical mode and spot (issue 17).

A running instance bills its full price; a spot one its spot price (``spot_fraction`` of on-demand: spot
prices are not published per type, and 30% is the estimate ``sizing.fallback`` uses too); a stopped one
(economical mode, StopCharging) bills only its disks and no GPU-hours. ``disk_cny_per_hour`` is an estimate of
a GPU node's system and data disks (about 200 GiB of ESSD PL0); set it from your own bill.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_DISK_CNY_PER_HOUR = 0.15
DEFAULT_SPOT_FRACTION = 0.3


@dataclass
class Billing:
    price_cny_per_hour: float
    gpus_per_instance: int
    spot_fraction: float = DEFAULT_SPOT_FRACTION
    disk_cny_per_hour: float = DEFAULT_DISK_CNY_PER_HOUR
    gpu_seconds: float = 0.0
    cost_cny: float = 0.0
    stopped_seconds: float = 0.0
    spot_seconds: float = 0.0

    def add(self, world: Any, cloud: Any, dt_s: float) -> None:
        """Bill ``dt_s`` seconds of every instance in the group (and those still draining)."""
        hours = dt_s / 3600.0
        for iid, inst in [*world.instances.items(), *((i.instance_id, i) for i in world.draining)]:
            ecs = cloud.ecs.instances.get(iid)
            if inst.lifecycle == "Stopped" or (ecs is not None and ecs.status == "Stopped"):
                self.cost_cny += hours * self.disk_cny_per_hour
                self.stopped_seconds += dt_s
                continue
            spot = ecs is not None and ecs.spot_strategy != "NoSpot"
            price = self.price_cny_per_hour * (self.spot_fraction if spot else 1.0)
            self.cost_cny += hours * price
            self.gpu_seconds += dt_s * self.gpus_per_instance
            if spot:
                self.spot_seconds += dt_s

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0
