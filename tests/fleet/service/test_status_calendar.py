"""GET /status (and the console built on it) says when the calendar is why the floor is what it is."""

from __future__ import annotations

from datetime import UTC, datetime

from fleet.service.console.pages import _floors
from fleet.service.store import open_store
from fleet.service.views import service_status
from policies import GroupSnapshot, GroupSpec, PolicySpec, Snapshot, decide

BIZ = {"name": "biz", "days": "mon-fri", "start": "09:00", "end": "18:00", "min": 6}
# illustrative: Thursday 2027-02-11 off; 10:00 in Asia/Shanghai is 02:00 UTC
AT = datetime(2027, 2, 11, 2, 0, tzinfo=UTC)


def test_the_status_names_the_holiday_that_took_the_business_hours_floor(tmp_path):
    group = GroupSpec.model_validate(
        {
            "name": "chat",
            "min_size": 1,
            "max_size": 8,
            "schedules": [BIZ],
            "calendar": {"holidays": ["2027-02-11"]},
        }
    )
    g = _status_on_the_holiday(tmp_path, group, desired=1)
    assert (g["floor"], g["floor_source"]) == (2, "warm_floor on holiday 2027-02-11 (as Sunday)")
    assert "holiday 2027-02-11" in str(_floors(g, ()))


def test_fleet_status_says_why_the_last_scale_was_made(tmp_path, capsys):
    """The reason the service recorded with its last scale write, the floor's naming the holiday: `fleet
    status` shows it beside the target (it said only the target and the outcome)."""
    from fleet.cli import main
    from fleet.service.actuate import _reason_text
    from fleet.service.store import DecisionRecord

    group = GroupSpec.model_validate(
        {
            "name": "chat",
            "min_size": 1,
            "max_size": 8,
            "warm_floor": 1,
            "schedules": [BIZ],
            "calendar": {"holidays": ["2027-02-11"]},
        }
    )
    snap = Snapshot(taken_at=AT, groups=[GroupSnapshot(name="chat", desired_capacity=0)])
    gp = decide(snap, PolicySpec(groups=(group,)), None, AT).group("chat")
    assert gp is not None and gp.serving_target == 1
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = open_store(url)
    try:
        store.record_decision(
            DecisionRecord(
                service="fleet",
                at=AT,
                group_name="chat",
                kind="scale",
                action="scale_to",
                decision_id="chat:scale:0",
                outcome="applied",
                target=1,
                reason=_reason_text(gp),
            )
        )
    finally:
        store.close()
    assert main(["status", "--database", url]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "chat: last scale to 1:" in out and "floor 1 (min_size on holiday 2027-02-11 (as Sunday))" in out


def test_fleet_plan_names_the_holiday_even_where_the_floor_does_not_bind(tmp_path, capsys):
    """Six instances held on a holiday Thursday: no floor reason (the floor does not lift them), yet the plan
    says where its floor of 2 comes from and that the holiday is why."""
    schedule = '{name: biz, days: mon-fri, start: "09:00", end: "18:00", min: 6}'
    out = _plan_on_the_holiday(tmp_path, capsys, schedule, desired=6)
    assert "chat: floor 2 (warm_floor on holiday 2027-02-11 (as Sunday))" in out


WEEKEND = {"name": "weekend", "days": "sat,sun", "start": "00:00", "end": "24:00", "max": 4}


def test_the_status_names_the_holiday_that_set_the_weekend_ceiling(tmp_path):
    """A holiday Thursday read as Sunday: GET /status and the console's group page say the weekend's
    ceiling holds because of the holiday (they gave the ceiling's number alone)."""
    from fleet.service.console.pages import _bound

    group = GroupSpec.model_validate(
        {
            "name": "chat",
            "min_size": 1,
            "max_size": 8,
            "schedules": [BIZ, WEEKEND],
            "calendar": {"holidays": ["2027-02-11"]},
        }
    )
    g = _status_on_the_holiday(tmp_path, group, desired=6)
    assert (g["ceiling"], g["ceiling_source"]) == (4, "schedule:weekend on holiday 2027-02-11 (as Sunday)")
    assert _bound(g, "ceiling") == "4 (schedule:weekend on holiday 2027-02-11 (as Sunday))"


def test_fleet_plan_names_the_holiday_even_where_the_ceiling_does_not_bind(tmp_path, capsys):
    """Three instances on a holiday Thursday: the weekend's ceiling of 4 does not take any down, yet the
    plan says where it comes from and that the holiday is why."""
    schedule = '{name: weekend, days: "sat,sun", start: "00:00", end: "24:00", max: 4}'
    out = _plan_on_the_holiday(tmp_path, capsys, schedule, desired=3)
    assert "chat: ceiling 4 (schedule:weekend on holiday 2027-02-11 (as Sunday))" in out


def _plan_on_the_holiday(tmp_path, capsys, schedule: str, desired: int) -> str:
    """``fleet plan``'s output, whitespace folded, for one group with ``schedule`` and ``desired`` instances
    at AT, a holiday Thursday by the calendar."""
    from fleet.cli import main

    config = tmp_path / "fleet.yaml"
    config.write_text(
        "region: cn-chengdu\ncalendar: {holidays: [2027-02-11]}\ngroups:\n"
        "  - {name: chat, scaling_group_id: asg-1, min_size: 1, max_size: 8,\n"
        f"     schedules: [{schedule}]}}\n"
    )
    snap = Snapshot(taken_at=AT, groups=[GroupSnapshot(name="chat", desired_capacity=desired)])
    path = tmp_path / "snap.json"
    path.write_text(snap.model_dump_json())
    assert main(["plan", "--config", str(config), "--snapshot", str(path)]) == 0
    return " ".join(capsys.readouterr().out.split())


def _status_on_the_holiday(tmp_path, group: GroupSpec, desired: int) -> dict:
    """The group's entry in GET /status's view of the plan decided at AT with ``desired`` instances."""
    snap = Snapshot(taken_at=AT, groups=[GroupSnapshot(name="chat", desired_capacity=desired)])
    plan = decide(snap, PolicySpec(groups=(group,)), None, AT)
    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    try:
        view = service_status(store, AT, ["chat"], {}, None, plan)
    finally:
        store.close()
    (g,) = view["groups"]
    return g
