"""A moto-style fake of Alibaba Cloud (ECS, ESS, CMS) that speaks the real wire protocol.

Two ways in: ``with mock_aliyun() as cloud:`` intercepts the official SDKs in-process (also a decorator, and
the pytest fixture ``aliyun``); ``FakeAliyunServer`` / ``fleet fake-cloud`` serve the same fake over HTTP on
127.0.0.1 with a ``/_fake/`` control API. This package copies the cloud's API, not our adapters: it imports
nothing else of ``fleet``."""

from fleet.testing.cloud import DEFAULT_ACCOUNT_ID, FakeCloud
from fleet.testing.cms.models import dimension_string
from fleet.testing.core.clock import Clock, ManualClock, ScaledClock
from fleet.testing.core.errors import AliyunError
from fleet.testing.core.faults import FaultRule
from fleet.testing.ecs.instance_types import INSTANCE_TYPES
from fleet.testing.mock import mock_aliyun
from fleet.testing.server import FakeAliyunServer

__all__ = [
    "DEFAULT_ACCOUNT_ID",
    "INSTANCE_TYPES",
    "AliyunError",
    "Clock",
    "FakeAliyunServer",
    "FakeCloud",
    "FaultRule",
    "ManualClock",
    "ScaledClock",
    "dimension_string",
    "mock_aliyun",
]
