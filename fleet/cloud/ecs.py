"""ECS (2014-05-26) adapter: instance facts, health and system events for node isolation, and reboot.

Wire facts (../shared/reference/aliyun-api.md section 3): ECS lists are wrapped (`Instances.Instance[]`);
DescribeInstances takes `InstanceIds` as a JSON array string of at most 100 ids and pages with NextToken;
DescribeInstancesFullStatus takes `InstanceId.N` (at most 100) and pages by number;
DescribeInstanceHistoryEvents takes a single `InstanceId` and pages with NextToken. Status, health and event
fields are `{Code, Name}` pairs where Name is the readable value (`Running`, `Impaired`,
`SystemFailure.Reboot`, `Executing`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, Protocol, TypeVar

from alibabacloud_ecs20140526 import models as m

from fleet.cloud.errors import parsed_items
from fleet.cloud.paging import TokenWalk
from fleet.cloud.retry import RetryPolicy, call
from fleet.cloud.types import InstanceHealth, InstanceInfo, SystemEvent, parse_time

ACTIONS: tuple[str, ...] = (
    "DescribeInstances",
    "DescribeInstancesFullStatus",
    "DescribeInstanceHistoryEvents",
    "RebootInstance",
)

MAX_IDS_PER_CALL = 100  # DescribeInstances InstanceIds and DescribeInstancesFullStatus InstanceId.N [DOC]
PAGE_SIZE = 100
# The system event codes of DescribeInstancesFullStatus (aliyun-api.md section 3), used as its
# InstanceEventType.N filter by the region-wide scan.
SYSTEM_EVENT_TYPES = (
    "SystemMaintenance.Reboot",
    "SystemMaintenance.Redeploy",
    "SystemMaintenance.Stop",
    "SystemFailure.Reboot",
    "SystemFailure.Redeploy",
    "SystemFailure.Delete",
    "InstanceFailure.Reboot",
    "InstanceExpiration.Stop",
    "InstanceExpiration.Delete",
    "AccountUnbalanced.Stop",
    "AccountUnbalanced.Delete",
)
IMPAIRED = "Impaired"
# Event cycle states that still matter to a running node: not yet done, or being done now.
ACTIVE_CYCLE_STATES = ("Scheduled", "Executing", "Inquiring")

T = TypeVar("T")


class EcsSdkClient(Protocol):
    """The methods of `alibabacloud_ecs20140526.client.Client` this adapter calls."""

    def describe_instances(self, request: m.DescribeInstancesRequest) -> Any: ...
    def describe_instances_full_status(self, request: m.DescribeInstancesFullStatusRequest) -> Any: ...
    def describe_instance_history_events(self, request: m.DescribeInstanceHistoryEventsRequest) -> Any: ...
    def reboot_instance(self, request: m.RebootInstanceRequest) -> Any: ...


class EcsApi(Protocol):
    """What the service and node isolation need from ECS."""

    def describe_instances(self, instance_ids: Sequence[str]) -> list[InstanceInfo]: ...
    def describe_full_status(self, instance_ids: Sequence[str]) -> list[InstanceHealth]: ...
    def describe_history_events(
        self, instance_ids: Sequence[str], active_only: bool = True
    ) -> list[SystemEvent]: ...
    def reboot_instance(self, instance_id: str) -> None: ...


class EcsAdapter:
    """EcsApi over the official ECS SDK client; `region` is sent as RegionId, which ECS requires."""

    product = "ecs"

    def __init__(self, client: EcsSdkClient, region: str, retry: RetryPolicy | None = None):
        self._client = client
        self._region = region
        self._retry = retry or RetryPolicy()

    def __repr__(self) -> str:
        return f"EcsAdapter(region={self._region!r})"

    def describe_instances(self, instance_ids: Sequence[str]) -> list[InstanceInfo]:
        out: list[InstanceInfo] = []
        for chunk in _chunks(instance_ids, MAX_IDS_PER_CALL):
            ids_json = json.dumps(chunk, separators=(",", ":"))
            token: str | None = None
            walk = TokenWalk("DescribeInstances")
            while True:
                req = m.DescribeInstancesRequest(
                    region_id=self._region, instance_ids=ids_json, max_results=PAGE_SIZE, next_token=token
                )
                resp = self._call("DescribeInstances", partial(self._client.describe_instances, req))
                body = resp.body
                rows = (body.instances.instance if body.instances else None) or []
                out.extend(parsed_items("DescribeInstances", _info, rows))
                token = walk.follow(body.next_token, len(rows))
                if token is None:
                    break
        return out

    def describe_full_status(self, instance_ids: Sequence[str]) -> list[InstanceHealth]:
        out: list[InstanceHealth] = []
        for chunk in _chunks(instance_ids, MAX_IDS_PER_CALL):
            out.extend(self._full_status_pages({"instance_id": chunk}))
        return out

    def describe_full_status_exceptions(self) -> list[InstanceHealth]:
        """The region's instances that are Impaired or carry an active system event: two filtered, paged
        reads whatever the fleet's size (instances in neither answer are healthy and have no event)."""
        seen: dict[str, InstanceHealth] = {}
        for flt in ({"health_status": IMPAIRED}, {"instance_event_type": list(SYSTEM_EVENT_TYPES)}):
            for health in self._full_status_pages(flt):
                seen.setdefault(health.instance_id, health)
        return list(seen.values())

    def _full_status_pages(self, flt: dict[str, Any]) -> list[InstanceHealth]:
        out: list[InstanceHealth] = []
        page = 1
        while True:
            req = m.DescribeInstancesFullStatusRequest(
                region_id=self._region, page_number=page, page_size=PAGE_SIZE, **flt
            )
            resp = self._call(
                "DescribeInstancesFullStatus", partial(self._client.describe_instances_full_status, req)
            )
            body = resp.body
            sets = body.instance_full_status_set
            rows = (sets.instance_full_status_type if sets else None) or []
            out.extend(parsed_items("DescribeInstancesFullStatus", _health, rows))
            done = body.total_count is not None and len(out) >= body.total_count
            if not rows or len(rows) < PAGE_SIZE or done:
                return out
            page += 1

    def describe_history_events(
        self, instance_ids: Sequence[str], active_only: bool = True
    ) -> list[SystemEvent]:
        """System events of each instance; with active_only, only Scheduled, Executing and Inquiring ones."""
        cycle = list(ACTIVE_CYCLE_STATES) if active_only else None
        out: list[SystemEvent] = []
        for instance_id in dict.fromkeys(instance_ids):
            token: str | None = None
            walk = TokenWalk("DescribeInstanceHistoryEvents")
            while True:
                req = m.DescribeInstanceHistoryEventsRequest(
                    region_id=self._region,
                    instance_id=instance_id,
                    instance_event_cycle_status=cycle,
                    max_results=PAGE_SIZE,
                    next_token=token,
                )
                resp = self._call(
                    "DescribeInstanceHistoryEvents",
                    partial(self._client.describe_instance_history_events, req),
                )
                body = resp.body
                sets = body.instance_system_event_set
                rows = (sets.instance_system_event_type if sets else None) or []
                convert = partial(_event, instance_id=instance_id)
                for event in parsed_items("DescribeInstanceHistoryEvents", convert, rows):
                    if not active_only or event.cycle_status in ACTIVE_CYCLE_STATES:
                        out.append(event)
                token = walk.follow(body.next_token, len(rows))
                if token is None:
                    break
        return out

    def reboot_instance(self, instance_id: str, force_stop: bool = False) -> None:
        req = m.RebootInstanceRequest(instance_id=instance_id, force_stop=force_stop)
        # A reboot is not idempotent: after a 5xx or a lost answer it may have happened, so only rejections
        # (throttling) are retried; the caller re-checks the instance before rebooting again.
        self._call("RebootInstance", lambda: self._client.reboot_instance(req), idempotent=False)

    def _call(self, action: str, fn: Callable[[], T], *, idempotent: bool = True) -> T:
        return call(self._retry, self.product, action, fn, idempotent=idempotent)


def _chunks(values: Sequence[str], size: int) -> Iterator[list[str]]:
    ids = list(dict.fromkeys(values))
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def _name(pair: Any) -> str | None:
    """The readable value of a {Code, Name} pair (Code is numeric on the real API)."""
    if pair is None:
        return None
    name = getattr(pair, "name", None)
    if name:
        return str(name)
    code = getattr(pair, "code", None)
    return str(code) if code is not None else None


def _first_ip(holder: Any) -> str | None:
    ips = getattr(holder, "ip_address", None) if holder is not None else None
    return ips[0] if ips else None


def _info(row: m.DescribeInstancesResponseBodyInstancesInstance) -> InstanceInfo:
    vpc_ip = _first_ip(row.vpc_attributes.private_ip_address) if row.vpc_attributes else None
    return InstanceInfo(
        instance_id=_id(row.instance_id),
        status=row.status or "",
        instance_type=row.instance_type or "",
        gpu_amount=int(row.gpuamount or 0),
        gpu_spec=row.gpuspec or None,
        zone_id=row.zone_id,
        private_ip=vpc_ip or _first_ip(row.inner_ip_address),
    )


def _id(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("an item without InstanceId")
    return value


def _event(row: Any, instance_id: str | None) -> SystemEvent:
    return SystemEvent(
        event_id=row.event_id,
        instance_id=getattr(row, "instance_id", None) or instance_id or "",
        code=_name(row.event_type) or "",
        cycle_status=_name(row.event_cycle_status) or "",
        not_before=parse_time(row.not_before),
        finished_at=parse_time(getattr(row, "event_finish_time", None)),
        reason=row.reason or None,
    )


def _health(
    row: m.DescribeInstancesFullStatusResponseBodyInstanceFullStatusSetInstanceFullStatusType,
) -> InstanceHealth:
    sets = row.scheduled_system_event_set
    events = (sets.scheduled_system_event_type if sets else None) or []
    return InstanceHealth(
        instance_id=_id(row.instance_id),
        status=_name(row.status),
        health_status=_name(row.health_status),
        events=tuple(_event(e, row.instance_id) for e in events),
    )
