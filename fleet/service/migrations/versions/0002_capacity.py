"""Capacity: each group's ladder position and sold-out memory, and the stock-out / spot reclaim records.

Revision ID: 0002_capacity
Revises: 0001_initial
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from fleet.service.store import UtcDateTime

revision = "0002_capacity"
down_revision = "0001_initial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "capacity_memory",
        sa.Column("service", sa.String(100), primary_key=True),
        sa.Column("group_name", sa.String(200), primary_key=True),
        sa.Column("body", sa.JSON, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
    )
    op.create_table(
        "capacity_records",
        sa.Column("id", sa.String(100), primary_key=True),
        sa.Column("service", sa.String(100), nullable=False),
        sa.Column("group_name", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("instance_id", sa.String(64), nullable=True),
        sa.Column("instance_type", sa.String(64), nullable=True),
        sa.Column("zone_id", sa.String(64), nullable=True),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("opened_at", UtcDateTime, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.Column("closed_at", UtcDateTime, nullable=True),
    )
    op.create_index("ix_capacity_records_service_state", "capacity_records", ["service", "state"])


def downgrade() -> None:
    op.drop_index("ix_capacity_records_service_state", table_name="capacity_records")
    op.drop_table("capacity_records")
    op.drop_table("capacity_memory")
