"""The policy spec: durations, weekdays, clock times, rules and their validation messages."""

import pytest
from policy_builders import group_spec
from pydantic import ValidationError

from policies.spec import (
    IsolationRule,
    ScaleInRule,
    ScaleOutRule,
    Schedule,
    parse_count_or_percent,
    parse_duration,
    parse_weekdays,
    resolve_count,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("10m", 600),
        ("4h", 14400),
        ("1h30m", 5400),
        ("90", 90),
        (15, 15),
        (2.5, 2.5),
        ("0.5m", 30),
    ],
)
def test_durations_parse_to_seconds(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["soon", "", "30 sec", "-5", -1, True, "m"])
def test_bad_durations_are_rejected(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("mon-fri", (0, 1, 2, 3, 4)),
        ("sat,sun", (5, 6)),
        ("fri-mon", (0, 4, 5, 6)),
        ("daily", tuple(range(7))),
        (["tue", "thursday"], (1, 3)),
    ],
)
def test_weekdays_parse_including_wrapping_ranges(text, days):
    assert parse_weekdays(text) == days


def test_unknown_weekday_suggests_the_nearest():
    with pytest.raises(ValueError, match="did you mean 'fri'"):
        parse_weekdays("mon-fry")


def test_unquoted_yaml_clock_times_are_understood():
    # YAML 1.1 reads 09:00 unquoted as the number 540
    sched = Schedule.model_validate({"name": "s", "start": 540, "end": "18:00", "min": 3})
    assert sched.start.hour == 9 and sched.start.minute == 0


def test_schedule_needs_hours_or_cron_not_both():
    with pytest.raises(ValidationError, match="either cron"):
        Schedule.model_validate(
            {"name": "s", "start": "09:00", "end": "10:00", "cron": "0 9 * * *", "min": 1}
        )
    with pytest.raises(ValidationError, match="positive duration"):
        Schedule.model_validate({"name": "s", "cron": "0 9 * * *", "min": 1})


def test_schedule_rejects_unknown_timezone_and_bad_cron():
    with pytest.raises(ValidationError, match="unknown timezone"):
        Schedule.model_validate({"name": "s", "timezone": "Mars/Olympus", "start": "09:00", "end": "10:00"})
    with pytest.raises(ValidationError, match="not a cron expression"):
        Schedule.model_validate({"name": "s", "cron": "every morning", "duration": "1h"})


def test_predictive_timezone_is_an_iana_zone():
    from policies.spec import Predictive

    with pytest.raises(ValidationError, match="unknown timezone"):
        Predictive.model_validate({"capacity_rps": 2, "timezone": "Mars/Olympus"})
    assert Predictive.model_validate({"capacity_rps": 2}).seasonal_zone is None
    zone = Predictive.model_validate({"capacity_rps": 2, "timezone": "Europe/Berlin"}).seasonal_zone
    assert zone is not None and zone.key == "Europe/Berlin"


def test_schedule_ceiling_below_its_floor_is_rejected():
    with pytest.raises(ValidationError, match="below min"):
        Schedule.model_validate({"name": "s", "start": "09:00", "end": "10:00", "min": 5, "max": 3})


def test_group_bounds_are_checked_together():
    with pytest.raises(ValidationError, match="min_size .* is above max_size"):
        group_spec(min_size=10, max_size=4)
    with pytest.raises(ValidationError, match="warm_floor"):
        group_spec(min_size=0, max_size=1, warm_floor=2)
    with pytest.raises(ValidationError, match="above max_size"):
        group_spec(schedules=[{"name": "s", "start": "09:00", "end": "10:00", "min": 50}])


def test_the_health_check_outlasts_the_cold_start_where_it_waits_for_the_engine():
    # the default rules read vllm_up, so the health check after a reboot waits out the weights' load
    with pytest.raises(ValidationError, match="health_check_timeout .* is below cold_start_s"):
        group_spec(cold_start_s=1200, isolation={"health_check_timeout": "15m"})
    assert (
        group_spec(cold_start_s=1200, isolation={"health_check_timeout": "30m"}).health_check_timeout_s
        == 1800
    )
    # left at its default it grows with the cold start; without a vllm_up rule it stays as it is
    assert group_spec(cold_start_s=1200).health_check_timeout_s == 1500
    assert group_spec(cold_start_s=180).health_check_timeout_s == 900
    gpu_only = [{"name": "hot", "metric": "gpu_temperature_c", "above": 85, "for": "2m"}]
    assert group_spec(cold_start_s=1200, isolation={"rules": gpu_only}).health_check_timeout_s == 900
    assert group_spec(cold_start_s=1200, isolation={"health_check_timeout": "15m", "rules": gpu_only})


def test_scale_rules_need_the_right_direction():
    with pytest.raises(ValidationError, match="needs 'above'"):
        ScaleOutRule.model_validate({"metric": "ttft_p99_ms", "below": 100})
    with pytest.raises(ValidationError, match="needs 'below'"):
        ScaleInRule.model_validate({"metric": "ttft_p99_ms", "above": 100})


def test_unknown_rule_metric_names_the_valid_ones():
    with pytest.raises(ValidationError, match="did you mean 'queue_waiting_per_instance'"):
        ScaleOutRule.model_validate({"metric": "queue_waiting_per_instanc", "above": 2})


def test_factor_of_a_baseline_becomes_a_threshold():
    rule = ScaleOutRule.model_validate(
        {"metric": "latency_p95_ms", "above": "2x", "baseline": 400, "for": "5m"}
    )
    assert rule.above == 800 and rule.for_s == 300


def test_factor_without_baseline_is_rejected():
    with pytest.raises(ValidationError, match="baseline"):
        ScaleOutRule.model_validate({"metric": "latency_p95_ms", "above": "2x"})


@pytest.mark.parametrize(
    ("rule", "kind"),
    [
        ({"metric": "gpu_temperature_c", "above": 85, "for": "2m"}, "metric"),
        ({"throttle_reasons": ["hw_thermal"], "samples": 3}, "throttle"),
        ({"xids": [79]}, "xid"),
        ({"events": ["SystemFailure.*"]}, "event"),
        ({"metric": "ttft_p99_ms", "peer_factor": 3}, "outlier"),
        ({"metric": "vllm_up", "below": 0.5, "for": "30s", "repeat": 3, "window": "1h"}, "metric"),
        ({"metric": "vllm_up", "absent_for": "10m"}, "absent"),
    ],
)
def test_isolation_rule_kinds(rule, kind):
    assert IsolationRule.model_validate(rule).kind == kind


@pytest.mark.parametrize(
    "rule",
    [
        {"xids": [79], "events": ["SystemFailure.*"]},
        {"metric": "gpu_temperature_c"},
        {"throttle_reasons": ["too_hot"]},
        {"xids": [79], "above": 3},
        {"metric": "queue_waiting_per_instance", "above": 2},
        {"absent_for": "10m"},
        {"metric": "vllm_up", "absent_for": "10m", "below": 0.5},
        {"metric": "vllm_up", "absent_for": "0s"},
        {"xids": [79], "absent_for": "10m"},
    ],
)
def test_malformed_isolation_rules_are_rejected(rule):
    with pytest.raises(ValidationError):
        IsolationRule.model_validate(rule)


@pytest.mark.parametrize(
    "rule",
    [
        {"events": ["SystemFailure.*"], "repeat": 2},
        {"throttle_reasons": ["hw_thermal"], "repeat": 2},
        {"metric": "ttft_p99_ms", "peer_factor": 3, "repeat": 2},
    ],
)
def test_repeat_is_refused_where_nothing_counts_it(rule):
    with pytest.raises(ValidationError, match="repeat does not apply"):
        IsolationRule.model_validate(rule)


def test_default_isolation_rules_cover_the_issue_classes():
    rules = {r.rule_id: r for r in group_spec().isolation.rules}
    assert rules["gpu_overheat"].above == 85 and rules["gpu_overheat"].for_s == 120
    assert rules["xid_hardware"].action == "replace" and rules["xid_hardware"].repeat == 1
    assert rules["xid_reset"].action == "reboot" and rules["xid_reset"].repeat == 1
    assert rules["engine_restarting"].metric == "vllm_up" and rules["engine_restarting"].repeat > 1
    assert rules["agent_silent"].kind == "absent" and rules["agent_silent"].absent_for_s == 600
    assert 79 in rules["xid_hardware"].xids and 154 in rules["xid_reset"].xids


def _default_xid_action(code: int) -> str | None:
    acts = [r.action for r in group_spec().isolation.rules if r.kind == "xid" and code in (r.xids or ())]
    assert len(acts) <= 1, f"XID {code} is in more than one default rule"
    return acts[0] if acts else None


@pytest.mark.parametrize(
    ("code", "action"),
    [
        # NVIDIA's XID catalogue, "Resolution Bucket (Immediate Action)", as docs/policies.md maps it
        (79, "replace"),  # fallen off the bus: restart the machine, check the mechanics
        (64, "replace"),  # row remapping failure: RMA
        (48, "replace"),
        (95, "replace"),
        (63, "reboot"),  # row remapping pending: a reset activates the spare row, the GPU is sound
        (94, "reboot"),  # contained ECC error: the process is killed, the row remapped at the next reset
        (119, "reboot"),  # GSP RPC timeout: RESET_GPU
        (120, "reboot"),  # GSP error: RESET_GPU
        (140, "reboot"),  # unrecovered ECC error: RESET_GPU
        (61, "reboot"),
        (62, "reboot"),
        (154, "reboot"),  # the driver's recovery action: GPU Reset Required / Node Reboot Required
        (143, "reboot"),  # GPU initialization error: RESET_GPU
        (156, "reboot"),  # resource retirement event: RESET_GPU
        (158, "reboot"),  # GPU fatal timeout: RESET_GPU
        (149, None),  # NVLink5 NETIR error: WORKFLOW_NVLINK5_ERR, by sub-code; a needed reset comes as 154
        (150, None),  # NVLink5 MSE error: the same workflow
        (13, None),  # application faults: RESTART_APP, never the node
        (31, None),
        (43, None),
        (45, None),  # preemptive cleanup after a killed process: IGNORE
    ],
)
def test_default_xid_rules_follow_nvidias_recommended_actions(code, action):
    assert _default_xid_action(code) == action


def test_default_sla_is_15_minutes_and_4_hours():
    iso = group_spec().isolation
    assert (iso.respond_within_s, iso.isolate_within_s) == (900, 14400)


def test_an_isolation_window_shorter_than_the_response_window_is_refused():
    with pytest.raises(ValidationError, match="isolate_within .1800 s. is shorter than respond_within"):
        group_spec(isolation={"respond_within": "1h", "isolate_within": "30m"})
    equal = group_spec(isolation={"respond_within": "30m", "isolate_within": "30m"}).isolation
    assert equal.isolate_within_s == equal.respond_within_s == 1800


@pytest.mark.parametrize(
    ("value", "base", "expected"),
    [(3, 10, 3), ("20%", 10, 2), ("20%", 4, 0), ("50%", 5, 2), ("100%", 7, 7)],
)
def test_counts_and_percentages_resolve(value, base, expected):
    assert resolve_count(parse_count_or_percent(value), base) == expected


def test_default_max_isolated_is_the_larger_of_one_and_twenty_percent():
    guard = group_spec().guardrails
    assert guard.max_isolated_for(3) == 1
    assert guard.max_isolated_for(10) == 2
    assert guard.max_isolated_for(25) == 5


def test_spec_json_round_trip_keeps_every_value():
    spec = group_spec(
        schedules=[
            {"name": "biz", "days": "mon-fri", "start": "09:00", "end": "18:00", "min": 6},
            {"name": "late", "days": "daily", "start": "22:00", "end": "02:00", "min": 3, "max": 8},
            {"name": "cron", "cron": "30 8 * * 1-5", "duration": "1h", "min": 4},
        ]
    )
    again = type(spec).model_validate_json(spec.model_dump_json(by_alias=True))
    assert again == spec


def test_durations_take_days_for_reports_and_windows():
    from policies.spec import parse_duration

    assert parse_duration("7d") == 7 * 86400
    assert parse_duration("1d12h") == 36 * 3600
