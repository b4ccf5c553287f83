"""Our own frozen values for what the adapters read from the cloud, and the time parsing they share.

The SDK response models are mutable, mostly-None bags named after the wire; the rest of fleet sees only these.
All datetimes are timezone-aware UTC.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime


@dataclass(frozen=True)
class ScalingGroup:
    group_id: str
    name: str
    lifecycle_state: str  # Active / Inactive / Deleting
    min_size: int
    max_size: int
    desired_capacity: int | None  # None when the group was created without desired capacity
    total_capacity: int
    active_capacity: int
    pending_capacity: int  # PendingCapacity + PendingWaitCapacity (waiting in a lifecycle hook)
    removing_capacity: int  # RemovingCapacity + RemovingWaitCapacity
    standby_capacity: int
    protected_capacity: int
    stopped_capacity: int
    scaling_policy: str | None  # recycle / release / forcerelease / forcerecycle
    default_cooldown_s: int
    active_configuration_id: str | None = None
    vswitch_ids: tuple[str, ...] = ()

    @property
    def disabled(self) -> str | None:
        """The lifecycle state when the group is not Active (Inactive: disabled in ESS; Deleting), when ESS
        refuses every scaling write on it (``IncorrectScalingGroupStatus``); None when Active."""
        return None if self.lifecycle_state == "Active" else self.lifecycle_state


@dataclass(frozen=True)
class ScalingInstance:
    instance_id: str
    group_id: str
    lifecycle_state: str  # InService, Pending, Pending:Wait, Protected, Standby, Stopped, Removing, ...
    health_status: str | None  # Healthy / Unhealthy
    creation_type: str | None  # AutoCreated / Attached / Managed
    created_at: datetime | None
    zone_id: str | None
    # the activity that last moved it (the scale-in whose lifecycle action it waits in, when Removing:Wait)
    activity_id: str | None = None
    # its weight in the load balancers attached to the group (ESS sets 0 in Standby); None without one
    load_balancer_weight: int | None = None


@dataclass(frozen=True)
class LifecycleAction:
    """A pending lifecycle hook action (DescribeLifecycleActions): instances waiting until it is completed."""

    token: str
    hook_id: str
    instance_ids: tuple[str, ...]
    status: str  # Pending / Timeout / Completed


@dataclass(frozen=True)
class ScalingActivity:
    activity_id: str
    group_id: str
    status_code: str  # InProgress, Successful, Warning, Failed, Rejected
    cause: str | None
    start_time: datetime | None
    end_time: datetime | None
    total_capacity: int | None
    status_message: str | None = None  # e.g. "... error code: OperationDenied.NoStock, msg: ..."
    error_code: str | None = None  # the code of the first of the activity's ErrorMessages


@dataclass(frozen=True)
class ScheduledTask:
    task_id: str
    name: str
    group_id: str | None
    launch_time: datetime | None
    recurrence_type: str | None  # Daily / Weekly / Monthly / Cron, None for a one-off task
    recurrence_value: str | None
    recurrence_end_time: datetime | None
    min_value: int | None
    max_value: int | None
    desired_capacity: int | None
    enabled: bool
    description: str | None = None  # who wrote it, for the service's own tasks (service/schedules.py)


@dataclass(frozen=True)
class MetricPoint:
    namespace: str
    metric: str
    instance_id: str | None
    timestamp: datetime
    value: float | None  # the requested statistic
    dimensions: Mapping[str, str] = field(default_factory=dict)  # instanceId, gpuId, userId, ...
    stats: Mapping[str, float] = field(default_factory=dict)  # every statistic the row carried


@dataclass(frozen=True)
class CustomMetric:
    name: str
    dimensions: Mapping[str, str]
    value: float
    timestamp: datetime
    group_id: str = "0"  # CMS GroupId 0 means "no application group"


@dataclass(frozen=True)
class InstanceInfo:
    instance_id: str
    status: str  # Pending / Running / Starting / Stopping / Stopped
    instance_type: str
    gpu_amount: int
    gpu_spec: str | None
    zone_id: str | None
    private_ip: str | None


@dataclass(frozen=True)
class SystemEvent:
    event_id: str
    instance_id: str
    code: str  # e.g. SystemFailure.Reboot
    cycle_status: str  # Scheduled, Executing, Executed, Canceled, Failed, Avoided, Inquiring
    not_before: datetime | None
    finished_at: datetime | None
    reason: str | None


@dataclass(frozen=True)
class InstanceHealth:
    instance_id: str
    status: str | None  # Running, Stopped, ...
    health_status: str | None  # Ok, Impaired, Warning, Maintaining, Initializing, InsufficientData, ...
    events: tuple[SystemEvent, ...] = ()


def parse_time(value: str | int | float | None) -> datetime | None:
    """Parse the cloud's time strings into aware UTC datetimes.

    ESS writes minutes only ('2026-11-30T08:00Z'), ECS seconds ('2026-11-30T08:00:00Z'), some fields add
    milliseconds; CMS uses epoch milliseconds. Empty values are None; an unreadable one raises ValueError.
    """
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(float(value) / 1000.0, tz=UTC)
    text = str(value).strip()
    if text.isdigit():
        return datetime.fromtimestamp(int(text) / 1000.0, tz=UTC)
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)  # the APIs speak UTC when they name no zone
    return parsed.astimezone(UTC)


def format_ess_time(value: datetime) -> str:
    """ESS's minute-resolution UTC format ('YYYY-MM-DDThh:mmZ'); a naive datetime is refused."""
    if value.tzinfo is None:
        raise ValueError(f"time {value.isoformat()} has no timezone; ESS needs an aware datetime")
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")


def to_epoch_ms(value: datetime) -> int:
    if value.tzinfo is None:
        raise ValueError(f"time {value.isoformat()} has no timezone")
    return int(round(value.timestamp() * 1000))
