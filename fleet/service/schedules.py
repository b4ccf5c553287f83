"""Mirror the config's schedule floors as ESS scheduled tasks, so floors hold while the service is down.

Each ``days`` + ``start`` + ``end`` window of a group becomes two Weekly tasks in UTC on its scaling group:
``fleet-<group>-<schedule>-start`` at the window's start less the group's cold start (the same lead the policy
uses) setting MinValue to the window's floor (and MaxValue to its ceiling, if any), and
``fleet-<group>-<schedule>-end`` at the window's end setting MinValue back to the group's ``min_size`` (and
MaxValue back to ``max_size`` when the window had a ceiling). Lowering MinValue never removes instances, so an
overlapping window's floor still holds until the service (or the other window) scales.

Learned floors (predictive scaling, issue 16): for each coming hour the forecast's conservative floor becomes
a daily task ``fleet-<group>-learned-HHMM-start`` at the hour less the cold start, setting MinValue.

Only tasks whose names carry the ``fleet-<group>-`` prefix and a ``-start``/``-end`` suffix are the service's:
they are created, updated and deleted to match the config; every other task is left alone. A name is not
enough when two services (another ``FLEET_SERVICE_NAME``, another config) have a group of the same name on
one scaling group: each task carries its writer in its Description (``fleet-service:<service name>``), and a
service edits and deletes only its own and those with no Description (written before the mark, adopted and
marked at the next sync). Tasks under its prefix that another service marked are left alone and reported
(``foreign``): the other's learned floors are no longer deleted as no longer configured. Cron windows are
not mirrored (ESS cron runs in UTC and a local cron plus a lead does not translate in general): they are
reported as skipped.

Calendar exceptions (a group's ``calendar``, policies/schedule.py): ESS Weekly tasks cannot skip a date, so
the service writes what the coming days call for. A window whose recurring tasks would fire on a day its
calendar takes off (a ``mon-fri`` window on a holiday, a ``sat,sun`` one on a makeup workday) gets its
recurring tasks' LaunchTime moved past the run of such days ahead of their next firing: the first launch of
a Weekly task is its LaunchTime, so they resume after the holiday. A firing the calendar takes off later,
within ``ONE_OFF_DAYS``, ends the task's recurrence (RecurrenceEndTime) a minute before it, and another Weekly
task, ``fleet-<group>-<schedule>-fromYYYYMMDD-start``/``-end``, launches at the first firing after the run
(dated by its window's day); once the cut is past, the window's own task moves there and that one is deleted.
A window that opens on an exception day but not on its weekday (``mon-fri`` on a makeup Saturday) gets a
one-off pair for that date, ``fleet-<group>-<schedule>-YYYYMMDD-start``/``-end``, written up to
``ONE_OFF_FAR_DAYS`` ahead (ESS takes a LaunchTime up to 90 days ahead) and deleted once fired; those more
than ``ONE_OFF_DAYS`` ahead are created after the learned floors and displace none when the quota is full.
While the service is down ESS holds the days it last wrote: a holiday more than ``ONE_OFF_DAYS`` ahead holds
the weekday floor, and a makeup workday whose pair the quota left out holds the weekend's, until a sync after
the service is back (``fleet validate`` names those holidays: ``FleetConfig.uncut_holidays``).

The weekly days and time are computed from the window's next occurrence (every weekday of the schedule at
that occurrence's UTC offset), so DST zones are right until their offset changes; the periodic re-sync moves
the tasks as soon as the next occurrence is past the change, a day ahead of it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from fleet.cloud.errors import CloudError
from fleet.cloud.ess import EssApi
from fleet.cloud.types import ScheduledTask
from fleet.config import ONE_OFF_DAYS, ONE_OFF_FAR_DAYS
from policies.schedule import calendar_one_offs, weekly_runs
from policies.spec import Calendar, GroupSpec, Schedule

log = logging.getLogger(__name__)

TASK_PREFIX = "fleet-"
# ESS allows a LaunchTime at most 90 days ahead; a recurrence end is refreshed well before it is reached.
RECURRENCE_SPAN = timedelta(days=300)
RECURRENCE_REFRESH = timedelta(days=30)
# A learned floor's task is kept exact only while it is the next to fire (within the hour); the later ones
# are rewritten once an hour, and then only when their floor moved by more than LEARNED_DEADBAND.
LEARNED_EXACT_WITHIN_S = 3600.0
LEARNED_REFRESH_S = 3600.0
LEARNED_DEADBAND = 1
# The account's scheduled tasks in a region are capped (DescribeLimitation's MaxNumberOfScheduledTasks, 70 in
# its documentation): 24 learned floors a group reach it with three groups.
QUOTA_CODE = "QuotaExceeded.ScheduledTask"


# The writer's mark in a task's Description (CreateScheduledTask: 2 to 200 characters, [DOC] ROS
# ALIYUN::ESS::ScheduledTask, https://www.alibabacloud.com/help/doc-detail/107114.html).
OWNER_PREFIX = "fleet-service:"
DESCRIPTION_MAX = 200
DEFAULT_SERVICE = "fleet"  # ServiceSettings.service_name's default


def task_prefix(group: str) -> str:
    return f"{TASK_PREFIX}{group}-"


def owner_mark(service: str) -> str:
    """The Description the service writes on its tasks (cut to ESS's 200 characters)."""
    return f"{OWNER_PREFIX}{service}"[:DESCRIPTION_MAX]


def writer(task: ScheduledTask) -> str | None:
    """The mark of the service that wrote a task, or None for one with no Description (a version before the
    mark wrote it). A Description that is not a mark is someone's own note: a writer, not this service."""
    return task.description or None


def mine(task: ScheduledTask, service: str) -> bool:
    """Whether ``service`` may edit or delete a task its name makes the service's (``owned``)."""
    return writer(task) in (None, owner_mark(service))


def owned(task_name: str, group: str) -> bool:
    return task_name.startswith(task_prefix(group)) and task_name.endswith(("-start", "-end"))


@dataclass(frozen=True)
class DesiredTask:
    name: str
    launch_time: datetime  # next occurrence, UTC, minute resolution
    recurrence_value: str  # Weekly: comma-separated days, 0 = Sunday (UTC); "" for a one-off task
    min_value: int | None
    max_value: int | None
    # a window's task: its next firing is ``launch_time`` exactly (the calendar may move it past holidays); a
    # learned floor's fires daily at its time, whatever the date its LaunchTime was written with
    exact_launch: bool = False
    # a one-off task more than ONE_OFF_DAYS ahead: created after the learned floors, and displacing none
    deferred: bool = False
    # a window's task that stops before a firing the calendar takes off (its run resumed by another task);
    # None: it recurs for RECURRENCE_SPAN
    recurrence_end: datetime | None = None

    @property
    def hhmm(self) -> str:
        return self.launch_time.strftime("%H:%M")

    @property
    def once(self) -> bool:
        """A one-off task (a calendar exception's), fired at ``launch_time`` and then deleted."""
        return not self.recurrence_value

    @property
    def recurrence_type(self) -> str | None:
        return None if self.once else "Weekly"


@dataclass(frozen=True)
class TaskChange:
    group: str
    op: str  # create | modify | delete | skip | error | foreign (another writer's: left alone)
    name: str
    detail: str = ""
    task_id: str | None = None
    code: str | None = None  # an error's cloud code
    writer: str | None = None  # foreign: the Description of the task another service (or a person) wrote

    @property
    def quota_full(self) -> bool:
        return self.code == QUOTA_CODE


def _minute(at: datetime, now: datetime) -> datetime:
    """``at`` in ``now``'s zone, rounded down to ESS's whole minutes (never late)."""
    return at.astimezone(now.tzinfo).replace(second=0, microsecond=0)


@dataclass(frozen=True)
class _Segment:
    """A stretch of a window's weekly firings that the calendar leaves alone: one Weekly task."""

    launch: datetime  # its first firing (UTC)
    day: date  # that firing's window's day, in the schedule's zone
    days: str  # the UTC weekdays it recurs on (ESS numbering, 0 = Sunday)
    end: datetime | None  # its RecurrenceEndTime: a minute before a firing the calendar takes off; None: open


def _ess_days(sched: Schedule, at: datetime, local_day: date) -> str:
    """The UTC weekdays (ESS numbering, 0 = Sunday) on which a window's edge recurs at ``at``'s UTC time."""
    shift = (at.astimezone(UTC).date() - local_day).days  # the edge's UTC date against its window's day
    days = sorted({(d + shift + 1) % 7 for d in sched.weekdays})  # Python: Monday = 0; ESS: Sunday = 0
    return ",".join(str(d) for d in days)


def _segments(
    sched: Schedule,
    now: datetime,
    lead_s: float = 0.0,
    at_end: bool = False,
    calendar: Calendar | None = None,
) -> list[_Segment]:
    """The Weekly tasks of a window's start (less ``lead_s``) or end (``weekly_runs``, cut before the days
    the calendar takes off within ``ONE_OFF_DAYS``). Each recurs at the UTC time of its first firing, on every
    weekday of the schedule at that firing's UTC offset: a daylight-saving change in the coming days moves the
    later ones by an hour (the re-sync after it moves the task), and leaving them out would lose those days'
    floors altogether while the service is down."""
    return [
        _Segment(run.launch, run.day, _ess_days(sched, run.launch, run.day), run.end)
        for run in weekly_runs(sched, calendar, now, lead_s, at_end, ONE_OFF_DAYS)
    ]


@dataclass(frozen=True)
class LearnedFloor:
    """The predictive scaler's conservative floor for one coming hour (``policies.forecast.hourly``)."""

    start: datetime  # the hour, UTC
    floor: int


def learned_tasks(spec: GroupSpec, learned: list[LearnedFloor]) -> list[DesiredTask]:
    """One task per learned hour, ``fleet-<group>-learned-HHMM-start`` (UTC), every day at the hour less the
    cold start: MinValue to the learned floor, so that a predicted ramp still happens while the service is
    down. An hour whose floor is no higher than min_size still gets its task: it lowers the previous one."""
    out = []
    for lf in learned:
        at = (lf.start - timedelta(seconds=spec.cold_start_s)).replace(second=0, microsecond=0)
        out.append(
            DesiredTask(
                name=f"{task_prefix(spec.name)}learned-{lf.start:%H%M}-start",
                launch_time=at,
                recurrence_value="0,1,2,3,4,5,6",
                min_value=max(spec.min_size, min(lf.floor, spec.max_size)),
                max_value=None,
            )
        )
    return out


def one_off_tasks(spec: GroupSpec, sched: Schedule, now: datetime) -> list[DesiredTask]:
    """The one-off pair of each coming day (up to ``ONE_OFF_FAR_DAYS`` ahead; those past ``ONE_OFF_DAYS``
    ``deferred``) on which the group's calendar opens a window its weekday does not (a ``mon-fri`` window on a
    makeup Saturday); each task is wanted until it fires."""
    near = now.astimezone(sched.zone).date() + timedelta(days=ONE_OFF_DAYS)
    out = []
    for day, start, end in calendar_one_offs(sched, spec.calendar, now, spec.cold_start_s, ONE_OFF_FAR_DAYS):
        name = f"{task_prefix(spec.name)}{sched.name}-{day:%Y%m%d}"
        end_max = spec.max_size if sched.ceiling is not None else None
        far = day > near
        for task in (
            DesiredTask(f"{name}-start", _minute(start, now), "", sched.floor, sched.ceiling, deferred=far),
            DesiredTask(f"{name}-end", _minute(end, now), "", spec.min_size, end_max, deferred=far),
        ):
            if task.launch_time > now:
                out.append(task)
    return out


def desired_tasks(
    spec: GroupSpec, now: datetime, learned: list[LearnedFloor] | None = None
) -> tuple[list[DesiredTask], list[str]]:
    """The tasks a group's schedules and learned floors call for, and the schedules not mirrored."""
    tasks: list[DesiredTask] = learned_tasks(spec, learned or [])
    skipped: list[str] = []
    for sched in spec.schedules:
        if sched.cron is not None or sched.start is None or sched.end is None:
            skipped.append(sched.name)
            continue
        tasks.extend(one_off_tasks(spec, sched, now))
        end_max = spec.max_size if sched.ceiling is not None else None
        for edge, lead_s, at_end, min_value, max_value in (
            ("start", spec.cold_start_s, False, sched.floor, sched.ceiling),
            ("end", 0.0, True, spec.min_size, end_max),
        ):
            for k, seg in enumerate(_segments(sched, now, lead_s, at_end, spec.calendar)):
                name = f"{sched.name}-{edge}" if k == 0 else f"{sched.name}-from{seg.day:%Y%m%d}-{edge}"
                tasks.append(
                    DesiredTask(
                        name=f"{task_prefix(spec.name)}{name}",
                        launch_time=seg.launch,
                        recurrence_value=seg.days,
                        min_value=min_value,
                        max_value=max_value,
                        exact_launch=True,
                        recurrence_end=seg.end,
                    )
                )
    return tasks, skipped


def _learned(name: str, group: str) -> bool:
    return name.startswith(f"{task_prefix(group)}learned-")


def _left_as_is(have: ScheduledTask, want: DesiredTask, now: datetime, refresh_far: bool) -> bool:
    """Whether a learned task whose floor alone changed is left as it is: one that fires later than
    ``LEARNED_EXACT_WITHIN_S`` is rewritten only when ``refresh_far`` (once per ``LEARNED_REFRESH_S``), and
    then only when its floor moved by more than ``LEARNED_DEADBAND``. The floor is the ceiling of continuous
    quantities (the forecast's lower quantile, today's level against then, the capacity at the token mix),
    so it flips at every boundary: rewriting each flip cost an ESS write and an audit record, about 120 an
    hour on a simulated day, for tasks that fire up to a day later and are recomputed before they do."""
    if (want.launch_time - now).total_seconds() <= LEARNED_EXACT_WITHIN_S:
        return False
    if not refresh_far:
        return True
    if have.min_value is None or want.min_value is None:
        return False
    return abs(have.min_value - want.min_value) <= LEARNED_DEADBAND


def next_weekly_fire(task: ScheduledTask, now: datetime) -> datetime | None:
    """When a Weekly task as ESS holds it next fires after ``now``: on one of its days at its launch time of
    day (UTC), not before its LaunchTime."""
    if task.launch_time is None or task.recurrence_type != "Weekly" or not task.recurrence_value:
        return None
    days = {int(d) for d in task.recurrence_value.split(",") if d.strip().isdigit()}
    launch = task.launch_time.astimezone(UTC)
    at = max(launch, now.astimezone(UTC))
    first = at.replace(hour=launch.hour, minute=launch.minute, second=0, microsecond=0)
    for offset in range(8):
        fire = first + timedelta(days=offset)
        if fire >= launch and fire > now and (fire.weekday() + 1) % 7 in days:
            return fire
    return None


def _differs(have: ScheduledTask, want: DesiredTask, now: datetime, service: str) -> list[str]:
    diffs = []
    if have.description != owner_mark(service):
        diffs.append("owner")  # written before the mark: adopted
    if want.once:
        if have.recurrence_type is not None or have.launch_time != want.launch_time:
            diffs.append("launch")
    else:
        if have.recurrence_type != "Weekly" or (have.recurrence_value or "") != want.recurrence_value:
            diffs.append("recurrence")
        if have.launch_time is None or have.launch_time.strftime("%H:%M") != want.hhmm:
            diffs.append("time")
        elif want.exact_launch and not diffs and next_weekly_fire(have, now) != want.launch_time:
            # the calendar moved the next firing past a holiday, or (a holiday dropped) back before it
            diffs.append("launch")
    if have.min_value != want.min_value:
        diffs.append("min")
    if want.max_value is not None and have.max_value != want.max_value:
        diffs.append("max")
    if not have.enabled:
        diffs.append("enabled")
    if want.once:
        pass
    elif want.recurrence_end is not None:
        if have.recurrence_end_time != want.recurrence_end:
            diffs.append("recurrence_end")  # a holiday's firing ahead: the recurrence stops before it
    elif have.recurrence_end_time is not None and have.recurrence_end_time < now + RECURRENCE_REFRESH:
        diffs.append("recurrence_end")
    return diffs


def plan_sync(
    spec: GroupSpec,
    existing: list[ScheduledTask],
    now: datetime,
    learned: list[LearnedFloor] | None = None,
    refresh_far: bool = True,
    service: str = DEFAULT_SERVICE,
) -> tuple[list[TaskChange], list[DesiredTask]]:
    """What to change so that the owned tasks match the config (pure: tested without a cloud).

    Tasks under the group's prefix that another writer marked (``mine``) are reported as ``foreign`` and
    neither changed nor deleted, and a task of the config whose name one of them holds is not created.

    Learned-floor tasks, while the group's learned floors are on: ``learned`` None (no forecast this time)
    leaves them all as they are, and an hour missing from ``learned`` (its day-ago hour not yet seen) keeps
    its task; a changed floor is rewritten at once only on the next task to fire, the others when
    ``refresh_far`` and by more than ``LEARNED_DEADBAND`` (``_left_as_is``). With learned floors off they are
    deleted like any task the config dropped.
    """
    want, skipped = desired_tasks(spec, now, learned)
    named = [t for t in existing if owned(t.name, spec.name)]
    ours = {t.name: t for t in named if mine(t, service)}
    others = {t.name: t for t in named if not mine(t, service)}
    want = [t for t in want if t.name not in others]
    if spec.predictive.mirrors_learned_floors:
        wanted = {t.name for t in want}
        ours = {k: v for k, v in ours.items() if not _learned(k, spec.name) or k in wanted}
    changes: list[TaskChange] = [
        TaskChange(spec.name, "skip", name, "cron windows are not mirrored as ESS tasks") for name in skipped
    ]
    changes += [
        TaskChange(
            spec.name,
            "foreign",
            name,
            f"written by {writer(t)!r}, not {owner_mark(service)!r}: left alone",
            t.task_id,
            writer=writer(t),
        )
        for name, t in sorted(others.items())
    ]
    creates: list[TaskChange] = []
    for task in want:
        have = ours.pop(task.name, None)
        if have is None:
            when = f"once {task.launch_time:%Y-%m-%d}" if task.once else f"weekly {task.recurrence_value}"
            creates.append(TaskChange(spec.name, "create", task.name, f"{when} {task.hhmm}Z"))
            continue
        diffs = _differs(have, task, now, service)
        if diffs == ["min"] and _learned(task.name, spec.name) and _left_as_is(have, task, now, refresh_far):
            continue
        if diffs:
            changes.append(TaskChange(spec.name, "modify", task.name, ",".join(diffs), have.task_id))
    # deletes first, so that they free the region's quota for the creates; the config's windows before the
    # learned floors, and of those the soonest first: what the quota leaves out is the least needed
    deletes = [
        TaskChange(spec.name, "delete", name, _why_deleted(name), have.task_id)
        for name, have in sorted(ours.items())
    ]
    by_name = {t.name: t for t in want}
    creates.sort(key=lambda c: (_rank(by_name[c.name], spec.name), by_name[c.name].launch_time))
    # a weekly task resumed after days off is created before the cut of the one it resumes (a modify): a
    # full quota stops the sync at the create, so no recurrence is cut without its resumption
    resumed = [c for c in creates if _RESUMED_NAME.search(c.name)]
    creates = [c for c in creates if not _RESUMED_NAME.search(c.name)]
    return deletes + resumed + changes + creates, want


def _rank(task: DesiredTask, group: str) -> int:
    """The order creates are tried in: the windows' tasks and the coming week's one-offs, then the learned
    floors, then the one-offs further ahead."""
    return 2 if task.deferred else int(_learned(task.name, group))


_ONE_OFF_NAME = re.compile(r"-\d{8}-(start|end)$")
_RESUMED_NAME = re.compile(r"-from\d{8}-(start|end)$")


def _why_deleted(name: str) -> str:
    if _RESUMED_NAME.search(name):
        return "a weekly task resumed after calendar days off: now the window's own task, or no longer cut"
    if _ONE_OFF_NAME.search(name):
        return "a calendar day's one-off task: fired, or its day no longer an exception"
    return "no longer in the config"


def sync_group(
    ess: EssApi,
    spec: GroupSpec,
    group_id: str,
    now: datetime,
    dry_run: bool = False,
    learned: list[LearnedFloor] | None = None,
    refresh_far: bool = True,
    service: str = DEFAULT_SERVICE,
) -> list[TaskChange]:
    """Read the group's tasks and apply ``plan_sync``; returns the changes (made, or that would be made)."""
    existing = ess.describe_scheduled_tasks(group_id)
    changes, want = plan_sync(spec, existing, now, learned, refresh_far, service)
    mark = owner_mark(service)
    by_name = {t.name: t for t in want}
    end = now + RECURRENCE_SPAN
    applied: list[TaskChange] = []
    # the group's learned tasks that a window's task may displace when the quota is full, latest first
    spare = sorted(
        (t for t in existing if _learned(t.name, spec.name) and t.task_id and mine(t, service)),
        key=lambda t: _fires_in(t, now),
    )
    deleted = {ch.task_id for ch in changes if ch.op == "delete"}
    spare = [t for t in spare if t.task_id not in deleted]
    for k, ch in enumerate(changes):
        if dry_run or ch.op in ("skip", "foreign"):
            applied.append(ch)
            continue
        try:
            if ch.op == "create":
                t = by_name[ch.name]
                try:
                    task_id = _create(ess, group_id, t, end, mark)
                except CloudError as exc:
                    if exc.code != QUOTA_CODE or not _displaces(t, spare, now, _learned(t.name, spec.name)):
                        raise
                    # a window of the config outranks a learned floor, and a learned floor firing sooner one
                    # that fires later: the latest-firing one makes room
                    room = spare.pop()
                    assert room.task_id is not None
                    ess.delete_scheduled_task(room.task_id)
                    applied.append(
                        TaskChange(
                            ch.group,
                            "delete",
                            room.name,
                            f"made room for {t.name}: the region's scheduled-task quota is full",
                            room.task_id,
                        )
                    )
                    task_id = _create(ess, group_id, t, end, mark)
                applied.append(TaskChange(ch.group, ch.op, ch.name, ch.detail, task_id))
            elif ch.op == "modify":
                t = by_name[ch.name]
                assert ch.task_id is not None
                ess.modify_scheduled_task(
                    ch.task_id,
                    launch_time=t.launch_time,
                    recurrence_type=t.recurrence_type,
                    recurrence_value=t.recurrence_value or None,
                    min_value=t.min_value,
                    max_value=t.max_value,
                    recurrence_end_time=None if t.once else t.recurrence_end or end,
                    enabled=True,
                    description=mark,
                )
                applied.append(ch)
            elif ch.op == "delete":
                assert ch.task_id is not None
                ess.delete_scheduled_task(ch.task_id)
                applied.append(ch)
        except CloudError as exc:
            if exc.code == QUOTA_CODE:
                # the creates after this one would fail alike: one record for them all, until the next sync
                left = sum(1 for later in changes[k + 1 :] if later.op == "create")
                more = f" ({left} more not created)" if left else ""
                detail = f"{ch.op}: {exc.failure}{more}"
                applied.append(TaskChange(ch.group, "error", ch.name, detail, ch.task_id, exc.code))
                break
            log.warning("scheduled task %s %s failed: %s", ch.op, ch.name, exc)
            applied.append(TaskChange(ch.group, "error", ch.name, f"{ch.op}: {exc}", ch.task_id, exc.code))
    return applied


def _displaces(t: DesiredTask, spare: list[ScheduledTask], now: datetime, learned: bool) -> bool:
    """Whether ``t``, refused by a full quota, takes the place of the latest-firing of the group's learned
    tasks (``spare``, latest last): a window's task always does; a learned one when it fires sooner; a
    one-off more than ``ONE_OFF_DAYS`` ahead (``deferred``) never. With
    the quota leaving room for only some hours, the ones the first sync created were kept for good, so after
    a few hours the group's learned tasks were the hours just past, the next to fire a day away, and the
    coming ones (what a service that goes down needs) never written."""
    if not spare or t.deferred:
        return False
    if not learned:
        return True
    return _fires_in(spare[-1], now) > (t.launch_time - now).total_seconds() + 60.0


def _create(ess: EssApi, group_id: str, t: DesiredTask, end: datetime, mark: str) -> str:
    return ess.create_scheduled_task(
        group_id,
        t.name,
        t.launch_time,
        t.recurrence_type,
        t.recurrence_value or None,
        min_value=t.min_value,
        max_value=t.max_value,
        recurrence_end_time=None if t.once else t.recurrence_end or end,
        enabled=True,
        description=mark,
    )


def _fires_in(task: ScheduledTask, now: datetime) -> float:
    """Seconds until a daily task next fires at its time of day (its launch time's, in UTC)."""
    if task.launch_time is None:
        return 0.0
    at = now.replace(hour=task.launch_time.hour, minute=task.launch_time.minute, second=0, microsecond=0)
    if at <= now:
        at += timedelta(days=1)
    return (at - now).total_seconds()
