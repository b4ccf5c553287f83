"""Spot reclaim notices against the in-process fake through the real ESS SDK: the replacement the capacity
manager orders for each, by the state the reclaimed instance is in."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from fleet.cloud.clients import make_clients
from fleet.cloud.retry import RetryPolicy
from fleet.config import load_config
from fleet.service import capacity_store as cs
from fleet.service.capacity import CapacityManager
from fleet.service.observe import Observer
from fleet.service.store import Store, open_store
from fleet.testing import mock_aliyun

REGION = "cn-chengdu"
ENV = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "ak", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "secret-value"}
A10 = "ecs.gn7i-c8g1.2xlarge"


@dataclass
class Spot:
    cloud: Any
    gid: str
    ess: Any
    store: Store
    manager: CapacityManager
    observer: Observer

    def members(self) -> dict[str, str]:
        return {i: m.lifecycle_state for i, m in self.cloud.ess.instances.items() if m.group_id == self.gid}

    def reclaims(self) -> list[str]:
        now = self.cloud.now()
        result = self.manager.reclaims(self.observer.observe(now), now, fence=lambda: True)
        assert result.errors == []
        return result.reclaims


@pytest.fixture
def spot(tmp_path) -> Iterator[Spot]:
    """A group of three InService spot A10s with desired capacity, watched by a capacity manager."""
    with mock_aliyun() as cloud:
        gid = cloud.create_group_for_tests(name="chat", max_size=8, desired_capacity=0, region_id=REGION)
        clients = make_clients(
            REGION, cloud.account_id, retry=RetryPolicy(attempts=1, sleep=lambda s: None), env=ENV
        )
        config_id = cloud.ess.groups[gid].active_config_id
        clients.ess.modify_scaling_configuration(
            config_id, instance_types=[A10], spot_strategy="SpotAsPriceGo"
        )
        clients.ess.scale_to(gid, 3, "three")
        cloud.advance(120)
        path = tmp_path / "fleet.yaml"
        path.write_text(
            f'region: {REGION}\naccount_id: "{cloud.account_id}"\ngroups:\n'
            f"  - name: chat\n    scaling_group_id: {gid}\n    min_size: 0\n    max_size: 8\n"
            f"    instance_types: [{A10}]\n    capacity_mix: {{spot_percentage_above_base: 100}}\n"
        )
        spec = load_config(path, env={}).groups[0]
        store = open_store(f"sqlite:///{tmp_path / 'f.db'}")
        try:
            manager = CapacityManager(
                clients.ess, store, [spec], service="fleet", dry_run=False, notify=lambda a: None
            )
            yield Spot(cloud, gid, clients.ess, store, manager, Observer(clients, [spec]))
        finally:
            store.close()


def test_an_in_service_spot_instance_is_replaced_keeping_the_desired_capacity(spot):
    victim = sorted(spot.members())[0]
    spot.cloud.reclaim_spot(victim, 300)
    assert spot.reclaims() == [victim]
    spot.cloud.advance(120)
    assert spot.cloud.ess.groups[spot.gid].desired_capacity == 3
    members = spot.members()
    assert victim not in members and sorted(members.values()) == ["InService"] * 3


def test_an_isolated_spot_instance_leaves_with_its_place_its_replacement_being_surged_already(spot):
    """Isolation put the instance in Standby and surged its replacement (desired 3 -> 4). Its reclaim used to
    keep desired at 4, so ESS launched a second replacement that the next plan (3 serving, no Standby) scaled
    in again at random."""
    victim = sorted(spot.members())[0]
    spot.ess.enter_standby(spot.gid, [victim], "isolate")
    spot.ess.scale_to(spot.gid, 4, "surge")
    spot.cloud.advance(120)
    spot.cloud.reclaim_spot(victim, 300)
    assert spot.reclaims() == [victim]
    spot.cloud.advance(120)
    assert spot.cloud.ess.groups[spot.gid].desired_capacity == 3
    members = spot.members()
    assert victim not in members and sorted(members.values()) == ["InService"] * 3
    (record,) = cs.records(spot.store)
    events = spot.store.incident_events(record.id)
    assert [e.kind for e in events] == ["notice", "replacement_ordered", "draining"]
    assert "desired capacity lowered by one" in events[1].detail
