"""Launches that never serve: instances ESS created and runs (InService) whose vLLM never comes up.

A broken image, launch template, model store or driver makes every new instance a dead one, and every rule
that sizes the group by a ratio over its InService instances reads the dead ones as capacity: the serving
instances stay loaded, the rule scales out again, and the group climbs to ``max_size`` with GPUs that serve
nothing, billed until a human notices (measured in the simulator: 40 instances of which 14 served, all day).
Replacing them one by one does not help either: the replacements are launched the same way.

So each launch is judged once (``judge``, the only writes to ``GroupHistory.launches``): *served* at its
first fresh ``vllm_up`` of 1, *failed* when it still reads 0 (a fresh sample, so that a group without the
engine metric is never judged) ``LAUNCH_GRACE_S`` past the group's load time (its cold start, or as long as
recent launches were seen to take: ``policies.launch_verdicts.load_time_s``). Only young instances are judged:
one older than the grace plus ``JUDGE_WINDOW_S`` when first looked at (the service started after it) is the
engine rules' business, not a launch's.

When the ``FAILED_IN_A_ROW`` newest judged launches all failed, scale-out holds at the hold (reason and
warning ``launches_failing``, one notification per run of failures) until a launch serves; ``RETRY_S`` after
the run's last failure, scale-out goes one instance at a time (a probe: a fixed image serves and ends the
run; a broken one fails, and the hold starts over). Meanwhile the run's dead launches still in the group
but its newest are removed by name (``policies.launch_verdicts.dead_launches``): the target is the live
fleet, so they go without a replacement. Scale-in is not
held: it removes the suspects first. The floors still apply (the schedule's floors are mirrored as ESS
scheduled tasks, which ESS would carry out without the service anyway).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from policies.launch_verdicts import (
    JUDGE_WINDOW_S,
    LAUNCH_GRACE_S,
    engine_up,
    failed_run,
    launch_age_s,
    learned_load_s,
    load_time_s,
    slowest_launch,
)
from policies.model import GroupHistory, LaunchRecord, PlanWarning, Reason, ReasonCode, WarningCode
from policies.observe import GroupView
from policies.scaling.context import Contribution, ScalingContext, ScalingInputs
from policies.spec import GroupSpec

RETRY_S = 1800.0  # after this since the last failure, a scale-out tries launching again
KEEP = 20  # verdicts kept beyond those of launches still young enough to be judged (``judge``)


def judge(spec: GroupSpec, gh: GroupHistory, view: GroupView, now: datetime) -> None:
    """Record this tick's verdicts on the young InService instances not judged yet; a launch judged failed
    that serves after all was slow to load, not dead (``late_at``): it ends a run of failures. It reads only
    the instances' metrics, no ESS: it runs on a tick ESS could not be read too (``policies.decide``), on the
    last instance list read, so that a held incident on a launch that serves meanwhile closes as recovered."""
    judged = {r.instance_id: r for r in gh.launches}
    load_s = load_time_s(gh.launches, spec.cold_start_s)
    deadline_s = load_s + LAUNCH_GRACE_S
    for inst in view.serving:
        up = engine_up(inst, now, spec.stabilization.stale_after_s)
        record = judged.get(inst.instance_id)
        if record is not None:
            if not record.served and up:
                record.served, record.late_at = True, now
            continue
        age_s = launch_age_s(inst, now, load_s)
        if age_s is None or up is None:
            continue
        if up or age_s >= deadline_s:
            assert inst.created_at is not None  # launch_age_s knows it
            # serving only past the cold start and the grace, under a slow load already learned (a late
            # launch before it): one more sign of it; without one, a late verdict may be a gap in watching
            slow = up and load_s > spec.cold_start_s and age_s > spec.cold_start_s + LAUNCH_GRACE_S
            gh.launches.append(
                LaunchRecord(
                    instance_id=inst.instance_id,
                    launched_at=inst.created_at,
                    served=up,
                    judged_at=now,
                    slow=slow,
                )
            )
    # the newest KEEP verdicts, and every one whose instance is still young enough to be judged: trimmed
    # away, it would be judged afresh each tick (a launch that served, then crashed, read as never served)
    ordered = sorted(gh.launches, key=lambda r: (r.launched_at, r.instance_id))
    window_s = load_s + LAUNCH_GRACE_S + JUDGE_WINDOW_S
    gh.launches = [
        r
        for i, r in enumerate(ordered)
        if i >= len(ordered) - KEEP or (now - r.launched_at).total_seconds() <= window_s
    ]


def failing(inp: ScalingInputs) -> tuple[list[LaunchRecord], datetime | None]:
    """The run of failed launches behind the newest verdicts (empty: launches are fine), and when it is time
    to retry: ``RETRY_S`` after the run's last failure."""
    run = failed_run(inp.gh.launches)
    if not run:
        return [], None
    return run, max(r.judged_at for r in run) + timedelta(seconds=RETRY_S)


def slow_launch(ctx: ScalingContext) -> Contribution | None:
    """Step: a warning while recent launches took longer than the group's ``cold_start_s`` and the grace
    (``slowest_launch``): the service waits for launches as long as they took (``load_time_s``), but the
    schedule's floors are still raised only ``cold_start_s`` early, and until one is learned a slow launch
    reads as failed."""
    inp = ctx.inp
    cold_s = inp.spec.cold_start_s
    r = slowest_launch(inp.gh.launches, cold_s)
    if r is None or r.load_s is None:
        return None
    waited_s = learned_load_s(r, cold_s)
    detail = (
        f"launch {r.instance_id} served {r.load_s:.0f}s after it was ordered, past cold_start_s {cold_s:g}s "
        f"and the {LAUNCH_GRACE_S:g}s grace: launches are waited for {waited_s:.0f}s now; raise cold_start_s "
        "to what a launch takes"
    )
    warning = PlanWarning(
        code=WarningCode.COLD_START_EXCEEDED, group=inp.group.name, instance_id=r.instance_id, detail=detail
    )
    return Contribution(warnings=(warning,))


def launch_hold(ctx: ScalingContext) -> Contribution | None:
    """Step: no scale-out onto launches that keep failing; once it is time to retry, one launch at a time
    (a probe: a fixed image serves and ends the run, a broken one costs one instance, not a step). The run's
    dead launches still in the group but the newest are removed (``decide`` names them first among the
    victims): they serve nothing, so the live fleet keeps its size, and they are no longer billed."""
    run, retry_at = failing(ctx.inp)
    if retry_at is None:
        return None
    retry = ctx.inp.now >= retry_at
    allowed = ctx.hold
    dead = ctx.dead
    if dead:  # the live fleet (counted from what is there, so that a removal under way counts once)
        allowed = min(allowed, ctx.inp.view.current_serving - len(dead))
    if retry and not _probing(ctx.inp, run[-1]):
        allowed += 1
    then = f"no scale-out onto more of them before {retry_at:%H:%M}Z"
    if retry:
        then = "one launch at a time to retry"
    if dead:
        then += f"; the {len(dead)} still in the group removed (they serve nothing)"
    cold_s, load_s = ctx.inp.spec.cold_start_s, ctx.load_s
    waited = "the cold start" if load_s <= cold_s else f"the {load_s:.0f}s launches here were seen to take"
    detail = (
        f"the {len(run)} newest launches never served (vLLM still down {LAUNCH_GRACE_S:g}s past {waited}: "
        f"{', '.join(r.instance_id for r in run[-3:])}): check the image, launch template and model "
        f"store; {then}"
    )
    warning = PlanWarning(
        code=WarningCode.LAUNCHES_FAILING,
        group=ctx.inp.group.name,
        instance_id=run[0].instance_id,  # the run's first: one notification per run
        detail=detail,
    )
    if ctx.target <= allowed:
        return Contribution(warnings=(warning,))
    reason = Reason(
        code=ReasonCode.LAUNCHES_FAILING,
        detail=detail,
        inputs={
            "wanted": ctx.target,
            "hold": ctx.hold,
            "failed_in_a_row": len(run),
            "retry": retry,
            "dead_in_group": len(dead),
        },
    )
    return Contribution(target=allowed, reason=reason, warnings=(warning,))


def _probing(inp: ScalingInputs, last_failed: LaunchRecord) -> bool:
    """Whether a launch after the run's last failure is still on its way or not judged yet."""
    view = inp.view
    if view.in_flight or view.pending:
        return True
    judged = {r.instance_id for r in inp.gh.launches}
    return any(
        i.created_at is not None and i.created_at > last_failed.launched_at and i.instance_id not in judged
        for i in view.serving
    )
