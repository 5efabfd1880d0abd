"""replication: each slave's reports are counted, so a slave that stopped reporting can be told,
and carry the slave's epoch, so that only offsets of one epoch's logs are compared

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A report made before this revision counts as none, by a slave of an unknown failover period.
    with op.batch_alter_table("ha_replicas", schema=None) as batch_op:
        batch_op.add_column(sa.Column("beats", sa.BigInteger(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("failover_ms", sa.BigInteger(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("epoch", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("ha_replicas", schema=None) as batch_op:
        batch_op.drop_column("epoch")
        batch_op.drop_column("failover_ms")
        batch_op.drop_column("beats")
