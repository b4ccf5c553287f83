"""What every part of the fake ESS shares: its limits and closed sets, the resource records (groups,
instances, activities, rules, tasks, alarms, hooks), the error builders, and ``EssBase``: the backend's state,
lookups and ClientToken idempotence. The mixins beside it (groups, activities, ...) build on this module only,
so the split makes no import circle; ``models.EssBackend`` composes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleet.testing.core.errors import AliyunError, invalid, not_found
from fleet.testing.core.params import parse_float, parse_int
from fleet.testing.core.timeutil import iso_min, iso_s

if TYPE_CHECKING:
    from fleet.testing.cloud import FakeCloud
    from fleet.testing.ecs.models import Instance

SCALING_POLICIES = ("recycle", "release", "forcerelease", "forcerecycle")
ADJUSTMENT_TYPES = {  # type -> allowed AdjustmentValue range (aliyun-api.md section 1, CreateScalingRule)
    "QuantityChangeInCapacity": (-1000, 1000),
    "PercentChangeInCapacity": (-100, 10000),
    "TotalCapacity": (0, 2000),
}
RULE_TYPES = ("SimpleScalingRule", "StepScalingRule", "TargetTrackingScalingRule", "PredictiveScalingRule")
# States that count toward desired capacity (stable + on the way in).
COUNTED_STATES = frozenset({"Pending", "Pending:Wait", "InService", "Protected", "Standby"})
STABLE_STATES = frozenset({"InService", "Protected", "Standby"})
REMOVING_STATES = frozenset({"Removing", "Removing:Wait"})
CAPACITY_FIELDS = {
    "InService": "ActiveCapacity",
    "Pending": "PendingCapacity",
    "Pending:Wait": "PendingWaitCapacity",
    "Removing": "RemovingCapacity",
    "Removing:Wait": "RemovingWaitCapacity",
    "Protected": "ProtectedCapacity",
    "Standby": "StandbyCapacity",
    "Stopped": "StoppedCapacity",
}
# ESS system alarm metrics the fake evaluates -> acs_ecs_dashboard series (aliyun-api.md sections 1, 2.1).
SYSTEM_ALARM_METRICS = {
    "GpuUtilizationAgent": "instance_gpu_gpu_usedutilization",
    "GpuMemoryUtilizationAgent": "instance_gpu_memory_usedutilization",
    "GpuMemoryFreeUtilizationAgent": "instance_gpu_memory_freeutilization",
    "CpuUtilizationAgent": "cpu_total",
    "MemoryUtilization": "memory_usedutilization",
}
ALARM_COMPARISONS = {
    ">=": lambda v, t: v >= t,
    "<=": lambda v, t: v <= t,
    ">": lambda v, t: v > t,
    "<": lambda v, t: v < t,
}
MAX_LIFECYCLE_HOOKS = 6  # per group (aliyun-api.md section 1.2, Limits)
# Scheduled tasks an account may hold in one region: DescribeLimitation's MaxNumberOfScheduledTasks (70 in its
# documentation; raised through Quota Center). ``POST /_fake/limits`` sets it.
DEFAULT_SCHEDULED_TASK_QUOTA = 70
MAX_ACTIVITIES_PER_GROUP = 2000  # the fake's own bound on kept history, not an ESS limit
MAX_CONVERGE_ROUNDS = 4  # a reconcile that needs more steps than this waits for the next event
MAX_CLIENT_TOKENS = 100_000  # likewise: the oldest tokens are forgotten first


def _in_progress(group_id: str) -> AliyunError:
    return AliyunError(
        "ScalingActivityInProgress",
        f"You cannot delete a scaling group or launch a new scaling activity while there is a "
        f"scaling activity in progress for the specified scaling group ({group_id}).",
        400,
    )


def _bad_status(group_id: str, state: str) -> AliyunError:
    return AliyunError(
        "IncorrectScalingGroupStatus",
        f"The current status of the specified scaling group ({group_id}: {state}) does not "
        "support this action.",
        400,
    )


@dataclass
class ScalingConfiguration:
    config_id: str
    group_id: str
    name: str
    instance_types: list[str]
    image_id: str
    created_s: float
    lifecycle_state: str = "Inactive"
    extra: dict[str, str] = field(default_factory=dict)
    spot_strategy: str = "NoSpot"
    spot_price_limits: dict[str, float] = field(default_factory=dict)  # instance type -> CNY/h bid

    def as_api(self) -> dict[str, Any]:
        return {
            "SpotStrategy": self.spot_strategy,
            "SpotPriceLimits": [
                {"InstanceType": t, "PriceLimit": limit} for t, limit in self.spot_price_limits.items()
            ],
            "ScalingConfigurationId": self.config_id,
            "ScalingConfigurationName": self.name,
            "ScalingGroupId": self.group_id,
            "InstanceType": self.instance_types[0],
            "InstanceTypes": list(self.instance_types),
            "ImageId": self.image_id,
            "LifecycleState": self.lifecycle_state,
            "CreationTime": iso_min(self.created_s),
            **{
                k: v
                for k, v in self.extra.items()
                if k
                in ("SecurityGroupId", "InstanceName", "HostName", "UserData", "RamRoleName", "KeyPairName")
            },
        }


@dataclass
class ScalingGroup:
    group_id: str
    name: str
    region_id: str
    min_size: int
    max_size: int
    desired_capacity: int | None
    default_cooldown_s: int
    scaling_policy: str
    removal_policies: list[str]
    vswitch_ids: list[str]
    created_s: float
    lifecycle_state: str = "Inactive"
    active_config_id: str | None = None
    health_check_types: list[str] = field(default_factory=lambda: ["ECS"])
    deletion_protection: bool = False
    suspended_processes: list[str] = field(default_factory=list)
    multi_az_policy: str = "PRIORITY"
    stop_instance_timeout_s: int | None = None
    max_instance_lifetime_s: int | None = None
    tags: list[dict[str, str]] = field(default_factory=list)
    instance_ids: dict[str, None] = field(default_factory=dict)  # insertion-ordered set
    cooldown_until_s: float = 0.0
    modified_s: float = 0.0
    next_zone: int = 0
    # Spot mix (COST_OPTIMIZED groups, aliyun ESS CreateScalingGroup): on-demand base, the on-demand share
    # above it, how many of the cheapest types to spread spot over, replace-before-reclaim, and on-demand
    # when spot cannot be had.
    on_demand_base_capacity: int = 0
    on_demand_percentage_above_base: int = 100
    spot_instance_pools: int = 2
    spot_instance_remedy: bool = False
    compensate_with_on_demand: bool = False
    retry_not_before_s: float = 0.0  # after a stock failure, the reconcile waits until then
    # Created with DesiredCapacity: only such a group may set it again after DisableDesiredCapacity
    # (aliyun-api.md section 1.2, "enabled only at CreateScalingGroup"; the SDK's ModifyScalingGroup notes
    # that re-enabling needs DesiredCapacity again).
    created_with_desired: bool = False

    @property
    def desired_enabled(self) -> bool:
        return self.desired_capacity is not None

    def zone_for_next(self) -> str:
        # One zone per vSwitch, round-robin (BALANCE-like); the fake names zones after the region.
        count = max(1, len(self.vswitch_ids))
        letter = "abcdefgh"[self.next_zone % count]
        self.next_zone += 1
        return f"{self.region_id}-{letter}"


@dataclass
class ScalingInstance:
    instance_id: str
    group_id: str
    lifecycle_state: str
    creation_type: str
    created_s: float
    zone_id: str
    private_ip: str
    config_id: str | None
    entrusted: bool = False
    health_status: str = "Healthy"
    activity_id: str | None = None
    booted: bool = False
    waiting_tokens: set[str] = field(default_factory=set)
    recycle_on_removal: bool = False
    weight: int = 50
    spot_strategy: str = "NoSpot"
    awaiting_stop: bool = False  # recycled: Removing until ECS reports Stopped (StopCharging)
    restart_when_stopped: bool = False  # a scale-out claimed it while it was still stopping
    reclaimed: bool = False  # spot instance replaced ahead of its release (SpotInstanceRemedy)

    def as_api(self) -> dict[str, Any]:
        return {
            "InstanceId": self.instance_id,
            "ScalingGroupId": self.group_id,
            "ScalingConfigurationId": self.config_id,
            "LifecycleState": self.lifecycle_state,
            "HealthStatus": self.health_status,
            "CreationType": self.creation_type,
            "Entrusted": self.entrusted,
            "CreatedTime": iso_s(self.created_s),
            "CreationTime": iso_s(self.created_s),
            "ZoneId": self.zone_id,
            "PrivateIpAddress": self.private_ip,
            "ScalingActivityId": self.activity_id,
            "LoadBalancerWeight": 0 if self.lifecycle_state == "Standby" else self.weight,
            "WarmupState": "NoNeedWarmup",
            "WeightedCapacity": 1,
            "SpotStrategy": self.spot_strategy,
        }


@dataclass
class ScalingActivity:
    activity_id: str
    group_id: str
    cause: str
    description: str
    start_s: float
    trigger_source_type: str = "APIs"
    status_code: str = "InProgress"
    status_message: str = ""
    progress: int = 0
    end_s: float | None = None
    created: list[str] = field(default_factory=list)
    destroyed: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    attached: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    pending: set[str] = field(default_factory=set)
    total_capacity: int | None = None
    error_code: str = ""
    error_message: str = ""
    activity_type: str = "CapacityChange"
    standby_move: bool = False  # EnterStandby / ExitStandby: instances change state, capacity does not
    cooldown_s: int | None = None  # a simple rule's own Cooldown overrides the group's (section 1.1)
    shortfall: int = 0  # instances asked for that could not be created (no stock)
    error_messages: list[dict[str, Any]] = field(default_factory=list)

    def as_api(self) -> dict[str, Any]:
        return {
            "ScalingActivityId": self.activity_id,
            "ScalingGroupId": self.group_id,
            "StatusCode": self.status_code,
            "StatusMessage": self.status_message,
            "Progress": self.progress,
            "Cause": self.cause,
            "Description": self.description,
            "StartTime": iso_s(self.start_s),
            "EndTime": iso_s(self.end_s),
            "CreatedCapacity": len(self.created),
            "CreatedInstances": list(self.created),
            "DestroyedCapacity": len(self.destroyed),
            "DestroyedInstances": list(self.destroyed),
            "StartedCapacity": len(self.started),
            "StartedInstances": list(self.started),
            "StoppedCapacity": len(self.stopped),
            "StoppedInstances": list(self.stopped),
            "AttachedCapacity": str(len(self.attached)),
            "AutoCreatedCapacity": str(len(self.created)),
            "TotalCapacity": None if self.total_capacity is None else str(self.total_capacity),
            "ScalingInstanceNumber": len(self.created)
            + len(self.started)
            + len(self.destroyed)
            + len(self.stopped)
            + len(self.attached),
            "ErrorCode": self.error_code,
            "ErrorMessage": self.error_message,
            "ErrorMessages": [dict(e) for e in self.error_messages],
            "TriggerSourceType": self.trigger_source_type,
        }


@dataclass
class ScalingRule:
    rule_id: str
    ari: str
    group_id: str
    name: str
    rule_type: str
    adjustment_type: str | None
    adjustment_value: int | None
    min_adjustment_magnitude: int | None
    cooldown_s: int | None
    step_adjustments: list[dict[str, float | int | None]]
    metric_name: str | None = None
    target_value: float | None = None
    disable_scale_in: bool = False
    estimated_instance_warmup_s: int | None = None

    def as_api(self) -> dict[str, Any]:
        return {
            "ScalingRuleId": self.rule_id,
            "ScalingRuleAri": self.ari,
            "ScalingGroupId": self.group_id,
            "ScalingRuleName": self.name,
            "ScalingRuleType": self.rule_type,
            "AdjustmentType": self.adjustment_type,
            "AdjustmentValue": self.adjustment_value,
            "MinAdjustmentMagnitude": self.min_adjustment_magnitude,
            "Cooldown": self.cooldown_s,
            "MetricName": self.metric_name,
            "TargetValue": self.target_value,
            "DisableScaleIn": self.disable_scale_in,
            "EstimatedInstanceWarmup": self.estimated_instance_warmup_s,
            "StepAdjustments": [
                {
                    "MetricIntervalLowerBound": s.get("lower"),
                    "MetricIntervalUpperBound": s.get("upper"),
                    "ScalingAdjustment": s.get("adjustment"),
                }
                for s in self.step_adjustments
            ],
        }


@dataclass
class ScheduledTask:
    task_id: str
    name: str
    region_id: str
    launch_s: float
    group_id: str | None
    scheduled_action: str | None
    min_value: int | None
    max_value: int | None
    desired_capacity: int | None
    recurrence_type: str | None
    recurrence_value: str | None
    recurrence_end_s: float | None
    launch_expiration_s: int = 600
    enabled: bool = True
    description: str = ""
    version: int = 0
    next_fire_s: float | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    def as_api(self) -> dict[str, Any]:
        return {
            "ScheduledTaskId": self.task_id,
            "ScheduledTaskName": self.name,
            "Description": self.description,
            "ScalingGroupId": self.group_id,
            "ScheduledAction": self.scheduled_action,
            "LaunchTime": iso_min(self.launch_s),
            "RecurrenceType": self.recurrence_type,
            "RecurrenceValue": self.recurrence_value,
            "RecurrenceEndTime": iso_min(self.recurrence_end_s),
            "LaunchExpirationTime": self.launch_expiration_s,
            "TaskEnabled": self.enabled,
            "MinValue": self.min_value,
            "MaxValue": self.max_value,
            "DesiredCapacity": self.desired_capacity,
        }


@dataclass
class Alarm:
    alarm_id: str
    group_id: str
    name: str
    description: str
    metric_type: str
    metric_name: str
    statistics: str
    comparison_operator: str
    threshold: float
    evaluation_count: int
    period_s: int
    alarm_actions: list[str]
    dimensions: list[dict[str, str]]
    group_id_cms: str | None = None
    effective: str | None = None
    enabled: bool = True
    state: str = "INSUFFICIENT_DATA"
    breaches: int = 0
    last_error: str | None = None

    def as_api(self) -> dict[str, Any]:
        return {
            "AlarmTaskId": self.alarm_id,
            "ScalingGroupId": self.group_id,
            "Name": self.name,
            "Description": self.description,
            "MetricType": self.metric_type,
            "MetricName": self.metric_name,
            "Statistics": self.statistics,
            "ComparisonOperator": self.comparison_operator,
            "Threshold": self.threshold,
            "EvaluationCount": self.evaluation_count,
            "Period": self.period_s,
            "AlarmActions": list(self.alarm_actions),
            "Dimensions": list(self.dimensions),
            "Effective": self.effective,
            "Enable": self.enabled,
            "State": self.state,
        }


@dataclass
class LifecycleHook:
    hook_id: str
    group_id: str
    name: str
    transition: str
    default_result: str
    heartbeat_timeout_s: int
    notification_arn: str | None
    notification_metadata: str | None

    def as_api(self) -> dict[str, Any]:
        return {
            "LifecycleHookId": self.hook_id,
            "ScalingGroupId": self.group_id,
            "LifecycleHookName": self.name,
            "LifecycleTransition": self.transition,
            "DefaultResult": self.default_result,
            "HeartbeatTimeout": self.heartbeat_timeout_s,
            "NotificationArn": self.notification_arn,
            "NotificationMetadata": self.notification_metadata,
            "LifecycleHookStatus": "Active",
        }


@dataclass
class LifecycleAction:
    token: str
    hook_id: str
    group_id: str
    activity_id: str
    transition: str
    instance_ids: list[str]
    deadline_s: float
    status: str = "Pending"
    result: str | None = None

    def as_api(self) -> dict[str, Any]:
        return {
            "LifecycleActionToken": self.token,
            "LifecycleHookId": self.hook_id,
            "InstanceIds": list(self.instance_ids),
            "LifecycleActionStatus": self.status,
            "LifecycleActionResult": self.result,
        }


class EssBase:
    """The fake ESS state of one cloud, with the lookups and idempotence every mixin uses."""

    def __init__(self, cloud: FakeCloud) -> None:
        self.cloud = cloud
        self.groups: dict[str, ScalingGroup] = {}
        self.configurations: dict[str, ScalingConfiguration] = {}
        self.instances: dict[str, ScalingInstance] = {}
        self.activities: dict[str, ScalingActivity] = {}
        self.group_activities: dict[str, list[str]] = {}
        self.in_progress: dict[str, set[str]] = {}  # group id -> ids of its InProgress activities
        self._converging: set[str] = set()
        self._converge_again: set[str] = set()
        self.rules: dict[str, ScalingRule] = {}
        self.rules_by_ari: dict[str, str] = {}
        self.scheduled_tasks: dict[str, ScheduledTask] = {}
        self.scheduled_task_quota = DEFAULT_SCHEDULED_TASK_QUOTA  # per region
        self.alarms: dict[str, Alarm] = {}
        self.hooks: dict[str, LifecycleHook] = {}
        self.lifecycle_actions: dict[str, LifecycleAction] = {}
        self.client_tokens: dict[str, tuple[Any, dict[str, Any]]] = {}
        cloud.ecs.add_listener(self._on_ecs_status)
        cloud.ecs.add_reclaim_listener(self._on_spot_reclaim)

    if TYPE_CHECKING:
        # Steps one mixin takes through another; EssBackend composes them all. Declared here for the type
        # checker only (at run time the composed class has the real ones).
        def _on_ecs_status(self, ecs_inst: Instance, previous: str, at: float) -> None: ...

        def _on_spot_reclaim(self, ecs_inst: Instance, at: float) -> None: ...

        def _new_activity(
            self, group: ScalingGroup, cause: str, description: str = "", trigger: str = "APIs"
        ) -> ScalingActivity: ...

        def _finish_if_done(self, activity: ScalingActivity, at: float) -> None: ...

        def _converge(self, group: ScalingGroup, cause: str) -> None: ...

        def _apply_target(self, group: ScalingGroup, activity: ScalingActivity, target: int) -> None: ...

        def _scale_in(
            self,
            group: ScalingGroup,
            activity: ScalingActivity,
            victims: list[ScalingInstance],
            recycle: bool,
        ) -> None: ...

        def _begin_removal(self, inst: ScalingInstance, at: float) -> None: ...

        def _drop_instance(
            self,
            group: ScalingGroup,
            inst: ScalingInstance,
            *,
            release: bool,
            activity: ScalingActivity | None = None,
        ) -> None: ...

        def _maybe_in_service(self, inst: ScalingInstance, at: float) -> None: ...

        def modify_scaling_group(
            self,
            group_id: str,
            *,
            min_size: int | None = None,
            max_size: int | None = None,
            desired_capacity: int | None = None,
            disable_desired_capacity: bool | None = None,
            default_cooldown_s: int | None = None,
            scaling_policy: str | None = None,
            removal_policies: list[str] | None = None,
            name: str | None = None,
            active_config_id: str | None = None,
            deletion_protection: bool | None = None,
            health_check_types: list[str] | None = None,
            vswitch_ids: list[str] | None = None,
            stop_instance_timeout_s: int | None = None,
            max_instance_lifetime_s: int | None = None,
            cause: str | None = None,
        ) -> None: ...

        def attach_instances(
            self, group_id: str, instance_ids: list[str], *, entrusted: bool, ignore_invalid: bool
        ) -> ScalingActivity: ...

        def create_lifecycle_hook(
            self,
            group_id: str,
            name: str | None,
            transition: str | None,
            default_result: str | None,
            heartbeat_timeout_s: int | None,
            notification_arn: str | None,
            notification_metadata: str | None,
        ) -> LifecycleHook: ...

        def _open_lifecycle_action(
            self, hook: LifecycleHook, activity: ScalingActivity, instance_ids: list[str]
        ) -> None: ...

        def _discard_from_action(self, token: str, instance_id: str) -> None: ...

        def _require_active(self, group: ScalingGroup) -> None: ...

        def execute_scaling_rule(
            self,
            ari: str,
            *,
            breach_threshold: float | None,
            metric_value: float | None,
            trigger: str = "APIs",
        ) -> ScalingActivity: ...

    # ==== lookups ===========================================================================================
    def group(self, group_id: str | None) -> ScalingGroup:
        group = self.groups.get(group_id or "")
        if group is None:
            raise not_found("InvalidScalingGroupId.NotFound", f"scaling group {group_id!r}")
        return group

    def group_instances(self, group: ScalingGroup) -> list[ScalingInstance]:
        return [self.instances[i] for i in group.instance_ids]

    def _counted(self, group: ScalingGroup) -> list[ScalingInstance]:
        return [i for i in self.group_instances(group) if i.lifecycle_state in COUNTED_STATES]

    def _stable_count(self, group: ScalingGroup) -> int:
        return sum(1 for i in self.group_instances(group) if i.lifecycle_state in STABLE_STATES)

    def _toward_max(self, group: ScalingGroup) -> int:
        return sum(1 for i in self.group_instances(group) if i.lifecycle_state not in REMOVING_STATES)

    def _activity_in_progress(self, group: ScalingGroup) -> bool:
        return bool(self.in_progress.get(group.group_id))

    def serving_instance_ids(self, group_id: str) -> list[str]:
        """Instances that take traffic: InService and Protected (Standby has weight 0)."""
        group = self.group(group_id)
        return [
            i.instance_id
            for i in self.group_instances(group)
            if i.lifecycle_state in ("InService", "Protected")
        ]

    def capacities(self, group: ScalingGroup) -> dict[str, int]:
        counts = dict.fromkeys(CAPACITY_FIELDS.values(), 0)
        for inst in self.group_instances(group):
            key = CAPACITY_FIELDS.get(inst.lifecycle_state)
            if key is not None:
                counts[key] += 1
        counts["TotalCapacity"] = sum(counts.values())
        return counts

    # ==== idempotence =======================================================================================
    def idempotent(self, token: str | None, signature: Any, run: Any) -> dict[str, Any]:
        """Run ``run()`` once per ClientToken: same parameters answer the first result again."""
        if not token:
            return run()
        if len(token) > 64 or not token.isascii():
            raise invalid("ClientToken must be ASCII and at most 64 characters.")
        seen = self.client_tokens.get(token)
        if seen is not None:
            if seen[0] != signature:
                raise AliyunError(
                    "IdempotentParameterMismatch",
                    "The request uses the same client token as a previous, but non-identical request.",
                    400,
                )
            return dict(seen[1])
        result = run()
        self.client_tokens[token] = (signature, dict(result))
        if len(self.client_tokens) > MAX_CLIENT_TOKENS:
            del self.client_tokens[next(iter(self.client_tokens))]
        return result


def _check_sizes(min_size: int, max_size: int, desired: int | None) -> None:
    if min_size < 0 or max_size < 0 or max_size > 2000:
        raise invalid(f"MinSize/MaxSize out of range ({min_size}/{max_size}).")
    if min_size > max_size:
        raise AliyunError(
            "InvalidParameter.Conflict",
            f"MaxSize ({max_size}) must be greater than or equal to MinSize ({min_size}).",
            400,
        )
    if desired is not None and not min_size <= desired <= max_size:
        raise AliyunError(
            "InvalidParameter.Conflict",
            f"DesiredCapacity ({desired}) must be within MinSize ({min_size}) and MaxSize ({max_size}).",
            400,
        )


def _below_min(group: ScalingGroup, removed: int) -> AliyunError:
    return AliyunError(
        "IncorrectCapacity.MinSize",
        f"Removing {removed} instance(s) would take the group below its MinSize ({group.min_size}).",
        400,
    )


def _incorrect_instance_status(inst: ScalingInstance, wanted: str) -> AliyunError:
    return AliyunError(
        "IncorrectInstanceStatus",
        f"The instance {inst.instance_id} is {inst.lifecycle_state}; this action needs {wanted}.",
        400,
    )


def _step_adjustment(rule: ScalingRule, difference: float) -> int:
    for step in rule.step_adjustments:
        lower, upper = step.get("lower"), step.get("upper")
        if (lower is None or difference >= lower) and (upper is None or difference < upper):
            return int(step.get("adjustment") or 0)
    raise AliyunError(
        "InvalidStepAdjustments.NoStepFound", f"No step matches the metric difference {difference}.", 400
    )


def _opt_int(value: Any, name: str) -> int | None:
    """An optional integer of a repeated parameter (``StepAdjustments.N.ScalingAdjustment``), strict as every
    other integer: a fraction was truncated ("1.5" read as 1) and junk answered with a 500."""
    return None if value is None or value == "" else parse_int(str(value), name)


def _opt_float(value: Any, name: str) -> float | None:
    """An optional finite number of a repeated parameter, or ``InvalidParameter``."""
    return None if value is None or value == "" else parse_float(value, name)
