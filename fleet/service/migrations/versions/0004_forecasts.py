"""The predictive scaler's forecasts, once a minute per group: what it predicted for the end of its horizon.

Revision ID: 0004_forecasts
Revises: 0003_demand_samples
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

from fleet.service.store import UtcDateTime

revision = "0004_forecasts"
down_revision = "0003_demand_samples"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "forecasts",
        sa.Column("service", sa.String(100), primary_key=True),
        sa.Column("group_name", sa.String(200), primary_key=True),
        sa.Column("made_at", UtcDateTime, primary_key=True),
        sa.Column("at", UtcDateTime, nullable=False),
        sa.Column("forecast_rps", sa.Float, nullable=False),
        sa.Column("forecast_upper_rps", sa.Float, nullable=True),
    )
    op.create_index("ix_forecasts_group_at", "forecasts", ["service", "group_name", "at"])


def downgrade() -> None:
    op.drop_index("ix_forecasts_group_at", table_name="forecasts")
    op.drop_table("forecasts")
