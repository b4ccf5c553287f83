"""Safety invariants checked after every controller tick of a simulation.

Whatever the policy, the fleet must never leave its bounds: the group's desired capacity stays within [min,
max] and at or above the warm floor and any active schedule floor (for our policy, which promises them), never
more instances isolated (Standby) than the guardrail allows, and never two capacity writes for one decision
(two capacity-change activities started in the same tick). Each violation is a dict with ``kind``, ``at`` and
``detail``; the run's summary lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class InvariantChecker:
    min_size: int
    max_size: int
    warm_floor: int = 0
    max_isolated: int | None = None
    floor_at: Callable[[datetime], int] | None = None  # the schedule floor in force (ours only)
    # the guardrail's cap on isolated instances for a group size (ours only): sets max_isolated each check
    max_isolated_for: Callable[[int], int] | None = None
    violations: list[dict[str, Any]] = field(default_factory=list)
    _seen_activities: set[str] = field(default_factory=set)

    def known(self, activities: frozenset[str]) -> None:
        """Activities that are no tick's: the start fleet's creation, before the first tick."""
        self._seen_activities.update(activities)

    def _add(self, kind: str, at: datetime, detail: str) -> None:
        self.violations.append({"kind": kind, "at": at.isoformat(), "detail": detail})

    def check(
        self,
        at: datetime,
        desired: int,
        lifecycle: dict[str, str],
        new_activities: list[str],
        *,
        min_size: int | None = None,
        max_size: int | None = None,
        never_served: frozenset[str] = frozenset(),
    ) -> None:
        """One check after a tick: the group's desired capacity, its instances' states and new activities.

        ``never_served``: instances launched broken (they never served), or that served nothing as they went
        into Standby (their engine down, their GPU lost), which the guardrail's count of
        isolated serving capacity leaves out."""
        lo = self.min_size if min_size is None else min_size
        hi = self.max_size if max_size is None else max_size
        if desired < lo:
            self._add("floor", at, f"desired capacity {desired} below min_size {lo}")
        if desired > hi:
            self._add("ceiling", at, f"desired capacity {desired} above max_size {hi}")
        if self.warm_floor and desired < self.warm_floor:
            self._add("floor", at, f"desired capacity {desired} below warm_floor {self.warm_floor}")
        if self.floor_at is not None:
            floor = self.floor_at(at)
            if desired < floor:
                self._add("floor", at, f"desired capacity {desired} below the schedule floor {floor}")
        standby = {iid for iid, state in lifecycle.items() if state == "Standby" and iid not in never_served}
        if self.max_isolated is not None and len(standby) > self.max_isolated:
            self._add(
                "guardrail",
                at,
                f"{len(standby)} instances isolated, guardrail max_isolated {self.max_isolated}",
            )
        fresh = [a for a in new_activities if a not in self._seen_activities]
        self._seen_activities.update(fresh)
        if len(fresh) > 1:
            self._add(
                "double_action",
                at,
                f"{len(fresh)} scaling activities started in one tick: {', '.join(sorted(fresh))}",
            )
