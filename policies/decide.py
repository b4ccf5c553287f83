"""decide(snapshot, spec, history, now) -> Plan: one decision for every group (work in progress)."""

from __future__ import annotations

from datetime import datetime

from policies.model import History, Plan, Snapshot
from policies.spec import PolicySpec


def decide(snapshot: Snapshot, spec: PolicySpec, history: History | None, now: datetime) -> Plan:
    """The plan for ``now`` (aware) given what was observed and what was remembered."""
    return Plan(at=now, history=history or History())
