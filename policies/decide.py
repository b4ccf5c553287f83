"""decide(snapshot, spec, history, now) -> Plan: one decision for every group, pure.

For each group in the spec: read the snapshot (observe.py), advance the incidents (isolation/) and then set
the serving target (scaling/), so that the target already includes the surge that an isolation needs. The
input history is never modified: the plan carries the new one.
"""

from __future__ import annotations

from datetime import datetime

from policies.isolation import run as run_isolation
from policies.model import (
    OPEN_STATES,
    GroupHistory,
    GroupPlan,
    GroupSnapshot,
    History,
    InstanceSnapshot,
    IsolationStep,
    Plan,
    PlanWarning,
    Reason,
    ReasonCode,
    Snapshot,
    StepAction,
    WarningCode,
    deep_copy,
)
from policies.observe import classify
from policies.scaling import plan_scaling
from policies.scaling.launches import judge
from policies.schedule import bounds
from policies.spec import GroupSpec, PolicySpec


def decide(snapshot: Snapshot, spec: PolicySpec, history: History | None, now: datetime) -> Plan:
    """The plan for ``now`` (timezone-aware) from what was observed and what was remembered.

    ``spec`` is a ``PolicySpec`` (``fleet.config.FleetConfig.policy()`` builds one from fleet.yaml)."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    hist = deep_copy(history) if history is not None else History()
    plans: list[GroupPlan] = []
    warnings: list[PlanWarning] = []
    specs: list[GroupSpec] = list(spec.groups)
    known = {g.name for g in specs}
    for observed in snapshot.groups:
        if observed.name not in known:
            warnings.append(
                PlanWarning(
                    code=WarningCode.GROUP_NOT_IN_SPEC,
                    group=observed.name,
                    detail="observed but not configured: ignored",
                )
            )
    for gspec in specs:
        gh = hist.groups.setdefault(gspec.name, GroupHistory())
        group = snapshot.group(gspec.name)
        if group is not None:
            _adopt_orphaned_incidents(hist, known, gh, group)
        if group is None or group.blind:
            plan = _held(gspec, group, gh, now)
            plans.append(plan)
            warnings.extend(plan.warnings)
            continue
        plan = _decide_group(gspec, group, gh, now)
        plans.append(plan)
        warnings.extend(plan.warnings)
    hist.updated_at = now
    return Plan(at=now, groups=plans, warnings=warnings, history=hist)


def _held(spec: GroupSpec, group: GroupSnapshot | None, gh: GroupHistory, now: datetime) -> GroupPlan:
    """A group ESS could not be read for: nothing scales. A blind one (its last instance list, their health,
    events and metrics read) still runs isolation's detection and notifications."""
    bnd = bounds(spec, now)
    steps: list[IsolationStep] = []
    warnings: list[PlanWarning] = []
    detail = "no observation this tick: nothing changes"
    if group is not None:
        view = classify(group)
        iso = run_isolation(spec, gh, group, view, bnd.floor, now)
        # the launches' verdicts read only metrics: taken on the last instance list read, so that a held
        # incident on a slow launch that serves meanwhile closes as recovered without waiting for ESS
        judge(spec, gh, view, now)
        steps, warnings = iso.steps, list(iso.warnings)
        detail = "ESS unreadable: nothing scales; isolation watches the last instance list read and notifies"
    w = PlanWarning(code=WarningCode.GROUP_NOT_OBSERVED, group=spec.name, detail=detail)
    return GroupPlan(
        group=spec.name,
        scaling_group_id=spec.scaling_group_id,
        reason=ReasonCode.GROUP_NOT_OBSERVED,
        reasons=[Reason(code=ReasonCode.GROUP_NOT_OBSERVED, detail=detail)],
        serving_target=gh.last_target or bnd.floor,
        target_capacity=gh.last_target or bnd.floor,
        floor=bnd.floor,
        floor_source=bnd.floor_why,
        ceiling=bnd.ceiling,
        ceiling_source=bnd.ceiling_why,
        active_schedules=list(bnd.active),
        steps=steps,
        incidents=[i for i in gh.incidents if i.state in OPEN_STATES],
        warnings=[w, *warnings],
    )


def _adopt_orphaned_incidents(hist: History, known: set[str], gh: GroupHistory, group: GroupSnapshot) -> None:
    """Open incidents kept under a group the config no longer names (renamed in fleet.yaml) whose instance is
    in ``group`` now move to it, so that their workflow goes on. Left behind, nobody decided them: a node in
    Standby stayed there for good, and a release reached a history with no incident for it."""
    members = {inst.instance_id for inst in group.instances}
    for name, other in hist.groups.items():
        if name in known:
            continue
        moving = [inc for inc in other.incidents if inc.open and inc.instance_id in members]
        if moving:
            other.incidents = [inc for inc in other.incidents if inc not in moving]
            gh.incidents.extend(moving)


def _decide_group(spec: GroupSpec, group: GroupSnapshot, gh: GroupHistory, now: datetime) -> GroupPlan:
    view = classify(group)
    bnd = bounds(spec, now)
    warnings: list[PlanWarning] = []
    for inst in view.unknown:
        warnings.append(
            PlanWarning(
                code=WarningCode.UNKNOWN_LIFECYCLE_STATE,
                group=group.name,
                instance_id=inst.instance_id,
                detail=f"lifecycle state {inst.lifecycle_state!r} is not counted",
            )
        )
    iso = run_isolation(spec, gh, group, view, bnd.floor, now)
    # The open breaker holds scale-in while an automatic incident is open (a fleet-wide fault may be under
    # way); once every one has closed (remediated, gone or recovered) the fleet follows its load again, and
    # the breaker still holds automatic isolation until a human resets it. An incident on a launch that never
    # served is no fleet-wide fault of serving nodes: scale-in, which removes such an instance first, goes on.
    breaker_holds = gh.breaker.open and any(i.open and not i.manual and not i.unserved for i in gh.incidents)
    sc = plan_scaling(
        spec, gh, group, view, bnd, now, iso.leaving_serving, iso.unreplaced, breaker_holds, iso.returned
    )
    warnings.extend(sc.warnings)
    warnings.extend(iso.warnings)

    steps = iso.steps
    if sc.serving_target < sc.base + iso.leaving_serving:
        # the ceiling or ESS MaxSize leaves no room for the replacement: say so, and the SLA is at risk
        for k, step in enumerate(steps):
            if step.action == StepAction.SURGE:
                detail = f"no room for a replacement: serving target {sc.serving_target} is at the cap"
                update = {"reason": ReasonCode.SURGE_BLOCKED_BY_MAX, "detail": detail}
                steps[k] = step.model_copy(update=update)
                warnings.append(
                    PlanWarning(
                        code=WarningCode.SLA_ISOLATE_AT_RISK,
                        group=group.name,
                        instance_id=step.instance_id,
                        incident_id=step.incident_id,
                        detail=detail,
                    )
                )
    target_capacity = sc.serving_target + len(view.standby)
    reason, reasons = sc.reason, sc.reasons
    desired: int | None = target_capacity
    held = group.paused or group.ess_state is not None
    gh.ess_state = group.ess_state
    if held:
        desired = None
        reason = ReasonCode.PAUSED
        why = "scaling paused by an operator"
        if group.ess_state is not None:
            why = (
                f"the ESS scaling group is {group.ess_state} (disabled in ESS): it refuses every scaling "
                "write, so none is made until it is Active again; incidents are still detected and notified"
            )
            warnings.append(PlanWarning(code=WarningCode.GROUP_DISABLED, group=group.name, detail=why))
        reasons = [Reason(code=ReasonCode.PAUSED, detail=why)] + reasons
    elif group.desired_capacity is not None and group.desired_capacity == target_capacity:
        desired = None
    if not held:
        if gh.last_target is not None and sc.base != gh.last_target:
            gh.last_scale_at = now
            if sc.base < gh.last_target:
                gh.last_scale_in_at = now
        gh.last_target = sc.base
    observed = (
        group.desired_capacity
        if group.desired_capacity is not None
        else (view.current_serving + len(view.standby))
    )
    direction = "none"
    if desired is not None and desired != observed:
        direction = "up" if desired > observed else "down"

    # scale-in victims: launches that keep failing (they serve nothing), suspect instances, then ones still
    # starting, then the newest
    dead = sc.dead
    present = {x.instance_id for x in view.serving + view.pending}
    degraded = dead + [i for i in iso.degraded if i not in dead and i in present]

    def age_key(inst: InstanceSnapshot) -> tuple[float, str]:
        return (inst.created_at.timestamp() if inst.created_at else 0.0, inst.instance_id)

    rest = sorted(view.pending, key=age_key, reverse=True) + sorted(view.serving, key=age_key, reverse=True)
    order = degraded + [i.instance_id for i in rest if i.instance_id not in degraded]

    return GroupPlan(
        group=group.name,
        scaling_group_id=group.scaling_group_id or spec.scaling_group_id,
        in_service=len(view.serving),
        pending=len(view.pending),
        standby=len(view.standby),
        current_serving=view.current_serving,
        serving_target=sc.serving_target,
        target_capacity=target_capacity,
        desired_capacity=desired,
        direction=direction,
        reason=reason,
        reasons=reasons,
        floor=bnd.floor,
        floor_source=bnd.floor_why,
        ceiling=bnd.ceiling,
        ceiling_source=bnd.ceiling_why,
        active_schedules=list(bnd.active),
        scale_in_order=order,
        scale_in_suspects=len(degraded),
        steps=steps,
        incidents=[deep_copy(i) for i in gh.incidents if i.state in OPEN_STATES],
        warnings=warnings,
        predictive=sc.predictive,
    )
