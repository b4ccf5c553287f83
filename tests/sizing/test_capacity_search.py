"""The capacity tests' geometric bisection: the largest passing value to within its factor."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sizing.capacity import largest_passing


@given(st.floats(min_value=0.06, max_value=60.0))
def test_finds_the_threshold_to_within_the_factor_from_below(threshold):
    found = largest_passing(lambda x: x <= threshold, 0.05, 64.0, iterations=40)
    assert found <= threshold
    assert threshold / found < 1.03


def test_stops_after_its_iterations():
    probes: list[float] = []

    def passes(x: float) -> bool:
        probes.append(x)
        return x <= 1.0

    largest_passing(passes, 0.01, 256.0, iterations=3)
    assert len(probes) == 3


@pytest.mark.parametrize("hi", [2.0, 100.0])
def test_a_predicate_that_always_passes_approaches_hi(hi):
    assert hi / largest_passing(lambda _x: True, 0.5, hi, iterations=60) < 1.03


def test_time_in_service_by_littles_law_matches_the_engine_s_running_requests():
    """``in_service_curve``: rate x the mean time in service is the mean of the requests running, which is
    what the online correction compares the fleet's with."""
    from sizing import Deployment, find_gpu, find_instance, find_model
    from sizing.capacity import in_service_curve
    from sizing.engine import InstanceEngine
    from sizing.latency import Workload

    inst = find_instance("ecs.gn7i-2x.8xlarge")
    dep = Deployment(find_model("Qwen2.5-14B"), find_gpu(inst.gpu), tp=2, max_model_len=8192)
    ((rate, seconds),) = in_service_curve(dep, 1000, 200, [0.5], num_requests=600)
    # the same load, run step by step, sampling the running requests every second
    engine = InstanceEngine(dep)
    reqs = Workload(qps=rate, prompt_tokens=1000, output_tokens=200, length_cv=1.0).stream(600, seed=0)
    for i, r in enumerate(reqs):
        engine.submit(i, r.arrival_s, r.prompt_tokens, r.output_tokens)
    samples = []
    t = reqs[60].arrival_s  # past the warm-up
    while t < reqs[-60].arrival_s:
        engine.advance(t)
        samples.append(engine.num_running)
        t += 1.0
    assert sum(samples) / len(samples) == pytest.approx(rate * seconds, rel=0.15)
