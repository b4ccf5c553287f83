"""GPU capacity that does not arrive: the fallback ladder, the memory of sold-out (zone, type) pairs with
their retry backoff, and the step that moves a group along the ladder. Pure: values in, values out; ``now``
is an argument.

A group declares its ladder with ``instance_types`` (priority order), ``zones`` and ``capacity_mix``: every
(type, zone) pair as spot while the mix buys spot, then the same pairs on demand. When the observed capacity
does not arrive (an activity ends Warning/Failed for stock or quota, or instances stay Pending), the pair the
group is on is remembered as sold out until a backoff has passed (5 min, doubling to 1 h: the stock-outs we
see last tens of minutes to hours) and the group moves to the first rung that is not sold out. Once an earlier
rung's backoff has passed, the group goes back to it: a retry that, if it fails again, doubles the backoff.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

RETRY_BASE_S = 300.0
RETRY_MAX_S = 3600.0


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ZoneSpec(_Model):
    """One zone of a group and the vSwitch the scaling group reaches it through."""

    zone: str = Field(min_length=1, description="zone id, e.g. cn-hangzhou-h")
    vswitch_id: str = Field(min_length=1, description="the group's vSwitch in that zone")


class CapacityMix(_Model):
    """Spot above an on-demand base (ESS COST_OPTIMIZED: OnDemandBaseCapacity,
    OnDemandPercentageAboveBaseCapacity = 100 - spot_percentage_above_base, SpotPriceLimit)."""

    on_demand_base: int = Field(default=0, ge=0, le=1000)
    spot_percentage_above_base: int = Field(default=0, ge=0, le=100)
    spot_price_limit: float | None = Field(
        default=None, gt=0, description="CNY per hour bid per instance; none: pay the market price"
    )

    @property
    def buys_spot(self) -> bool:
        return self.spot_percentage_above_base > 0


class Rung(_Model):
    instance_type: str
    zone: str | None = None
    vswitch_id: str | None = None
    spot: bool = False
    capacity_per_instance: float = Field(default=1.0, gt=0)

    def label(self) -> str:
        where = f" in {self.zone}" if self.zone else ""
        return f"{self.instance_type}{where} ({'spot' if self.spot else 'on-demand'})"


class SoldOut(_Model):
    instance_type: str
    zone: str | None
    spot: bool
    until: datetime
    attempts: int = Field(ge=1)


def _same(s: SoldOut, rung: Rung) -> bool:
    return (s.instance_type, s.zone, s.spot) == (rung.instance_type, rung.zone, rung.spot)


class MoveKind(StrEnum):
    FALL_BACK = "fall_back"
    RETRY = "retry"
    EXHAUSTED = "exhausted"  # every rung is sold out: stay, and say so


class Move(_Model):
    kind: MoveKind
    from_rung: Rung
    to_rung: Rung
    reason: str
    target: int | None = None  # the count on the new rung, adjusted for its capacity per instance


class CapacityMemory(_Model):
    """What the service persists per group between ticks and across restarts."""

    rung: int = 0
    # the rung ``rung`` points at when it was saved: fleet.yaml may reorder or shorten the ladder between
    # runs (``reconcile``); None in a memory saved before this was kept
    on: Rung | None = None
    sold_out: tuple[SoldOut, ...] = ()
    last_activity_id: str | None = None  # the newest activity already judged
    moved_at: datetime | None = None  # the last move along the ladder
    # a move made after the tick's capacity write (its shortfall seen only then), and the instances its new
    # rung needs beyond the plan's count as it stood then: the next tick's write carries them
    unfolded: Move | None = None
    unfolded_extra: int = Field(default=0, ge=0)
    # the ESS quota (``QuotaExceeded.*``) that refused the newest judged scale-out, announced once per run
    quota_refused: str | None = None

    def is_sold_out(self, rung: Rung, now: datetime) -> bool:
        return any(_same(s, rung) and s.until > now for s in self.sold_out)

    def attempts(self, rung: Rung) -> int:
        return max((s.attempts for s in self.sold_out if _same(s, rung)), default=0)


def build_ladder(
    instance_types: Sequence[str],
    zones: Sequence[ZoneSpec],
    mix: CapacityMix | None,
    capacity: Mapping[str, float],
) -> tuple[Rung, ...]:
    """Every (type, zone) as spot while the mix buys spot, then on demand; zones inside types."""
    places: list[tuple[str | None, str | None]] = [(z.zone, z.vswitch_id) for z in zones] or [(None, None)]
    markets = (True, False) if mix is not None and mix.buys_spot else (False,)
    return tuple(
        Rung(
            instance_type=t,
            zone=zone,
            vswitch_id=vsw,
            spot=spot,
            capacity_per_instance=capacity.get(t, 1.0),
        )
        for spot in markets
        for t in instance_types
        for zone, vsw in places
    )


def backoff_s(attempts: int) -> float:
    doublings: int = max(0, attempts - 1)
    return min(RETRY_MAX_S, RETRY_BASE_S * float(2**doublings))


def fallback_count(target: int, have: int, unit_capacity: float, rung: Rung) -> int:
    """The group's count once it orders on ``rung``: the ``have`` instances it holds stay what they are, and
    only the part of ``target`` still missing, counted in instances of capacity ``unit_capacity`` (what the
    group's plan counts in: its capacity model's type), is ordered on the rung, adjusted for its capacity per
    instance. Adjusting the whole target would count the instances already there as if they were of the
    rung's type: 22 wanted with 16 held, on a type half as fast, is 28, not 44."""
    if target <= have:
        return target
    return have + max(1, math.ceil((target - have) * unit_capacity / rung.capacity_per_instance - 1e-9))


def _remember(memory: CapacityMemory, rung: Rung, now: datetime) -> tuple[SoldOut, ...]:
    attempts = memory.attempts(rung) + 1
    entry = SoldOut(
        instance_type=rung.instance_type,
        zone=rung.zone,
        spot=rung.spot,
        until=now + timedelta(seconds=backoff_s(attempts)),
        attempts=attempts,
    )
    return tuple(s for s in memory.sold_out if not _same(s, rung)) + (entry,)


def _fall_back(
    memory: CapacityMemory, ladder: Sequence[Rung], why: str, now: datetime, count: Callable[[Rung], int]
) -> tuple[CapacityMemory, Move]:
    current = ladder[min(memory.rung, len(ladder) - 1)]
    remembered = memory.model_copy(update={"sold_out": _remember(memory, current, now)})
    for index, rung in enumerate(ladder):
        if index != memory.rung and not remembered.is_sold_out(rung, now):
            move = Move(
                kind=MoveKind.FALL_BACK,
                from_rung=current,
                to_rung=rung,
                reason=f"{why}: {current.label()} is remembered sold out; falling back to {rung.label()}",
                target=count(rung),
            )
            return remembered.model_copy(update={"rung": index, "on": rung, "moved_at": now}), move
    move = Move(
        kind=MoveKind.EXHAUSTED,
        from_rung=current,
        to_rung=current,
        reason=f"{why}: every rung of the ladder is sold out; staying on {current.label()}",
    )
    # moved_at: instances stuck Pending are judged again only after they had time to start
    return remembered.model_copy(update={"moved_at": now}), move


def _retry(
    memory: CapacityMemory, ladder: Sequence[Rung], now: datetime, count: Callable[[Rung], int]
) -> tuple[CapacityMemory, Move] | None:
    current = ladder[min(memory.rung, len(ladder) - 1)]
    for index, rung in enumerate(ladder[: memory.rung]):
        if not memory.is_sold_out(rung, now):
            move = Move(
                kind=MoveKind.RETRY,
                from_rung=current,
                to_rung=rung,
                reason=f"the backoff of {rung.label()} has passed: trying it again",
                target=count(rung),
            )
            return memory.model_copy(update={"rung": index, "on": rung, "moved_at": now}), move
    return None


def _place(rung: Rung) -> tuple[str, str | None, bool]:
    return rung.instance_type, rung.zone, rung.spot


def reconcile(
    memory: CapacityMemory, ladder: Sequence[Rung], now: datetime
) -> tuple[CapacityMemory, Move | None]:
    """The memory against the ladder as fleet.yaml declares it now, which may have changed since the memory
    was saved: the rung the group stands on is found again by its place (type, zone, market) in a reordered
    ladder; one the ladder no longer has (a type or zone taken out of the config) sends the group back to the
    first rung, a move to write, since the scaling configuration still puts the old type first. A memory
    saved without its rung keeps its index where the ladder still has it."""
    if not ladder:
        return memory, None
    if memory.on is None:
        if memory.rung < len(ladder):
            return memory.model_copy(update={"on": ladder[memory.rung]}), None
        gone = ladder[-1]  # its place is not known: the last rung stands in for it in the move's record
    else:
        places = [_place(r) for r in ladder]
        if _place(memory.on) in places:
            index = places.index(_place(memory.on))
            return memory.model_copy(update={"rung": index, "on": ladder[index]}), None
        gone = memory.on
    move = Move(
        kind=MoveKind.RETRY,
        from_rung=gone,
        to_rung=ladder[0],
        reason=f"the configuration no longer lists {gone.label()}: back to {ladder[0].label()}",
    )
    return memory.model_copy(update={"rung": 0, "on": ladder[0], "moved_at": now}), move


def step(
    memory: CapacityMemory,
    ladder: Sequence[Rung],
    shortfall: str | None,
    now: datetime,
    target: int,
    have: int = 0,
    unit_capacity: float | None = None,
) -> tuple[CapacityMemory, Move | None]:
    """One tick: fall back on a shortfall (its reason given), else go back to an earlier rung whose backoff
    has passed. ``target`` is the count the group is asked for, ``have`` the instances it holds, and
    ``unit_capacity`` the capacity per instance its plan counts in (default: the first rung's): a move's
    count is ``fallback_count``."""
    if not ladder:
        return memory, None
    unit = ladder[0].capacity_per_instance if unit_capacity is None else unit_capacity

    def count(rung: Rung) -> int:
        return fallback_count(target, have, unit, rung)

    if shortfall is not None:
        return _fall_back(memory, ladder, shortfall, now, count)
    retried = _retry(memory, ladder, now, count)
    return retried if retried is not None else (memory, None)


def duplicates(instance_types: Sequence[str], zones: Sequence[ZoneSpec]) -> list[str]:
    """Problems with a group's capacity keys: a type or zone listed twice, or one vSwitch given to two zones
    (a vSwitch lies in one zone: a fall back from one of them to the other would change nothing)."""
    problems = []
    for label, values in (("instance_types", list(instance_types)), ("zones", [z.zone for z in zones])):
        dupes = sorted({v for v in values if values.count(v) > 1})
        if dupes:
            problems.append(f"{label} lists {', '.join(dupes)} more than once")
    if not problems:
        by_vswitch: dict[str, list[str]] = {}
        for z in zones:
            by_vswitch.setdefault(z.vswitch_id, []).append(z.zone)
        for vswitch, names in sorted(by_vswitch.items()):
            if len(names) > 1:
                problems.append(
                    f"zones give vSwitch {vswitch} to {' and '.join(names)}: a vSwitch lies in one zone"
                )
    return problems
