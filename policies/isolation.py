"""Node isolation: fault detection per instance and the incident state machine, as values.

detected -> acknowledged -> capacity_protected -> isolated (EnterStandby, drain) -> remediating (reboot +
health check + ExitStandby | RemoveInstances | hold for a human) -> remediated -> closed.

Acknowledging (the 15-minute response clock) and isolating (the 4-hour clock) run side by side: isolation
never waits for a human. Guardrails: at most ``max_isolated`` instances out at once, a breaker that stops
automatic isolation after too many incidents in a window (reset by a human only), and no node taken out while
that would break the floor: a replacement is surged and must be InService first.

The functions here mutate the (deep-copied) group history passed in by ``decide``; nothing else.
"""

from __future__ import annotations

import fnmatch
import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from policies import metrics as m
from policies.model import (
    OPEN_STATES,
    PRE_ISOLATION_STATES,
    GroupHistory,
    GroupSnapshot,
    Incident,
    IncidentState,
    InstanceSnapshot,
    IsolationStep,
    PlanWarning,
    ReasonCode,
    Scalar,
    StepAction,
    TimelineEntry,
    Track,
    WarningCode,
    XidRecord,
)
from policies.observe import GroupView, fresh
from policies.spec import ACTION_SEVERITY, GroupSpec, IsolationRule, resolve_count

DAY_S = 86400.0
MAX_STEP_FAILURES = 3  # then escalate: a reboot that keeps failing becomes a replacement
# Samples of the same "last XID" closer than this are one occurrence: two missed 60 s CMS periods fit inside.
XID_SAME_EVENT_GAP_S = 120.0


@dataclass
class IsolationResult:
    steps: list[IsolationStep] = field(default_factory=list)
    warnings: list[PlanWarning] = field(default_factory=list)
    # admitted incidents whose instance still serves traffic: the scaler adds them to the serving target
    leaving_serving: int = 0
    # incidents closed this tick whose instance came back from Standby into service
    returned: int = 0
    # admitted incidents not yet remediated: scale-in waits for their replacement
    unreplaced: int = 0
    degraded: list[str] = field(default_factory=list)  # instance ids, most suspect first


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def _enter(inc: Incident, state: IncidentState, now: datetime, reason: ReasonCode, detail: str = "") -> None:
    inc.state = state
    inc.timeline.append(TimelineEntry(at=now, state=state, reason=reason, detail=detail))


def _note(inc: Incident, now: datetime, reason: ReasonCode, detail: str = "") -> None:
    """A timeline entry without a state change (only when it is news: not repeated every tick)."""
    last = inc.timeline[-1] if inc.timeline else None
    if last is None or last.reason != reason or last.detail != detail:
        inc.timeline.append(TimelineEntry(at=now, state=inc.state, reason=reason, detail=detail))


class _Steps:
    def __init__(self, result: IsolationResult) -> None:
        self.result = result

    def add(
        self, inc: Incident, action: StepAction, reason: ReasonCode, detail: str = "", **inputs: Scalar
    ) -> None:
        attempt = inc.failures.get(action.value, 0)
        step_id = f"{inc.incident_id}:{action.value}:{attempt}"
        self.result.steps.append(
            IsolationStep(
                step_id=step_id,
                incident_id=inc.incident_id,
                instance_id=inc.instance_id,
                action=action,
                reason=reason,
                detail=detail,
                inputs=dict(inputs),
            )
        )


# ---- detection ---------------------------------------------------------------------------------------------


@dataclass
class Finding:
    rule: IsolationRule
    detail: str
    evidence: dict[str, Scalar]


def _track(gh: GroupHistory, key: str, breaching: bool | None, sample_at: datetime) -> Track | None:
    """Advance a condition track by one sample; None (unknown) resets it - unbroken evidence only."""
    if not breaching:
        gh.tracks.pop(key, None)
        return None
    track = gh.tracks.get(key)
    if track is None:
        track = Track(since=sample_at, last_at=sample_at, count=1)
    elif sample_at > track.last_at:
        track = Track(since=track.since, last_at=sample_at, count=track.count + 1)
    gh.tracks[key] = track
    return track


def _record_xids(gh: GroupHistory, inst: InstanceSnapshot, now: datetime, stale_after_s: float) -> None:
    """Remember the instance's XID occurrences.

    ``gpu_xid`` is "the last XID code": a source may repeat it every sample while it stays the last one. The
    same code reported again within XID_SAME_EVENT_GAP_S of its previous report is therefore the same
    occurrence, not a repeat; a repeat is the code coming back after a gap, or after another code.
    """
    found = {(e.code, e.at) for e in inst.xids if e.code}
    last = inst.metrics.get(m.GPU_XID)
    if last is not None and fresh(last, now, stale_after_s) and int(last.value) != 0:
        found.add((int(last.value), last.at))
    mine = [x for x in gh.xids if x.instance_id == inst.instance_id]
    for code, at in sorted(found, key=lambda f: (f[1], f[0])):
        if at > now:
            continue
        if any(x.code == code and (x.at == at or (x.last_at is not None and x.last_at >= at)) for x in mine):
            continue  # already counted (the same sample seen again)
        previous = max(mine, key=lambda x: x.last_at or x.at, default=None)
        if previous is not None and previous.code == code:
            seen_until = previous.last_at or previous.at
            if timedelta(0) <= at - seen_until <= timedelta(seconds=XID_SAME_EVENT_GAP_S):
                previous.last_at = at
                continue
        record = XidRecord(instance_id=inst.instance_id, code=code, at=at, last_at=at)
        gh.xids.append(record)
        mine.append(record)


def detect(
    spec: GroupSpec,
    gh: GroupHistory,
    group: GroupSnapshot,
    view: GroupView,
    now: datetime,
    suspects: set[str],
) -> dict[str, list[Finding]]:
    """Findings per instance for the serving and standby instances; tracks advance in ``gh``."""
    stale_after = spec.stabilization.stale_after_s
    findings: dict[str, list[Finding]] = {}
    candidates = view.serving + [i for i in view.standby if i.instance_id in suspects]
    last_detected: dict[str, datetime] = {}
    for inc in gh.incidents:
        if inc.instance_id not in last_detected or inc.detected_at > last_detected[inc.instance_id]:
            last_detected[inc.instance_id] = inc.detected_at
    for inst in candidates:
        _record_xids(gh, inst, now, stale_after)
    for rule in spec.isolation.rules:
        for inst in candidates:
            key = f"iso:{rule.rule_id}:{inst.instance_id}"
            finding = _evaluate(
                rule, key, inst, view, gh, now, stale_after, last_detected.get(inst.instance_id)
            )
            if finding is not None:
                findings.setdefault(inst.instance_id, []).append(finding)
    return findings


def _evaluate(
    rule: IsolationRule,
    key: str,
    inst: InstanceSnapshot,
    view: GroupView,
    gh: GroupHistory,
    now: datetime,
    stale_after: float,
    last_detected: datetime | None,
) -> Finding | None:
    kind = rule.kind
    if kind == "metric":
        assert rule.metric is not None
        sample = inst.metrics.get(rule.metric)
        if not fresh(sample, now, stale_after):
            _track(gh, key, None, now)
            return None
        assert sample is not None
        breaching = (
            sample.value > rule.above if rule.above is not None else sample.value < (rule.below or 0.0)
        )
        track = _track(gh, key, breaching, sample.at)
        if track and (track.last_at - track.since).total_seconds() >= rule.for_s:
            op = ">" if rule.above is not None else "<"
            return Finding(
                rule,
                f"{rule.metric}={sample.value:g} {op} {rule.above or rule.below:g} for "
                f"{(track.last_at - track.since).total_seconds():g}s",
                {
                    "metric": rule.metric,
                    "value": sample.value,
                    "threshold": rule.above or rule.below,
                    "since": track.since.isoformat(),
                    "samples": track.count,
                },
            )
        return None
    if kind == "throttle":
        sample = inst.metrics.get(m.GPU_THROTTLE_REASONS)
        if not fresh(sample, now, stale_after):
            _track(gh, key, None, now)
            return None
        assert sample is not None
        mask = m.throttle_mask(rule.throttle_reasons or ())
        bits = int(sample.value) & mask
        track = _track(gh, key, bits != 0, sample.at)
        if (
            track
            and track.count >= rule.samples
            and (track.last_at - track.since).total_seconds() >= rule.for_s
        ):
            names = [n for n, b in m.THROTTLE_REASON_NAMES.items() if int(b) & bits]
            return Finding(
                rule,
                f"throttled ({', '.join(names)}) for {track.count} samples",
                {
                    "metric": m.GPU_THROTTLE_REASONS,
                    "value": int(sample.value),
                    "mask": mask,
                    "samples": track.count,
                    "since": track.since.isoformat(),
                },
            )
        return None
    if kind == "xid":
        window_start = now - timedelta(seconds=rule.window_s)
        if last_detected is not None and last_detected > window_start:
            window_start = last_detected  # XIDs already answered by an earlier incident do not count twice
        hits = [
            x
            for x in gh.xids
            if x.instance_id == inst.instance_id
            and x.code in (rule.xids or ())
            and x.at > window_start
            and x.at <= now
        ]
        if len(hits) >= rule.repeat:
            codes = sorted({x.code for x in hits})
            return Finding(
                rule,
                f"XID {', '.join(map(str, codes))} x{len(hits)} within {rule.window_s:g}s",
                {"xids": ",".join(map(str, codes)), "count": len(hits), "repeat": rule.repeat},
            )
        return None
    if kind == "event":
        active = [
            e
            for e in inst.events
            if e.active and any(fnmatch.fnmatchcase(e.code, p) for p in rule.events or ())
        ]
        if active:
            codes = sorted({e.code for e in active})
            return Finding(rule, f"ECS system event {', '.join(codes)}", {"events": ",".join(codes)})
        return None
    # outlier: the instance's metric against the median of its fresh InService peers
    assert rule.metric is not None and rule.peer_factor is not None
    sample = inst.metrics.get(rule.metric)
    if not fresh(sample, now, stale_after) or inst.lifecycle_state not in ("InService", "Protected"):
        _track(gh, key, None, now)
        return None
    assert sample is not None
    peers = [
        p.metrics[rule.metric].value
        for p in view.serving
        if p.instance_id != inst.instance_id and fresh(p.metrics.get(rule.metric), now, stale_after)
    ]
    if len(peers) < rule.min_peers:
        _track(gh, key, None, now)
        return None
    median = statistics.median(peers)
    breaching = sample.value >= rule.min_value and sample.value > rule.peer_factor * median
    track = _track(gh, key, breaching, sample.at)
    if track and (track.last_at - track.since).total_seconds() >= rule.for_s:
        return Finding(
            rule,
            f"{rule.metric}={sample.value:g} > {rule.peer_factor:g}x peers' median {median:g}",
            {
                "metric": rule.metric,
                "value": sample.value,
                "peer_median": median,
                "peers": len(peers),
                "factor": rule.peer_factor,
            },
        )
    return None


def _healthy_again(
    rule: IsolationRule | None,
    inst: InstanceSnapshot,
    gh: GroupHistory,
    since: datetime,
    now: datetime,
    stale_after: float,
) -> tuple[bool, str]:
    """After a reboot: the instance reports fresh metrics newer than the reboot and its fault is gone."""
    if inst.health_status != "Healthy":
        return False, f"health status {inst.health_status}"
    newer = [s for s in inst.metrics.values() if s.at > since and fresh(s, now, stale_after)]
    if not newer:
        return False, "no metrics since the reboot yet"
    if rule is None:
        return True, "reporting again"
    kind = rule.kind
    if kind == "metric":
        assert rule.metric is not None
        s = inst.metrics.get(rule.metric)
        if s is None or s.at <= since or not fresh(s, now, stale_after):
            return False, f"no {rule.metric} since the reboot yet"
        bad = s.value > rule.above if rule.above is not None else s.value < (rule.below or 0.0)
        return (not bad), f"{rule.metric}={s.value:g}"
    if kind == "throttle":
        s = inst.metrics.get(m.GPU_THROTTLE_REASONS)
        if s is None or s.at <= since or not fresh(s, now, stale_after):
            return False, "no throttle reasons since the reboot yet"
        bits = int(s.value) & m.throttle_mask(rule.throttle_reasons or ())
        return bits == 0, f"throttle reasons {int(s.value):#x}"
    if kind == "xid":
        again = [
            x
            for x in gh.xids
            if x.instance_id == inst.instance_id and x.code in (rule.xids or ()) and x.at > since
        ]
        return (not again), ("XID again after reboot" if again else "no XID since the reboot")
    if kind == "event":
        active = [
            e.code
            for e in inst.events
            if e.active and any(fnmatch.fnmatchcase(e.code, p) for p in rule.events or ())
        ]
        return (not active), ("event still active: " + ",".join(active)) if active else "event cleared"
    return True, "reporting again"


# ---- the workflow ------------------------------------------------------------------------------------------


def run(
    spec: GroupSpec,
    gh: GroupHistory,
    group: GroupSnapshot,
    view: GroupView,
    floor: int,
    now: datetime,
) -> IsolationResult:
    """Advance every incident of one group by one tick; open new ones; return the steps."""
    result = IsolationResult()
    steps = _Steps(result)
    iso = spec.isolation
    by_id = {i.instance_id: i for i in group.instances}
    rules = {r.rule_id: r for r in iso.rules}
    applied = set(gh.applied_operator_actions)

    def open_incident(instance_id: str) -> Incident | None:
        return next(
            (i for i in gh.incidents if i.instance_id == instance_id and i.state in OPEN_STATES), None
        )

    def new_incident(
        instance_id: str,
        rule: str,
        kind: str,
        action: str,
        manual: bool,
        detail: str,
        evidence: dict[str, Scalar],
        reason: ReasonCode,
    ) -> Incident:
        inc = Incident(
            incident_id=f"{group.name}:{instance_id}:{_iso(now)}",
            group=group.name,
            instance_id=instance_id,
            rule=rule,
            kind=kind,
            action=action,
            manual=manual,
            detected_at=now,  # type: ignore[arg-type]
            respond_by=now + timedelta(seconds=iso.respond_within_s),
            isolate_by=now + timedelta(seconds=iso.isolate_within_s),
            evidence=evidence,
        )
        _enter(inc, IncidentState.DETECTED, now, reason, detail)
        gh.incidents.append(inc)
        return inc

    # 1. what humans asked for, once each
    released: set[str] = set()
    for op in sorted(group.operator_actions, key=lambda o: (o.at, o.action_id)):
        if op.action_id in applied:
            continue
        applied.add(op.action_id)
        gh.applied_operator_actions.append(op.action_id)
        target = None
        if op.incident_id:
            target = next((i for i in gh.incidents if i.incident_id == op.incident_id), None)
        elif op.instance_id:
            target = open_incident(op.instance_id)
        if op.kind == "reset_breaker":
            gh.breaker.open = False
            gh.breaker.opened_at = None
            gh.breaker.reason = f"reset by {op.by} at {op.at.isoformat()}: {op.reason}".rstrip(": ")
            for waiting in gh.incidents:
                if waiting.state in OPEN_STATES and waiting.admitted_at is None:
                    _note(waiting, now, ReasonCode.BREAKER_RESET, gh.breaker.reason)
            continue
        if op.kind == "isolate":
            if op.instance_id not in by_id:
                result.warnings.append(
                    PlanWarning(
                        code=WarningCode.UNKNOWN_INSTANCE,
                        group=group.name,
                        instance_id=op.instance_id,
                        detail=f"isolate requested by {op.by} for an instance not in the group: ignored",
                    )
                )
            elif op.instance_id and target is None:
                inc = new_incident(
                    op.instance_id,
                    "manual",
                    "manual",
                    "hold",
                    True,
                    op.reason or "manual isolation",
                    {"by": op.by, "reason": op.reason},
                    ReasonCode.MANUAL_ISOLATION,
                )
                inc.acknowledged_at, inc.acknowledged_by = op.at, op.by  # a human asked: responded
                _enter(inc, IncidentState.ACKNOWLEDGED, now, ReasonCode.ACKNOWLEDGED, f"by {op.by}")
            continue
        if target is None or target.state not in OPEN_STATES:
            continue
        if op.kind == "ack":
            if target.acknowledged_at is None:
                target.acknowledged_at, target.acknowledged_by = op.at, op.by
                _note(target, now, ReasonCode.ACKNOWLEDGED, f"by {op.by}")
        elif op.kind == "release":
            released.add(target.incident_id)
            _note(target, now, ReasonCode.RELEASED, f"by {op.by}: {op.reason}".rstrip(": "))
            target.evidence["released_by"] = op.by
        elif op.kind == "replace":
            target.action = "replace"
            _note(target, now, ReasonCode.ESCALATED, f"replace requested by {op.by}")
    gh.applied_operator_actions = gh.applied_operator_actions[-500:]

    # 2. notifications to a human channel count as the acknowledgment
    for note in group.notifications:
        inc = next((i for i in gh.incidents if i.incident_id == note.incident_id), None)
        if inc is not None and inc.acknowledged_at is None:
            inc.acknowledged_at, inc.acknowledged_by = note.at, note.channel
            _note(inc, now, ReasonCode.ACKNOWLEDGED, f"notified {note.channel}")
    for inc in gh.incidents:
        if inc.state == IncidentState.DETECTED and inc.acknowledged_at is not None:
            _enter(inc, IncidentState.ACKNOWLEDGED, now, ReasonCode.ACKNOWLEDGED, inc.acknowledged_by or "")

    # 3. outcomes of the steps the service actuated
    seen_outcomes = set(gh.seen_outcomes)
    for out in group.outcomes:
        if out.step_id in seen_outcomes:
            continue
        seen_outcomes.add(out.step_id)
        gh.seen_outcomes.append(out.step_id)
        inc_id, _, rest = out.step_id.rpartition(":")
        inc_id, _, action = inc_id.rpartition(":")
        inc = next((i for i in gh.incidents if i.incident_id == inc_id), None)
        if inc is None or inc.state not in OPEN_STATES:
            continue
        if out.ok:
            if action == StepAction.REBOOT.value and inc.rebooted_at is None:
                inc.rebooted_at = out.at
                _note(inc, now, ReasonCode.REBOOT, "reboot issued")
        else:
            inc.failures[action] = inc.failures.get(action, 0) + 1
            _note(inc, now, ReasonCode.STEP_FAILED, f"{action} failed: {out.detail}")
            # a failed step is asked again with a new step id (a new ClientToken)
            if action == StepAction.REBOOT.value:
                inc.reboot_requested_at = None
            elif action == StepAction.ENTER_STANDBY.value:
                inc.standby_requested_at = None
            elif action == StepAction.EXIT_STANDBY.value:
                inc.exit_requested_at = None
            elif action == StepAction.REMOVE.value:
                inc.remove_requested_at = None
    gh.seen_outcomes = gh.seen_outcomes[-500:]

    # 4. detection (serving instances; standby ones only to escalate their own incident)
    suspects = {i.instance_id for i in gh.incidents if i.state in OPEN_STATES}
    findings = detect(spec, gh, group, view, now, suspects) if iso.enabled else {}
    for instance_id in sorted(findings):
        found = sorted(findings[instance_id], key=lambda f: -ACTION_SEVERITY[f.rule.action])
        worst = found[0]
        inc = open_incident(instance_id)
        if inc is None:
            evidence = dict(worst.evidence)
            if len(found) > 1:
                evidence["also"] = ",".join(f.rule.rule_id for f in found[1:])
            new_incident(
                instance_id,
                worst.rule.rule_id,
                worst.rule.kind,
                worst.rule.action,
                False,
                worst.detail,
                evidence,
                ReasonCode.RULE_BREACHED,
            )
        elif (
            ACTION_SEVERITY[worst.rule.action] > ACTION_SEVERITY[inc.action]
            and inc.state != IncidentState.REMEDIATED
        ):
            inc.action = worst.rule.action
            inc.evidence[f"escalated_by_{worst.rule.rule_id}"] = worst.detail
            _note(
                inc, now, ReasonCode.ESCALATED, f"{worst.rule.rule_id}: {worst.detail} -> {worst.rule.action}"
            )

    # 5. admission under the guardrails, in detection order
    guard = spec.guardrails
    max_isolated = guard.max_isolated_for(view.size)
    breaker_limit = max(1, resolve_count(guard.breaker.max_isolations, view.size))
    window_start = now - timedelta(seconds=guard.breaker.window_s)
    ordered = sorted(
        (i for i in gh.incidents if i.state in OPEN_STATES), key=lambda i: (i.detected_at, i.incident_id)
    )
    admitted = [i for i in ordered if i.admitted_at is not None]
    recent_auto = sorted(
        (i for i in gh.incidents if not i.manual and i.detected_at > window_start),
        key=lambda i: (i.detected_at, i.incident_id),
    )
    rank = {inc.incident_id: n + 1 for n, inc in enumerate(recent_auto)}
    for inc in ordered:
        if inc.admitted_at is not None or inc.incident_id in released:
            continue
        if inc.instance_id not in by_id:
            continue  # closed below as gone
        if not inc.manual:
            if gh.breaker.open:
                _wait(steps, inc, now, ReasonCode.BREAKER_OPEN, gh.breaker.reason)
                continue
            if rank.get(inc.incident_id, 0) > breaker_limit:
                gh.breaker.open = True
                gh.breaker.opened_at = now
                gh.breaker.reason = (
                    f"{rank[inc.incident_id]} isolations requested within "
                    f"{guard.breaker.window_s:g}s (limit {breaker_limit}); "
                    "automatic isolation paused until a human resets the breaker"
                )
                _note(inc, now, ReasonCode.BREAKER_TRIPPED, gh.breaker.reason)
                _wait(steps, inc, now, ReasonCode.BREAKER_TRIPPED, gh.breaker.reason)
                continue
        if len(admitted) >= max_isolated:
            detail = f"{len(admitted)} of at most {max_isolated} instances already out for isolation"
            _wait(
                steps,
                inc,
                now,
                ReasonCode.GUARDRAIL_MAX_ISOLATED,
                detail,
                isolated=len(admitted),
                max_isolated=max_isolated,
            )
            _warn_about(result, WarningCode.GUARDRAIL_MAX_ISOLATED, group.name, inc, detail)
            continue
        inc.admitted_at = now
        admitted.append(inc)
    if gh.breaker.open:
        result.warnings.append(
            PlanWarning(code=WarningCode.BREAKER_OPEN, group=group.name, detail=gh.breaker.reason)
        )

    # 6. advance each open incident
    in_service_ids = [i.instance_id for i in view.serving]
    going_out = 0
    stale_after = spec.stabilization.stale_after_s
    for inc in ordered:
        inst = by_id.get(inc.instance_id)
        if inc.state not in OPEN_STATES:
            continue
        if inst is None or inst.lifecycle_state in ("Removing", "Removing:Wait"):
            how = "replaced" if inc.remove_requested_at is not None else "instance_gone"
            reason = ReasonCode.REMEDIATED if how == "replaced" else ReasonCode.INSTANCE_GONE
            _close(inc, now, reason, how)
            continue
        if inc.acknowledged_at is None:
            steps.add(
                inc,
                StepAction.ACKNOWLEDGE,
                ReasonCode.NOTIFY_HUMAN,
                f"{inc.rule}: notify a human channel",
                respond_by=inc.respond_by.isoformat(),
            )
        state = inst.lifecycle_state
        if inc.incident_id in released:
            if state == "Standby":
                inc.exit_requested_at = inc.exit_requested_at or now
                inc.outcome = "released"
                steps.add(inc, StepAction.EXIT_STANDBY, ReasonCode.RELEASED, "released by a human")
                if inc.state in PRE_ISOLATION_STATES:
                    _enter(inc, IncidentState.REMEDIATING, now, ReasonCode.RELEASED)
            else:
                _close(inc, now, ReasonCode.RELEASED, "released")
            continue
        if inc.outcome == "released":
            if state in ("InService", "Protected"):
                _close(inc, now, ReasonCode.RELEASED, "released")
                result.returned += 1
            else:
                steps.add(inc, StepAction.EXIT_STANDBY, ReasonCode.RELEASED, "released by a human")
            continue
        if inc.admitted_at is None:
            continue  # waiting: guardrail or breaker (the wait step is already in the plan)
        if inc.state in PRE_ISOLATION_STATES:
            if state == "Standby":
                inc.isolated_at = now
                _enter(inc, IncidentState.ISOLATED, now, ReasonCode.ENTER_STANDBY, "observed in Standby")
            elif state in ("InService", "Protected"):
                going_out += 1
                result.leaving_serving += 1
                remaining = len(in_service_ids) - going_out
                if remaining < floor:
                    # checked every tick, also after capacity_protected: a schedule may have raised the floor
                    if inc.surge_requested_at is None:
                        inc.surge_requested_at = now
                        _note(
                            inc,
                            now,
                            ReasonCode.FLOOR_WOULD_BREAK,
                            f"{remaining} InService would remain, floor {floor}: surge a replacement",
                        )
                    steps.add(
                        inc,
                        StepAction.SURGE,
                        ReasonCode.FLOOR_WOULD_BREAK
                        if inc.surge_requested_at == now
                        else ReasonCode.WAITING_FOR_REPLACEMENT,
                        "replacement ordered; waiting for it to be InService",
                        in_service=len(in_service_ids),
                        remaining=remaining,
                        floor=floor,
                    )
                    continue
                if inc.state != IncidentState.CAPACITY_PROTECTED:
                    inc.capacity_protected_at = now
                    replaced = " (replacement InService)" if inc.surge_requested_at is not None else ""
                    _enter(
                        inc,
                        IncidentState.CAPACITY_PROTECTED,
                        now,
                        ReasonCode.FLOOR_HOLDS,
                        f"{remaining} InService remain, floor {floor}{replaced}",
                    )
                if inc.standby_requested_at is None:
                    inc.standby_requested_at = now
                steps.add(
                    inc,
                    StepAction.ENTER_STANDBY,
                    ReasonCode.ENTER_STANDBY,
                    "take the instance out of traffic (ESS EnterStandby)",
                    in_service=len(in_service_ids),
                    remaining=remaining,
                    floor=floor,
                )
            # Pending instances wait until they are InService
            continue
        if inc.state == IncidentState.ISOLATED:
            if state in ("InService", "Protected") and inc.exit_requested_at is None:
                # someone took it out of Standby behind our back: treat as released
                _close(inc, now, ReasonCode.RELEASED, "left Standby outside the workflow")
                result.returned += 1
                continue
            if inc.drained_at is None:
                running = inst.metrics.get(m.REQUESTS_RUNNING)
                waiting = inst.metrics.get(m.QUEUE_WAITING)
                known = [s for s in (running, waiting) if fresh(s, now, stale_after)]
                idle = len(known) == 2 and all(s.value <= 0 for s in known)  # type: ignore[union-attr]
                since_isolated = (now - (inc.isolated_at or now)).total_seconds()
                if idle:
                    inc.drained_at = now
                    _note(inc, now, ReasonCode.DRAINED, "no requests running or waiting")
                elif since_isolated >= iso.drain_timeout_s:
                    inc.drained_at = now
                    _note(inc, now, ReasonCode.DRAIN_TIMEOUT, f"drain timeout {iso.drain_timeout_s:g}s")
                else:
                    steps.add(
                        inc,
                        StepAction.DRAIN,
                        ReasonCode.DRAINING,
                        "waiting for in-flight requests",
                        drain_deadline=(inc.isolated_at or now).isoformat(),
                    )
                    continue
            _remediate(inc, gh, steps, now, iso.max_reboots)
            continue
        if inc.state == IncidentState.REMEDIATING:
            if inc.action == "replace":
                if inc.remove_requested_at is None:
                    inc.remove_requested_at = now
                steps.add(
                    inc,
                    StepAction.REMOVE,
                    ReasonCode.REPLACE,
                    "RemoveInstances (release)",
                    decrease_desired_capacity=True,
                )
                continue
            if inc.action == "hold":
                steps.add(inc, StepAction.HOLD, ReasonCode.HOLD_FOR_HUMAN, "kept in Standby for diagnosis")
                continue
            # reboot
            if inc.exit_requested_at is not None:
                if state in ("InService", "Protected"):
                    inc.remediated_at = now
                    _enter(inc, IncidentState.REMEDIATED, now, ReasonCode.REMEDIATED, "back InService")
                    _close(inc, now, ReasonCode.REMEDIATED, "rebooted")
                    result.returned += 1
                else:
                    steps.add(inc, StepAction.EXIT_STANDBY, ReasonCode.HEALTH_CHECK_PASSED, "back to service")
                continue
            if inc.reboot_requested_at is None:
                if inc.failures.get(StepAction.REBOOT.value, 0) >= MAX_STEP_FAILURES:
                    inc.action = "replace"
                    _note(inc, now, ReasonCode.ESCALATED, "reboot failed repeatedly: replace")
                    continue
                inc.reboot_requested_at = now
                inc.reboot_attempts += 1
                steps.add(inc, StepAction.REBOOT, ReasonCode.REBOOT, "ECS RebootInstance")
                continue
            since = inc.rebooted_at or inc.reboot_requested_at
            ok, why = _healthy_again(rules.get(inc.rule), inst, gh, since, now, stale_after)
            if ok:
                inc.exit_requested_at = now
                _note(inc, now, ReasonCode.HEALTH_CHECK_PASSED, why)
                steps.add(inc, StepAction.EXIT_STANDBY, ReasonCode.HEALTH_CHECK_PASSED, why)
            elif (now - inc.reboot_requested_at).total_seconds() >= iso.health_check_timeout_s:
                inc.action = "replace"
                _note(inc, now, ReasonCode.HEALTH_CHECK_TIMEOUT, f"{why}: replace")
                inc.remove_requested_at = now
                steps.add(
                    inc,
                    StepAction.REMOVE,
                    ReasonCode.HEALTH_CHECK_TIMEOUT,
                    why,
                    decrease_desired_capacity=True,
                )
            else:
                steps.add(inc, StepAction.WAIT, ReasonCode.AWAITING_HEALTH, why)
            continue

    for inc in gh.incidents:
        if inc.closed_at == now:
            last = inc.timeline[-1]
            steps.add(inc, StepAction.CLOSE, last.reason, inc.outcome or "", outcome=inc.outcome)

    # 7. SLA clocks
    for inc in gh.incidents:
        if inc.state not in OPEN_STATES:
            # a closed incident nobody was told about still owes its response for one more window
            late = inc.respond_by + timedelta(seconds=iso.respond_within_s)
            if inc.acknowledged_at is None and now <= late:
                _sla(
                    result,
                    inc,
                    iso.respond_within_s,
                    iso.isolate_within_s,
                    iso.at_risk_fraction,
                    now,
                    group.name,
                    blocked=False,
                    respond_only=True,
                )
            continue
        _sla(
            result,
            inc,
            iso.respond_within_s,
            iso.isolate_within_s,
            iso.at_risk_fraction,
            now,
            group.name,
            blocked=inc.admitted_at is None and gh.breaker.open and not inc.manual,
        )

    # 8. bookkeeping
    for inc in gh.incidents:
        if inc.state in OPEN_STATES and inc.admitted_at is not None and inc.remediated_at is None:
            result.unreplaced += 1
    degraded = [
        i.instance_id
        for i in sorted(
            (i for i in gh.incidents if i.state in OPEN_STATES), key=lambda i: (i.detected_at, i.incident_id)
        )
    ]
    unhealthy = [
        i.instance_id
        for i in group.instances
        if i.health_status != "Healthy" and i.instance_id not in degraded
    ]
    result.degraded = degraded + sorted(unhealthy)
    retention = max(DAY_S, guard.breaker.window_s, *(r.window_s for r in iso.rules))
    cutoff = now - timedelta(seconds=retention)
    gh.incidents = [i for i in gh.incidents if i.state in OPEN_STATES or (i.closed_at or now) > cutoff]
    gh.xids = [x for x in gh.xids if x.at > cutoff]
    return result


def _remediate(inc: Incident, gh: GroupHistory, steps: _Steps, now: datetime, max_reboots: int) -> None:
    if inc.action == "reboot":
        day_ago = now - timedelta(seconds=DAY_S)
        reboots = sum(
            1
            for i in gh.incidents
            if i.instance_id == inc.instance_id
            and i.incident_id != inc.incident_id
            and i.reboot_attempts > 0
            and i.detected_at > day_ago
        )
        if reboots >= max_reboots:
            inc.action = "replace"
            _enter(
                inc,
                IncidentState.REMEDIATING,
                now,
                ReasonCode.REPEATED_FAULT,
                f"{reboots} reboots within a day: replace",
            )
            inc.remove_requested_at = now
            steps.add(
                inc,
                StepAction.REMOVE,
                ReasonCode.REPEATED_FAULT,
                "RemoveInstances (release)",
                decrease_desired_capacity=True,
                reboots_today=reboots,
            )
            return
        _enter(inc, IncidentState.REMEDIATING, now, ReasonCode.REBOOT)
        inc.reboot_requested_at = now
        inc.reboot_attempts += 1
        steps.add(inc, StepAction.REBOOT, ReasonCode.REBOOT, "ECS RebootInstance")
    elif inc.action == "replace":
        _enter(inc, IncidentState.REMEDIATING, now, ReasonCode.REPLACE)
        inc.remove_requested_at = now
        steps.add(
            inc,
            StepAction.REMOVE,
            ReasonCode.REPLACE,
            "RemoveInstances (release)",
            decrease_desired_capacity=True,
        )
    else:
        _enter(inc, IncidentState.REMEDIATING, now, ReasonCode.HOLD_FOR_HUMAN)
        steps.add(inc, StepAction.HOLD, ReasonCode.HOLD_FOR_HUMAN, "kept in Standby for diagnosis")


def _close(inc: Incident, now: datetime, reason: ReasonCode, outcome: str) -> None:
    inc.outcome = outcome
    inc.closed_at = now
    _enter(inc, IncidentState.CLOSED, now, reason, outcome)


def _wait(
    steps: _Steps, inc: Incident, now: datetime, reason: ReasonCode, detail: str, **inputs: Scalar
) -> None:
    _note(inc, now, reason, detail)
    steps.add(inc, StepAction.WAIT, reason, detail, **inputs)


def _warn_about(result: IsolationResult, code: WarningCode, group: str, inc: Incident, detail: str) -> None:
    """Add a plan warning that concerns one incident (and so its instance)."""
    result.warnings.append(
        PlanWarning(
            code=code, group=group, instance_id=inc.instance_id, incident_id=inc.incident_id, detail=detail
        )
    )


def _sla(
    result: IsolationResult,
    inc: Incident,
    respond_s: float,
    isolate_s: float,
    fraction: float,
    now: datetime,
    group: str,
    blocked: bool,
    respond_only: bool = False,
) -> None:
    if inc.acknowledged_at is None:
        if now > inc.respond_by:
            code, detail = (
                WarningCode.SLA_RESPOND_BREACHED,
                f"not acknowledged by {inc.respond_by.isoformat()}",
            )
        elif now >= inc.detected_at + timedelta(seconds=respond_s * fraction):
            code, detail = WarningCode.SLA_RESPOND_AT_RISK, f"acknowledge by {inc.respond_by.isoformat()}"
        else:
            code = None
        if code is not None:
            _warn_about(result, code, group, inc, detail)
    if inc.isolated_at is None and not respond_only:
        if now > inc.isolate_by:
            code, detail = WarningCode.SLA_ISOLATE_BREACHED, f"not isolated by {inc.isolate_by.isoformat()}"
        elif blocked or now >= inc.detected_at + timedelta(seconds=isolate_s * fraction):
            why = " (blocked: breaker open)" if blocked else ""
            code, detail = WarningCode.SLA_ISOLATE_AT_RISK, f"isolate by {inc.isolate_by.isoformat()}{why}"
        else:
            code = None
        if code is not None:
            _warn_about(result, code, group, inc, detail)
