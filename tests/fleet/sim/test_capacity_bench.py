"""`fleet bench capacity`'s wiring (the runs themselves are the benchmark, not tests)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fleet.cli import main
from fleet.commands.simulate import _load
from fleet.sim.capacity_bench import (
    SAME_GPU_FALLBACK,
    Variant,
    _setup,
    economical_verdict,
    scenarios,
    startup,
    variant_config,
)
from fleet.testing import mock_aliyun
from policies.capacity import CapacityMix


def test_every_scenario_runs_ours_ours_without_and_ess_native() -> None:
    for name, variants in scenarios(12.0).items():
        names = [v.name for v in variants]
        assert any(n.startswith("ours") for n in names), name
        assert any(v.policy == "ess-alarm" for v in variants), name


def test_setup_gives_the_fake_group_the_variants_settings() -> None:
    with mock_aliyun(start=datetime(2026, 3, 2, tzinfo=UTC)) as cloud:
        group_id = cloud.create_group_for_tests(instance_type="ecs.gn7i-2x.8xlarge")
        variant = Variant(
            "x", config_types=("ecs.gn7i-2x.8xlarge", SAME_GPU_FALLBACK), spot=True, recycle=True
        )
        _setup(variant)(cloud, group_id)
        group = cloud.ess.groups[group_id]
        config = cloud.ess.configurations[group.active_config_id]
        assert config.instance_types == ["ecs.gn7i-2x.8xlarge", SAME_GPU_FALLBACK]
        assert (group.scaling_policy, group.multi_az_policy, config.spot_strategy) == (
            "recycle",
            "COST_OPTIMIZED",
            "SpotAsPriceGo",
        )
        assert (group.on_demand_base_capacity, group.on_demand_percentage_above_base) == (2, 30)


def test_bench_capacity_refuses_an_unknown_scenario(capsys) -> None:
    assert main(["bench", "capacity", "--scenario", "flood"]) == 2
    assert "--scenario: flood unknown" in capsys.readouterr().err


def test_a_variants_group_keys_are_validated_like_fleet_yaml() -> None:
    (spot,) = [v for v in scenarios(12.0)["spot"] if v.name == "ours-spot"]
    group = variant_config(_load(None), spot).groups[0]
    assert isinstance(group.capacity_mix, CapacityMix)
    assert (group.capacity_mix.on_demand_base, group.capacity_mix.spot_percentage_above_base) == (2, 70)


def test_economical_variants_run_the_modelled_cold_start_and_restart() -> None:
    st = startup()
    variants = {v.name: v for v in scenarios(12.0)["economical"]}
    for v in variants.values():
        assert v.spec["cold_start_s"] >= st.fresh_s and v.restart_s == pytest.approx(st.restart_s, abs=0.1)
        assert (v.boot_s, v.ecs_start_s) == (st.fresh["ecs_create_boot"], st.restart["ecs_start"])
    assert variants["ours-recycle"].spec["economical_mode"] is True
    assert not variants["release"].recycle and variants["ess-native-recycle"].recycle


def test_setup_sets_the_fake_ecs_start_time_of_stopped_instances() -> None:
    with mock_aliyun(start=datetime(2026, 3, 2, tzinfo=UTC)) as cloud:
        group_id = cloud.create_group_for_tests(instance_type="ecs.gn7i-2x.8xlarge")
        _setup(Variant("x", recycle=True, ecs_start_s=45.0))(cloud, group_id)
        assert cloud.restart_seconds == 45.0


def test_economical_verdict_compares_the_measured_medians() -> None:
    def run(cost, **times):
        return {
            "cost_cny": cost,
            "scale_out_to_serving_s": {k: {"p50": p, "count": 3} for k, p in times.items()},
        }

    line = economical_verdict(
        {"release": run(100.0, fresh=240.0), "ours-recycle": run(90.0, restarted=200.0)}
    )
    assert "0.83 of a fresh instance" in line and "cost 90.0 vs 100.0" in line
    assert "no restarted" in economical_verdict({"release": run(100.0), "ours-recycle": run(90.0)})
