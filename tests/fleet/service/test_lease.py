"""The leader lease: compare-and-set acquisition, renewal, takeover only after expiry, fencing by epoch."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from fleet.service.lease import LeaseManager
from fleet.service.store import open_store

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def _pair(url, ttl_s=10.0):
    store = open_store(url)
    return (
        LeaseManager(store.engine, "fleet", "replica-a", ttl_s),
        LeaseManager(store.engine, "fleet", "replica-b", ttl_s),
    )


def test_first_replica_acquires_epoch_one(database_url):
    a, _ = _pair(database_url)
    lease = a.acquire(T0)
    assert lease is not None and lease.holder == "replica-a" and lease.epoch == 1


def test_second_replica_waits_while_lease_is_valid(database_url):
    a, b = _pair(database_url)
    a.acquire(T0)
    assert b.acquire(T0 + timedelta(seconds=9)) is None


def test_holder_renewal_extends_expiry_and_keeps_epoch(database_url):
    a, b = _pair(database_url)
    first = a.acquire(T0)
    renewed = a.acquire(T0 + timedelta(seconds=8))
    assert renewed.epoch == first.epoch
    assert b.acquire(T0 + timedelta(seconds=12)) is None  # would have expired at T0+10 without the renewal


def test_takeover_after_expiry_increments_epoch(database_url):
    a, b = _pair(database_url)
    a.acquire(T0)
    lease = b.acquire(T0 + timedelta(seconds=10))
    assert lease is not None and lease.holder == "replica-b" and lease.epoch == 2


def test_old_holder_is_fenced_after_takeover(database_url):
    a, b = _pair(database_url)
    old = a.acquire(T0)
    b.acquire(T0 + timedelta(seconds=11))
    assert a.still_held(old, T0 + timedelta(seconds=11)) is False
    assert a.acquire(T0 + timedelta(seconds=12)) is None


def test_lease_not_held_once_expired_even_without_rival(database_url):
    a, _ = _pair(database_url)
    lease = a.acquire(T0)
    assert a.still_held(lease, T0 + timedelta(seconds=5)) is True
    assert a.still_held(lease, T0 + timedelta(seconds=10)) is False


def test_release_hands_over_at_once(database_url):
    a, b = _pair(database_url)
    a.acquire(T0)
    a.release(T0 + timedelta(seconds=1))
    assert b.acquire(T0 + timedelta(seconds=1)) is not None


def test_concurrent_acquire_has_exactly_one_winner(database_url):
    store = open_store(database_url)
    managers = [LeaseManager(store.engine, "fleet", f"r{i}", 10.0) for i in range(6)]
    results: list = [None] * len(managers)
    barrier = threading.Barrier(len(managers))

    def run(i):
        barrier.wait()
        results[i] = managers[i].acquire(T0)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(managers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r is not None for r in results) == 1


def _twins(url, ttl_s=10.0):
    """Two processes started with the same holder id (the same --holder)."""
    store = open_store(url)
    return (
        LeaseManager(store.engine, "fleet", "replica-a", ttl_s),
        LeaseManager(store.engine, "fleet", "replica-a", ttl_s),
    )


def test_a_second_process_with_the_same_holder_id_does_not_share_the_lease(database_url, caplog):
    first, twin = _twins(database_url)
    lease = first.acquire(T0)
    assert twin.acquire(T0 + timedelta(seconds=1)) is None  # before: it renewed the first one's lease
    assert "held under this replica's id 'replica-a' by another process" in caplog.text
    assert first.acquire(T0 + timedelta(seconds=8)).epoch == lease.epoch
    assert twin.acquire(T0 + timedelta(seconds=12)) is None


def test_a_twin_takes_over_only_after_expiry_and_fences_the_first(database_url):
    first, twin = _twins(database_url)
    old = first.acquire(T0)
    taken = twin.acquire(T0 + timedelta(seconds=10))
    assert taken is not None and taken.epoch == old.epoch + 1
    assert first.still_held(old, T0 + timedelta(seconds=11)) is False
    assert first.acquire(T0 + timedelta(seconds=11)) is None


def test_a_twins_release_leaves_the_holders_lease(database_url):
    first, twin = _twins(database_url)
    _, rival = _pair(database_url)
    lease = first.acquire(T0)
    twin.release(T0 + timedelta(seconds=1))
    assert first.still_held(lease, T0 + timedelta(seconds=2)) is True
    assert rival.acquire(T0 + timedelta(seconds=2)) is None
