"""route registry

Revision ID: 0001
Revises:
Create Date: 2026-11-22 03:40:40.891711
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "clusters", sa.Column("name", sa.String(length=255), nullable=False), sa.PrimaryKeyConstraint("name")
    )
    op.create_table(
        "consumer_groups",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "topics",
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("order", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "brokers",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("cluster_name", sa.String(length=255), nullable=False),
        sa.Column("broker_name", sa.String(length=255), nullable=False),
        sa.Column("broker_id", sa.Integer(), nullable=False),
        sa.Column("address", sa.String(length=1024), nullable=False),
        sa.Column("ha_address", sa.String(length=1024), nullable=False),
        sa.Column("last_heartbeat_ms", sa.BigInteger(), nullable=False),
        sa.Column("data_version", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster_name"],
            ["clusters.name"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("broker_name", "broker_id", name="uq_brokers_name_id"),
    )
    with op.batch_alter_table("brokers", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_brokers_broker_name"), ["broker_name"], unique=False)
        batch_op.create_index(batch_op.f("ix_brokers_cluster_name"), ["cluster_name"], unique=False)

    op.create_table(
        "queue_data",
        sa.Column("topic", sa.String(length=255), nullable=False),
        sa.Column("broker_name", sa.String(length=255), nullable=False),
        sa.Column("read_queue_nums", sa.Integer(), nullable=False),
        sa.Column("write_queue_nums", sa.Integer(), nullable=False),
        sa.Column("perm", sa.Integer(), nullable=False),
        sa.Column("topic_sys_flag", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["topic"], ["topics.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("topic", "broker_name"),
    )
    op.create_table(
        "subscriptions",
        sa.Column("group", sa.String(length=255), nullable=False),
        sa.Column("topic", sa.String(length=255), nullable=False),
        sa.Column("expression", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["group"], ["consumer_groups.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("group", "topic"),
    )


def downgrade() -> None:
    op.drop_table("subscriptions")
    op.drop_table("queue_data")
    with op.batch_alter_table("brokers", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_brokers_cluster_name"))
        batch_op.drop_index(batch_op.f("ix_brokers_broker_name"))

    op.drop_table("brokers")
    op.drop_table("topics")
    op.drop_table("consumer_groups")
    op.drop_table("clusters")
