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

from collections.abc import Callable
from typing import Any

from fleet.testing.core.timeutil import iso_s
from fleet.testing.ess.activities import ActivitiesMixin
from fleet.testing.ess.alarms import AlarmsMixin
from fleet.testing.ess.base import (
    ADJUSTMENT_TYPES,
    ALARM_COMPARISONS,
    CAPACITY_FIELDS,
    COUNTED_STATES,
    MAX_ACTIVITIES_PER_GROUP,
    MAX_CLIENT_TOKENS,
    MAX_CONVERGE_ROUNDS,
    MAX_LIFECYCLE_HOOKS,
    REMOVING_STATES,
    RULE_TYPES,
    SCALING_POLICIES,
    STABLE_STATES,
    SYSTEM_ALARM_METRICS,
    Alarm,
    LifecycleAction,
    LifecycleHook,
    ScalingActivity,
    ScalingConfiguration,
    ScalingGroup,
    ScalingInstance,
    ScalingRule,
    ScheduledTask,
)
from fleet.testing.ess.groups import GroupsMixin
from fleet.testing.ess.instances import InstancesMixin
from fleet.testing.ess.lifecycle import LifecycleHooksMixin
from fleet.testing.ess.placement import MULTI_AZ_POLICIES, SPOT_STRATEGIES
from fleet.testing.ess.rules import RulesMixin
from fleet.testing.ess.scaling import ScalingMixin
from fleet.testing.ess.scheduled import ScheduledTasksMixin

__all__ = [
    "ADJUSTMENT_TYPES",
    "ALARM_COMPARISONS",
    "CAPACITY_FIELDS",
    "COUNTED_STATES",
    "MAX_ACTIVITIES_PER_GROUP",
    "MAX_CLIENT_TOKENS",
    "MAX_CONVERGE_ROUNDS",
    "MAX_LIFECYCLE_HOOKS",
    "MULTI_AZ_POLICIES",
    "SPOT_STRATEGIES",
    "REMOVING_STATES",
    "RULE_TYPES",
    "SCALING_POLICIES",
    "STABLE_STATES",
    "SYSTEM_ALARM_METRICS",
    "Alarm",
    "EssBackend",
    "LifecycleAction",
    "LifecycleHook",
    "ScalingActivity",
    "ScalingConfiguration",
    "ScalingGroup",
    "ScalingInstance",
    "ScalingRule",
    "ScheduledTask",
]


class EssBackend(
    GroupsMixin,
    ActivitiesMixin,
    ScalingMixin,
    InstancesMixin,
    LifecycleHooksMixin,
    RulesMixin,
    ScheduledTasksMixin,
    AlarmsMixin,
):
    """The fake ESS of one cloud: each mixin one part of the API (as moto splits EC2) over EssBase."""

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
        setup: Callable[[str], None] | None = None,
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
        if setup is not None:
            setup(group.group_id)  # before the first launch: the start fleet is bought as the group says
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
        self.__init__(self.cloud)  # type: ignore[misc]  # a fresh state in place: references to the backend stay

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
