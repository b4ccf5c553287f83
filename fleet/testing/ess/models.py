"""ESS state and semantics.

What the fake models (aliyun-api.md section 1):
- A new group is Inactive; EnableScalingGroup activates it with a scaling configuration and scales it to
  MinSize (or DesiredCapacity).
- Scale-out creates ECS instances (Pending) that become InService when ECS reports them Running,
  ``boot_seconds`` later on the fake's clock, and once every SCALE_OUT lifecycle hook has been completed
  (``Pending:Wait``).
- Scale-in moves instances to Removing (``Removing:Wait`` under SCALE_IN hooks); ``removal_seconds`` later
  they are released, or, in economical mode (ScalingPolicy ``recycle``), stopped and kept as ``Stopped``.
  Scale-out starts Stopped instances first. Stopped instances count toward MaxSize.
- Groups without desired capacity run one activity at a time (``ScalingActivityInProgress``); groups with it
  run activities in parallel and reconcile towards DesiredCapacity. Standby and Protected instances count as
  stable and are never scaled in; Standby takes no traffic (LoadBalancerWeight 0).
- ClientToken: the same token with the same parameters answers the same activity; other parameters answer
  ``IdempotentParameterMismatch``.
- Scheduled tasks fire on the fake's clock (Daily/Weekly/Monthly/Cron, UTC) and set Min/Max/Desired or
  execute a rule.
- Alarm tasks (CreateAlarm) are evaluated every Period against the CMS data of the group's instances (system
  GPU/CPU metrics) or the custom metric, and execute their rules after EvaluationCount breaches, outside
  cooldown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleet.testing.core.errors import AliyunError, invalid, not_found
from fleet.testing.core.timeutil import iso_min, iso_s
from fleet.testing.ess import schedule

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

    def as_api(self) -> dict[str, Any]:
        return {
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
    cooldown_s: int | None = None  # a simple rule's own Cooldown overrides the group's (section 1.1)

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


class EssBackend:
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
        self.alarms: dict[str, Alarm] = {}
        self.hooks: dict[str, LifecycleHook] = {}
        self.lifecycle_actions: dict[str, LifecycleAction] = {}
        self.client_tokens: dict[str, tuple[Any, dict[str, Any]]] = {}
        cloud.ecs.add_listener(self._on_ecs_status)

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

    # ==== groups ============================================================================================
    def create_scaling_group(
        self,
        *,
        region_id: str,
        name: str | None,
        min_size: int,
        max_size: int,
        desired_capacity: int | None,
        default_cooldown_s: int,
        scaling_policy: str,
        removal_policies: list[str],
        vswitch_ids: list[str],
        health_check_types: list[str],
        deletion_protection: bool,
        multi_az_policy: str | None,
        lifecycle_hooks: list[dict[str, Any]],
        tags: list[dict[str, str]],
        stop_instance_timeout_s: int | None,
        max_instance_lifetime_s: int | None,
    ) -> ScalingGroup:
        _check_sizes(min_size, max_size, desired_capacity)
        if scaling_policy not in SCALING_POLICIES:
            raise invalid(f"ScalingPolicy {scaling_policy!r} is not one of {', '.join(SCALING_POLICIES)}.")
        if not 0 <= default_cooldown_s <= 86400:
            raise invalid(f"DefaultCooldown must be within 0-86400, got {default_cooldown_s}.")
        group_id = self.cloud.new_id("asg-", 20)
        name = name or group_id
        if any(g.name == name and g.region_id == region_id for g in self.groups.values()):
            raise AliyunError(
                "InvalidScalingGroupName.Duplicate",
                f'The specified value of parameter "ScalingGroupName" ({name}) is duplicated.',
                400,
            )
        if len(lifecycle_hooks) > MAX_LIFECYCLE_HOOKS:
            raise AliyunError("QuotaExceeded.LifecycleHook", "At most 6 lifecycle hooks per group.", 400)
        now = self.cloud.now_s()
        group = ScalingGroup(
            group_id=group_id,
            name=name,
            region_id=region_id,
            min_size=min_size,
            max_size=max_size,
            desired_capacity=desired_capacity,
            default_cooldown_s=default_cooldown_s,
            scaling_policy=scaling_policy,
            removal_policies=removal_policies or ["OldestScalingConfiguration", "OldestInstance"],
            vswitch_ids=vswitch_ids,
            created_s=now,
            modified_s=now,
            health_check_types=health_check_types or ["ECS"],
            deletion_protection=deletion_protection,
            multi_az_policy=multi_az_policy or "PRIORITY",
            tags=tags,
            stop_instance_timeout_s=stop_instance_timeout_s,
            max_instance_lifetime_s=max_instance_lifetime_s,
        )
        self.groups[group_id] = group
        self.group_activities[group_id] = []
        for hook in lifecycle_hooks:
            self.create_lifecycle_hook(
                group_id,
                hook.get("LifecycleHookName"),
                hook.get("LifecycleTransition"),
                hook.get("DefaultResult"),
                _opt_int(hook.get("HeartbeatTimeout")),
                hook.get("NotificationArn"),
                hook.get("NotificationMetadata"),
            )
        return group

    def describe_scaling_groups(
        self, *, group_ids: list[str], names: list[str], name: str | None, region_id: str | None
    ) -> list[ScalingGroup]:
        groups = list(self.groups.values())
        if region_id:
            groups = [g for g in groups if g.region_id == region_id]
        if group_ids:
            wanted = set(group_ids)
            groups = [g for g in groups if g.group_id in wanted]
        if names:
            wanted = set(names)
            groups = [g for g in groups if g.name in wanted]
        if name:
            groups = [g for g in groups if g.name == name]
        return groups

    def group_as_api(self, group: ScalingGroup) -> dict[str, Any]:
        caps = self.capacities(group)
        return {
            "ScalingGroupId": group.group_id,
            "ScalingGroupName": group.name,
            "RegionId": group.region_id,
            "LifecycleState": group.lifecycle_state,
            "MinSize": group.min_size,
            "MaxSize": group.max_size,
            "DesiredCapacity": group.desired_capacity,
            "EnableDesiredCapacity": group.desired_enabled,
            "DefaultCooldown": group.default_cooldown_s,
            "ScalingPolicy": group.scaling_policy,
            "RemovalPolicies": list(group.removal_policies),
            "VSwitchIds": list(group.vswitch_ids),
            "VSwitchId": group.vswitch_ids[0] if group.vswitch_ids else None,
            "VpcId": "vpc-fake",
            "ActiveScalingConfigurationId": group.active_config_id,
            "HealthCheckType": group.health_check_types[0] if group.health_check_types else "NONE",
            "HealthCheckTypes": list(group.health_check_types),
            "GroupDeletionProtection": group.deletion_protection,
            "SuspendedProcesses": list(group.suspended_processes),
            "MultiAZPolicy": group.multi_az_policy,
            "GroupType": "ECS",
            "CreationTime": iso_min(group.created_s),
            "ModificationTime": iso_min(group.modified_s),
            "StopInstanceTimeout": group.stop_instance_timeout_s,
            "MaxInstanceLifetime": group.max_instance_lifetime_s,
            "Tags": [{"Key": t.get("Key"), "Value": t.get("Value")} for t in group.tags],
            "TotalInstanceCount": caps["TotalCapacity"],
            **caps,
        }

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
    ) -> None:
        group = self.group(group_id)
        new_min = group.min_size if min_size is None else min_size
        new_max = group.max_size if max_size is None else max_size
        new_desired = group.desired_capacity if desired_capacity is None else desired_capacity
        if disable_desired_capacity:
            new_desired = None
        _check_sizes(new_min, new_max, new_desired)
        if scaling_policy is not None and scaling_policy not in SCALING_POLICIES:
            raise invalid(f"ScalingPolicy {scaling_policy!r} is not one of {', '.join(SCALING_POLICIES)}.")
        if default_cooldown_s is not None and not 0 <= default_cooldown_s <= 86400:
            raise invalid(f"DefaultCooldown must be within 0-86400, got {default_cooldown_s}.")
        if (
            name is not None
            and name != group.name
            and any(g.name == name and g.region_id == group.region_id for g in self.groups.values())
        ):
            raise AliyunError(
                "InvalidScalingGroupName.Duplicate",
                f'The specified value of parameter "ScalingGroupName" ({name}) is duplicated.',
                400,
            )
        if active_config_id is not None:
            self._config_of(group, active_config_id)
        group.min_size, group.max_size, group.desired_capacity = new_min, new_max, new_desired
        if default_cooldown_s is not None:
            group.default_cooldown_s = default_cooldown_s
        if scaling_policy is not None:
            group.scaling_policy = scaling_policy
        if removal_policies:
            group.removal_policies = removal_policies
        if name is not None:
            group.name = name
        if active_config_id is not None:
            self._activate_config(group, active_config_id)
        if deletion_protection is not None:
            group.deletion_protection = deletion_protection
        if health_check_types:
            group.health_check_types = health_check_types
        if vswitch_ids:
            group.vswitch_ids = vswitch_ids
        if stop_instance_timeout_s is not None:
            group.stop_instance_timeout_s = stop_instance_timeout_s
        if max_instance_lifetime_s is not None:
            group.max_instance_lifetime_s = max_instance_lifetime_s
        group.modified_s = self.cloud.now_s()
        self._converge(group, cause or "A user modifies the scaling group.")

    def enable_scaling_group(self, group_id: str, config_id: str | None, instance_ids: list[str]) -> None:
        group = self.group(group_id)
        if group.lifecycle_state == "Active":
            raise _bad_status(group_id, group.lifecycle_state)
        if config_id is None:
            config_id = group.active_config_id or next(
                (c.config_id for c in reversed(list(self.configurations.values())) if c.group_id == group_id),
                None,
            )
            if config_id is None:
                raise AliyunError(
                    "MissingParameter.ActiveScalingConfigurationId",
                    "The scaling group has no scaling configuration to enable it with.",
                    400,
                )
        self._config_of(group, config_id)
        self._activate_config(group, config_id)
        group.lifecycle_state = "Active"
        group.cooldown_until_s = 0.0  # disable + enable lets the next activity skip cooldown (section 1.1)
        if instance_ids:
            self.attach_instances(group_id, instance_ids, entrusted=False, ignore_invalid=False)
        self._converge(group, "A user enables the scaling group.")

    def disable_scaling_group(self, group_id: str) -> None:
        group = self.group(group_id)
        group.lifecycle_state = "Inactive"

    def delete_scaling_group(self, group_id: str, force: bool) -> None:
        group = self.group(group_id)
        if group.deletion_protection:
            raise AliyunError(
                "Forbidden.GroupDeletionProtection",
                f"Deletion protection is enabled for the scaling group {group_id}.",
                403,
            )
        if group.instance_ids and not force:
            raise _bad_status(group_id, f"{len(group.instance_ids)} instances in the group; use ForceDelete")
        if self._activity_in_progress(group) and not force:
            raise _in_progress(group_id)
        for inst in self.group_instances(group):
            del self.instances[inst.instance_id]
            if inst.creation_type == "AutoCreated" or inst.entrusted:
                self.cloud.ecs.release(inst.instance_id)
            elif inst.instance_id in self.cloud.ecs.instances:
                self.cloud.ecs.instances[inst.instance_id].scaling_group_id = None
        for store in (self.rules, self.alarms, self.hooks):
            for key in [k for k, v in store.items() if v.group_id == group_id]:
                del store[key]
        self.rules_by_ari = {a: r for a, r in self.rules_by_ari.items() if r in self.rules}
        for key in [k for k, t in self.scheduled_tasks.items() if t.group_id == group_id]:
            del self.scheduled_tasks[key]
        for key in [k for k, c in self.configurations.items() if c.group_id == group_id]:
            del self.configurations[key]
        del self.groups[group_id]
        self.in_progress.pop(group_id, None)

    # ==== configurations ====================================================================================
    def create_scaling_configuration(
        self,
        group_id: str,
        *,
        name: str | None,
        instance_types: list[str],
        image_id: str | None,
        extra: dict[str, str],
    ) -> ScalingConfiguration:
        group = self.group(group_id)
        if not instance_types:
            raise AliyunError(
                "MissingParameter.InstanceType", "InstanceType or InstanceTypes is required.", 400
            )
        config_id = self.cloud.new_id("asc-", 20)
        config = ScalingConfiguration(
            config_id,
            group.group_id,
            name or config_id,
            instance_types,
            image_id or "aliyun_3_x64_20G_alibase_20240819.vhd",
            self.cloud.now_s(),
            extra=extra,
        )
        self.configurations[config_id] = config
        return config

    def _config_of(self, group: ScalingGroup, config_id: str) -> ScalingConfiguration:
        config = self.configurations.get(config_id)
        if config is None or config.group_id != group.group_id:
            raise not_found("InvalidScalingConfigurationId.NotFound", f"scaling configuration {config_id!r}")
        return config

    def _activate_config(self, group: ScalingGroup, config_id: str) -> None:
        for config in self.configurations.values():
            if config.group_id == group.group_id:
                config.lifecycle_state = "Active" if config.config_id == config_id else "Inactive"
        group.active_config_id = config_id

    # ==== activities ========================================================================================
    def _new_activity(
        self, group: ScalingGroup, cause: str, description: str = "", trigger: str = "APIs"
    ) -> ScalingActivity:
        activity = ScalingActivity(
            self.cloud.new_id("asa-", 20),
            group.group_id,
            cause,
            description,
            self.cloud.now_s(),
            trigger_source_type=trigger,
        )
        self.activities[activity.activity_id] = activity
        history = self.group_activities.setdefault(group.group_id, [])
        history.append(activity.activity_id)
        self.in_progress.setdefault(group.group_id, set()).add(activity.activity_id)
        if len(history) > MAX_ACTIVITIES_PER_GROUP:
            # Keep memory flat over long simulations: forget the oldest finished activities.
            keep = [
                a
                for a in history[:-MAX_ACTIVITIES_PER_GROUP]
                if self.activities[a].status_code == "InProgress"
            ]
            for old in history[:-MAX_ACTIVITIES_PER_GROUP]:
                if old not in keep:
                    del self.activities[old]
            history[:] = keep + history[-MAX_ACTIVITIES_PER_GROUP:]
        return activity

    def _finish_if_done(self, activity: ScalingActivity, at: float) -> None:
        if activity.status_code != "InProgress" or activity.pending:
            return
        launched = set(activity.created) | set(activity.started)
        changed = bool(
            launched - set(activity.failed) or activity.destroyed or activity.stopped or activity.attached
        )
        if activity.failed:
            activity.status_code = "Warning" if changed else "Failed"
            activity.status_message = activity.status_message or f"{len(activity.failed)} instance(s) failed."
        else:
            activity.status_code = "Successful"
            activity.status_message = activity.status_message or "The scaling activity succeeded."
        activity.progress = 100
        activity.end_s = at
        self.in_progress.get(activity.group_id, set()).discard(activity.activity_id)
        group = self.groups.get(activity.group_id)
        if group is None:
            return
        activity.total_capacity = self.capacities(group)["TotalCapacity"]
        if changed:  # an activity that changes nothing starts no cooldown (section 1.1)
            cooldown_s = group.default_cooldown_s if activity.cooldown_s is None else activity.cooldown_s
            group.cooldown_until_s = at + cooldown_s
        self._converge(group, "A scaling activity finished and the group is re-checked.")

    def _converge(self, group: ScalingGroup, cause: str) -> None:
        """Bring the group within its bounds (and to DesiredCapacity when enabled).

        Re-entrant calls (an activity finishing while this one changes the group) are folded into the loop
        here; the loop stops when nothing more can be done, e.g. when only Standby or Protected instances are
        left to scale in."""
        if group.group_id in self._converging:
            self._converge_again.add(group.group_id)
            return
        self._converging.add(group.group_id)
        try:
            for _ in range(MAX_CONVERGE_ROUNDS):
                self._converge_again.discard(group.group_id)
                if not self._converge_once(group, cause) and group.group_id not in self._converge_again:
                    break
        finally:
            self._converging.discard(group.group_id)
            self._converge_again.discard(group.group_id)

    def _converge_once(self, group: ScalingGroup, cause: str) -> bool:
        """One step towards the bounds or the desired capacity; False when there is nothing (more) to do."""
        if group.lifecycle_state != "Active" or group.active_config_id is None:
            return False
        self._trim_stopped_to_max(group)
        counted = len(self._counted(group))
        if group.desired_enabled:
            target = group.desired_capacity or 0
            why = "the desired capacity"
        elif self._activity_in_progress(group):
            return False  # the next finished activity re-checks
        elif counted < group.min_size:
            target, why = group.min_size, "MinSize"
        elif counted > group.max_size:
            target, why = group.max_size, "MaxSize"
        else:
            return False
        if counted == target:
            return False
        if counted > target and not self._scale_in_candidates(group, counted - target):
            return False  # only Standby/Protected (or removing) instances are left: nothing to scale in
        activity = self._new_activity(
            group,
            f"{cause} The group has {counted} instance(s); adjusting to {why} ({target}).",
            trigger="Ess",
        )
        self._apply_target(group, activity, target)
        return True

    def _trim_stopped_to_max(self, group: ScalingGroup) -> None:
        """Stopped instances count toward MaxSize: lowering Max releases them first (section 1.3)."""
        excess = self._toward_max(group) - group.max_size
        if excess <= 0:
            return
        stopped = [i for i in self.group_instances(group) if i.lifecycle_state == "Stopped"]
        for inst in stopped[:excess]:
            self._drop_instance(group, inst, release=True)

    def _apply_target(self, group: ScalingGroup, activity: ScalingActivity, target: int) -> None:
        counted = self._counted(group)
        at = self.cloud.now_s()
        if target > len(counted):
            activity.description = f'Add "{target - len(counted)}" ECS instance(s)'
            self._scale_out(group, activity, target - len(counted))
        elif target < len(counted):
            victims = self._scale_in_candidates(group, len(counted) - target)
            activity.description = f'Remove "{len(victims)}" ECS instance(s)'
            recycle = group.scaling_policy in ("recycle", "forcerecycle")
            self._scale_in(group, activity, victims, recycle=recycle)
        self._finish_if_done(activity, at)

    def _scale_out(self, group: ScalingGroup, activity: ScalingActivity, count: int) -> None:
        config = self.configurations[group.active_config_id or ""]
        hooks = [
            h for h in self.hooks.values() if h.group_id == group.group_id and h.transition == "SCALE_OUT"
        ]
        stopped = [i for i in self.group_instances(group) if i.lifecycle_state == "Stopped"]
        new_ids: list[str] = []
        # Economical mode: start Stopped instances first (section 1.3).
        for inst in stopped[:count]:
            ecs_inst = self.cloud.ecs.instances.get(inst.instance_id)
            if ecs_inst is None or ecs_inst.status not in ("Stopped", "Stopping"):
                continue
            if ecs_inst.status == "Stopping":
                continue
            self._reassign(inst, activity)
            inst.lifecycle_state = "Pending"
            inst.booted = False
            activity.started.append(inst.instance_id)
            new_ids.append(inst.instance_id)
            self.cloud.ecs.start_instance(inst.instance_id)
        # New instances; keep TotalCapacity (with Stopped) within MaxSize by releasing Stopped ones first.
        to_create = count - len(new_ids)
        room = group.max_size - self._toward_max(group)
        if to_create > room:
            leftover = [i for i in self.group_instances(group) if i.lifecycle_state == "Stopped"]
            for inst in leftover[: to_create - room]:
                self._drop_instance(group, inst, release=True)
        for _ in range(to_create):
            ecs_inst = self.cloud.ecs.create_instance(
                config.instance_types[0],
                region_id=group.region_id,
                zone_id=group.zone_for_next(),
                status="Pending",
                image_id=config.image_id,
                instance_name=config.extra.get("InstanceName", ""),
            )
            ecs_inst.scaling_group_id = group.group_id
            inst = ScalingInstance(
                ecs_inst.instance_id,
                group.group_id,
                "Pending",
                "AutoCreated",
                ecs_inst.created_s,
                ecs_inst.zone_id,
                ecs_inst.private_ip,
                config.config_id,
                activity_id=activity.activity_id,
            )
            self.instances[inst.instance_id] = inst
            group.instance_ids[inst.instance_id] = None
            activity.created.append(inst.instance_id)
            activity.pending.add(inst.instance_id)
            new_ids.append(inst.instance_id)
        if hooks and new_ids:
            for inst_id in new_ids:
                self.instances[inst_id].lifecycle_state = "Pending:Wait"
            for hook in hooks:
                self._open_lifecycle_action(hook, activity, new_ids)

    def _scale_in_candidates(self, group: ScalingGroup, count: int) -> list[ScalingInstance]:
        """Never Protected or Standby. InService by removal policy first, then instances still booting."""
        members = self.group_instances(group)
        newest_first = "NewestInstance" in group.removal_policies and (
            "OldestInstance" not in group.removal_policies
            or group.removal_policies.index("NewestInstance") < group.removal_policies.index("OldestInstance")
        )
        in_service = sorted(
            (i for i in members if i.lifecycle_state == "InService"),
            key=lambda i: i.created_s,
            reverse=newest_first,
        )
        booting = sorted(
            (i for i in members if i.lifecycle_state in ("Pending", "Pending:Wait")),
            key=lambda i: i.created_s,
            reverse=True,
        )
        return (in_service + booting)[:count]

    def _reassign(self, inst: ScalingInstance, activity: ScalingActivity) -> None:
        previous = self.activities.get(inst.activity_id or "")
        inst.activity_id = activity.activity_id
        activity.pending.add(inst.instance_id)
        if previous is not None and previous is not activity and inst.instance_id in previous.pending:
            previous.pending.discard(inst.instance_id)
            # Finish the previous activity once this change is complete (a timer due now fires on the next
            # request or advance): finishing it here would re-check the group halfway through the change.
            self.cloud.timers.schedule(
                self.cloud.now_s(),
                lambda at: self._finish_if_done(previous, at),
                f"ess finish {previous.activity_id}",
            )

    def _scale_in(
        self, group: ScalingGroup, activity: ScalingActivity, victims: list[ScalingInstance], recycle: bool
    ) -> None:
        hooks = [
            h for h in self.hooks.values() if h.group_id == group.group_id and h.transition == "SCALE_IN"
        ]
        at = self.cloud.now_s()
        ids = []
        for inst in victims:
            for token in list(inst.waiting_tokens):  # a scale-out hook no longer matters
                self._discard_from_action(token, inst.instance_id)
            self._reassign(inst, activity)
            inst.recycle_on_removal = recycle
            if inst.lifecycle_state == "Stopped":
                activity.pending.discard(inst.instance_id)
                self._drop_instance(group, inst, release=True, activity=activity)
                continue
            ids.append(inst.instance_id)
            if hooks:
                inst.lifecycle_state = "Removing:Wait"
            else:
                self._begin_removal(inst, at)
        if hooks and ids:
            for hook in hooks:
                self._open_lifecycle_action(hook, activity, ids)

    def _begin_removal(self, inst: ScalingInstance, at: float) -> None:
        inst.lifecycle_state = "Removing"
        instance_id = inst.instance_id

        def done(when: float) -> None:
            current = self.instances.get(instance_id)
            if current is inst and inst.lifecycle_state == "Removing":
                self._finish_removal(inst, when)

        self.cloud.timers.schedule(at + self.cloud.removal_seconds, done, f"ess remove {instance_id}")

    def _finish_removal(self, inst: ScalingInstance, at: float) -> None:
        group = self.groups.get(inst.group_id)
        activity = self.activities.get(inst.activity_id or "")
        owned = inst.creation_type == "AutoCreated" or inst.entrusted
        if group is not None and inst.recycle_on_removal and owned:
            inst.lifecycle_state = "Stopped"
            inst.booted = False
            ecs_inst = self.cloud.ecs.instances.get(inst.instance_id)
            if ecs_inst is not None and ecs_inst.status in ("Running", "Starting", "Pending"):
                self.cloud.ecs.stop_instance(inst.instance_id, stopped_mode="StopCharging")
            if activity is not None:
                activity.stopped.append(inst.instance_id)
        elif group is not None:
            self._drop_instance(group, inst, release=owned, activity=activity)
        if activity is not None:
            activity.pending.discard(inst.instance_id)
            self._finish_if_done(activity, at)

    def _drop_instance(
        self,
        group: ScalingGroup,
        inst: ScalingInstance,
        *,
        release: bool,
        activity: ScalingActivity | None = None,
    ) -> None:
        self.instances.pop(inst.instance_id, None)
        group.instance_ids.pop(inst.instance_id, None)
        if release:
            self.cloud.ecs.release(inst.instance_id)
        elif inst.instance_id in self.cloud.ecs.instances:
            self.cloud.ecs.instances[inst.instance_id].scaling_group_id = None
        if activity is not None:
            activity.destroyed.append(inst.instance_id)

    def _maybe_in_service(self, inst: ScalingInstance, at: float) -> None:
        if inst.lifecycle_state not in ("Pending", "Pending:Wait"):
            return
        if inst.waiting_tokens:
            inst.lifecycle_state = "Pending:Wait"
            return
        if not inst.booted:
            inst.lifecycle_state = "Pending"
            return
        inst.lifecycle_state = "InService"
        activity = self.activities.get(inst.activity_id or "")
        if activity is not None:
            activity.pending.discard(inst.instance_id)
            self._finish_if_done(activity, at)

    def _on_ecs_status(self, ecs_inst: Instance, previous: str, at: float) -> None:
        inst = self.instances.get(ecs_inst.instance_id)
        if inst is None:
            return
        group = self.groups.get(inst.group_id)
        if group is None:
            return
        if ecs_inst.status == "Running":
            inst.booted = True
            self._maybe_in_service(inst, at)
        elif ecs_inst.status == "Deleted":
            self._health_removal(group, inst, "was released outside Auto Scaling", at)
        elif (
            ecs_inst.status == "Stopped"
            and "HealthCheck" not in group.suspended_processes
            and inst.lifecycle_state
            in (
                "InService",
                "Pending",
                "Pending:Wait",
            )
        ):
            # Health check: a stopped instance is Unhealthy and is removed (section 1, ScalingInstances).
            inst.health_status = "Unhealthy"
            self._health_removal(group, inst, "is stopped and failed the health check", at)

    def _health_removal(self, group: ScalingGroup, inst: ScalingInstance, why: str, at: float) -> None:
        old_activity = self.activities.get(inst.activity_id or "")
        activity = self._new_activity(
            group,
            f'The instance "{inst.instance_id}" {why}; it is removed from the scaling group.',
            'Remove "1" ECS instance(s)',
            trigger="Ess",
        )
        owned = inst.creation_type == "AutoCreated" or inst.entrusted
        exists = inst.instance_id in self.cloud.ecs.instances
        self._drop_instance(group, inst, release=owned and exists, activity=activity)
        if old_activity is not None and inst.instance_id in old_activity.pending:
            old_activity.pending.discard(inst.instance_id)
            old_activity.failed.append(inst.instance_id)
            self._finish_if_done(old_activity, at)
        self._finish_if_done(activity, at)  # desired unchanged: the converge creates a replacement

    # ==== scaling requests ==================================================================================
    def _require_active(self, group: ScalingGroup) -> None:
        if group.lifecycle_state != "Active":
            raise _bad_status(group.group_id, group.lifecycle_state)

    def _target_for(
        self, group: ScalingGroup, adjustment_type: str, value: int, min_adjustment_magnitude: int | None
    ) -> tuple[int, int]:
        """(current, clamped target). With desired capacity the base is the stable count (section 1.2)."""
        if adjustment_type not in ADJUSTMENT_TYPES:
            raise invalid(f"AdjustmentType {adjustment_type!r} is not one of {', '.join(ADJUSTMENT_TYPES)}.")
        low, high = ADJUSTMENT_TYPES[adjustment_type]
        if not low <= value <= high:
            raise invalid(f"AdjustmentValue {value} is out of range [{low}, {high}] for {adjustment_type}.")
        current = group.desired_capacity if group.desired_enabled else len(self._counted(group))
        base = self._stable_count(group) if group.desired_enabled else current
        if adjustment_type == "TotalCapacity":
            target = value
        elif adjustment_type == "QuantityChangeInCapacity":
            target = base + value
        else:
            delta = base * value / 100.0
            delta_int = math.ceil(delta) if delta > 0 else math.floor(delta) if delta < 0 else 0
            if min_adjustment_magnitude and 0 < abs(delta_int) < min_adjustment_magnitude:
                delta_int = min_adjustment_magnitude if delta_int > 0 else -min_adjustment_magnitude
            target = base + delta_int
        return current or 0, max(group.min_size, min(group.max_size, target))

    def scale(
        self,
        group_id: str,
        adjustment_type: str,
        value: int,
        *,
        min_adjustment_magnitude: int | None,
        cause: str,
        trigger: str = "APIs",
    ) -> ScalingActivity:
        group = self.group(group_id)
        self._require_active(group)
        current, target = self._target_for(group, adjustment_type, value, min_adjustment_magnitude)
        if not group.desired_enabled and self._activity_in_progress(group):
            raise _in_progress(group_id)
        if target == current:
            raise AliyunError(
                "IncorrectCapacity.NoChange",
                "To execute the specified scaling rule, the total "
                f"capacity will not change (it stays {current}).",
                400,
            )
        activity = self._new_activity(group, cause.format(old=current, new=target), trigger=trigger)
        if group.desired_enabled:
            group.desired_capacity = target
        self._apply_target(group, activity, target)
        return activity

    def execute_scaling_rule(
        self, ari: str, *, breach_threshold: float | None, metric_value: float | None, trigger: str = "APIs"
    ) -> ScalingActivity:
        rule_id = self.rules_by_ari.get(ari)
        if rule_id is None:
            raise not_found("InvalidScalingRuleAri.NotFound", f"scaling rule {ari!r}")
        rule = self.rules[rule_id]
        if rule.rule_type == "SimpleScalingRule":
            adjustment = rule.adjustment_value or 0
        elif rule.rule_type == "StepScalingRule":
            if metric_value is None:
                raise AliyunError(
                    "MissingParameter.MetricValue", "MetricValue is required for a step rule.", 400
                )
            if breach_threshold is None:
                raise AliyunError(
                    "MissingParameter.BreachThreshold", "BreachThreshold is required for a step rule.", 400
                )
            adjustment = _step_adjustment(rule, metric_value - breach_threshold)
        else:
            raise AliyunError(
                "ScalingRule.InvalidScalingRuleType", f"A {rule.rule_type} cannot be executed.", 400
            )
        cause = (
            f'A user requests to execute scaling rule "{rule.rule_id}", changing the Total Capacity from '
            '"{old}" to "{new}".'
        )
        activity = self.scale(
            rule.group_id,
            rule.adjustment_type or "QuantityChangeInCapacity",
            adjustment,
            min_adjustment_magnitude=rule.min_adjustment_magnitude,
            cause=cause,
            trigger=trigger,
        )
        if rule.rule_type == "SimpleScalingRule":
            activity.cooldown_s = rule.cooldown_s
        return activity

    # ==== instances =========================================================================================
    def _members(self, group: ScalingGroup, instance_ids: list[str]) -> list[ScalingInstance]:
        if not instance_ids:
            raise AliyunError("MissingParameter.InstanceIds", "InstanceIds is required.", 400)
        members = []
        for instance_id in instance_ids:
            inst = self.instances.get(instance_id)
            if inst is None or inst.group_id != group.group_id:
                raise not_found(
                    "InvalidInstanceId.NotFound",
                    f"instance {instance_id!r} in scaling group {group.group_id}",
                )
            members.append(inst)
        return members

    def enter_standby(self, group_id: str, instance_ids: list[str]) -> ScalingActivity:
        group = self.group(group_id)
        members = self._members(group, instance_ids)
        for inst in members:
            if inst.lifecycle_state != "InService":
                raise _incorrect_instance_status(inst, "InService")
        activity = self._new_activity(
            group,
            f"A user puts {len(members)} instance(s) into Standby.",
            "Instances enter Standby; desired capacity is unchanged.",
        )
        for inst in members:
            inst.lifecycle_state = "Standby"
        self._finish_if_done(activity, self.cloud.now_s())
        return activity

    def exit_standby(self, group_id: str, instance_ids: list[str]) -> ScalingActivity:
        group = self.group(group_id)
        members = self._members(group, instance_ids)
        for inst in members:
            if inst.lifecycle_state != "Standby":
                raise _incorrect_instance_status(inst, "Standby")
        activity = self._new_activity(
            group,
            f"A user takes {len(members)} instance(s) out of Standby.",
            "Instances leave Standby and take traffic again.",
        )
        for inst in members:
            inst.lifecycle_state = "InService"
        self._finish_if_done(activity, self.cloud.now_s())
        return activity

    def set_instances_protection(self, group_id: str, instance_ids: list[str], protected: bool) -> None:
        group = self.group(group_id)
        members = self._members(group, instance_ids)
        want_from = "InService" if protected else "Protected"
        for inst in members:
            if inst.lifecycle_state not in ("InService", "Protected"):
                raise _incorrect_instance_status(inst, want_from)
        for inst in members:
            inst.lifecycle_state = "Protected" if protected else "InService"

    def remove_instances(
        self,
        group_id: str,
        instance_ids: list[str],
        *,
        remove_policy: str,
        decrease_desired: bool,
        ignore_invalid: bool,
    ) -> tuple[ScalingActivity, list[str]]:
        group = self.group(group_id)
        self._require_active(group)
        if remove_policy not in ("recycle", "release"):
            raise invalid(f"RemovePolicy {remove_policy!r} is not one of recycle, release.")
        ignored: list[str] = []
        members: list[ScalingInstance] = []
        for instance_id in instance_ids:
            inst = self.instances.get(instance_id)
            ok = (
                inst is not None
                and inst.group_id == group_id
                and inst.lifecycle_state in ("InService", "Standby", "Protected", "Stopped")
            )
            if ok:
                assert inst is not None
                members.append(inst)
            elif ignore_invalid:
                ignored.append(instance_id)
            elif inst is None or inst.group_id != group_id:
                raise not_found(
                    "InvalidInstanceId.NotFound", f"instance {instance_id!r} in scaling group {group_id}"
                )
            else:
                raise _incorrect_instance_status(inst, "InService, Standby, Protected or Stopped")
        if not members and not ignored:
            raise AliyunError("MissingParameter.InstanceIds", "InstanceIds is required.", 400)
        if not group.desired_enabled and self._activity_in_progress(group):
            raise _in_progress(group_id)
        counted_removed = sum(1 for i in members if i.lifecycle_state in COUNTED_STATES)
        if group.desired_enabled:
            if decrease_desired and (group.desired_capacity or 0) - counted_removed < group.min_size:
                raise _below_min(group, counted_removed)
        elif len(self._counted(group)) - counted_removed < group.min_size:
            raise _below_min(group, counted_removed)
        activity = self._new_activity(
            group,
            f"A user removes {len(members)} instance(s) from the scaling group.",
            f'Remove "{len(members)}" ECS instance(s)',
        )
        if group.desired_enabled and decrease_desired:
            group.desired_capacity = (group.desired_capacity or 0) - counted_removed
        recycle = group.scaling_policy == "recycle" and remove_policy == "recycle"
        self._scale_in(group, activity, members, recycle=recycle)
        self._finish_if_done(activity, self.cloud.now_s())
        if group.desired_enabled and not decrease_desired:
            self._converge(group, "Instances were removed without decreasing the desired capacity.")
        return activity, ignored

    def attach_instances(
        self, group_id: str, instance_ids: list[str], *, entrusted: bool, ignore_invalid: bool
    ) -> ScalingActivity:
        group = self.group(group_id)
        self._require_active(group)
        if not instance_ids:
            raise AliyunError("MissingParameter.InstanceIds", "InstanceIds is required.", 400)
        valid = []
        for instance_id in instance_ids:
            ecs_inst = self.cloud.ecs.instances.get(instance_id)
            try:
                if ecs_inst is None:
                    raise not_found("InvalidInstanceId.NotFound", f"instance {instance_id!r}")
                if instance_id in self.instances:
                    raise AliyunError(
                        "InvalidInstanceId.InUse",
                        f"The instance {instance_id} is already in a scaling group.",
                        400,
                    )
                if ecs_inst.status != "Running":
                    raise AliyunError(
                        "IncorrectInstanceStatus",
                        f"The instance {instance_id} is "
                        f"{ecs_inst.status}; only Running instances can be attached.",
                        400,
                    )
            except AliyunError:
                if ignore_invalid:
                    continue
                raise
            valid.append(ecs_inst)
        if not group.desired_enabled and self._activity_in_progress(group):
            raise _in_progress(group_id)
        if self._toward_max(group) + len(valid) > group.max_size:
            raise AliyunError(
                "IncorrectCapacity.MaxSize",
                f"To attach the instances, the total capacity would exceed the MaxSize ({group.max_size}).",
                400,
            )
        activity = self._new_activity(
            group, f"A user attaches {len(valid)} instance(s).", f'Add "{len(valid)}" ECS instance(s)'
        )
        now = self.cloud.now_s()
        for ecs_inst in valid:
            ecs_inst.scaling_group_id = group.group_id
            inst = ScalingInstance(
                ecs_inst.instance_id,
                group.group_id,
                "InService",
                "Attached",
                now,
                ecs_inst.zone_id,
                ecs_inst.private_ip,
                None,
                entrusted=entrusted,
                activity_id=activity.activity_id,
                booted=True,
            )
            self.instances[inst.instance_id] = inst
            group.instance_ids[inst.instance_id] = None
            activity.attached.append(inst.instance_id)
        if group.desired_enabled:
            group.desired_capacity = (group.desired_capacity or 0) + len(valid)
        self._finish_if_done(activity, now)
        return activity

    def describe_scaling_instances(
        self,
        *,
        group_id: str | None,
        instance_ids: list[str],
        lifecycle_states: list[str],
        health_status: str | None,
        creation_types: list[str],
        activity_id: str | None,
        config_id: str | None,
    ) -> list[ScalingInstance]:
        if group_id:
            group = self.group(group_id)
            items = self.group_instances(group)
        else:
            items = list(self.instances.values())
        if instance_ids:
            wanted = set(instance_ids)
            items = [i for i in items if i.instance_id in wanted]
        if lifecycle_states:
            states = set(lifecycle_states)
            items = [i for i in items if i.lifecycle_state in states]
        if health_status:
            items = [i for i in items if i.health_status == health_status]
        if creation_types:
            kinds = set(creation_types)
            items = [i for i in items if i.creation_type in kinds]
        if activity_id:
            items = [i for i in items if i.activity_id == activity_id]
        if config_id:
            items = [i for i in items if i.config_id == config_id]
        return items

    # ==== lifecycle hooks ===================================================================================
    def create_lifecycle_hook(
        self,
        group_id: str,
        name: str | None,
        transition: str | None,
        default_result: str | None,
        heartbeat_timeout_s: int | None,
        notification_arn: str | None,
        notification_metadata: str | None,
    ) -> LifecycleHook:
        group = self.group(group_id)
        if transition not in ("SCALE_OUT", "SCALE_IN"):
            raise invalid(f"LifecycleTransition {transition!r} is not one of SCALE_OUT, SCALE_IN.")
        default_result = default_result or "CONTINUE"
        if default_result not in ("CONTINUE", "ABANDON"):
            raise invalid(f"DefaultResult {default_result!r} is not one of CONTINUE, ABANDON.")
        timeout_s = 600 if heartbeat_timeout_s is None else heartbeat_timeout_s
        if not 30 <= timeout_s <= 21600:
            raise invalid(f"HeartbeatTimeout must be within 30-21600 seconds, got {timeout_s}.")
        if sum(1 for h in self.hooks.values() if h.group_id == group_id) >= MAX_LIFECYCLE_HOOKS:
            raise AliyunError("QuotaExceeded.LifecycleHook", "At most 6 lifecycle hooks per group.", 400)
        hook_id = self.cloud.new_id("ash-", 20)
        hook = LifecycleHook(
            hook_id,
            group.group_id,
            name or hook_id,
            transition,
            default_result,
            timeout_s,
            notification_arn,
            notification_metadata,
        )
        self.hooks[hook_id] = hook
        return hook

    def _open_lifecycle_action(
        self, hook: LifecycleHook, activity: ScalingActivity, instance_ids: list[str]
    ) -> None:
        token = self.cloud.new_id("", 8) + "-" + self.cloud.new_id("", 4) + "-" + self.cloud.new_id("", 12)
        action = LifecycleAction(
            token,
            hook.hook_id,
            hook.group_id,
            activity.activity_id,
            hook.transition,
            list(instance_ids),
            self.cloud.now_s() + hook.heartbeat_timeout_s,
        )
        self.lifecycle_actions[token] = action
        for instance_id in instance_ids:
            self.instances[instance_id].waiting_tokens.add(token)
        self._schedule_timeout(action)

    def _schedule_timeout(self, action: LifecycleAction) -> None:
        deadline = action.deadline_s

        def expire(at: float) -> None:
            if action.status == "Pending" and action.deadline_s == deadline:
                hook = self.hooks.get(action.hook_id)
                self._complete(action, hook.default_result if hook else "CONTINUE", at)

        self.cloud.timers.schedule(deadline, expire, f"ess lifecycle timeout {action.token}")

    def _discard_from_action(self, token: str, instance_id: str) -> None:
        action = self.lifecycle_actions.get(token)
        if action is not None and instance_id in action.instance_ids:
            action.instance_ids.remove(instance_id)
        inst = self.instances.get(instance_id)
        if inst is not None:
            inst.waiting_tokens.discard(token)

    def lifecycle_action(self, hook_id: str, token: str) -> LifecycleAction:
        if hook_id not in self.hooks:
            raise not_found("InvalidLifecycleHookId.NotFound", f"lifecycle hook {hook_id!r}")
        action = self.lifecycle_actions.get(token)
        if action is None or action.hook_id != hook_id or action.status != "Pending":
            raise not_found("InvalidLifecycleActionToken.NotFound", f"pending lifecycle action {token!r}")
        return action

    def complete_lifecycle_action(self, hook_id: str, token: str, result: str | None) -> None:
        action = self.lifecycle_action(hook_id, token)
        result = result or "CONTINUE"
        if result not in ("CONTINUE", "ABANDON", "ROLLBACK"):
            raise invalid(f"LifecycleActionResult {result!r} is not one of CONTINUE, ABANDON, ROLLBACK.")
        self._complete(action, result, self.cloud.now_s())

    def record_heartbeat(self, hook_id: str, token: str, heartbeat_timeout_s: int | None) -> None:
        action = self.lifecycle_action(hook_id, token)
        timeout_s = heartbeat_timeout_s or self.hooks[hook_id].heartbeat_timeout_s
        if not 30 <= timeout_s <= 21600:
            raise invalid(f"heartbeatTimeout must be within 30-21600 seconds, got {timeout_s}.")
        action.deadline_s = self.cloud.now_s() + timeout_s
        self._schedule_timeout(action)

    def _complete(self, action: LifecycleAction, result: str, at: float) -> None:
        action.status = "Completed"
        action.result = result
        group = self.groups.get(action.group_id)
        activity = self.activities.get(action.activity_id)
        for instance_id in list(action.instance_ids):
            inst = self.instances.get(instance_id)
            if inst is None or group is None:
                continue
            inst.waiting_tokens.discard(action.token)
            if action.transition == "SCALE_OUT":
                if result == "CONTINUE":
                    self._maybe_in_service(inst, at)
                elif inst.lifecycle_state in ("Pending", "Pending:Wait"):
                    # ABANDON (or ROLLBACK) on scale-out: the instance is released, the activity fails for it.
                    for other in list(inst.waiting_tokens):
                        self._discard_from_action(other, instance_id)
                    if activity is not None:
                        activity.pending.discard(instance_id)
                        activity.failed.append(instance_id)
                    self._drop_instance(group, inst, release=True)
                    if group.desired_enabled and group.desired_capacity:
                        group.desired_capacity = max(group.min_size, group.desired_capacity - 1)
            elif inst.lifecycle_state == "Removing:Wait":
                if result == "ROLLBACK":
                    for other in list(inst.waiting_tokens):
                        self._discard_from_action(other, instance_id)
                    inst.lifecycle_state = "InService"
                    if activity is not None:
                        activity.pending.discard(instance_id)
                        activity.failed.append(instance_id)
                    if group.desired_enabled:
                        group.desired_capacity = min(group.max_size, (group.desired_capacity or 0) + 1)
                elif not inst.waiting_tokens:
                    self._begin_removal(inst, at)
        if activity is not None:
            self._finish_if_done(activity, at)

    # ==== rules, scheduled tasks, alarms ====================================================================
    def create_scaling_rule(
        self,
        group_id: str,
        *,
        name: str | None,
        rule_type: str,
        adjustment_type: str | None,
        adjustment_value: int | None,
        min_adjustment_magnitude: int | None,
        cooldown_s: int | None,
        step_adjustments: list[dict[str, Any]],
        metric_name: str | None,
        target_value: float | None,
        disable_scale_in: bool,
        estimated_instance_warmup_s: int | None,
    ) -> ScalingRule:
        group = self.group(group_id)
        if rule_type not in RULE_TYPES:
            raise AliyunError(
                "ScalingRule.InvalidScalingRuleType",
                f"ScalingRuleType {rule_type!r} is not one of {', '.join(RULE_TYPES)}.",
                400,
            )
        steps: list[dict[str, float | int | None]] = []
        if rule_type in ("SimpleScalingRule", "StepScalingRule"):
            if adjustment_type is None:
                raise AliyunError("MissingParameter.AdjustmentType", "AdjustmentType is required.", 400)
            if adjustment_type not in ADJUSTMENT_TYPES:
                raise invalid(
                    f"AdjustmentType {adjustment_type!r} is not one of {', '.join(ADJUSTMENT_TYPES)}."
                )
        if rule_type == "SimpleScalingRule":
            if adjustment_value is None:
                raise AliyunError("MissingParameter.AdjustmentValue", "AdjustmentValue is required.", 400)
            low, high = ADJUSTMENT_TYPES[adjustment_type or ""]
            if not low <= adjustment_value <= high:
                raise invalid(f"AdjustmentValue {adjustment_value} is out of range [{low}, {high}].")
        elif rule_type == "StepScalingRule":
            if not step_adjustments:
                raise AliyunError(
                    "InvalidStepAdjustments.NoStepFound", "A step rule needs StepAdjustments.", 400
                )
            for step in step_adjustments:
                steps.append(
                    {
                        "lower": _opt_float(step.get("MetricIntervalLowerBound")),
                        "upper": _opt_float(step.get("MetricIntervalUpperBound")),
                        "adjustment": _opt_int(step.get("ScalingAdjustment")),
                    }
                )
        elif rule_type == "TargetTrackingScalingRule" and metric_name and "Gpu" in metric_name:
            # Target tracking accepts CPU, memory, network and ALB QPS only, not GPU (section 1).
            raise invalid(f"MetricName {metric_name!r} is not supported by target tracking rules.")
        rule_id = self.cloud.new_id("asr-", 20)
        ari = f"ari:acs:ess:{group.region_id}:{self.cloud.account_id}:scalingrule/{rule_id}"
        rule = ScalingRule(
            rule_id,
            ari,
            group_id,
            name or rule_id,
            rule_type,
            adjustment_type,
            adjustment_value,
            min_adjustment_magnitude,
            cooldown_s,
            steps,
            metric_name,
            target_value,
            disable_scale_in,
            estimated_instance_warmup_s,
        )
        self.rules[rule_id] = rule
        self.rules_by_ari[ari] = rule_id
        return rule

    def create_scheduled_task(
        self,
        *,
        region_id: str,
        name: str | None,
        launch_s: float,
        group_id: str | None,
        scheduled_action: str | None,
        min_value: int | None,
        max_value: int | None,
        desired_capacity: int | None,
        recurrence_type: str | None,
        recurrence_value: str | None,
        recurrence_end_s: float | None,
        launch_expiration_s: int | None,
        enabled: bool,
        description: str,
    ) -> ScheduledTask:
        task_id = self.cloud.new_id("sst-", 20)
        task = ScheduledTask(
            task_id,
            name or task_id,
            region_id,
            launch_s,
            group_id,
            scheduled_action,
            min_value,
            max_value,
            desired_capacity,
            recurrence_type,
            recurrence_value,
            recurrence_end_s,
            600 if launch_expiration_s is None else launch_expiration_s,
            enabled,
            description,
        )
        self._validate_task(task)
        self.scheduled_tasks[task_id] = task
        self._arm(task)
        return task

    def modify_scheduled_task(self, task_id: str, changes: dict[str, Any]) -> ScheduledTask:
        task = self.scheduled_task(task_id)
        updated = ScheduledTask(**{**task.__dict__, "history": task.history})
        for key, value in changes.items():
            setattr(updated, key, value)
        # The two modes are exclusive: switching to one clears the other.
        if changes.get("scheduled_action") is not None and changes.get("group_id") is None:
            updated.group_id = None
        if changes.get("group_id") is not None and changes.get("scheduled_action") is None:
            updated.scheduled_action = None
        self._validate_task(updated, exclude=task_id)
        for key, value in updated.__dict__.items():
            if key not in ("version", "history", "task_id"):
                setattr(task, key, value)
        task.version += 1
        self._arm(task)
        return task

    def scheduled_task(self, task_id: str) -> ScheduledTask:
        task = self.scheduled_tasks.get(task_id)
        if task is None:
            raise not_found("InvalidScheduledTaskId.NotFound", f"scheduled task {task_id!r}")
        return task

    def delete_scheduled_task(self, task_id: str) -> None:
        task = self.scheduled_task(task_id)
        task.version += 1
        del self.scheduled_tasks[task_id]

    def _validate_task(self, task: ScheduledTask, exclude: str | None = None) -> None:
        if any(
            t.name == task.name and t.region_id == task.region_id and t.task_id != exclude
            for t in self.scheduled_tasks.values()
        ):
            raise AliyunError(
                "InvalidScheduledTaskName.Duplicate",
                f"The scheduled task name {task.name!r} already exists.",
                400,
            )
        by_rule = task.scheduled_action is not None
        by_group = task.group_id is not None
        if by_rule == by_group:
            raise invalid(
                "Specify either ScheduledAction or ScalingGroupId with MinValue/MaxValue/"
                "DesiredCapacity, not both and not neither."
            )
        if by_rule and task.scheduled_action not in self.rules_by_ari:
            raise not_found("InvalidScalingRuleAri.NotFound", f"scaling rule {task.scheduled_action!r}")
        if by_group:
            group = self.group(task.group_id)
            if task.min_value is None and task.max_value is None and task.desired_capacity is None:
                raise invalid(
                    "A scheduled task on a scaling group needs MinValue, MaxValue or DesiredCapacity."
                )
            new_min = group.min_size if task.min_value is None else task.min_value
            new_max = group.max_size if task.max_value is None else task.max_value
            if new_min > new_max or (
                task.desired_capacity is not None and not new_min <= task.desired_capacity <= new_max
            ):
                raise AliyunError(
                    "InvalidParameter.Conflict", "MaxValue >= DesiredCapacity >= MinValue must hold.", 400
                )
        schedule.validate(task.recurrence_type, task.recurrence_value)
        now = self.cloud.now_s()
        if task.launch_s > now + 90 * 86400:
            raise invalid("LaunchTime must be within 90 days from now.")
        if task.recurrence_type is None and task.launch_s + task.launch_expiration_s < now:
            raise invalid("LaunchTime must be later than the current time.")
        if not 0 <= task.launch_expiration_s <= 1800:
            raise invalid("LaunchExpirationTime must be within 0-1800 seconds.")

    def _arm(self, task: ScheduledTask) -> None:
        now = self.cloud.now_s()
        not_before = now - task.launch_expiration_s if task.recurrence_type is None else now
        due = schedule.first_at_or_after(
            task.launch_s, task.recurrence_type, task.recurrence_value, not_before
        )
        self._schedule_fire(task, due)

    def _schedule_fire(self, task: ScheduledTask, due: float | None) -> None:
        if due is not None and task.recurrence_end_s is not None and due > task.recurrence_end_s:
            due = None
        task.next_fire_s = due
        if due is None:
            return
        version = task.version

        def fire(at: float) -> None:
            if self.scheduled_tasks.get(task.task_id) is task and task.version == version:
                self._fire_task(task, at, at)

        self.cloud.timers.schedule(due, fire, f"ess scheduled task {task.name}")

    def _fire_task(self, task: ScheduledTask, scheduled_s: float, at: float) -> None:
        outcome = "skipped (disabled)"
        retry = False
        group = self.groups.get(task.group_id or "")
        if group is not None and "ScheduledAction" in group.suspended_processes:
            outcome = "skipped (ScheduledAction suspended)"
        elif task.enabled:
            try:
                if task.scheduled_action is not None:
                    activity = self.execute_scaling_rule(
                        task.scheduled_action, breach_threshold=None, metric_value=None, trigger="Ess"
                    )
                    outcome = f"executed rule: activity {activity.activity_id}"
                else:
                    self.modify_scaling_group(
                        task.group_id or "",
                        min_size=task.min_value,
                        max_size=task.max_value,
                        desired_capacity=task.desired_capacity,
                        cause=f'The scheduled task "{task.name}" is triggered.',
                    )
                    outcome = "set " + ", ".join(
                        f"{k}={v}"
                        for k, v in (
                            ("MinSize", task.min_value),
                            ("MaxSize", task.max_value),
                            ("DesiredCapacity", task.desired_capacity),
                        )
                        if v is not None
                    )
            except AliyunError as err:
                outcome = f"failed: {err.code}"
                retry = err.code == "ScalingActivityInProgress"
        task.history.append({"scheduled": iso_s(scheduled_s), "fired": iso_s(at), "outcome": outcome})
        del task.history[:-50]
        version = task.version
        if retry and at + 10 <= scheduled_s + task.launch_expiration_s:
            # Within LaunchExpirationTime the task is retried while another activity runs.
            def again(when: float) -> None:
                if self.scheduled_tasks.get(task.task_id) is task and task.version == version:
                    self._fire_task(task, scheduled_s, when)

            self.cloud.timers.schedule(at + 10, again, f"ess scheduled task retry {task.name}")
            return
        self._schedule_fire(
            task, schedule.next_after(task.launch_s, task.recurrence_type, task.recurrence_value, scheduled_s)
        )

    def create_alarm(self, group_id: str, **fields: Any) -> Alarm:
        self.group(group_id)
        for ari in fields["alarm_actions"]:
            if ari not in self.rules_by_ari:
                raise not_found("InvalidScalingRuleAri.NotFound", f"scaling rule {ari!r}")
        if fields["metric_type"] == "custom" and not fields.get("group_id_cms"):
            raise AliyunError("MissingParameter.GroupId", "GroupId is required for custom metrics.", 400)
        if fields["metric_type"] == "system" and fields["metric_name"] not in SYSTEM_ALARM_METRICS:
            raise invalid(
                f"MetricName {fields['metric_name']!r} is not a system metric the fake evaluates "
                f"(one of {', '.join(SYSTEM_ALARM_METRICS)})."
            )
        if fields["comparison_operator"] not in ALARM_COMPARISONS:
            raise invalid(
                f"ComparisonOperator {fields['comparison_operator']!r} is not one of "
                f"{', '.join(ALARM_COMPARISONS)}."
            )
        if fields["statistics"] not in ("Average", "Minimum", "Maximum"):
            raise invalid(f"Statistics {fields['statistics']!r} is not one of Average, Minimum, Maximum.")
        alarm = Alarm(alarm_id=self.cloud.new_id("asalarm-", 20), group_id=group_id, **fields)
        self.alarms[alarm.alarm_id] = alarm
        self._arm_alarm(alarm, self.cloud.now_s() + alarm.period_s)
        return alarm

    def _arm_alarm(self, alarm: Alarm, due_s: float) -> None:
        def evaluate(at: float) -> None:
            if self.alarms.get(alarm.alarm_id) is alarm:
                self.evaluate_alarm(alarm, at)
                self._arm_alarm(alarm, at + alarm.period_s)

        self.cloud.timers.schedule(due_s, evaluate, f"ess alarm {alarm.alarm_id}")

    def _alarm_value(self, alarm: Alarm, group: ScalingGroup, at: float) -> float | None:
        """The group's value of the alarm metric over the last Period: per instance the statistic, then the
        mean (Average), the lowest (Minimum) or the highest (Maximum) across the group's instances."""
        cms = self.cloud.cms
        end_ms = int(at * 1000)
        start_ms = end_ms - alarm.period_s * 1000 - 1  # the evaluation window includes its first instant
        if alarm.metric_type == "system":
            namespace, metric = "acs_ecs_dashboard", SYSTEM_ALARM_METRICS[alarm.metric_name]
            members = [
                i.instance_id
                for i in self.group_instances(group)
                if i.lifecycle_state in ("InService", "Protected")
            ]
            series = cms.matching(namespace, metric, [{"instanceId": m} for m in members]) if members else []
        else:
            namespace, metric = self.cloud.custom_namespace, alarm.metric_name
            wanted = {
                d["DimensionKey"]: d["DimensionValue"] for d in alarm.dimensions if d.get("DimensionKey")
            }
            series = cms.matching(namespace, metric, [wanted] if wanted else None)
        per_instance = []
        for one in series:
            lo, hi = one.window(start_ms, end_ms)
            if lo < hi:
                per_instance.append(one.stats(lo, hi)[alarm.statistics])
        if not per_instance:
            return None
        if alarm.statistics == "Maximum":
            return max(per_instance)
        if alarm.statistics == "Minimum":
            return min(per_instance)
        return sum(per_instance) / len(per_instance)

    def evaluate_alarm(self, alarm: Alarm, at: float) -> None:
        """One evaluation: EvaluationCount consecutive breaches put the alarm in ALARM, and each evaluation in
        ALARM executes its rules unless the group is in cooldown (only alarm-triggered activities honour it,
        section 1.1)."""
        group = self.groups.get(alarm.group_id)
        if group is None or not alarm.enabled:
            return
        value = self._alarm_value(alarm, group, at)
        if value is None:
            alarm.state, alarm.breaches = "INSUFFICIENT_DATA", 0
            return
        if not ALARM_COMPARISONS[alarm.comparison_operator](value, alarm.threshold):
            alarm.state, alarm.breaches = "OK", 0
            return
        alarm.breaches += 1
        if alarm.breaches < alarm.evaluation_count:
            return
        alarm.state = "ALARM"
        if at < group.cooldown_until_s or group.lifecycle_state != "Active":
            return
        for ari in alarm.alarm_actions:
            try:
                self.execute_scaling_rule(
                    ari, breach_threshold=alarm.threshold, metric_value=value, trigger="Cms"
                )
            except AliyunError as err:
                alarm.last_error = err.code  # NoChange, InProgress, ...: ESS rejects, the alarm stays

    def delete_alarm(self, alarm_id: str) -> None:
        if alarm_id not in self.alarms:
            raise not_found("InvalidAlarmTaskId.NotFound", f"alarm task {alarm_id!r}")
        del self.alarms[alarm_id]

    # ==== tests and state ===================================================================================
    def create_group_for_tests(
        self,
        *,
        name: str,
        min_size: int,
        max_size: int,
        desired_capacity: int | None,
        instance_type: str,
        scaling_policy: str,
        region_id: str,
        enable: bool,
        in_service: int,
        default_cooldown_s: int,
    ) -> str:
        group = self.create_scaling_group(
            region_id=region_id,
            name=name,
            min_size=min_size,
            max_size=max_size,
            desired_capacity=desired_capacity,
            default_cooldown_s=default_cooldown_s,
            scaling_policy=scaling_policy,
            removal_policies=[],
            vswitch_ids=["vsw-fake-a"],
            health_check_types=["ECS"],
            deletion_protection=False,
            multi_az_policy=None,
            lifecycle_hooks=[],
            tags=[],
            stop_instance_timeout_s=None,
            max_instance_lifetime_s=None,
        )
        config = self.create_scaling_configuration(
            group.group_id, name=f"{name}-config", instance_types=[instance_type], image_id=None, extra={}
        )
        self._activate_config(group, config.config_id)
        if not enable:
            return group.group_id
        group.lifecycle_state = "Active"
        if in_service:
            if group.desired_enabled:
                group.desired_capacity = max(group.desired_capacity or 0, in_service)
            activity = self._new_activity(group, "Instances created for a test.", trigger="APIs")
            self._scale_out(group, activity, in_service)
            # Boot at once: ECS Running now, ESS InService, the activity done.
            now = self.cloud.now_s()
            for instance_id in activity.created:
                ecs_inst = self.cloud.ecs.instances[instance_id]
                self.cloud.ecs._set_status(ecs_inst, "Running", now)
            self._finish_if_done(activity, now)
        self._converge(group, "The scaling group is enabled.")
        return group.group_id

    def reset(self) -> None:
        self.__init__(self.cloud)  # type: ignore[misc]

    def state(self) -> dict[str, Any]:
        return {
            "groups": {
                gid: {
                    **self.group_as_api(g),
                    "instances": {i.instance_id: i.lifecycle_state for i in self.group_instances(g)},
                }
                for gid, g in self.groups.items()
            },
            "activities_in_progress": [
                a.activity_id for a in self.activities.values() if a.status_code == "InProgress"
            ],
            "scheduled_tasks": {
                tid: {**t.as_api(), "NextFireTime": iso_s(t.next_fire_s), "History": t.history}
                for tid, t in self.scheduled_tasks.items()
            },
            "lifecycle_actions": {
                tok: a.as_api() for tok, a in self.lifecycle_actions.items() if a.status == "Pending"
            },
        }


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


def _opt_int(value: Any) -> int | None:
    return None if value is None or value == "" else int(float(value))


def _opt_float(value: Any) -> float | None:
    return None if value is None or value == "" else float(value)
