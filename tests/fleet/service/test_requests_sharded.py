"""Operator requests under several shards: a request that no shard's policy takes up ends, as with one
replica, with an outcome saying why (before, each shard kept only the requests it applied, and the others
waited for good)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fleet.cloud.clients import make_clients
from fleet.cloud.retry import RetryPolicy
from fleet.config import load_config
from fleet.service.app import build_service
from fleet.service.loop import REQUEST_EXPIRY
from fleet.service.settings import ServiceSettings
from fleet.service.shards import shard_of
from fleet.testing import mock_aliyun

REGION = "cn-chengdu"
ENV = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "ak", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "secret-value"}
FAST = RetryPolicy(attempts=2, initial_s=0.0, max_s=0.0, jitter=False, sleep=lambda s: None)
SHARDS = 4


def _world(tmp_path, cloud, url: str, holders: list[str]):
    lines = [f"region: {REGION}", f'account_id: "{cloud.account_id}"', "groups:"]
    for n in range(4):
        gid = cloud.create_group_for_tests(
            name=f"g{n}", min_size=1, max_size=10, desired_capacity=2, in_service=2, region_id=REGION
        )
        lines += [f"  - name: g{n}", f"    scaling_group_id: {gid}", "    min_size: 1", "    max_size: 10"]
    path = tmp_path / "fleet.yaml"
    path.write_text("\n".join(lines) + "\n")
    cfg = load_config(path, env={})
    assert len({shard_of(g.name, SHARDS) for g in cfg.groups}) > 1  # the groups span several shards
    settings = replace(ServiceSettings.from_config(cfg), lease_shards=SHARDS, lease_ttl_s=30.0)
    return [
        build_service(
            cfg,
            make_clients(REGION, cloud.account_id, retry=FAST, env=ENV),
            database_url=url,
            clock=cloud.now,
            holder_id=h,
            settings=settings,
        )
        for h in holders
    ]


def _instance_of(store, group_name: str) -> str:
    """An instance of the group as its shard's leader last read it."""
    _, rows = store.instance_lists()[group_name]
    return sorted(row["instance_id"] for row in rows)[0]


def _tick_all(services, now) -> None:
    for svc in services:
        svc.tick(now)


def _check_unmatched_requests_end(tmp_path, url: str, holders: list[str]) -> None:
    with mock_aliyun() as cloud:
        services = _world(tmp_path, cloud, url, holders)
        store = services[0].store
        try:
            _tick_all(services, cloud.now())
            _tick_all(services, cloud.advance(10))  # the shards settle on their owners
            # a breaker reset of a group no longer configured, an isolation of an instance in no group, an
            # acknowledgment of an incident the store does not hold
            at = cloud.now()
            reset = store.add_request("reset_breaker", at, group_name="gone", reason="x", actor="bob")
            nowhere = store.add_request("isolate", at, instance_id="i-nowhere", reason="x", actor="bob")
            ack = store.add_request("ack", at, incident_id="inc-unknown", actor="human:bob")
            _tick_all(services, cloud.advance(10))
            assert {r.id for r in store.pending_requests()} == {reset, nowhere, ack}
            _tick_all(services, cloud.advance(REQUEST_EXPIRY.total_seconds() + 60))
            assert store.pending_requests() == []
            outcomes = {r.id: r.outcome for r in store.requests()}
            assert outcomes[ack].startswith("expired: no shard took it")
            assert "inc-unknown is in none of the configured groups" in outcomes[ack]
            assert outcomes[reset].startswith("expired: no shard took it")
            assert "group gone is not configured" in outcomes[reset]
            assert outcomes[nowhere].startswith("expired: no shard took it")
            assert "i-nowhere is in none of the configured groups" in outcomes[nowhere]
        finally:
            for svc in services:
                svc.close(release_lease=False)


def test_requests_no_shard_takes_end_with_a_reason_sqlite(tmp_path):
    _check_unmatched_requests_end(tmp_path, f"sqlite:///{tmp_path / 'fleet.db'}", ["only"])


def test_requests_no_shard_takes_end_with_a_reason_two_replicas_sqlite(tmp_path):
    _check_unmatched_requests_end(tmp_path, f"sqlite:///{tmp_path / 'fleet.db'}", ["a", "b"])


def test_requests_no_shard_takes_end_with_a_reason_postgresql(tmp_path, postgres_url):
    _check_unmatched_requests_end(tmp_path, postgres_url, ["a", "b"])


@pytest.mark.parametrize("holders", [["only"], ["a", "b"]])
def test_a_request_one_shard_applies_is_applied_once(tmp_path, holders):
    with mock_aliyun() as cloud:
        services = _world(tmp_path, cloud, f"sqlite:///{tmp_path / 'fleet.db'}", holders)
        store = services[0].store
        try:
            _tick_all(services, cloud.now())
            _tick_all(services, cloud.advance(10))
            target = _instance_of(store, "g1")
            rid = store.add_request("isolate", cloud.now(), instance_id=target, reason="x", actor="bob")
            _tick_all(services, cloud.advance(10))
            [req] = [r for r in store.requests() if r.id == rid]
            assert req.outcome == "applied"
        finally:
            for svc in services:
                svc.close(release_lease=False)
