"""Demand history for the predictive scaler: per group and minute, the arrival rate and the token mix.

Revision ID: 0003_demand_samples
Revises: 0002_capacity
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from fleet.service.store import UtcDateTime

revision = "0003_demand_samples"
down_revision = "0002_capacity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "demand_samples",
        sa.Column("service", sa.String(100), primary_key=True),
        sa.Column("group_name", sa.String(200), primary_key=True),
        sa.Column("at", UtcDateTime, primary_key=True),
        sa.Column("request_rate_rps", sa.Float, nullable=False),
        sa.Column("prompt_tokens", sa.Float, nullable=True),
        sa.Column("output_tokens", sa.Float, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("demand_samples")
