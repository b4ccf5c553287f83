"""GPU-hour and cost accounting of the simulated fleet with economical mode and spot (issue 17).

A running instance bills its full price; a spot one its spot price (``spot_fraction`` of on-demand: spot
prices are not published per type, and 30% is the estimate ``sizing.fallback`` uses too); a stopped one
(economical mode, StopCharging) bills only its disks and no GPU-hours. ``disk_cny_per_hour`` is an estimate of
a GPU node's system and data disks (about 200 GiB of ESSD PL0); set it from your own bill.

``Startups`` measures, in the run, how long each instance took from the world's first sight of its order (a
fresh instance appearing in the group, a stopped one started again) to serving: the figure the economical
target is about, read from the run rather than from its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sizing.stats import nearest_rank

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
    disk_cost_cny: float = 0.0  # the stopped instances' disks
    startups: Startups = field(default_factory=lambda: Startups())

    def add(self, world: Any, cloud: Any, dt_s: float) -> None:
        """Bill ``dt_s`` seconds of every instance in the group (and those still draining)."""
        self.startups.observe(world)
        hours = dt_s / 3600.0
        for iid, inst in [*world.instances.items(), *((i.instance_id, i) for i in world.draining)]:
            ecs = cloud.ecs.instances.get(iid)
            stopped = inst.lifecycle == "Stopped" or (ecs is not None and ecs.status == "Stopped")
            if stopped and not inst.outstanding:  # one still draining is held running by the drain hook
                self.cost_cny += hours * self.disk_cny_per_hour
                self.disk_cost_cny += hours * self.disk_cny_per_hour
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

    def summary(self) -> dict[str, Any]:
        """The run summary's capacity fields: only those the run had (stopped or spot time, startups)."""
        out: dict[str, Any] = {}
        if self.stopped_seconds:
            out["stopped_instance_hours"] = round(self.stopped_seconds / 3600.0, 2)
            out["stopped_disk_cost_cny"] = round(self.disk_cost_cny, 2)
        if self.spot_seconds:
            out["spot_instance_hours"] = round(self.spot_seconds / 3600.0, 2)
        startups = self.startups.summary()
        if startups:
            out["scale_out_to_serving_s"] = startups
        return out


class Startups:
    """Order to serving of every instance ordered during the run (the pre-warmed start fleet is not).

    A fresh instance's order is seen when it appears in the group (``appeared_s``), a restarted one's when
    the world sees the stopped instance start again (its ``restarted`` log entry); both at most one world
    sync after the scaling activity began. It serves once InService, loaded and healthy
    (``SimInstance.serving``), read at each billing step (the world's sync period, 5 s).
    """

    def __init__(self) -> None:
        self.pending: dict[str, tuple[str, float]] = {}
        self.seen: set[str] = set()
        self.samples: dict[str, list[float]] = {"fresh": [], "restarted": []}
        self._log_pos = 0

    def observe(self, world: Any) -> None:
        now = world.now_s
        for iid, inst in world.instances.items():
            if iid not in self.seen:
                self.seen.add(iid)
                if inst.ready_s > inst.appeared_s:  # ordered in the run, not pre-warmed
                    self.pending[iid] = ("fresh", inst.appeared_s)
        log = world.fault_log
        for entry in log[self._log_pos :]:
            if entry.get("event") == "restarted" and entry.get("instance_id") in world.instances:
                self.pending[entry["instance_id"]] = ("restarted", float(entry["at_s"]))
        self._log_pos = len(log)
        for iid, (kind, since) in list(self.pending.items()):
            inst = world.instances.get(iid)
            if inst is None:  # removed before it served
                del self.pending[iid]
            elif inst.serving(now):
                self.samples[kind].append(now - since)
                del self.pending[iid]

    def summary(self) -> dict[str, dict[str, float]]:
        out = {}
        for kind, values in self.samples.items():
            if values:
                v = sorted(values)
                out[kind] = {
                    "count": len(v),
                    "min": round(v[0], 1),
                    "p50": round(nearest_rank(v, 50), 1),
                    "p90": round(nearest_rank(v, 90), 1),
                    "max": round(v[-1], 1),
                }
        return out
