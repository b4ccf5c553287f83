"""The service's reaction to GPU capacity that does not arrive or is taken back.

Each tick, for each group that declares a capacity ladder (``instance_types``, ``zones``, ``capacity_mix``):

1. judge the activities that finished since the last tick: one that ends ``Warning`` or ``Failed`` for stock
   or quota (``OperationDenied.NoStock``, ``QuotaExceed.*``), or instances Pending for more than twice the
   cold start, is a shortfall;
2. ``policies.capacity.step`` moves the group along its ladder (fall back, or retry an earlier rung whose
   backoff has passed), remembering sold-out (zone, type) pairs;
3. apply the move in the same tick, before the plan is written (``fall_back``): the scaling configuration's
   InstanceTypes (the rung's type first) and SpotStrategy, and the vSwitch order (the rung's zone first); the
   count the new rung needs (the part still missing adjusted for the new type's capacity per instance,
   ``policies.capacity.fallback_count``) goes back to the loop, which folds it into the plan: the tick's one
   capacity write carries it, recorded with its decision;
4. after the plan is written (``reclaims``), on a spot reclaim notice (ECS system event
   ``PreemptibleInstanceInterruption``) remove the instance from the group without lowering the desired
   capacity: ESS orders the replacement at once, and the instance drains through the group's scale-in
   lifecycle hook (if any) while it still runs until its termination time.

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
from policies.capacity import CapacityMemory, Move, MoveKind, Rung, build_ladder, reconcile, step
from policies.spec import GroupSpec

log = logging.getLogger("fleet.service.capacity")

SPOT_RECLAIM_CODE = "PreemptibleInstanceInterruption"  # ECS system event (CloudMonitor Instance:...)
SHORTFALL_MARKERS = ("NoStock", "QuotaExceed", "sold out")
# ESS's own limits (``QuotaExceeded.ScalingInstance``: the instances scaling groups may hold): no other
# instance type, zone or market changes them, so they are no shortfall the ladder answers (ECS's per-type
# ``QuotaExceed.*`` quotas are: another type's quota may have room)
ESS_QUOTA_MARKER = "QuotaExceeded."
FAILED_STATUSES = ("Warning", "Failed")


class CapacityEss(Protocol):
    """The ESS calls this module makes (``fleet.cloud.ess.EssAdapter`` has them)."""

    def describe_scaling_activities(
        self, group_id: str, status_code: str | None = None, limit: int = 20
    ) -> list[ScalingActivity]: ...
    def modify_scaling_configuration(
        self,
        config_id: str,
        *,
        instance_types: list[str],
        spot_strategy: str | None = None,
        spot_price_limits: dict[str, float] | None = None,
    ) -> None: ...
    def set_vswitch_order(self, group_id: str, vswitch_ids: list[str]) -> None: ...
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
    # per group, the count a move needs on its new rung where it differs from the plan's target, and why:
    # the loop folds it into this tick's plan, whose one capacity write then carries it
    counts: dict[str, tuple[int, str]] = field(default_factory=dict)
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
        # the capacity per instance each group's plan counts in: its capacity model's type (predictive), or
        # its first instance type
        self.units: dict[str, float] = {s.name: _unit(s, capacity_of) for s in self.specs}
        # groups whose stored ladder position was checked against the ladder this configuration declares
        self._reconciled: set[str] = set()

    def fall_back(
        self,
        observation: Observation,
        targets: dict[str, int],
        now: datetime,
        fence: Callable[[], bool],
        held: Collection[str] = (),
        *,
        written: Collection[str] | None = None,
    ) -> CapacityResult:
        """Move each group along its ladder: its scaling configuration's type order and spot strategy, and
        its vSwitch order, are written at once. Called twice a tick. Before the plan is written: ``counts``
        says the count the new rung needs (``policies.capacity.fallback_count``), which the loop folds into
        the plan, so that the tick makes one capacity write, recorded with the decision that makes it. After
        the plan is written (``written``: the groups whose capacity it raised; the others have no new
        activity to judge, and are not read again): a shortfall of that write seen at once (ESS refusing a
        type it has no stock of) moves the group in the same tick, and its count goes into the next tick's.
        ``targets``: each group's capacity as this tick's plan sets it (ESS DesiredCapacity). Groups in
        ``held`` (paused by operators, or disabled in ESS) are left alone: nothing is written to them, and a
        shortfall is taken up once they are resumed, if it still stands."""
        result = CapacityResult()
        for spec, g, group in self._groups(observation, held):
            if spec.name not in self._reconciled:
                try:
                    self._reconcile(spec, group, now, fence, result)
                except CloudError as exc:
                    log.warning("capacity handling of %s failed: %s", spec.name, exc)
                    result.errors.append(f"group {spec.name} capacity: {exc}")
                    continue
            if len(self.ladders[spec.name]) <= 1 or (written is not None and spec.name not in written):
                continue
            target = targets.get(spec.name, group.desired_capacity or group.total_capacity)
            try:
                self._ladder(spec, g, group, target, now, fence, result, fold=written is None)
            except CloudError as exc:
                log.warning("capacity handling of %s failed: %s", spec.name, exc)
                result.errors.append(f"group {spec.name} capacity: {exc}")
        return result

    def reclaims(
        self, observation: Observation, now: datetime, fence: Callable[[], bool], held: Collection[str] = ()
    ) -> CapacityResult:
        """After this tick's plan is written: each spot reclaim notice gets its replacement and its record
        (groups in ``held`` are taken up once resumed, if the notice still stands)."""
        result = CapacityResult()
        for spec, g, group in self._groups(observation, held):
            try:
                self._reclaims(spec, g, group, now, fence, result)
            except CloudError as exc:
                log.warning("capacity handling of %s failed: %s", spec.name, exc)
                result.errors.append(f"group {spec.name} capacity: {exc}")
        return result

    def _groups(
        self, observation: Observation, held: Collection[str]
    ) -> list[tuple[GroupSpec, GroupObservation, ScalingGroup]]:
        out = []
        for spec in self.specs:
            g = observation.groups.get(spec.name)
            if g is not None and g.ok and g.group is not None and spec.name not in held:
                out.append((spec, g, g.group))
        return out

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
        *,
        fold: bool,
    ) -> None:
        memory = cs.load_memory(self.store, spec.name)
        shortfall, newest, quota = self._shortfall(spec, g, group, memory, now)
        if newest is not None and newest != memory.last_activity_id:  # activities judged now
            self._quota_refusal(spec, memory, quota)
            memory = memory.model_copy(update={"last_activity_id": newest, "quota_refused": quota})
        pending, extra = memory.unfolded, memory.unfolded_extra
        unit = self.units[spec.name]
        # held: what serves or is on its way; ESS's TotalCapacity also counts the Stopped instances of
        # economical mode (a start that fails for stock releases them) and those leaving the group
        held = max(0, group.total_capacity - group.stopped_capacity - group.removing_capacity)
        memory, move = step(memory, self.ladders[spec.name], shortfall, now, target, held, unit)
        if move is not None and move.kind != MoveKind.EXHAUSTED:
            if not self.dry_run and not fence():
                return
            self._apply(spec, group, move, now)
            result.moves.append(move)
            # The instances the new rung needs beyond the plan's count: the part still missing, adjusted
            # (``fallback_count``), counted now, before ESS fills the group with the new type. Only more:
            # the plan counts instances of its capacity model's type and orders the rest of a faster
            # type's shortfall itself (a smaller count written now would be written back over at once),
            # while a slower type's extra instances hold as its last target.
            pending, extra = move, max(0, (move.target or target) - target)
        if pending is not None and fold:
            # while the plan still wants what it wanted when the move was made
            wanted_then = (pending.target or 0) - extra
            size = min(target + extra if target >= wanted_then else target, group.max_size)
            if size > target:
                result.counts[spec.name] = (size, pending.reason)
            pending, extra = None, 0
        memory = memory.model_copy(update={"unfolded": pending, "unfolded_extra": extra})
        cs.save_memory(self.store, spec.name, memory, now)
        if move is not None:
            self._record_move(spec, move, now)
        elif memory.rung == 0 and not memory.is_sold_out(self.ladders[spec.name][0], now):
            # back on the primary rung, and it is not the rung every other one fell back to: a group that
            # stays on it with the whole ladder sold out has no new failure to judge between ESS's retries
            self._close_stockouts(spec, g, now)

    def _reconcile(
        self,
        spec: GroupSpec,
        group: ScalingGroup,
        now: datetime,
        fence: Callable[[], bool],
        result: CapacityResult,
    ) -> None:
        """Once per configuration: the stored position on the ladder against the ladder fleet.yaml declares
        now (``policies.capacity.reconcile``); a rung the configuration dropped is left for its first rung,
        written to the scaling configuration, even where the ladder is now that one rung."""
        memory = cs.load_memory(self.store, spec.name)
        reconciled, move = reconcile(memory, self.ladders[spec.name], now)
        if move is not None:
            if not self.dry_run and not fence():
                return  # not ours to write: the next tick checks again
            self._apply(spec, group, move, now)
            result.moves.append(move)
            self._record_move(spec, move, now)
        if reconciled != memory:
            cs.save_memory(self.store, spec.name, reconciled, now)
        self._reconciled.add(spec.name)

    def _shortfall(
        self,
        spec: GroupSpec,
        g: GroupObservation,
        group: ScalingGroup,
        memory: CapacityMemory,
        now: datetime,
    ) -> tuple[str | None, str | None, str | None]:
        """(why capacity is short, or None; the newest finished activity id; the ESS quota that refused the
        newest of the activities judged now, or None)."""
        finished = [
            a
            for a in self.ess.describe_scaling_activities(group.group_id, limit=10)
            if a.status_code != "InProgress"
        ]
        finished.sort(key=lambda a: a.end_time or a.start_time or now, reverse=True)
        newest = finished[0].activity_id if finished else None
        quota: str | None = None
        for n, activity in enumerate(finished):
            if activity.activity_id == memory.last_activity_id:
                break
            text = f"{activity.error_code or ''} {activity.status_message or ''}"
            if activity.status_code not in FAILED_STATUSES:
                continue
            if ESS_QUOTA_MARKER in text:
                if n == 0:
                    quota = activity.error_code or text.strip()
                continue
            if any(m in text for m in SHORTFALL_MARKERS):
                why = f"scale-out {activity.activity_id} ended {activity.status_code}"
                return f"{why} ({activity.error_code or 'no stock'})", newest, quota
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
            waited = int(stuck_after.total_seconds())
            return f"{len(stuck)} instance(s) Pending for over {waited} s", newest, quota
        return None, newest, quota

    def _quota_refusal(self, spec: GroupSpec, memory: CapacityMemory, quota: str | None) -> None:
        """Say once, when a run of scale-outs refused by an ESS quota starts: no fallback answers it, a quota
        raise in Quota Center does (the ladder stays where it is)."""
        if quota is None or memory.quota_refused is not None:
            return
        log.warning("%s: scale-out refused by the ESS quota %s; no fallback changes it", spec.name, quota)
        self.notify(
            Announcement(
                kind="capacity",
                title=f"{spec.name}: scale-out refused by an ESS quota ({quota})",
                text="no other instance type, zone or market changes an ESS quota, so the group stays where "
                "it is; raise the quota in Quota Center",
                severity="critical",
                group=spec.name,
                fields={"quota": quota},
            )
        )

    def _apply(self, spec: GroupSpec, group: ScalingGroup, move: Move, now: datetime) -> None:
        rung = move.to_rung
        types = [rung.instance_type] + [t for t in spec.instance_types if t != rung.instance_type]
        limit = spec.capacity_mix.spot_price_limit if spec.capacity_mix else None
        spot = "SpotWithPriceLimit" if limit else "SpotAsPriceGo"
        # SpotWithPriceLimit needs a limit per type (MissingParameter.SpotPriceLimits otherwise): the
        # config's, for every type, as the Terraform module sets them; a configuration made without them
        # (or before the limit was changed) would refuse every move to a spot rung
        limits = {t: limit for t in types} if rung.spot and limit else None
        token = client_token(spec.name, "capacity", move.kind.value, rung.label(), now.isoformat())
        outcome, error = Outcome.DRY_RUN if self.dry_run else Outcome.APPLIED, None
        if not self.dry_run:
            try:
                if group.active_configuration_id:
                    self.ess.modify_scaling_configuration(
                        group.active_configuration_id,
                        instance_types=types,
                        spot_strategy=spot if rung.spot else "NoSpot",
                        spot_price_limits=limits,
                    )
                if rung.vswitch_id and group.vswitch_ids:
                    order = [rung.vswitch_id] + [v for v in group.vswitch_ids if v != rung.vswitch_id]
                    self.ess.set_vswitch_order(group.group_id, order)
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
            record_id = open_ones[0].id
            timeline = self.store.incident_events(record_id)
            again = move.kind == MoveKind.EXHAUSTED and bool(timeline) and timeline[-1].kind == move.kind
            if not again:  # one event per run of exhaustion: ESS retries what stock refused every minute
                cs.add_event(self.store, record_id, now, move.kind.value, move.reason)
            if move.kind == MoveKind.EXHAUSTED and not again:
                self._announce(spec, move, record_id)
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
        self._announce(spec, move, rec.id)

    def _announce(self, spec: GroupSpec, move: Move, record_id: str) -> None:
        exhausted = move.kind == MoveKind.EXHAUSTED
        self.notify(
            Announcement(
                kind="capacity",
                title=f"{spec.name}: "
                + (
                    "every rung of the ladder sold out" if exhausted else f"{move.from_rung.label()} sold out"
                ),
                text=move.reason,
                severity="critical" if exhausted else "warning",
                group=spec.name,
                incident_id=record_id,
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
            if notice is None or member is None:
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
            if member.lifecycle_state.startswith("Removing"):
                # removed before this service acted: ESS's own SpotInstanceRemedy (which the Terraform module
                # turns on) or a person; recorded and announced all the same, nothing to write
                if cs.open_record(self.store, rec, "notice", rec.detail):
                    what = "ESS removed it (SpotInstanceRemedy) and orders its replacement itself"
                    cs.add_event(self.store, record_id, now, "removed_by_ess", what)
                    result.reclaims.append(instance_id)
                    self._announce_reclaim(spec, rec, what)
                continue
            if not cs.open_record(self.store, rec, "notice", rec.detail) and self._ordered(record_id):
                continue  # handled; a notice whose write failed (an ESS error) is tried again each tick
            if not self.dry_run and not fence():
                return
            token = client_token(spec.name, "reclaim", instance_id)
            outcome, error = Outcome.DRY_RUN if self.dry_run else Outcome.APPLIED, None
            # An isolated instance (Standby) has its replacement already: the plan counts it inside the
            # desired capacity beside the surge made for it, so it leaves with its place. Keeping desired
            # would launch a second replacement that the next plan scales in at random.
            isolated = member.lifecycle_state == "Standby"
            try:
                if not self.dry_run:
                    self.ess.remove_instances(
                        group.group_id, [instance_id], decrease_desired_capacity=isolated, client_token=token
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
                self.store,
                record_id,
                now,
                "replacement_ordered",
                "isolated in Standby: its replacement was surged already, desired capacity lowered by one"
                if isolated
                else "desired capacity kept: ESS adds one",
            )
            cs.add_event(
                self.store, record_id, now, "draining", "removed from the group; it drains until released"
            )
            result.reclaims.append(instance_id)
            self._announce_reclaim(spec, rec, "a replacement is ordered and the instance drains")
        for rec in cs.records(self.store, open_only=True):
            if (
                rec.kind == cs.RecordKind.SPOT_RECLAIM
                and rec.group_name == spec.name
                and rec.instance_id not in members
            ):
                cs.close_record(self.store, rec.id, now, "the reclaimed instance has left the group")

    def _announce_reclaim(self, spec: GroupSpec, rec: cs.CapacityRecord, what: str) -> None:
        self.notify(
            Announcement(
                kind="capacity",
                title=f"{spec.name}: spot instance {rec.instance_id} reclaimed",
                text=f"{rec.detail}; {what}",
                severity="warning",
                group=spec.name,
                incident_id=rec.id,
                fields={"instance": rec.instance_id},
            )
        )


def _unit(spec: GroupSpec, capacity_of: Callable[[str], float]) -> float:
    unit_type = spec.predictive.instance_type or next(iter(spec.instance_types), None)
    return capacity_of(unit_type) if unit_type else 1.0


def watches_capacity(spec: GroupSpec) -> bool:
    return bool(spec.instance_types or spec.zones or spec.capacity_mix is not None)
