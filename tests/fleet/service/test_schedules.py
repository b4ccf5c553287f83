"""Schedule mirroring: the ESS tasks a config calls for (UTC, cold-start lead) and what to change."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fleet.cloud.types import ScheduledTask
from fleet.service.schedules import desired_tasks, owned, owner_mark, plan_sync
from policies.spec import GroupSpec

# A Monday, 00:00 UTC = 08:00 Asia/Shanghai.
NOW = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)


def _spec(**kw):
    base = dict(
        name="chat",
        scaling_group_id="asg-1",
        min_size=1,
        max_size=20,
        warm_floor=1,
        cold_start_s=180,
        schedules=[
            {
                "name": "biz",
                "timezone": "Asia/Shanghai",
                "days": "mon-fri",
                "start": "09:00",
                "end": "18:00",
                "min": 6,
            }
        ],
    )
    base.update(kw)
    return GroupSpec.model_validate(base)


def _task(name, **kw):
    base = dict(
        task_id=f"sst-{name}",
        name=name,
        group_id="asg-1",
        launch_time=None,
        recurrence_type="Weekly",
        recurrence_value="1,2,3,4,5",
        recurrence_end_time=None,
        min_value=6,
        max_value=None,
        desired_capacity=None,
        enabled=True,
        description=owner_mark("fleet"),
    )
    base.update(kw)
    return ScheduledTask(**base)


def test_start_task_is_weekly_in_utc_ahead_by_the_cold_start():
    tasks, _ = desired_tasks(_spec(), NOW)
    start = next(t for t in tasks if t.name == "fleet-chat-biz-start")
    # 09:00 Shanghai less 180 s = 08:57 local = 00:57 UTC, same weekdays (Mon-Fri = 1..5 with Sunday 0)
    assert start.hhmm == "00:57"
    assert start.recurrence_value == "1,2,3,4,5"
    assert start.launch_time == datetime(2026, 3, 2, 0, 57, tzinfo=UTC)
    assert start.min_value == 6


def test_end_task_restores_min_size():
    tasks, _ = desired_tasks(_spec(), NOW)
    end = next(t for t in tasks if t.name == "fleet-chat-biz-end")
    assert end.hhmm == "10:00" and end.min_value == 1 and end.max_value is None


def test_early_local_start_shifts_the_utc_weekdays_back():
    spec = _spec(
        schedules=[{"name": "early", "days": "mon", "start": "06:00", "end": "10:00", "min": 3}],
        cold_start_s=0,
    )
    tasks, _ = desired_tasks(spec, NOW)
    start = next(t for t in tasks if t.name.endswith("-start"))
    assert (start.hhmm, start.recurrence_value) == ("22:00", "0")  # Sunday 22:00 UTC


def test_ceiling_is_set_at_start_and_max_size_restored_at_end():
    spec = _spec(
        schedules=[{"name": "night", "days": "daily", "start": "00:00", "end": "06:00", "min": 2, "max": 4}]
    )
    tasks, _ = desired_tasks(spec, NOW)
    by = {t.name.rsplit("-", 1)[1]: t for t in tasks}
    assert by["start"].max_value == 4
    assert by["end"].max_value == 20


def test_cron_windows_are_reported_as_skipped():
    spec = _spec(schedules=[{"name": "c", "cron": "0 9 * * 1-5", "duration": "9h", "min": 4}])
    changes, _ = plan_sync(spec, [], NOW)
    assert [(c.op, c.name) for c in changes] == [("skip", "c")]


def test_missing_tasks_are_created():
    changes, _ = plan_sync(_spec(), [], NOW)
    assert sorted((c.op, c.name) for c in changes) == [
        ("create", "fleet-chat-biz-end"),
        ("create", "fleet-chat-biz-start"),
    ]


def test_matching_tasks_need_no_change():
    _, want = plan_sync(_spec(), [], NOW)
    existing = [
        _task(
            t.name,
            launch_time=t.launch_time,
            recurrence_value=t.recurrence_value,
            min_value=t.min_value,
            max_value=t.max_value,
            recurrence_end_time=t.recurrence_end,
        )
        for t in want
    ]
    changes, _ = plan_sync(_spec(), existing, NOW)
    assert changes == []


def test_changed_floor_modifies_the_task():
    _, want = plan_sync(_spec(), [], NOW)
    existing = [
        _task(t.name, launch_time=t.launch_time, recurrence_value=t.recurrence_value, min_value=t.min_value)
        for t in want
    ]
    spec = _spec(schedules=[{"name": "biz", "days": "mon-fri", "start": "09:00", "end": "18:00", "min": 8}])
    changes, _ = plan_sync(spec, existing, NOW)
    assert [(c.op, c.name, c.detail) for c in changes] == [("modify", "fleet-chat-biz-start", "min")]


def test_owned_task_no_longer_configured_is_deleted():
    changes, _ = plan_sync(_spec(schedules=[]), [_task("fleet-chat-old-start")], NOW)
    assert [(c.op, c.name) for c in changes] == [("delete", "fleet-chat-old-start")]


def test_tasks_the_service_does_not_own_are_never_touched():
    foreign = [_task("nightly-backup"), _task("fleet-other-biz-start"), _task("fleet-chat-manual")]
    changes, _ = plan_sync(_spec(schedules=[]), foreign, NOW)
    assert changes == []


def test_a_task_another_service_marked_is_neither_changed_nor_deleted_but_reported():
    theirs = [
        _task("fleet-chat-learned-0800-start", description=owner_mark("fleet-eu")),
        _task("fleet-chat-biz-start", description=owner_mark("fleet-eu"), min_value=9),
    ]
    changes, want = plan_sync(_spec(), theirs, NOW, service="fleet")
    assert sorted((c.op, c.name) for c in changes) == [
        ("create", "fleet-chat-biz-end"),  # not held by the other: written as usual
        ("foreign", "fleet-chat-biz-start"),  # held by the other: not modified, and not created beside it
        ("foreign", "fleet-chat-learned-0800-start"),  # not this service's to delete
    ]
    assert {c.writer for c in changes if c.op == "foreign"} == {"fleet-service:fleet-eu"}
    assert [t.name for t in want] == ["fleet-chat-biz-end"]


def test_a_task_written_before_the_mark_is_adopted_and_marked():
    _, want = plan_sync(_spec(), [], NOW)
    legacy = [
        _task(
            t.name,
            launch_time=t.launch_time,
            recurrence_value=t.recurrence_value,
            min_value=t.min_value,
            description=None,
        )
        for t in want
    ]
    changes, _ = plan_sync(_spec(), legacy, NOW, service="fleet-eu")
    assert sorted((c.op, c.name, c.detail) for c in changes) == [
        ("modify", "fleet-chat-biz-end", "owner"),
        ("modify", "fleet-chat-biz-start", "owner"),
    ]
    assert plan_sync(_spec(schedules=[]), legacy, NOW, service="fleet-eu")[0][0].op == "delete"


def test_two_services_on_one_scaling_group_leave_each_others_learned_floors(fake_world):
    """One service in forecast-only mode (no learned floors mirrored) and one mirroring them, both with a
    group named chat on one scaling group: the first deleted the second's floors as no longer configured."""
    from datetime import timedelta

    from fleet.service.schedules import LearnedFloor, sync_group

    cloud, svc, gid = fake_world(SCALE_ONLY)
    ess = _plain_ess(cloud, svc)
    now = cloud.now()
    learning = _learning(schedules=[])
    hour = (now + timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    made = sync_group(ess, learning, gid, now, learned=[LearnedFloor(hour, 5)], service="fleet-a")
    assert [c.op for c in made] == ["create"]
    [task] = cloud.ess.scheduled_tasks.values()
    assert task.description == "fleet-service:fleet-a"

    plain = _spec(schedules=[])  # forecast-only: no learned floors to mirror, no schedule
    seen = sync_group(ess, plain, gid, now, service="fleet-b")
    assert [(c.op, c.name) for c in seen] == [("foreign", task.name)]
    assert [t.name for t in cloud.ess.scheduled_tasks.values()] == [task.name]  # still there
    # and its writer still keeps it
    assert sync_group(ess, learning, gid, now, learned=[LearnedFloor(hour, 5)], service="fleet-a") == []


def test_the_service_warns_once_about_a_task_another_service_wrote(fake_world, caplog):
    import logging
    from datetime import timedelta

    cloud, svc, gid = fake_world(BIZ_ONLY)
    _plain_ess(cloud, svc).create_scheduled_task(
        gid,
        "fleet-chat-biz-start",
        cloud.now() + timedelta(hours=1),
        "Weekly",
        "1",
        min_value=4,
        description="fleet-service:fleet-eu",
    )
    with caplog.at_level(logging.WARNING, logger="fleet.service.loop"):
        for _ in range(3):
            assert svc.tick(cloud.now()).leader
            cloud.advance(svc.settings.schedule_sync_interval_s + 1)
    warned = [r.getMessage() for r in caplog.records if "fleet-service:fleet-eu" in r.getMessage()]
    assert len(warned) == 1 and "fleet-chat-biz-start" in warned[0]
    task = next(t for t in cloud.ess.scheduled_tasks.values() if t.name == "fleet-chat-biz-start")
    assert (task.min_value, task.description) == (4, "fleet-service:fleet-eu")  # left as the other wrote it
    ends = [t for t in cloud.ess.scheduled_tasks.values() if t.name == "fleet-chat-biz-end"]
    assert [t.description for t in ends] == [f"fleet-service:{svc.settings.service_name}"]


def test_ownership_needs_prefix_and_suffix():
    assert owned("fleet-chat-biz-start", "chat")
    assert not owned("fleet-chat-biz", "chat")
    assert not owned("team-chat-biz-start", "chat")


# ---- learned floors (predictive scaling) ----------------------------------------------------------------


def test_learned_floors_become_daily_tasks_at_the_hour_less_the_cold_start():
    from datetime import timedelta

    from fleet.service.schedules import LearnedFloor

    learned = [LearnedFloor(NOW + timedelta(hours=1), 9), LearnedFloor(NOW + timedelta(hours=2), 99)]
    want, _ = desired_tasks(_spec(), NOW, learned)
    by_name = {t.name: t for t in want}
    first = by_name["fleet-chat-learned-0100-start"]
    assert first.hhmm == "00:57" and first.recurrence_value == "0,1,2,3,4,5,6"
    assert first.min_value == 9
    assert by_name["fleet-chat-learned-0200-start"].min_value == 20  # never above max_size
    assert owned(first.name, "chat")


def _learning(**kw):
    return _spec(predictive={"mode": "on", "capacity_rps": 1.0}, **kw)


def _learned_task(hour: int, floor: int, **kw):
    return _task(
        f"fleet-chat-learned-{hour:02d}00-start", recurrence_value="0,1,2,3,4,5,6", min_value=floor, **kw
    )


def test_without_a_forecast_or_for_an_hour_it_lacks_the_learned_tasks_are_kept():
    from datetime import timedelta

    from fleet.service.schedules import LearnedFloor

    old = _learned_task(5, 3)
    kept, _ = plan_sync(_learning(), [old], NOW, learned=None)
    assert all(c.name != old.name for c in kept)
    # the forecast has the coming hour but not 05:00 (its day-ago hour not seen yet): 05:00 keeps its floor
    partial, _ = plan_sync(_learning(), [old], NOW, learned=[LearnedFloor(NOW + timedelta(hours=1), 4)])
    ops = {(c.op, c.name) for c in partial if "learned" in c.name}
    assert ops == {("create", "fleet-chat-learned-0100-start")}


@pytest.mark.parametrize(
    "predictive", [{"mode": "off"}, {"mode": "on", "capacity_rps": 1.0, "learned_floors": False}]
)
def test_with_learned_floors_off_their_tasks_are_deleted(predictive):
    old = _learned_task(5, 3)
    changes, want = plan_sync(_spec(predictive=predictive), [old], NOW, learned=None)
    assert ("delete", old.name) in {(c.op, c.name) for c in changes}
    assert not any("learned" in t.name for t in want)


def _floor_change(hour: int, have: int, want: int, refresh_far: bool = True):
    from datetime import timedelta

    from fleet.service.schedules import LearnedFloor

    launch = (NOW + timedelta(hours=hour) - timedelta(seconds=180)).replace(second=0)
    old = _learned_task(hour, have, launch_time=launch)
    changes, _ = plan_sync(
        _learning(),
        [old],
        NOW,
        learned=[LearnedFloor(NOW + timedelta(hours=hour), want)],
        refresh_far=refresh_far,
    )
    return [(c.op, c.detail) for c in changes if c.name == old.name]


def test_the_next_learned_task_to_fire_follows_its_floor_exactly():
    assert _floor_change(1, 6, 7) == [("modify", "min")]
    assert _floor_change(1, 6, 5, refresh_far=False) == [("modify", "min")]


def test_a_later_learned_task_moves_only_at_the_hourly_refresh_and_by_more_than_the_deadband():
    from fleet.service.schedules import LEARNED_DEADBAND

    assert _floor_change(5, 6, 6 + LEARNED_DEADBAND) == []  # a flip at a ceiling's boundary
    assert _floor_change(5, 6, 6 - LEARNED_DEADBAND) == []
    assert _floor_change(5, 6, 7 + LEARNED_DEADBAND) == [("modify", "min")]
    assert _floor_change(5, 6, 2, refresh_far=False) == []  # between refreshes: left for the next one


SCALE_ONLY = """\
min_size: 1
max_size: 20
scale_out:
  - {metric: queue_waiting_per_instance, above: 2, for: 30s}
"""


def _record_an_older_mirror(svc, at) -> None:
    """The store's record that an older config's service wrote the group's scheduled tasks."""
    from fleet.service.store import DecisionRecord, Outcome

    svc.store.record_decision(
        DecisionRecord(
            service=svc.settings.service_name,
            at=at,
            group_name="chat",
            kind="schedule",
            action="task_create",
            decision_id="chat:task:fleet-chat-biz-start",
            outcome=Outcome.APPLIED,
            reason="weekly 1,2,3,4,5 00:57Z",
        )
    )


def test_a_group_with_nothing_left_to_mirror_loses_the_tasks_this_service_wrote_at_the_first_sync(fake_world):
    cloud, svc, gid = fake_world(SCALE_ONLY)
    from datetime import timedelta

    from fleet.service.observe import scope_of

    ess = svc.clients_for(
        scope_of(svc.specs[0])
    ).ess  # the real client, as an older config's service wrote them
    for name in ("fleet-chat-learned-0500-start", "fleet-chat-biz-start", "team-nightly"):
        ess.create_scheduled_task(
            gid, name, cloud.now() + timedelta(hours=1), "Weekly", "0,1,2,3,4,5,6", min_value=3
        )
    names = {"fleet-chat-learned-0500-start", "fleet-chat-biz-start", "team-nightly"}
    svc.tick(cloud.now())
    # no record that this service ever mirrored the group's tasks: they are not read, let alone deleted
    assert {t.name for t in cloud.ess.scheduled_tasks.values()} == names

    svc.close()
    _, again, _ = fake_world(SCALE_ONLY)  # restarted on the same store, which has the older config's records
    _record_an_older_mirror(again, cloud.now())
    cloud.advance(300)  # past the first one's lease
    assert again.tick(cloud.now()).leader
    # neither schedules nor learned floors here now: the service's own tasks go, a team's own task stays
    assert {t.name for t in cloud.ess.scheduled_tasks.values()} == {"team-nightly"}


def test_a_first_sync_that_keeps_failing_reads_the_store_once_per_group_not_every_tick(fake_world):
    cloud, svc, gid = fake_world(SCALE_ONLY)
    _record_an_older_mirror(svc, cloud.now())
    reads = []
    real = svc.store.decisions
    svc.store.decisions = lambda **kw: reads.append(kw) or real(**kw)
    cloud.inject_fault("DescribeScheduledTasks", code="Throttling.User")
    for _ in range(4):
        assert svc.tick(cloud.now()).leader
        cloud.advance(15)
    assert not svc._last_schedule_sync  # the first sync never completed: it is tried at every tick
    assert len([kw for kw in reads if kw.get("kind") == "schedule"]) == 1
    cloud.clear_faults()
    svc.tick(cloud.now())
    assert svc._last_schedule_sync  # and once the cloud answers, it completes


# ---- the region's scheduled-task quota ---------------------------------------------------------------------

BIZ_ONLY = """\
min_size: 1
max_size: 20
schedules:
  - {name: biz, timezone: Asia/Shanghai, days: mon-fri, start: "09:00", end: "18:00", min: 6}
"""


def _plain_ess(cloud, svc):
    from fleet.service.observe import scope_of

    return svc.clients_for(scope_of(svc.specs[0])).ess


def test_when_the_quota_is_full_a_windows_task_displaces_the_latest_firing_learned_floor(fake_world):
    from datetime import timedelta

    from fleet.service.schedules import sync_group

    cloud, svc, gid = fake_world(BIZ_ONLY)
    ess = _plain_ess(cloud, svc)
    now = cloud.now()
    for hours in (5, 6, 7):  # learned floors an earlier config left, firing 5, 6 and 7 hours from now
        name = f"fleet-chat-learned-{(now + timedelta(hours=hours)):%H}00-start"
        at = now + timedelta(hours=hours)
        ess.create_scheduled_task(gid, name, at, "Weekly", "0,1,2,3,4,5,6", min_value=3)
    cloud.ess.scheduled_task_quota = 3
    spec = _learning(schedules=svc.specs[0].schedules)
    changes = sync_group(ess, spec, gid, now, learned=None)
    made_room = [c.name for c in changes if c.op == "delete" and "made room" in c.detail]
    later = [f"fleet-chat-learned-{(now + timedelta(hours=h)):%H}00-start" for h in (7, 6)]
    assert made_room == later  # the latest to fire goes first
    names = {t.name for t in cloud.ess.scheduled_tasks.values()}
    assert {"fleet-chat-biz-start", "fleet-chat-biz-end"} <= names and len(names) == 3
    assert not any(c.op == "error" for c in changes)


def test_learned_floors_beyond_the_quota_are_one_error_not_one_per_task(fake_world):
    from datetime import timedelta

    from fleet.service.schedules import LearnedFloor, sync_group

    cloud, svc, gid = fake_world(BIZ_ONLY)
    cloud.ess.scheduled_task_quota = 4
    now = cloud.now()
    learned = [LearnedFloor(now + timedelta(hours=h), 3) for h in range(1, 25)]
    spec = _learning(schedules=svc.specs[0].schedules)
    changes = sync_group(_plain_ess(cloud, svc), spec, gid, now, learned=learned)
    errors = [c for c in changes if c.op == "error"]
    assert len(errors) == 1 and errors[0].quota_full and "(21 more not created)" in errors[0].detail
    made = [c.name for c in changes if c.op == "create"]
    # the config's window first, the sooner to fire first (which of the two that is depends on the time of
    # day the test runs), then the learned floors that fire soonest
    assert set(made[:2]) == {"fleet-chat-biz-start", "fleet-chat-biz-end"}
    tasks = {t.name: t for t in _plain_ess(cloud, svc).describe_scheduled_tasks(gid)}
    assert tasks[made[0]].launch_time < tasks[made[1]].launch_time
    assert made[2:] == [f"fleet-chat-learned-{(now + timedelta(hours=h)):%H%M}-start" for h in (1, 2)]


def test_a_full_quota_is_retried_at_the_sync_interval_and_audited_once_an_hour(fake_world):
    cloud, svc, gid = fake_world(BIZ_ONLY)
    cloud.ess.scheduled_task_quota = 0
    cloud.calls.clear()
    for _ in range(25):  # 25 minutes of one-minute ticks: the 300 s sync ran at 0, 300, ..., 1200 s
        assert svc.tick(cloud.now()).leader
        cloud.advance(60)
    creates = [a for _, a in cloud.calls if a == "CreateScheduledTask"]
    assert len(creates) == 5  # one call a sync (the rest would fail alike), not one a tick
    errors = [d for d in svc.store.decisions(group="chat", kind="schedule") if d.outcome == "error"]
    assert len(errors) == 1 and "QuotaExceeded.ScheduledTask" in errors[0].reason
    cloud.ess.scheduled_task_quota = 70
    for _ in range(5):
        svc.tick(cloud.now())
        cloud.advance(60)
    names = {t.name for t in cloud.ess.scheduled_tasks.values()}
    assert {"fleet-chat-biz-start", "fleet-chat-biz-end"} <= names


def _new_york(start: str, end: str, days: str = "daily", cold_start_s: float = 180):
    return _spec(
        cold_start_s=cold_start_s,
        schedules=[
            {"name": "ny", "timezone": "America/New_York", "days": days, "start": start, "end": end, "min": 6}
        ],
    )


def test_start_task_lead_is_elapsed_time_on_the_spring_forward_day():
    # 03:00 EDT on Sunday March 8 2026 is 07:00 UTC; three minutes earlier is 06:57 UTC, whatever the wall
    # clock in New York read then (02:57 is a time it skips: it was read an hour late, 07:57 UTC)
    tasks, _ = desired_tasks(_new_york("03:00", "05:00"), datetime(2026, 3, 7, 12, tzinfo=UTC))
    start = next(t for t in tasks if t.name.endswith("-start"))
    assert start.launch_time == datetime(2026, 3, 8, 6, 57, tzinfo=UTC)
    assert start.recurrence_value == "0,1,2,3,4,5,6"


def test_start_task_lead_is_elapsed_time_on_the_fall_back_day():
    tasks, _ = desired_tasks(
        _new_york("02:00", "05:00", cold_start_s=1800), datetime(2026, 10, 31, 12, tzinfo=UTC)
    )
    start = next(t for t in tasks if t.name.endswith("-start"))
    assert start.launch_time == datetime(2026, 11, 1, 6, 30, tzinfo=UTC)  # 02:00 EST less 30 min


def test_weekly_tasks_keep_every_weekday_when_daylight_saving_changes_within_the_week():
    # Thursday March 5 2026, 10:00 EST: Friday's 09:00 is 14:00 UTC, next week's 13:00 UTC. The tasks recur
    # Monday to Friday at Friday's time until the re-sync after the change moves them: a Monday left out would
    # lose Monday's floor while the service is down.
    tasks, _ = desired_tasks(
        _new_york("09:00", "17:00", days="mon-fri"), datetime(2026, 3, 5, 15, tzinfo=UTC)
    )
    by = {t.name.rsplit("-", 1)[1]: t for t in tasks}
    assert (by["start"].launch_time, by["start"].recurrence_value) == (
        datetime(2026, 3, 6, 13, 57, tzinfo=UTC),
        "1,2,3,4,5",
    )
    assert (by["end"].hhmm, by["end"].recurrence_value) == ("22:00", "1,2,3,4,5")
    after, _ = desired_tasks(
        _new_york("09:00", "17:00", days="mon-fri"), datetime(2026, 3, 6, 23, tzinfo=UTC)
    )
    assert {t.hhmm for t in after} == {"12:57", "21:00"}  # past Friday's window: the new offset
    assert {t.recurrence_value for t in after} == {"1,2,3,4,5"}


NY_NIGHT = """\
min_size: 1
max_size: 20
cold_start_s: 180
schedules:
  - {name: ny, timezone: America/New_York, days: daily, start: "03:00", end: "05:00", min: 6}
"""


def _next_offset_change(after: datetime, zone: str, *, spring: bool) -> datetime:
    """The UTC midnight of the first day after ``after`` whose noon offset in ``zone`` is larger (``spring``:
    the clocks spring forward) or smaller (they fall back) than the previous day's."""
    from datetime import timedelta
    from zoneinfo import ZoneInfo

    z = ZoneInfo(zone)
    day = after.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    for _ in range(400):
        noon = day + timedelta(hours=12)
        today, before = noon.astimezone(z).utcoffset(), (noon - timedelta(days=1)).astimezone(z).utcoffset()
        assert today is not None and before is not None
        if (today > before) if spring else (today < before):
            return day
        day += timedelta(days=1)
    raise AssertionError(f"no offset change in {zone} within 400 days")


@pytest.mark.parametrize("spring", [True, False], ids=["spring-forward", "fall-back"])
def test_the_mirrored_floor_rises_a_cold_start_before_03_00_on_a_dst_change_day_with_the_service_down(
    fake_world, spring
):
    from datetime import time, timedelta
    from zoneinfo import ZoneInfo

    from fleet.service.schedules import sync_group

    # six InService: the fake refuses a MinSize above the DesiredCapacity (InvalidParameter.Conflict)
    cloud, svc, gid = fake_world(NY_NIGHT, in_service=6)

    def at(when: datetime) -> int:  # the fake's clock moved to ``when``: the group's MinSize then
        cloud.advance((when - cloud.now()).total_seconds())
        return cloud.ess.groups[gid].min_size

    change = _next_offset_change(cloud.now(), "America/New_York", spring=spring)
    at(change - timedelta(hours=12))  # the day before, at noon UTC: the last sync before the service stops
    changes = sync_group(_plain_ess(cloud, svc), svc.specs[0], gid, cloud.now())
    assert not any(c.op == "error" for c in changes)
    # 03:00 shows once on both change days (the clocks change at 02:00)
    opens = datetime.combine(change.date(), time(3), ZoneInfo("America/New_York")).astimezone(UTC)
    assert (at(opens - timedelta(seconds=240)), at(opens - timedelta(seconds=150))) == (1, 6)


def test_with_the_quota_full_the_learned_floors_kept_are_the_coming_hours_not_the_ones_past(fake_world):
    from datetime import timedelta

    from fleet.service.schedules import LearnedFloor, sync_group

    cloud, svc, gid = fake_world(BIZ_ONLY)
    cloud.ess.scheduled_task_quota = 4  # the window's two tasks and two learned floors
    ess = _plain_ess(cloud, svc)
    spec = _learning(schedules=svc.specs[0].schedules)
    start = cloud.now()

    def learned_names() -> set[str]:
        return {t.name for t in ess.describe_scheduled_tasks(gid) if "-learned-" in t.name}

    def hour(at) -> str:
        return f"fleet-chat-learned-{at:%H%M}-start"

    sync_group(
        ess, spec, gid, start, learned=[LearnedFloor(start + timedelta(hours=h), 3) for h in range(1, 25)]
    )
    assert learned_names() == {hour(start + timedelta(hours=h)) for h in (1, 2)}
    later = start + timedelta(hours=3, minutes=10)  # those two have fired: the next to fire are hours 4 and 5
    learned = [LearnedFloor(start + timedelta(hours=h), 3) for h in range(4, 28)]
    changes = sync_group(ess, spec, gid, later, learned=learned)
    assert learned_names() == {hour(start + timedelta(hours=h)) for h in (4, 5)}
    assert len([c for c in changes if c.op == "error" and c.quota_full]) == 1
    # and a sync with nothing new to fire sooner changes nothing
    again = sync_group(ess, spec, gid, later, learned=learned)
    assert not [c for c in again if c.op in ("create", "delete")]
    assert learned_names() == {hour(start + timedelta(hours=h)) for h in (4, 5)}


# -- calendar exceptions: Weekly tasks cannot skip a date -------------------------------------------------

# illustrative dates: Wednesday 2026-03-04 to Friday 2026-03-06 off, Saturday 2026-03-07 worked
CALENDAR = {"holidays": ["2026-03-04..2026-03-06"], "workdays": ["2026-03-07"]}
TUESDAY_NOON = datetime(2026, 3, 3, 4, 0, tzinfo=UTC)  # 12:00 in Shanghai, the day before the holidays


def _by_name(tasks):
    return {t.name: t for t in tasks}


def test_the_next_start_is_moved_past_the_holidays_ahead_and_the_end_task_is_not():
    tasks = _by_name(desired_tasks(_spec(calendar=CALENDAR), TUESDAY_NOON)[0])
    # Monday 2026-03-09 08:57 Shanghai: Wednesday to Friday skipped, still Weekly mon-fri
    assert tasks["fleet-chat-biz-start"].launch_time == datetime(2026, 3, 9, 0, 57, tzinfo=UTC)
    assert tasks["fleet-chat-biz-start"].recurrence_value == "1,2,3,4,5"
    assert tasks["fleet-chat-biz-end"].launch_time == datetime(2026, 3, 3, 10, 0, tzinfo=UTC)  # today's


def test_a_makeup_saturday_gets_a_one_off_pair_for_its_date():
    tasks = _by_name(desired_tasks(_spec(calendar=CALENDAR), TUESDAY_NOON)[0])
    start, end = tasks["fleet-chat-biz-20260307-start"], tasks["fleet-chat-biz-20260307-end"]
    assert (start.once, start.launch_time, start.min_value) == (
        True,
        datetime(2026, 3, 7, 0, 57, tzinfo=UTC),
        6,
    )
    assert (end.once, end.launch_time, end.min_value) == (True, datetime(2026, 3, 7, 10, 0, tzinfo=UTC), 1)


def test_a_start_task_that_would_fire_on_a_holiday_is_modified_then_left_alone():
    spec = _spec(calendar=CALENDAR)
    _, regular = plan_sync(_spec(), [], TUESDAY_NOON)
    existing = [  # written on Monday without the calendar: the start fires on Wednesday, a holiday
        _task(
            t.name,
            launch_time=datetime(2026, 3, 2, t.launch_time.hour, t.launch_time.minute, tzinfo=UTC),
            recurrence_value=t.recurrence_value,
            min_value=t.min_value,
            max_value=t.max_value,
        )
        for t in regular
    ]
    changes, want = plan_sync(spec, existing, TUESDAY_NOON)
    # the end fires today, then on the holidays: its recurrence stops before them, another resumes it
    assert [(c.op, c.name, c.detail) for c in changes if c.op == "modify"] == [
        ("modify", "fleet-chat-biz-start", "launch"),
        ("modify", "fleet-chat-biz-end", "recurrence_end"),
    ]
    assert {c.name for c in changes if c.op == "create"} == {
        "fleet-chat-biz-20260307-start",
        "fleet-chat-biz-20260307-end",
        "fleet-chat-biz-from20260309-end",
    }
    # the resumption is written before the cut: a full quota refusing it leaves the recurrence uncut
    order = [(c.op, c.name) for c in changes]
    assert order.index(("create", "fleet-chat-biz-from20260309-end")) < order.index(
        ("modify", "fleet-chat-biz-end")
    )
    applied = _as_written(want)
    assert plan_sync(spec, applied, TUESDAY_NOON)[0] == []


def test_a_one_off_task_that_fired_is_deleted_and_a_dropped_holiday_moves_the_start_back():
    spec = _spec(calendar=CALENDAR)
    _, want = plan_sync(spec, [], TUESDAY_NOON)
    applied = _as_written(want)
    sunday = datetime(2026, 3, 8, 4, 0, tzinfo=UTC)
    changes, _ = plan_sync(spec, applied, sunday)
    assert sorted((c.op, c.name) for c in changes) == [
        ("delete", "fleet-chat-biz-20260307-end"),
        ("delete", "fleet-chat-biz-20260307-start"),
        ("delete", "fleet-chat-biz-from20260309-end"),  # the end task fires next: its recurrence reopens
        ("modify", "fleet-chat-biz-end"),
    ]
    changes, _ = plan_sync(_spec(), applied, TUESDAY_NOON)  # the calendar removed before the holidays
    assert ("modify", "fleet-chat-biz-start", "launch") in [(c.op, c.name, c.detail) for c in changes]


def test_a_weekend_window_gets_one_off_tasks_on_a_holiday():
    weekend = {
        "name": "wknd",
        "timezone": "Asia/Shanghai",
        "days": "sat,sun",
        "start": "10:00",
        "end": "16:00",
        "min": 2,
        "max": 4,
    }
    tasks = _by_name(desired_tasks(_spec(calendar=CALENDAR, schedules=[weekend]), TUESDAY_NOON)[0])
    assert {n for n in tasks if n.startswith("fleet-chat-wknd-2026")} == {
        f"fleet-chat-wknd-2026030{d}-{edge}" for d in (4, 5, 6) for edge in ("start", "end")
    }
    # its recurring start skips the makeup Saturday: next Sunday 09:57 Shanghai
    assert tasks["fleet-chat-wknd-start"].launch_time == datetime(2026, 3, 8, 1, 57, tzinfo=UTC)


CAL_YAML = """\
min_size: 1
max_size: 20
schedules:
  - {{name: biz, timezone: Asia/Shanghai, days: mon-fri, start: "09:00", end: "18:00", min: 6}}
calendar: {{holidays: [{wed}..{fri}], workdays: [{sat}]}}
"""


def test_with_the_service_down_from_the_eve_of_the_holidays_ess_holds_the_calendars_floors(fake_world):
    from datetime import date, timedelta

    from fleet.service.schedules import sync_group
    from fleet.testing import mock_aliyun

    with mock_aliyun() as probe:  # the fake's clock: the holidays are the week after its start
        start = probe.now()
    tuesday = start.date() + timedelta(days=8 - start.weekday())
    wed, fri, sat = (tuesday + timedelta(days=d) for d in (1, 3, 4))
    cloud, svc, gid = fake_world(CAL_YAML.format(wed=wed, fri=fri, sat=sat), in_service=6)

    def at(day: date, hour: int) -> int:  # the fake's clock moved to ``hour`` in Shanghai: MinSize then
        when = datetime(day.year, day.month, day.day, hour, tzinfo=UTC) - timedelta(hours=8)
        cloud.advance((when - cloud.now()).total_seconds())
        return cloud.ess.groups[gid].min_size

    for day in (tuesday - timedelta(days=1), tuesday):  # the last sync before the service stops: Tuesday
        at(day, 12)
        changes = sync_group(_plain_ess(cloud, svc), svc.specs[0], gid, cloud.now())
        assert not any(c.op == "error" for c in changes), changes
    assert at(tuesday, 17) == 6  # a workday
    assert at(wed, 10) == 1  # a holiday
    assert at(fri, 10) == 1  # a holiday
    assert at(sat, 10) == 6  # the makeup Saturday
    assert at(sat, 19) == 1
    assert at(sat + timedelta(days=2), 10) == 6  # Monday: the weekly task again


def test_with_the_service_down_before_the_last_workday_ahead_of_the_holidays_they_hold_the_holiday_floor(
    fake_world,
):
    """Synced last on Monday, the holidays Wednesday to Friday: the weekly start fires on Tuesday, its next
    launch, and before the recurrence was cut there it fired on the holidays too (MinSize 6 on Wednesday)."""
    from datetime import date, timedelta

    from fleet.service.schedules import sync_group
    from fleet.testing import mock_aliyun

    with mock_aliyun() as probe:
        start = probe.now()
    monday = start.date() + timedelta(days=7 - start.weekday())
    tuesday, wed, fri, sat = (monday + timedelta(days=d) for d in (1, 2, 4, 5))
    cloud, svc, gid = fake_world(CAL_YAML.format(wed=wed, fri=fri, sat=sat), in_service=6)

    def at(day: date, hour: int) -> int:
        when = datetime(day.year, day.month, day.day, hour, tzinfo=UTC) - timedelta(hours=8)
        cloud.advance((when - cloud.now()).total_seconds())
        return cloud.ess.groups[gid].min_size

    at(monday, 12)
    changes = sync_group(_plain_ess(cloud, svc), svc.specs[0], gid, cloud.now())
    assert not any(c.op == "error" for c in changes), changes
    assert at(tuesday, 10) == 6  # the last workday before the holidays
    assert at(tuesday, 19) == 1
    assert at(wed, 10) == 1  # a holiday
    assert at(fri, 10) == 1
    assert at(sat, 10) == 6  # the makeup Saturday
    assert at(sat, 19) == 1
    assert at(sat + timedelta(days=2), 10) == 6  # Monday: the weekly task resumed
    assert at(sat + timedelta(days=2), 19) == 1
    assert at(sat + timedelta(days=3), 10) == 6


def _as_written(want):
    """The desired tasks as ESS lists them once written."""
    return [
        _task(
            t.name,
            launch_time=t.launch_time,
            recurrence_type=t.recurrence_type,
            recurrence_value=t.recurrence_value or None,
            min_value=t.min_value,
            max_value=t.max_value,
            recurrence_end_time=t.recurrence_end,
        )
        for t in want
    ]


# -- calendar days beyond the week ---------------------------------------------------------------------------

FAR_CALENDAR = {"workdays": ["2026-04-11"]}  # a makeup Saturday 39 days after TUESDAY_NOON


def test_a_makeup_saturday_weeks_ahead_gets_its_one_off_pair_ranked_after_the_learned_floors():
    """ESS takes a LaunchTime up to 90 days ahead: the makeup day is written weeks before, so a service down
    from now until then still raises its floor; its pair is created after the learned floors (which a service
    down for hours needs first)."""
    from datetime import timedelta

    from fleet.service.schedules import LearnedFloor

    spec = _learning(calendar=FAR_CALENDAR)
    learned = [LearnedFloor(TUESDAY_NOON + timedelta(hours=h), 3) for h in (1, 2)]
    changes, want = plan_sync(spec, [], TUESDAY_NOON, learned=learned)
    tasks = _by_name(want)
    start = tasks["fleet-chat-biz-20260411-start"]
    assert (start.once, start.launch_time, start.min_value) == (
        True,
        datetime(2026, 4, 11, 0, 57, tzinfo=UTC),
        6,
    )
    assert [c.name for c in changes if c.op == "create"][-2:] == [
        "fleet-chat-biz-20260411-start",
        "fleet-chat-biz-20260411-end",
    ]


def test_a_far_makeup_days_task_refused_by_a_full_quota_displaces_no_learned_floor(fake_world):
    from datetime import date, timedelta

    from fleet.service.schedules import sync_group

    cloud, svc, gid = fake_world(BIZ_ONLY)
    ess = _plain_ess(cloud, svc)
    now = cloud.now()
    makeup = now.date() + timedelta(days=40)
    makeup += timedelta(days=(5 - makeup.weekday()) % 7)  # a Saturday five to six weeks ahead
    spec = _learning(schedules=svc.specs[0].schedules, calendar={"workdays": [date.isoformat(makeup)]})
    name = f"fleet-chat-learned-{(now + timedelta(hours=5)):%H}00-start"
    ess.create_scheduled_task(gid, name, now + timedelta(hours=5), "Weekly", "0,1,2,3,4,5,6", min_value=3)
    cloud.ess.scheduled_task_quota = 3
    changes = sync_group(ess, spec, gid, now, learned=None)
    names = {t.name for t in cloud.ess.scheduled_tasks.values()}
    assert names == {"fleet-chat-biz-start", "fleet-chat-biz-end", name}
    [error] = [c for c in changes if c.op == "error"]
    assert error.quota_full and error.name == f"fleet-chat-biz-{makeup:%Y%m%d}-start"


def test_with_the_service_down_for_weeks_a_makeup_saturday_still_gets_its_floor(fake_world):
    from datetime import date, timedelta

    from fleet.service.schedules import sync_group

    cloud, svc, gid = fake_world(BIZ_ONLY, in_service=6)
    now = cloud.now()
    makeup = now.date() + timedelta(days=40)
    makeup += timedelta(days=(5 - makeup.weekday()) % 7)  # a Saturday five to six weeks ahead
    group = svc.specs[0]  # the config's group, with a makeup Saturday
    spec = type(group).model_validate({**group.model_dump(), "calendar": {"workdays": [makeup.isoformat()]}})
    changes = sync_group(_plain_ess(cloud, svc), spec, gid, now)
    assert not any(c.op == "error" for c in changes), changes

    def at(day: date, hour: int) -> int:  # MinSize at ``hour`` in Shanghai, the service down since the sync
        when = datetime(day.year, day.month, day.day, hour, tzinfo=UTC) - timedelta(hours=8)
        cloud.advance((when - cloud.now()).total_seconds())
        return cloud.ess.groups[gid].min_size

    assert at(makeup - timedelta(days=1), 10) == 6  # Friday
    assert at(makeup - timedelta(days=1), 19) == 1
    assert at(makeup, 10) == 6  # the makeup Saturday
    assert at(makeup, 19) == 1
    assert at(makeup + timedelta(days=1), 10) == 1  # Sunday


# -- the quota count is the tasks the sync writes ------------------------------------------------------------


@pytest.mark.parametrize(
    ("holidays", "workdays", "hour"),
    [
        ((), (), 12),  # no calendar day ahead
        ((2,), (), 12),  # a holiday Wednesday: the start and the end each stop before it and resume after
        ((1, 2), (), 12),  # holidays from tomorrow: the start moves past them, only today's end is cut
        ((1, 2), (), 20),  # the same after today's window: both move past them, nothing resumes
        ((), (5,), 12),  # a makeup Saturday: its one-off pair
        ((2,), (5, 47), 20),  # a holiday Wednesday, a makeup Saturday and one six weeks ahead
    ],
)
def test_the_quota_count_is_the_tasks_the_sync_creates(fake_world, holidays, workdays, hour):
    """``fleet validate`` counts the calendar's tasks with the functions the sync writes them from: on the
    fake, at a Monday ``hour`` in Shanghai, the sync creates the window's two Weekly tasks and as many more
    as the count says."""
    from datetime import timedelta

    from fleet.config import ONE_OFF_FAR_DAYS, calendar_task_count
    from fleet.service.schedules import sync_group

    cloud, svc, gid = fake_world(BIZ_ONLY)
    start = cloud.now()
    monday = start.date() + timedelta(days=7 - start.weekday())
    when = datetime(monday.year, monday.month, monday.day, hour, tzinfo=UTC) - timedelta(hours=8)
    cloud.advance((when - start).total_seconds())
    now = cloud.now()
    calendar = {
        "holidays": [(monday + timedelta(days=d)).isoformat() for d in holidays],
        "workdays": [(monday + timedelta(days=d)).isoformat() for d in workdays],
    }
    group = svc.specs[0]
    spec = type(group).model_validate({**group.model_dump(), "calendar": calendar})
    changes = sync_group(_plain_ess(cloud, svc), spec, gid, now)
    assert not any(c.op == "error" for c in changes), changes
    created = [t for t in cloud.ess.scheduled_tasks.values() if t.group_id == gid]
    assert len(created) == 2 + calendar_task_count([spec], now, ONE_OFF_FAR_DAYS)
