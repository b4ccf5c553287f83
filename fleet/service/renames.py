"""A group renamed in fleet.yaml keeps what was learned of it under its former name.

The store keys each group's demand minutes (``demand_samples``), forecasts, capacity memory (its ladder
position and sold-out rungs) and saved policy state by the group's name. A group renamed in fleet.yaml (the
same ESS scaling group under a new ``name``) started from nothing: the forecast fell back to level-and-trend
for a day, its learned floors and capacity correction were gone, and its sold-out memory was forgotten.

Each name is recorded with the scaling group it was observed as (``group_identities``: the group id and the
account and region fleet.yaml gives it). When a configured group is first observed by a replica (at start,
and so after a SIGHUP reload, which starts the service again) and has no rows of its own, the rows of the one
unconfigured name recorded with the same scaling group move to it, in the leader's transaction that is
fenced by the shard's lease. Never when both names are configured, never when the new name already has rows
of its own (nothing is merged), and never when several unconfigured names could be meant.

An operator's pause or resume (``group_controls``) moves along with them, unless the new name has one of its
own: a group paused and then renamed stays paused from the first tick under its new name. It is not a row
"of its own" (a pause of the new name does not stop its history being taken over), and a former name with
only a pause is followed all the same.

Open incidents are not moved here: ``policies.decide`` hands them to the group now holding their instance.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from fleet.service.capacity_store import capacity_memory
from fleet.service.store import (
    Store,
    demand_samples,
    forecasts,
    group_controls,
    group_identities,
    instance_lists,
    policy_state,
)
from policies.model import ForecastState, GroupHistory, History

# The per-name rows a renamed group takes over: "rows of its own" are rows in any of these.
MOVED_TABLES = (demand_samples, forecasts, capacity_memory)


@dataclass(frozen=True)
class Identity:
    """The ESS scaling group a name stands for: its id, and fleet.yaml's account and region ("" for the
    top level's)."""

    scaling_group_id: str
    account: str = ""
    region: str = ""


@dataclass(frozen=True)
class Adoption:
    """What a renamed group took over from its former name."""

    group: str
    former: str
    identity: Identity
    rows: dict[str, int]  # table -> rows moved
    learned: bool  # the saved forecast state (capacity correction) and launch times came along
    paused: bool = False  # an operator's pause came along (a control row moved: rows["group_controls"])

    def describe(self) -> str:
        parts = [
            f"{self.rows.get('demand_samples', 0)} demand minutes",
            f"{self.rows.get('forecasts', 0)} forecasts",
        ]
        if self.rows.get("capacity_memory"):
            parts.append("its capacity memory")
        if self.learned:
            parts.append("its forecast state and launch times")
        if self.paused:
            parts.append("its pause")
        return (
            f"group {self.group}: adopted {', '.join(parts)} of {self.former}, the former name of scaling "
            f"group {self.identity.scaling_group_id} (renamed in fleet.yaml)"
        )


def identities(store: Store, conn: Connection) -> dict[str, Identity]:
    """Every name of this service with the scaling group it was last observed as."""
    t = group_identities
    q = sa.select(t.c.group_name, t.c.scaling_group_id, t.c.account, t.c.region).where(
        t.c.service == store.service
    )
    return {r.group_name: Identity(r.scaling_group_id, r.account, r.region) for r in conn.execute(q)}


def record_identity(store: Store, group: str, identity: Identity, now: datetime, conn: Connection) -> None:
    """Keep (or replace) the scaling group ``group`` is observed as."""
    t = group_identities
    values = {
        "scaling_group_id": identity.scaling_group_id,
        "account": identity.account,
        "region": identity.region,
        "seen_at": now,
    }
    mine = (t.c.service == store.service) & (t.c.group_name == group)
    if conn.execute(sa.update(t).where(mine).values(**values)).rowcount == 0:
        conn.execute(sa.insert(t).values(service=store.service, group_name=group, **values))


def has_rows(store: Store, group: str, conn: Connection) -> bool:
    """Whether ``group`` has demand minutes, forecasts or capacity memory in the store."""
    for table in MOVED_TABLES:
        q = sa.select(table.c.group_name).where(table.c.service == store.service, table.c.group_name == group)
        if conn.execute(q.limit(1)).first() is not None:
            return True
    return False


def former_name(
    store: Store, group: str, identity: Identity, configured: Collection[str], conn: Connection
) -> str | None:
    """The one unconfigured name recorded as the same scaling group that has rows, or None (none, or
    several: which one was meant cannot be told)."""
    recorded = identities(store, conn)
    same = [
        name
        for name, seen in recorded.items()
        if seen == identity and name != group and name not in configured
    ]
    with_rows = [name for name in sorted(same) if _followed(store, name, conn)]
    if not with_rows:
        # none recorded: a name last observed before migration 0007 recorded names, known by the scaling
        # group its stored instance list (0005) names
        unrecorded = set(_listed_as(store, identity.scaling_group_id, conn)) - set(recorded) - set(configured)
        with_rows = [name for name in sorted(unrecorded - {group}) if _followed(store, name, conn)]
    return with_rows[0] if len(with_rows) == 1 else None


def _followed(store: Store, name: str, conn: Connection) -> bool:
    """Whether a former name has anything a renamed group takes over."""
    return has_rows(store, name, conn) or _control(store, name, conn) is not None


def _listed_as(store: Store, scaling_group_id: str, conn: Connection) -> list[str]:
    """The names whose last stored instance list holds an instance of ``scaling_group_id``. The list names
    no account or region: only a name with no recorded identity is looked for this way, and an empty list
    (a group at zero instances) names nothing."""
    t = instance_lists
    rows = conn.execute(sa.select(t.c.group_name, t.c.body).where(t.c.service == store.service))
    return [
        name
        for name, body in rows
        if isinstance(body, list)
        and any(isinstance(i, dict) and i.get("group_id") == scaling_group_id for i in body)
    ]


def _control(store: Store, group: str, conn: Connection) -> bool | None:
    """Whether an operator paused ``group`` (False: resumed), None when it has no control row."""
    t = group_controls
    q = sa.select(t.c.paused).where(t.c.service == store.service, t.c.group_name == group)
    row = conn.execute(q).first()
    return None if row is None else bool(row[0])


def _move_control(store: Store, group: str, former: str, conn: Connection) -> bool | None:
    """Move ``former``'s pause or resume to ``group`` unless ``group`` has its own; what moved (None:
    nothing)."""
    state = _control(store, former, conn)
    if state is None or _control(store, group, conn) is not None:
        return None
    t = group_controls
    conn.execute(
        sa.update(t).where(t.c.service == store.service, t.c.group_name == former).values(group_name=group)
    )
    return state


def adopt(
    store: Store,
    group: str,
    identity: Identity,
    configured: Collection[str],
    conn: Connection,
    *,
    history_key: Callable[[str], str],
    now: datetime,
    epoch: int | None,
) -> Adoption | None:
    """Move the rows of ``group``'s former name to it, in the caller's transaction; None when nothing is
    taken over (``group`` has rows of its own, or no single former name has any).

    The saved policy state's learned part (the forecast's state, with its capacity correction, and the
    launch times) comes along when ``group`` has none of its own: moved when both names' states are kept
    the same ``history_key`` (that of ``group``'s shard, whose lease the caller holds), copied otherwise
    (another shard's history is its own leader's to write)."""
    if has_rows(store, group, conn):
        return None
    former = former_name(store, group, identity, configured, conn)
    if former is None:
        return None
    rows: dict[str, int] = {}
    for table in MOVED_TABLES:
        mine = (table.c.service == store.service) & (table.c.group_name == former)
        rows[table.name] = int(conn.execute(sa.update(table).where(mine).values(group_name=group)).rowcount)
    control = _move_control(store, group, former, conn)
    if control is not None:
        rows[group_controls.name] = 1
    keys = (history_key(group), history_key(former))
    learned = _adopt_learned(store, group, former, conn, *keys, now, epoch)
    return Adoption(group, former, identity, rows, learned, paused=bool(control))


def _load(conn: Connection, key: str) -> History | None:
    row = conn.execute(sa.select(policy_state.c.history).where(policy_state.c.service == key)).first()
    return None if row is None else History.model_validate(row[0])


def _adopt_learned(
    store: Store,
    group: str,
    former: str,
    conn: Connection,
    key: str,
    former_key: str,
    now: datetime,
    epoch: int | None,
) -> bool:
    source = _load(conn, former_key)
    old = source.groups.get(former) if source is not None else None
    if old is None or not _learned(old):
        return False
    history = source if former_key == key else _load(conn, key)
    history = history if history is not None else History()
    new = history.groups.get(group)
    if new is not None and _learned(new):
        return False  # its own learned state: nothing is merged
    new = new if new is not None else GroupHistory()
    history.groups[group] = new.model_copy(update={"forecast": old.forecast, "launches": list(old.launches)})
    if former_key == key:
        history.groups[former] = old.model_copy(update={"forecast": ForecastState(), "launches": []})
    store.save_history(history.model_dump(mode="json"), now, epoch, conn, key=key)
    return True


def _learned(gh: GroupHistory) -> bool:
    return gh.forecast != ForecastState() or bool(gh.launches)
