"""ESS request handlers: parse the flattened query, call the backend, answer the real shapes (plain
arrays)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fleet.testing.core.errors import AliyunError, invalid
from fleet.testing.core.params import Params, parse_time_s
from fleet.testing.core.responses import BaseResponse, page
from fleet.testing.ess.models import EssBackend, ScalingConfiguration, ScalingGroup


class EssResponse(BaseResponse):
    ACTIONS = frozenset(
        {
            "CreateScalingGroup",
            "EnableScalingGroup",
            "DisableScalingGroup",
            "DescribeScalingGroups",
            "ModifyScalingGroup",
            "DeleteScalingGroup",
            "CreateScalingConfiguration",
            "ModifyScalingConfiguration",
            "DescribeScalingConfigurations",
            "CreateScalingRule",
            "DescribeScalingRules",
            "DeleteScalingRule",
            "ExecuteScalingRule",
            "ScaleWithAdjustment",
            "CreateScheduledTask",
            "ModifyScheduledTask",
            "DescribeScheduledTasks",
            "DeleteScheduledTask",
            "CreateAlarm",
            "DescribeAlarms",
            "DeleteAlarm",
            "EnableAlarm",
            "DisableAlarm",
            "DescribeScalingInstances",
            "EnterStandby",
            "ExitStandby",
            "SetInstancesProtection",
            "RemoveInstances",
            "AttachInstances",
            "CreateLifecycleHook",
            "DescribeLifecycleHooks",
            "DeleteLifecycleHook",
            "DescribeLifecycleActions",
            "CompleteLifecycleAction",
            "RecordLifecycleActionHeartbeat",
            "DescribeScalingActivities",
            "SetGroupDeletionProtection",
            "SuspendProcesses",
            "ResumeProcesses",
        }
    )

    @property
    def ess(self) -> EssBackend:
        return self.cloud.ess

    def _region(self) -> str:
        return self.params.str("RegionId") or self.cloud.region_id

    def _signature(self, action: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        return action, tuple(sorted((k, v) for k, v in self.params.raw.items() if k != "ClientToken"))

    # ---- groups --------------------------------------------------------------------------------------------
    def create_scaling_group(self) -> dict[str, Any]:
        p = self.params

        def run() -> dict[str, Any]:
            vswitches = p.list("VSwitchIds") or p.one("VSwitchId")
            group = self.ess.create_scaling_group(
                region_id=self._region(),
                name=p.str("ScalingGroupName"),
                min_size=p.int("MinSize", required=True),
                max_size=p.int("MaxSize", required=True),
                desired_capacity=p.int("DesiredCapacity"),
                default_cooldown_s=p.int("DefaultCooldown", 300),
                scaling_policy=p.str("ScalingPolicy", "release"),
                removal_policies=p.list("RemovalPolicies"),
                vswitch_ids=vswitches,
                health_check_types=p.list("HealthCheckTypes") or p.one("HealthCheckType"),
                deletion_protection=bool(p.bool("GroupDeletionProtection", False)),
                multi_az_policy=p.str("MultiAZPolicy"),
                lifecycle_hooks=p.objects("LifecycleHooks"),
                tags=p.objects("Tags"),
                stop_instance_timeout_s=p.int("StopInstanceTimeout"),
                max_instance_lifetime_s=p.int("MaxInstanceLifetime"),
            )
            try:
                self._capacity_mix(group)
            except Exception:
                self.ess.groups.pop(group.group_id, None)  # nothing half-applied
                raise
            return {"ScalingGroupId": group.group_id}

        return self.ess.idempotent(p.str("ClientToken"), self._signature("CreateScalingGroup"), run)

    def _capacity_mix(self, group: ScalingGroup) -> None:
        p = self.params
        self.ess.set_capacity_mix(
            group,
            multi_az_policy=p.str("MultiAZPolicy"),
            on_demand_base_capacity=p.int("OnDemandBaseCapacity"),
            on_demand_percentage_above_base=p.int("OnDemandPercentageAboveBaseCapacity"),
            spot_instance_pools=p.int("SpotInstancePools"),
            spot_instance_remedy=p.bool("SpotInstanceRemedy"),
            compensate_with_on_demand=p.bool("CompensateWithOnDemand"),
        )

    def describe_scaling_groups(self) -> dict[str, Any]:
        p = self.params
        groups = self.ess.describe_scaling_groups(
            group_ids=p.list("ScalingGroupIds"),
            names=p.list("ScalingGroupNames"),
            name=p.str("ScalingGroupName"),
            region_id=p.str("RegionId"),
        )
        return _paged_answer("ScalingGroups", groups, p, self.ess.group_as_api)

    def modify_scaling_group(self) -> dict[str, Any]:
        p = self.params
        self._capacity_mix(self.ess.group(p.req("ScalingGroupId")))
        self.ess.modify_scaling_group(
            p.req("ScalingGroupId"),
            min_size=p.int("MinSize"),
            max_size=p.int("MaxSize"),
            desired_capacity=p.int("DesiredCapacity"),
            disable_desired_capacity=p.bool("DisableDesiredCapacity"),
            default_cooldown_s=p.int("DefaultCooldown"),
            scaling_policy=p.str("ScalingPolicy"),
            removal_policies=p.list("RemovalPolicies"),
            name=p.str("ScalingGroupName"),
            active_config_id=p.str("ActiveScalingConfigurationId"),
            deletion_protection=p.bool("GroupDeletionProtection"),
            health_check_types=p.list("HealthCheckTypes") or (p.one("HealthCheckType") or None),
            vswitch_ids=p.list("VSwitchIds"),
            stop_instance_timeout_s=p.int("StopInstanceTimeout"),
            max_instance_lifetime_s=p.int("MaxInstanceLifetime"),
        )
        return {}

    def enable_scaling_group(self) -> dict[str, Any]:
        p = self.params
        self.ess.enable_scaling_group(
            p.req("ScalingGroupId"), p.str("ActiveScalingConfigurationId"), p.list("InstanceIds")
        )
        return {}

    def disable_scaling_group(self) -> dict[str, Any]:
        self.ess.disable_scaling_group(self.params.req("ScalingGroupId"))
        return {}

    def delete_scaling_group(self) -> dict[str, Any]:
        self.ess.delete_scaling_group(
            self.params.req("ScalingGroupId"), bool(self.params.bool("ForceDelete", False))
        )
        return {}

    def set_group_deletion_protection(self) -> dict[str, Any]:
        group = self.ess.group(self.params.req("ScalingGroupId"))
        group.deletion_protection = bool(self.params.bool("GroupDeletionProtection", False))
        return {}

    def suspend_processes(self) -> dict[str, Any]:
        group = self.ess.group(self.params.req("ScalingGroupId"))
        for process in self.params.list("Processes"):
            if process not in group.suspended_processes:
                group.suspended_processes.append(process)
        return {}

    def resume_processes(self) -> dict[str, Any]:
        group = self.ess.group(self.params.req("ScalingGroupId"))
        resumed = set(self.params.list("Processes"))
        group.suspended_processes = [x for x in group.suspended_processes if x not in resumed]
        return {}

    # ---- configurations ------------------------------------------------------------------------------------
    def create_scaling_configuration(self) -> dict[str, Any]:
        p = self.params
        types = p.list("InstanceTypes") or p.one("InstanceType")
        if p.str("InstanceType") and p.str("InstanceType") not in types:
            types.insert(0, p.req("InstanceType"))
        extra = {
            k: v
            for k, v in p.raw.items()
            if k in ("SecurityGroupId", "InstanceName", "HostName", "UserData", "RamRoleName", "KeyPairName")
        }
        limits = {
            str(o.get("InstanceType")): float(o.get("PriceLimit") or 0) for o in p.objects("SpotPriceLimits")
        }
        probe = ScalingConfiguration("", "", "", [], "", 0.0)
        self.ess.set_spot_strategy(probe, p.str("SpotStrategy"), limits)  # refuse before creating anything
        config = self.ess.create_scaling_configuration(
            p.req("ScalingGroupId"),
            name=p.str("ScalingConfigurationName"),
            instance_types=types,
            image_id=p.str("ImageId"),
            extra=extra,
        )
        self.ess.set_spot_strategy(config, p.str("SpotStrategy"), limits)
        return {"ScalingConfigurationId": config.config_id}

    def modify_scaling_configuration(self) -> dict[str, Any]:
        """InstanceTypes (priority order), SpotStrategy and SpotPriceLimits of an existing configuration; the
        group retries what stock refused with the new one at once."""
        p = self.params
        config_id = p.req("ScalingConfigurationId")
        config = self.ess.configurations.get(config_id)
        if config is None:
            raise AliyunError(
                "InvalidScalingConfigurationId.NotFound",
                f"The specified scaling configuration ({config_id}) does not exist.",
                404,
            )
        limits = {
            str(o.get("InstanceType")): float(o.get("PriceLimit") or 0) for o in p.objects("SpotPriceLimits")
        }
        types = p.list("InstanceTypes") or ([p.req("InstanceType")] if p.str("InstanceType") else [])
        probe = ScalingConfiguration("", "", "", [], "", 0.0, spot_strategy=config.spot_strategy)
        probe.spot_price_limits = dict(config.spot_price_limits)
        self.ess.set_spot_strategy(probe, p.str("SpotStrategy"), limits)
        if types:
            config.instance_types = types
        self.ess.set_spot_strategy(config, p.str("SpotStrategy"), limits)
        group = self.ess.groups.get(config.group_id)
        if group is not None and group.active_config_id == config_id:
            group.retry_not_before_s = 0.0
            self.ess._converge(group, "The scaling configuration is modified.")
        return {}

    def describe_scaling_configurations(self) -> dict[str, Any]:
        p = self.params
        configs = list(self.ess.configurations.values())
        if p.str("ScalingGroupId"):
            self.ess.group(p.str("ScalingGroupId"))
            configs = [c for c in configs if c.group_id == p.str("ScalingGroupId")]
        if p.list("ScalingConfigurationIds"):
            wanted = set(p.list("ScalingConfigurationIds"))
            configs = [c for c in configs if c.config_id in wanted]
        if p.list("ScalingConfigurationNames"):
            wanted = set(p.list("ScalingConfigurationNames"))
            configs = [c for c in configs if c.name in wanted]
        return _paged_answer("ScalingConfigurations", configs, p)

    # ---- rules ---------------------------------------------------------------------------------------------
    def create_scaling_rule(self) -> dict[str, Any]:
        p = self.params
        rule = self.ess.create_scaling_rule(
            p.req("ScalingGroupId"),
            name=p.str("ScalingRuleName"),
            rule_type=p.str("ScalingRuleType", "SimpleScalingRule") or "SimpleScalingRule",
            adjustment_type=p.str("AdjustmentType"),
            adjustment_value=p.int("AdjustmentValue"),
            min_adjustment_magnitude=p.int("MinAdjustmentMagnitude"),
            cooldown_s=p.int("Cooldown"),
            step_adjustments=p.objects("StepAdjustments"),
            metric_name=p.str("MetricName"),
            target_value=p.float("TargetValue"),
            disable_scale_in=bool(p.bool("DisableScaleIn", False)),
            estimated_instance_warmup_s=p.int("EstimatedInstanceWarmup"),
        )
        return {"ScalingRuleId": rule.rule_id, "ScalingRuleAri": rule.ari}

    def describe_scaling_rules(self) -> dict[str, Any]:
        p = self.params
        rules = list(self.ess.rules.values())
        if p.str("ScalingGroupId"):
            rules = [r for r in rules if r.group_id == p.str("ScalingGroupId")]
        for key, attr in (
            ("ScalingRuleIds", "rule_id"),
            ("ScalingRuleAris", "ari"),
            ("ScalingRuleNames", "name"),
        ):
            wanted = set(p.list(key))
            if wanted:
                rules = [r for r in rules if getattr(r, attr) in wanted]
        if p.str("ScalingRuleType"):
            rules = [r for r in rules if r.rule_type == p.str("ScalingRuleType")]
        return _paged_answer("ScalingRules", rules, p)

    def delete_scaling_rule(self) -> dict[str, Any]:
        rule_id = self.params.req("ScalingRuleId")
        rule = self.ess.rules.pop(rule_id, None)
        if rule is None:
            raise AliyunError(
                "InvalidScalingRuleId.NotFound", f"The specified scaling rule {rule_id} does not exist.", 404
            )
        self.ess.rules_by_ari.pop(rule.ari, None)
        return {}

    def execute_scaling_rule(self) -> dict[str, Any]:
        p = self.params

        def run() -> dict[str, Any]:
            activity = self.ess.execute_scaling_rule(
                p.req("ScalingRuleAri"),
                breach_threshold=p.float("BreachThreshold"),
                metric_value=p.float("MetricValue"),
            )
            return {"ScalingActivityId": activity.activity_id}

        return self.ess.idempotent(p.str("ClientToken"), self._signature("ExecuteScalingRule"), run)

    def scale_with_adjustment(self) -> dict[str, Any]:
        p = self.params

        def run() -> dict[str, Any]:
            if p.str("ExecutionMode") == "PlanOnly":
                raise invalid("ExecutionMode PlanOnly is not faked.", "NotImplemented")
            group_id = p.req("ScalingGroupId")
            adjustment_type = p.req("AdjustmentType")
            activity = self.ess.scale(
                group_id,
                adjustment_type,
                p.int("AdjustmentValue", required=True) or 0,
                min_adjustment_magnitude=p.int("MinAdjustmentMagnitude"),
                cause='A user requests to scale with adjustment, changing the Total Capacity from "{old}" to '
                '"{new}".',
            )
            synchronous = bool(p.bool("SyncActivity", False))
            group = self.ess.group(group_id)
            activity_type = (
                "CapacityChange" if group.desired_enabled and not synchronous else "ScalingActivity"
            )
            return {"ScalingActivityId": activity.activity_id, "ActivityType": activity_type}

        return self.ess.idempotent(p.str("ClientToken"), self._signature("ScaleWithAdjustment"), run)

    # ---- scheduled tasks -----------------------------------------------------------------------------------
    def _task_fields(self) -> dict[str, Any]:
        p = self.params
        fields: dict[str, Any] = {}
        mapping: dict[str, tuple[str, Callable[[str], object]]] = {
            "ScheduledTaskName": ("name", p.str),
            "Description": ("description", p.str),
            "ScalingGroupId": ("group_id", p.str),
            "ScheduledAction": ("scheduled_action", p.str),
            "MinValue": ("min_value", p.int),
            "MaxValue": ("max_value", p.int),
            "DesiredCapacity": ("desired_capacity", p.int),
            "RecurrenceType": ("recurrence_type", p.str),
            "RecurrenceValue": ("recurrence_value", p.str),
            "LaunchExpirationTime": ("launch_expiration_s", p.int),
            "TaskEnabled": ("enabled", p.bool),
        }
        for key, (attr, read) in mapping.items():
            if key in p:
                fields[attr] = read(key)
        if "LaunchTime" in p:
            fields["launch_s"] = parse_time_s(p.req("LaunchTime"), "LaunchTime")
        if "RecurrenceEndTime" in p:
            fields["recurrence_end_s"] = parse_time_s(p.req("RecurrenceEndTime"), "RecurrenceEndTime")
        return fields

    def create_scheduled_task(self) -> dict[str, Any]:
        fields = self._task_fields()
        if "launch_s" not in fields:
            raise AliyunError("MissingParameter.LaunchTime", "LaunchTime is required.", 400)
        task = self.ess.create_scheduled_task(
            region_id=self._region(),
            name=fields.get("name"),
            launch_s=fields["launch_s"],
            group_id=fields.get("group_id"),
            scheduled_action=fields.get("scheduled_action"),
            min_value=fields.get("min_value"),
            max_value=fields.get("max_value"),
            desired_capacity=fields.get("desired_capacity"),
            recurrence_type=fields.get("recurrence_type"),
            recurrence_value=fields.get("recurrence_value"),
            recurrence_end_s=fields.get("recurrence_end_s"),
            launch_expiration_s=fields.get("launch_expiration_s"),
            enabled=fields.get("enabled", True) is not False,
            description=fields.get("description") or "",
        )
        return {"ScheduledTaskId": task.task_id}

    def modify_scheduled_task(self) -> dict[str, Any]:
        self.ess.modify_scheduled_task(self.params.req("ScheduledTaskId"), self._task_fields())
        return {}

    def describe_scheduled_tasks(self) -> dict[str, Any]:
        p = self.params
        tasks = list(self.ess.scheduled_tasks.values())
        if p.str("ScalingGroupId"):
            tasks = [t for t in tasks if t.group_id == p.str("ScalingGroupId")]
        for key, attr in (
            ("ScheduledTaskIds", "task_id"),
            ("ScheduledTaskNames", "name"),
            ("ScheduledActions", "scheduled_action"),
        ):
            wanted = set(p.list(key))
            if wanted:
                tasks = [t for t in tasks if getattr(t, attr) in wanted]
        if p.str("TaskName"):
            tasks = [t for t in tasks if t.name == p.str("TaskName")]
        if p.bool("TaskEnabled") is not None:
            tasks = [t for t in tasks if t.enabled == p.bool("TaskEnabled")]
        return _paged_answer("ScheduledTasks", tasks, p)

    def delete_scheduled_task(self) -> dict[str, Any]:
        self.ess.delete_scheduled_task(self.params.req("ScheduledTaskId"))
        return {}

    # ---- alarms --------------------------------------------------------------------------------------------
    def create_alarm(self) -> dict[str, Any]:
        p = self.params
        dims = [
            {"DimensionKey": d.get("DimensionKey"), "DimensionValue": d.get("DimensionValue")}
            for d in p.objects("Dimensions")
        ]
        alarm = self.ess.create_alarm(
            p.req("ScalingGroupId"),
            name=p.str("Name") or "",
            description=p.str("Description") or "",
            metric_type=p.str("MetricType", "system") or "system",
            metric_name=p.req("MetricName"),
            statistics=p.str("Statistics", "Average") or "Average",
            comparison_operator=p.str("ComparisonOperator", ">=") or ">=",
            threshold=p.float("Threshold", 0.0),
            evaluation_count=p.int("EvaluationCount", 3),
            period_s=p.int("Period", 300),
            alarm_actions=p.list("AlarmActions"),
            dimensions=dims,
            group_id_cms=p.str("GroupId"),
            effective=p.str("Effective"),
        )
        return {"AlarmTaskId": alarm.alarm_id}

    def describe_alarms(self) -> dict[str, Any]:
        p = self.params
        alarms = list(self.ess.alarms.values())
        if p.str("ScalingGroupId"):
            alarms = [a for a in alarms if a.group_id == p.str("ScalingGroupId")]
        if p.str("AlarmTaskId"):
            alarms = [a for a in alarms if a.alarm_id == p.str("AlarmTaskId")]
        if p.bool("IsEnable") is not None:
            alarms = [a for a in alarms if a.enabled == p.bool("IsEnable")]
        if p.str("State"):
            alarms = [a for a in alarms if a.state == p.str("State")]
        if p.str("MetricType"):
            alarms = [a for a in alarms if a.metric_type == p.str("MetricType")]
        return _paged_answer("AlarmList", alarms, p)

    def delete_alarm(self) -> dict[str, Any]:
        self.ess.delete_alarm(self.params.req("AlarmTaskId"))
        return {"AlarmTaskId": self.params.req("AlarmTaskId")}

    def _set_alarm(self, enabled: bool) -> dict[str, Any]:
        alarm_id = self.params.req("AlarmTaskId")
        alarm = self.ess.alarms.get(alarm_id)
        if alarm is None:
            raise AliyunError(
                "InvalidAlarmTaskId.NotFound", f"The alarm task {alarm_id} does not exist.", 404
            )
        alarm.enabled = enabled
        return {}

    def enable_alarm(self) -> dict[str, Any]:
        return self._set_alarm(True)

    def disable_alarm(self) -> dict[str, Any]:
        return self._set_alarm(False)

    # ---- instances -----------------------------------------------------------------------------------------
    def describe_scaling_instances(self) -> dict[str, Any]:
        p = self.params
        states = p.list("LifecycleStates") or ([p.req("LifecycleState")] if p.str("LifecycleState") else [])
        kinds = p.list("CreationTypes") or ([p.req("CreationType")] if p.str("CreationType") else [])
        found = self.ess.describe_scaling_instances(
            group_id=p.str("ScalingGroupId"),
            instance_ids=p.list("InstanceIds"),
            lifecycle_states=states,
            health_status=p.str("HealthStatus"),
            creation_types=kinds,
            activity_id=p.str("ScalingActivityId"),
            config_id=p.str("ScalingConfigurationId"),
        )
        spot = sum(1 for i in found if i.spot_strategy != "NoSpot")
        return {**_paged_answer("ScalingInstances", found, p), "TotalSpotCount": spot}

    def enter_standby(self) -> dict[str, Any]:
        p = self.params

        def run() -> dict[str, Any]:
            activity = self.ess.enter_standby(p.req("ScalingGroupId"), p.list("InstanceIds"))
            return {"ScalingActivityId": activity.activity_id}

        return self.ess.idempotent(p.str("ClientToken"), self._signature("EnterStandby"), run)

    def exit_standby(self) -> dict[str, Any]:
        p = self.params

        def run() -> dict[str, Any]:
            activity = self.ess.exit_standby(p.req("ScalingGroupId"), p.list("InstanceIds"))
            return {"ScalingActivityId": activity.activity_id}

        return self.ess.idempotent(p.str("ClientToken"), self._signature("ExitStandby"), run)

    def set_instances_protection(self) -> dict[str, Any]:
        p = self.params
        protected = p.bool("ProtectedFromScaleIn")
        if protected is None:
            raise AliyunError(
                "MissingParameter.ProtectedFromScaleIn", "ProtectedFromScaleIn is required.", 400
            )
        self.ess.set_instances_protection(p.req("ScalingGroupId"), p.list("InstanceIds"), protected)
        return {}

    def remove_instances(self) -> dict[str, Any]:
        p = self.params

        def run() -> dict[str, Any]:
            activity, ignored = self.ess.remove_instances(
                p.req("ScalingGroupId"),
                p.list("InstanceIds"),
                remove_policy=p.str("RemovePolicy", "release") or "release",
                decrease_desired=p.bool("DecreaseDesiredCapacity", True) is not False,
                ignore_invalid=bool(p.bool("IgnoreInvalidInstance", False)),
            )
            return {"ScalingActivityId": activity.activity_id, "IgnoredInstances": ignored}

        return self.ess.idempotent(p.str("ClientToken"), self._signature("RemoveInstances"), run)

    def attach_instances(self) -> dict[str, Any]:
        p = self.params

        def run() -> dict[str, Any]:
            activity = self.ess.attach_instances(
                p.req("ScalingGroupId"),
                p.list("InstanceIds"),
                entrusted=bool(p.bool("Entrusted", False)),
                ignore_invalid=bool(p.bool("IgnoreInvalidInstance", False)),
            )
            return {"ScalingActivityId": activity.activity_id}

        return self.ess.idempotent(p.str("ClientToken"), self._signature("AttachInstances"), run)

    # ---- lifecycle hooks -----------------------------------------------------------------------------------
    def create_lifecycle_hook(self) -> dict[str, Any]:
        p = self.params
        hook = self.ess.create_lifecycle_hook(
            p.req("ScalingGroupId"),
            p.str("LifecycleHookName"),
            p.str("LifecycleTransition"),
            p.str("DefaultResult"),
            p.int("HeartbeatTimeout"),
            p.str("NotificationArn"),
            p.str("NotificationMetadata"),
        )
        return {"LifecycleHookId": hook.hook_id}

    def describe_lifecycle_hooks(self) -> dict[str, Any]:
        p = self.params
        hooks = list(self.ess.hooks.values())
        if p.str("ScalingGroupId"):
            hooks = [h for h in hooks if h.group_id == p.str("ScalingGroupId")]
        if p.list("LifecycleHookIds"):
            wanted = set(p.list("LifecycleHookIds"))
            hooks = [h for h in hooks if h.hook_id in wanted]
        if p.str("LifecycleHookName"):
            hooks = [h for h in hooks if h.name == p.str("LifecycleHookName")]
        return _paged_answer("LifecycleHooks", hooks, p)

    def delete_lifecycle_hook(self) -> dict[str, Any]:
        hook_id = self.params.str("LifecycleHookId")
        if hook_id is None:
            group_id, name = self.params.req("ScalingGroupId"), self.params.req("LifecycleHookName")
            hook_id = next(
                (h.hook_id for h in self.ess.hooks.values() if h.group_id == group_id and h.name == name),
                None,
            )
        if hook_id is None or hook_id not in self.ess.hooks:
            raise AliyunError(
                "InvalidLifecycleHookId.NotFound", "The specified lifecycle hook does not exist.", 404
            )
        del self.ess.hooks[hook_id]
        return {}

    def describe_lifecycle_actions(self) -> dict[str, Any]:
        p = self.params
        activity_id = p.req("ScalingActivityId")
        actions = [a for a in self.ess.lifecycle_actions.values() if a.activity_id == activity_id]
        if p.str("LifecycleActionStatus"):
            actions = [a for a in actions if a.status == p.str("LifecycleActionStatus")]
        return {
            "LifecycleActions": [a.as_api() for a in actions],
            "TotalCount": len(actions),
            "MaxResults": p.int("MaxResults", 10),
        }

    def complete_lifecycle_action(self) -> dict[str, Any]:
        p = self.params

        def run() -> dict[str, Any]:
            self.ess.complete_lifecycle_action(
                p.req("LifecycleHookId"), p.req("LifecycleActionToken"), p.str("LifecycleActionResult")
            )
            return {}

        return self.ess.idempotent(p.str("ClientToken"), self._signature("CompleteLifecycleAction"), run)

    def record_lifecycle_action_heartbeat(self) -> dict[str, Any]:
        # The SDK sends lower-camel keys for this one Action (aliyun-api.md section 1).
        p = self.params
        hook_id = p.str("lifecycleHookId") or p.req("LifecycleHookId")
        token = p.str("lifecycleActionToken") or p.req("LifecycleActionToken")
        timeout = p.int("heartbeatTimeout") or p.int("HeartbeatTimeout")
        self.ess.record_heartbeat(hook_id, token, timeout)
        return {}

    # ---- activities ----------------------------------------------------------------------------------------
    def describe_scaling_activities(self) -> dict[str, Any]:
        p = self.params
        group_id = p.str("ScalingGroupId")
        ids = p.list("ScalingActivityIds")
        if group_id and ids:
            raise invalid("Specify either ScalingGroupId or ScalingActivityIds, not both.")
        if group_id:
            self.ess.group(group_id)
            activities = [
                self.ess.activities[a] for a in reversed(self.ess.group_activities.get(group_id, []))
            ]
        elif ids:
            activities = [self.ess.activities[a] for a in ids if a in self.ess.activities]
        else:
            raise AliyunError(
                "MissingParameter.ScalingGroupId", "ScalingGroupId or ScalingActivityIds is required.", 400
            )
        if p.str("StatusCode"):
            activities = [a for a in activities if a.status_code == p.str("StatusCode")]
        return _paged_answer("ScalingActivities", activities, p)


def _paged_answer(
    key: str, rows: list[Any], params: Params, as_api: Callable[[Any], dict[str, Any]] | None = None
) -> dict[str, Any]:
    """One page of `rows` in ESS's list answer shape: `key` (rows as API dicts), TotalCount, paging echo."""
    items, number, size = page(rows, params)
    to_api = as_api or (lambda row: row.as_api())
    return {key: [to_api(r) for r in items], "TotalCount": len(rows), "PageNumber": number, "PageSize": size}
