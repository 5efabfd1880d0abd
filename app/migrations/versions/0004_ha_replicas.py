"""replication: how far each slave's CommitLog goes

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27 11:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ha_replicas",
        sa.Column("broker_name", sa.String(length=255), nullable=False),
        sa.Column("broker_id", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(length=1024), nullable=False),
        sa.Column("max_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("broker_name", "broker_id"),
    )


def downgrade() -> None:
    op.drop_table("ha_replicas")
