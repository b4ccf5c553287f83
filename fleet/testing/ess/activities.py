"""Scaling activities: how a group converges to its target, scale-out and scale-in, instance removal,
and what ECS status changes do to a group's instances.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.testing.core.errors import AliyunError
from fleet.testing.ess.base import (
    MAX_ACTIVITIES_PER_GROUP,
    MAX_CONVERGE_ROUNDS,
    ScalingActivity,
    ScalingConfiguration,
    ScalingGroup,
    ScalingInstance,
)
from fleet.testing.ess.placement import PlacementMixin

if TYPE_CHECKING:
    from fleet.testing.ecs.models import Instance


class ActivitiesMixin(PlacementMixin):
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
        if activity.failed or activity.shortfall:
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
        if counted < target and self.cloud.now_s() < group.retry_not_before_s:
            return False  # stock refused the last try: the retry timer re-checks
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
        # Economical mode: start Stopped instances first (section 1.3), then those still stopping.
        new_ids = self._restart_stopped(group, activity, count)
        new_ids += self._claim_stopping(group, activity, count - len(new_ids))
        # New instances; keep TotalCapacity (with Stopped) within MaxSize by releasing Stopped ones first.
        to_create = count - len(new_ids)
        room = group.max_size - self._toward_max(group)
        if to_create > room:
            leftover = [i for i in self.group_instances(group) if i.lifecycle_state == "Stopped"]
            for inst in leftover[: to_create - room]:
                self._drop_instance(group, inst, release=True)
        for made in range(to_create):
            created = self._create_member(group, config, activity)
            if created is None:
                self._record_no_stock(group, activity, to_create - made)
                break
            new_ids.append(created)
        if hooks and new_ids:
            for inst_id in new_ids:
                self.instances[inst_id].lifecycle_state = "Pending:Wait"
            for hook in hooks:
                self._open_lifecycle_action(hook, activity, new_ids)

    def _restart_stopped(self, group: ScalingGroup, activity: ScalingActivity, count: int) -> list[str]:
        """Start up to ``count`` Stopped members; one whose start fails for stock is released
        (section 1.3)."""
        started: list[str] = []
        for inst in [i for i in self.group_instances(group) if i.lifecycle_state == "Stopped"]:
            if len(started) >= count:
                break
            ecs_inst = self.cloud.ecs.instances.get(inst.instance_id)
            if ecs_inst is None or ecs_inst.status != "Stopped":
                continue
            try:
                self.cloud.ecs.start_instance(inst.instance_id)
            except AliyunError as err:
                activity.error_messages.append(
                    {"Code": err.code, "Message": err.message, "FailedInstanceIds": [inst.instance_id]}
                )
                self._drop_instance(group, inst, release=True, activity=activity)
                continue
            self._reassign(inst, activity)
            inst.lifecycle_state = "Pending"
            inst.booted = False
            activity.started.append(inst.instance_id)
            started.append(inst.instance_id)
        return started

    def _claim_stopping(self, group: ScalingGroup, activity: ScalingActivity, count: int) -> list[str]:
        """Recycled members whose ECS instance is still stopping: start each as soon as it has stopped rather
        than create a new instance beside it."""
        claimed: list[str] = []
        for inst in self.group_instances(group):
            if len(claimed) >= count:
                break
            if not inst.awaiting_stop or inst.restart_when_stopped:
                continue
            self._reassign(inst, activity)
            inst.awaiting_stop = False
            inst.restart_when_stopped = True
            inst.lifecycle_state = "Pending"
            inst.booted = False
            activity.started.append(inst.instance_id)
            claimed.append(inst.instance_id)
        return claimed

    def _create_member(
        self, group: ScalingGroup, config: ScalingConfiguration, activity: ScalingActivity
    ) -> str | None:
        placement = self._place(group, config)
        if placement is None:
            return None
        spot_strategy = config.spot_strategy if placement.spot else "NoSpot"
        ecs_inst = self.cloud.ecs.create_instance(
            placement.instance_type,
            region_id=group.region_id,
            zone_id=placement.zone_id,
            status="Pending",
            image_id=config.image_id,
            instance_name=config.extra.get("InstanceName", ""),
            spot_strategy=spot_strategy,
            spot_price_limit=(
                config.spot_price_limits.get(placement.instance_type) if placement.spot else None
            ),
            vswitch_id=placement.vswitch_id,
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
            spot_strategy=spot_strategy,
        )
        self.instances[inst.instance_id] = inst
        group.instance_ids[inst.instance_id] = None
        activity.created.append(inst.instance_id)
        activity.pending.add(inst.instance_id)
        return inst.instance_id

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
            inst.booted = False
            ecs_inst = self.cloud.ecs.instances.get(inst.instance_id)
            if ecs_inst is not None and ecs_inst.status in ("Running", "Starting", "Pending"):
                # ESS reports the instance Stopped (and the activity done) only once ECS has stopped it.
                self.cloud.ecs.stop_instance(inst.instance_id, stopped_mode="StopCharging")
                inst.awaiting_stop = True
                return
            self._recycled(inst, at)
            return
        elif group is not None:
            self._drop_instance(group, inst, release=owned, activity=activity)
        if activity is not None:
            activity.pending.discard(inst.instance_id)
            self._finish_if_done(activity, at)

    def _recycled(self, inst: ScalingInstance, at: float) -> None:
        """ECS has stopped a recycled member: it stays in the group as Stopped (economical mode)."""
        inst.awaiting_stop = False
        inst.lifecycle_state = "Stopped"
        activity = self.activities.get(inst.activity_id or "")
        if activity is not None:
            activity.stopped.append(inst.instance_id)
            activity.pending.discard(inst.instance_id)
            self._finish_if_done(activity, at)

    def _stopped_member(self, inst: ScalingInstance, at: float) -> bool:
        """ECS reports a member Stopped; True when economical mode accounts for it."""
        if inst.awaiting_stop:
            self._recycled(inst, at)
            return True
        if inst.restart_when_stopped:
            inst.restart_when_stopped = False
            group = self.groups[inst.group_id]
            activity = self.activities.get(inst.activity_id or "")
            try:
                self.cloud.ecs.start_instance(inst.instance_id)
            except AliyunError as err:
                if activity is not None:
                    activity.error_messages.append(
                        {"Code": err.code, "Message": err.message, "FailedInstanceIds": [inst.instance_id]}
                    )
                    activity.pending.discard(inst.instance_id)
                    activity.failed.append(inst.instance_id)
                self._drop_instance(group, inst, release=True, activity=activity)
                if activity is not None:
                    self._finish_if_done(activity, at)
            return True
        return False

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
        elif ecs_inst.status == "Stopped" and self._stopped_member(inst, at):
            return
        elif ecs_inst.status == "Deleted" and inst.reclaimed:
            activity = self.activities.get(inst.activity_id or "")
            self._drop_instance(group, inst, release=False, activity=activity)
            if activity is not None:
                activity.pending.discard(inst.instance_id)
                self._finish_if_done(activity, at)
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

    def _on_spot_reclaim(self, ecs_inst: Instance, at: float) -> None:
        """A member's spot instance is to be reclaimed. With SpotInstanceRemedy, ESS replaces it now: the
        replacement is created in one activity and the old one leaves the group when ECS releases it; without,
        the release fails the health check and the group replaces it afterwards."""
        inst = self.instances.get(ecs_inst.instance_id)
        group = self.groups.get(inst.group_id) if inst is not None else None
        if inst is None or group is None or not group.spot_instance_remedy:
            return
        if inst.lifecycle_state not in ("InService", "Pending", "Pending:Wait"):
            return
        activity = self._new_activity(
            group,
            f'The preemptible instance "{inst.instance_id}" is about to be reclaimed; ESS replaces it.',
            'Add "1" ECS instance(s), remove "1" ECS instance(s)',
            trigger="Ess",
        )
        inst.reclaimed = True
        self._reassign(inst, activity)
        inst.lifecycle_state = "Removing"
        self._scale_out(group, activity, 1)
        self._finish_if_done(activity, at)
