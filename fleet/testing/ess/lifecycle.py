"""Lifecycle hooks and the lifecycle actions they open: timeouts, heartbeats, completion."""

from __future__ import annotations

from fleet.testing.core.errors import AliyunError, invalid, not_found
from fleet.testing.ess.base import (
    MAX_LIFECYCLE_HOOKS,
    EssBase,
    LifecycleAction,
    LifecycleHook,
    ScalingActivity,
    ScalingGroup,
    ScalingInstance,
)


class LifecycleHooksMixin(EssBase):
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
                # DescribeLifecycleActions reports an action the timeout ended as Timeout, one ended by
                # CompleteLifecycleAction as Completed
                self._complete(action, hook.default_result if hook else "CONTINUE", at, status="Timeout")

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

    def _complete(self, action: LifecycleAction, result: str, at: float, status: str = "Completed") -> None:
        action.status = status
        action.result = result
        group = self.groups.get(action.group_id)
        activity = self.activities.get(action.activity_id)
        for instance_id in list(action.instance_ids):
            inst = self.instances.get(instance_id)
            if inst is None or group is None:
                continue
            inst.waiting_tokens.discard(action.token)
            if action.transition == "SCALE_OUT":
                self._complete_scale_out(group, inst, activity, result, at)
            elif inst.lifecycle_state == "Removing:Wait":
                self._complete_scale_in(group, inst, activity, result, at)
        if activity is not None:
            self._finish_if_done(activity, at)

    def _complete_scale_out(
        self,
        group: ScalingGroup,
        inst: ScalingInstance,
        activity: ScalingActivity | None,
        result: str,
        at: float,
    ) -> None:
        if result == "CONTINUE":
            self._maybe_in_service(inst, at)
        elif inst.lifecycle_state in ("Pending", "Pending:Wait"):
            # ABANDON (or ROLLBACK) on scale-out: the instance is released, the activity fails for it.
            for other in list(inst.waiting_tokens):
                self._discard_from_action(other, inst.instance_id)
            if activity is not None:
                activity.pending.discard(inst.instance_id)
                activity.failed.append(inst.instance_id)
            self._drop_instance(group, inst, release=True)
            if group.desired_enabled and group.desired_capacity:
                group.desired_capacity = max(group.min_size, group.desired_capacity - 1)

    def _complete_scale_in(
        self,
        group: ScalingGroup,
        inst: ScalingInstance,
        activity: ScalingActivity | None,
        result: str,
        at: float,
    ) -> None:
        if result == "ROLLBACK":
            for other in list(inst.waiting_tokens):
                self._discard_from_action(other, inst.instance_id)
            inst.lifecycle_state = "InService"
            if activity is not None:
                activity.pending.discard(inst.instance_id)
                activity.failed.append(inst.instance_id)
            if group.desired_enabled:
                group.desired_capacity = min(group.max_size, (group.desired_capacity or 0) + 1)
        elif not inst.waiting_tokens:
            self._begin_removal(inst, at)
