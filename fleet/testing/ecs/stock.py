"""GPU stock and prices of the fake: how many more instances of a type a zone can create, sold-out windows
scheduled on the fake clock, and the on-demand and spot (preemptible) price of each type.

On Alibaba Cloud GPU stock runs out per zone and instance type: ECS then refuses with
``OperationDenied.NoStock`` ("The requested resource is sold out in the specified zone; try other types
of resources or other regions and zones.") and an ESS scale-out ends ``Warning`` or ``Failed`` with fewer
instances than it was asked for (aliyun-api.md sections 1.3 and 1.4). Stock is unlimited unless a test
sets it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleet.testing.core.timeutil import iso_s

NO_STOCK_CODE = "OperationDenied.NoStock"
NO_STOCK_MESSAGE = (
    "The requested resource is sold out in the specified zone; try other types of resources or other regions "
    "and zones."
)
# The fake's spot price when a test sets none: preemptible GPU capacity sells at a fraction of on-demand
# (Alibaba quotes discounts of up to 90%; the fake's default of 30% of on-demand is its own choice).
DEFAULT_SPOT_FRACTION = 0.3


@dataclass
class SoldOutWindow:
    instance_type: str
    zone_id: str | None  # None: every zone
    start_s: float
    end_s: float | None  # None: until changed
    spot_only: bool = False

    def covers(self, zone_id: str, instance_type: str, at_s: float, spot: bool) -> bool:
        if self.instance_type != instance_type or (self.zone_id is not None and self.zone_id != zone_id):
            return False
        if self.spot_only and not spot:
            return False
        return self.start_s <= at_s and (self.end_s is None or at_s < self.end_s)

    def as_dict(self) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type,
            "zone_id": self.zone_id,
            "start": iso_s(self.start_s),
            "end": iso_s(self.end_s),
            "spot_only": self.spot_only,
        }


@dataclass
class StockBook:
    """Remaining stock per (zone, type, market) and scheduled sold-out windows.

    A missing entry is unlimited. A spot request needs both the on-demand entry (a zone without the GPU has
    neither) and the spot entry to have room; creating an instance takes one, releasing it gives it back."""

    counts: dict[tuple[str | None, str, bool], int] = field(default_factory=dict)
    windows: list[SoldOutWindow] = field(default_factory=list)

    def set_count(self, zone_id: str | None, instance_type: str, available: int | None, spot: bool) -> None:
        key = (zone_id, instance_type, spot)
        if available is None:
            self.counts.pop(key, None)
        else:
            self.counts[key] = max(0, available)

    def _entries(self, zone_id: str, instance_type: str, spot: bool) -> list[tuple[str | None, str, bool]]:
        markets = (False, True) if spot else (False,)
        keys: list[tuple[str | None, str, bool]] = []
        for market in markets:
            for zone in (zone_id, None):
                if (zone, instance_type, market) in self.counts:
                    keys.append((zone, instance_type, market))
                    break  # a zone's own entry wins over the every-zone one
        return keys

    def available(self, zone_id: str, instance_type: str, at_s: float, spot: bool = False) -> bool:
        if any(w.covers(zone_id, instance_type, at_s, spot) for w in self.windows):
            return False
        return all(self.counts[k] > 0 for k in self._entries(zone_id, instance_type, spot))

    def take(self, zone_id: str, instance_type: str, spot: bool) -> None:
        for key in self._entries(zone_id, instance_type, spot):
            self.counts[key] -= 1

    def give_back(self, zone_id: str, instance_type: str, spot: bool) -> None:
        for key in self._entries(zone_id, instance_type, spot):
            self.counts[key] += 1

    def state(self) -> dict[str, Any]:
        return {
            "counts": [
                {"zone_id": z, "instance_type": t, "spot": s, "available": n}
                for (z, t, s), n in sorted(self.counts.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))
            ],
            "sold_out": [w.as_dict() for w in self.windows],
        }


@dataclass
class PriceBook:
    """CNY per hour by type. Unset on-demand prices follow ESS's COST_OPTIMIZED yardstick, the vCPU count
    (one "unit" per vCPU); unset spot prices are ``DEFAULT_SPOT_FRACTION`` of on-demand."""

    on_demand: dict[str, float] = field(default_factory=dict)
    spot: dict[str, float] = field(default_factory=dict)

    def on_demand_cny_per_hour(self, instance_type: str, cpu_cores: int) -> float:
        return self.on_demand.get(instance_type, float(cpu_cores))

    def spot_cny_per_hour(self, instance_type: str, cpu_cores: int) -> float:
        default = self.on_demand_cny_per_hour(instance_type, cpu_cores) * DEFAULT_SPOT_FRACTION
        return self.spot.get(instance_type, default)
