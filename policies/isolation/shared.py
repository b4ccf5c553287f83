"""What the parts of the isolation workflow share: constants, the result, the tick context, timeline helpers.

Every other module of ``policies.isolation`` imports from here and from nowhere else in the package, except
the orchestrator (``workflow.py``), which imports them all: the split makes no import circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from policies.launch_verdicts import load_time_s
from policies.model import (
    OPEN_STATES,
    GroupHistory,
    GroupSnapshot,
    Incident,
    IncidentState,
    InstanceSnapshot,
    IsolationStep,
    LifecycleState,
    PlanWarning,
    ReasonCode,
    Scalar,
    StepAction,
    TimelineEntry,
    WarningCode,
)
from policies.observe import GroupView
from policies.spec import GroupSpec, IsolationAction, IsolationRule, IsolationSpec

DAY_S = 86400.0
MAX_STEP_FAILURES = 3  # then escalate: a reboot that keeps failing becomes a replacement
# Samples of the same "last XID" closer than this are one occurrence: two missed 60 s CMS periods fit inside.
XID_SAME_EVENT_GAP_S = 120.0
# Lifecycle states (ESS) in which an instance takes traffic, and in which it is on its way out of the group.
SERVING_STATES = (LifecycleState.IN_SERVICE, LifecycleState.PROTECTED)
REMOVING_STATES = (LifecycleState.REMOVING, LifecycleState.REMOVING_WAIT)
# An incident on a launch that never served (``Incident.unserved``): what its timeline says once.
UNSERVED_DETAIL = (
    "the instance has not served since its launch: taking it out takes no serving capacity, so it counts "
    "toward neither the breaker nor max_isolated; it waits while launches keep failing"
)
# Evidence keys naming the other rules an incident was found by: at opening, and on each escalation.
ALSO, ESCALATED_BY = "also", "escalated_by_"
# How many applied operator actions and seen step outcomes the history remembers (to apply each once).
REMEMBERED_IDS = 500


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


class StepLog:
    """Appends the plan's isolation steps; a step id counts its action's failures (a new ClientToken)."""

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


@dataclass
class Tick:
    """One group's isolation tick: its inputs, the history it advances and the result it fills.

    ``released`` carries the incidents a human released this tick from the operator actions to admission and
    to the incident handlers.
    """

    spec: GroupSpec
    gh: GroupHistory
    group: GroupSnapshot
    view: GroupView
    floor: int
    now: datetime
    result: IsolationResult = field(default_factory=IsolationResult)
    released: set[str] = field(default_factory=set)
    clear: set[str] = field(default_factory=set)  # condition keys detection read clear this tick
    # instances with findings this tick -> the NotBefore their isolation may wait for (every finding a
    # system event ECS scheduled ahead), or None (a finding asks for it now); ``events.py`` reads it
    found: dict[str, datetime | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.steps = StepLog(self.result)
        self.by_id: dict[str, InstanceSnapshot] = {i.instance_id: i for i in self.group.instances}
        # how long a launch here takes to serve (isolation writes no launch verdict: one value a tick)
        self.load_s = load_time_s(self.gh.launches, self.spec.cold_start_s)

    @property
    def iso(self) -> IsolationSpec:
        return self.spec.isolation

    @property
    def stale_after_s(self) -> float:
        return self.spec.stabilization.stale_after_s

    def open_incident(self, instance_id: str) -> Incident | None:
        return next(
            (i for i in self.gh.incidents if i.instance_id == instance_id and i.state in OPEN_STATES), None
        )

    def rule_of(self, inc: Incident) -> IsolationRule | None:
        """The rule that opened ``inc`` (None: the config no longer has it)."""
        return next((r for r in self.iso.rules if r.rule_id == inc.rule), None)

    def incident(self, incident_id: str) -> Incident | None:
        return next((i for i in self.gh.incidents if i.incident_id == incident_id), None)

    def open_in_detection_order(self) -> list[Incident]:
        return sorted(
            (i for i in self.gh.incidents if i.state in OPEN_STATES),
            key=lambda i: (i.detected_at, i.incident_id),
        )

    def new_incident(
        self,
        instance_id: str,
        rule: str,
        kind: str,
        action: IsolationAction,
        manual: bool,
        detail: str,
        evidence: dict[str, Scalar],
        reason: ReasonCode,
    ) -> Incident:
        now, iso = self.now, self.iso
        inc = Incident(
            incident_id=f"{self.group.name}:{instance_id}:{_id_stamp(now)}",
            group=self.group.name,
            instance_id=instance_id,
            rule=rule,
            kind=kind,
            action=action,
            manual=manual,
            detected_at=now,
            respond_by=now + timedelta(seconds=iso.respond_within_s),
            isolate_by=now + timedelta(seconds=iso.isolate_within_s),
            evidence=evidence,
        )
        enter(inc, IncidentState.DETECTED, now, reason, detail)
        self.gh.incidents.append(inc)
        return inc

    def warn_about(self, code: WarningCode, inc: Incident, detail: str) -> None:
        """Add a plan warning that concerns one incident (and so its instance)."""
        self.result.warnings.append(
            PlanWarning(
                code=code,
                group=self.group.name,
                instance_id=inc.instance_id,
                incident_id=inc.incident_id,
                detail=detail,
            )
        )

    def wait(self, inc: Incident, reason: ReasonCode, detail: str, **inputs: Scalar) -> None:
        note(inc, self.now, reason, detail)
        self.steps.add(inc, StepAction.WAIT, reason, detail, **inputs)


def _id_stamp(t: datetime) -> str:
    """The compact UTC stamp (``20260302T100000Z``) in incident ids; policies import no shell formatter."""
    return t.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def enter(inc: Incident, state: IncidentState, now: datetime, reason: ReasonCode, detail: str = "") -> None:
    inc.state = state
    inc.timeline.append(TimelineEntry(at=now, state=state, reason=reason, detail=detail))


def note(inc: Incident, now: datetime, reason: ReasonCode, detail: str = "") -> None:
    """A timeline entry without a state change (only when it is news: not repeated every tick)."""
    last = inc.timeline[-1] if inc.timeline else None
    if last is None or last.reason != reason or last.detail != detail:
        inc.timeline.append(TimelineEntry(at=now, state=inc.state, reason=reason, detail=detail))


def close(inc: Incident, now: datetime, reason: ReasonCode, outcome: str) -> None:
    inc.outcome = outcome
    inc.closed_at = now
    enter(inc, IncidentState.CLOSED, now, reason, outcome)


def one_finding(inc: Incident) -> bool:
    """Whether only the rule that opened ``inc`` found it (no other rule at opening, none escalated it)."""
    return not any(key == ALSO or key.startswith(ESCALATED_BY) for key in inc.evidence)
