"""Conditions of a group kept as the timeline of a pseudo-incident: when each starts, repeats and ends.

Some conditions that must reach a person or a command are not incidents of an instance: ESS cannot be read
for a group (``ess:<group>``, fleet/service/ess_reach.py), a group's scale writes keep failing
(``scale-write:<group>``, fleet/service/write_alerts.py), an SLA deadline at risk or broken (the incident's
own timeline, or ``group:<group>``; the loop's notifications). Each is kept in the store as events under one
key, an event a change and never one a tick:

- *start*: the condition begins (or is first seen);
- *repeat*: it still holds, recorded again no more often than the caller's interval (none: never);
- *end*: it is over; recorded only for a condition under way, so a condition nobody was told of ends quietly.

The store is the memory: a restarted or new leader reads the last events and takes up a condition another
recorded, so it neither announces again what was announced nor misses its end. :class:`Timeline` keeps one
kind of condition across keys; :func:`record_once` is the condition that starts once and never ends (an SLA
page: one per incident and warning, ever). What is said to a person (notification texts, severities) stays
with the callers: this module decides and records the changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from fleet.service.store import IncidentEvent, Store


@dataclass(frozen=True)
class Kinds:
    """The event kinds one condition's timeline records: at its start, when it repeats, at its end."""

    start: str
    repeat: str | None = None
    end: str | None = None

    @property
    def ongoing(self) -> tuple[str, ...]:
        """The kinds that say the condition holds (a timeline ending in one has a condition under way)."""
        return (self.start,) if self.repeat is None else (self.start, self.repeat)


@dataclass(frozen=True)
class Episode:
    """A condition under way, as its timeline says: the first event of its last run of start and repeat
    events, and the last one (when, what kind, its detail)."""

    started_at: datetime
    last_at: datetime
    last_kind: str
    detail: str


def under_way(events: Sequence[IncidentEvent], kinds: Kinds) -> Episode | None:
    """The condition under way at the end of ``events`` (in order), None when the last event is not a start
    or a repeat."""
    if not events or events[-1].kind not in kinds.ongoing:
        return None
    first = events[-1]
    for ev in reversed(events):
        if ev.kind not in kinds.ongoing:
            break
        first = ev
    last = events[-1]
    return Episode(first.at, last.at, last.kind, last.detail)


def episodes(store: Store, keys: Iterable[str], kinds: Kinds) -> dict[str, Episode]:
    """The conditions under way at ``keys`` (one read for them all), by key; keys with none are absent."""
    out = {}
    for key, events in store.incident_events_by_incident(keys).items():
        episode = under_way(events, kinds)
        if episode is not None:
            out[key] = episode
    return out


class Timeline:
    """One kind of condition, per key: the state of each key is read from the store at its first use and
    then kept as this replica records it, so a tick reads nothing back."""

    def __init__(self, store: Store, kinds: Kinds) -> None:
        self.store = store
        self.kinds = kinds
        self._state: dict[str, Episode | None] = {}

    def current(self, key: str) -> Episode | None:
        """The condition under way at ``key``, or None."""
        if key not in self._state:
            self._state[key] = episodes(self.store, [key], self.kinds).get(key)
        return self._state[key]

    def known(self, key: str) -> Episode | None:
        """The condition under way at ``key`` as this replica last read or recorded it, without reading the
        store (None also for a key it has not used)."""
        return self._state.get(key)

    def holds(self, key: str, now: datetime, detail: str, *, repeat_s: float | None = None) -> str | None:
        """The condition holds at ``now``: recorded as started when none is under way, as repeated when one
        is and its last event is at least ``repeat_s`` old (never without ``repeat_s``). The kind recorded,
        or None when nothing changed."""
        episode = self.current(key)
        if episode is None:
            self._record(key, now, self.kinds.start, detail, Episode(now, now, self.kinds.start, detail))
            return self.kinds.start
        if repeat_s is None or self.kinds.repeat is None:
            return None
        if (now - episode.last_at).total_seconds() < repeat_s:
            return None
        again = Episode(episode.started_at, now, self.kinds.repeat, detail)
        self._record(key, now, self.kinds.repeat, detail, again)
        return self.kinds.repeat

    def clear(self, key: str, now: datetime, detail: str) -> Episode | None:
        """The condition no longer holds at ``now``: the end of the one under way is recorded; the episode
        that ended, or None when none was under way (nothing recorded)."""
        episode = self.current(key)
        if episode is None:
            return None
        self._state[key] = None
        if self.kinds.end is not None:
            self.store.add_incident_event(IncidentEvent(key, now, self.kinds.end, detail))
        return episode

    def _record(self, key: str, now: datetime, kind: str, detail: str, episode: Episode) -> None:
        self._state[key] = episode
        self.store.add_incident_event(IncidentEvent(key, now, kind, detail))


def record_once(store: Store, key: str, kind: str, now: datetime, detail: str) -> bool:
    """A condition that starts once and never ends: its event is recorded under ``key`` the first time it
    is seen, by this replica or any other, and never again. Whether it was recorded now."""
    if store.incident_events_by_incident([key], kind=kind).get(key):
        return False
    store.add_incident_event(IncidentEvent(key, now, kind, detail))
    return True
