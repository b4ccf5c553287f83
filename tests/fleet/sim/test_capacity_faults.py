"""Capacity in the simulator (issue 17): the stock-out and spot-reclaim faults fired on the fake cloud, the
restart time of economical mode, and billing of stopped and spot instances."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fleet.sim.capacity import Billing
from fleet.sim.cloudview import list_group_instances
from fleet.sim.engine import make_engine_factory, resolve_hardware
from fleet.sim.world import FaultSpecError, World, WorldParams, parse_fault_spec
from fleet.testing import mock_aliyun

START = datetime(2026, 3, 2, tzinfo=UTC)
A10 = "ecs.gn7i-c8g1.2xlarge"


@pytest.fixture(scope="module")
def factory():
    return make_engine_factory(resolve_hardware("Qwen2.5-7B", A10))


def test_stockout_spec_parses_type_zone_and_duration() -> None:
    f = parse_fault_spec(f"stockout:{A10},zone=cn-hangzhou-b,at=8h,for=2h")
    assert (f.kind, f.instance_type, f.zone, f.at_s, f.for_s) == (
        "stockout",
        A10,
        "cn-hangzhou-b",
        28800.0,
        7200.0,
    )


def test_spot_reclaim_spec_parses_the_share_with_a_quarter_by_default() -> None:
    assert parse_fault_spec("spot-reclaim,at=12h").share == 0.25
    assert parse_fault_spec("spot-reclaim,at=12h,share=0.5").share == 0.5


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (f"stockout:{A10},at=1h", "for=DURATION"),
        ("stockout:gn7i,at=1h,for=1h", "instance type"),
        ("spot-reclaim,at=1h,share=2", "share must be in (0, 1]"),
        (f"stockout:{A10},at=1h,for=1h,share=0.5", "does not apply"),
        ("overheat,at=1h,for=1h", "stockout and spot-reclaim"),
    ],
)
def test_bad_capacity_fault_specs_are_refused_in_one_line(spec: str, fragment: str) -> None:
    with pytest.raises(FaultSpecError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        parse_fault_spec(spec)


def test_api_outage_spec_parses_the_product_and_duration() -> None:
    f = parse_fault_spec("api-outage:cms,at=6h,for=30m")
    assert (f.kind, f.product, f.at_s, f.for_s, f.cloud_wide) == ("api-outage", "cms", 21600.0, 1800.0, True)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("api-outage,at=1h,for=10m", "needs the product"),
        ("api-outage:rds,at=1h,for=10m", "one of ess, ecs, cms"),
        ("api-outage:cms,at=1h", "for=DURATION"),
        ("api-outage:cms,at=1h,for=0s", "for must be positive"),
        ("api-outage:cms,at=1h,for=10m,instance=2", "does not apply"),
    ],
)
def test_bad_api_outage_specs_are_refused_in_one_line(spec: str, fragment: str) -> None:
    with pytest.raises(FaultSpecError, match=fragment):
        parse_fault_spec(spec)


def test_api_outage_fails_the_products_calls_for_its_duration_and_no_other(factory) -> None:
    from fleet.cloud.clients import make_clients
    from fleet.cloud.errors import CloudError
    from fleet.cloud.retry import RetryPolicy

    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "ak", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "secret-value"}
    with mock_aliyun(start=START, boot_seconds=30) as cloud:
        group_id = cloud.create_group_for_tests(in_service=1, desired_capacity=1)
        clients = make_clients(
            cloud.region_id, cloud.account_id, retry=RetryPolicy(attempts=1, sleep=lambda s: None), env=env
        )
        (iid,) = cloud.ess.groups[group_id].instance_ids
        world = _world(cloud, group_id, factory, [parse_fault_spec("api-outage:cms,at=10s,for=10m")])
        world.run_until(20.0)
        with pytest.raises(CloudError, match="503"):
            clients.cms.metric_last(clients.cms.custom_namespace, "vllm_up", [iid])
        assert clients.ess.describe_scaling_groups(group_ids=[group_id])  # ESS answers as ever
        world.run_until(620.0)
        assert clients.cms.metric_last(clients.cms.custom_namespace, "vllm_up", [iid]) is not None
        assert [e["event"] for e in world.fault_log][-2:] == ["api-outage", "api-outage-over"]


def _world(cloud, group_id, factory, faults=(), **params) -> World:
    world = World(
        cloud, group_id, factory, WorldParams(**params), [], faults, instance_lister=list_group_instances
    )
    world.sync(prewarmed=True)
    return world


def test_stockout_fault_sells_the_type_out_for_its_duration(factory) -> None:
    with mock_aliyun(start=START, boot_seconds=30) as cloud:
        group_id = cloud.create_group_for_tests(in_service=1, desired_capacity=1)
        world = _world(cloud, group_id, factory, [parse_fault_spec(f"stockout:{A10},at=10s,for=1h")])
        world.run_until(20.0)
        assert not cloud.stock.available("cn-hangzhou-a", A10, cloud.now_s() + 20.0)
        assert cloud.stock.available("cn-hangzhou-a", A10, cloud.now_s() + 3700.0)
        assert world.fault_log[-1]["event"] == "stockout"


def test_spot_reclaim_fault_reclaims_the_share_of_spot_instances(factory) -> None:
    with mock_aliyun(start=START, boot_seconds=30) as cloud:
        group_id = cloud.create_group_for_tests(in_service=0, desired_capacity=0)
        config = cloud.ess.configurations[cloud.ess.groups[group_id].active_config_id]
        config.spot_strategy = "SpotAsPriceGo"
        cloud.ess.modify_scaling_group(group_id, desired_capacity=4)
        cloud.advance(30)
        world = _world(cloud, group_id, factory, [parse_fault_spec("spot-reclaim,at=5s,share=0.5")])
        world.run_until(10.0)
        locked = [i for i in cloud.ecs.instances.values() if i.lock_reasons == ["Recycling"]]
        assert len(locked) == 2 and len(world.fault_log[-1]["reclaimed"]) == 2


def test_a_restarted_stopped_instance_serves_after_the_restart_time_not_the_cold_start(factory) -> None:
    with mock_aliyun(start=START, boot_seconds=30, restart_seconds=10) as cloud:
        group_id = cloud.create_group_for_tests(in_service=1, desired_capacity=1, scaling_policy="recycle")
        world = _world(cloud, group_id, factory, cold_start_s=300.0, restart_s=60.0)
        cloud.ess.modify_scaling_group(group_id, desired_capacity=0)
        cloud.advance(30)
        world.sync()
        cloud.ess.modify_scaling_group(group_id, desired_capacity=1)
        world.sync()
        (inst,) = world.instances.values()
        assert inst.ready_s == pytest.approx(world.now_s + 60.0)


def test_billing_counts_stopped_instances_as_disk_only_and_spot_at_its_price(factory) -> None:
    with mock_aliyun(start=START, boot_seconds=30) as cloud:
        group_id = cloud.create_group_for_tests(in_service=3, desired_capacity=3, scaling_policy="recycle")
        world = _world(cloud, group_id, factory)
        ids = sorted(world.instances)
        cloud.ecs.instances[ids[1]].spot_strategy = "SpotAsPriceGo"
        world.instances[ids[2]].lifecycle = "Stopped"
        billing = Billing(
            price_cny_per_hour=10.0, gpus_per_instance=1, spot_fraction=0.3, disk_cny_per_hour=0.2
        )
        billing.add(world, cloud, 3600.0)
        assert billing.cost_cny == pytest.approx(10.0 + 3.0 + 0.2)
        assert billing.gpu_hours == pytest.approx(2.0)


def _step(world, cloud, billing, seconds: float, sync_s: float = 5.0) -> None:
    """The runner's loop: the world, the cloud's clock, the billing, then a sync."""
    end = world.now_s + seconds
    while world.now_s < end - 1e-9:
        t = min(end, world.now_s + sync_s)
        dt = t - world.now_s
        world.run_until(t)
        cloud.advance(dt)
        billing.add(world, cloud, dt)
        world.sync()


def test_startups_measure_order_to_serving_of_fresh_and_restarted_instances(factory) -> None:
    with mock_aliyun(start=START, boot_seconds=30, restart_seconds=10) as cloud:
        group_id = cloud.create_group_for_tests(in_service=1, desired_capacity=1, scaling_policy="recycle")
        world = _world(cloud, group_id, factory, cold_start_s=300.0, restart_s=60.0)
        billing = Billing(price_cny_per_hour=10.0, gpus_per_instance=1, disk_cny_per_hour=36.0)
        cloud.ess.modify_scaling_group(group_id, desired_capacity=0)  # the pre-warmed one is stopped
        _step(world, cloud, billing, 120.0)
        cloud.ess.modify_scaling_group(group_id, desired_capacity=2)  # it restarts, and one is created
        _step(world, cloud, billing, 600.0)
        times = billing.startups.summary()
        assert times["restarted"]["count"] == 1 and times["fresh"]["count"] == 1
        # Each within one 5 s sync of its own figure: the restart time, and the cold start.
        assert 60.0 <= times["restarted"]["p50"] <= 65.0
        assert 300.0 <= times["fresh"]["p50"] <= 305.0
        fields = billing.summary()
        assert fields["scale_out_to_serving_s"] == times
        assert fields["stopped_instance_hours"] > 0 and fields["stopped_disk_cost_cny"] > 0


def test_the_prewarmed_start_fleet_is_not_a_startup(factory) -> None:
    with mock_aliyun(start=START, boot_seconds=30) as cloud:
        group_id = cloud.create_group_for_tests(in_service=2, desired_capacity=2)
        world = _world(cloud, group_id, factory, cold_start_s=300.0)
        billing = Billing(price_cny_per_hour=10.0, gpus_per_instance=1)
        _step(world, cloud, billing, 60.0)
        assert billing.startups.summary() == {} and "scale_out_to_serving_s" not in billing.summary()


def test_economical_scale_in_drains_its_requests_as_a_release_does(factory) -> None:
    """A recycled scale-in goes through the same drain hook as a release: its in-flight requests finish
    (they used to be lost as in a reboot), and it then bills only its disk."""
    from fleet.sim.workload import Request

    with mock_aliyun(start=START, boot_seconds=30, restart_seconds=10) as cloud:
        group_id = cloud.create_group_for_tests(in_service=1, desired_capacity=1, scaling_policy="recycle")
        requests = [Request(0.5 + 0.1 * i, 512, 200) for i in range(8)]
        world = World(
            cloud,
            group_id,
            factory,
            WorldParams(cold_start_s=300.0, restart_s=60.0),
            requests,
            instance_lister=list_group_instances,
        )
        world.sync(prewarmed=True)
        billing = Billing(price_cny_per_hour=10.0, gpus_per_instance=1)
        _step(world, cloud, billing, 2.0)
        (inst,) = world.instances.values()
        assert inst.outstanding == 8
        cloud.ess.modify_scaling_group(group_id, desired_capacity=0)
        _step(world, cloud, billing, 10.0)
        assert inst.lifecycle == "Stopped" and not inst.serving(world.now_s)
        _step(world, cloud, billing, 120.0)
        assert world.total_dropped == 0 and world.total_completed == 8
        assert billing.summary()["stopped_instance_hours"] > 0
