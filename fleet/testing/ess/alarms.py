"""Alarm tasks: evaluated every Period against CMS data; their rules run after EvaluationCount breaches."""

from __future__ import annotations

from typing import Any

from fleet.testing.core.errors import AliyunError, invalid, not_found
from fleet.testing.ess.base import ALARM_COMPARISONS, SYSTEM_ALARM_METRICS, Alarm, EssBase, ScalingGroup


class AlarmsMixin(EssBase):
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
