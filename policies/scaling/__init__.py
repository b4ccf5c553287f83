"""The serving target of one group: schedule bounds, metric rules, stabilization and the isolation surge.

Order of composition (each step's reason is kept; the steps are ``plan.STEPS``):
1. hold: the last decided healthy target (what is observed on the first tick), plus nodes that came back from
   Standby this tick (so that their return never forces an implicit scale-in by ESS);
2. scale-out: rules whose duration is met (or in panic, at once) recommend ceil(N * value / target); the max
   wins; capped by the step limit (not in panic);
3. scale-in: only when no scale-out rule fires, every scale-in rule held for its duration, every rule metric
   is known for every InService instance, no panic hold, no breaker, no isolated node waiting for its
   replacement, and the cooldown passed: to the highest recommendation of the window, at most one step down;
4. launches: no scale-out while the newest launches never served (a broken image or launch template);
5. bounds: max(floor, .) then min(ceiling, .) (the floor wins over the ceiling; see schedule.py);
6. surge: plus the admitted incident nodes still serving, within the ceiling and ESS MaxSize (which also
   counts Standby instances).

Where each decision is made:

- ``plan.py``       ``plan_scaling`` and ``STEPS``: the orchestrator; add a source of desired capacity here
- ``context.py``    the step interface (``Step``, ``Contribution``, ``ScalingContext``) and the shared types
- ``signals.py``    the metric rules read once, before any step: tracks, panic hold, stabilization window
- ``hold.py``       where the decision starts
- ``scale_out.py``  scale-out rules
- ``scale_in.py``   scale-in (and its blockers), the tolerance band
- ``demand.py``, ``predictive.py``  the forecast's demand and the capacity-model target
- ``launches.py``   launches that never serve: judged once each, and the hold on scale-out they cause
- ``bounds.py``     floor and ceiling
- ``surge.py``      the surge for isolation, on top of the steps' target
"""

from policies.scaling.context import Contribution, ScalingContext, ScalingResult, Step
from policies.scaling.plan import STEPS, plan_scaling

__all__ = ["STEPS", "Contribution", "ScalingContext", "ScalingResult", "Step", "plan_scaling"]
