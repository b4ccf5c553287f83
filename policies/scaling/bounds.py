"""Bounds: the floor first (min_size, the warm floor or a schedule), then the ceiling, never below the floor.

The floor wins over the ceiling (schedule.py raises a schedule ceiling below the floor; warned here).
"""

from __future__ import annotations

from policies.model import PlanWarning, Reason, ReasonCode, WarningCode
from policies.scaling.context import Contribution, ScalingContext

_FLOOR_CODES = {"min_size": ReasonCode.FLOOR_MIN_SIZE, "warm_floor": ReasonCode.FLOOR_WARM}


def floor(ctx: ScalingContext) -> Contribution | None:
    """Step: up to the floor."""
    bnd = ctx.inp.bnd
    if ctx.target >= bnd.floor:
        return None
    code = _FLOOR_CODES.get(bnd.floor_source, ReasonCode.FLOOR_SCHEDULE)
    reason = Reason(
        code=code,
        detail=f"floor {bnd.floor} ({bnd.floor_source})",
        inputs={"floor": bnd.floor, "before": ctx.target},
    )
    return Contribution(target=bnd.floor, reason=reason)


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
    reason = Reason(
        code=code,
        detail=f"ceiling {bnd.ceiling} ({bnd.ceiling_source})",
        inputs={"ceiling": bnd.ceiling, "before": ctx.target},
    )
    return Contribution(target=bnd.ceiling, reason=reason, warnings=warnings)
