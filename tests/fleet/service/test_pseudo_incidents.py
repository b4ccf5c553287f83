"""The pseudo-incidents' one bookkeeping (ESS reach, failing scale writes, SLA pages): a condition is recorded
when it starts, again no more often than its interval, once when it ends; a fresh replica over the same store
takes up a condition another recorded."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.service.pseudo_incidents import Episode, Kinds, Timeline, episodes, record_once, under_way
from fleet.service.store import IncidentEvent, Store, open_store

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
KINDS = Kinds(start="failing", repeat="still_failing", end="recovered")
HOUR = 3600.0


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    return open_store(f"sqlite:///{tmp_path_factory.mktemp('pseudo') / 'fleet.db'}")


_keys = itertools.count()


def _key() -> str:
    """A key of its own for each case (the store is shared by the module's tests)."""
    return f"cond:{next(_keys)}"


def _kinds(store: Store, key: str) -> list[str]:
    return [e.kind for e in store.incident_events(key)]


def _at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_a_condition_that_holds_tick_after_tick_is_recorded_at_its_start_then_each_interval(store):
    key, timeline = _key(), Timeline(store, KINDS)
    got = [timeline.holds(key, _at(m), f"tick {m}", repeat_s=2 * HOUR) for m in range(0, 300, 15)]
    # started at 0, again at 120 and 240 min: never at each tick
    assert [(m, k) for m, k in zip(range(0, 300, 15), got, strict=True) if k] == [
        (0, "failing"),
        (120, "still_failing"),
        (240, "still_failing"),
    ]
    assert _kinds(store, key) == ["failing", "still_failing", "still_failing"]
    assert timeline.current(key) == Episode(_at(0), _at(240), "still_failing", "tick 240")


def test_without_an_interval_a_condition_is_recorded_once_however_long_it_holds(store):
    key, timeline = _key(), Timeline(store, KINDS)
    assert timeline.holds(key, _at(0), "down") == "failing"
    assert [timeline.holds(key, _at(m), "down") for m in range(1, 600, 60)] == [None] * 10
    assert _kinds(store, key) == ["failing"]


def test_the_end_is_recorded_once_and_only_after_a_start(store):
    key, timeline = _key(), Timeline(store, KINDS)
    assert timeline.clear(key, _at(0), "fine") is None  # nothing under way: a quiet end records nothing
    assert _kinds(store, key) == []
    timeline.holds(key, _at(1), "down")
    ended = timeline.clear(key, _at(5), "back after 4 min")
    assert ended == Episode(_at(1), _at(1), "failing", "down")
    assert timeline.clear(key, _at(6), "still fine") is None
    assert [(e.kind, e.detail) for e in store.incident_events(key)] == [
        ("failing", "down"),
        ("recovered", "back after 4 min"),
    ]
    assert timeline.holds(key, _at(7), "down again") == "failing"  # a new condition starts anew


def test_a_fresh_replica_takes_up_the_condition_another_recorded(store):
    key, first = _key(), Timeline(store, KINDS)
    first.holds(key, _at(0), "down")
    first.holds(key, _at(120), "down", repeat_s=2 * HOUR)
    restarted = Timeline(store, KINDS)
    assert restarted.known(key) is None  # nothing read before its first use
    assert restarted.current(key) == Episode(_at(0), _at(120), "still_failing", "down")
    assert restarted.holds(key, _at(200), "down", repeat_s=2 * HOUR) is None  # 80 min after the last one
    assert restarted.holds(key, _at(240), "down", repeat_s=2 * HOUR) == "still_failing"
    assert restarted.clear(key, _at(250), "back") is not None
    assert _kinds(store, key) == ["failing", "still_failing", "still_failing", "recovered"]


def test_a_timeline_without_an_end_kind_clears_without_recording(store):
    key, timeline = _key(), Timeline(store, Kinds(start="seen"))
    timeline.holds(key, _at(0), "x")
    assert timeline.clear(key, _at(1), "") is not None and timeline.current(key) is None
    assert _kinds(store, key) == ["seen"]


def _ev(kind: str, minute: int) -> IncidentEvent:
    return IncidentEvent("k", _at(minute), kind, f"d{minute}")


@pytest.mark.parametrize(
    ("timeline", "expected"),
    [
        ([], None),
        ([("failing", 0)], Episode(_at(0), _at(0), "failing", "d0")),
        ([("failing", 0), ("still_failing", 120)], Episode(_at(0), _at(120), "still_failing", "d120")),
        ([("failing", 0), ("recovered", 9)], None),
        # the last run of start and repeat events counts, not an earlier one that ended
        ([("failing", 0), ("recovered", 9), ("failing", 20)], Episode(_at(20), _at(20), "failing", "d20")),
        # another event under the key (an incident's own timeline) ends nothing, but is no start either
        ([("failing", 0), ("detected", 3)], None),
        ([("detected", 0), ("failing", 3)], Episode(_at(3), _at(3), "failing", "d3")),
    ],
)
def test_the_condition_under_way_is_read_from_the_last_events(timeline, expected):
    assert under_way([_ev(kind, m) for kind, m in timeline], KINDS) == expected


def test_several_keys_are_read_at_once_and_only_those_under_way_are_named(store):
    down, back, never = _key(), _key(), _key()
    timeline = Timeline(store, KINDS)
    timeline.holds(down, _at(0), "a")
    timeline.holds(back, _at(0), "b")
    timeline.clear(back, _at(1), "")
    assert episodes(store, [down, back, never], KINDS) == {down: Episode(_at(0), _at(0), "failing", "a")}


def test_a_once_only_condition_is_recorded_the_first_time_by_any_replica(store):
    key = _key()
    store.add_incident_event(IncidentEvent(key, _at(0), "detected", "rule"))  # the incident's own events
    assert record_once(store, key, "sla_respond_at_risk", _at(1), "5 min left")
    assert not record_once(store, key, "sla_respond_at_risk", _at(2), "4 min left")
    assert record_once(store, key, "sla_respond_breached", _at(6), "late")  # another warning: its own page
    assert [(e.kind, e.detail) for e in store.incident_events(key)] == [
        ("detected", "rule"),
        ("sla_respond_at_risk", "5 min left"),
        ("sla_respond_breached", "late"),
    ]


# a tick: the condition holds (True) or not, and how many minutes pass before the next
_ticks = st.lists(st.tuples(st.booleans(), st.integers(1, 200)), max_size=30)


@settings(max_examples=40, deadline=None)
@given(ticks=_ticks, restart_at=st.integers(0, 30))
def test_any_run_of_ticks_keeps_a_well_formed_timeline_across_a_restart(store, ticks, restart_at):
    key, timeline = _key(), Timeline(store, KINDS)
    now = T0
    for i, (holds, step) in enumerate(ticks):
        if i == restart_at:
            timeline = Timeline(store, KINDS)  # a new leader: only the store is shared
        if holds:
            timeline.holds(key, now, "x", repeat_s=2 * HOUR)
        else:
            timeline.clear(key, now, "")
        now += timedelta(minutes=step)
    events = store.incident_events(key)
    previous: IncidentEvent | None = None
    for ev in events:
        if ev.kind == "failing":  # a start follows nothing or an end
            assert previous is None or previous.kind == "recovered"
        else:  # a repeat or an end follows a start or a repeat; a repeat two hours after it at least
            assert previous is not None and previous.kind in KINDS.ongoing
            assert ev.kind == "recovered" or ev.at - previous.at >= timedelta(hours=2)
        previous = ev
    # the last tick's state is what the store says
    held = bool(ticks) and ticks[-1][0]
    assert (Timeline(store, KINDS).current(key) is not None) == held
