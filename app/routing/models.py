"""The route registry's tables (SPEC 2): RocketMQ's NameServer tables, kept in a SQL database.

clusters        name
brokers         (cluster, broker name, broker id) -> address, HA address, heartbeat, data version
topics          name
queue_data      (topic, broker name) -> read/write queue numbers, permission, flags
consumer_groups name
subscriptions   (group, topic) -> filter expression
ha_epochs       broker name -> epoch, its master, the master's lease and the offset it confirmed
ha_replicas     (broker name, broker id) -> a slave's address, how far its CommitLog goes, how many
                reports it made and its failover period
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class ClusterRow(Base):
    __tablename__ = "clusters"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)


class BrokerRow(Base):
    __tablename__ = "brokers"
    __table_args__ = (UniqueConstraint("broker_name", "broker_id", name="uq_brokers_name_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster_name: Mapped[str] = mapped_column(String(255), ForeignKey("clusters.name"), index=True)
    broker_name: Mapped[str] = mapped_column(String(255), index=True)
    broker_id: Mapped[int] = mapped_column(Integer)  # 0 master, > 0 slave
    address: Mapped[str] = mapped_column(String(1024))
    ha_address: Mapped[str] = mapped_column(String(1024), default="")
    last_heartbeat_ms: Mapped[int] = mapped_column(BigInteger)
    data_version: Mapped[int] = mapped_column(BigInteger, default=0)


class TopicRow(Base):
    __tablename__ = "topics"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    order: Mapped[bool] = mapped_column(Boolean, default=False)


class QueueDataRow(Base):
    __tablename__ = "queue_data"

    topic: Mapped[str] = mapped_column(
        String(255), ForeignKey("topics.name", ondelete="CASCADE"), primary_key=True
    )
    # Indexed: a heartbeat reads one broker's queue data.
    broker_name: Mapped[str] = mapped_column(String(255), primary_key=True, index=True)
    read_queue_nums: Mapped[int] = mapped_column(Integer)
    write_queue_nums: Mapped[int] = mapped_column(Integer)
    perm: Mapped[int] = mapped_column(Integer)
    topic_sys_flag: Mapped[int] = mapped_column(Integer, default=0)


class ConsumerGroupRow(Base):
    __tablename__ = "consumer_groups"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)


class SubscriptionRow(Base):
    __tablename__ = "subscriptions"

    group: Mapped[str] = mapped_column(
        String(255), ForeignKey("consumer_groups.name", ondelete="CASCADE"), primary_key=True
    )
    topic: Mapped[str] = mapped_column(String(255), primary_key=True)
    expression: Mapped[str] = mapped_column(Text, default="*")


class HaEpochRow(Base):
    """Who is the master of a broker name, in which epoch (RocketMQ 5's controller, kept in the
    database). A promotion is a compare-and-set on ``epoch``; the master renews ``lease`` (a
    counter, so no clocks are compared) and reports the CommitLog offset its SEND_OK answers
    covered."""

    __tablename__ = "ha_epochs"

    broker_name: Mapped[str] = mapped_column(String(255), primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer)
    master_id: Mapped[int] = mapped_column(Integer)  # the master's own WHARF_BROKER_ID
    master_url: Mapped[str] = mapped_column(String(1024))
    master_role: Mapped[str] = mapped_column(String(32))
    lease: Mapped[int] = mapped_column(BigInteger, default=0)
    confirmed_offset: Mapped[int] = mapped_column(BigInteger, default=0)


class HaReplicaRow(Base):
    """How far each slave's CommitLog goes, as it last reported: an automatic failover promotes
    the slave furthest ahead, so no SEND_OK one of them holds is lost. Each report counts up
    ``beats`` (like the master's lease, a counter: a slave that sees it stand still on its own
    clock knows the reporter silent, and no clocks are compared); a slave reports every fifth of
    its ``failover_ms``."""

    __tablename__ = "ha_replicas"

    broker_name: Mapped[str] = mapped_column(String(255), primary_key=True)
    broker_id: Mapped[int] = mapped_column(Integer, primary_key=True)  # the slave's WHARF_BROKER_ID
    url: Mapped[str] = mapped_column(String(1024))
    max_offset: Mapped[int] = mapped_column(BigInteger)
    beats: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    failover_ms: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # The last epoch of the slave's own log: offsets compare only between logs of one epoch.
    epoch: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
