"""Reading the metric rules: what each wants, whether it fired, and the stabilization window.

This is the only part of the scaler that writes the group history (before any step decides): the rules'
breach tracks, the panic hold and the window of recommendations (HPA's scale-down stabilization).

- scale-out rules whose duration is met (or in panic, at once) fire and recommend ceil(N * value / target);
- scale-in rules need complete data for their whole duration;
- the window records what the metrics alone would want, only when every rule metric is known (within the
  tolerance band of the hold, the hold itself).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from policies.model import GroupHistory, PlanWarning, Recommendation, Track, WarningCode
from policies.observe import Aggregate, aggregate
from policies.scaling.context import Fired, RuleSignals, ScalingInputs
from policies.spec import MetricRule

# ESS caps a group at 2000 instances (MaxSize); a desire beyond this is clipped by the ceiling anyway. Capping
# here keeps math.ceil away from the infinity that a sum of huge (finite) samples overflows to.
MAX_DESIRE = 1_000_000


def desire(rule: MetricRule, value: float, n: int, divisor: float) -> int:
    """Instances wanted for ``value``: ceil(N * value / target) (= ceil(total / target) per instance)."""
    raw = max(n, 1) * value / divisor
    if math.isnan(raw):
        return max(n, 0)  # no meaningful reading: want what there is, never a scale-in
    if raw <= 0:
        return 0
    if raw >= MAX_DESIRE:
        return MAX_DESIRE
    return math.ceil(raw - 1e-9)


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


class _Views:
    """Each rule's group metric, aggregated once per metric and aggregation (in the order rules ask)."""

    def __init__(self, inp: ScalingInputs) -> None:
        self.inp = inp
        self.by_key: dict[str, Aggregate] = {}

    def of(self, rule: MetricRule) -> Aggregate:
        key = f"{rule.metric}/{rule.aggregation}"
        if key not in self.by_key:
            inp = self.inp
            self.by_key[key] = aggregate(
                rule.metric,
                rule.aggregation,
                inp.group,
                inp.view.serving,
                inp.now,
                inp.spec.stabilization.stale_after_s,
            )
        return self.by_key[key]


def read_rules(inp: ScalingInputs, hold: int) -> RuleSignals:
    """Evaluate every rule, advance the tracks, the panic hold and the window; warn about unknown metrics."""
    sig = RuleSignals()
    views = _Views(inp)
    _scale_out(inp, views, sig)
    _scale_in(inp, views, sig)
    for agg in views.by_key.values():
        sig.warnings.extend(_metric_warnings(inp, agg))
    if sig.panic:
        inp.gh.panic_until = inp.now + timedelta(seconds=inp.spec.stabilization.panic_hold_s)
    _record_window(inp, hold, sig)
    return sig


def _scale_out(inp: ScalingInputs, views: _Views, sig: RuleSignals) -> None:
    st, gh, now = inp.spec.stabilization, inp.gh, inp.now
    n_serving = len(inp.view.serving)
    for i, rule in enumerate(inp.spec.scale_out):
        agg = views.of(rule)
        key = f"out:{i}:{rule.metric}"
        if agg.value is None:
            sig.all_known = False
            continue  # unknown: the breach track neither starts nor resets
        if not agg.complete:
            sig.all_known = False
        wanted = desire(rule, agg.value, n_serving, rule.per_instance_target)
        sig.raw_desires.append(wanted)
        assert rule.above is not None
        track = _track(gh, key, agg.value > rule.above, now)
        is_panic = track is not None and agg.value >= st.panic_threshold * rule.above
        met = track is not None and (now - track.since).total_seconds() >= rule.for_s
        if met or is_panic:
            sig.fired.append(Fired(rule, wanted, agg, is_panic and not met))
            sig.panic = sig.panic or is_panic


def _scale_in(inp: ScalingInputs, views: _Views, sig: RuleSignals) -> None:
    gh, now = inp.gh, inp.now
    n_serving = len(inp.view.serving)
    out_targets = {r.metric: r.per_instance_target for r in inp.spec.scale_out}
    for i, rule in enumerate(inp.spec.scale_in):
        agg = views.of(rule)
        key = f"in:{i}:{rule.metric}"
        if agg.value is None or not agg.complete:
            sig.all_known = False
            sig.in_rules_hold = False
            gh.tracks.pop(key, None)  # scale-in needs its whole duration of complete data again
            continue
        divisor = rule.target or out_targets.get(rule.metric) or rule.threshold
        sig.raw_desires.append(desire(rule, agg.value, n_serving, divisor))
        assert rule.below is not None
        track = _track(gh, key, agg.value < rule.below, now)
        if track is None or (now - track.since).total_seconds() < rule.for_s:
            sig.in_rules_hold = False


def _metric_warnings(inp: ScalingInputs, agg: Aggregate) -> list[PlanWarning]:
    group = inp.group.name
    warnings = [
        PlanWarning(
            code=WarningCode.METRIC_MISSING,
            group=group,
            instance_id=iid,
            metric=agg.metric,
            detail="no sample: unknown, not zero",
        )
        for iid in agg.missing
    ]
    warnings += [
        PlanWarning(
            code=WarningCode.METRIC_STALE,
            group=group,
            instance_id=None if iid == "<group>" else iid,
            metric=agg.metric,
            detail=f"older than {inp.spec.stabilization.stale_after_s:g}s: unknown, not zero",
        )
        for iid in agg.stale
    ]
    if agg.value is not None and not agg.complete:
        warnings.append(
            PlanWarning(
                code=WarningCode.METRIC_PARTIAL,
                group=group,
                metric=agg.metric,
                detail=f"{agg.covered} of {agg.expected} InService instances reported",
            )
        )
    if agg.value is None and agg.expected == 0 and not agg.missing and not agg.stale:
        warnings.append(
            PlanWarning(
                code=WarningCode.METRIC_MISSING,
                group=group,
                metric=agg.metric,
                detail="no InService instance to measure",
            )
        )
    return warnings


def _record_window(inp: ScalingInputs, hold: int, sig: RuleSignals) -> None:
    """The stabilization window records what the metrics alone would want (only when fully known)."""
    spec, gh, now = inp.spec, inp.gh, inp.now
    st = spec.stabilization
    if not spec.scale_out and not spec.scale_in:
        raw: int | None = inp.bnd.floor  # no metric rules: the schedule floor is the only signal
    elif sig.all_known and sig.raw_desires:
        raw = max(sig.raw_desires)
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
    sig.raw = raw
