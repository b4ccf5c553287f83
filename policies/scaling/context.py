"""What the parts of the scaler share: its inputs, the rule signals, the step interface and the result.

A step is ``Step = Callable[[ScalingContext], Contribution | None]``: it reads the context (the inputs, the
``hold`` it started from, the rule ``signals`` and the ``target`` as the steps before it left it) and returns
what it contributes, or None when it has nothing to say. It never writes the context or the history: the
orchestrator applies its ``Contribution``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from policies.model import GroupHistory, GroupSnapshot, PlanWarning, Reason, ReasonCode, Scalar
from policies.observe import Aggregate, GroupView
from policies.schedule import Bounds
from policies.spec import GroupSpec, MetricRule

if TYPE_CHECKING:
    from policies.scaling.demand import DemandSignals


@dataclass(frozen=True)
class ScalingInputs:
    """What ``plan_scaling`` is given: the group, its bounds now, and what isolation needs this tick."""

    spec: GroupSpec
    gh: GroupHistory
    group: GroupSnapshot
    view: GroupView
    bnd: Bounds
    now: datetime
    leaving_serving: int  # admitted incident nodes still serving: surged on top of the target
    unreplaced: int  # admitted incidents not yet remediated: scale-in waits for their replacement
    breaker_open: bool
    returned: int = 0  # nodes back from Standby this tick


@dataclass(frozen=True)
class Fired:
    """A scale-out rule whose duration is met (or in panic): the instances it wants."""

    rule: MetricRule
    desire: int
    agg: Aggregate
    by_panic: bool  # fired by the panic threshold before its duration was met


@dataclass
class RuleSignals:
    """The metric rules read this tick (``signals.read_rules``), before any step decides."""

    fired: list[Fired] = field(default_factory=list)
    panic: bool = False
    raw_desires: list[int] = field(default_factory=list)  # every rule's ceil(N * value / target), if known
    all_known: bool = True  # every rule metric known and complete for every InService instance
    in_rules_hold: bool = True  # every scale-in rule held for its duration
    raw: int | None = None  # this tick's recommendation in the stabilization window (None: unknown)
    warnings: list[PlanWarning] = field(default_factory=list)  # metrics missing, stale, partial


@dataclass(frozen=True)
class Contribution:
    """What one step adds to the decision.

    ``target``: the new serving target (None: unchanged). ``reason``: the headline, when this step
    decides: its code becomes the group's reason and it is listed before the reasons of the steps before
    it. ``notes``: details listed after everything so far (a step limit, what the hold kept).
    ``warnings``: for the plan.
    """

    target: int | None = None
    reason: Reason | None = None
    notes: tuple[Reason, ...] = ()
    warnings: tuple[PlanWarning, ...] = ()


@dataclass
class ScalingContext:
    inp: ScalingInputs
    hold: int  # where the decision starts (hold.py): the last decided target, plus returned nodes
    signals: RuleSignals
    target: int
    reason: ReasonCode = ReasonCode.HOLD
    reasons: list[Reason] = field(default_factory=list)
    warnings: list[PlanWarning] = field(default_factory=list)
    demand: DemandSignals | None = None  # demand.py: None when predictive scaling is off
    # the failing run's dead launches to remove (launch_verdicts.dead_launches): launches.py sizes the target
    # without them, and decide names them first among the victims
    dead: list[str] = field(default_factory=list)
    # how long a launch here takes to serve, once the tick judged its launches (launch_verdicts.load_time_s)
    load_s: float = 0.0

    def apply(self, c: Contribution | None) -> None:
        if c is None:
            return
        if c.target is not None:
            self.target = c.target
        if c.reason is not None:
            self.reasons.insert(0, c.reason)
            self.reason = c.reason.code
        self.reasons.extend(c.notes)
        self.warnings.extend(c.warnings)


Step = Callable[[ScalingContext], Contribution | None]


@dataclass
class ScalingResult:
    base: int  # healthy serving target (persisted as last_target)
    serving_target: int
    reason: ReasonCode
    reasons: list[Reason] = field(default_factory=list)
    warnings: list[PlanWarning] = field(default_factory=list)
    predictive: dict[str, Scalar] = field(default_factory=dict)
    dead: list[str] = field(default_factory=list)  # ScalingContext.dead: removed by name, first
