"""The online correction's speed factor from Little's law: engines slower than the model hold more requests
running at the same rate, and the capacity per instance falls with them; never raised, never read from full
engines or from too few requests, bounded, and shown in the decision's inputs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from policies import GroupSnapshot, History, PolicySpec, Snapshot, decide
from policies.model import DemandInputs, GroupHistory
from policies.scaling.demand import SPEED_TAU_S, in_service_s
from tests.policies.policy_builders import GROUP, group_spec, instance
from tests.policies.test_forecast import NOW, series

N = 10
CURVE = [(0.1, 10.0), (1.0, 12.0)]  # the model: 10 s in service at 0.1 req/s per instance, 12 s at 1.0


def spec(bound: float = 0.25, slo_ms: float | None = None) -> PolicySpec:
    pred = {
        "mode": "on",
        "capacity_rps": 1.0,
        "horizon": "30m",
        "correction_bound": bound,
        "ttft_p99_ms": slo_ms,
    }
    return PolicySpec(groups=(group_spec(predictive=pred, max_size=40),))


def tick(
    at, rate: float, running: float, waiting: float = 0.0, curve=CURVE, ttft: float = 500.0, loading: int = 0
) -> Snapshot:
    metrics = {
        "request_rate": rate,
        "prompt_tokens_per_request": 900,
        "output_tokens_per_request": 200,
        "requests_running": running,
        "queue_waiting": waiting,
        "kv_cache_usage_pct": 20.0,
        "ttft_p99_ms": ttft,
    }
    insts = [instance(i, at, metrics=metrics) for i in range(N)]
    # ordered a minute ago: InService in ESS, still loading their weights, no rate reported yet
    insts += [
        instance(N + i, at).model_copy(update={"metrics": {}, "created_at": at - timedelta(minutes=1)})
        for i in range(loading)
    ]
    demand = DemandInputs(history=series(2, now=at, fn=lambda m: rate * N), in_service=curve)
    return Snapshot(
        taken_at=at, groups=[GroupSnapshot(name=GROUP, desired_capacity=N, instances=insts, demand=demand)]
    )


def run(
    minutes: int,
    rate: float,
    running: float,
    waiting: float = 0.0,
    bound: float = 0.25,
    curve=CURVE,
    ttft: float = 500.0,
    slo_ms: float | None = None,
    every_s: float = 60.0,
    after: tuple[History, int] | None = None,
    loading: int = 0,
):
    """The plans of ``minutes`` ticks ``every_s`` apart, the history carried from each to the next, and where
    to go on from (``after`` of a later run: that history and tick number)."""
    hist, start = after or (History(groups={GROUP: GroupHistory(last_target=N)}), 0)
    plans = []
    for k in range(start, start + minutes):
        at = NOW + timedelta(seconds=k * every_s)
        plan = decide(tick(at, rate, running, waiting, curve, ttft, loading), spec(bound, slo_ms), hist, at)
        hist = plan.history
        plans.append(plan.groups[0])
    return plans, (hist, start + minutes)


def test_the_model_s_time_in_service_is_interpolated_and_held_at_the_ends():
    assert in_service_s(CURVE, 0.05) == 10.0
    assert in_service_s(CURVE, 0.55) == pytest.approx(11.0)
    assert in_service_s(CURVE, 3.0) == 12.0


def test_engines_slower_than_the_model_lower_the_capacity_within_the_hour():
    # at 0.4 req/s the model expects 0.4 x 10.67 s = 4.27 running per instance; they hold 25 % more
    expected = 0.4 * in_service_s(CURVE, 0.4)
    plans, _ = run(60, 0.4, 1.25 * expected)
    first, last = plans[0].predictive, plans[-1].predictive
    assert first["capacity_speed"] == 1.0  # the prior: one reading moves nothing
    assert 0.8 <= last["capacity_speed"] < 0.82  # 1 / 1.25, after four time constants
    assert last["capacity_correction"] == pytest.approx(last["capacity_speed"], abs=1e-3)
    assert last["capacity_per_instance_rps"] == pytest.approx(last["capacity_speed"], abs=2e-3)
    assert plans[-1].predictive["predictive_target"] > plans[0].predictive["predictive_target"]


def test_half_way_after_one_time_constant():
    expected = 0.4 * in_service_s(CURVE, 0.4)
    minutes = round(SPEED_TAU_S / 60) + 1
    speed = run(minutes, 0.4, 1.25 * expected)[0][-1].predictive["capacity_speed"]
    assert 0.84 < speed < 0.88  # 1 / (1 + 0.25 x (1 - 1/e)) = 0.863


def test_fewer_running_than_modelled_never_raises_the_capacity():
    expected = 0.4 * in_service_s(CURVE, 0.4)
    last = run(30, 0.4, 0.7 * expected)[0][-1].predictive
    assert last["capacity_speed"] == 1.0


@pytest.mark.parametrize(
    ("rate", "extra", "why"),
    [
        (0.4, {"waiting": 3.0}, "queues longer than a quarter of the running requests: the engines are full"),
        (0.1, {}, "too few requests running to mean anything"),
        (1.3, {}, "instances beyond the modelled capacity: a backlog, not a slow engine"),
        (
            0.4,
            {"ttft": 2500.0, "slo_ms": 2000.0},
            "the SLO broken: a burst piling up, which the feedback answers",
        ),
    ],
)
def test_no_reading_when_it_would_mislead(rate, extra, why):
    expected = rate * in_service_s(CURVE, rate)
    last = run(30, rate, 2.0 * expected, **extra)[0][-1].predictive
    assert last["capacity_speed"] == 1.0, why


def test_the_same_reading_within_the_slo_does_move_it():
    expected = 0.4 * in_service_s(CURVE, 0.4)
    last = run(30, 0.4, 2.0 * expected, ttft=1500.0, slo_ms=2000.0)[0][-1].predictive
    assert last["capacity_speed"] < 0.9


def test_one_reading_after_a_long_gap_weighs_as_one_reading():
    expected = 0.4 * in_service_s(CURVE, 0.4)
    # two readings an hour apart: the second is one clump, not an hour of evidence
    plans, _ = run(2, 0.4, 3.0 * expected, every_s=3600.0)
    assert plans[-1].predictive["capacity_speed"] > 0.85


def test_no_curve_no_speed():
    last = run(20, 0.4, 20.0, curve=[])[0][-1].predictive
    assert last["capacity_speed"] == 1.0


def test_the_speed_stays_within_the_bound():
    last = run(120, 0.4, 50.0, bound=0.2)[0][-1].predictive
    assert last["capacity_speed"] == pytest.approx(0.8)
    assert last["capacity_correction"] >= 0.8 - 1e-9


def test_the_speed_and_the_slo_feedback_are_each_bounded_and_multiply():
    # two hours of steady ticks with twice the running requests: the speed at its bound
    _, then = run(120, 0.6, 2.0 * 0.6 * in_service_s(CURVE, 0.6), bound=0.2, ttft=1500.0, slo_ms=2000.0)
    # then the SLO breaks under load for an hour: Little's law is not read, the feedback falls to its bound
    plans, _ = run(60, 0.6, 10.0, bound=0.2, ttft=2600.0, slo_ms=2000.0, after=then)
    inputs = plans[-1].predictive
    assert inputs["capacity_speed"] == pytest.approx(0.8)
    assert inputs["capacity_correction"] == pytest.approx(0.8 * 0.8, abs=1e-3)


def test_a_fleet_loaded_beyond_the_capacity_promised_does_not_blame_the_engines():
    # an hour at 1.5x the promised capacity per instance with the SLO broken (a stock-out, max_size, a ramp
    # the orders have not caught up with): the fleet is short, any engine breaks the SLO, the model stands
    plans, _ = run(60, 1.5, 40.0, waiting=30.0, ttft=9000.0, slo_ms=2000.0)
    assert plans[-1].predictive["capacity_correction"] == pytest.approx(1.0)
    # the same hour within the promise (0.8 of it) does blame them
    plans, _ = run(60, 0.8, 12.0, ttft=2600.0, slo_ms=2000.0)
    assert plans[-1].predictive["capacity_correction"] < 0.8


def test_instances_still_loading_do_not_dilute_the_load_into_blaming_the_engines():
    # the serving ten at 1.5x the promise with the SLO broken while ten more load their weights: the load per
    # serving instance is what the engines carry, so the fleet is short, not the model wrong
    plans, _ = run(30, 1.5, 40.0, waiting=30.0, ttft=9000.0, slo_ms=2000.0, loading=N)
    assert plans[-1].predictive["demand_complete"] is True
    assert plans[-1].predictive["capacity_correction"] == pytest.approx(1.0)


def test_a_new_engine_starts_the_correction_again_from_the_model():
    # two hours on engines 20 % slower than modelled: the correction at its bound
    _, (hist, k) = run(120, 0.6, 2.0 * 0.6 * in_service_s(CURVE, 0.6), bound=0.2)
    assert hist.groups[GROUP].forecast.correction == pytest.approx(0.8)
    at = NOW + timedelta(seconds=k * 60.0)
    snap = tick(at, 0.6, 0.6 * in_service_s(CURVE, 0.6))

    def with_capacity(rps: float) -> PolicySpec:
        g = spec(0.2).groups[0]
        pred = g.predictive.model_copy(update={"capacity_rps": rps})
        return PolicySpec(groups=(g.model_copy(update={"predictive": pred}),))

    # the same engine: the correction learned stays
    same = decide(snap, with_capacity(1.0), hist, at).groups[0].predictive
    assert same["capacity_correction"] < 0.85
    # a new measured capacity (the group moved to another instance type): what the old one learned is gone
    new = decide(snap, with_capacity(1.3), hist, at).groups[0].predictive
    assert new["capacity_correction"] == pytest.approx(1.0) and new["capacity_speed"] == pytest.approx(1.0)


def test_another_max_num_seqs_is_another_engine_and_unset_settings_keep_a_learned_state():
    from policies.scaling.demand import engine_of
    from policies.spec import Predictive

    sized = Predictive(model="Qwen2.5-14B", instance_type="ecs.gn7i-2x.8xlarge", tp=2)
    # the engine a state learned before the settings existed was recorded on
    assert engine_of(sized) == "Qwen2.5-14B on ecs.gn7i-2x.8xlarge tp=2 max_model_len=None"
    capped = sized.model_copy(update={"max_num_seqs": 64})
    assert engine_of(capped) != engine_of(sized)
    assert engine_of(capped) != engine_of(sized.model_copy(update={"max_num_seqs": 128}))
