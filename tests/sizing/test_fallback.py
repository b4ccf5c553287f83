"""The capacity fallbacks of the sizing core: which types hold a model, the ladder from the search's own
verdicts, spot cost."""

from __future__ import annotations

from sizing.catalog import find_instance, find_model, price_book
from sizing.fallback import cannot_hold, fallback_ladder, instance_type_problems, relative_capacity, spot_cost
from sizing.latency import Workload
from sizing.search import SLO, search


def test_a_single_a10_cannot_hold_a_70b_model_and_says_why() -> None:
    why = cannot_hold(find_model("Llama-3.1-70B"), find_instance("ecs.gn7i-c8g1.2xlarge"))
    assert why is not None and "GiB" in why and "usable per" in why


def test_a_single_a10_holds_a_7b_model() -> None:
    assert cannot_hold(find_model("Qwen2.5-7B"), find_instance("ecs.gn7i-c8g1.2xlarge")) is None


def test_instance_type_problems_name_unknown_types_and_types_too_small() -> None:
    problems = instance_type_problems("Llama-3.1-70B", ["ecs.gn7i-c8g1.2xlarge", "ecs.nope"])
    assert len(problems) == 2
    assert any("cannot hold Llama-3.1-70B" in p for p in problems)
    assert any("unknown instance type" in p for p in problems)


def test_more_gpus_of_the_same_kind_is_more_capacity() -> None:
    one, four = find_instance("ecs.gn7i-c8g1.2xlarge"), find_instance("ecs.gn7i-4x.8xlarge")
    assert relative_capacity(four) == 4 * relative_capacity(one)


def test_ladder_lists_other_types_that_meet_the_slo_cheapest_first_without_the_best() -> None:
    result = search(
        find_model("Qwen2.5-7B"), workload=Workload(qps=4.0), slo=SLO(ttft_p99_ms=2000.0), prices=price_book()
    )
    ladder = fallback_ladder(result)
    assert result.best is not None and ladder
    assert result.best.instance_type not in {r.instance_type for r in ladder}
    costs = [r.cost_cny_per_hour for r in ladder]
    assert costs == sorted(costs) and all(r.instances >= 1 for r in ladder)


def test_the_ladder_reads_the_search_s_verdicts_not_the_wording_of_its_reasons() -> None:
    result = search(
        find_model("Qwen2.5-7B"), workload=Workload(qps=4.0), slo=SLO(ttft_p99_ms=2000.0), prices=price_book()
    )
    ladder = fallback_ladder(result)
    for c in result.candidates:
        c.reason = f"reworded: {c.reason}"
    assert fallback_ladder(result) == ladder and ladder


def test_spot_cost_is_the_fraction_of_on_demand() -> None:
    assert spot_cost(10.0, 0.3) == 3.0 and spot_cost(None) is None
