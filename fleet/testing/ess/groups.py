"""Scaling groups and their scaling configurations: create, describe, modify, enable, disable, delete."""

from __future__ import annotations

from typing import Any

from fleet.testing.core.errors import AliyunError, invalid, not_found
from fleet.testing.core.timeutil import iso_min
from fleet.testing.ess.base import (
    MAX_LIFECYCLE_HOOKS,
    SCALING_POLICIES,
    EssBase,
    ScalingConfiguration,
    ScalingGroup,
    _bad_status,
    _check_sizes,
    _in_progress,
    _opt_int,
)


class GroupsMixin(EssBase):
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
            created_with_desired=desired_capacity is not None,
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
                _opt_int(hook.get("HeartbeatTimeout"), "HeartbeatTimeout"),
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
            "OnDemandBaseCapacity": group.on_demand_base_capacity,
            "OnDemandPercentageAboveBaseCapacity": group.on_demand_percentage_above_base,
            "SpotInstancePools": group.spot_instance_pools,
            "SpotInstanceRemedy": group.spot_instance_remedy,
            "CompensateWithOnDemand": group.compensate_with_on_demand,
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
        _check_desired_allowed(group, desired_capacity, disable_desired_capacity)
        new_desired = group.desired_capacity if desired_capacity is None else desired_capacity
        if disable_desired_capacity:
            new_desired = None
        _check_sizes(new_min, new_max, new_desired)
        self._check_modify(group, scaling_policy, default_cooldown_s, name, active_config_id)
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
        group.retry_not_before_s = 0.0  # an explicit change is tried at once, stock permitting
        self._converge(group, cause or "A user modifies the scaling group.")

    def _check_modify(
        self,
        group: ScalingGroup,
        scaling_policy: str | None,
        default_cooldown_s: int | None,
        name: str | None,
        active_config_id: str | None,
    ) -> None:
        """ModifyScalingGroup's checks beyond the sizes, before anything changes."""
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


def _check_desired_allowed(group: ScalingGroup, desired: int | None, disable: bool | None) -> None:
    """A DesiredCapacity for a group created without one is refused, not taken as a switch: desired capacity
    is enabled only at CreateScalingGroup (aliyun-api.md section 1.2). What the real API answers is not
    documented [INF: InvalidParameter]; a group created with it may set it again after disabling it."""
    if desired is not None and not disable and not group.created_with_desired:
        raise invalid(
            f"The scaling group {group.group_id} was created without DesiredCapacity: the expected "
            "number of instances can be enabled only by CreateScalingGroup."
        )
