"""The service's reaction to GPU capacity that does not arrive or is taken back.

Each tick, for each group that declares a capacity ladder (``instance_types``, ``zones``, ``capacity_mix``):

1. judge the activities that finished since the last tick: one that ends ``Warning`` or ``Failed`` for stock
   or quota (``OperationDenied.NoStock``, ``QuotaExceed.*``), or instances Pending for more than twice the
   cold start, is a shortfall;
2. ``policies.capacity.step`` moves the group along its ladder (fall back, or retry an earlier rung whose
   backoff has passed), remembering sold-out (zone, type) pairs;
3. apply the move in the same tick: the scaling configuration's InstanceTypes (the rung's type first) and
   SpotStrategy, the vSwitch order (the rung's zone first), and the count adjusted for the new type's
   capacity;
4. on a spot reclaim notice (ECS system event ``PreemptibleInstanceInterruption``) remove the instance from
   the group without lowering the desired capacity: ESS orders the replacement at once, and the instance
   drains through the group's scale-in lifecycle hook (if any) while it still runs until its termination time.

Each stock-out and each reclaim is a record with a timeline (``capacity_store``), shown by ``/status`` and
``fleet status`` and announced to the notification channels. The ladder position and the sold-out memory live
in the store, so a restart or a new leader resumes them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol, cast

from fleet.cloud.errors import CloudError
from fleet.cloud.types import ScalingActivity, ScalingGroup
from fleet.service import capacity_store as cs
from fleet.service.actuate import client_token
from fleet.service.notify import Announcement
from fleet.service.observe import GroupObservation, Observation
from fleet.service.store import DecisionRecord, Outcome, Store
from policies.capacity import CapacityMemory, Move, MoveKind, Rung, build_ladder, step
from policies.spec import GroupSpec

log = logging.getLogger("fleet.service.capacity")

SPOT_RECLAIM_CODE = "PreemptibleInstanceInterruption"  # ECS system event (CloudMonitor Instance:...)
SHORTFALL_MARKERS = ("NoStock", "QuotaExceed", "sold out")
FAILED_STATUSES = ("Warning", "Failed")


class CapacityEss(Protocol):
    """The ESS calls this module makes (``fleet.cloud.ess.EssAdapter`` has them)."""

    def describe_scaling_activities(
        self, group_id: str, status_code: str | None = None, limit: int = 20
    ) -> list[ScalingActivity]: ...
    def modify_scaling_configuration(
        self, config_id: str, *, instance_types: list[str], spot_strategy: str | None = None
    ) -> None: ...
    def set_vswitch_order(self, group_id: str, vswitch_ids: list[str]) -> None: ...
    def scale_to(self, group_id: str, total_capacity: int, client_token: str) -> str: ...
    def remove_instances(
        self,
        group_id: str,
        instance_ids: list[str],
        *,
        decrease_desired_capacity: bool = True,
        client_token: str,
        remove_policy: str | None = None,
    ) -> str: ...


def capacity_per_instance(instance_type: str) -> float:
    """Decode throughput per instance relative to one unit (``sizing.fallback.relative_capacity``); 1.0 for a
    type the catalog does not know."""
    from sizing.catalog import find_instance
    from sizing.errors import SizingInputError
    from sizing.fallback import relative_capacity

    try:
        return relative_capacity(find_instance(instance_type))
    except (SizingInputError, KeyError, ValueError):
        return 1.0


@dataclass
class CapacityResult:
    moves: list[Move] = field(default_factory=list)
    reclaims: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class CapacityManager:
    def __init__(
        self,
        ess: object,
        store: Store,
        specs: list[GroupSpec],
        *,
        service: str,
        dry_run: bool,
        notify: Callable[[Announcement], None],
        capacity_of: Callable[[str], float] = capacity_per_instance,
    ) -> None:
        self.ess = cast(CapacityEss, ess)
        self.store = store
        self.service = service
        self.dry_run = dry_run
        self.notify = notify
        self.specs = [s for s in specs if watches_capacity(s)]
        self.ladders: dict[str, tuple[Rung, ...]] = {
            s.name: build_ladder(
                s.instance_types,
                s.zones,
                s.capacity_mix,
                {t: capacity_of(t) for t in s.instance_types},
            )
            for s in self.specs
        }

    def tick(
        self,
        observation: Observation,
        targets: dict[str, int],
        now: datetime,
        fence: Callable[[], bool],
        held: Collection[str] = (),
    ) -> CapacityResult:
        """``targets``: each group's capacity as this tick's plan set it (ESS DesiredCapacity). Groups in
        ``held`` (paused by operators, or disabled in ESS) are left alone: nothing is written to them, and a
        reclaim notice or a shortfall is taken up once they are resumed, if it still stands."""
        result = CapacityResult()
        for spec in self.specs:
            g = observation.groups.get(spec.name)
            if g is None or not g.ok or g.group is None or spec.name in held:
                continue
            try:
                self._reclaims(spec, g, g.group, now, fence, result)
                if len(self.ladders[spec.name]) > 1:
                    target = targets.get(spec.name, g.group.desired_capacity or g.group.total_capacity)
                    self._ladder(spec, g, g.group, target, now, fence, result)
            except CloudError as exc:
                log.warning("capacity handling of %s failed: %s", spec.name, exc)
                result.errors.append(f"group {spec.name} capacity: {exc}")
        return result

    # -- the ladder -------------------------------------------------------------------------------------
    def _ladder(
        self,
        spec: GroupSpec,
        g: GroupObservation,
        group: ScalingGroup,
        target: int,
        now: datetime,
        fence: Callable[[], bool],
        result: CapacityResult,
    ) -> None:
        memory = cs.load_memory(self.store, spec.name)
        shortfall, newest = self._shortfall(spec, g, group, memory, now)
        if newest is not None:
            memory = memory.model_copy(update={"last_activity_id": newest})
        memory, move = step(memory, self.ladders[spec.name], shortfall, now, target)
        if move is not None and move.kind != MoveKind.EXHAUSTED:
            if not self.dry_run and not fence():
                return
            self._apply(spec, group, move, target, now)
            result.moves.append(move)
        cs.save_memory(self.store, spec.name, memory, now)
        if move is not None:
            self._record_move(spec, move, now)
        elif memory.rung == 0:
            self._close_stockouts(spec, g, now)

    def _shortfall(
        self,
        spec: GroupSpec,
        g: GroupObservation,
        group: ScalingGroup,
        memory: CapacityMemory,
        now: datetime,
    ) -> tuple[str | None, str | None]:
        """(why capacity is short, or None; the newest finished activity id)."""
        finished = [
            a
            for a in self.ess.describe_scaling_activities(group.group_id, limit=10)
            if a.status_code != "InProgress"
        ]
        finished.sort(key=lambda a: a.end_time or a.start_time or now, reverse=True)
        newest = finished[0].activity_id if finished else None
        for activity in finished:
            if activity.activity_id == memory.last_activity_id:
                break
            text = f"{activity.error_code or ''} {activity.status_message or ''}"
            if activity.status_code in FAILED_STATUSES and any(m in text for m in SHORTFALL_MARKERS):
                code = activity.error_code or "no stock"
                return f"scale-out {activity.activity_id} ended {activity.status_code} ({code})", newest
        stuck_after = timedelta(seconds=2 * spec.cold_start_s)
        settled = memory.moved_at is None or now - memory.moved_at > stuck_after
        stuck = [
            i.instance_id
            for i in g.instances
            if i.lifecycle_state == "Pending"
            and i.created_at is not None
            and now - i.created_at > stuck_after
        ]
        if stuck and settled:
            return f"{len(stuck)} instance(s) Pending for over {int(stuck_after.total_seconds())} s", newest
        return None, newest

    def _apply(self, spec: GroupSpec, group: ScalingGroup, move: Move, target: int, now: datetime) -> None:
        rung = move.to_rung
        types = [rung.instance_type] + [t for t in spec.instance_types if t != rung.instance_type]
        spot = (
            "SpotWithPriceLimit"
            if spec.capacity_mix and spec.capacity_mix.spot_price_limit
            else "SpotAsPriceGo"
        )
        token = client_token(spec.name, "capacity", move.kind.value, rung.label(), now.isoformat())
        outcome, error = Outcome.DRY_RUN if self.dry_run else Outcome.APPLIED, None
        if not self.dry_run:
            try:
                if group.active_configuration_id:
                    self.ess.modify_scaling_configuration(
                        group.active_configuration_id,
                        instance_types=types,
                        spot_strategy=spot if rung.spot else "NoSpot",
                    )
                if rung.vswitch_id and group.vswitch_ids:
                    order = [rung.vswitch_id] + [v for v in group.vswitch_ids if v != rung.vswitch_id]
                    self.ess.set_vswitch_order(group.group_id, order)
                # the count on the new rung, inside max_size: a group already there has nothing to write (ESS
                # would answer IncorrectCapacity.NoChange, and the ladder's step would never be saved)
                size = None if move.target is None else min(move.target, group.max_size)
                if size is not None and size != target:
                    try:
                        self.ess.scale_to(group.group_id, size, token)
                    except CloudError as exc:
                        if exc.code != "IncorrectCapacity.NoChange":  # already that size: nothing to write
                            raise
            except CloudError as exc:
                outcome, error = Outcome.ERROR, str(exc)
                raise
            finally:
                self._audit(spec, move.kind.value, move.reason, now, outcome, token, error, move.target)
        else:
            self._audit(spec, move.kind.value, move.reason, now, outcome, token, None, move.target)

    def _audit(
        self,
        spec: GroupSpec,
        action: str,
        reason: str,
        now: datetime,
        outcome: str,
        token: str,
        error: str | None,
        target: int | None = None,
        instance_id: str | None = None,
    ) -> None:
        self.store.record_decision(
            DecisionRecord(
                service=self.service,
                at=now,
                group_name=spec.name,
                kind="capacity",
                action=action,
                decision_id=f"{spec.name}:capacity:{action}:{now.isoformat()}",
                outcome=outcome,
                reason=reason,
                target=target,
                instance_id=instance_id,
                client_token=token,
                error=error,
                dry_run=self.dry_run,
            )
        )

    def _record_move(self, spec: GroupSpec, move: Move, now: datetime) -> None:
        open_ones = [
            r
            for r in cs.records(self.store, open_only=True)
            if r.group_name == spec.name and r.kind == cs.RecordKind.STOCKOUT
        ]
        if open_ones:
            cs.add_event(self.store, open_ones[0].id, now, move.kind.value, move.reason)
            return
        if move.kind == MoveKind.RETRY:
            return
        rec = cs.CapacityRecord(
            id=f"stockout-{spec.name}-{int(now.timestamp())}",
            service=self.service,
            group_name=spec.name,
            kind=cs.RecordKind.STOCKOUT,
            state=cs.RecordState.OPEN,
            opened_at=now,
            updated_at=now,
            instance_type=move.from_rung.instance_type,
            zone_id=move.from_rung.zone,
            detail=move.reason,
        )
        cs.open_record(self.store, rec, move.kind.value, move.reason)
        self.notify(
            Announcement(
                kind="capacity",
                title=f"{spec.name}: {move.from_rung.label()} sold out",
                text=move.reason,
                severity="critical" if move.kind == MoveKind.EXHAUSTED else "warning",
                group=spec.name,
                incident_id=rec.id,
            )
        )

    def _close_stockouts(self, spec: GroupSpec, g: GroupObservation, now: datetime) -> None:
        if g.count("Pending", "Pending:Wait"):
            return
        for rec in cs.records(self.store, open_only=True):
            if rec.group_name == spec.name and rec.kind == cs.RecordKind.STOCKOUT:
                cs.close_record(self.store, rec.id, now, "back on the primary rung with nothing pending")

    def _ordered(self, record_id: str) -> bool:
        """Whether a reclaim's replacement was ordered (its RemoveInstances went through)."""
        return any(e.kind == "replacement_ordered" for e in self.store.incident_events(record_id))

    # -- spot reclaims ----------------------------------------------------------------------------------
    def _reclaims(
        self,
        spec: GroupSpec,
        g: GroupObservation,
        group: ScalingGroup,
        now: datetime,
        fence: Callable[[], bool],
        result: CapacityResult,
    ) -> None:
        members = {i.instance_id: i for i in g.instances}
        for instance_id, events in g.events.items():
            notice = next((e for e in events if e.code == SPOT_RECLAIM_CODE), None)
            member = members.get(instance_id)
            if notice is None or member is None or member.lifecycle_state.startswith("Removing"):
                continue
            record_id = f"reclaim-{instance_id}"
            when = notice.not_before.isoformat() if notice.not_before else "soon"
            rec = cs.CapacityRecord(
                id=record_id,
                service=self.service,
                group_name=spec.name,
                kind=cs.RecordKind.SPOT_RECLAIM,
                state=cs.RecordState.OPEN,
                opened_at=now,
                updated_at=now,
                instance_id=instance_id,
                zone_id=member.zone_id,
                detail=f"spot instance to be reclaimed at {when}",
            )
            if not cs.open_record(self.store, rec, "notice", rec.detail) and self._ordered(record_id):
                continue  # handled; a notice whose write failed (an ESS error) is tried again each tick
            if not self.dry_run and not fence():
                return
            token = client_token(spec.name, "reclaim", instance_id)
            outcome, error = Outcome.DRY_RUN if self.dry_run else Outcome.APPLIED, None
            try:
                if not self.dry_run:
                    self.ess.remove_instances(
                        group.group_id, [instance_id], decrease_desired_capacity=False, client_token=token
                    )
            except CloudError as exc:
                outcome, error = Outcome.ERROR, str(exc)
                timeline = self.store.incident_events(record_id)
                if not timeline or timeline[-1].kind != "error":  # one event per run of failures
                    cs.add_event(self.store, record_id, now, "error", str(exc))
                raise
            finally:
                self._audit(
                    spec, "reclaim_replace", rec.detail, now, outcome, token, error, instance_id=instance_id
                )
            cs.add_event(
                self.store, record_id, now, "replacement_ordered", "desired capacity kept: ESS adds one"
            )
            cs.add_event(
                self.store, record_id, now, "draining", "removed from the group; it drains until released"
            )
            result.reclaims.append(instance_id)
            self.notify(
                Announcement(
                    kind="capacity",
                    title=f"{spec.name}: spot instance {instance_id} reclaimed",
                    text=f"{rec.detail}; a replacement is ordered and the instance drains",
                    severity="warning",
                    group=spec.name,
                    incident_id=record_id,
                    fields={"instance": instance_id},
                )
            )
        for rec in cs.records(self.store, open_only=True):
            if (
                rec.kind == cs.RecordKind.SPOT_RECLAIM
                and rec.group_name == spec.name
                and rec.instance_id not in members
            ):
                cs.close_record(self.store, rec.id, now, "the reclaimed instance has left the group")


def watches_capacity(spec: GroupSpec) -> bool:
    return bool(spec.instance_types or spec.zones or spec.capacity_mix is not None)
