"""Scale-in: to the highest recommendation of the stabilization window, at most ``max_step_down`` below the
hold, only when no scale-out rule fired and nothing blocks it.

Blockers, in order: a rule metric unknown, the panic hold, the isolation breaker, an isolated node waiting for
its replacement, a window not yet covered by known metrics, scale-in rules not held for their duration, the
cooldown. When the metrics want a change within the tolerance band, the reason says so.
"""

from __future__ import annotations

from policies.model import Reason, ReasonCode
from policies.scaling.context import Contribution, ScalingContext
from policies.spec import resolve_count


def window_max(ctx: ScalingContext) -> int | None:
    """The highest recommendation of the window, never below the floor (below it nothing scales in)."""
    candidate = max((r.serving for r in ctx.inp.gh.recommendations), default=None)
    if candidate is None:
        return None
    return max(candidate, ctx.inp.bnd.floor)


def scale_in(ctx: ScalingContext) -> Contribution | None:
    """Step: down to the window's highest recommendation, unless blocked."""
    candidate = window_max(ctx)
    if ctx.signals.fired or candidate is None or candidate >= ctx.hold:
        return None
    hold, st = ctx.hold, ctx.inp.spec.stabilization
    inputs = {"hold": hold, "window_max": candidate, "window_s": st.scale_in_window_s}
    blocker = _blocker(ctx)
    if blocker is not None:
        code, detail = blocker
        return Contribution(reason=Reason(code=code, detail=detail, inputs=inputs))
    step = resolve_count(st.max_step_down, hold, minimum=1)
    target = max(candidate, hold - step)
    detail = " and ".join(r.label for r in ctx.inp.spec.scale_in) or "window recommendation"
    headline = Reason(code=ReasonCode.RULE_SCALE_IN, detail=detail, inputs={**inputs, "step": step})
    notes: tuple[Reason, ...] = ()
    if target > candidate:
        notes = (
            Reason(
                code=ReasonCode.STEP_LIMITED_DOWN,
                detail=f"at most -{step} per decision",
                inputs={"window_max": candidate, "step": step},
            ),
        )
    return Contribution(target=target, reason=headline, notes=notes)


def _blocker(ctx: ScalingContext) -> tuple[ReasonCode, str] | None:
    inp, sig = ctx.inp, ctx.signals
    gh, now, st = inp.gh, inp.now, inp.spec.stabilization
    if not sig.all_known:
        return ReasonCode.SCALE_IN_BLOCKED_METRICS, "a rule metric is missing, stale or partial"
    if gh.panic_until is not None and now < gh.panic_until:
        return ReasonCode.SCALE_IN_BLOCKED_PANIC, f"panic hold until {gh.panic_until.isoformat()}"
    if inp.breaker_open:
        return ReasonCode.SCALE_IN_BLOCKED_BREAKER, "isolation breaker open"
    if (
        inp.unreplaced
        and inp.spec.guardrails.block_scale_in_while_isolating
        and len(inp.view.serving) - inp.leaving_serving < ctx.hold
    ):
        return (
            ReasonCode.SCALE_IN_BLOCKED_ISOLATION,
            f"{inp.unreplaced} isolated instance(s) without a replacement InService",
        )
    if gh.known_since is None or (now - gh.known_since).total_seconds() < st.scale_in_window_s:
        # HPA keeps the highest recommendation of the window, but after a restart or an outage its
        # window holds only a moment (anchors: ray#46497, HPA#99394): wait until it is really full.
        return (
            ReasonCode.SCALE_IN_STABILIZING,
            f"the {st.scale_in_window_s:.0f} s scale-in window is not yet covered by known metrics",
        )
    if not sig.in_rules_hold:
        return ReasonCode.SCALE_IN_STABILIZING, "scale-in rules have not held for their duration"
    if gh.last_scale_at is not None and (now - gh.last_scale_at).total_seconds() < st.scale_in_cooldown_s:
        return ReasonCode.SCALE_IN_COOLDOWN, f"last change at {gh.last_scale_at.isoformat()}"
    return None


def within_tolerance(ctx: ScalingContext) -> Contribution | None:
    """Step: no rule fired, nothing to scale in, and the metrics want a change within the tolerance band."""
    sig = ctx.signals
    candidate = window_max(ctx)
    if sig.fired or candidate is None or candidate < ctx.hold:
        return None
    if sig.raw != ctx.hold or not sig.raw_desires or max(sig.raw_desires) == ctx.hold:
        return None
    return Contribution(
        reason=Reason(
            code=ReasonCode.WITHIN_TOLERANCE,
            detail=f"within {ctx.inp.spec.stabilization.tolerance:g}",
            inputs={"hold": ctx.hold, "desired": max(sig.raw_desires)},
        )
    )
