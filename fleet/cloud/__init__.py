"""Adapters over the official Alibaba Cloud SDKs (ESS, CMS, ECS): narrow, typed, retried.

`make_clients(region, account_id)` gives the three adapters; each module's `ACTIONS` lists the wire Actions it
calls (the Terraform RAM policy is checked against them). Errors are the tree in `fleet.cloud.errors`.
"""

from fleet.cloud import cms as _cms
from fleet.cloud import ecs as _ecs
from fleet.cloud import ess as _ess
from fleet.cloud.clients import CloudClients, make_clients
from fleet.cloud.cms import CmsAdapter, CmsApi
from fleet.cloud.ecs import EcsAdapter, EcsApi
from fleet.cloud.errors import (
    AuthError,
    CloudError,
    Conflict,
    IdempotencyMismatch,
    IncompleteListing,
    InvalidRequest,
    MalformedAnswer,
    NetworkError,
    NotFound,
    ServerError,
    Throttled,
)
from fleet.cloud.ess import EssAdapter, EssApi
from fleet.cloud.retry import RetryPolicy
from fleet.cloud.types import (
    CustomMetric,
    InstanceHealth,
    InstanceInfo,
    MetricPoint,
    ScalingActivity,
    ScalingGroup,
    ScalingInstance,
    ScheduledTask,
    SystemEvent,
)

# Every wire Action the adapters call, for the RAM policy.
ACTIONS: dict[str, tuple[str, ...]] = {"ess": _ess.ACTIONS, "cms": _cms.ACTIONS, "ecs": _ecs.ACTIONS}

__all__ = [
    "ACTIONS",
    "AuthError",
    "CloudClients",
    "CloudError",
    "CmsAdapter",
    "CmsApi",
    "Conflict",
    "CustomMetric",
    "EcsAdapter",
    "EcsApi",
    "EssAdapter",
    "EssApi",
    "IdempotencyMismatch",
    "IncompleteListing",
    "InstanceHealth",
    "InstanceInfo",
    "InvalidRequest",
    "MalformedAnswer",
    "MetricPoint",
    "NetworkError",
    "NotFound",
    "RetryPolicy",
    "ScalingActivity",
    "ScalingGroup",
    "ScalingInstance",
    "ScheduledTask",
    "ServerError",
    "SystemEvent",
    "Throttled",
    "make_clients",
]
