"""pytest plugin (entry point ``pytest11``): the ``aliyun`` fixture, a :class:`FakeCloud` behind
``mock_aliyun`` for the duration of one test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fleet.testing.cloud import FakeCloud
from fleet.testing.mock import mock_aliyun


@pytest.fixture
def aliyun() -> Iterator[FakeCloud]:
    """The fake Alibaba Cloud (ECS, ESS, CMS) intercepting the official SDKs; its clock starts at UTC now."""
    with mock_aliyun() as cloud:
        yield cloud
