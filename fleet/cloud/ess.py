"""Auto Scaling (ESS 2022-02-22) adapter: the few Actions the service calls, returning our own types.

ESS list answers are plain arrays with PageNumber/PageSize/TotalCount paging (PageSize at most 50), and its
times have minute resolution ('2026-11-30T08:00Z'); see ../shared/reference/aliyun-api.md section 1.
Writes that start an activity carry the caller's ClientToken, so a retried call yields the same activity.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, Protocol, TypeVar

from alibabacloud_ess20220222 import models as m

from fleet.cloud.errors import IncompleteListing, MalformedAnswer, parsed_items
from fleet.cloud.retry import RetryPolicy, call
from fleet.cloud.types import (
    LifecycleAction,
    ScalingActivity,
    ScalingGroup,
    ScalingInstance,
    ScheduledTask,
    format_ess_time,
    parse_time,
)

ACTIONS: tuple[str, ...] = (
    "DescribeScalingGroups",
    "DescribeScalingInstances",
    "DescribeScalingActivities",
    "ScaleWithAdjustment",
    "ModifyScalingGroup",
    "DescribeScheduledTasks",
    "CreateScheduledTask",
    "ModifyScheduledTask",
    "DeleteScheduledTask",
    "EnterStandby",
    "ExitStandby",
    "RemoveInstances",
    "SetInstancesProtection",
    # drain on scale-in: find the lifecycle action an instance waits in, complete it once it has drained
    "DescribeLifecycleActions",
    "CompleteLifecycleAction",
    "ModifyScalingConfiguration",  # the capacity ladder (issue 17)
)

log = logging.getLogger(__name__)

PAGE_SIZE = 50  # ESS's maximum PageSize
MAX_GROUP_FILTER = 20  # ScalingGroupIds.N / ScalingGroupNames.N accept at most 20 values [DOC]
MAX_INSTANCES_PER_WRITE = 20  # EnterStandby/ExitStandby/RemoveInstances/SetInstancesProtection [DOC]
# MinSize and MaxSize range over 0..2000 (CreateScalingGroup / ModifyScalingGroup) [DOC]. A group answer
# lacking one reads as these widest bounds, never as 0: a MaxSize read as 0 clipped every plan to nothing.
ESS_MIN_GROUP_SIZE = 0
ESS_MAX_GROUP_SIZE = 2000

T = TypeVar("T")


@dataclass(frozen=True)
class _List:
    """A paged ESS list answer: the wire name of its array, how to read it from the SDK's body, and each
    item's id (an item listed twice in one walk means the list moved under it)."""

    name: str
    items: Callable[[Any], list[Any] | None]
    key: Callable[[Any], Any]


_GROUPS = _List("ScalingGroups", lambda b: b.scaling_groups, lambda r: r.scaling_group_id)
_INSTANCES = _List("ScalingInstances", lambda b: b.scaling_instances, lambda r: r.instance_id)
_ACTIVITIES = _List("ScalingActivities", lambda b: b.scaling_activities, lambda r: r.scaling_activity_id)
_TASKS = _List("ScheduledTasks", lambda b: b.scheduled_tasks, lambda r: r.scheduled_task_id)


class EssSdkClient(Protocol):
    """The methods of `alibabacloud_ess20220222.client.Client` this adapter calls."""

    def describe_scaling_groups(self, request: m.DescribeScalingGroupsRequest) -> Any: ...
    def describe_scaling_instances(self, request: m.DescribeScalingInstancesRequest) -> Any: ...
    def describe_scaling_activities(self, request: m.DescribeScalingActivitiesRequest) -> Any: ...
    def scale_with_adjustment(self, request: m.ScaleWithAdjustmentRequest) -> Any: ...
    def modify_scaling_group(self, request: m.ModifyScalingGroupRequest) -> Any: ...
    def describe_scheduled_tasks(self, request: m.DescribeScheduledTasksRequest) -> Any: ...
    def create_scheduled_task(self, request: m.CreateScheduledTaskRequest) -> Any: ...
    def modify_scheduled_task(self, request: m.ModifyScheduledTaskRequest) -> Any: ...
    def delete_scheduled_task(self, request: m.DeleteScheduledTaskRequest) -> Any: ...
    def enter_standby(self, request: m.EnterStandbyRequest) -> Any: ...
    def exit_standby(self, request: m.ExitStandbyRequest) -> Any: ...
    def remove_instances(self, request: m.RemoveInstancesRequest) -> Any: ...
    def set_instances_protection(self, request: m.SetInstancesProtectionRequest) -> Any: ...
    def describe_lifecycle_actions(self, request: m.DescribeLifecycleActionsRequest) -> Any: ...
    def complete_lifecycle_action(self, request: m.CompleteLifecycleActionRequest) -> Any: ...
    def modify_scaling_configuration(self, request: m.ModifyScalingConfigurationRequest) -> Any: ...


class EssApi(Protocol):
    """What the service needs from Auto Scaling (EssAdapter implements it; fakes in tests may too)."""

    def describe_scaling_groups(
        self, group_ids: Sequence[str] | None = None, names: Sequence[str] | None = None
    ) -> list[ScalingGroup]: ...
    def describe_scaling_instances(
        self, group_id: str, lifecycle_states: Sequence[str] | None = None
    ) -> list[ScalingInstance]: ...
    def describe_scaling_activities(
        self, group_id: str, status_code: str | None = None, limit: int = 20
    ) -> list[ScalingActivity]: ...
    def scale_to(self, group_id: str, total_capacity: int, client_token: str) -> str: ...
    def modify_scaling_group(
        self,
        group_id: str,
        *,
        min_size: int | None = None,
        max_size: int | None = None,
        desired_capacity: int | None = None,
    ) -> None: ...
    def describe_scheduled_tasks(self, group_id: str) -> list[ScheduledTask]: ...
    def create_scheduled_task(
        self,
        group_id: str,
        name: str,
        launch_time: datetime | str,
        recurrence_type: str | None,
        recurrence_value: str | None,
        *,
        min_value: int | None = None,
        max_value: int | None = None,
        desired_capacity: int | None = None,
        recurrence_end_time: datetime | str | None = None,
        enabled: bool = True,
        description: str | None = None,
    ) -> str: ...
    def modify_scheduled_task(
        self,
        task_id: str,
        *,
        group_id: str | None = None,
        name: str | None = None,
        launch_time: datetime | str | None = None,
        recurrence_type: str | None = None,
        recurrence_value: str | None = None,
        min_value: int | None = None,
        max_value: int | None = None,
        desired_capacity: int | None = None,
        recurrence_end_time: datetime | str | None = None,
        enabled: bool | None = None,
        description: str | None = None,
    ) -> None: ...
    def delete_scheduled_task(self, task_id: str) -> None: ...
    def enter_standby(self, group_id: str, instance_ids: Sequence[str], client_token: str) -> str: ...
    def exit_standby(self, group_id: str, instance_ids: Sequence[str], client_token: str) -> str: ...
    def remove_instances(
        self,
        group_id: str,
        instance_ids: Sequence[str],
        *,
        decrease_desired_capacity: bool = True,
        client_token: str,
    ) -> str: ...
    def set_instances_protection(
        self, group_id: str, instance_ids: Sequence[str], protected: bool
    ) -> None: ...
    def describe_lifecycle_actions(
        self, activity_id: str, status: str | None = "Pending"
    ) -> list[LifecycleAction]: ...
    def complete_lifecycle_action(
        self, hook_id: str, token: str, result: str = "CONTINUE", *, client_token: str | None = None
    ) -> None: ...


class EssAdapter:
    """EssApi over the official ESS SDK client. `region` (optional) is sent as RegionId where ESS takes it."""

    product = "ess"

    def __init__(self, client: EssSdkClient, retry: RetryPolicy | None = None, region: str | None = None):
        self._client = client
        self._retry = retry or RetryPolicy()
        self._region = region

    def __repr__(self) -> str:
        return f"EssAdapter(region={self._region!r})"

    # -- reads ---------------------------------------------------------------------------------------------

    def describe_scaling_groups(
        self, group_ids: Sequence[str] | None = None, names: Sequence[str] | None = None
    ) -> list[ScalingGroup]:
        filters: list[dict[str, list[str]]] = []
        for chunk in _chunks(list(group_ids or []), MAX_GROUP_FILTER):
            filters.append({"scaling_group_ids": chunk})
        for chunk in _chunks(list(names or []), MAX_GROUP_FILTER):
            filters.append({"scaling_group_names": chunk})
        if not filters:
            filters.append({})
        seen: dict[str, ScalingGroup] = {}
        for flt in filters:
            raws = self._pages(
                "DescribeScalingGroups",
                partial(self._groups_request, flt),
                self._client.describe_scaling_groups,
                _GROUPS,
            )
            for group in parsed_items("DescribeScalingGroups", _group, raws):
                seen.setdefault(group.group_id, group)
        return list(seen.values())

    def describe_scaling_instances(
        self, group_id: str, lifecycle_states: Sequence[str] | None = None
    ) -> list[ScalingInstance]:
        states = list(lifecycle_states) if lifecycle_states else None
        return parsed_items(
            "DescribeScalingInstances",
            partial(_instance, group_id=group_id),
            self._pages(
                "DescribeScalingInstances",
                lambda page: m.DescribeScalingInstancesRequest(
                    region_id=self._region,
                    scaling_group_id=group_id,
                    lifecycle_states=states,
                    page_number=page,
                    page_size=PAGE_SIZE,
                ),
                self._client.describe_scaling_instances,
                _INSTANCES,
            ),
        )

    def describe_scaling_activities(
        self, group_id: str, status_code: str | None = None, limit: int = 20
    ) -> list[ScalingActivity]:
        if limit <= 0:
            return []
        return parsed_items(
            "DescribeScalingActivities",
            partial(_activity, group_id=group_id),
            self._pages(
                "DescribeScalingActivities",
                lambda page: m.DescribeScalingActivitiesRequest(
                    region_id=self._region,
                    scaling_group_id=group_id,
                    status_code=status_code,
                    page_number=page,
                    page_size=min(PAGE_SIZE, limit),
                ),
                self._client.describe_scaling_activities,
                _ACTIVITIES,
                limit=limit,
            ),
        )

    def describe_scheduled_tasks(self, group_id: str) -> list[ScheduledTask]:
        return parsed_items(
            "DescribeScheduledTasks",
            _task,
            self._pages(
                "DescribeScheduledTasks",
                lambda page: m.DescribeScheduledTasksRequest(
                    region_id=self._region, scaling_group_id=group_id, page_number=page, page_size=PAGE_SIZE
                ),
                self._client.describe_scheduled_tasks,
                _TASKS,
            ),
        )

    def _groups_request(self, flt: dict[str, list[str]], page: int) -> m.DescribeScalingGroupsRequest:
        return m.DescribeScalingGroupsRequest(
            region_id=self._region, page_number=page, page_size=PAGE_SIZE, **flt
        )

    # -- writes --------------------------------------------------------------------------------------------

    def scale_to(self, group_id: str, total_capacity: int, client_token: str) -> str:
        """Set the group's size to `total_capacity` (ScaleWithAdjustment, AdjustmentType TotalCapacity)."""
        req = m.ScaleWithAdjustmentRequest(
            scaling_group_id=group_id,
            adjustment_type="TotalCapacity",
            adjustment_value=int(total_capacity),
            client_token=client_token,
        )
        resp = self._call("ScaleWithAdjustment", lambda: self._client.scale_with_adjustment(req))
        return resp.body.scaling_activity_id

    def modify_scaling_group(
        self,
        group_id: str,
        *,
        min_size: int | None = None,
        max_size: int | None = None,
        desired_capacity: int | None = None,
        default_cooldown_s: int | None = None,
    ) -> None:
        req = m.ModifyScalingGroupRequest(
            scaling_group_id=group_id,
            min_size=min_size,
            max_size=max_size,
            desired_capacity=desired_capacity,
            default_cooldown=default_cooldown_s,
        )
        # Absolute values: repeating the call is harmless, so it is retried like a read.
        self._call("ModifyScalingGroup", lambda: self._client.modify_scaling_group(req))

    def modify_scaling_configuration(
        self,
        config_id: str,
        *,
        instance_types: Sequence[str],
        spot_strategy: str | None = None,
        spot_price_limits: Mapping[str, float] | None = None,
    ) -> None:
        """The configuration's instance types in priority order (and its SpotStrategy, with SpotPriceLimits
        per type for SpotWithPriceLimit): how the service moves a group along its capacity ladder. Absolute
        values, so retried like a read."""
        limits = [
            m.ModifyScalingConfigurationRequestSpotPriceLimits(instance_type=t, price_limit=price)
            for t, price in (spot_price_limits or {}).items()
        ]
        req = m.ModifyScalingConfigurationRequest(
            scaling_configuration_id=config_id,
            instance_types=list(instance_types),
            spot_strategy=spot_strategy,
            spot_price_limits=limits or None,
        )
        self._call("ModifyScalingConfiguration", lambda: self._client.modify_scaling_configuration(req))

    def set_vswitch_order(self, group_id: str, vswitch_ids: Sequence[str]) -> None:
        """The group's vSwitches in priority order (MultiAZPolicy PRIORITY tries them in this order)."""
        req = m.ModifyScalingGroupRequest(scaling_group_id=group_id, v_switch_ids=list(vswitch_ids))
        self._call("ModifyScalingGroup", lambda: self._client.modify_scaling_group(req))

    def create_scheduled_task(
        self,
        group_id: str,
        name: str,
        launch_time: datetime | str,
        recurrence_type: str | None,
        recurrence_value: str | None,
        *,
        min_value: int | None = None,
        max_value: int | None = None,
        desired_capacity: int | None = None,
        recurrence_end_time: datetime | str | None = None,
        enabled: bool = True,
        launch_expiration_s: int | None = None,
        description: str | None = None,
    ) -> str:
        req = m.CreateScheduledTaskRequest(
            **_scheduled_task_fields(
                region=self._region,
                group_id=group_id,
                name=name,
                launch_time=launch_time,
                recurrence_type=recurrence_type,
                recurrence_value=recurrence_value,
                recurrence_end_time=recurrence_end_time,
                min_value=min_value,
                max_value=max_value,
                desired_capacity=desired_capacity,
                enabled=enabled,
                launch_expiration_s=launch_expiration_s,
                description=description,
            )
        )
        # Not idempotent (no ClientToken): a 5xx may hide a created task, so only rejections are retried.
        resp = self._call(
            "CreateScheduledTask", lambda: self._client.create_scheduled_task(req), idempotent=False
        )
        return resp.body.scheduled_task_id

    def modify_scheduled_task(
        self,
        task_id: str,
        *,
        group_id: str | None = None,
        name: str | None = None,
        launch_time: datetime | str | None = None,
        recurrence_type: str | None = None,
        recurrence_value: str | None = None,
        min_value: int | None = None,
        max_value: int | None = None,
        desired_capacity: int | None = None,
        recurrence_end_time: datetime | str | None = None,
        enabled: bool | None = None,
        launch_expiration_s: int | None = None,
        description: str | None = None,
    ) -> None:
        """Change the given fields of a scheduled task; fields left None are not sent (so not changed)."""
        req = m.ModifyScheduledTaskRequest(
            scheduled_task_id=task_id,
            **_scheduled_task_fields(
                region=self._region,
                group_id=group_id,
                name=name,
                launch_time=launch_time,
                recurrence_type=recurrence_type,
                recurrence_value=recurrence_value,
                recurrence_end_time=recurrence_end_time,
                min_value=min_value,
                max_value=max_value,
                desired_capacity=desired_capacity,
                enabled=enabled,
                launch_expiration_s=launch_expiration_s,
                description=description,
            ),
        )
        self._call("ModifyScheduledTask", lambda: self._client.modify_scheduled_task(req))

    def delete_scheduled_task(self, task_id: str) -> None:
        req = m.DeleteScheduledTaskRequest(region_id=self._region, scheduled_task_id=task_id)
        self._call("DeleteScheduledTask", lambda: self._client.delete_scheduled_task(req))

    def enter_standby(self, group_id: str, instance_ids: Sequence[str], client_token: str) -> str:
        ids = _write_ids(instance_ids, "EnterStandby")
        req = m.EnterStandbyRequest(scaling_group_id=group_id, instance_ids=ids, client_token=client_token)
        resp = self._call("EnterStandby", lambda: self._client.enter_standby(req))
        return resp.body.scaling_activity_id

    def exit_standby(self, group_id: str, instance_ids: Sequence[str], client_token: str) -> str:
        ids = _write_ids(instance_ids, "ExitStandby")
        req = m.ExitStandbyRequest(
            region_id=self._region, scaling_group_id=group_id, instance_ids=ids, client_token=client_token
        )
        resp = self._call("ExitStandby", lambda: self._client.exit_standby(req))
        return resp.body.scaling_activity_id

    def remove_instances(
        self,
        group_id: str,
        instance_ids: Sequence[str],
        *,
        decrease_desired_capacity: bool = True,
        client_token: str,
        remove_policy: str | None = None,
    ) -> str:
        ids = _write_ids(instance_ids, "RemoveInstances")
        req = m.RemoveInstancesRequest(
            region_id=self._region,
            scaling_group_id=group_id,
            instance_ids=ids,
            decrease_desired_capacity=decrease_desired_capacity,
            client_token=client_token,
            remove_policy=remove_policy,
        )
        resp = self._call("RemoveInstances", lambda: self._client.remove_instances(req))
        return resp.body.scaling_activity_id

    def set_instances_protection(self, group_id: str, instance_ids: Sequence[str], protected: bool) -> None:
        for chunk in _chunks(list(instance_ids), MAX_INSTANCES_PER_WRITE):
            req = m.SetInstancesProtectionRequest(
                scaling_group_id=group_id, instance_ids=chunk, protected_from_scale_in=bool(protected)
            )
            self._call("SetInstancesProtection", partial(self._client.set_instances_protection, req))

    # -- lifecycle actions (drain on scale-in) ------------------------------------------------------------

    def describe_lifecycle_actions(
        self, activity_id: str, status: str | None = "Pending"
    ) -> list[LifecycleAction]:
        """The lifecycle actions a scaling activity opened (its instances wait in them), ``status`` only."""
        req = m.DescribeLifecycleActionsRequest(
            region_id=self._region,
            scaling_activity_id=activity_id,
            lifecycle_action_status=status,
            max_results=50,
        )
        resp = self._call("DescribeLifecycleActions", lambda: self._client.describe_lifecycle_actions(req))
        return [
            LifecycleAction(
                token=a.lifecycle_action_token,
                hook_id=a.lifecycle_hook_id,
                instance_ids=tuple(a.instance_ids or ()),
                status=a.lifecycle_action_status or "",
            )
            for a in resp.body.lifecycle_actions or ()
        ]

    def complete_lifecycle_action(
        self, hook_id: str, token: str, result: str = "CONTINUE", *, client_token: str | None = None
    ) -> None:
        """End a lifecycle action before its timeout: CONTINUE lets a scale-in remove its instances now."""
        req = m.CompleteLifecycleActionRequest(
            region_id=self._region,
            lifecycle_hook_id=hook_id,
            lifecycle_action_token=token,
            lifecycle_action_result=result,
            client_token=client_token,
        )
        self._call("CompleteLifecycleAction", lambda: self._client.complete_lifecycle_action(req))

    # -- plumbing ------------------------------------------------------------------------------------------

    def _call(self, action: str, fn: Callable[[], T], *, idempotent: bool = True) -> T:
        return call(self._retry, self.product, action, fn, idempotent=idempotent)

    def _pages(
        self,
        action: str,
        make_request: Callable[[int], Any],
        method: Callable[[Any], Any],
        listing: _List,
        limit: int | None = None,
    ) -> list[Any]:
        """Every item of a paged list (or its first ``limit``), walked again once when the walk did not add
        up, and ``IncompleteListing`` when the second walk did not either.

        A page shorter than PageSize ends a walk; when the items seen by then fall short of TotalCount, or
        TotalCount moved between pages (the list shifted under the walk: an instance leaving page 1 moves one
        of page 2 onto it, unseen), or an item came back on two pages (one left and one joined between the
        pages: the count held, one moved onto the next page and another was never seen), what came back is
        part of the list. Taken as the whole, a partial
        instance list reads as a fleet missing instances (or as fewer than it runs): the caller must not
        act on it, so it is an error, not a short answer."""
        first = self._walk(action, make_request, method, listing, limit)
        if first.complete:
            return first.items
        log.debug("%s: %s; listing it again", action, first.describe())
        second = self._walk(action, make_request, method, listing, limit)
        if second.complete:
            return second.items
        raise IncompleteListing(
            "IncompleteListing",
            f"{second.describe()} on two walks running (the first: {first.describe()})",
            action=action,
        )

    def _walk(
        self,
        action: str,
        make_request: Callable[[int], Any],
        method: Callable[[Any], Any],
        listing: _List,
        limit: int | None,
    ) -> _Walk:
        """Walk PageNumber 1, 2, ... until TotalCount items were seen, ``limit`` were, or a page came back
        short."""
        walk = _Walk()
        while True:
            req = make_request(walk.pages + 1)
            resp = self._call(action, partial(_listed, method, req, listing))
            batch = listing.items(resp.body) or []
            walk.items.extend(batch)
            walk.keys.append({listing.key(raw) for raw in batch} - {None})
            walk.pages += 1
            if resp.body.total_count is not None:
                walk.totals.append(int(resp.body.total_count))
            if limit is not None and len(walk.items) >= limit:
                del walk.items[limit:]
                walk.limited = True
                return walk
            size = req.page_size or PAGE_SIZE
            if not batch or len(batch) < size or (walk.totals and len(walk.items) >= walk.totals[-1]):
                return walk


@dataclass
class _Walk:
    """One walk through a paged list: its items and the TotalCount each page answered."""

    items: list[Any] = field(default_factory=list)
    totals: list[int] = field(default_factory=list)
    keys: list[set[Any]] = field(default_factory=list)  # each page's item ids
    pages: int = 0
    limited: bool = False  # stopped at the caller's limit: the rest was not wanted

    @property
    def twice(self) -> list[Any]:
        """The ids listed on more than one page (a row without an id is left to the conversion to refuse).
        One page listing an id twice is no moving list: the service counts such an instance once."""
        counts = Counter(k for page in self.keys for k in page)
        return sorted(k for k, n in counts.items() if n > 1)

    @property
    def complete(self) -> bool:
        if self.twice:
            return False
        if self.limited or not self.totals:
            return True
        return len(set(self.totals)) == 1 and len(self.items) >= self.totals[-1]

    def describe(self) -> str:
        if len(set(self.totals)) > 1:
            counts = "TotalCount moving " + " -> ".join(map(str, self.totals))
        else:
            counts = f"TotalCount {self.totals[-1] if self.totals else '?'}"
        twice = f"; listed twice: {', '.join(map(str, self.twice))}" if self.twice else ""
        return f"{len(self.items)} items in {self.pages} page(s) against {counts}{twice}"


def _listed(method: Callable[[Any], Any], request: Any, listing: _List) -> Any:
    """One page, refused (and so retried) when it carries neither its list nor TotalCount: a body of a
    RequestId alone is no answer, and read as one it is a group without instances."""
    resp = method(request)
    body = getattr(resp, "body", None)
    if body is None:
        return resp
    total = getattr(body, "total_count", None)
    # the SDK reads a missing array as [] (from_map), so the array's absence shows only as an empty one
    if not listing.items(body) and total is None:
        raise MalformedAnswer("MalformedAnswer", f"the answer carries neither {listing.name} nor TotalCount")
    if total is not None:
        try:
            body.total_count = _whole_number(total)
        except ValueError as exc:
            raise MalformedAnswer("MalformedAnswer", f"TotalCount {exc}") from exc
    return resp


def _chunks(values: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _write_ids(instance_ids: Sequence[str], action: str) -> list[str]:
    ids = list(instance_ids)
    if not ids:
        raise ValueError(f"{action}: no instance ids given")
    if len(ids) > MAX_INSTANCES_PER_WRITE:
        # One ClientToken names one activity, so splitting would need invented tokens: the caller decides.
        raise ValueError(
            f"{action}: {len(ids)} instance ids given, ESS accepts at most {MAX_INSTANCES_PER_WRITE}"
        )
    return ids


def _scheduled_task_fields(
    *,
    region: str | None,
    group_id: str | None,
    name: str | None,
    launch_time: datetime | str | None,
    recurrence_type: str | None,
    recurrence_value: str | None,
    recurrence_end_time: datetime | str | None,
    min_value: int | None,
    max_value: int | None,
    desired_capacity: int | None,
    enabled: bool | None,
    launch_expiration_s: int | None,
    description: str | None,
) -> dict[str, Any]:
    """Request fields Create- and ModifyScheduledTask share, in the SDK's names (None: not sent)."""
    return {
        "region_id": region,
        "scaling_group_id": group_id,
        "scheduled_task_name": name,
        "launch_time": _ess_time(launch_time),
        "recurrence_type": recurrence_type,
        "recurrence_value": recurrence_value,
        "recurrence_end_time": _ess_time(recurrence_end_time),
        "min_value": min_value,
        "max_value": max_value,
        "desired_capacity": desired_capacity,
        "task_enabled": enabled,
        "launch_expiration_time": launch_expiration_s,
        "description": description,
    }


def _ess_time(value: datetime | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return format_ess_time(value)


def _int(value: Any, default: int = 0) -> int:
    if value is None or value == "":
        return default
    return _whole_number(value)


def _opt_int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    return _whole_number(value)


def _whole_number(value: Any) -> int:
    """An integer field (a number or its text); anything else raises ValueError naming the value."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a whole number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{value!r} is not a whole number") from None
    if not number.is_integer():
        raise ValueError(f"{value!r} is not a whole number")
    return int(number)


def _id(value: Any, field_name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"an item without {field_name}")
    return value


def _group(g: m.DescribeScalingGroupsResponseBodyScalingGroups) -> ScalingGroup:
    return ScalingGroup(
        group_id=_id(g.scaling_group_id, "ScalingGroupId"),
        name=g.scaling_group_name or "",
        lifecycle_state=g.lifecycle_state or "",
        min_size=_int(g.min_size, ESS_MIN_GROUP_SIZE),
        max_size=_int(g.max_size, ESS_MAX_GROUP_SIZE),
        desired_capacity=_opt_int(g.desired_capacity),
        total_capacity=_int(g.total_capacity),
        active_capacity=_int(g.active_capacity),
        pending_capacity=_int(g.pending_capacity) + _int(g.pending_wait_capacity),
        removing_capacity=_int(g.removing_capacity) + _int(g.removing_wait_capacity),
        standby_capacity=_int(g.standby_capacity),
        protected_capacity=_int(g.protected_capacity),
        stopped_capacity=_int(g.stopped_capacity),
        scaling_policy=g.scaling_policy,
        default_cooldown_s=_int(g.default_cooldown),
        active_configuration_id=g.active_scaling_configuration_id,
        vswitch_ids=tuple(g.v_switch_ids or ()),
    )


def _instance(i: m.DescribeScalingInstancesResponseBodyScalingInstances, group_id: str) -> ScalingInstance:
    return ScalingInstance(
        instance_id=_id(i.instance_id, "InstanceId"),
        group_id=i.scaling_group_id or group_id,
        lifecycle_state=i.lifecycle_state or "",
        health_status=i.health_status,
        creation_type=i.creation_type,
        created_at=parse_time(i.created_time or i.creation_time),
        zone_id=i.zone_id,
        activity_id=i.scaling_activity_id,
        load_balancer_weight=_opt_int(i.load_balancer_weight),
    )


def _activity(a: m.DescribeScalingActivitiesResponseBodyScalingActivities, group_id: str) -> ScalingActivity:
    return ScalingActivity(
        activity_id=_id(a.scaling_activity_id, "ScalingActivityId"),
        group_id=a.scaling_group_id or group_id,
        status_code=a.status_code or "",
        cause=a.cause,
        start_time=parse_time(a.start_time),
        end_time=parse_time(a.end_time),
        total_capacity=_opt_int(a.total_capacity),
        status_message=a.status_message,
        error_code=(a.error_messages[0].code if a.error_messages else None) or a.error_code or None,
    )


def _task(t: m.DescribeScheduledTasksResponseBodyScheduledTasks) -> ScheduledTask:
    return ScheduledTask(
        task_id=t.scheduled_task_id,
        name=t.scheduled_task_name or "",
        group_id=t.scaling_group_id,
        launch_time=parse_time(t.launch_time),
        recurrence_type=t.recurrence_type or None,
        recurrence_value=t.recurrence_value or None,
        recurrence_end_time=parse_time(t.recurrence_end_time),
        min_value=_opt_int(t.min_value),
        max_value=_opt_int(t.max_value),
        desired_capacity=_opt_int(t.desired_capacity),
        enabled=bool(t.task_enabled) if t.task_enabled is not None else True,
        description=t.description or None,
    )
