"""The capacity-model target: instances for the forecast demand over the horizon, with square-root headroom.

desired = max(floor, warm floor, this target, the rules): the floor steps come after this one, and the rules
before it are kept when they ask for more, except for a burst the warm fleet already covers. A burst shorter
than the cold start cannot be met by ordering instances (they would arrive after it): while the observed
demand fits in the instances serving now and no rule has breached for longer than ``cold_start_s``, the rules'
scale-out is held at this target and the queue absorbs the burst (reason ``burst_absorbed``). The forecast's
own scale-out is held likewise where only its band asks for it, the band's tail being such bursts
(``_band_only``): it goes no higher than the busiest minute of the scale-in window needs.

Scale-in as soon as the forecast over the horizon fits in fewer instances with ``scale_in_margin`` to spare,
at most ``max_step_down`` per decision, never while the demand is missing, stale or partial (then nothing
scales in at all, the rules' scale-in included), never while the isolation breaker is open (except by as
many instances as serve nothing, vLLM reported down, when all of them are suspects: scale-in removes suspects
first) or an isolated node waits for its replacement, and not within the scale-in cooldown of a scale-out.

``forecast-only`` records all of this in the plan's inputs and changes nothing.
"""

from __future__ import annotations

import math

from policies.model import OPEN_STATES, Reason, ReasonCode
from policies.scaling.context import Contribution, ScalingContext
from policies.scaling.demand import LOADED, DemandSignals
from policies.spec import PredictiveMode, resolve_count

BREAKER_OPEN = "isolation breaker open"


def predictive(ctx: ScalingContext) -> Contribution | None:
    """Step: the forecast's target, combined with what the rules decided."""
    sig = ctx.demand
    if sig is None:
        return None
    if sig.mode == PredictiveMode.FORECAST_ONLY:
        detail = f"forecast-only: would want {sig.target}" if sig.target is not None else "forecast-only"
        return Contribution(notes=(Reason(code=ReasonCode.PREDICTIVE_FORECAST_ONLY, detail=detail),))
    if sig.target is None:
        # no forecast yet (a service's first minutes without history) while the demand may well be known:
        # the rules' backlog ratios are held to what it needs as they are with a forecast
        capped = _capped(ctx, sig, ctx.hold) if ctx.target > ctx.hold else None
        return capped or _unknown(ctx)
    target = sig.target
    if ctx.target > ctx.hold:
        return _after_rules_out(ctx, sig, target)
    if target > ctx.target:
        return _out(ctx, sig, target)
    return _in(ctx, sig, target)


def _inputs(ctx: ScalingContext, sig: DemandSignals) -> dict[str, float | int | str | bool | None]:
    return {
        "hold": ctx.hold,
        "predictive_target": sig.target,
        "forecast_upper_rps": sig.inputs.get("forecast_upper_rps"),
        "capacity_per_instance_rps": sig.inputs.get("capacity_per_instance_rps"),
    }


def _unknown(ctx: ScalingContext) -> Contribution | None:
    """Unknown demand: the rules decide alone, and nothing scales in."""
    if ctx.target >= ctx.hold:
        return None
    reason = Reason(
        code=ReasonCode.SCALE_IN_BLOCKED_METRICS,
        detail="demand unknown (request rate missing, stale or partial): no scale-in",
        inputs={"hold": ctx.hold, "wanted": ctx.target},
    )
    return Contribution(target=ctx.hold, reason=reason)


def _out(ctx: ScalingContext, sig: DemandSignals, target: int) -> Contribution | None:
    if sig.burst_need is not None and _band_only(ctx, sig):
        # the band's tail is bursts shorter than the cold start: instances ordered for them arrive after them
        target = min(target, max(ctx.target, sig.burst_need))
        if target <= ctx.target:
            return Contribution(notes=(_hold_reason(ctx, sig, "the bursts of the window fit the fleet"),))
    reason = Reason(
        code=ReasonCode.PREDICTIVE_SCALE_OUT,
        detail=f"forecast {sig.forecast.upper_rps:.2f} req/s over the horizon needs {target}",
        inputs=_inputs(ctx, sig),
    )
    return Contribution(target=target, reason=reason)


def _band_only(ctx: ScalingContext, sig: DemandSignals) -> bool:
    """Whether only the band's bursts ask for more than ``ctx.target``: a band of ``1 / LOADED`` or more (its
    tail is bursts of twice the forecast or more, not the level's error, which a narrower band is), and the
    forecast's mean path and the demand now needing no more instances than that and running them under half
    load (they hold a burst of twice the mean warm)."""
    cap = sig.capacity_rps
    if cap is None or sig.mean_need is None or sig.forecast.band < 1.0 / LOADED:
        return False
    mean = max(sig.forecast.peak_rps, sig.demand.rps or 0.0)
    return sig.mean_need <= ctx.target and mean < LOADED * ctx.target * cap


def _after_rules_out(ctx: ScalingContext, sig: DemandSignals, target: int) -> Contribution | None:
    """A rule scaled out: keep it, unless it is a burst the serving fleet covers (then the target holds)."""
    inp = ctx.inp
    serving = sig.demand.reporting  # those still loading serve nothing yet
    cap, rps = sig.capacity_rps, sig.demand.rps
    # the mean load fits the serving instances: the queue drains without new ones
    covered = cap is not None and rps is not None and sig.demand.complete and rps / cap <= serving
    longest = max(
        ((inp.now - t.since).total_seconds() for k, t in inp.gh.tracks.items() if k.startswith("out:")),
        default=0.0,
    )
    if covered and longest < ctx.load_s:
        new = max(target, ctx.hold)
        reason = Reason(
            code=ReasonCode.BURST_ABSORBED,
            detail=(
                f"demand {sig.demand.rps or 0:.2f} req/s fits the {serving} serving: a burst shorter than "
                "the "
                "cold start is met by warm headroom and the queue"
            ),
            inputs={**_inputs(ctx, sig), "rules_wanted": ctx.target, "breach_s": round(longest, 1)},
        )
        return Contribution(target=new, reason=reason)
    if target > ctx.target:
        return _out(ctx, sig, target)
    return _capped(ctx, sig, target)


def _capped(ctx: ScalingContext, sig: DemandSignals, target: int) -> Contribution | None:
    """A ratio rule reading a backlog (P99 TTFT of a queue, KV use) can ask for many times what the demand
    needs; the instances arrive a cold start later, when the backlog is gone, and are then scaled in slowly.
    While the demand is fully observed, the rules' target is held to ``rules_ceiling`` times the offered load
    (observed demand over the corrected capacity per instance), or the forecast's target if that is more
    (with no forecast yet, ``target`` is the hold: the rules still never scale out less than that)."""
    ceiling = ctx.inp.spec.predictive.rules_ceiling
    cap_rps, rps = sig.capacity_rps, sig.demand.rps
    if ceiling is None or not sig.demand.complete or not cap_rps or rps is None:
        return None
    load = rps / cap_rps
    cap = max(ctx.hold, target, math.ceil(ceiling * load - 1e-9))
    if ctx.target <= cap:
        return None
    reason = Reason(
        code=ReasonCode.RULES_CAPPED,
        detail=(
            f"the rules wanted {ctx.target}; the observed demand {rps:.2f} req/s is a load of {load:.1f} "
            f"instances: held to {cap} ({ceiling:g}x the load, or the forecast's target)"
        ),
        inputs={**_inputs(ctx, sig), "rules_wanted": ctx.target, "rules_ceiling": ceiling},
    )
    return Contribution(target=cap, reason=reason)


def _in(ctx: ScalingContext, sig: DemandSignals, target: int) -> Contribution | None:
    inp = ctx.inp
    pred = inp.spec.predictive
    hold = ctx.hold
    # no lower than the highest target of the scale-in window: the headroom a burst needed stays warm a while
    floor = min(hold, max(target, sig.window_target or 0))
    window = "the scale-in window's highest target holds"
    if ctx.target < floor:
        # the rules' scale-in went below what the forecast, or its scale-in window, needs
        why = "the forecast needs more" if target >= floor else window
        return Contribution(target=floor, reason=_hold_reason(ctx, sig, why))
    if floor >= hold:
        return None if target >= hold else Contribution(notes=(_hold_reason(ctx, sig, window),))
    fits = math.ceil(floor * (1.0 + pred.scale_in_margin) - 1e-9) < hold
    blocker = _blocker(ctx, sig) if fits else "within the scale-in margin"
    step = resolve_count(pred.max_step_down, hold, minimum=1)
    dead = _dead_suspects(ctx, sig)
    if blocker == BREAKER_OPEN and dead:
        # the breaker waits for a human; instances that serve nothing and are suspects (removed first) need
        # not wait with it: a run of launches that never served would otherwise be billed until then
        blocker, step = None, min(step, dead)
    if blocker is not None:
        return Contribution(notes=(_hold_reason(ctx, sig, blocker),))
    new = max(floor, hold - step)
    reason = Reason(
        code=ReasonCode.PREDICTIVE_SCALE_IN,
        detail=f"the forecast over the horizon fits in {floor}; at most -{step} per decision",
        inputs={**_inputs(ctx, sig), "step": step},
    )
    return Contribution(target=min(ctx.target, new), reason=reason)  # the rules may go lower


def _hold_reason(ctx: ScalingContext, sig: DemandSignals, why: str) -> Reason:
    return Reason(code=ReasonCode.PREDICTIVE_HOLD, detail=why, inputs=_inputs(ctx, sig))


def _dead_suspects(ctx: ScalingContext, sig: DemandSignals) -> int:
    """How many instances serve nothing (vLLM reported down), if every one of them has an open incident: the
    scale-in victims come from the suspects first (``decide``), so these are the ones a step removes."""
    down = set(sig.demand.down)
    suspects = {i.instance_id for i in ctx.inp.gh.incidents if i.state in OPEN_STATES}
    return len(down) if down <= suspects else 0


def _blocker(ctx: ScalingContext, sig: DemandSignals) -> str | None:
    inp, gh = ctx.inp, ctx.inp.gh
    if not sig.demand.complete:
        return "demand partial: an InService instance has no fresh request rate"
    if ctx.signals.fired:
        return "a scale-out rule fires"
    if inp.breaker_open:
        return BREAKER_OPEN
    if inp.unreplaced and inp.spec.guardrails.block_scale_in_while_isolating:
        return f"{inp.unreplaced} isolated instance(s) without a replacement"
    last_out = gh.last_scale_at if gh.last_scale_at != gh.last_scale_in_at else None
    cooldown = inp.spec.stabilization.scale_in_cooldown_s
    if last_out is not None and (inp.now - last_out).total_seconds() < cooldown:
        return f"scale-in cooldown after a scale-out ({cooldown:g}s)"
    return None
