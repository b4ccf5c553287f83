"""The first schema: leases, decisions, policy history, incidents and their timeline, controls, requests.

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

from fleet.service.store import UtcDateTime

revision = "0001_initial"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leases",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("holder", sa.String(200), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("acquired_at", UtcDateTime, nullable=False),
        sa.Column("expires_at", UtcDateTime, nullable=False),
    )
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("service", sa.String(100), nullable=False),
        sa.Column("at", UtcDateTime, nullable=False),
        sa.Column("group_name", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("decision_id", sa.String(200), nullable=False),
        sa.Column("target", sa.Integer, nullable=True),
        sa.Column("instance_id", sa.String(64), nullable=True),
        sa.Column("incident_id", sa.String(100), nullable=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("inputs", sa.JSON, nullable=True),
        sa.Column("client_token", sa.String(64), nullable=True),
        sa.Column("request_id", sa.String(128), nullable=True),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("dry_run", sa.Boolean, nullable=False),
        sa.Column("lease_epoch", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_decisions_service_at", "decisions", ["service", "at"])
    op.create_index("ix_decisions_group_kind", "decisions", ["service", "group_name", "kind"])
    op.create_table(
        "policy_state",
        sa.Column("service", sa.String(100), primary_key=True),
        sa.Column("history", sa.JSON, nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        sa.Column("lease_epoch", sa.BigInteger, nullable=True),
    )
    op.create_table(
        "incidents",
        sa.Column("id", sa.String(100), primary_key=True),
        sa.Column("service", sa.String(100), nullable=False),
        sa.Column("group_name", sa.String(200), nullable=False),
        sa.Column("instance_id", sa.String(64), nullable=False),
        sa.Column("cause", sa.Text, nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("detected_at", UtcDateTime, nullable=False),
        sa.Column("respond_by", UtcDateTime, nullable=True),
        sa.Column("isolate_by", UtcDateTime, nullable=True),
        sa.Column("acknowledged_at", UtcDateTime, nullable=True),
        sa.Column("acknowledged_by", sa.String(200), nullable=True),
        sa.Column("notified_at", UtcDateTime, nullable=True),
        sa.Column("isolated_at", UtcDateTime, nullable=True),
        sa.Column("closed_at", UtcDateTime, nullable=True),
        sa.Column("body", sa.JSON, nullable=True),
        sa.Column("updated_at", UtcDateTime, nullable=False),
    )
    op.create_index("ix_incidents_service_state", "incidents", ["service", "state"])
    op.create_table(
        "incident_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("incident_id", sa.String(100), nullable=False),
        sa.Column("at", UtcDateTime, nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
    )
    op.create_index("ix_incident_events_incident_id", "incident_events", ["incident_id"])
    op.create_table(
        "group_controls",
        sa.Column("service", sa.String(100), primary_key=True),
        sa.Column("group_name", sa.String(200), primary_key=True),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("updated_at", UtcDateTime, nullable=False),
    )
    op.create_table(
        "operator_requests",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("service", sa.String(100), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("instance_id", sa.String(64), nullable=True),
        sa.Column("incident_id", sa.String(100), nullable=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("created_at", UtcDateTime, nullable=False),
        sa.Column("handled_at", UtcDateTime, nullable=True),
        sa.Column("outcome", sa.Text, nullable=True),
    )


def downgrade() -> None:
    for name in (
        "operator_requests",
        "group_controls",
        "incident_events",
        "incidents",
        "policy_state",
        "decisions",
        "leases",
    ):
        op.drop_table(name)
