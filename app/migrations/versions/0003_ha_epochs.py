"""replication epochs: who is the master of each broker name, in which epoch

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-27 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ha_epochs",
        sa.Column("broker_name", sa.String(length=255), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("master_id", sa.Integer(), nullable=False),
        sa.Column("master_url", sa.String(length=1024), nullable=False),
        sa.Column("master_role", sa.String(length=32), nullable=False),
        sa.Column("lease", sa.BigInteger(), nullable=False),
        sa.Column("confirmed_offset", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("broker_name"),
    )


def downgrade() -> None:
    op.drop_table("ha_epochs")
