"""`fleet bench capacity`'s wiring (the runs themselves are the benchmark, not tests)."""

from __future__ import annotations

from datetime import UTC, datetime

from fleet.cli import main
from fleet.sim.capacity_bench import SAME_GPU_FALLBACK, Variant, _setup, scenarios
from fleet.testing import mock_aliyun


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
