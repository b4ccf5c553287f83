"""``plan_scaling``: the serving target of one group, a short orchestrator over the desired-capacity steps.

A new source of desired capacity (a forecast, a capacity fallback) is one more ``Step`` in ``STEPS``, placed
where it ranks: it reads the context and returns a ``Contribution`` (context.py), and the steps after it see
its target. The bounds come last among the steps so that nothing escapes them; the surge for isolation is
added on top of whatever the steps decided.
"""

from __future__ import annotations

from datetime import datetime

from policies.launch_verdicts import dead_launches, load_time_s
from policies.model import GroupHistory, GroupSnapshot
from policies.observe import GroupView
from policies.scaling.bounds import ceiling, floor, last_instance
from policies.scaling.context import ScalingContext, ScalingInputs, ScalingResult, Step
from policies.scaling.demand import read_demand
from policies.scaling.hold import hold, starting_point
from policies.scaling.launches import judge, launch_hold, slow_launch
from policies.scaling.predictive import predictive
from policies.scaling.scale_in import scale_in, within_tolerance
from policies.scaling.scale_out import scale_out
from policies.scaling.signals import read_rules
from policies.scaling.surge import with_surge
from policies.schedule import Bounds
from policies.spec import GroupSpec

STEPS: tuple[Step, ...] = (
    hold,  # hold.py: the last decided target, plus nodes back from Standby
    scale_out,  # scale_out.py: the fired rules' highest recommendation, step-limited
    scale_in,  # scale_in.py: the window's highest recommendation when nothing fired and nothing blocks
    within_tolerance,  # scale_in.py: the reason when the metrics' change is within the tolerance band
    predictive,  # predictive.py: the capacity-model target for the forecast (off: nothing)
    launch_hold,  # launches.py: no scale-out onto launches that keep failing; their dead ones removed
    slow_launch,  # launches.py: a warning when a launch served only past the cold start and its grace
    floor,  # bounds.py: up to the floor
    last_instance,  # bounds.py: never empty a group on metrics (its agents are the only demand signal)
    ceiling,  # bounds.py: down to the ceiling (never below the floor: the floor step ran first)
)


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
    inp = ScalingInputs(spec, gh, group, view, bnd, now, leaving_serving, unreplaced, breaker_open, returned)
    start, _ = starting_point(inp)
    signals = read_rules(inp, start)  # the only writes to the history: tracks, panic hold, window
    # the launches' verdicts first: the demand's instances still loading and the steps below wait by the
    # same load time (``load_time_s``), which a launch judged this tick can change
    judge(spec, gh, view, now)
    load_s = load_time_s(gh.launches, spec.cold_start_s)
    demand = read_demand(inp, load_s)  # the forecast's record, the capacity correction (None: predictive off)
    ctx = ScalingContext(
        inp=inp,
        hold=start,
        signals=signals,
        target=start,
        warnings=list(signals.warnings),
        demand=demand,
        dead=dead_launches(gh, view, now),
        load_s=load_s,
    )
    if demand is not None:
        ctx.warnings.extend(demand.warnings)
    for step in STEPS:
        ctx.apply(step(ctx))
    result = with_surge(ctx)
    result.dead = ctx.dead
    if demand is not None:
        result.predictive = dict(demand.inputs)
    return result
