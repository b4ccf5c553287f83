"""ESS reach kept per group as the pseudo-incident ``ess:<group>``: one event when a group cannot be read,
one when it can again, never one a tick; a restarted leader takes up an outage another recorded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fleet.service.ess_reach import READABLE, UNREADABLE, EssReach, Unreadable, event_key, outages
from fleet.service.observe import GroupObservation, Observation
from fleet.service.store import open_store

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def _tick(reach: EssReach, minute: int, **read: list[str] | None) -> None:
    """One tick: each group read (None) or not (its errors)."""
    now = T0 + timedelta(minutes=minute)
    groups = {g: GroupObservation(g, ok=errors is None, errors=errors or []) for g, errors in read.items()}
    reach.update(Observation(now, groups), list(read), now)


def test_an_outage_is_recorded_when_it_starts_and_ends_and_taken_up_after_a_restart(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'fleet.db'}")
    reach = EssReach(store)
    _tick(reach, 0, chat=None, code=None)
    denied = ["Throttling.User: slow down", "Throttling.User: slow down", "ServiceUnavailable"]
    for minute in (1, 2, 3):
        _tick(reach, minute, chat=denied, code=None)
    since = T0 + timedelta(minutes=1)
    down = Unreadable("chat", since, "Throttling.User: slow down; ServiceUnavailable")
    assert reach.outage("chat") == down and reach.outage("code") is None
    assert outages(store, ["chat", "code"]) == {"chat": down}
    again = EssReach(store)  # a restarted leader: it has seen nothing yet
    assert again.outage("chat") is None
    _tick(again, 4, chat=["ServiceUnavailable"])
    assert again.outage("chat") == down  # the outage another recorded, not a new one
    _tick(again, 5, chat=None)
    _tick(again, 6, chat=None)
    assert again.outage("chat") is None and outages(store, ["chat"]) == {}
    events = store.incident_events(event_key("chat"))
    assert [(e.kind, e.at, e.detail) for e in events] == [
        (UNREADABLE, since, down.error),
        (READABLE, T0 + timedelta(minutes=5), ""),
    ]
    assert store.incident_events(event_key("code")) == []
