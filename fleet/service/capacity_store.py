"""The store's capacity tables: each group's ladder position and sold-out memory, and the capacity records
(stock-outs and spot reclaims) whose timeline lives in ``incident_events`` under the record's id.

Tables join ``fleet.service.store.metadata``; the schema is created by the alembic revision
``0002_capacity``. Every function is one short transaction; callers pass ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa

from fleet.service.store import IncidentEvent, Store, UtcDateTime, metadata
from policies.capacity import CapacityMemory

capacity_memory = sa.Table(
    "capacity_memory",
    metadata,
    sa.Column("service", sa.String(100), primary_key=True),
    sa.Column("group_name", sa.String(200), primary_key=True),
    sa.Column("body", sa.JSON, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)

capacity_records = sa.Table(
    "capacity_records",
    metadata,
    sa.Column("id", sa.String(100), primary_key=True),
    sa.Column("service", sa.String(100), nullable=False),
    sa.Column("group_name", sa.String(200), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("instance_id", sa.String(64), nullable=True),
    sa.Column("instance_type", sa.String(64), nullable=True),
    sa.Column("zone_id", sa.String(64), nullable=True),
    sa.Column("detail", sa.Text, nullable=False, default=""),
    sa.Column("opened_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.Column("closed_at", UtcDateTime, nullable=True),
    sa.Index("ix_capacity_records_service_state", "service", "state"),
)


class RecordKind(StrEnum):
    STOCKOUT = "stockout"
    SPOT_RECLAIM = "spot_reclaim"


class RecordState(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


@dataclass
class CapacityRecord:
    id: str
    service: str
    group_name: str
    kind: RecordKind
    state: RecordState
    opened_at: datetime
    updated_at: datetime
    instance_id: str | None = None
    instance_type: str | None = None
    zone_id: str | None = None
    detail: str = ""
    closed_at: datetime | None = None


def load_memory(store: Store, group: str) -> CapacityMemory:
    with store.engine.connect() as c:
        row = c.execute(
            sa.select(capacity_memory.c.body).where(
                capacity_memory.c.service == store.service, capacity_memory.c.group_name == group
            )
        ).first()
    return CapacityMemory() if row is None else CapacityMemory.model_validate(row[0])


def save_memory(store: Store, group: str, memory: CapacityMemory, now: datetime) -> None:
    body = memory.model_dump(mode="json")
    with store.begin() as c:
        where = (capacity_memory.c.service == store.service) & (capacity_memory.c.group_name == group)
        updated = c.execute(sa.update(capacity_memory).where(where).values(body=body, updated_at=now))
        if updated.rowcount == 0:
            c.execute(
                sa.insert(capacity_memory).values(
                    service=store.service, group_name=group, body=body, updated_at=now
                )
            )


def open_record(store: Store, rec: CapacityRecord, event: str, detail: str) -> bool:
    """Insert the record (False when it exists already) and its first timeline event."""
    with store.begin() as c:
        exists = c.execute(sa.select(capacity_records.c.id).where(capacity_records.c.id == rec.id)).first()
        if exists is not None:
            return False
        values: dict[str, Any] = {**rec.__dict__, "kind": rec.kind.value, "state": rec.state.value}
        c.execute(sa.insert(capacity_records).values(**values))
    store.add_incident_event(IncidentEvent(rec.id, rec.opened_at, event, detail))
    return True


def add_event(store: Store, record_id: str, at: datetime, event: str, detail: str) -> None:
    store.add_incident_event(IncidentEvent(record_id, at, event, detail))
    with store.begin() as c:
        c.execute(sa.update(capacity_records).where(capacity_records.c.id == record_id).values(updated_at=at))


def close_record(store: Store, record_id: str, at: datetime, detail: str) -> None:
    store.add_incident_event(IncidentEvent(record_id, at, "closed", detail))
    with store.begin() as c:
        c.execute(
            sa.update(capacity_records)
            .where(capacity_records.c.id == record_id)
            .values(state=RecordState.CLOSED.value, closed_at=at, updated_at=at)
        )


def records(store: Store, open_only: bool = False, limit: int = 50) -> list[CapacityRecord]:
    query = sa.select(capacity_records).where(capacity_records.c.service == store.service)
    if open_only:
        query = query.where(capacity_records.c.state == RecordState.OPEN.value)
    query = query.order_by(capacity_records.c.opened_at.desc()).limit(limit)
    with store.engine.connect() as c:
        rows = c.execute(query).mappings().all()
    out = []
    for row in rows:
        values = dict(row)
        values["kind"] = RecordKind(values["kind"])
        values["state"] = RecordState(values["state"])
        out.append(CapacityRecord(**values))
    return out


def view(store: Store, limit: int = 20) -> list[dict[str, Any]]:
    """The records with their timelines, newest first: what ``/status`` and ``fleet status`` show."""
    found = records(store, limit=limit)
    timelines = store.incident_events_by_incident([r.id for r in found]) if found else {}
    return [
        {
            "id": r.id,
            "group": r.group_name,
            "kind": r.kind.value,
            "state": r.state.value,
            "instance_id": r.instance_id,
            "instance_type": r.instance_type,
            "zone_id": r.zone_id,
            "detail": r.detail,
            "opened_at": r.opened_at.isoformat(),
            "closed_at": r.closed_at.isoformat() if r.closed_at else None,
            "timeline": [
                {"at": e.at.isoformat(), "event": e.kind, "detail": e.detail} for e in timelines.get(r.id, [])
            ],
        }
        for r in found
    ]
