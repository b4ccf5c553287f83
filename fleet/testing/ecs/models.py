"""ECS state: instances moving through Pending/Starting/Running/Stopping/Stopped on the fake's clock, system
events, and listeners (ESS) told of every status change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleet.testing.core.errors import AliyunError, not_found
from fleet.testing.core.timeutil import iso_s
from fleet.testing.ecs.instance_types import lookup
from fleet.testing.ecs.stock import NO_STOCK_CODE, NO_STOCK_MESSAGE

if TYPE_CHECKING:
    from fleet.testing.cloud import FakeCloud

# Event codes named in the ECS SDK docs (aliyun-api.md section 3).
EVENT_CODES = (
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
    # A spot (preemptible) instance to be reclaimed: CloudMonitor's event
    # "Instance:PreemptibleInstanceInterruption", announced about 5 minutes ahead; the instance is locked
    # with LockReason "Recycling" meanwhile.
    "PreemptibleInstanceInterruption",
)
SPOT_INTERRUPTION_CODE = EVENT_CODES[-1]
SPOT_NOTICE_S = 300.0  # Alibaba's documented advance notice of a preemptible instance's release
CYCLE_STATUSES = ("Scheduled", "Avoided", "Executing", "Executed", "Canceled", "Failed", "Inquiring")
ACTIVE_CYCLE_STATUSES = ("Scheduled", "Executing", "Inquiring")
# A reboot ends the instance's active reboot events: Scheduled ones become Avoided (the user restarted it
# inside the operation window), Executing ones Executed. Inquiring ones wait for the user's answer.
REBOOT_ENDS = {"Scheduled": "Avoided", "Executing": "Executed"}


@dataclass
class Instance:
    instance_id: str
    instance_type: str
    region_id: str
    zone_id: str
    private_ip: str
    created_s: float
    status: str = "Pending"
    image_id: str = "aliyun_3_x64_20G_alibase_20240819.vhd"
    instance_name: str = ""
    stopped_mode: str = "Not-applicable"
    scaling_group_id: str | None = None
    health_override: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    started_s: float | None = None
    vswitch_id: str = "vsw-fake"
    # Preemptible (spot) instances: NoSpot, SpotWithPriceLimit or SpotAsPriceGo, and the bid.
    spot_strategy: str = "NoSpot"
    spot_price_limit: float | None = None
    # An interrupted spot instance is locked for "Recycling" until it is released at termination_s.
    lock_reasons: list[str] = field(default_factory=list)
    termination_s: float | None = None
    generation: int = (
        0  # bumped on every transition: a stale timer sees a different generation and does nothing
    )

    def as_api(self) -> dict[str, Any]:
        itype = lookup(self.instance_type)
        return {
            "InstanceId": self.instance_id,
            "InstanceName": self.instance_name or self.instance_id,
            "HostName": self.instance_id,
            "Status": self.status,
            "InstanceType": self.instance_type,
            "InstanceTypeFamily": itype.family,
            "Cpu": itype.cpu_cores,
            "Memory": int(itype.memory_gib * 1024),
            "GPUAmount": itype.gpu_amount,
            "GPUSpec": itype.gpu_spec,
            "RegionId": self.region_id,
            "ZoneId": self.zone_id,
            "ImageId": self.image_id,
            "InstanceChargeType": "PostPaid",
            "InstanceNetworkType": "vpc",
            "CreationTime": iso_s(self.created_s)[:-4] + "Z" if self.created_s else None,
            "StartTime": iso_s(self.started_s)[:-4] + "Z" if self.started_s else None,
            "StoppedMode": self.stopped_mode,
            "VpcAttributes": {
                "VpcId": "vpc-fake",
                "VSwitchId": self.vswitch_id,
                "PrivateIpAddress": {"IpAddress": [self.private_ip]},
            },
            "OperationLocks": {"LockReason": [{"LockReason": r} for r in self.lock_reasons]},
            "SpotStrategy": self.spot_strategy,
            "SpotPriceLimit": self.spot_price_limit or 0.0,
            "SpotInterruptionBehavior": "Terminate",
            "Tags": {"Tag": [{"TagKey": k, "TagValue": v} for k, v in self.tags.items()]},
        }


@dataclass
class SystemEvent:
    event_id: str
    instance_id: str
    code: str
    cycle_status: str
    not_before_s: float
    created_s: float
    finished_s: float | None = None
    reason: str = ""

    def as_api(self) -> dict[str, Any]:
        return {
            "EventId": self.event_id,
            "InstanceId": self.instance_id,
            "EventType": {"Code": _event_code_number(self.code), "Name": self.code},
            "EventCycleStatus": {
                "Code": CYCLE_STATUSES.index(self.cycle_status) + 1
                if self.cycle_status in CYCLE_STATUSES
                else 0,
                "Name": self.cycle_status,
            },
            "EventPublishTime": iso_s(self.created_s),
            "NotBefore": iso_s(self.not_before_s),
            "EventFinishTime": iso_s(self.finished_s),
            "Reason": self.reason,
            "ImpactLevel": "",
        }


def _event_code_number(code: str) -> int:
    return EVENT_CODES.index(code) + 1 if code in EVENT_CODES else 0


StatusListener = Callable[[Instance, str, float], None]  # (instance, previous status, at)


class EcsBackend:
    """Instances and events. Timing: new and started instances run after ``boot_seconds``; stopping takes
    ``stop_seconds``; a reboot is Stopping (``stop_seconds``) then Starting (``boot_seconds``)."""

    def __init__(self, cloud: FakeCloud) -> None:
        self.cloud = cloud
        self.instances: dict[str, Instance] = {}
        self.events: dict[str, SystemEvent] = {}
        self.deleted: dict[str, Instance] = {}
        self._listeners: list[StatusListener] = []
        self._reclaim_listeners: list[Callable[[Instance, float], None]] = []
        self._ip_counter = 0

    # -- plumbing -------------------------------------------------------------------------------------------
    def add_listener(self, listener: StatusListener) -> None:
        self._listeners.append(listener)

    def add_reclaim_listener(self, listener: Callable[[Instance, float], None]) -> None:
        self._reclaim_listeners.append(listener)

    def reset(self) -> None:
        self.instances.clear()
        self.events.clear()
        self.deleted.clear()
        self._ip_counter = 0

    def _set_status(self, inst: Instance, status: str, at: float) -> None:
        previous = inst.status
        inst.status = status
        inst.generation += 1
        if status == "Running":
            inst.started_s = at
        for listener in self._listeners:
            listener(inst, previous, at)

    def _after(
        self, inst: Instance, delay_s: float, status: str, then: Callable[[float], None] | None = None
    ) -> None:
        self._after_at(inst, self.cloud.now_s() + max(delay_s, 0.0), status, then)

    def get(self, instance_id: str) -> Instance:
        inst = self.instances.get(instance_id)
        if inst is None:
            raise not_found("InvalidInstanceId.NotFound", f"InstanceId {instance_id!r}")
        return inst

    # -- lifecycle -------------------------------------------------------------------------------------------
    def create_instance(
        self,
        instance_type: str,
        *,
        region_id: str | None = None,
        zone_id: str | None = None,
        status: str = "Running",
        boot_s: float | None = None,
        instance_name: str = "",
        image_id: str | None = None,
        tags: dict[str, str] | None = None,
        spot_strategy: str = "NoSpot",
        spot_price_limit: float | None = None,
        vswitch_id: str = "vsw-fake",
    ) -> Instance:
        """A new instance; ``status="Pending"`` boots to Running after ``boot_s`` (default: the cloud's).
        It takes one from the stock of its (zone, type); callers check ``stock.available`` first."""
        now = self.cloud.now_s()
        region_id = region_id or self.cloud.region_id
        self._ip_counter += 1
        ip = f"10.0.{self._ip_counter // 250}.{self._ip_counter % 250 + 2}"
        inst = Instance(
            instance_id=self.cloud.new_id("i-", 20),
            instance_type=instance_type,
            region_id=region_id,
            zone_id=zone_id or f"{region_id}-a",
            private_ip=ip,
            created_s=now,
            status=status,
            instance_name=instance_name,
            tags=dict(tags or {}),
        )
        if image_id:
            inst.image_id = image_id
        inst.spot_strategy = spot_strategy
        inst.spot_price_limit = spot_price_limit
        inst.vswitch_id = vswitch_id
        self.cloud.stock.take(inst.zone_id, instance_type, self.is_spot(inst))
        if status == "Running":
            inst.started_s = now
        self.instances[inst.instance_id] = inst
        if status == "Pending":
            self._after(inst, self.cloud.boot_seconds if boot_s is None else boot_s, "Running")
        return inst

    @staticmethod
    def is_spot(inst: Instance) -> bool:
        return inst.spot_strategy in ("SpotWithPriceLimit", "SpotAsPriceGo")

    def start_instance(self, instance_id: str, boot_s: float | None = None) -> Instance:
        """Start a stopped instance: Running after ``restart_seconds`` (disks kept, no image to pull). One
        stopped in StopCharging mode gave its GPU back and needs stock again: without, ``NoStock``."""
        inst = self.get(instance_id)
        if inst.status != "Stopped":
            raise AliyunError(
                "IncorrectInstanceStatus",
                "The current status of the resource does not support "
                f"this operation (instance {instance_id} is {inst.status}).",
                403,
            )
        if inst.stopped_mode == "StopCharging":
            spot = self.is_spot(inst)
            if not self.cloud.stock.available(inst.zone_id, inst.instance_type, self.cloud.now_s(), spot):
                raise AliyunError(NO_STOCK_CODE, NO_STOCK_MESSAGE, 403)
            self.cloud.stock.take(inst.zone_id, inst.instance_type, spot)
        inst.stopped_mode = "Not-applicable"
        self._set_status(inst, "Starting", self.cloud.now_s())
        self._after(inst, self.cloud.restart_seconds if boot_s is None else boot_s, "Running")
        return inst

    def stop_instance(
        self, instance_id: str, stopped_mode: str = "KeepCharging", force: bool = False
    ) -> Instance:
        inst = self.get(instance_id)
        if inst.status not in ("Running", "Starting", "Pending"):
            raise AliyunError(
                "IncorrectInstanceStatus",
                "The current status of the resource does not support "
                f"this operation (instance {instance_id} is {inst.status}).",
                403,
            )
        self._set_status(inst, "Stopping", self.cloud.now_s())

        def stopped(at: float) -> None:
            inst.stopped_mode = stopped_mode
            if stopped_mode == "StopCharging":  # the GPU goes back to the pool until the next start
                self.cloud.stock.give_back(inst.zone_id, inst.instance_type, self.is_spot(inst))

        self._after(inst, 0.0 if force else self.cloud.stop_seconds, "Stopped", stopped)
        return inst

    def reboot_instance(self, instance_id: str, force: bool = False) -> Instance:
        inst = self.get(instance_id)
        if inst.status != "Running":
            raise AliyunError(
                "IncorrectInstanceStatus",
                "The current status of the resource does not support "
                f"this operation (instance {instance_id} is {inst.status}).",
                403,
            )
        self._set_status(inst, "Stopping", self.cloud.now_s())
        boot_s = self.cloud.boot_seconds

        def starting(at: float) -> None:
            self._after_at(inst, at + boot_s, "Running", lambda _: self._reboot_events_done(inst))

        self._after(inst, 0.0 if force else self.cloud.stop_seconds, "Starting", starting)
        return inst

    def _reboot_events_done(self, inst: Instance) -> None:
        """The instance is back from a reboot: what its active ``*.Reboot`` events asked for has happened. One
        still Scheduled was avoided (the user rebooted inside the operation window), one Executing is done."""
        for event in self.events.values():
            if event.instance_id == inst.instance_id and event.code.endswith(".Reboot"):
                after = REBOOT_ENDS.get(event.cycle_status)
                if after is not None:
                    self.set_event_status(event.event_id, after)

    def _after_at(
        self, inst: Instance, due_s: float, status: str, then: Callable[[float], None] | None = None
    ) -> None:
        """``status`` at ``due_s`` (then ``then``), unless the instance was released or moved on meanwhile."""
        generation_expected = inst.generation

        def fire(at: float) -> None:
            if self.instances.get(inst.instance_id) is inst and inst.generation == generation_expected:
                self._set_status(inst, status, at)
                if then is not None:
                    then(at)

        self.cloud.timers.schedule(due_s, fire, f"ecs {inst.instance_id} -> {status}")

    def delete_instance(self, instance_id: str, force: bool = False) -> None:
        inst = self.get(instance_id)
        if inst.status not in ("Stopped", "Pending") and not force:
            raise AliyunError(
                "IncorrectInstanceStatus",
                "The current status of the resource does not support "
                f"this operation (instance {instance_id} is {inst.status}; use Force).",
                403,
            )
        self.release(instance_id)

    def release(self, instance_id: str) -> None:
        """Delete without status checks (ESS releasing its own instances)."""
        inst = self.instances.pop(instance_id, None)
        if inst is None:
            return
        self.deleted[instance_id] = inst
        if inst.stopped_mode != "StopCharging":
            self.cloud.stock.give_back(inst.zone_id, inst.instance_type, self.is_spot(inst))
        previous = inst.status
        inst.status = "Deleted"
        inst.generation += 1
        for listener in self._listeners:
            listener(inst, previous, self.cloud.now_s())

    # -- events and health ----------------------------------------------------------------------------------
    def add_system_event(
        self,
        instance_id: str,
        code: str,
        cycle_status: str = "Executing",
        not_before_s: float | None = None,
        reason: str = "",
    ) -> SystemEvent:
        self.get(instance_id)
        if cycle_status not in CYCLE_STATUSES:
            raise ValueError(f"unknown event cycle status {cycle_status!r}; expected one of {CYCLE_STATUSES}")
        now = self.cloud.now_s()
        event = SystemEvent(
            self.cloud.new_id("e-", 20),
            instance_id,
            code,
            cycle_status,
            now if not_before_s is None else not_before_s,
            now,
            reason=reason or code,
        )
        if cycle_status in ("Executed", "Canceled", "Failed", "Avoided"):
            event.finished_s = now
        self.events[event.event_id] = event
        return event

    def set_event_status(self, event_id: str, cycle_status: str) -> SystemEvent:
        event = self.events[event_id]
        event.cycle_status = cycle_status
        if cycle_status not in ACTIVE_CYCLE_STATUSES:
            event.finished_s = self.cloud.now_s()
        return event

    def health_status(self, inst: Instance) -> str:
        """Ok, or what ECS reports: Initializing while booting, NotApplicable when stopped, Impaired/Warning
        under an executing failure/maintenance event; ``health_override`` (tests) wins."""
        if inst.health_override:
            return inst.health_override
        if inst.status in ("Pending", "Starting"):
            return "Initializing"
        if inst.status in ("Stopped", "Stopping"):
            return "NotApplicable"
        for event in self.events.values():
            if event.instance_id == inst.instance_id and event.cycle_status == "Executing":
                return "Impaired" if "Failure" in event.code else "Maintaining"
        return "Ok"

    def reclaim_spot(self, instance_id: str, notice_s: float = SPOT_NOTICE_S) -> SystemEvent:
        """Interrupt a spot instance: lock it (``Recycling``), set the metadata termination time, announce the
        system event now and release the instance ``notice_s`` later."""
        inst = self.get(instance_id)
        if not self.is_spot(inst):
            raise ValueError(f"instance {instance_id} is not a spot instance ({inst.spot_strategy})")
        now = self.cloud.now_s()
        inst.lock_reasons = ["Recycling"]
        inst.termination_s = now + notice_s
        event = self.add_system_event(
            instance_id,
            SPOT_INTERRUPTION_CODE,
            "Scheduled",
            inst.termination_s,
            "The preemptible instance is to be released: the market price or the stock changed.",
        )

        def release(at: float) -> None:
            if self.instances.get(instance_id) is inst:
                self.set_event_status(event.event_id, "Executed")
                self.release(instance_id)

        self.cloud.timers.schedule(inst.termination_s, release, f"ecs reclaim {instance_id}")
        for listener in self._reclaim_listeners:
            listener(inst, now)
        return event

    def termination_time(self, instance_id: str) -> str | None:
        """The metadata item ``instance/spot/termination-time`` (UTC, ``2015-01-05T18:02:00Z``), or None where
        the metadata service answers 404 (not interrupted)."""
        inst = self.instances.get(instance_id) or self.deleted.get(instance_id)
        if inst is None or inst.termination_s is None:
            return None
        return iso_s(inst.termination_s)

    def events_for(self, instance_id: str) -> list[SystemEvent]:
        return [e for e in self.events.values() if e.instance_id == instance_id]

    def state(self) -> dict[str, Any]:
        return {
            "instances": {
                iid: {
                    "status": i.status,
                    "instance_type": i.instance_type,
                    "zone_id": i.zone_id,
                    "scaling_group_id": i.scaling_group_id,
                    "private_ip": i.private_ip,
                    "health": self.health_status(i),
                }
                for iid, i in self.instances.items()
            },
            "events": {
                eid: {
                    "instance_id": e.instance_id,
                    "code": e.code,
                    "cycle_status": e.cycle_status,
                    "not_before": iso_s(e.not_before_s),
                }
                for eid, e in self.events.items()
            },
        }
