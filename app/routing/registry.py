"""The route registry: RocketMQ's NameServer, with a SQL database doing the coordination.

Brokers register and heartbeat with their topic configurations; only a master's (broker id 0)
queue data is taken. An expiry scan removes brokers silent for too long and then whatever they
leave empty: queue data, topics, clusters. Clients ask any broker for a topic's route.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Engine, delete, exists, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.routing.models import BrokerRow, ClusterRow, HaEpochRow, HaReplicaRow, QueueDataRow, TopicRow
from app.routing.topic_config import TopicConfig

MASTER_ID = 0

T = TypeVar("T")

# Rows per statement when a batch of topics is written: well under every database's parameter limit.
CHUNK = 500


def _chunks(items: list[T]) -> Iterator[list[T]]:
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]


def _dialect_insert(session: Session) -> Callable[..., Any]:
    """The INSERT with ON CONFLICT of the session's database (SQLite or PostgreSQL)."""
    name = session.get_bind().dialect.name
    if name == "postgresql":
        return postgresql.insert
    if name == "sqlite":
        return sqlite.insert
    raise NotImplementedError(f"the route registry runs on SQLite or PostgreSQL, not {name}")


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    cluster_name: str
    broker_name: str
    broker_id: int
    address: str
    ha_address: str = ""


@dataclass(frozen=True, slots=True)
class HaRecord:
    """A broker name's replication epoch and master (:class:`HaEpochRow`)."""

    epoch: int
    master_id: int
    master_url: str
    master_role: str
    lease: int
    confirmed_offset: int

    @classmethod
    def of(cls, row: HaEpochRow) -> HaRecord:
        return cls(row.epoch, row.master_id, row.master_url, row.master_role, row.lease, row.confirmed_offset)


@dataclass(frozen=True, slots=True)
class HaReport:
    """A slave's last report (:class:`HaReplicaRow`): how far its CommitLog goes, how many reports
    it has made, and the failover period it runs with (it reports every fifth of it)."""

    max_offset: int
    beats: int
    failover_ms: int
    epoch: int = 0  # the last epoch of the slave's log


class RouteRegistry:
    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.sessions = sessionmaker(engine, expire_on_commit=False)
        self.clock = clock

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- brokers ---------------------------------------------------------------------------------

    def register(self, broker: BrokerIdentity, topics: Iterable[TopicConfig], data_version: int = 0) -> None:
        """Register or heartbeat: record the broker as alive and, for a master, its queue data."""
        topics = list(topics)
        try:
            self._register(broker, topics, data_version)
        except IntegrityError:
            # Another broker inserted the same cluster or topic row at the same moment: once more.
            self._register(broker, topics, data_version)

    def _register(self, broker: BrokerIdentity, topics: list[TopicConfig], data_version: int) -> None:
        with self.sessions.begin() as session:
            if broker.broker_id == MASTER_ID:
                record = session.get(HaEpochRow, broker.broker_name)
                if record is not None and record.epoch > 0 and record.master_url != broker.address:
                    # Fenced: after a failover, only the master the record names is id 0. (In
                    # epoch 0 a master restarted at another address renews the record at start.)
                    return
            if session.get(ClusterRow, broker.cluster_name) is None:
                session.add(ClusterRow(name=broker.cluster_name))
                session.flush()
            row = session.scalars(
                select(BrokerRow).where(
                    BrokerRow.broker_name == broker.broker_name, BrokerRow.broker_id == broker.broker_id
                )
            ).one_or_none()
            if row is None:
                row = BrokerRow(
                    cluster_name=broker.cluster_name,
                    broker_name=broker.broker_name,
                    broker_id=broker.broker_id,
                )
                session.add(row)
            row.cluster_name = broker.cluster_name
            row.address = broker.address
            row.ha_address = broker.ha_address
            row.last_heartbeat_ms = self._now_ms()
            row.data_version = data_version
            session.flush()
            if broker.broker_id == MASTER_ID:
                self._sync_queue_data(session, broker.broker_name, topics)

    def _sync_queue_data(self, session: Session, broker_name: str, topics: list[TopicConfig]) -> None:
        """Make the broker's queue data what ``topics`` say, writing only the rows that differ."""
        table = QueueDataRow.__table__.c
        existing = {
            topic: (read, write, perm)
            for topic, read, write, perm in session.execute(
                select(table.topic, table.read_queue_nums, table.write_queue_nums, table.perm).where(
                    table.broker_name == broker_name
                )
            )
        }
        wanted = {config.name for config in topics}
        changed = [
            config
            for config in topics
            if existing.get(config.name) != (config.read_queue_nums, config.write_queue_nums, config.perm)
        ]
        self._write_queue_data(
            session, broker_name, changed, [name for name in existing if name not in wanted]
        )

    def publish(
        self,
        broker: BrokerIdentity,
        upserted: Iterable[TopicConfig],
        deleted: Iterable[str],
        data_version: int = 0,
    ) -> bool:
        """Write only these topics' queue data (a master's; a slave's are not taken) and touch the
        broker's row. False when the broker is not registered (expired): register it in full then."""
        upserted, deleted = list(upserted), list(deleted)
        try:
            return self._publish(broker, upserted, deleted, data_version)
        except IntegrityError:
            # Another broker removed a topic row this one was adding to at the same moment: once more.
            return self._publish(broker, upserted, deleted, data_version)

    def _publish(
        self, broker: BrokerIdentity, upserted: list[TopicConfig], deleted: list[str], data_version: int
    ) -> bool:
        with self.sessions.begin() as session:
            touched = session.execute(
                update(BrokerRow)
                .where(BrokerRow.broker_name == broker.broker_name, BrokerRow.broker_id == broker.broker_id)
                .values(last_heartbeat_ms=self._now_ms(), data_version=data_version)
            )
            if touched.rowcount == 0:  # type: ignore[attr-defined]
                return False
            if broker.broker_id == MASTER_ID:
                self._write_queue_data(session, broker.broker_name, upserted, deleted)
        return True

    def _write_queue_data(
        self, session: Session, broker_name: str, upserted: list[TopicConfig], deleted: list[str]
    ) -> None:
        """Upsert the topic and queue data rows of ``upserted``, delete the queue data of ``deleted``
        and then those of their topic rows no broker has queue data for: a few statements, each
        covering a batch of topics, whatever the number of other topics."""
        insert = _dialect_insert(session)
        for chunk in _chunks(upserted):
            session.execute(
                insert(TopicRow).on_conflict_do_nothing(index_elements=["name"]),
                [{"name": config.name, "order": config.order} for config in chunk],
            )
            statement = insert(QueueDataRow)
            session.execute(
                statement.on_conflict_do_update(
                    index_elements=["topic", "broker_name"],
                    set_={
                        "read_queue_nums": statement.excluded.read_queue_nums,
                        "write_queue_nums": statement.excluded.write_queue_nums,
                        "perm": statement.excluded.perm,
                    },
                ),
                [
                    {
                        "topic": config.name,
                        "broker_name": broker_name,
                        "read_queue_nums": config.read_queue_nums,
                        "write_queue_nums": config.write_queue_nums,
                        "perm": config.perm,
                        "topic_sys_flag": 0,
                    }
                    for config in chunk
                ],
            )
        for names in _chunks(deleted):
            session.execute(
                delete(QueueDataRow).where(
                    QueueDataRow.broker_name == broker_name, QueueDataRow.topic.in_(names)
                )
            )
            session.execute(
                delete(TopicRow).where(
                    TopicRow.name.in_(names), ~exists().where(QueueDataRow.topic == TopicRow.name)
                )
            )

    def unregister(self, broker: BrokerIdentity) -> None:
        with self.sessions.begin() as session:
            session.execute(
                delete(BrokerRow).where(
                    BrokerRow.broker_name == broker.broker_name,
                    BrokerRow.broker_id == broker.broker_id,
                    # A former master whose id another broker took since leaves that one's row.
                    BrokerRow.address == broker.address,
                )
            )
            self._drop_orphans(session)

    def scan_expired(self, expiry_s: float) -> list[str]:
        """Remove brokers silent for ``expiry_s``, then what they leave empty; returns their addresses."""
        cutoff = self._now_ms() - int(expiry_s * 1000)
        with self.sessions.begin() as session:
            expired = list(session.scalars(select(BrokerRow).where(BrokerRow.last_heartbeat_ms < cutoff)))
            for row in expired:
                session.delete(row)
            session.flush()
            if expired:
                self._drop_orphans(session)
        return [row.address for row in expired]

    def _drop_orphans(self, session: Session) -> None:
        # A broker name keeps its queues while any of its brokers is registered, as RocketMQ's
        # NameServer does: its slaves serve reads, and a sharding key waits for its next master
        # instead of moving to another name's queue.
        names = select(BrokerRow.broker_name).distinct()
        session.execute(delete(QueueDataRow).where(QueueDataRow.broker_name.not_in(names)))
        session.flush()
        self._drop_empty_topics(session)
        clusters_in_use = list(session.scalars(select(BrokerRow.cluster_name).distinct()))
        session.execute(delete(ClusterRow).where(ClusterRow.name.not_in(clusters_in_use)))

    @staticmethod
    def _drop_empty_topics(session: Session) -> None:
        used = select(QueueDataRow.topic).distinct()
        session.execute(delete(TopicRow).where(TopicRow.name.not_in(used)))

    # -- replication epochs (RocketMQ 5's controller) ----------------------------------------------

    def ha_record(self, broker_name: str) -> HaRecord | None:
        with self.sessions() as session:
            row = session.get(HaEpochRow, broker_name)
            return HaRecord.of(row) if row is not None else None

    def ha_claim(self, broker_name: str, master_id: int, url: str, role: str) -> HaRecord:
        """The broker name's record; a master starting where none exists records itself in epoch 0."""
        record = self.ha_record(broker_name)
        if record is not None:
            return record
        try:
            with self.sessions.begin() as session:
                session.add(
                    HaEpochRow(
                        broker_name=broker_name,
                        epoch=0,
                        master_id=master_id,
                        master_url=url,
                        master_role=role,
                        lease=0,
                        confirmed_offset=0,
                    )
                )
        except IntegrityError:
            pass  # another broker of the name claimed it first
        record = self.ha_record(broker_name)
        assert record is not None
        return record

    def ha_renew(
        self, broker_name: str, epoch: int, master_id: int, url: str, confirmed_offset: int
    ) -> HaRecord | None:
        """The master of ``epoch`` renews its lease and reports the offset its SEND_OK answers
        covered; the record as it is afterwards (another master's if this one was fenced)."""
        with self.sessions.begin() as session:
            session.execute(
                update(HaEpochRow)
                .where(
                    HaEpochRow.broker_name == broker_name,
                    HaEpochRow.epoch == epoch,
                    HaEpochRow.master_id == master_id,
                )
                .values(lease=HaEpochRow.lease + 1, master_url=url, confirmed_offset=confirmed_offset)
            )
        return self.ha_record(broker_name)

    def ha_promote(
        self,
        broker_name: str,
        expected_epoch: int,
        master_id: int,
        url: str,
        role: str,
        start_offset: int = 0,
        expected_lease: int | None = None,
    ) -> HaRecord | None:
        """Make ``master_id`` the master in epoch ``expected_epoch + 1`` if the record is still at
        ``expected_epoch`` (compare-and-set: of two racing promotions one wins); None otherwise.
        With ``expected_lease`` (an automatic failover), only if the master has not renewed its
        lease since the slave saw it stand still: a master back from a pause that renewed in time
        takes writes again, and a slave promoted over it would drop what it acknowledged.

        The new epoch's confirmed offset starts at ``start_offset``, where the promoted log ends:
        a later failover promotes only a slave that holds all of it (what the new master acknowledged
        before it reports may lie anywhere past that)."""
        epoch = expected_epoch + 1
        values = {
            "epoch": epoch,
            "master_id": master_id,
            "master_url": url,
            "master_role": role,
            "lease": 0,
            "confirmed_offset": start_offset,
        }
        try:
            with self.sessions.begin() as session:
                if expected_epoch < 0:
                    session.add(HaEpochRow(broker_name=broker_name, **values))
                    session.flush()
                    changed = 1
                else:
                    current = [HaEpochRow.broker_name == broker_name, HaEpochRow.epoch == expected_epoch]
                    if expected_lease is not None:
                        current.append(HaEpochRow.lease == expected_lease)
                    result = session.execute(update(HaEpochRow).where(*current).values(**values))
                    changed = int(getattr(result, "rowcount", 0))
                if changed == 1:  # a master reports no more as a slave
                    session.execute(
                        delete(HaReplicaRow).where(
                            HaReplicaRow.broker_name == broker_name, HaReplicaRow.broker_id == master_id
                        )
                    )
        except IntegrityError:
            return None
        return self.ha_record(broker_name) if changed == 1 else None

    def ha_report(
        self, broker_name: str, broker_id: int, url: str, max_offset: int, failover_ms: int, epoch: int = 0
    ) -> dict[int, HaReport]:
        """A slave reports how far its CommitLog goes, counting one more beat; every slave's last
        report of the name, by id."""
        with self.sessions.begin() as session:
            insert = _dialect_insert(session)
            values = {"url": url, "max_offset": max_offset, "failover_ms": failover_ms, "epoch": epoch}
            session.execute(
                insert(HaReplicaRow)
                .values(broker_name=broker_name, broker_id=broker_id, beats=0, **values)
                .on_conflict_do_update(
                    index_elements=["broker_name", "broker_id"],
                    set_={**values, "beats": HaReplicaRow.beats + 1},
                )
            )
            rows = session.scalars(select(HaReplicaRow).where(HaReplicaRow.broker_name == broker_name))
            return {
                row.broker_id: HaReport(row.max_offset, row.beats, row.failover_ms, row.epoch) for row in rows
            }

    # -- queries ---------------------------------------------------------------------------------

    def ping(self) -> None:
        """One round trip to the database: raises when it cannot be reached."""
        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    def topic_route(self, topic: str) -> dict[str, Any] | None:
        """RocketMQ's TopicRouteData: queue data per broker name and the brokers' addresses."""
        with self.sessions() as session:
            queues = list(
                session.scalars(
                    select(QueueDataRow).where(QueueDataRow.topic == topic).order_by(QueueDataRow.broker_name)
                )
            )
            if not queues:
                return None
            names = [row.broker_name for row in queues]
            brokers = list(
                session.scalars(
                    select(BrokerRow)
                    .where(BrokerRow.broker_name.in_(names))
                    .order_by(BrokerRow.broker_name, BrokerRow.broker_id)
                )
            )
        broker_datas: dict[str, dict[str, Any]] = {}
        for row in brokers:
            data = broker_datas.setdefault(
                row.broker_name,
                {"cluster": row.cluster_name, "broker_name": row.broker_name, "addresses": {}},
            )
            data["addresses"][str(row.broker_id)] = row.address
        return {
            "topic": topic,
            "queue_datas": [
                {
                    "broker_name": row.broker_name,
                    "read_queue_nums": row.read_queue_nums,
                    "write_queue_nums": row.write_queue_nums,
                    "perm": row.perm,
                    "topic_sys_flag": row.topic_sys_flag,
                }
                for row in queues
            ],
            "broker_datas": list(broker_datas.values()),
        }

    def clusters(self, expiry_s: float) -> list[dict[str, Any]]:
        now = self._now_ms()
        with self.sessions() as session:
            clusters = list(session.scalars(select(ClusterRow.name).order_by(ClusterRow.name)))
            brokers = list(
                session.scalars(select(BrokerRow).order_by(BrokerRow.broker_name, BrokerRow.broker_id))
            )
        result = []
        for name in clusters:
            members = [
                {
                    "broker_name": row.broker_name,
                    "broker_id": row.broker_id,
                    "address": row.address,
                    "ha_address": row.ha_address,
                    "last_heartbeat_ms": row.last_heartbeat_ms,
                    "alive": now - row.last_heartbeat_ms <= expiry_s * 1000,
                    "data_version": row.data_version,
                }
                for row in brokers
                if row.cluster_name == name
            ]
            result.append({"name": name, "brokers": members})
        return result

    def masters(
        self, cluster: str | None = None, broker_names: Iterable[str] | None = None
    ) -> list[tuple[str, str]]:
        """(broker name, address) of the masters in a cluster, or of the named brokers."""
        query = select(BrokerRow).where(BrokerRow.broker_id == MASTER_ID)
        if cluster is not None:
            query = query.where(BrokerRow.cluster_name == cluster)
        if broker_names is not None:
            query = query.where(BrokerRow.broker_name.in_(list(broker_names)))
        with self.sessions() as session:
            return [
                (row.broker_name, row.address)
                for row in session.scalars(query.order_by(BrokerRow.broker_name))
            ]
