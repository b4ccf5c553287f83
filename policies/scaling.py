"""The serving target of one group: schedule bounds, metric rules, stabilization and the isolation surge.

Order of composition (each step's reason is kept):
1. hold: the last decided healthy target (what is observed on the first tick), plus nodes that came back from
   Standby this tick (so that their return never forces an implicit scale-in by ESS);
2. scale-out: rules whose duration is met (or in panic, at once) recommend ceil(N * value / target); the max
   wins; capped by the step limit (not in panic);
3. scale-in: only when no scale-out rule fires, every scale-in rule held for its duration, every rule metric
   is known for every InService instance, no panic hold, no breaker, no isolated node waiting for its
   replacement, and the cooldown passed: to the highest recommendation of the window, at most one step down;
4. bounds: max(floor, .) then min(ceiling, .) (the floor wins over the ceiling; see schedule.py);
5. surge: plus the admitted incident nodes still serving, within the ceiling and ESS MaxSize (which also
   counts Standby instances).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from policies.model import (
    GroupHistory,
    GroupSnapshot,
    PlanWarning,
    Reason,
    ReasonCode,
    Recommendation,
    Track,
    WarningCode,
)
from policies.observe import Aggregate, GroupView, aggregate
from policies.schedule import Bounds
from policies.spec import GroupSpec, MetricRule, resolve_count


@dataclass
class ScalingResult:
    base: int  # healthy serving target (persisted as last_target)
    serving_target: int
    reason: ReasonCode
    reasons: list[Reason] = field(default_factory=list)
    warnings: list[PlanWarning] = field(default_factory=list)


def _desire(rule: MetricRule, value: float, n: int, divisor: float) -> int:
    """Instances wanted for ``value``: ceil(N * value / target) (= ceil(total / target) per instance)."""
    raw = max(n, 1) * value / divisor
    return max(0, math.ceil(raw - 1e-9))


def _track(gh: GroupHistory, key: str, holds: bool, now: datetime) -> Track | None:
    if not holds:
        gh.tracks.pop(key, None)
        return None
    track = gh.tracks.get(key)
    track = (
        Track(since=now, last_at=now, count=1)
        if track is None
        else Track(since=track.since, last_at=now, count=track.count + (1 if now > track.last_at else 0))
    )
    gh.tracks[key] = track
    return track


def plan_scaling(
    spec: GroupSpec,
    gh: GroupHistory,
    group: GroupSnapshot,
    view: GroupView,
    bnd: Bounds,
    now: datetime,
    leaving_serving: int,
    unreplaced: int,
    breaker_open: bool,
    returned: int = 0,
) -> ScalingResult:
    st = spec.stabilization
    reasons: list[Reason] = []
    warnings: list[PlanWarning] = []
    n_serving = len(view.serving)

    # 1. hold
    if gh.last_target is None:
        # what serves now, suspects included: their replacements come on top (the surge)
        hold = view.current_serving
        reasons.append(
            Reason(
                code=ReasonCode.HOLD,
                detail="first decision: start from what is observed",
                inputs={"observed": view.current_serving},
            )
        )
    else:
        hold = gh.last_target
        if returned:
            # nodes back from Standby serve again: keep them rather than let ESS pick victims implicitly;
            # the scale-in rules bring the group down from here, removing suspects first
            reasons.append(
                Reason(
                    code=ReasonCode.HOLD,
                    detail=f"{returned} instance(s) back from isolation kept",
                    inputs={"decided": hold, "returned": returned},
                )
            )
            hold += returned
    hold = min(hold, spec.max_size)

    # 2. evaluate the rules
    views: dict[str, Aggregate] = {}

    def view_of(rule: MetricRule) -> Aggregate:
        key = f"{rule.metric}/{rule.aggregation}"
        if key not in views:
            views[key] = aggregate(rule.metric, rule.aggregation, group, view.serving, now, st.stale_after_s)
        return views[key]

    out_targets = {r.metric: r.per_instance_target for r in spec.scale_out}
    fired: list[tuple[MetricRule, int, Aggregate, bool]] = []  # rule, desire, view, panic
    raw_desires: list[int] = []
    all_known = True
    panic = False
    for i, rule in enumerate(spec.scale_out):
        agg = view_of(rule)
        key = f"out:{i}:{rule.metric}"
        if agg.value is None:
            all_known = False
            continue  # unknown: the breach track neither starts nor resets
        if not agg.complete:
            all_known = False
        desire = _desire(rule, agg.value, n_serving, rule.per_instance_target)
        raw_desires.append(desire)
        assert rule.above is not None
        track = _track(gh, key, agg.value > rule.above, now)
        is_panic = track is not None and agg.value >= st.panic_threshold * rule.above
        met = track is not None and (now - track.since).total_seconds() >= rule.for_s
        if met or is_panic:
            fired.append((rule, desire, agg, is_panic and not met))
            panic = panic or is_panic
    in_rules_hold = True
    for i, rule in enumerate(spec.scale_in):
        agg = view_of(rule)
        key = f"in:{i}:{rule.metric}"
        if agg.value is None or not agg.complete:
            all_known = False
            in_rules_hold = False
            gh.tracks.pop(key, None)  # scale-in needs its whole duration of complete data again
            continue
        divisor = rule.target or out_targets.get(rule.metric) or rule.threshold
        raw_desires.append(_desire(rule, agg.value, n_serving, divisor))
        assert rule.below is not None
        track = _track(gh, key, agg.value < rule.below, now)
        if track is None or (now - track.since).total_seconds() < rule.for_s:
            in_rules_hold = False
    for agg in views.values():
        for iid in agg.missing:
            warnings.append(
                PlanWarning(
                    code=WarningCode.METRIC_MISSING,
                    group=group.name,
                    instance_id=iid,
                    metric=agg.metric,
                    detail="no sample: unknown, not zero",
                )
            )
        for iid in agg.stale:
            warnings.append(
                PlanWarning(
                    code=WarningCode.METRIC_STALE,
                    group=group.name,
                    instance_id=None if iid == "<group>" else iid,
                    metric=agg.metric,
                    detail=f"older than {st.stale_after_s:g}s: unknown, not zero",
                )
            )
        if agg.value is not None and not agg.complete:
            warnings.append(
                PlanWarning(
                    code=WarningCode.METRIC_PARTIAL,
                    group=group.name,
                    metric=agg.metric,
                    detail=f"{agg.covered} of {agg.expected} InService instances reported",
                )
            )
        if agg.value is None and agg.expected == 0 and not agg.missing and not agg.stale:
            warnings.append(
                PlanWarning(
                    code=WarningCode.METRIC_MISSING,
                    group=group.name,
                    metric=agg.metric,
                    detail="no InService instance to measure",
                )
            )
    if panic:
        gh.panic_until = now + timedelta(seconds=st.panic_hold_s)

    # the stabilization window records what the metrics alone would want (only when fully known)
    if not spec.scale_out and not spec.scale_in:
        raw = bnd.floor  # no metric rules: the schedule floor is the only signal
    elif all_known and raw_desires:
        raw = max(raw_desires)
    else:
        raw = None
    if raw is not None and abs(raw - hold) <= st.tolerance * hold:
        raw = hold
    if raw is not None:
        gh.recommendations.append(Recommendation(at=now, serving=raw))
        if gh.known_since is None:
            gh.known_since = now
    else:
        gh.known_since = None  # the window has a hole: it must fill again before any scale-in
    window_start = now - timedelta(seconds=st.scale_in_window_s)
    gh.recommendations = [r for r in gh.recommendations if r.at > window_start]

    target = hold
    reason = ReasonCode.HOLD
    if fired:
        desire = max(d for _, d, _, _ in fired)
        best = max(fired, key=lambda f: f[1])
        rule, _, agg, by_panic = best
        inputs = {
            "metric": rule.metric,
            "value": agg.value,
            "threshold": rule.above,
            "for_s": rule.for_s,
            "in_service": n_serving,
            "pending": len(view.pending) + view.in_flight,
            "desired": desire,
            "hold": hold,
        }
        if desire > hold:
            reason = ReasonCode.PANIC if panic else ReasonCode.RULE_SCALE_OUT
            target = desire
            if not panic:
                step = resolve_count(st.max_step_up, hold, minimum=1, round_up=True)
                if target > hold + step:
                    target = hold + step
                    reasons.append(
                        Reason(
                            code=ReasonCode.STEP_LIMITED_UP,
                            detail=f"at most +{step} per decision",
                            inputs={"desired": desire, "step": step},
                        )
                    )
            reasons.insert(
                0,
                Reason(code=reason, detail=f"{rule.label}" + (" (panic)" if by_panic else ""), inputs=inputs),
            )
        else:
            reason = ReasonCode.PENDING_CAPACITY_COVERS
            reasons.insert(
                0,
                Reason(
                    code=reason, detail=f"{rule.label}: capacity already ordered covers it", inputs=inputs
                ),
            )
    else:
        candidate = max((r.serving for r in gh.recommendations), default=None)
        if candidate is not None:
            candidate = max(candidate, bnd.floor)  # below the floor there is nothing to scale in
        if candidate is not None and candidate < hold:
            blocker = None
            if not all_known:
                blocker = (ReasonCode.SCALE_IN_BLOCKED_METRICS, "a rule metric is missing, stale or partial")
            elif gh.panic_until is not None and now < gh.panic_until:
                blocker = (
                    ReasonCode.SCALE_IN_BLOCKED_PANIC,
                    f"panic hold until {gh.panic_until.isoformat()}",
                )
            elif breaker_open:
                blocker = (ReasonCode.SCALE_IN_BLOCKED_BREAKER, "isolation breaker open")
            elif (
                unreplaced
                and spec.guardrails.block_scale_in_while_isolating
                and n_serving - leaving_serving < hold
            ):
                blocker = (
                    ReasonCode.SCALE_IN_BLOCKED_ISOLATION,
                    f"{unreplaced} isolated instance(s) without a replacement InService",
                )
            elif gh.known_since is None or (now - gh.known_since).total_seconds() < st.scale_in_window_s:
                # HPA keeps the highest recommendation of the window, but after a restart or an outage its
                # window holds only a moment (anchors: ray#46497, HPA#99394): wait until it is really full.
                blocker = (
                    ReasonCode.SCALE_IN_STABILIZING,
                    f"the {st.scale_in_window_s:.0f} s scale-in window is not yet covered by known metrics",
                )
            elif not in_rules_hold:
                blocker = (ReasonCode.SCALE_IN_STABILIZING, "scale-in rules have not held for their duration")
            elif (
                gh.last_scale_at is not None
                and (now - gh.last_scale_at).total_seconds() < st.scale_in_cooldown_s
            ):
                blocker = (ReasonCode.SCALE_IN_COOLDOWN, f"last change at {gh.last_scale_at.isoformat()}")
            inputs = {"hold": hold, "window_max": candidate, "window_s": st.scale_in_window_s}
            if blocker is not None:
                reason = blocker[0]
                reasons.insert(0, Reason(code=reason, detail=blocker[1], inputs=inputs))
            else:
                step = resolve_count(st.max_step_down, hold, minimum=1)
                target = max(candidate, hold - step)
                reason = ReasonCode.RULE_SCALE_IN
                detail = " and ".join(r.label for r in spec.scale_in) or "window recommendation"
                reasons.insert(0, Reason(code=reason, detail=detail, inputs={**inputs, "step": step}))
                if target > candidate:
                    reasons.append(
                        Reason(
                            code=ReasonCode.STEP_LIMITED_DOWN,
                            detail=f"at most -{step} per decision",
                            inputs={"window_max": candidate, "step": step},
                        )
                    )
        elif candidate is not None and raw == hold and raw_desires and max(raw_desires) != hold:
            reasons.insert(
                0,
                Reason(
                    code=ReasonCode.WITHIN_TOLERANCE,
                    detail=f"within {st.tolerance:g}",
                    inputs={"hold": hold, "desired": max(raw_desires)},
                ),
            )
            reason = ReasonCode.WITHIN_TOLERANCE

    # 4. bounds: floor first, then the ceiling (never below the floor)
    if target < bnd.floor:
        code = {"min_size": ReasonCode.FLOOR_MIN_SIZE, "warm_floor": ReasonCode.FLOOR_WARM}.get(
            bnd.floor_source, ReasonCode.FLOOR_SCHEDULE
        )
        reasons.insert(
            0,
            Reason(
                code=code,
                detail=f"floor {bnd.floor} ({bnd.floor_source})",
                inputs={"floor": bnd.floor, "before": target},
            ),
        )
        target, reason = bnd.floor, code
    if target > bnd.ceiling:
        code = (
            ReasonCode.CEILING_MAX_SIZE if bnd.ceiling_source == "max_size" else ReasonCode.CEILING_SCHEDULE
        )
        reasons.insert(
            0,
            Reason(
                code=code,
                detail=f"ceiling {bnd.ceiling} ({bnd.ceiling_source})",
                inputs={"ceiling": bnd.ceiling, "before": target},
            ),
        )
        target, reason = bnd.ceiling, code
    if bnd.ceiling_clipped:
        warnings.append(
            PlanWarning(
                code=WarningCode.CEILING_BELOW_FLOOR,
                group=group.name,
                detail=f"a schedule ceiling is below the floor {bnd.floor}: the floor wins",
            )
        )
    base = target

    # 5. surge for nodes about to leave, within the ceiling and what ESS MaxSize leaves beside Standby
    cap = min(bnd.ceiling, spec.max_size - len(view.standby))
    serving_target = base
    if leaving_serving:
        serving_target = min(base + leaving_serving, max(cap, base))
        if serving_target > base:
            reasons.append(
                Reason(
                    code=ReasonCode.SURGE_FOR_ISOLATION,
                    detail=f"+{serving_target - base} for instances being isolated",
                    inputs={"base": base, "leaving": leaving_serving, "cap": cap},
                )
            )
            if reason not in (ReasonCode.RULE_SCALE_OUT, ReasonCode.PANIC):
                reason = ReasonCode.SURGE_FOR_ISOLATION
    serving_target = max(0, min(serving_target, spec.max_size - len(view.standby)))
    if serving_target < base:
        base = serving_target
    return ScalingResult(base, serving_target, reason, reasons, warnings)
