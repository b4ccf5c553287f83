"""The capacity table's prompt spread: the sizing default where the mix has room, narrowed near max_model_len
so that the capacity test does not refuse a share of its own prompts and call the rest a light load."""

from __future__ import annotations

import math

import pytest

from fleet.service.capacity_table import FIT_Z, fitting_length_cv
from policies.spec import GroupSpec
from sizing.capacity import DEFAULT_LENGTH_CV


def _p99(mean: float, cv: float) -> float:
    sigma2 = math.log1p(cv * cv)
    return mean * math.exp(FIT_Z * math.sqrt(sigma2) - sigma2 / 2)


@pytest.mark.parametrize(("prompt", "output"), [(1150, 200), (100, 50)])
def test_a_mix_far_from_the_limit_keeps_the_sizing_default(prompt, output):
    assert fitting_length_cv(prompt, output, 8192) == DEFAULT_LENGTH_CV


@pytest.mark.parametrize(("prompt", "output"), [(2048, 30), (6900, 350), (7600, 300)])
def test_near_the_limit_the_99th_percentile_prompt_just_fits(prompt, output):
    cv = fitting_length_cv(prompt, output, 8192)
    assert 0 < cv < DEFAULT_LENGTH_CV
    assert _p99(prompt, cv) + output == pytest.approx(8192, rel=1e-6)


def test_the_spread_narrows_as_the_mean_nears_the_limit_and_is_none_past_it():
    cvs = [fitting_length_cv(p, 200, 8192) for p in (2000, 4000, 6000, 7500)]
    assert cvs == sorted(cvs, reverse=True)
    assert fitting_length_cv(8100, 200, 8192) == 0.0


def test_the_narrowed_spread_gives_a_long_prompt_mix_less_capacity():
    from sizing import Deployment, find_gpu, find_instance, find_model
    from sizing.capacity import capacity_rps

    inst = find_instance("ecs.gn7i-2x.8xlarge")
    dep = Deployment(find_model("Qwen2.5-14B"), find_gpu(inst.gpu), tp=2, max_model_len=8192)
    default = capacity_rps(dep, 6900, 350, 3000, None, iterations=6, num_requests=300)
    fitted = capacity_rps(
        dep,
        6900,
        350,
        3000,
        None,
        length_cv=fitting_length_cv(6900, 350, 8192),
        iterations=6,
        num_requests=300,
    )
    assert fitted < 0.6 * default  # at the default spread a third of the prompts are refused, not served


def _spec(**predictive):
    from policies.spec import GroupSpec

    pred = {"mode": "on", "model": "Qwen2.5-14B", "instance_type": "ecs.gn7i-2x.8xlarge", **predictive}
    return GroupSpec.model_validate(
        {"name": "g", "min_size": 1, "max_size": 10, "predictive": {"ttft_p99_ms": 2000, **pred}}
    )


def test_time_in_service_is_tabulated_up_to_the_capacity_and_grows_with_load(monkeypatch):
    import sizing.capacity
    from fleet.service.capacity_table import IN_SERVICE_LOADS, CapacityTable

    calls = []
    real = sizing.capacity.in_service_curve
    monkeypatch.setattr(sizing.capacity, "in_service_curve", lambda *a, **k: calls.append(1) or real(*a, **k))

    table, spec = CapacityTable(), _spec()
    cap = table.lookup(spec, 1150, 250)
    assert cap.rps is not None
    curve = table.in_service(spec, cap)
    rates = [r for r, _ in curve]
    assert rates == pytest.approx([share * cap.rps for share in IN_SERVICE_LOADS], rel=0.1)
    seconds = [w for _, w in curve]
    assert seconds == sorted(seconds)  # more load, bigger batches, slower steps
    # 250 output tokens at tens of ms each: seconds, not milliseconds or minutes
    assert 2.0 < seconds[0] < 60.0
    tabulated = len(calls)
    assert table.in_service(spec, cap) == curve
    assert len(calls) == tabulated  # the rows are cached, not simulated again


def test_the_blend_is_made_once_per_mix_and_again_when_the_mix_moves(monkeypatch):
    from fleet.service.capacity_table import CapacityTable

    table, spec = CapacityTable(), _spec()
    blends = []
    real = table._blend
    monkeypatch.setattr(table, "_blend", lambda *a: blends.append(a) or real(*a))
    cap = table.lookup(spec, 1150, 250)
    first = table.in_service(spec, cap)
    assert table.in_service(spec, cap) == first and len(blends) == 1  # the next tick, the same mix
    moved = table.lookup(spec, 1400, 250)
    curve = table.in_service(spec, moved)
    assert len(blends) == 2 and curve != first
    # a table without the memo gives the same rows for the moved mix
    assert CapacityTable().in_service(spec, moved) == curve


def test_a_measured_capacity_has_no_engine_to_compare_with():
    from fleet.service.capacity_table import CapacityTable

    table, spec = CapacityTable(), _spec(capacity_rps=2.0)
    assert table.in_service(spec, table.lookup(spec, 1150, 250)) == ()


def test_the_capacity_is_continuous_across_a_buckets_edge_in_both_token_counts(monkeypatch):
    from fleet.service.capacity_table import MIX_STEP, CapacityTable, bucket

    def smooth(p: float, o: float) -> float:  # falls with both token counts, like the engine's
        return 1000.0 / (p + 5.0 * o)

    monkeypatch.setattr(CapacityTable, "_tabulate", lambda self, spec, p, o: smooth(p, o))
    table, spec = CapacityTable(), _spec()
    # each on the edge between two buckets of one token count: (prompt, output) just below and just above it
    edges = (((1150.0, MIX_STEP**38.5), (0.0, 1.0)), ((MIX_STEP**50.5, 215.0), (1.0, 0.0)))
    for (p, o), (dp, do) in edges:
        below = table.lookup(spec, p * (1 - 0.003 * dp), o * (1 - 0.003 * do)).rps
        above = table.lookup(spec, p * (1 + 0.003 * dp), o * (1 + 0.003 * do)).rps
        assert below is not None and above is not None
        assert above == pytest.approx(below, rel=0.01)  # the bucket's step would be 3-7 %
        assert above == pytest.approx(smooth(p, o), rel=0.02)
    centre = bucket(200.0)
    assert table.lookup(spec, bucket(1150.0), centre).rps == pytest.approx(smooth(bucket(1150.0), centre))


def test_a_declared_prefix_hit_gives_long_prompts_more_capacity_and_says_so():
    from fleet.service.capacity_table import CapacityTable

    table = CapacityTable()
    cold = table.lookup(_spec(), 4000, 200)
    warm = table.lookup(_spec(prefix_hit=0.5), 4000, 200)
    assert cold.rps is not None and warm.rps is not None
    assert warm.rps > 1.2 * cold.rps  # half of each prompt is not prefilled
    assert "50% of each prompt from the prefix cache" in warm.source and "prefix" not in cold.source


@pytest.mark.parametrize("hit", [-0.1, 1.0])
def test_a_prefix_hit_outside_zero_to_one_is_refused_by_the_config(hit):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="prefix_hit"):
        _spec(prefix_hit=hit)


def test_the_served_context_bounds_a_requests_tokens():
    from fleet.service.capacity_table import served_context
    from sizing import find_model

    def spec(**pred):
        return GroupSpec.model_validate(
            {
                "name": "chat",
                "scaling_group_id": "asg-1",
                "min_size": 1,
                "max_size": 4,
                "predictive": {"mode": "on", **pred},
            }
        )

    sized = {"model": "Qwen2.5-14B", "instance_type": "ecs.gn7i-2x.8xlarge"}
    assert served_context(spec(**sized, max_model_len=8192)) == 8192
    assert served_context(spec(**sized)) == find_model("Qwen2.5-14B").max_position
    assert served_context(spec(capacity_rps=1.0)) is None  # a measured capacity: the mix sets nothing


def test_the_groups_vllm_settings_reach_the_engine_and_a_smaller_batch_serves_no_more(monkeypatch):
    import sizing.capacity
    from fleet.service.capacity_table import CapacityTable

    deps = []
    real = sizing.capacity.capacity_rps
    monkeypatch.setattr(
        sizing.capacity, "capacity_rps", lambda dep, *a, **k: deps.append(dep) or real(dep, *a, **k)
    )
    table = CapacityTable()
    default = table.lookup(_spec(), 1150, 250)
    assert {(d.max_num_seqs, d.max_num_batched_tokens, d.gpu_memory_utilization) for d in deps} == {
        (None, None, 0.90)  # unset: the sizing engine's defaults, as before
    }
    deps.clear()
    settings = {"max_num_seqs": 4, "max_num_batched_tokens": 2048, "gpu_memory_utilization": 0.8}
    small = table.lookup(_spec(**settings), 1150, 250)
    assert {(d.max_num_seqs, d.max_num_batched_tokens, d.gpu_memory_utilization) for d in deps} == {
        (4, 2048, 0.8)
    }
    assert default.rps is not None and small.rps is not None
    assert small.rps < default.rps  # a batch of 4 where the default holds far more


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"max_num_batched_tokens": -1}, "max_num_batched_tokens"),
        ({"gpu_memory_utilization": 0}, "gpu_memory_utilization"),
        ({"gpu_memory_utilization": 1.2}, "gpu_memory_utilization"),
        ({"max_num_seqs": 256, "max_num_batched_tokens": 128}, "below max_num_seqs 256"),
    ],
)
def test_bad_vllm_settings_are_refused_by_the_config(settings, match):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=match):
        _spec(**settings)
