"""Operator requests that name a group rather than an instance or incident (`fleet reset-breaker`).

Revision ID: 0006_request_group
Revises: 0005_instance_lists
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0006_request_group"
down_revision = "0005_instance_lists"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("operator_requests", sa.Column("group_name", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("operator_requests") as batch:
        batch.drop_column("group_name")
