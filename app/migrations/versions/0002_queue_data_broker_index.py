"""index queue data by broker: a heartbeat reads one broker's rows

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 10:00:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("queue_data", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_queue_data_broker_name"), ["broker_name"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("queue_data", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_queue_data_broker_name"))
