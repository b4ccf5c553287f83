"""Each group name's scaling group (id, account, region) as last observed, so that a group renamed in
fleet.yaml takes over its former name's demand history, forecasts and capacity memory.

Revision ID: 0007_group_identities
Revises: 0006_request_group
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

from fleet.service.store import UtcDateTime

revision = "0007_group_identities"
down_revision = "0006_request_group"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "group_identities",
        sa.Column("service", sa.String(100), primary_key=True),
        sa.Column("group_name", sa.String(200), primary_key=True),
        sa.Column("scaling_group_id", sa.String(64), nullable=False),
        sa.Column("account", sa.String(200), nullable=False),
        sa.Column("region", sa.String(64), nullable=False),
        sa.Column("seen_at", UtcDateTime, nullable=False),
    )
    op.create_index("ix_group_identities_scaling_group", "group_identities", ["service", "scaling_group_id"])


def downgrade() -> None:
    op.drop_index("ix_group_identities_scaling_group", table_name="group_identities")
    op.drop_table("group_identities")
