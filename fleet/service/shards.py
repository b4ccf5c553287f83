"""Sharded leadership: the groups split into shards, each shard led by one replica under its own lease.

- A group's shard is a stable hash of its name (``shard_of``), so every replica computes the same split.
- Replicas announce themselves with a membership row (a lease named ``<service>/member/<holder>`` that each
  renews every tick and that expires a TTL after the replica stops).
- Each shard is assigned by rendezvous hashing with bounded loads over the live members (``assignment``):
  shard by shard, the member with the highest hash of (member, shard) among those still under an even
  share (floor(shards / members), or one more) owns it. Plain rendezvous moves the fewest shards on a
  join or a leave but splits unevenly (24 shards over 3 replicas came out 7/6/11); the bound keeps every
  replica within one shard of an even share, at the price of a few more shards moving on a change.
- A replica takes the lease of each shard it is assigned (``LeaseManager``: compare-and-set, epoch per shard)
  and releases at once those it is no longer assigned, so a join rebalances within one TTL (the old owner
  releases on its next tick, the new one takes on its next). A dead replica's shard leases and membership
  expire after one TTL and its shards are taken on the others' next tick: within two TTLs.
- No group has two writers: a shard's writes are fenced by that shard's lease and epoch, and a lease has one
  holder at a time whatever the replicas believe about membership.

With one shard (the default) the lease is the service's single leader lease of old, named after the service,
and the history stays under the service's own key: a single replica behaves exactly as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from fleet.service.lease import Lease, LeaseManager
from fleet.service.store import leases

MEMBER_INFIX = "/member/"
SHARD_INFIX = "/shard-"


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def shard_of(group: str, shards: int) -> int:
    """The shard a group belongs to (stable across replicas, restarts and Python versions)."""
    return 0 if shards <= 1 else _hash(f"group:{group}") % shards


def assignment(shards: int, members: Sequence[str]) -> dict[int, str]:
    """Bounded-load rendezvous hashing: each shard's owner among the live members (empty: no member).

    The same members give the same answer in any order on every replica. Every member owns
    floor(shards / members) or one more: shard by shard, the member with the highest hash of (member,
    shard) that still has room takes it."""
    live = sorted(set(members))
    if not live:
        return {}
    base, extra = divmod(shards, len(live))
    load = dict.fromkeys(live, 0)
    owners: dict[int, str] = {}
    for shard in range(shards):
        full = sum(1 for n in load.values() if n > base)  # members already at base + 1
        room = [m for m in live if load[m] < base or (load[m] == base and full < extra)]
        weights = {m: _hash(f"{m}#{shard}") for m in room}
        owner = max(room, key=lambda m: (weights[m], m))
        owners[shard] = owner
        load[owner] += 1
    return owners


def shard_lease_name(service: str, shard: int, shards: int) -> str:
    return service if shards <= 1 else f"{service}{SHARD_INFIX}{shard}"


def history_key(service: str, shard: int, shards: int) -> str:
    """Where a shard's policy history is kept (policy_state.service)."""
    return shard_lease_name(service, shard, shards)


@dataclass(frozen=True)
class ShardView:
    """One shard as the store shows it (``fleet status``, GET /status)."""

    shard: int
    holder: str | None
    epoch: int | None
    expires_at: datetime | None
    groups: tuple[str, ...]


class ShardCoordinator:
    """One replica's side of sharding: membership, assignment, and a lease manager per shard."""

    def __init__(self, engine: Engine, service: str, holder: str, ttl_s: float, shards: int) -> None:
        if shards < 1:
            raise ValueError("shards must be at least 1")
        self.engine = engine
        self.service = service
        self.holder = holder
        self.shards = shards
        self.ttl_s = ttl_s
        self.member = LeaseManager(engine, f"{service}{MEMBER_INFIX}{holder}"[:100], holder, ttl_s)
        self.managers = {
            k: LeaseManager(engine, shard_lease_name(service, k, shards), holder, ttl_s)
            for k in range(shards)
        }

    def members(self, now: datetime) -> list[str]:
        """The replicas whose membership has not expired (with one shard: just this one)."""
        if self.shards <= 1:
            return [self.holder]
        prefix = f"{self.service}{MEMBER_INFIX}"
        with self.engine.connect() as c:
            rows = c.execute(
                sa.select(leases.c.holder).where(leases.c.name.like(prefix + "%"), leases.c.expires_at > now)
            ).all()
        return sorted({r[0] for r in rows})

    def assigned(self, now: datetime) -> set[int]:
        """Announce ourselves, then the shards rendezvous hashing gives us among the live members."""
        if self.shards <= 1:
            return {0}
        self.member.acquire(now)
        live = self.members(now)
        if self.holder not in live:
            live.append(self.holder)
        return {k for k, owner in assignment(self.shards, live).items() if owner == self.holder}

    def acquire(self, now: datetime) -> dict[int, Lease]:
        """Take or renew our assigned shards' leases, release the others we hold; the held ones by shard."""
        mine = self.assigned(now)
        held: dict[int, Lease] = {}
        for k, manager in self.managers.items():
            if k in mine:
                lease = manager.acquire(now)
                if lease is not None:
                    held[k] = lease
            elif self.shards > 1:
                manager.release(now)
        return held

    def release(self, now: datetime) -> None:
        for manager in self.managers.values():
            manager.release(now)
        if self.shards > 1:
            self.member.release(now)

    def view(self, groups: Iterable[str]) -> list[ShardView]:
        """Every shard's holder, epoch and expiry as stored, with its groups."""
        by_shard: dict[int, list[str]] = {k: [] for k in range(self.shards)}
        for g in groups:
            by_shard[shard_of(g, self.shards)].append(g)
        out = []
        for k, manager in self.managers.items():
            lease = manager.current()
            out.append(
                ShardView(
                    shard=k,
                    holder=lease.holder if lease else None,
                    epoch=lease.epoch if lease else None,
                    expires_at=lease.expires_at if lease else None,
                    groups=tuple(by_shard[k]),
                )
            )
        return out
