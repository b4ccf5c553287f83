"""Where a scale-out puts each new instance: which vSwitch (zone), which of the configuration's instance
types, spot or on-demand, and what happens when no candidate has stock.

ESS's rules, as documented for CreateScalingGroup / CreateScalingConfiguration:
- ``InstanceTypes`` are tried in the order given (the first has the highest priority).
- ``MultiAZPolicy``: PRIORITY tries the vSwitches in order; BALANCE puts the instance in the zone where the
  group has fewest; COST_OPTIMIZED tries the cheapest (type, zone) first (on-demand by price, spot by spot
  price) and mixes spot and on-demand by ``OnDemandBaseCapacity`` and
  ``OnDemandPercentageAboveBaseCapacity``, spreading spot over the ``SpotInstancePools`` cheapest types;
  ``CompensateWithOnDemand`` creates on-demand instances when spot cannot be had.
- The configuration's ``SpotStrategy`` (NoSpot, SpotWithPriceLimit with ``SpotPriceLimits``, SpotAsPriceGo)
  makes instances spot; a type whose spot price is above its limit gets no spot instance.
- An instance for which no candidate has stock is not created: the activity records
  ``OperationDenied.NoStock`` and ends ``Warning`` (fewer instances) or ``Failed`` (none).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleet.testing.core.errors import AliyunError, invalid
from fleet.testing.ecs.instance_types import lookup
from fleet.testing.ecs.stock import NO_STOCK_CODE, NO_STOCK_MESSAGE
from fleet.testing.ess.base import (
    COUNTED_STATES,
    EssBase,
    ScalingActivity,
    ScalingConfiguration,
    ScalingGroup,
)

MULTI_AZ_POLICIES = ("PRIORITY", "BALANCE", "COST_OPTIMIZED")
SPOT_STRATEGIES = ("NoSpot", "SpotWithPriceLimit", "SpotAsPriceGo")
# How long a group with desired capacity waits before it tries again to create what stock refused: the fake's
# own figure (ESS retries the expected capacity on its own schedule, which is not published).
STOCK_RETRY_S = 60.0


@dataclass(frozen=True)
class Placement:
    vswitch_id: str
    zone_id: str
    instance_type: str
    spot: bool


def _cpu_cores(instance_type: str) -> int:
    try:
        return lookup(instance_type).cpu_cores
    except (KeyError, ValueError):
        return 1


class PlacementMixin(EssBase):
    # ==== zones and prices ==================================================================================
    def _zones(self, group: ScalingGroup) -> list[tuple[str, str]]:
        """(vSwitch, zone) in the group's order. A vSwitch registered with the fake names its zone; otherwise
        the n-th vSwitch is in zone ``<region>-<n-th letter>``."""
        vswitches = group.vswitch_ids or ["vsw-fake-a"]
        return [
            (vsw, self.cloud.vswitch_zones.get(vsw) or f"{group.region_id}-{'abcdefgh'[i % 8]}")
            for i, vsw in enumerate(vswitches)
        ]

    def _price(self, instance_type: str, spot: bool) -> float:
        cores = _cpu_cores(instance_type)
        if spot:
            return self.cloud.prices.spot_cny_per_hour(instance_type, cores)
        return self.cloud.prices.on_demand_cny_per_hour(instance_type, cores)

    def _spot_allowed(self, config: ScalingConfiguration, instance_type: str) -> bool:
        if config.spot_strategy == "SpotAsPriceGo":
            return True
        if config.spot_strategy != "SpotWithPriceLimit":
            return False
        limit = config.spot_price_limits.get(instance_type)
        return limit is not None and limit >= self._price(instance_type, spot=True)

    # ==== candidates ========================================================================================
    def _candidates(self, group: ScalingGroup, config: ScalingConfiguration, spot: bool) -> list[Placement]:
        zones = self._zones(group)
        types = [t for t in config.instance_types if not spot or self._spot_allowed(config, t)]
        if group.multi_az_policy == "BALANCE":
            members = [i for i in self.group_instances(group) if i.lifecycle_state in COUNTED_STATES]
            load = {zone: sum(1 for i in members if i.zone_id == zone) for _, zone in zones}
            zones = sorted(zones, key=lambda vz: load[vz[1]])  # stable: ties keep the vSwitch order
        pairs = [Placement(vsw, zone, t, spot) for vsw, zone in zones for t in types]
        if group.multi_az_policy == "COST_OPTIMIZED":
            if spot and group.spot_instance_pools > 0:
                cheapest = sorted(set(types), key=lambda t: self._price(t, True))[: group.spot_instance_pools]
                pairs = [p for p in pairs if p.instance_type in cheapest]
                pairs.sort(
                    key=lambda p: (
                        self._spot_count(group, p.instance_type),
                        self._price(p.instance_type, True),
                    )
                )
            else:
                pairs.sort(key=lambda p: self._price(p.instance_type, spot))
        else:
            # PRIORITY and BALANCE: in a zone, the types in priority order; zones in their order.
            pairs.sort(key=lambda p: [z for _, z in zones].index(p.zone_id))
        return pairs

    def _spot_count(self, group: ScalingGroup, instance_type: str) -> int:
        return sum(
            1
            for i in self.group_instances(group)
            if i.lifecycle_state in COUNTED_STATES
            and i.spot_strategy != "NoSpot"
            and self.cloud.ecs.instances.get(i.instance_id) is not None
            and self.cloud.ecs.instances[i.instance_id].instance_type == instance_type
        )

    def _next_is_spot(self, group: ScalingGroup, config: ScalingConfiguration) -> bool:
        """Spot or on-demand for the next instance: the configuration decides, and in COST_OPTIMIZED groups
        the on-demand base and the on-demand share above it."""
        if config.spot_strategy == "NoSpot":
            return False
        if group.multi_az_policy != "COST_OPTIMIZED":
            return True
        members = [i for i in self.group_instances(group) if i.lifecycle_state in COUNTED_STATES]
        on_demand = sum(1 for i in members if i.spot_strategy == "NoSpot")
        if on_demand < group.on_demand_base_capacity:
            return False
        above_after = len(members) + 1 - group.on_demand_base_capacity
        wanted_on_demand_above = math.ceil(above_after * group.on_demand_percentage_above_base / 100)
        return on_demand - group.on_demand_base_capacity >= wanted_on_demand_above

    def _place(self, group: ScalingGroup, config: ScalingConfiguration) -> Placement | None:
        at = self.cloud.now_s()
        spot = self._next_is_spot(group, config)
        options = self._candidates(group, config, spot)
        if spot and (config.spot_strategy != "NoSpot") and group.compensate_with_on_demand:
            options += self._candidates(group, config, False)
        for option in options:
            if self.cloud.stock.available(option.zone_id, option.instance_type, at, option.spot):
                return option
        return None

    # ==== shortfalls ========================================================================================
    def _record_no_stock(self, group: ScalingGroup, activity: ScalingActivity, missing: int) -> None:
        activity.shortfall += missing
        message = (
            f"Fail to create Instance into scaling group(id:{group.group_id}), error code: {NO_STOCK_CODE}, "
            f"msg: {NO_STOCK_MESSAGE}"
        )
        activity.error_code = NO_STOCK_CODE
        activity.error_message = NO_STOCK_MESSAGE
        activity.status_message = message
        activity.error_messages = [
            {"Code": NO_STOCK_CODE, "Message": NO_STOCK_MESSAGE, "FailedInstanceIds": []}
        ]
        if group.desired_enabled:
            group.retry_not_before_s = self.cloud.now_s() + STOCK_RETRY_S
            gid = group.group_id

            def retry(at: float) -> None:
                again = self.groups.get(gid)
                if again is not None:
                    self._converge(again, "The scaling group retries the capacity that stock refused.")

            self.cloud.timers.schedule(group.retry_not_before_s, retry, f"ess stock retry {gid}")

    # ==== parameters ========================================================================================
    def set_capacity_mix(
        self,
        group: ScalingGroup,
        *,
        multi_az_policy: str | None,
        on_demand_base_capacity: int | None,
        on_demand_percentage_above_base: int | None,
        spot_instance_pools: int | None,
        spot_instance_remedy: bool | None,
        compensate_with_on_demand: bool | None,
    ) -> None:
        """The group's MultiAZPolicy and spot parameters (CreateScalingGroup / ModifyScalingGroup)."""
        if multi_az_policy is not None and multi_az_policy not in MULTI_AZ_POLICIES:
            raise invalid(f"MultiAZPolicy {multi_az_policy!r} is not one of {', '.join(MULTI_AZ_POLICIES)}.")
        _check_range("OnDemandBaseCapacity", on_demand_base_capacity, 0, 1000)
        _check_range("OnDemandPercentageAboveBaseCapacity", on_demand_percentage_above_base, 0, 100)
        _check_range("SpotInstancePools", spot_instance_pools, 0, 10)
        if multi_az_policy is not None:
            group.multi_az_policy = multi_az_policy
        if on_demand_base_capacity is not None:
            group.on_demand_base_capacity = on_demand_base_capacity
        if on_demand_percentage_above_base is not None:
            group.on_demand_percentage_above_base = on_demand_percentage_above_base
        if spot_instance_pools is not None:
            group.spot_instance_pools = spot_instance_pools
        if spot_instance_remedy is not None:
            group.spot_instance_remedy = spot_instance_remedy
        if compensate_with_on_demand is not None:
            group.compensate_with_on_demand = compensate_with_on_demand

    @staticmethod
    def set_spot_strategy(
        config: ScalingConfiguration, strategy: str | None, limits: dict[str, float]
    ) -> None:
        if strategy is not None and strategy not in SPOT_STRATEGIES:
            raise invalid(f"SpotStrategy {strategy!r} is not one of {', '.join(SPOT_STRATEGIES)}.")
        if (strategy or config.spot_strategy) == "SpotWithPriceLimit" and not (
            limits or config.spot_price_limits
        ):
            raise AliyunError(
                "MissingParameter.SpotPriceLimits",
                "SpotPriceLimits is required when SpotStrategy is SpotWithPriceLimit.",
                400,
            )
        if strategy is not None:
            config.spot_strategy = strategy
        if limits:
            config.spot_price_limits = dict(limits)


def _check_range(name: str, value: int | None, low: int, high: int) -> None:
    if value is not None and not low <= value <= high:
        raise invalid(f"{name} must be within {low}-{high}, got {value}.")
