"""The leader lease: which replica may act, kept in the shared database.

One row per service name holds the holder's id, an expiry and an epoch. Every change is a single conditional
UPDATE (compare-and-set), so two replicas can never both believe they hold it: the holder renews while the
lease is still valid; anyone else takes over only after it expired, and a takeover increments the epoch. The
epoch is recorded with every action (fencing): a replica that stalled past its expiry finds the epoch moved
on and stops.

A tick may outlast the TTL (a slow cloud): :class:`LeaseKeeper` renews the held lease from a background
thread every third of the TTL while the tick runs, each renewal again a compare-and-set on holder *and*
epoch, so a replica that lost the lease can never extend someone else's. Once a renewal fails the keeper
says so for the rest of the tick and every fence refuses.

A lease is renewed only by the manager (the process) that took it, never by another one that happens to carry
the same holder id: two replicas started with the same ``--holder`` would otherwise both renew one lease and
both act. A process that finds its holder id on a valid lease it did not take waits for it to expire (a
restart after a crash waits one TTL, as with any other id), and says so once in the log.

Replicas compare expiry against their own clock; keep their clocks within a small fraction of the TTL (NTP).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from fleet.service.store import leases

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lease:
    """A lease as read or won: valid for acting while ``now < expires_at``."""

    name: str
    holder: str
    epoch: int
    expires_at: datetime

    def valid_at(self, now: datetime) -> bool:
        return now < self.expires_at


class LeaseManager:
    """Acquire, renew, verify and release one named lease for one holder."""

    def __init__(self, engine: Engine, name: str, holder: str, ttl_s: float) -> None:
        if ttl_s <= 0:
            raise ValueError("lease ttl_s must be positive")
        self.engine = engine
        self.name = name
        self.holder = holder
        self.ttl = timedelta(seconds=ttl_s)
        # The epoch this manager took and holds: renewals and the release are conditional on it, so a
        # second process under the same holder id can neither renew nor release this one's lease.
        self.epoch: int | None = None
        self._warned_twin = False

    def acquire(self, now: datetime) -> Lease | None:
        """Renew our valid lease, or take an expired (or missing) one; None while someone else holds it."""
        expires = now + self.ttl
        with self.engine.begin() as c:
            if self.epoch is not None and c.execute(self._renewal(self.epoch, now)).rowcount == 1:
                return self._read(c)
            taken = c.execute(
                sa.update(leases)
                .where(leases.c.name == self.name, leases.c.expires_at <= now)
                .values(holder=self.holder, epoch=leases.c.epoch + 1, acquired_at=now, expires_at=expires)
            )
            if taken.rowcount == 1:
                return self._took(self._read(c))
            self._note_twin(self._read(c))
        try:
            with self.engine.begin() as c:
                c.execute(
                    sa.insert(leases).values(
                        name=self.name, holder=self.holder, epoch=1, acquired_at=now, expires_at=expires
                    )
                )
                return self._took(self._read(c))
        except sa.exc.IntegrityError:  # the row exists and is someone else's, valid lease
            return None

    def _took(self, lease: Lease | None) -> Lease | None:
        self.epoch = lease.epoch if lease is not None else None
        self._warned_twin = False
        return lease

    def _note_twin(self, current: Lease | None) -> None:
        """Once: a valid lease carries our holder id but was not taken by this manager (another process
        started with the same id, or this replica before a restart): wait for it to expire, never share it."""
        if current is None or current.holder != self.holder or self._warned_twin:
            return
        self._warned_twin = True
        log.warning(
            "lease %s (epoch %d) is held under this replica's id %r by another process, or by this replica "
            "before a restart: waiting for it to expire (until %s); give every replica its own --holder",
            self.name,
            current.epoch,
            self.holder,
            current.expires_at.isoformat(),
        )

    def renew(self, lease: Lease, now: datetime) -> Lease | None:
        """Extend our still-valid lease of this epoch to ``now + ttl``; None when it is no longer ours."""
        with self.engine.begin() as c:
            return self._read(c) if c.execute(self._renewal(lease.epoch, now)).rowcount == 1 else None

    def _renewal(self, epoch: int, now: datetime) -> sa.Update:
        """Extend this holder's still-valid lease of ``epoch`` to ``now + ttl``: a compare-and-set that
        changes no row once another replica (or process) holds the lease."""
        return (
            sa.update(leases)
            .where(
                leases.c.name == self.name,
                leases.c.holder == self.holder,
                leases.c.epoch == epoch,
                leases.c.expires_at > now,
            )
            .values(expires_at=now + self.ttl)
        )

    def still_held(self, lease: Lease, now: datetime, conn: Connection | None = None) -> bool:
        """Fencing check before a write: same holder, same epoch, not expired."""
        if conn is None:
            with self.engine.connect() as c:
                current = self._read(c)
        else:
            current = self._read(conn)
        return (
            current is not None
            and current.holder == self.holder
            and current.epoch == lease.epoch
            and current.valid_at(now)
        )

    def release(self, now: datetime) -> None:
        """Give the lease up at once (graceful shutdown) so another replica need not wait for the expiry."""
        if self.epoch is None:
            return  # this manager holds nothing: a lease under our holder id is another process's
        with self.engine.begin() as c:
            c.execute(
                sa.update(leases)
                .where(
                    leases.c.name == self.name, leases.c.holder == self.holder, leases.c.epoch == self.epoch
                )
                .values(expires_at=now)
            )
        self.epoch = None

    def current(self) -> Lease | None:
        with self.engine.connect() as c:
            return self._read(c)

    def _read(self, c: Connection) -> Lease | None:
        row = c.execute(
            sa.select(leases.c.holder, leases.c.epoch, leases.c.expires_at).where(leases.c.name == self.name)
        ).first()
        if row is None:
            return None
        return Lease(name=self.name, holder=row[0], epoch=int(row[1]), expires_at=row[2])


class LeaseKeeper:
    """Keeps one held lease alive while a long tick runs: ``with LeaseKeeper(manager, lease, now) as k``.

    ``now()`` is the tick's clock (for a virtual clock: its start plus the real time elapsed). ``held()`` is
    the fence: the lease is ours by the latest renewal and the store agrees, checked at the moment of asking.
    """

    def __init__(
        self,
        manager: LeaseManager,
        lease: Lease,
        now: Callable[[], datetime],
        interval_s: float | None = None,
    ) -> None:
        self.manager = manager
        self.lease = lease
        self.now = now
        self.interval_s = interval_s if interval_s is not None else manager.ttl.total_seconds() / 3
        self.lost = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LeaseKeeper:
        if self.interval_s > 0:
            self._thread = threading.Thread(target=self._run, name="fleet-lease-keeper", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def renew_now(self) -> bool:
        """Renew at once (also called between a tick's phases); False once the lease is lost."""
        with self._lock:
            if self.lost:
                return False
            try:
                renewed = self.manager.renew(self.lease, self.now())
            except Exception:  # the store is unreachable: the lease runs out on its own; do not act on it
                log.warning("lease %s: renewal failed", self.manager.name, exc_info=True)
                renewed = None
            if renewed is None:
                self.lost = True
                log.warning("lease %s (epoch %d) lost during the tick", self.manager.name, self.lease.epoch)
                return False
            self.lease = renewed
            return True

    def held(self) -> bool:
        """The fence before a write: not lost, and the store shows our holder, epoch and a future expiry."""
        with self._lock:
            if self.lost:
                return False
            return self.manager.still_held(self.lease, self.now())

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self.renew_now():
                return
