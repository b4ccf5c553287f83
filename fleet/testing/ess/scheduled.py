"""Scheduled tasks: create, modify, delete, and firing on the fake clock."""

from __future__ import annotations

from typing import Any

from fleet.testing.core.errors import AliyunError, invalid, not_found
from fleet.testing.core.timeutil import iso_s
from fleet.testing.ess import schedule
from fleet.testing.ess.base import EssBase, ScheduledTask


class ScheduledTasksMixin(EssBase):
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
        held = sum(1 for t in self.scheduled_tasks.values() if t.region_id == region_id)
        if held >= self.scheduled_task_quota:
            raise AliyunError(
                "QuotaExceeded.ScheduledTask",
                f"The quota of scheduled tasks ({self.scheduled_task_quota} per region) is exceeded.",
                400,
            )
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
