"""The service's tick with a capacity ladder: one capacity write a tick, the count a fallback needs carried
by the plan's own write and kept by the next decisions (in-process fake, real SDKs)."""

from __future__ import annotations

from policies.model import ReasonCode

L20, A10X2 = "ecs.gn8is-2x.8xlarge", "ecs.gn7i-2x.8xlarge"  # A10X2 serves less per instance than L20
CONFIG_TYPE = "ecs.gn7i-c8g1.2xlarge"  # the fake group's scaling configuration type until the ladder moves
GROUP = f"min_size: 1\nmax_size: 12\nwarm_floor: 5\ninstance_types: [{L20}, {A10X2}]\n"


def _writes(cloud, since: int) -> list[str]:
    return [a for _, a in list(cloud.calls)[since:] if a == "ScaleWithAdjustment"]


def test_a_fallback_to_a_slower_type_is_one_write_of_its_count_kept_by_the_next_decisions(fake_world):
    cloud, svc, gid = fake_world(GROUP, in_service=3)
    cloud.set_stock(CONFIG_TYPE, 0)  # the type the group orders first is sold out everywhere
    group = cloud.ess.groups[gid]

    # tick 1: the plan raises 3 -> 5 (warm floor); ESS refuses it for stock, and the ladder falls back to
    # the slower A10X2 in the same tick (the type order written), the count left for the next write
    start = len(cloud.calls)
    first = svc.tick(cloud.now())
    assert first.ok, first.errors
    assert len(_writes(cloud, start)) == 1 and group.desired_capacity == 5
    config = cloud.ess.configurations[group.active_config_id]
    assert config.instance_types[0] == A10X2

    # tick 2: the 2 missing L20s' worth is 3 A10X2s: one write, 5 -> 6, saying why
    cloud.advance(15)
    start = len(cloud.calls)
    second = svc.tick(cloud.now())
    assert second.ok, second.errors
    assert len(_writes(cloud, start)) == 1 and group.desired_capacity == 6
    (gp,) = second.plan.groups
    (why,) = [r for r in gp.reasons if r.code == ReasonCode.CAPACITY_FALLBACK_COUNT]
    assert why.inputs == {"planned_target": 5, "fallback_count": 6}

    # tick 3 and on: the plan starts from 6 and does not write its own 5 back over it
    for _ in range(3):
        cloud.advance(15)
        start = len(cloud.calls)
        assert svc.tick(cloud.now()).ok
        assert _writes(cloud, start) == [] and group.desired_capacity == 6
