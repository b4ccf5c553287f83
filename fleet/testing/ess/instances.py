"""Instances of a group: standby, protection, RemoveInstances, AttachInstances, DescribeScalingInstances."""

from __future__ import annotations

from fleet.testing.core.errors import AliyunError, invalid, not_found
from fleet.testing.ess.base import (
    COUNTED_STATES,
    EssBase,
    ScalingActivity,
    ScalingGroup,
    ScalingInstance,
    _below_min,
    _in_progress,
    _incorrect_instance_status,
)


class InstancesMixin(EssBase):
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
        activity.standby_move = True
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
        activity.standby_move = True
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
