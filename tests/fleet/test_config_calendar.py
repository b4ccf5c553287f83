"""fleet.yaml's calendar: a top-level one for every group, a group's own replacing it, and bad dates refused
by `fleet validate` in one line naming the field."""

from __future__ import annotations

from datetime import date

import pytest

from fleet.cli import main
from fleet.config import ConfigError, config_json_schema, load_config

HEAD = "region: cn-chengdu\n"
GROUPS = """groups:
  - {name: chat, scaling_group_id: asg-1, min_size: 1, max_size: 8,
     schedules: [{name: biz, days: mon-fri, start: "09:00", end: "18:00", min: 4}]}
  - {name: batch, scaling_group_id: asg-2, min_size: 1, max_size: 8}
"""
TOP = """calendar:
  holidays: [2027-02-10..2027-02-12, 2027-10-01]
  workdays: [2027-02-20]
"""


def write(tmp_path, text):
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return path


def test_the_top_level_calendar_is_every_groups(tmp_path):
    cfg = load_config(write(tmp_path, HEAD + TOP + GROUPS), env={})
    for g in cfg.groups:
        assert g.calendar is not None
        assert g.calendar.weekday_of(date(2027, 2, 20)) == 0
        assert g.calendar.weekday_of(date(2027, 10, 1)) == 6


def test_a_groups_own_calendar_replaces_the_top_levels_and_null_opts_out(tmp_path):
    groups = GROUPS.replace(
        "{name: batch, scaling_group_id: asg-2,", "{name: batch, scaling_group_id: asg-2, calendar: null,"
    ).replace("{name: chat,", "{name: chat, calendar: {holidays: [2027-05-01]},")
    cfg = load_config(write(tmp_path, HEAD + TOP + groups), env={})
    chat, batch = cfg.groups
    assert chat.calendar is not None and chat.calendar.holidays == ((date(2027, 5, 1), date(2027, 5, 1)),)
    assert batch.calendar is None


@pytest.mark.parametrize(
    ("calendar", "expected"),
    [
        ("holidays: [2027-02-30]", "calendar.holidays[0]: '2027-02-30' is not a date"),
        ("holidays: [2027-02-13..2027-02-06]", "calendar.holidays[0]: '2027-02-13..2027-02-06': the range"),
        ("holidays: [2027-02-10, 2027-02-10]", "calendar: holidays: 2027-02-10 overlaps 2027-02-10"),
        ("holidays: [2027-02-20], workdays: [2027-02-20]", "2027-02-20 is both a holiday"),
        ("holiday: [2027-02-20]", "unknown key (did you mean 'holidays'?)"),
    ],
)
def test_fleet_validate_refuses_a_bad_calendar_in_one_line(tmp_path, capsys, calendar, expected):
    path = write(tmp_path, HEAD + f"calendar: {{{calendar}}}\n" + GROUPS)
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert len(err.value.problems) == 1 and expected in err.value.problems[0], err.value.problems
    assert main(["validate", "--config", str(path)]) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    assert expected in out.err + out.out


def test_the_schema_documents_the_calendar():
    schema = config_json_schema()
    assert "calendar" in schema["properties"]
    assert "holidays" in schema["$defs"]["Calendar"]["properties"]


def test_validate_warns_of_a_cron_window_the_calendar_does_not_reach_and_of_a_weekday_workday(tmp_path):
    groups = GROUPS.replace(
        "{name: biz, days: mon-fri,",
        '{name: cron-biz, cron: "0 9 1-5 * *", duration: 9h, min: 4}, {name: biz, days: mon-fri,',
    )
    text = HEAD + "calendar: {holidays: [2027-02-10], workdays: [2027-02-22]}\n" + groups
    warnings = load_config(write(tmp_path, text), env={}).warnings()
    assert any("schedule 'cron-biz': cron '0 9 1-5 * *' names days of the month" in w for w in warnings)
    assert any("2027-02-22 is a Monday already" in w for w in warnings)
    assert not any(
        "calendar" in w for w in load_config(write(tmp_path, HEAD + TOP + GROUPS), env={}).warnings()
    )


def test_the_examples_commented_calendar_validates_once_uncommented(tmp_path):
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "examples" / "fleet.yaml").read_text()
    text = re.sub(r"^#   ", "  ", re.sub(r"^# calendar:", "calendar:", text, flags=re.M), flags=re.M)
    cfg = load_config(write(tmp_path, text), env={})
    assert all(g.calendar is not None and g.calendar.workdays for g in cfg.groups)
    assert not any("calendar" in w for w in cfg.warnings())


def test_the_quota_warning_counts_the_one_off_tasks_of_the_worst_week(tmp_path):
    """Each day the calendar opens a window its weekday does not gets a one-off start/end pair up to a week
    ahead: two predictive groups (48 learned floors) and five mon-fri windows (10 tasks) fit the region's 70
    with one makeup Saturday in any week (10 more), not with two a week apart (20 more)."""
    predictive = "predictive: {mode: on, model: Qwen2.5-7B, instance_type: ecs.gn7i-c8g1.2xlarge}"
    windows = ", ".join(
        f'{{name: w{h}, days: mon-fri, start: "{h:02d}:00", end: "{h + 1:02d}:00", min: 2}}'
        for h in range(8, 13)
    )

    def warned(workdays: str) -> list[str]:
        text = (
            f"{HEAD}calendar: {{workdays: [{workdays}]}}\ngroups:\n"
            f"  - {{name: a, min_size: 1, max_size: 8, {predictive}, schedules: [{windows}]}}\n"
            f"  - {{name: b, min_size: 1, max_size: 8, {predictive}}}\n"
        )
        return [w for w in load_config(write(tmp_path, text), env={}).warnings() if "scheduled tasks" in w]

    # 58 + 10: the two are two weeks apart; written 12 weeks ahead, after the learned floors, both are held
    [far] = warned("2027-02-13, 2027-02-27")
    assert "days 8 to 84 ahead (at most 10 more) the groups mirror 78 ESS scheduled tasks" in far
    [w] = warned("2027-02-13, 2027-02-20")
    assert "mirror 78 ESS scheduled tasks" in w and "at most 20 one-off" in w


@pytest.mark.parametrize(
    ("days", "like", "warns"),
    [
        ("fri", "", True),  # a makeup Saturday read as a Monday: the Friday window stays shut
        ("fri", "workday_like: fri, ", False),
        ("mon-fri", "", False),
        ("sat,sun", "", False),  # no window of working days: a makeup day off the weekend's floor is meant
    ],
)
def test_a_makeup_workday_read_as_a_day_no_window_opens_on_is_warned(tmp_path, days, like, warns):
    text = (
        f"{HEAD}calendar: {{{like}workdays: [2027-02-20]}}\ngroups:\n"
        "  - {name: chat, scaling_group_id: asg-1, min_size: 1, max_size: 8,\n"
        f'     schedules: [{{name: late, days: "{days}", start: "09:00", end: "18:00", min: 4}}]}}\n'
    )
    warned = [w for w in load_config(write(tmp_path, text), env={}).warnings() if "workday_like" in w]
    assert bool(warned) == warns
    if warns:
        assert "2027-02-20" in warned[0] and "Monday" in warned[0] and "late" in warned[0]


def test_a_weekday_cron_counts_for_the_makeup_workday(tmp_path):
    text = (
        f"{HEAD}calendar: {{workdays: [2027-02-20]}}\ngroups:\n"
        "  - {name: chat, scaling_group_id: asg-1, min_size: 1, max_size: 8, schedules: [\n"
        '     {name: fri, days: fri, start: "09:00", end: "18:00", min: 4},\n'
        '     {name: mon, cron: "0 9 * * 1", duration: 9h, min: 4}]}\n'
    )
    assert not [w for w in load_config(write(tmp_path, text), env={}).warnings() if "workday_like" in w]


def test_the_quota_warning_reads_each_windows_days_in_its_own_time_zone(tmp_path):
    """Pacific/Kiritimati (UTC+14) is a day ahead of Pacific/Pago_Pago (UTC-11): at Pago Pago's midnight
    starting the holiday Friday 2027-02-12, its weekend window's one-off pair for that day is ahead, and
    Kiritimati's today is already Saturday the 13th, so its business window's pair for the makeup Saturday
    eight days later (2027-02-20, seven ahead there) is written too: four one-off tasks at once, where one
    date for every window's today never has the two days within its week."""
    predictive = "predictive: {mode: on, model: Qwen2.5-7B, instance_type: ecs.gn7i-c8g1.2xlarge}"
    text = (
        f"{HEAD}calendar: {{holidays: [2027-02-12], workdays: [2027-02-20]}}\ngroups:\n"
        f"  - {{name: a, min_size: 1, max_size: 8, {predictive}, schedules: [{{name: biz, days: mon-fri,\n"
        '     timezone: Pacific/Kiritimati, start: "09:00", end: "18:00", min: 2}]}\n'
        f"  - {{name: b, min_size: 1, max_size: 8, {predictive}, schedules: [{{name: wknd, days: sat-sun,\n"
        '     timezone: Pacific/Pago_Pago, start: "09:00", end: "18:00", min: 2}]}\n'
        f"  - {{name: c, min_size: 1, max_size: 8, {predictive}}}\n"
    )
    [w] = [w for w in load_config(write(tmp_path, text), env={}).warnings() if "scheduled tasks" in w]
    assert "mirror 80 ESS scheduled tasks (4 for schedule windows, at most 4 one-off" in w


def test_the_quota_warning_counts_the_weekly_tasks_resumed_after_holidays(tmp_path):
    """A mon-fri window's start and end each stop before a run of holidays within the week and a second
    Weekly task resumes them after it: two more tasks while the run is ahead."""
    predictive = "predictive: {mode: on, model: Qwen2.5-7B, instance_type: ecs.gn7i-c8g1.2xlarge}"
    text = (
        f"{HEAD}calendar: {{holidays: [2027-02-10..2027-02-12]}}\ngroups:\n"
        f"  - {{name: a, min_size: 1, max_size: 8, {predictive}, schedules: [{{name: biz, days: mon-fri,\n"
        '     start: "09:00", end: "18:00", min: 2}]}\n'
        f"  - {{name: b, min_size: 1, max_size: 8, {predictive}}}\n"
        f"  - {{name: c, min_size: 1, max_size: 8, {predictive}}}\n"
    )
    [w] = [w for w in load_config(write(tmp_path, text), env={}).warnings() if "scheduled tasks" in w]
    assert "mirror 76 ESS scheduled tasks (2 for schedule windows, at most 2 one-off or resumed" in w


def test_validate_names_the_holidays_the_weekly_tasks_still_fire_on(tmp_path, capsys):
    """The sync cuts a weekly task before a holiday only 7 days ahead: fleet validate names the holidays
    beyond (within the 84 days the makeup days are written for) that a service down from now would leave
    with the weekday floor. The holidays are set from the clock validate reads: a weekday three weeks on,
    with the working day before it, and one within the week, which is cut."""
    from datetime import UTC, datetime, timedelta

    today = datetime.now(UTC).date()
    far = next(d for d in (today + timedelta(days=k) for k in range(21, 28)) if d.weekday() in (1, 2, 3, 4))
    near = next(d for d in (today + timedelta(days=k) for k in range(2, 6)) if d.weekday() in (1, 2, 3, 4))
    text = HEAD + f"calendar: {{holidays: [{near}, {far}]}}\n" + GROUPS
    assert main(["validate", "--config", str(write(tmp_path, text))]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"groups[chat].schedules[biz]: holidays not protected yet: {far}:" in err
    assert str(near) not in err
