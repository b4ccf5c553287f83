"""Small builders for policy tests: specs, instances and snapshots with fresh samples at a given time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from policies import GroupSnapshot, GroupSpec, InstanceSnapshot, MetricSample, PolicySpec, Snapshot

# Monday 2026-12-07 10:00 in Asia/Shanghai (02:00 UTC): inside weekday business hours.
MONDAY_10_SHANGHAI = datetime(2026, 12, 7, 2, 0, tzinfo=UTC)
GROUP = "chat"


def group_spec(**overrides: Any) -> GroupSpec:
    base: dict[str, Any] = {
        "name": GROUP,
        "min_size": 2,
        "max_size": 20,
        "warm_floor": 2,
        "cold_start_s": 180,
        "scale_out": [{"metric": "queue_waiting_per_instance", "above": 2, "for": "30s"}],
        "scale_in": [{"metric": "queue_waiting_per_instance", "below": 0.5, "for": "10m"}],
    }
    base.update(overrides)
    return GroupSpec.model_validate(base)


def policy(**overrides: Any) -> PolicySpec:
    return PolicySpec(groups=(group_spec(**overrides),))


def instance(
    n: int,
    at: datetime,
    state: str = "InService",
    metrics: dict[str, float] | None = None,
    age_s: float = 0.0,
    **extra: Any,
) -> InstanceSnapshot:
    """Instance ``i-<n>`` whose samples were taken ``age_s`` seconds before ``at``."""
    sample_at = at - timedelta(seconds=age_s)
    values = {"queue_waiting": 1.0, "requests_running": 4.0, "gpu_temperature_c": 60.0}
    values.update(metrics or {})
    return InstanceSnapshot(
        instance_id=f"i-{n:03d}",
        lifecycle_state=state,
        created_at=MONDAY_10_SHANGHAI - timedelta(days=1, seconds=n),
        metrics={k: MetricSample(value=v, at=sample_at) for k, v in values.items() if v is not None},
        **extra,
    )


def snapshot(
    at: datetime,
    instances: list[InstanceSnapshot],
    desired: int | None = None,
    **group_fields: Any,
) -> Snapshot:
    if desired is None:
        desired = sum(1 for i in instances if i.lifecycle_state not in ("Removing", "Removing:Wait"))
    group = GroupSnapshot(name=GROUP, desired_capacity=desired, instances=instances, **group_fields)
    return Snapshot(taken_at=at, groups=[group])


def fleet(at: datetime, n: int, waiting: float = 1.0, **metrics: float) -> list[InstanceSnapshot]:
    """``n`` InService instances with ``waiting`` requests queued each."""
    return [instance(i, at, metrics={"queue_waiting": waiting, **metrics}) for i in range(n)]
