"""The policy core stays total on hostile numbers: whatever a snapshot carries, ``decide`` returns a plan.

The service drops impossible samples at its boundary (fleet/service/sanitize.py), but ``fleet plan`` feeds
the core a snapshot file directly, and a group sum of large finite samples can still overflow to infinity.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import GroupSnapshot, GroupSpec, InstanceSnapshot, MetricSample, PolicySpec, Snapshot, decide
from policies import metrics as m
from policies.observe import FUTURE_TOLERANCE_S, fresh
from policies.scaling.signals import MAX_DESIRE, desire

NOW = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
HOSTILE = st.one_of(
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308, -1e308, 2.0**64, -1.0, 1e20]),
    st.floats(allow_nan=True, allow_infinity=True),
)

SPEC = GroupSpec.model_validate(
    {
        "name": "g",
        "min_size": 1,
        "max_size": 50,
        "scale_out": [
            {"metric": "queue_waiting_per_instance", "above": 2, "for": 0},
            {"metric": "ttft_p99_ms", "above": 800, "for": 0},
            {"metric": "gpu_util_avg", "above": 80, "for": 0},
        ],
        "scale_in": [{"metric": "queue_waiting_per_instance", "below": 0.5, "for": 0}],
        "isolation": {
            "rules": [
                {"name": "hot", "metric": "gpu_temperature_c", "above": 85, "for": 0, "action": "reboot"},
                {"name": "thr", "throttle_reasons": ["hw_thermal"], "samples": 1},
                {"name": "xid", "xids": [48, 79], "action": "replace"},
            ]
        },
    }
)
METRICS = [
    m.QUEUE_WAITING,
    m.TTFT_P99_MS,
    m.GPU_UTIL_PCT,
    m.GPU_TEMPERATURE_C,
    m.GPU_THROTTLE_REASONS,
    m.GPU_XID,
]


def _instance(k: int, metrics: dict[str, float]) -> InstanceSnapshot:
    return InstanceSnapshot(
        instance_id=f"i-{k:04d}",
        lifecycle_state="InService",
        created_at=NOW - timedelta(hours=1),
        metrics={name: MetricSample(value=v, at=NOW - timedelta(seconds=5)) for name, v in metrics.items()},
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(st.dictionaries(st.sampled_from(METRICS), HOSTILE, min_size=1), min_size=1, max_size=4)
)
def test_decide_returns_a_plan_whatever_the_values(values: list[dict[str, float]]) -> None:
    instances = [_instance(k, v) for k, v in enumerate(values)]
    snap = Snapshot(
        taken_at=NOW, groups=[GroupSnapshot(name="g", desired_capacity=len(instances), instances=instances)]
    )
    plan = decide(snap, PolicySpec(groups=(SPEC,)), None, NOW)
    (gp,) = plan.groups
    assert SPEC.min_size <= gp.serving_target <= SPEC.max_size


@given(value=HOSTILE, n=st.integers(0, 3000))
def test_desire_is_an_integer_in_range_for_any_value(value: float, n: int) -> None:
    rule = SPEC.scale_out[0]
    got = desire(rule, value, n, 2.0)
    assert isinstance(got, int) and 0 <= got <= max(MAX_DESIRE, n)


def test_desire_of_an_overflowing_sum_is_capped_not_an_error() -> None:
    assert desire(SPEC.scale_out[0], 1e308, 10, 0.5) == MAX_DESIRE


def test_a_sample_from_the_future_is_not_fresh() -> None:
    ahead = MetricSample(value=9.0, at=NOW + timedelta(hours=1))
    assert not fresh(ahead, NOW, 120)


def test_a_sample_within_the_clock_tolerance_is_fresh() -> None:
    near = MetricSample(value=9.0, at=NOW + timedelta(seconds=FUTURE_TOLERANCE_S - 1))
    assert fresh(near, NOW, 120)


def test_a_group_is_not_scaled_on_samples_dated_an_hour_ahead() -> None:
    ahead = NOW + timedelta(hours=1)
    instances = [
        InstanceSnapshot(
            instance_id=f"i-{k}",
            lifecycle_state="InService",
            metrics={m.QUEUE_WAITING: MetricSample(value=50.0, at=ahead)},
        )
        for k in range(2)
    ]
    snap = Snapshot(taken_at=NOW, groups=[GroupSnapshot(name="g", desired_capacity=2, instances=instances)])
    plan = decide(snap, PolicySpec(groups=(SPEC,)), None, NOW)
    assert plan.groups[0].serving_target == 2
