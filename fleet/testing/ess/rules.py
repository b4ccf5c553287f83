"""Scaling rules: CreateScalingRule with its per-type validation."""

from __future__ import annotations

from typing import Any

from fleet.testing.core.errors import AliyunError, invalid
from fleet.testing.ess.base import ADJUSTMENT_TYPES, RULE_TYPES, EssBase, ScalingRule, _opt_float, _opt_int


class RulesMixin(EssBase):
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
                        "lower": _opt_float(step.get("MetricIntervalLowerBound"), "MetricIntervalLowerBound"),
                        "upper": _opt_float(step.get("MetricIntervalUpperBound"), "MetricIntervalUpperBound"),
                        "adjustment": _opt_int(step.get("ScalingAdjustment"), "ScalingAdjustment"),
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
