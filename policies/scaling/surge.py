"""Surge: the admitted incident nodes still serving come on top of the healthy target, within the ceiling and
what ESS MaxSize leaves beside the Standby instances (MaxSize counts them too).

Not a step: it never changes the healthy target (``base``, persisted as ``last_target``) except to fit it
under MaxSize; it turns the steps' target into the serving target.
"""

from __future__ import annotations

from policies.model import Reason, ReasonCode
from policies.scaling.context import ScalingContext, ScalingResult


def with_surge(ctx: ScalingContext) -> ScalingResult:
    inp = ctx.inp
    base, reason, reasons = ctx.target, ctx.reason, list(ctx.reasons)
    room = inp.spec.max_size - len(inp.view.standby)
    cap = min(inp.bnd.ceiling, room)
    serving_target = base
    if inp.leaving_serving:
        serving_target = min(base + inp.leaving_serving, max(cap, base))
        if serving_target > base:
            reasons.append(
                Reason(
                    code=ReasonCode.SURGE_FOR_ISOLATION,
                    detail=f"+{serving_target - base} for instances being isolated",
                    inputs={"base": base, "leaving": inp.leaving_serving, "cap": cap},
                )
            )
            if reason not in (ReasonCode.RULE_SCALE_OUT, ReasonCode.PANIC):
                reason = ReasonCode.SURGE_FOR_ISOLATION
    serving_target = max(0, min(serving_target, room))
    return ScalingResult(min(base, serving_target), serving_target, reason, reasons, list(ctx.warnings))
