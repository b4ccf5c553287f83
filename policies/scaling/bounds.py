"""Bounds: the floor first (min_size, the warm floor or a schedule), then the ceiling, never below the floor.

The floor wins over the ceiling (schedule.py raises a schedule ceiling below the floor; warned here).

With a floor of 0 (``min_size: 0``, no warm floor, no window's floor) the metrics never take the last
instance: the node agents on the instances are the group's only demand signal, so with none left no reading
would ever scale the group out again, and the requests that came would be refused. Only a ceiling of 0 (a
schedule's ``max: 0``, or ``max_size: 0``) empties the group.
"""

from __future__ import annotations

from policies.model import PlanWarning, Reason, ReasonCode, Scalar, WarningCode
from policies.scaling.context import Contribution, ScalingContext

_FLOOR_CODES = {"min_size": ReasonCode.FLOOR_MIN_SIZE, "warm_floor": ReasonCode.FLOOR_WARM}


def floor(ctx: ScalingContext) -> Contribution | None:
    """Step: up to the floor."""
    bnd = ctx.inp.bnd
    if ctx.target >= bnd.floor:
        return None
    code = _FLOOR_CODES.get(bnd.floor_source, ReasonCode.FLOOR_SCHEDULE)
    inputs: dict[str, Scalar] = {"floor": bnd.floor, "before": ctx.target}
    if bnd.floor_calendar:
        inputs["calendar"] = bnd.floor_calendar
    reason = Reason(code=code, detail=f"floor {bnd.floor} ({bnd.floor_why})", inputs=inputs)
    return Contribution(target=bnd.floor, reason=reason)


def last_instance(ctx: ScalingContext) -> Contribution | None:
    """Step: keep one instance when the target would empty a group that may hold any (the floor is 0)."""
    if ctx.target > 0 or ctx.inp.bnd.ceiling < 1:
        return None
    reason = Reason(
        code=ReasonCode.FLOOR_LAST_INSTANCE,
        detail="one instance is kept: with none, no agent reports demand and nothing would scale out again "
        "(a schedule with max: 0 empties the group)",
        inputs={"floor": 1, "before": ctx.target},
    )
    return Contribution(target=1, reason=reason)


def ceiling(ctx: ScalingContext) -> Contribution | None:
    """Step: down to the ceiling; a warning when a schedule's ceiling was below the floor."""
    bnd = ctx.inp.bnd
    warnings: tuple[PlanWarning, ...] = ()
    if bnd.ceiling_clipped:
        warnings = (
            PlanWarning(
                code=WarningCode.CEILING_BELOW_FLOOR,
                group=ctx.inp.group.name,
                detail=f"a schedule ceiling is below the floor {bnd.floor}: the floor wins",
            ),
        )
    if ctx.target <= bnd.ceiling:
        return Contribution(warnings=warnings) if warnings else None
    code = ReasonCode.CEILING_MAX_SIZE if bnd.ceiling_source == "max_size" else ReasonCode.CEILING_SCHEDULE
    inputs: dict[str, Scalar] = {"ceiling": bnd.ceiling, "before": ctx.target}
    if bnd.ceiling_calendar:
        inputs["calendar"] = bnd.ceiling_calendar
    reason = Reason(code=code, detail=f"ceiling {bnd.ceiling} ({bnd.ceiling_why})", inputs=inputs)
    return Contribution(target=bnd.ceiling, reason=reason, warnings=warnings)
