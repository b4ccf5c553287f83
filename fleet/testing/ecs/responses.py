"""ECS request handlers: wrapped lists (``Instances.Instance``), JSON-string ``InstanceIds``,
MaxResults/NextToken and PageNumber/PageSize pagination, DryRun."""

from __future__ import annotations

from typing import Any

from fleet.testing.core.errors import AliyunError, invalid
from fleet.testing.core.responses import BaseResponse, page_bounds
from fleet.testing.ecs.instance_types import INSTANCE_TYPES
from fleet.testing.ecs.models import ACTIVE_CYCLE_STATUSES, EcsBackend, Instance, SystemEvent

STATUS_CODES = {"Pending": 0, "Running": 1, "Starting": 2, "Stopping": 3, "Stopped": 4}
HEALTH_CODES = {
    "Ok": 0,
    "Impaired": 1,
    "Initializing": 2,
    "InsufficientData": 3,
    "Maintaining": 4,
    "Warning": 5,
    "NotApplicable": 64,
}
MAX_IDS = 100


class EcsResponse(BaseResponse):
    ACTIONS = frozenset(
        {
            "DescribeInstances",
            "DescribeInstanceTypes",
            "DescribeInstancesFullStatus",
            "DescribeInstanceHistoryEvents",
            "RebootInstance",
            "StartInstance",
            "StopInstance",
            "DeleteInstance",
        }
    )

    @property
    def ecs(self) -> EcsBackend:
        return self.cloud.ecs

    def _dry_run(self) -> None:
        if self.params.bool("DryRun", False):
            raise AliyunError(
                "DryRunOperation", "Request validation has been passed with DryRun flag set.", 400
            )

    def _paginate(
        self, items: list[Any], default_size: int = 10, max_size: int = 100
    ) -> tuple[list[Any], dict[str, Any]]:
        """MaxResults/NextToken when either is given, else PageNumber/PageSize."""
        p = self.params
        if "MaxResults" in p or "NextToken" in p:
            size = p.int("MaxResults", default_size)
            if not 1 <= size <= max_size:
                raise invalid(f"MaxResults must be within 1-{max_size}.")
            token = p.str("NextToken")
            try:
                offset = int(token.removeprefix("fake-")) if token else 0
            except ValueError:
                raise invalid(f"NextToken {token!r} is not valid.") from None
            chunk = items[offset : offset + size]
            next_token = f"fake-{offset + size}" if offset + size < len(items) else ""
            return chunk, {"TotalCount": len(items), "NextToken": next_token, "MaxResults": size}
        number, size = page_bounds(p, default_size, max_size)
        chunk = items[(number - 1) * size : number * size]
        return chunk, {"TotalCount": len(items), "PageNumber": number, "PageSize": size, "NextToken": ""}

    def _instances_by_ids(self, ids: list[str]) -> list[Instance]:
        if len(ids) > MAX_IDS:
            raise invalid(f"At most {MAX_IDS} instance ids per call.")
        return [self.ecs.instances[i] for i in ids if i in self.ecs.instances]

    # ---- describe ------------------------------------------------------------------------------------------
    def describe_instances(self) -> dict[str, Any]:
        p = self.params
        self._dry_run()
        ids = p.json_list("InstanceIds")
        items = self._instances_by_ids([str(i) for i in ids]) if ids else list(self.ecs.instances.values())
        region = p.str("RegionId")
        if region:
            items = [i for i in items if i.region_id == region]
        for key, attr in (
            ("Status", "status"),
            ("InstanceType", "instance_type"),
            ("ZoneId", "zone_id"),
            ("InstanceName", "instance_name"),
        ):
            value = p.str(key)
            if value:
                items = [i for i in items if getattr(i, attr) == value]
        if p.str("InstanceTypeFamily"):
            family = p.str("InstanceTypeFamily")
            items = [i for i in items if i.as_api()["InstanceTypeFamily"] == family]
        for tag in p.objects("Tag"):
            tag_key, tag_value = tag.get("Key"), tag.get("Value")
            items = [
                i for i in items if tag_key in i.tags and (tag_value is None or i.tags[tag_key] == tag_value)
            ]
        chunk, paging = self._paginate(items)
        return {"Instances": {"Instance": [i.as_api() for i in chunk]}, **paging}

    def describe_instance_types(self) -> dict[str, Any]:
        p = self.params
        wanted = p.list("InstanceTypes")
        if len(wanted) > 10:
            raise invalid("InstanceTypes may list at most 10 types.")
        types = list(INSTANCE_TYPES.values())
        if wanted:
            types = [t for t in types if t.type_id in set(wanted)]
        family = p.str("InstanceTypeFamily")
        if family:
            types = [t for t in types if t.family == family]
        families = p.list("InstanceTypeFamilies")
        if families:
            types = [t for t in types if t.family in set(families)]
        spec = p.str("GPUSpec")
        if spec:  # fuzzy, as documented
            types = [t for t in types if spec.lower() in t.gpu_spec.lower()]
        specs = p.list("GpuSpecs")
        if specs:
            types = [t for t in types if any(s.lower() in t.gpu_spec.lower() for s in specs)]
        low, high = p.int("MinimumGPUAmount"), p.int("MaximumGPUAmount")
        if low is not None:
            types = [t for t in types if t.gpu_amount >= low]
        if high is not None:
            types = [t for t in types if t.gpu_amount <= high]
        size = p.int("MaxResults", 1600)
        if not 1 <= size <= 1600:
            raise invalid("MaxResults must be within 1-1600.")
        token = p.str("NextToken")
        offset = int(token.removeprefix("fake-")) if token and token.removeprefix("fake-").isdigit() else 0
        chunk = types[offset : offset + size]
        next_token = f"fake-{offset + size}" if offset + size < len(types) else ""
        return {"InstanceTypes": {"InstanceType": [t.as_api() for t in chunk]}, "NextToken": next_token}

    def _event_api(self, event: SystemEvent) -> dict[str, Any]:
        return event.as_api()

    def describe_instances_full_status(self) -> dict[str, Any]:
        p = self.params
        ids = p.list("InstanceId")
        items = self._instances_by_ids(ids) if ids else list(self.ecs.instances.values())
        if p.str("Status"):
            items = [i for i in items if i.status == p.str("Status")]
        if p.str("HealthStatus"):
            items = [i for i in items if self.ecs.health_status(i) == p.str("HealthStatus")]
        event_types = set(p.list("InstanceEventType")) | (
            {p.req("EventType")} if p.str("EventType") else set()
        )
        rows = []
        for inst in items:
            events = [
                e for e in self.ecs.events_for(inst.instance_id) if e.cycle_status in ACTIVE_CYCLE_STATUSES
            ]
            if event_types:
                events = [e for e in events if e.code in event_types]
                if not events:
                    continue
            health = self.ecs.health_status(inst)
            rows.append(
                {
                    "InstanceId": inst.instance_id,
                    "Status": {"Code": STATUS_CODES.get(inst.status, -1), "Name": inst.status},
                    "HealthStatus": {"Code": HEALTH_CODES.get(health, -1), "Name": health},
                    "ScheduledSystemEventSet": {
                        "ScheduledSystemEventType": [
                            {
                                k: v
                                for k, v in e.as_api().items()
                                if k not in ("InstanceId", "EventFinishTime")
                            }
                            for e in events
                        ]
                    },
                }
            )
        chunk, paging = self._paginate(rows)
        paging.pop("NextToken", None)
        return {"InstanceFullStatusSet": {"InstanceFullStatusType": chunk}, **paging}

    def describe_instance_history_events(self) -> dict[str, Any]:
        p = self.params
        events = list(self.ecs.events.values())
        instance_id = p.str("InstanceId") or p.str("ResourceId")
        if instance_id:
            events = [e for e in events if e.instance_id == instance_id]
        event_ids = set(p.list("EventId"))
        if event_ids:
            events = [e for e in events if e.event_id in event_ids]
        codes = set(p.list("InstanceEventType")) | ({p.req("EventType")} if p.str("EventType") else set())
        if codes:
            events = [e for e in events if e.code in codes]
        statuses = set(p.list("InstanceEventCycleStatus")) | (
            {p.req("EventCycleStatus")} if p.str("EventCycleStatus") else set()
        )
        if statuses:
            events = [e for e in events if e.cycle_status in statuses]
        not_before = p.nested("NotBefore")
        if not_before.get("Start"):
            start = p.time_s("NotBefore.Start") or 0.0
            events = [e for e in events if e.not_before_s >= start]
        if not_before.get("End"):
            end = p.time_s("NotBefore.End") or 0.0
            events = [e for e in events if e.not_before_s <= end]
        events.sort(key=lambda e: e.created_s, reverse=True)
        chunk, paging = self._paginate(events)
        return {"InstanceSystemEventSet": {"InstanceSystemEventType": [e.as_api() for e in chunk]}, **paging}

    # ---- actions -------------------------------------------------------------------------------------------
    def reboot_instance(self) -> dict[str, Any]:
        p = self.params
        inst = self.ecs.get(p.req("InstanceId"))
        self._dry_run()
        self.ecs.reboot_instance(inst.instance_id, force=bool(p.bool("ForceStop", False)))
        return {}

    def start_instance(self) -> dict[str, Any]:
        inst = self.ecs.get(self.params.req("InstanceId"))
        self._dry_run()
        self.ecs.start_instance(inst.instance_id)
        return {}

    def stop_instance(self) -> dict[str, Any]:
        p = self.params
        inst = self.ecs.get(p.req("InstanceId"))
        mode = p.str("StoppedMode", "KeepCharging") or "KeepCharging"
        if mode not in ("KeepCharging", "StopCharging"):
            raise invalid(f"StoppedMode {mode!r} is not one of KeepCharging, StopCharging.")
        self._dry_run()
        self.ecs.stop_instance(inst.instance_id, stopped_mode=mode, force=bool(p.bool("ForceStop", False)))
        return {}

    def delete_instance(self) -> dict[str, Any]:
        p = self.params
        inst = self.ecs.get(p.req("InstanceId"))
        self._dry_run()
        self.ecs.delete_instance(inst.instance_id, force=bool(p.bool("Force", False)))
        return {}
