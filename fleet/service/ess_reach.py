"""Whether ESS could be read for each group at the leader's last tick, kept in the store for the commands.

An operator request that needs ESS (isolate, release, replace) waits while its group cannot be read: nothing
is written to a group the service cannot see. The operator must be told, at once and in `fleet status`, that
the request is queued and why it waits. The leader records each group's change of reach as an event of the
pseudo-incident ``ess:<group>`` (``ess_unreadable`` with the read's error, ``ess_readable`` when it answers
again), once per change and not once per tick (fleet/service/pseudo_incidents.py); the commands read the last
one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from fleet.service.observe import Observation
from fleet.service.pseudo_incidents import Episode, Kinds, Timeline, episodes
from fleet.service.store import Store

UNREADABLE = "ess_unreadable"
READABLE = "ess_readable"
# an outage is recorded when it starts and when it ends, never again while it lasts
KINDS = Kinds(start=UNREADABLE, end=READABLE)


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

    @classmethod
    def of(cls, group: str, episode: Episode) -> Unreadable:
        """The outage its timeline records: since its last event (the one that started it), its error."""
        return cls(group, episode.last_at, episode.detail)


def outages(store: Store, groups: Iterable[str]) -> dict[str, Unreadable]:
    """The groups ESS could not be read for at the leader's last tick (one read for them all)."""
    keys = {event_key(g): g for g in groups}
    return {keys[key]: Unreadable.of(keys[key], ep) for key, ep in episodes(store, keys, KINDS).items()}


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
        # each group's outage as last recorded, or none (read from the store at the group's first use)
        self.timeline = Timeline(store, KINDS)

    def update(self, observation: Observation, names: Iterable[str], now: datetime) -> None:
        for name in names:
            g = observation.groups.get(name)
            if g is None:
                continue
            if g.ok:
                self.timeline.clear(event_key(name), now, "")
            else:
                self.timeline.holds(event_key(name), now, "; ".join(dict.fromkeys(g.errors))[:2000])

    def outage(self, group: str) -> Unreadable | None:
        """The group's outage as this replica last saw it (None: read, or not observed by it)."""
        episode = self.timeline.known(event_key(group))
        return None if episode is None else Unreadable.of(group, episode)
