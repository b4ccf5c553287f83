"""The Terraform module's variables from the configuration the service runs: one source of truth.

``build_tfvars(config, group=None, now=...)`` maps one group of a ``FleetConfig`` to the variables of
``terraform/`` (and of ``terraform/examples/complete``). It is a pure function of its arguments:

- bounds: ``min_size``, ``max_size``, and the initial ``desired_capacity`` (the group's base floor);
- alarms: the CloudMonitor metric names come from ``policies.metrics`` (the same mapping the service reads
  through), the thresholds from the rules the service acts on: the isolation rules on GPU temperature and
  GPU memory (the alarm fires when the service would start isolating), and the scale-out rules on latency and
  queue depth (the alarm fires when the breach outlasts the rule's duration by ``SLO_ALARM_HOLD_S``, i.e. when
  scaling out did not fix it); without a latency rule, the SLOs the predictive section declares, else
  ``DEFAULT_LATENCY_ALARMS``;
- scheduled tasks: the schedule floors and ceilings, as ``policies.schedule.bounds`` computes them (cold-start
  lead included), turned into ESS scheduled tasks that recur weekly in UTC, one per change of the bounds;
- ``drain_timeout_s`` from the isolation spec's drain timeout;
- ``chat_robot_webhook_url`` from the first DingTalk robot among the notifications, when there is one;
- ``backstop_alarm.threshold`` kept above any scale-out rule on ``gpu_util_avg``.

A group's ``calendar`` (holidays, makeup workdays) is not exported: ESS Weekly tasks cannot skip a date, and a
one-off task written for a date in a Terraform file fails every apply once the date is past. The tasks hold
the regular week; :func:`calendar_warning` says so, and ``fleet serve`` (which moves its own tasks past the
holidays ahead and writes one-off tasks for the coming makeup workdays) is what honours it.

Problems the configuration cannot express in ESS (a schedule that does not repeat weekly in UTC, such as a
window in a zone with daylight saving time) raise :class:`ExportError` naming the group and the reason.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from policies import metrics as m
from policies.schedule import bounds, windows_between
from policies.spec import GroupSpec

ALARM_PERIOD_S = 60  # one CloudMonitor period per minute: GPU metrics arrive every 15 s, agent metrics too
SLO_ALARM_HOLD_S = 300.0  # an SLO alarm waits this long past the rule's own duration (scaling had its chance)

# Metrics the node agent publishes for its own health rather than for the service's decisions; the instance
# down alarm uses vllm_up (1 while the local vLLM server answers, 0 when it does not; fleet/agent/sample.py).
AGENT_HEALTH_METRICS: tuple[str, ...] = ("vllm_up",)

# Alarms kept when the configuration has no rule to derive them from. Latency: P99 TTFT above 2 s and P99
# TPOT above 100 ms (10 tokens/s) for 3 minutes; unlike an end-to-end P99 (issue 8's first choice), neither
# grows with the answer's length, so a long answer does not page. Queue: 10 waiting requests per instance for
# 5 minutes (issue 8 names the alarm, not the value).
DEFAULT_LATENCY_ALARMS: dict[str, tuple[str, float, float]] = {
    # alarm key: (policy metric, threshold, hold_s); the modules' variables.tf default alarms say the same
    "ttft_p99": (m.TTFT_P99_MS, 2000.0, 180.0),
    "tpot_p99": (m.TPOT_P99_MS, 100.0, 180.0),
}
DEFAULT_QUEUE_ALARM = {"threshold": 10.0, "hold_s": 300.0}
INSTANCE_DOWN_ALARM = {
    "metric": "vllm_up",
    "custom_metric": True,
    "statistics": "Maximum",  # below 1 for the whole period: vLLM never answered in it
    "comparison_operator": "<",
    "threshold": 1,
    "times": 2,
    "period_s": ALARM_PERIOD_S,
    "level": "critical",
}

# ESS alarm tasks name the CloudMonitor agent's GPU readings their own way (aliyun-api.md, CreateAlarm); the
# policy metric each one is. The backstop alarm may only use these.
ESS_SYSTEM_GPU_METRICS: dict[str, str] = {
    "GpuUtilizationAgent": m.GPU_UTIL_PCT,
    "GpuMemoryUtilizationAgent": m.GPU_MEM_USED_PCT,
}
BACKSTOP_MARGIN_PCT = 10.0  # the backstop fires this far above the service's own GPU-utilization trigger
BACKSTOP_DEFAULT_THRESHOLD_PCT = 95.0  # the module's default, kept when no rule is higher

# Group rule metric -> the per-instance custom metric the alarm watches, and the statistic it takes.
_SCALE_OUT_ALARMS: dict[str, tuple[str, str, str]] = {
    # rule metric: (alarm key, instance metric, statistics)
    m.QUEUE_WAITING_PER_INSTANCE: ("queue_depth", m.QUEUE_WAITING, "Average"),
    m.TTFT_P99_MS: ("ttft_p99", m.TTFT_P99_MS, "Maximum"),
    m.TPOT_P99_MS: ("tpot_p99", m.TPOT_P99_MS, "Maximum"),
    m.E2E_P99_MS: ("latency_p99", m.E2E_P99_MS, "Maximum"),
    m.LATENCY_P95_MS: ("latency_p95", m.LATENCY_P95_MS, "Maximum"),
}

# Isolation rule metric -> alarm key and level.
_ISOLATION_ALARMS: dict[str, tuple[str, str]] = {
    m.GPU_TEMPERATURE_C: ("gpu_temperature", "critical"),
    m.GPU_MEM_USED_PCT: ("gpu_memory", "warn"),
}

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{1,39}$")  # the module's `name` validation
_ESS_WEEKDAY = {0: "1", 1: "2", 2: "3", 3: "4", 4: "5", 5: "6", 6: "0"}  # Python Monday=0 -> ESS Sunday=0
_ESS_TIME = "%Y-%m-%dT%H:%MZ"  # ESS LaunchTime / RecurrenceEndTime: UTC, minutes
_DRAIN_RANGE_S = (30, 21600)  # ESS lifecycle hook heartbeat timeout range [DOC]
# Recurring tasks carry an end; 300 days keeps it well inside ESS's limits (the service's mirror uses the same
# span). Each export moves it forward, so applying an export at least every few months keeps the tasks alive.
RECURRENCE_SPAN = timedelta(days=300)
_WEEKS_CHECKED = (0, 1, 13, 26, 39)  # across a year's seasons: a pattern that changes is not weekly in UTC


class ExportError(ValueError):
    """The configuration cannot be expressed as the module's variables; the message says why."""


@dataclass(frozen=True)
class _Change:
    """The bounds ESS should hold from a minute of the week (UTC) on."""

    weekday: int  # Monday = 0, in UTC
    minute: int  # minute of the day, UTC
    floor: int
    ceiling: int
    source: str


def select_group(groups: Sequence[GroupSpec], name: str | None) -> GroupSpec:
    """The group to export: the one named, or the only one."""
    if name is None:
        if len(groups) != 1:
            names = ", ".join(g.name for g in groups) or "none"
            raise ExportError(f"the config has {len(groups)} groups ({names}); choose one with --group")
        return groups[0]
    for group in groups:
        if group.name == name:
            return group
    raise ExportError(f"no group named {name!r}; groups: {', '.join(g.name for g in groups) or 'none'}")


def build_tfvars(
    config: Any, group: str | None = None, *, now: datetime, scheduled_tasks: bool = True
) -> dict[str, Any]:
    """The variables of terraform/ (and of examples/complete, which adds ``region``) for one group.

    ``config`` is a ``fleet.config.FleetConfig`` (region, account_id, groups); ``now`` (aware) picks the first
    launch of each scheduled task, which ESS wants in the future and at most 90 days ahead. With
    ``scheduled_tasks=False`` the floors are left to the service's own mirroring (an empty map).
    """
    if now.tzinfo is None:
        raise ExportError("now must be timezone-aware")
    spec = select_group(list(config.groups), group)
    if not _NAME_RE.match(spec.name):
        raise ExportError(f"group {spec.name!r}: Terraform names need 2-40 letters, digits, '.', '_' or '-'")
    # A group of another region or account (fleet.yaml's per-group region/account) lives there: its scaling
    # group is made in its region, and its alarms watch its account's custom namespace.
    account = getattr(spec, "account", None)
    account_id = config.accounts[account].account_id if account else getattr(config, "account_id", None)
    if not account_id:
        raise ExportError("account_id is required: the agent's metrics live in acs_customMetric_<account_id>")
    tfvars: dict[str, Any] = {
        "region": getattr(spec, "region", None) or config.region,
        "name": spec.name,
        "account_id": str(account_id),
        "min_size": spec.min_size,
        "max_size": spec.max_size,
        "desired_capacity": min(spec.base_floor, spec.max_size),
        "drain_timeout_s": _drain_timeout_s(spec),
        "alarms": alarms_for(spec),
        "scheduled_tasks": scheduled_tasks_for(spec, now) if scheduled_tasks else {},
    }
    tfvars.update(capacity_tfvars(spec))
    backstop = backstop_threshold_pct(spec)
    if backstop is not None:
        tfvars["backstop_alarm"] = {"threshold": backstop}
    robot = chat_robot_url(getattr(config, "notifications", ()))
    if robot is not None:
        tfvars["chat_robot_webhook_url"] = robot
    return tfvars


def build_all_tfvars(
    config: Any, *, now: datetime, scheduled_tasks: bool = True
) -> dict[str, dict[str, Any]]:
    """:func:`build_tfvars` for every group of the config, by group name; all of them or an ExportError (the
    first group that cannot be expressed), so a caller writes nothing half-exported."""
    return {
        spec.name: build_tfvars(config, spec.name, now=now, scheduled_tasks=scheduled_tasks)
        for spec in config.groups
    }


def capacity_tfvars(spec: GroupSpec) -> dict[str, Any]:
    """instance_types, zones (vSwitches), capacity_mix and economical_mode to the module's variables
    (issue 17); keys the group does not set are left to the module's defaults and terraform.tfvars."""
    out: dict[str, Any] = {}
    if spec.instance_types:
        out["instance_types"] = list(spec.instance_types)
    if spec.zones:
        out["vswitch_ids"] = [z.vswitch_id for z in spec.zones]
        out["multi_az_policy"] = "PRIORITY"
    if spec.economical_mode:
        out["scaling_policy"] = "recycle"
    mix = spec.capacity_mix
    if mix is not None and mix.buys_spot:
        out["multi_az_policy"] = "COST_OPTIMIZED"
        out["on_demand_base_capacity"] = mix.on_demand_base
        out["on_demand_percentage_above_base_capacity"] = 100 - mix.spot_percentage_above_base
        out["spot_instance_remedy"] = True
        out["compensate_with_on_demand"] = True
        out["spot_strategy"] = "SpotWithPriceLimit" if mix.spot_price_limit else "SpotAsPriceGo"
        if mix.spot_price_limit:
            out["spot_price_limit"] = mix.spot_price_limit
    return out


def backstop_threshold_pct(spec: GroupSpec) -> float | int | None:
    """The backstop's GPU-utilization threshold when a scale-out rule on gpu_util_avg would put the module's
    default too close: BACKSTOP_MARGIN_PCT above the rule (at most 100), so the service always acts first."""
    rules = [r.above for r in spec.scale_out if r.metric == m.GPU_UTIL_AVG and r.above is not None]
    if not rules:
        return None
    return _number(min(100.0, max(BACKSTOP_DEFAULT_THRESHOLD_PCT, min(rules) + BACKSTOP_MARGIN_PCT)))


def chat_robot_url(notifications: Sequence[Any]) -> str | None:
    """The first DingTalk robot of the config's notifications: CloudMonitor contacts can post to DingTalk
    robots only (``channels_ding_web_hook``), and without a signature, so the robot must use keyword or IP
    security rather than signing."""
    for channel in notifications:
        if getattr(channel, "type", None) == "dingtalk":
            return str(channel.url)
    return None


def _drain_timeout_s(spec: GroupSpec) -> int:
    seconds = math.ceil(spec.isolation.drain_timeout_s)
    lo, hi = _DRAIN_RANGE_S
    if not lo <= seconds <= hi:
        raise ExportError(
            f"group {spec.name!r}: isolation.drain_timeout {seconds}s is outside the ESS lifecycle hook "
            f"range {lo}..{hi}s"
        )
    return seconds


# ---------------------------------------------------------------------------------------------------------
# Alarms
# ---------------------------------------------------------------------------------------------------------


def cloud_metric(policy_metric: str) -> tuple[str, bool, str]:
    """(CloudMonitor metric name, is a custom metric, statistic) of a per-instance policy metric."""
    if policy_metric in m.CMS_METRIC_NAMES:
        name, statistic = m.CMS_METRIC_NAMES[policy_metric]
        return name, False, statistic
    if policy_metric in m.CUSTOM_METRIC_NAMES:
        return m.CUSTOM_METRIC_NAMES[policy_metric], True, "Average"
    raise ExportError(f"policy metric {policy_metric!r} has no CloudMonitor name")


def _times(hold_s: float) -> int:
    return max(1, math.ceil(hold_s / ALARM_PERIOD_S))


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else float(value)


def alarms_for(spec: GroupSpec) -> dict[str, dict[str, Any]]:
    """The module's ``alarms`` map for one group (see the module docstring for where each comes from)."""
    alarms: dict[str, dict[str, Any]] = {}
    for rule in spec.isolation.rules:
        if rule.kind != "metric" or rule.metric not in _ISOLATION_ALARMS or rule.above is None:
            continue
        key, level = _ISOLATION_ALARMS[rule.metric]
        if key in alarms and alarms[key]["threshold"] <= rule.above:
            continue  # the lowest threshold: the alarm must fire whenever any rule of that metric would act
        name, custom, statistic = cloud_metric(rule.metric)
        alarms[key] = {
            "metric": name,
            "custom_metric": custom,
            "statistics": statistic,
            "comparison_operator": ">",
            "threshold": _number(rule.above),
            "times": _times(rule.for_s),
            "period_s": ALARM_PERIOD_S,
            "level": level,
        }
    for out_rule in spec.scale_out:
        if out_rule.metric not in _SCALE_OUT_ALARMS or out_rule.above is None:
            continue
        key, instance_metric, statistic = _SCALE_OUT_ALARMS[out_rule.metric]
        if key in alarms and alarms[key]["threshold"] <= out_rule.above:
            continue
        name, custom, _ = cloud_metric(instance_metric)
        alarms[key] = {
            "metric": name,
            "custom_metric": custom,
            "statistics": statistic,
            "comparison_operator": ">",
            "threshold": _number(out_rule.above),
            "times": _times(out_rule.for_s + SLO_ALARM_HOLD_S),
            "period_s": ALARM_PERIOD_S,
            "level": "warn" if out_rule.metric == m.QUEUE_WAITING_PER_INSTANCE else "critical",
        }
    declared = {m.TTFT_P99_MS: spec.predictive.ttft_p99_ms, m.TPOT_P99_MS: spec.predictive.tpot_p99_ms}
    for key, (metric, default, hold_s) in DEFAULT_LATENCY_ALARMS.items():
        if key in alarms:  # a scale-out rule on that metric set it
            continue
        # no rule on it: the SLO the group's predictive section declares, else the default
        threshold = declared.get(metric) or default
        name, custom, _ = cloud_metric(metric)
        alarms[key] = {
            "metric": name,
            "custom_metric": custom,
            "statistics": "Maximum",
            "comparison_operator": ">",
            "threshold": _number(threshold),
            "times": _times(hold_s),
            "period_s": ALARM_PERIOD_S,
            "level": "critical",
        }
    if "queue_depth" not in alarms:
        name, custom, _ = cloud_metric(m.QUEUE_WAITING)
        alarms["queue_depth"] = {
            "metric": name,
            "custom_metric": custom,
            "statistics": "Average",
            "comparison_operator": ">",
            "threshold": _number(DEFAULT_QUEUE_ALARM["threshold"]),
            "times": _times(DEFAULT_QUEUE_ALARM["hold_s"]),
            "period_s": ALARM_PERIOD_S,
            "level": "warn",
        }
    alarms["instance_down"] = dict(INSTANCE_DOWN_ALARM)
    return dict(sorted(alarms.items()))


# ---------------------------------------------------------------------------------------------------------
# Scheduled tasks
# ---------------------------------------------------------------------------------------------------------


def _week_start(at: datetime) -> datetime:
    """Monday 00:00 UTC of the week holding ``at``."""
    day = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday())


def _weekly_changes(spec: GroupSpec, week: datetime) -> tuple[_Change, ...]:
    """Where the group's bounds change during one UTC week, and to what.

    The bounds only change at a window's start less the cold-start lead (floor), at its start (ceiling) and at
    its end; those instants are evaluated with the service's own ``bounds``. ESS fires at whole minutes, so a
    change inside a minute moves to the minute's start when it raises a bound (a floor is never late) and to
    the next minute when it lowers one.
    """
    end = week + timedelta(days=7)
    lead = timedelta(seconds=spec.cold_start_s)
    instants: set[datetime] = set()
    for schedule in spec.schedules:
        for window in windows_between(schedule, week - timedelta(days=1), end + timedelta(days=1)):
            for instant in (window.start - lead, window.start, window.end):
                instant = instant.astimezone(UTC)
                if week <= instant < end:
                    instants.add(instant)
    before = bounds(spec, week - timedelta(microseconds=1))
    previous = (before.floor, before.ceiling)
    at_minute: dict[datetime, tuple[int, int, str]] = {}
    for instant in sorted(instants):
        b = bounds(spec, instant)
        if (b.floor, b.ceiling) == previous:
            continue
        raises = b.floor > previous[0] or b.ceiling > previous[1]
        minute = instant.replace(second=0, microsecond=0)
        if minute != instant and not raises:
            minute += timedelta(minutes=1)
        if minute >= end:  # a drop at the week's last second wraps to its first minute
            minute -= timedelta(days=7)
        at_minute[minute] = (b.floor, b.ceiling, b.floor_source)
        previous = (b.floor, b.ceiling)
    changes: list[_Change] = []
    state = (before.floor, before.ceiling)
    for minute, (floor, ceiling, source) in sorted(at_minute.items()):
        if (floor, ceiling) == state:
            continue
        state = (floor, ceiling)
        changes.append(_Change(minute.weekday(), minute.hour * 60 + minute.minute, floor, ceiling, source))
    return tuple(changes)


def scheduled_tasks_for(spec: GroupSpec, now: datetime) -> dict[str, dict[str, Any]]:
    """ESS scheduled tasks (the module's ``scheduled_tasks``) that hold the schedule bounds in UTC.

    Each task sets MinValue and MaxValue from that minute on; tasks with the same time and bounds on several
    weekdays are one Weekly task (RecurrenceValue lists days, 0 = Sunday), on all seven days one Daily task.
    """
    if not spec.schedules:
        return {}
    # the regular week: a holiday in one of the weeks compared would read as a pattern that is not weekly
    spec = spec.model_copy(update={"calendar": None})
    for schedule in spec.schedules:
        # a cron that names days of the month or months fires on dates, which no sample of weeks can judge
        # (a monthly window falls in none of the weeks checked: it was exported as no task at all)
        fields = schedule.cron.split() if schedule.cron else []
        if len(fields) >= 5 and (fields[2] != "*" or fields[3] != "*"):
            raise ExportError(
                f"group {spec.name!r}: schedule {schedule.name!r}: cron {schedule.cron!r} fires on days of "
                "the month or in months, not every week: ESS weekly and daily scheduled tasks cannot repeat "
                "it (the service holds its floor itself); give it by weekday (days/start/end, or a cron "
                "whose day-of-month and month are *)"
            )
    reference = _week_start(now)
    patterns = {w: _weekly_changes(spec, reference + timedelta(weeks=w)) for w in _WEEKS_CHECKED}
    if len({tuple((c.weekday, c.minute, c.floor, c.ceiling) for c in p) for p in patterns.values()}) != 1:
        starts = [reference + timedelta(weeks=w) for w in _WEEKS_CHECKED]
        zones = sorted({s.timezone for s in spec.schedules})
        # name the zones whose offset moves, not every zone of the group (Asia/Shanghai has no DST)
        moving = [z for z in zones if len({t.astimezone(ZoneInfo(z)).utcoffset() for t in starts}) > 1]
        raise ExportError(
            f"group {spec.name!r}: the schedules do not repeat every week in UTC (daylight saving time in "
            f"{', '.join(moving or zones)} moves them); ESS scheduled tasks recur in UTC, so they cannot "
            "hold these floors: export with --no-scheduled-tasks and let the service mirror them (it moves "
            "its tasks when the offset changes)"
        )
    grouped: dict[tuple[int, int, int], list[_Change]] = {}
    for change in patterns[0]:
        grouped.setdefault((change.minute, change.floor, change.ceiling), []).append(change)
    tasks: dict[str, dict[str, Any]] = {}
    for (minute, floor, ceiling), changes in sorted(grouped.items()):
        weekdays = sorted({c.weekday for c in changes})
        hh, mm = divmod(minute, 60)
        daily = len(weekdays) == 7
        ess_days = ",".join(sorted((_ESS_WEEKDAY[d] for d in weekdays), key=int))
        days = "daily" if daily else ess_days.replace(",", "")
        key = f"{hh:02d}{mm:02d}z-{days}-min{floor}-max{ceiling}"
        sources = sorted({c.source for c in changes})
        launch = _first_launch(now, weekdays, minute)
        tasks[key] = {
            "launch_time": launch.strftime(_ESS_TIME),
            "recurrence_end_time": (launch + RECURRENCE_SPAN).strftime(_ESS_TIME),
            "recurrence_type": "Daily" if daily else "Weekly",
            "recurrence_value": "1" if daily else ess_days,
            "min_value": floor,
            "max_value": ceiling,
            "description": f"{spec.name}: min {floor}, max {ceiling} from {', '.join(sources)} (export)",
        }
    return tasks


def calendar_warning(spec: GroupSpec, now: datetime) -> str | None:
    """One line when the group's calendar has exception days from ``now`` on that its exported scheduled
    tasks do not honour (they recur every week), else None."""
    cal = spec.calendar
    windows = [s.name for s in spec.schedules if s.cron is None]
    if cal is None or not windows:
        return None
    spans = [*cal.holidays, *cal.workdays]
    coming = cal.exception_days(now.astimezone(UTC).date(), max(last for _, last in spans)) if spans else []
    if not coming:
        return None
    return (
        f"group {spec.name!r}: the exported scheduled tasks recur every week and do not honour the "
        f"calendar's {len(coming)} coming holidays and makeup workdays ({coming[0].isoformat()} first): "
        "on those days they hold the regular weekday's floors; fleet serve corrects its own tasks, so export "
        "with --no-scheduled-tasks where it runs"
    )


def _first_launch(now: datetime, weekdays: list[int], minute: int) -> datetime:
    """The first occurrence after ``now`` (plus a minute of margin), UTC."""
    earliest = now.astimezone(UTC) + timedelta(minutes=1)
    day = earliest.replace(hour=0, minute=0, second=0, microsecond=0)
    for offset in range(8):
        candidate = day + timedelta(days=offset, minutes=minute)
        if candidate.weekday() in weekdays and candidate >= earliest:
            return candidate
    raise AssertionError("a weekly occurrence always exists within 8 days")
