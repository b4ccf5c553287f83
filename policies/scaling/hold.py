"""Hold: where every decision starts.

The last decided healthy target (what is observed on the first tick), plus nodes that came back from Standby
this tick, so that their return never forces an implicit scale-in by ESS; never above ESS MaxSize.
"""

from __future__ import annotations

from policies.model import Reason, ReasonCode
from policies.scaling.context import Contribution, ScalingContext, ScalingInputs


def starting_point(inp: ScalingInputs) -> tuple[int, tuple[Reason, ...]]:
    """The hold and what it kept, as notes."""
    if inp.gh.last_target is None:
        # what serves now, suspects included: their replacements come on top (the surge)
        observed = inp.view.current_serving
        first = Reason(
            code=ReasonCode.HOLD,
            detail="first decision: start from what is observed",
            inputs={"observed": observed},
        )
        return min(observed, inp.spec.max_size), (first,)
    hold = inp.gh.last_target
    notes: tuple[Reason, ...] = ()
    if inp.returned:
        # nodes back from Standby serve again: keep them rather than let ESS pick victims implicitly;
        # the scale-in rules bring the group down from here, removing suspects first
        notes = (
            Reason(
                code=ReasonCode.HOLD,
                detail=f"{inp.returned} instance(s) back from isolation kept",
                inputs={"decided": hold, "returned": inp.returned},
            ),
        )
        hold += inp.returned
    return min(hold, inp.spec.max_size), notes


def hold(ctx: ScalingContext) -> Contribution:
    """Step: start from the hold."""
    _, notes = starting_point(ctx.inp)
    return Contribution(target=ctx.hold, notes=notes)
