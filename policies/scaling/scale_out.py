"""Scale-out: the fired rules' highest recommendation, at most ``max_step_up`` above the hold (not in panic).

When capacity already ordered covers what the rules want, the reason says so and the target holds.
"""

from __future__ import annotations

from policies.model import Reason, ReasonCode, Scalar
from policies.scaling.context import Contribution, ScalingContext
from policies.spec import resolve_count


def scale_out(ctx: ScalingContext) -> Contribution | None:
    """Step: the scale-out rules that fired."""
    fired = ctx.signals.fired
    if not fired:
        return None
    view, hold, panic = ctx.inp.view, ctx.hold, ctx.signals.panic
    best = max(fired, key=lambda f: f.desire)
    rule, wanted = best.rule, best.desire
    inputs: dict[str, Scalar] = {
        "metric": rule.metric,
        "value": best.agg.value,
        "threshold": rule.above,
        "for_s": rule.for_s,
        "in_service": len(view.serving),
        "pending": len(view.pending) + view.in_flight,
        "desired": wanted,
        "hold": hold,
    }
    if wanted <= hold:
        detail = f"{rule.label}: capacity already ordered covers it"
        return Contribution(
            reason=Reason(code=ReasonCode.PENDING_CAPACITY_COVERS, detail=detail, inputs=inputs)
        )
    headline = Reason(
        code=ReasonCode.PANIC if panic else ReasonCode.RULE_SCALE_OUT,
        detail=f"{rule.label}" + (" (panic)" if best.by_panic else ""),
        inputs=inputs,
    )
    if panic:
        return Contribution(target=wanted, reason=headline)
    step = resolve_count(ctx.inp.spec.stabilization.max_step_up, hold, minimum=1, round_up=True)
    if wanted <= hold + step:
        return Contribution(target=wanted, reason=headline)
    limited = Reason(
        code=ReasonCode.STEP_LIMITED_UP,
        detail=f"at most +{step} per decision",
        inputs={"desired": wanted, "step": step},
    )
    return Contribution(target=hold + step, reason=headline, notes=(limited,))
