"""The capacity ladder, the sold-out memory and its backoff: pure values in, values out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from policies.capacity import (
    CapacityMemory,
    CapacityMix,
    MoveKind,
    SoldOut,
    ZoneSpec,
    backoff_s,
    build_ladder,
    fallback_count,
    reconcile,
    step,
)
from policies.spec import GroupSpec

NOW = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
A10, L20 = "ecs.gn7i-c8g1.2xlarge", "ecs.gn8is.2xlarge"
ZONES = (ZoneSpec(zone="cn-a", vswitch_id="vsw-a"), ZoneSpec(zone="cn-b", vswitch_id="vsw-b"))


def test_ladder_is_types_then_zones_spot_before_on_demand() -> None:
    ladder = build_ladder([A10, L20], ZONES[:1], CapacityMix(spot_percentage_above_base=50), {})
    assert [(r.instance_type, r.spot) for r in ladder] == [
        (A10, True),
        (L20, True),
        (A10, False),
        (L20, False),
    ]


def test_ladder_without_spot_has_only_on_demand_rungs() -> None:
    ladder = build_ladder([A10], ZONES, None, {})
    assert [(r.zone, r.spot) for r in ladder] == [("cn-a", False), ("cn-b", False)]


def test_shortfall_remembers_the_rung_and_falls_back_to_the_next() -> None:
    ladder = build_ladder([A10], ZONES, None, {})
    memory, move = step(CapacityMemory(), ladder, "activity Failed: OperationDenied.NoStock", NOW, 4)
    assert move is not None and move.kind == MoveKind.FALL_BACK and move.to_rung.zone == "cn-b"
    assert memory.rung == 1 and memory.is_sold_out(ladder[0], NOW)


def test_count_is_adjusted_for_capacity_per_instance() -> None:
    ladder = build_ladder([A10, L20], (), None, {A10: 1.0, L20: 1.5})
    _, move = step(CapacityMemory(), ladder, "stock", NOW, 4)
    assert move is not None and move.target == 3
    # back from the L20: what 3 of them serve, in A10s
    assert fallback_count(3, 0, ladder[1].capacity_per_instance, ladder[0]) == 5


def test_only_the_missing_part_is_adjusted_and_counted_in_the_plans_unit() -> None:
    """22 wanted with 16 held: the 6 missing are ordered on the new rung, not all 22 recounted as if the
    16 there were of its type; and the count is in the plan's unit (its first type) whichever rung the
    group falls back from."""
    slow, fast = "ecs.slow", "ecs.fast"
    ladder = build_ladder([A10, slow, fast], (), None, {A10: 1.0, slow: 0.5, fast: 2.0})
    assert fallback_count(22, 16, 1.0, ladder[1]) == 16 + 12  # not 44
    assert fallback_count(22, 16, 1.0, ladder[2]) == 16 + 3
    assert fallback_count(12, 16, 1.0, ladder[1]) == 12  # nothing missing: the target as it is
    a10_out = SoldOut(instance_type=A10, zone=None, spot=False, until=NOW + timedelta(hours=1), attempts=1)
    on_slow = CapacityMemory(rung=1, sold_out=(a10_out,))
    _, move = step(on_slow, ladder, "stock", NOW, 22, have=16)  # slow -> fast, counted from the unit (A10)
    assert move is not None and move.to_rung.instance_type == fast and move.target == 16 + 3
    _, move = step(CapacityMemory(), ladder, "stock", NOW, 22, have=16, unit_capacity=2.0)
    assert move is not None and move.to_rung.instance_type == slow and move.target == 16 + 24


def test_every_rung_sold_out_is_exhausted_and_stays() -> None:
    ladder = build_ladder([A10], (), None, {})
    memory, move = step(CapacityMemory(), ladder, "stock", NOW, 2)
    assert move is not None and move.kind == MoveKind.EXHAUSTED and memory.rung == 0


def test_retry_goes_back_once_the_backoff_has_passed_and_not_before() -> None:
    ladder = build_ladder([A10], ZONES, None, {})
    memory, _ = step(CapacityMemory(), ladder, "stock", NOW, 2)
    assert step(memory, ladder, None, NOW + timedelta(seconds=backoff_s(1) - 1), 2)[1] is None
    memory, move = step(memory, ladder, None, NOW + timedelta(seconds=backoff_s(1)), 2)
    assert move is not None and move.kind == MoveKind.RETRY and memory.rung == 0


def test_backoff_doubles_per_attempt_up_to_an_hour() -> None:
    assert [backoff_s(n) for n in (1, 2, 3, 5, 9)] == [300.0, 600.0, 1200.0, 3600.0, 3600.0]


def test_a_second_failure_of_the_same_rung_doubles_its_backoff() -> None:
    ladder = build_ladder([A10], ZONES, None, {})
    memory, _ = step(CapacityMemory(), ladder, "stock", NOW, 2)
    later = NOW + timedelta(seconds=300)
    memory, _ = step(memory, ladder, None, later, 2)  # retry: back on rung 0
    memory, _ = step(memory, ladder, "stock", later, 2)
    assert memory.attempts(ladder[0]) == 2 and memory.is_sold_out(ladder[0], later + timedelta(seconds=599))


def test_memory_round_trips_through_json() -> None:
    ladder = build_ladder([A10], ZONES, None, {})
    memory, _ = step(CapacityMemory(), ladder, "stock", NOW, 2)
    assert CapacityMemory.model_validate_json(memory.model_dump_json()) == memory


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"instance_types": [A10, A10]}, "more than once"),
        ({"capacity_mix": {"spot_percentage_above_base": 120}}, "less than or equal to 100"),
        ({"zones": [{"zone": "cn-a"}]}, "vswitch_id"),
        (
            {"zones": [{"zone": "cn-a", "vswitch_id": "vsw-1"}, {"zone": "cn-b", "vswitch_id": "vsw-1"}]},
            "vSwitch vsw-1 to cn-a and cn-b",
        ),
    ],
)
def test_group_spec_refuses_bad_capacity_keys(fields: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        GroupSpec.model_validate({"name": "g", "min_size": 0, "max_size": 4, **fields})


def test_exhausted_ladder_restarts_the_settling_time_of_stuck_instances() -> None:
    ladder = build_ladder([A10], (), None, {})
    memory, _ = step(CapacityMemory(), ladder, "stock", NOW, 2)
    assert memory.moved_at == NOW


def test_a_move_keeps_the_rung_it_moved_to_beside_its_index() -> None:
    ladder = build_ladder([A10, L20], (), None, {})
    memory, move = step(CapacityMemory(), ladder, "no stock", NOW, target=3)
    assert move is not None and (memory.rung, memory.on) == (1, ladder[1])


@pytest.mark.parametrize(
    ("saved", "types", "rung", "moves"),
    [
        (CapacityMemory(rung=1, on=build_ladder([L20], (), None, {})[0]), [L20, A10], 0, False),  # reordered
        (CapacityMemory(rung=1, on=build_ladder([L20], (), None, {})[0]), [A10], 0, True),  # L20 dropped
        (CapacityMemory(rung=1), [A10, L20], 1, False),  # saved before ``on``: the index stands
        (CapacityMemory(rung=2), [A10, L20], 0, True),  # ... unless the ladder no longer reaches it
        (CapacityMemory(), [A10], 0, False),
    ],
)
def test_reconcile_finds_the_rung_again_in_the_ladder_the_config_declares_now(
    saved, types, rung, moves
) -> None:
    ladder = build_ladder(types, (), None, {})
    memory, move = reconcile(saved, ladder, NOW)
    assert (memory.rung, memory.on) == (rung, ladder[rung])
    assert (move is not None) == moves
    if move is not None:
        assert (move.kind, move.to_rung) == (MoveKind.RETRY, ladder[0])
