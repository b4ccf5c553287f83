"""Whether ESS could be read for each group at the leader's last tick, kept in the store for the commands.

An operator request that needs ESS (isolate, release, replace) waits while its group cannot be read: nothing
is written to a group the service cannot see. The operator must be told, at once and in `fleet status`, that
the request is queued and why it waits. The leader records each group's change of reach as an event of the
pseudo-incident ``ess:<group>`` (``ess_unreadable`` with the read's error, ``ess_readable`` when it answers
again), once per change and not once per tick; the commands read the last one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from fleet.service.observe import Observation
from fleet.service.store import IncidentEvent, Store

UNREADABLE = "ess_unreadable"
READABLE = "ess_readable"


def event_key(group: str) -> str:
    """The pseudo-incident whose timeline keeps a group's ESS reach."""
    return f"ess:{group}"


@dataclass(frozen=True)
class Unreadable:
    """A group ESS could not be read for at the leader's last tick: since when, and the read's error."""

    group: str
    since: datetime
    error: str

    def why(self) -> str:
        """Why a request on the group waits, in one line."""
        return (
            f"waiting: ESS cannot be read for group {self.group} (since {self.since.isoformat()}: "
            f"{self.error or 'the read failed'}); applied once it answers"
        )


def unreadable(store: Store, group: str) -> Unreadable | None:
    """The group's ESS outage as the leader last recorded it, or None when ESS answered."""
    return outages(store, [group]).get(group)


def outages(store: Store, groups: Iterable[str]) -> dict[str, Unreadable]:
    """The groups ESS could not be read for at the leader's last tick (one read for them all)."""
    keys = {event_key(g): g for g in groups}
    out = {}
    for key, events in store.incident_events_by_incident(keys).items():
        if events and events[-1].kind == UNREADABLE:
            out[keys[key]] = Unreadable(keys[key], events[-1].at, events[-1].detail)
    return out


def outage_for_instance(store: Store, instance_id: str) -> Unreadable | None:
    """Why a request on an instance waits: the outage of the group holding it (its open incident's, or
    the group whose last instance list read names it), or None when ESS answered for it."""
    groups = {inc.group_name for inc in store.incidents(open_only=True) if inc.instance_id == instance_id}
    for name, (_, rows) in store.instance_lists().items():
        if any(isinstance(row, dict) and row.get("instance_id") == instance_id for row in rows):
            groups.add(name)
    down = outages(store, groups)
    return down[min(down)] if down else None


class EssReach:
    """The leader's side: records each group's change of ESS reach (module docstring), and says why a
    request waits."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # per group, as last recorded: its outage, or None (read from the store at first use)
        self._state: dict[str, Unreadable | None] = {}

    def update(self, observation: Observation, names: Iterable[str], now: datetime) -> None:
        for name in names:
            g = observation.groups.get(name)
            if g is None:
                continue
            if name not in self._state:
                self._state[name] = unreadable(self.store, name)
            was = self._state[name]
            if (was is not None) == (not g.ok):
                continue
            if g.ok:
                self._state[name] = None
                self.store.add_incident_event(IncidentEvent(event_key(name), now, READABLE, ""))
                continue
            error = "; ".join(dict.fromkeys(g.errors))[:2000]
            self._state[name] = Unreadable(name, now, error)
            self.store.add_incident_event(IncidentEvent(event_key(name), now, UNREADABLE, error))

    def outage(self, group: str) -> Unreadable | None:
        """The group's outage as this replica last saw it (None: read, or not observed by it)."""
        return self._state.get(group)
