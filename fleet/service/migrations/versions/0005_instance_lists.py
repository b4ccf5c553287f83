"""Each group's scaling instances as last read from ESS, for a replica started while ESS cannot be read.

Revision ID: 0005_instance_lists
Revises: 0004_forecasts
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

from fleet.service.store import UtcDateTime

revision = "0005_instance_lists"
down_revision = "0004_forecasts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "instance_lists",
        sa.Column("service", sa.String(100), primary_key=True),
        sa.Column("group_name", sa.String(200), primary_key=True),
        sa.Column("read_at", UtcDateTime, nullable=False),
        sa.Column("body", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("instance_lists")
