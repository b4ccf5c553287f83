"""The values ``decide`` maps: what was observed (``Snapshot``), what was remembered (``History``) and what to
do (``Plan``), with the machine-readable codes every decision carries.

All three are pydantic models that round-trip through JSON (``model_dump_json`` / ``model_validate_json``);
times are timezone-aware. The service builds a Snapshot each tick, persists ``plan.history`` and feeds it back
next tick; the outcome of the steps it actuated comes back through the next Snapshot (lifecycle states,
``outcomes``, ``notifications``, ``operator_actions``). docs/policies.md describes every field.
"""

from __future__ import annotations

import copy
from collections import Counter
from datetime import date, datetime, time, timedelta
from enum import Enum, StrEnum
from typing import Any, Literal, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

Scalar = float | int | str | bool | None


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


_M = TypeVar("_M", bound=BaseModel)
_IMMUTABLE = (str, int, float, bool, type(None), datetime, date, time, timedelta, Enum)


def deep_copy(model: _M) -> _M:
    """``model.model_copy(deep=True)``, about four times faster: immutable leaves (strings, numbers,
    datetimes, enums) are shared instead of copied one by one; every model, list, dict and set is new, so
    nothing the copy holds can change the original. (Pydantic's deep copy of a predictive group's history was
    about 15 % of ``decide``.)"""
    return _copy(model)  # type: ignore[no-any-return]


def _copy(value: Any) -> Any:
    if isinstance(value, _IMMUTABLE):
        return value
    if isinstance(value, BaseModel):
        new = value.__copy__()  # a new instance with a shallow copy of the fields (and of the set fields)
        fields = new.__dict__
        for k, v in fields.items():
            if not isinstance(v, _IMMUTABLE):
                fields[k] = _copy(v)
        return new
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_copy(v) for v in value)
    return copy.deepcopy(value)  # sets and anything else: the general way


# ---- codes -------------------------------------------------------------------------------------------------


class ReasonCode(StrEnum):
    """Why a group's target is what it is, or why an isolation step is (not) taken."""

    # scaling
    HOLD = "hold"
    FLOOR_MIN_SIZE = "floor_min_size"
    FLOOR_WARM = "floor_warm"
    FLOOR_SCHEDULE = "floor_schedule"
    FLOOR_LAST_INSTANCE = "floor_last_instance"
    CEILING_MAX_SIZE = "ceiling_max_size"
    CEILING_SCHEDULE = "ceiling_schedule"
    RULE_SCALE_OUT = "rule_scale_out"
    RULE_SCALE_IN = "rule_scale_in"
    PANIC = "panic"
    PENDING_CAPACITY_COVERS = "pending_capacity_covers"
    STEP_LIMITED_UP = "step_limited_up"
    STEP_LIMITED_DOWN = "step_limited_down"
    WITHIN_TOLERANCE = "within_tolerance"
    SCALE_IN_STABILIZING = "scale_in_stabilizing"
    SCALE_IN_COOLDOWN = "scale_in_cooldown"
    SCALE_IN_BLOCKED_METRICS = "scale_in_blocked_metrics_unknown"
    SCALE_IN_BLOCKED_ISOLATION = "scale_in_blocked_unreplaced_isolation"
    SCALE_IN_BLOCKED_PANIC = "scale_in_blocked_panic"
    SCALE_IN_BLOCKED_BREAKER = "scale_in_blocked_breaker_open"
    SURGE_FOR_ISOLATION = "surge_for_isolation"
    PREDICTIVE_SCALE_OUT = "predictive_scale_out"
    PREDICTIVE_SCALE_IN = "predictive_scale_in"
    PREDICTIVE_HOLD = "predictive_hold"
    PREDICTIVE_FORECAST_ONLY = "predictive_forecast_only"
    BURST_ABSORBED = "burst_absorbed"
    RULES_CAPPED = "rules_capped"
    LAUNCHES_FAILING = "launches_failing"  # recent launches never served: no scale-out on more of them
    PAUSED = "paused"
    GROUP_NOT_OBSERVED = "group_not_observed"
    DECISION_FAILED = "decision_failed"  # the service could not decide the group this tick: it holds
    CLIPPED_TO_ESS_BOUNDS = "clipped_to_ess_bounds"  # the ESS group's MinSize/MaxSize are narrower (shell)
    # the group moved along its capacity ladder to a type of another capacity per instance (shell)
    CAPACITY_FALLBACK_COUNT = "capacity_fallback_count"
    # isolation
    RULE_BREACHED = "rule_breached"
    UNSERVED_LAUNCH = "unserved_launch"  # found on a launch that never served: no guardrail counts it
    # admitted as taking no capacity (a launch that never served, a node serving nothing), it serves now (or
    # its engine runs again out of traffic): max_isolated counts it, or it waits for room in traffic
    SERVES_AGAIN = "serves_again"
    MANUAL_ISOLATION = "manual_isolation"
    NOTIFY_HUMAN = "notify_human"
    ACKNOWLEDGED = "acknowledged"
    FLOOR_HOLDS = "floor_holds"
    FLOOR_WOULD_BREAK = "floor_would_break"
    WAITING_FOR_REPLACEMENT = "waiting_for_replacement"
    SURGE_BLOCKED_BY_MAX = "surge_blocked_by_max"
    GUARDRAIL_MAX_ISOLATED = "guardrail_max_isolated"
    BREAKER_OPEN = "breaker_open"
    BREAKER_TRIPPED = "breaker_tripped"
    BREAKER_RESET = "breaker_reset"
    ENTER_STANDBY = "enter_standby"
    DRAINING = "draining"
    DRAINED = "drained"
    DRAIN_TIMEOUT = "drain_timeout"
    REBOOT = "reboot"
    AWAITING_HEALTH = "awaiting_health"
    HEALTH_CHECK_PASSED = "health_check_passed"
    HEALTH_CHECK_TIMEOUT = "health_check_timeout"
    STEP_FAILED = "step_failed"
    REPLACE = "replace"
    REPEATED_FAULT = "repeated_fault"
    HOLD_FOR_HUMAN = "hold_for_human"
    RELEASED = "released"
    INSTANCE_GONE = "instance_gone"
    ESCALATED = "escalated"
    REMEDIATED = "remediated"
    RECOVERED = "recovered"  # held by the breaker or max_isolated, its condition read clear long enough
    # the scheduled system event an incident waited for is no longer active (ECS canceled or avoided it)
    EVENT_ENDED = "event_ended"
    # a system event ECS scheduled further ahead than isolate_within: recorded now, isolated as it nears
    EVENT_SCHEDULED = "event_scheduled"


class WarningCode(StrEnum):
    METRIC_MISSING = "metric_missing"
    METRIC_STALE = "metric_stale"
    METRIC_PARTIAL = "metric_partial"
    SLA_RESPOND_AT_RISK = "sla_respond_at_risk"
    SLA_RESPOND_BREACHED = "sla_respond_breached"
    SLA_ISOLATE_AT_RISK = "sla_isolate_at_risk"
    SLA_ISOLATE_BREACHED = "sla_isolate_breached"
    BREAKER_OPEN = "breaker_open"
    GUARDRAIL_MAX_ISOLATED = "guardrail_max_isolated"
    CEILING_BELOW_FLOOR = "ceiling_below_floor"
    GROUP_NOT_IN_SPEC = "group_not_in_spec"
    GROUP_NOT_OBSERVED = "group_not_observed"
    UNKNOWN_LIFECYCLE_STATE = "unknown_lifecycle_state"
    UNKNOWN_INSTANCE = "unknown_instance"
    DEMAND_UNKNOWN = "demand_unknown"
    LAUNCHES_FAILING = "launches_failing"
    COLD_START_EXCEEDED = "cold_start_exceeded"  # a launch served only past cold_start_s and the grace
    GROUP_DISABLED = "group_disabled"
    # added by the service, not the policy: a metric source answered a read and warned of something (e.g.
    # Prometheus' `warnings`); the data was used
    METRIC_SOURCE_WARNING = "metric_source_warning"


class StepAction(StrEnum):
    """What the service does for an incident (issue 6's workflow)."""

    ACKNOWLEDGE = "acknowledge"  # notify a human channel; record the acknowledgment
    SURGE = "surge"  # the group's target already includes the replacement; informational
    WAIT = "wait"  # blocked (guardrail, breaker, replacement not yet InService)
    ENTER_STANDBY = "enter_standby"  # ESS EnterStandby: no new traffic
    DRAIN = "drain"  # wait for in-flight requests to finish
    REBOOT = "reboot"  # ECS RebootInstance
    EXIT_STANDBY = "exit_standby"  # ESS ExitStandby: back in service
    REMOVE = "remove"  # ESS RemoveInstances (release), DecreaseDesiredCapacity=false
    HOLD = "hold"  # keep in Standby for diagnosis until a human decides
    CLOSE = "close"


class IncidentState(StrEnum):
    DETECTED = "detected"
    ACKNOWLEDGED = "acknowledged"
    CAPACITY_PROTECTED = "capacity_protected"
    ISOLATED = "isolated"
    REMEDIATING = "remediating"
    REMEDIATED = "remediated"
    CLOSED = "closed"


PRE_ISOLATION_STATES = (IncidentState.DETECTED, IncidentState.ACKNOWLEDGED, IncidentState.CAPACITY_PROTECTED)
OPEN_STATES = PRE_ISOLATION_STATES + (
    IncidentState.ISOLATED,
    IncidentState.REMEDIATING,
    IncidentState.REMEDIATED,
)

# ---- snapshot ----------------------------------------------------------------------------------------------


class MetricSample(_Model):
    value: float
    at: AwareDatetime


class XidEvent(_Model):
    code: int
    at: AwareDatetime
    gpu: str | None = None


class SystemEvent(_Model):
    """An ECS system event (DescribeInstanceHistoryEvents), e.g. ``SystemFailure.Reboot``."""

    code: str
    cycle_status: str = "Executing"
    event_id: str | None = None
    not_before: AwareDatetime | None = None

    @property
    def active(self) -> bool:
        return self.cycle_status in ("Scheduled", "Executing", "Inquiring")


class LifecycleState(StrEnum):
    """The ESS lifecycle states we act on (their wire spelling). A snapshot keeps any other state as
    observed, as a string: it counts as unknown (``policies.observe``)."""

    IN_SERVICE = "InService"
    PROTECTED = "Protected"
    PENDING = "Pending"
    PENDING_WAIT = "Pending:Wait"
    STANDBY = "Standby"
    REMOVING = "Removing"
    REMOVING_WAIT = "Removing:Wait"
    STOPPED = "Stopped"
    STOPPING = "Stopping"


class InstanceSnapshot(_Model):
    instance_id: str
    lifecycle_state: str = Field(
        default=LifecycleState.IN_SERVICE.value,
        description="ESS: InService, Pending, Pending:Wait, Protected, Standby, Stopped, Removing, ...",
    )
    health_status: str = "Healthy"
    created_at: AwareDatetime | None = None
    zone_id: str | None = None
    metrics: dict[str, MetricSample] = Field(
        default_factory=dict, description="canonical name -> latest sample"
    )
    xids: list[XidEvent] = Field(default_factory=list, description="XID events seen since the last snapshot")
    events: list[SystemEvent] = Field(default_factory=list)


class OperatorAction(_Model):
    """A human's request (CLI or status API), passed through until it appears in the history as applied."""

    action_id: str
    kind: Literal["ack", "isolate", "release", "replace", "reset_breaker"]
    at: AwareDatetime
    instance_id: str | None = None
    incident_id: str | None = None
    reason: str = ""
    by: str = "operator"


class Notification(_Model):
    """The service notified a human channel about an incident (counts as the acknowledgment)."""

    incident_id: str
    at: AwareDatetime
    channel: str


class StepOutcome(_Model):
    """The result of a step the service actuated, keyed by the step's ``step_id``."""

    step_id: str
    ok: bool
    at: AwareDatetime
    detail: str = ""


class DemandSeries(_Model):
    """A group's demand history from the store: mean arrivals per second in consecutive ``step_s`` buckets
    starting at ``start`` (None: nothing was observed in that bucket; unknown, not zero)."""

    start: AwareDatetime
    step_s: float = Field(default=60.0, gt=0)
    rps: list[float | None] = Field(default_factory=list)


class DemandInputs(_Model):
    """What the predictive scaler needs beyond the instances' own samples, worked out by the shell."""

    history: DemandSeries | None = None
    capacity_rps: float | None = Field(
        default=None, description="requests/s one instance serves within the SLOs at the observed token mix"
    )
    capacity_source: str = ""
    prompt_tokens: float | None = None  # the token mix the capacity is for
    output_tokens: float | None = None
    recent_rps: float | None = Field(
        default=None,
        ge=0,
        description=(
            "the group's arrival rate over the last minute of readings (the agents' rates are over one scrape"
            " period): what the demand now is sized on; None: this tick's sum of the instances' rates"
        ),
    )
    week_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description=(
            "the week-ago reference's share of the seasonal forecast for this hour (policies.forecast."
            "week_share), worked out once an hour by the shell; None: the policy works it out"
        ),
    )
    in_service: list[tuple[float, float]] = Field(
        default_factory=list,
        description=(
            "(requests/s per instance, mean seconds a request is in service) from the sizing engine at the"
            " mix, rising load: by Little's law what an instance's running requests should be at its rate"
        ),
    )


class GroupSnapshot(_Model):
    name: str
    scaling_group_id: str | None = None
    desired_capacity: int | None = Field(
        default=None, ge=0, description="ESS DesiredCapacity (counts Standby)"
    )
    activity_in_progress: bool = False
    paused: bool = False
    ess_state: str | None = Field(
        default=None,
        description="the ESS group's LifecycleState when it is not Active (Inactive: disabled in ESS, or "
        "Deleting): ESS refuses every scaling write, so none is made",
    )
    blind: bool = Field(
        default=False,
        description="ESS unreadable: instances are the last list read; isolation detects and notifies only, "
        "nothing scales",
    )
    events_unread: bool = Field(
        default=False,
        description="ECS health and system events could not be read this tick: an event not listed may "
        "still be there",
    )
    instances: list[InstanceSnapshot] = Field(default_factory=list)
    group_metrics: dict[str, MetricSample] = Field(
        default_factory=dict, description="group metrics measured directly (override the aggregates)"
    )
    notifications: list[Notification] = Field(default_factory=list)
    operator_actions: list[OperatorAction] = Field(default_factory=list)
    outcomes: list[StepOutcome] = Field(default_factory=list)
    demand: DemandInputs | None = None

    @model_validator(mode="after")
    def _instances_once(self) -> GroupSnapshot:
        # an instance listed twice would be counted twice: capacity, aggregates and incidents all go wrong
        counts = Counter(i.instance_id for i in self.instances)
        twice = sorted(i for i, n in counts.items() if n > 1)
        if twice:
            raise ValueError(f"instances listed more than once: {', '.join(twice)}")
        return self


class Snapshot(_Model):
    taken_at: AwareDatetime
    groups: list[GroupSnapshot] = Field(default_factory=list)

    def group(self, name: str) -> GroupSnapshot | None:
        return next((g for g in self.groups if g.name == name), None)


# ---- history -----------------------------------------------------------------------------------------------


class Track(_Model):
    """A condition that has held since ``since``: ``count`` samples, the last one at ``last_at``."""

    since: AwareDatetime
    last_at: AwareDatetime
    count: int = 1


class Recommendation(_Model):
    at: AwareDatetime
    serving: int


class EpisodeRecord(_Model):
    """One episode of a repeat rule's condition (``key``: the rule's track key for the instance), begun at
    ``at`` after the condition had been seen clear: an engine that went down after serving."""

    key: str
    instance_id: str
    at: AwareDatetime


class LaunchRecord(_Model):
    """How one instance's launch went: ``served`` once its vLLM reported up, not once it was still down
    past the cold start plus a grace (``policies/scaling/launches.py``)."""

    instance_id: str
    launched_at: AwareDatetime
    served: bool
    judged_at: AwareDatetime
    late_at: AwareDatetime | None = Field(
        default=None, description="judged failed, then served at this time: slow to load, not dead"
    )
    slow: bool = Field(
        default=False,
        description="served past cold_start_s and the grace while launches here were known to be slow: as "
        "much a sign of it as a late launch",
    )

    @property
    def shows_slow(self) -> bool:
        """Whether it is evidence that launches here are slow: seen still loading past the cold start and the
        grace (judged failed then served late, or served past them while a slow load was learned). A launch
        merely judged late (the service, or the metrics, were out while it loaded) is not."""
        return self.served and (self.late_at is not None or self.slow)

    @property
    def load_s(self) -> float | None:
        """How long it took from the order to serving, as the service saw it (its first reading of the engine
        up, or ``late_at``); None while it has not served."""
        if not self.served:
            return None
        return ((self.late_at or self.judged_at) - self.launched_at).total_seconds()


class XidRecord(_Model):
    """One XID occurrence, first seen at ``at`` and reported until ``last_at`` (a "last XID" is sticky)."""

    instance_id: str
    code: int
    at: AwareDatetime
    last_at: AwareDatetime | None = None


class TimelineEntry(_Model):
    at: AwareDatetime
    state: IncidentState
    reason: ReasonCode
    detail: str = ""


class Incident(_Model):
    incident_id: str
    group: str
    instance_id: str
    rule: str
    kind: str = Field(description="metric, throttle, xid, event, outlier, absent or manual")
    action: Literal["reboot", "replace", "hold"]
    manual: bool = False
    state: IncidentState = IncidentState.DETECTED
    detected_at: AwareDatetime
    respond_by: AwareDatetime
    isolate_by: AwareDatetime
    acknowledged_at: AwareDatetime | None = None
    acknowledged_by: str | None = None
    due_at: AwareDatetime | None = Field(
        default=None,
        description="when its isolation is due, if not at detection: a system event ECS scheduled further "
        "ahead than isolate_within waits until its NotBefore less isolate_within (isolate_by: its NotBefore)",
    )
    admitted_at: AwareDatetime | None = None
    surge_requested_at: AwareDatetime | None = None
    capacity_protected_at: AwareDatetime | None = None
    standby_requested_at: AwareDatetime | None = None
    isolated_at: AwareDatetime | None = None
    drained_at: AwareDatetime | None = None
    reboot_requested_at: AwareDatetime | None = None
    reboot_attempts: int = 0
    rebooted_at: AwareDatetime | None = None
    exit_requested_at: AwareDatetime | None = None
    remove_requested_at: AwareDatetime | None = None
    remediated_at: AwareDatetime | None = None
    closed_at: AwareDatetime | None = None
    # a held incident (never admitted): since when its condition has read clear on fresh evidence
    clear_since: AwareDatetime | None = None
    unserved: bool = Field(
        default=False,
        description="found on a launch that had not served: neither the breaker nor max_isolated counts it",
    )
    served_nothing: bool = Field(
        default=False,
        description="its node served nothing (vLLM down, no traffic) when admitted: max_isolated omits it",
    )
    outcome: str | None = None
    failures: dict[str, int] = Field(default_factory=dict, description="failed attempts per step action")
    evidence: dict[str, Scalar] = Field(default_factory=dict)
    timeline: list[TimelineEntry] = Field(default_factory=list)

    @property
    def open(self) -> bool:
        return self.state != IncidentState.CLOSED

    @property
    def isolate_from(self) -> datetime:
        """When its isolate clock started: at detection, or when its isolation fell due (``due_at``)."""
        due = self.due_at
        return due if due is not None and due > self.detected_at else self.detected_at

    def scheduled_ahead(self, now: datetime) -> bool:
        """Whether its isolation is not due yet (a system event ECS scheduled ahead: ``due_at``)."""
        return self.due_at is not None and now < self.due_at

    @property
    def took_no_capacity(self) -> bool:
        """Out of traffic, its node takes no serving capacity with it (a launch that never served, or a node
        that served nothing when admitted): ``max_isolated`` does not count it. Admission judges it again
        every tick: once its node serves (or runs its engine in Standby) both flags are cleared: it counts."""
        return self.unserved or self.served_nothing


class BreakerState(_Model):
    open: bool = False
    opened_at: AwareDatetime | None = None
    reason: str = ""


class PendingForecast(_Model):
    """A forecast made earlier for ``due``: judged against the demand observed then."""

    due: AwareDatetime
    mean_rps: float
    upper_rps: float


class ForecastState(_Model):
    """The forecast's own record: what it predicted, how wrong it was, and the online capacity correction."""

    pending: list[PendingForecast] = Field(default_factory=list)
    ratios: list[float] = Field(
        default_factory=list, description="actual / predicted mean of recent judged forecasts (newest last)"
    )
    covered: list[bool] = Field(default_factory=list, description="actual <= upper, same forecasts")
    correction: float = Field(default=1.0, description="capacity per instance x this (bounded by the spec)")
    speed: float = Field(
        default=1.0,
        gt=0,
        description=(
            "the engines' speed against the model's, from running requests against Little's law (a factor of"
            " the correction)"
        ),
    )
    running_expected: float = Field(
        default=0.0, ge=0, description="moving mean of the running requests the model expects at the rates"
    )
    running_observed: float = Field(
        default=0.0, ge=0, description="moving mean of those observed, same ticks"
    )
    speed_at: AwareDatetime | None = None
    engine: str | None = Field(
        default=None,
        description=(
            "what the correction was learned on (model, instance type, TP, max_model_len, the vLLM settings"
            " the predictive section sets, or the measured capacity): another starts it again from the model"
        ),
    )
    targets: list[Recommendation] = Field(
        default_factory=list, description="the scale-in window's predictive targets (scale-in: to their max)"
    )
    last_at: AwareDatetime | None = None


class GroupHistory(_Model):
    last_target: int | None = Field(
        default=None, description="the healthy serving target last decided (without isolation surges)"
    )
    last_scale_at: AwareDatetime | None = None
    last_scale_in_at: AwareDatetime | None = None
    recommendations: list[Recommendation] = Field(default_factory=list)
    known_since: AwareDatetime | None = Field(
        default=None,
        description=(
            "start of the current unbroken run of fully known recommendations; scale-in waits until it is at "
            "least one scale-in window old, so a fresh start or a metrics outage never scales in on a "
            "window that saw only a moment"
        ),
    )
    ess_state: str | None = Field(
        default=None, description="the ESS group's state at the last decision when not Active (no writes)"
    )
    tracks: dict[str, Track] = Field(default_factory=dict)
    panic_until: AwareDatetime | None = None
    incidents: list[Incident] = Field(default_factory=list)
    xids: list[XidRecord] = Field(default_factory=list)
    episodes: list[EpisodeRecord] = Field(default_factory=list)
    clear_at: dict[str, AwareDatetime] = Field(
        default_factory=dict, description="per repeat rule and instance: its last fresh sample not breaching"
    )
    breaker: BreakerState = Field(default_factory=BreakerState)
    applied_operator_actions: list[str] = Field(default_factory=list)
    seen_outcomes: list[str] = Field(default_factory=list)
    forecast: ForecastState = Field(default_factory=ForecastState)
    launches: list[LaunchRecord] = Field(
        default_factory=list, description="the latest launches judged, oldest first (at most 20)"
    )


class History(_Model):
    version: int = 1
    updated_at: AwareDatetime | None = None
    groups: dict[str, GroupHistory] = Field(default_factory=dict)


# ---- plan --------------------------------------------------------------------------------------------------


class Reason(_Model):
    code: ReasonCode
    detail: str = ""
    inputs: dict[str, Scalar] = Field(default_factory=dict)


class PlanWarning(_Model):
    code: WarningCode
    group: str
    detail: str = ""
    instance_id: str | None = None
    metric: str | None = None
    incident_id: str | None = None


class IsolationStep(_Model):
    step_id: str = Field(
        description="stable per incident, action and attempt: derive the ClientToken from it"
    )
    incident_id: str
    instance_id: str
    action: StepAction
    reason: ReasonCode
    detail: str = ""
    inputs: dict[str, Scalar] = Field(default_factory=dict)


class GroupPlan(_Model):
    group: str
    scaling_group_id: str | None = None
    in_service: int = 0
    pending: int = 0
    standby: int = 0
    current_serving: int = Field(0, description="InService + Pending + ordered but not yet launched")
    serving_target: int = Field(0, description="InService + Pending wanted")
    target_capacity: int = Field(0, description="ESS DesiredCapacity wanted: serving_target + Standby")
    desired_capacity: int | None = Field(
        None, description="target_capacity when a write is needed, else None"
    )
    direction: Literal["up", "down", "none"] = "none"
    reason: ReasonCode = ReasonCode.HOLD
    reasons: list[Reason] = Field(default_factory=list)
    floor: int = 0
    floor_source: str = Field(
        "",
        description="what sets the floor: min_size, warm_floor or schedule:<name>, and the calendar's day "
        "when a holiday or makeup workday is why (min_size on holiday 2027-02-11 (as Sunday))",
    )
    ceiling: int = 0
    ceiling_source: str = Field(
        "",
        description="what sets the ceiling: max_size or schedule:<name>, and the calendar's day when a "
        "holiday or makeup workday is why (schedule:weekend on holiday 2027-02-11 (as Sunday))",
    )
    active_schedules: list[str] = Field(default_factory=list)
    scale_in_order: list[str] = Field(default_factory=list, description="instances to remove first")
    scale_in_suspects: int = Field(
        0, description="how many of scale_in_order are suspects (open incidents, unhealthy): removed by name"
    )
    steps: list[IsolationStep] = Field(default_factory=list)
    incidents: list[Incident] = Field(default_factory=list, description="open incidents with their timers")
    warnings: list[PlanWarning] = Field(default_factory=list)
    predictive: dict[str, Scalar] = Field(
        default_factory=dict,
        description="the predictive scaler's inputs (demand_rps, forecast_rps, forecast_upper_rps, "
        "capacity_per_instance_rps, predictive_target, ...); empty when predictive is off",
    )


class Plan(_Model):
    at: AwareDatetime
    groups: list[GroupPlan] = Field(default_factory=list)
    warnings: list[PlanWarning] = Field(default_factory=list)
    history: History = Field(default_factory=History)

    def group(self, name: str) -> GroupPlan | None:
        return next((g for g in self.groups if g.group == name), None)
