"""Spot capacity against the in-process fake through the real ESS SDK: the replacement the capacity manager
orders for each reclaim notice, by the state the reclaimed instance is in, and moves between spot rungs."""

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
A10, L20 = "ecs.gn7i-c8g1.2xlarge", "ecs.gn8is.2xlarge"


@dataclass
class Spot:
    cloud: Any
    gid: str
    ess: Any
    store: Store
    manager: CapacityManager
    observer: Observer
    clients: Any

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
            yield Spot(cloud, gid, clients.ess, store, manager, Observer(clients, [spec]), clients)
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


def test_a_fall_back_to_a_spot_rung_carries_the_configs_spot_price_limit(spot, tmp_path):
    """The group's scaling configuration was made SpotAsPriceGo (by hand, or before fleet.yaml set a limit):
    the move to the L20's spot rung with SpotWithPriceLimit used to send no SpotPriceLimits, which ESS
    refuses (MissingParameter.SpotPriceLimits), so every tick failed and the ladder never moved."""
    path = tmp_path / "limit.yaml"
    path.write_text(
        f'region: {REGION}\naccount_id: "{spot.cloud.account_id}"\ngroups:\n'
        f"  - name: chat\n    scaling_group_id: {spot.gid}\n    min_size: 0\n    max_size: 8\n"
        f"    instance_types: [{A10}, {L20}]\n"
        "    capacity_mix: {spot_percentage_above_base: 100, spot_price_limit: 50}\n"
    )
    spec = load_config(path, env={}).groups[0]
    manager = CapacityManager(
        spot.ess, spot.store, [spec], service="fleet", dry_run=False, notify=lambda a: None
    )
    spot.cloud.set_stock(A10, 0, spot=True)
    spot.ess.scale_to(spot.gid, 5, "scale-out")
    now = spot.cloud.now()
    result = manager.fall_back(
        Observer(spot.clients, [spec]).observe(now), {"chat": 5}, now, fence=lambda: True
    )
    assert result.errors == []
    assert [(m.to_rung.instance_type, m.to_rung.spot) for m in result.moves] == [(L20, True)]
    config = spot.cloud.ess.configurations[spot.cloud.ess.groups[spot.gid].active_config_id]
    assert (config.instance_types, config.spot_strategy) == ([L20, A10], "SpotWithPriceLimit")
    assert config.spot_price_limits == {L20: 50.0, A10: 50.0}


def test_a_reclaim_ess_replaced_itself_is_recorded_and_announced_without_a_write(spot):
    """SpotInstanceRemedy (the Terraform module turns it on) moves the reclaimed instance to Removing at the
    notice, before the service's tick: it was skipped, so no record, no notification and nothing in `fleet
    status` for the reclaim."""
    notes: list = []
    spot.manager.notify = notes.append
    spot.cloud.ess.groups[spot.gid].spot_instance_remedy = True
    victim = sorted(spot.members())[0]
    spot.cloud.reclaim_spot(victim, 300)
    assert spot.members()[victim] == "Removing"
    spot.cloud.calls.clear()
    assert spot.reclaims() == [victim]
    assert "RemoveInstances" not in [a for _, a in spot.cloud.calls]
    (record,) = cs.records(spot.store)
    assert [e.kind for e in spot.store.incident_events(record.id)] == ["notice", "removed_by_ess"]
    assert [n.title for n in notes] == [f"chat: spot instance {victim} reclaimed"]
    assert spot.reclaims() == []  # once
