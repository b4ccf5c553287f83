"""Scaling requests: ScaleWithAdjustment and ExecuteScalingRule, and the target they compute."""

from __future__ import annotations

import math

from fleet.testing.core.errors import AliyunError, invalid, not_found
from fleet.testing.ess.base import (
    ADJUSTMENT_TYPES,
    EssBase,
    ScalingActivity,
    ScalingGroup,
    _bad_status,
    _in_progress,
    _step_adjustment,
)


class ScalingMixin(EssBase):
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
        current: int | None
        if group.desired_enabled:
            current, base = group.desired_capacity, self._stable_count(group)
        else:
            current = base = len(self._counted(group))
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
