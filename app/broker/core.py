"""The broker's operations as plain Python over the store, the hold service and the route
registry: topics, queue choice, idempotent produce, offsets, and pulls held until a message arrives.
Refusals are :mod:`app.broker.errors`; the HTTP and WebSocket adapters turn them into answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from wharf_client.sharding import queue_for_key
from wharf_client.unique_ids import UniqueIdGenerator

from app.broker import ha_metadata, plain, repeats
from app.broker.delay import DelayedDelivery, is_delayed
from app.broker.errors import (
    BadRequestError,
    InvalidOffsetError,
    InvalidParameterError,
    InvalidPropertyError,
    MisdirectedError,
    OffsetOutOfRangeError,
    QueueNotFoundError,
    TopicNotFoundError,
    TopicNotWritableError,
    WriteQueueError,
)
from app.broker.group_config import GroupConfig, GroupConfigs
from app.broker.groups import ConsumerGroups
from app.broker.ha_master import AppendSignal, HaMaster
from app.broker.ha_metadata import MetadataVersion
from app.broker.ha_role import HaRole
from app.broker.idempotency import IdempotencyWindow
from app.broker.listeners import Listeners
from app.broker.metrics import BrokerMetrics
from app.broker.outbound import Outbound
from app.broker.pull import read_or_hold
from app.broker.queue_locks import FILE_NAME as QUEUE_LOCKS_FILE
from app.broker.queue_locks import QueueLocks
from app.broker.queue_rates import QueueRates
from app.broker.topic_creator import TopicCreator
from app.broker.transactions import Transactions
from app.codec import RESERVED_PROPERTIES, IncomingMessage
from app.longpoll.hold import PullHoldService, Receive
from app.routing.service import RoutingService
from app.routing.topic_config import TopicConfig, TopicConfigManager
from app.settings import Settings
from app.store import GetMessageResult, Message, MessageFilter, MessageStore
from app.store.consumer_offsets import ConsumeFromWhere
from app.store.record import StoredMessage
from app.store.record_format import (
    NO_HOST,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SYSFLAG_PRODUCER_UNIQ_KEY,
    validate_topic,
)
from app.store.results import AppendResult

# An answer of produce: made for a stored message, the index of the same unique id's answer earlier
# in the batch, or the first message of a repeated unique id.
Answer = dict[str, Any] | int | StoredMessage


def parse_start(start: str) -> tuple[ConsumeFromWhere, int | None]:
    """``last``, ``first`` or a timestamp in ms: where a group without an offset starts."""
    if start == "last":
        return ConsumeFromWhere.LAST_OFFSET, None
    if start == "first":
        return ConsumeFromWhere.FIRST_OFFSET, None
    if start.isdigit():
        return ConsumeFromWhere.TIMESTAMP, int(start)
    raise InvalidParameterError(f"from must be last, first or a timestamp in ms, not {start!r}")


class Broker:
    def __init__(
        self,
        settings: Settings,
        store: MessageStore,
        topics: TopicConfigManager,
        holds: PullHoldService,
        routing: RoutingService | None = None,
        metrics: BrokerMetrics | None = None,
        ha_signal: AppendSignal | None = None,
        *,
        outbound: Outbound,
    ) -> None:
        self.settings = settings
        self.store = store
        self.topics = topics
        self.holds = holds
        self.routing = routing
        self.metrics = metrics or BrokerMetrics()
        # How the core reaches other processes (a slave's master, peers, check endpoints).
        self.outbound = outbound
        self.idempotency = IdempotencyWindow(settings.idempotency_window_s, settings.idempotency_max_entries)
        self.unique_ids = UniqueIdGenerator()
        # The next message without a queue of each topic takes this number modulo its write queues.
        self.round_robin: dict[str, int] = {}
        self.creator = TopicCreator(topics, self.topics_changed)
        self.queue_rates = QueueRates()  # produce rates per queue, sampled when asked for
        self.groups = ConsumerGroups(
            self.read_queue_count, settings.consumer_expiry_s, max_members=settings.max_group_members
        )
        self.group_configs = GroupConfigs(
            store.config.config_dir, GroupConfig(max_reconsume_times=settings.max_reconsume_times)
        )
        self.queue_locks = QueueLocks(
            store.config.config_dir / QUEUE_LOCKS_FILE, int(settings.lock_expiry_s * 1000)
        )
        self.delays = DelayedDelivery(
            settings, store, lambda name: config.queue_nums if (config := topics.get(name)) else 0
        )
        self.transactions = Transactions(self)
        # Replication: a master streams to slaves, a slave copies its master (app.broker.ha_role).
        self.metadata = MetadataVersion()  # bumped by topic changes; slaves wait on it
        # Services above the broker whose metadata slaves copy too, by the answer's key.
        self.metadata_parts: dict[str, ha_metadata.MetadataPart] = {}
        self.master_offsets: dict[ha_metadata.OffsetKey, int] = {}  # a slave's: the master's, last seen
        # Cursors above the core (subscribers, event streams, pushers) that end when the log is cut.
        self.log_cut_listeners = Listeners("the log's cut")
        self.ha = HaRole(self, ha_signal or AppendSignal())

    # -- replication -----------------------------------------------------------------------------

    @property
    def is_slave(self) -> bool:
        return self.ha.is_slave

    def require_master(self) -> HaMaster:
        """This broker's master side; MisdirectedError (naming the master) on a slave."""
        if self.ha.master is None:
            raise self.ha.slave_refusal("replication")
        return self.ha.master

    def refuse_on_slave(self, what: str) -> None:
        """MisdirectedError (naming the master) on a slave: ``what`` is changed on the master only."""
        if self.is_slave:
            raise self.ha.slave_refusal(what)

    async def master_metadata(self, version: int, wait_ms: int) -> dict[str, Any]:
        """A master's topic configurations and offsets for a slave (app.broker.ha_metadata), once
        its metadata version is not ``version`` or ``wait_ms`` (at most WHARF_MAX_WAIT_MS, as a held
        pull) have passed."""
        self.require_master()
        await self.metadata.wait_past(version, min(wait_ms, self.settings.max_wait_ms) / 1000)
        return ha_metadata.snapshot(
            self.metadata.version, self.topics, self.store, self.delays.schedule.offsets, self.metadata_parts
        )

    async def apply_master_metadata(self, answer: dict[str, Any]) -> None:
        """A slave takes its master's topic configurations and the offsets ahead of its own."""
        upserted, deleted = await asyncio.to_thread(
            ha_metadata.apply_topics, self.topics, self.store, answer["topics"]
        )
        for name in deleted:
            self.metrics.forget_topic(name)
        if upserted or deleted:
            await self.topics_changed(upserted, deleted)
        await asyncio.to_thread(ha_metadata.apply_offsets, self.store, answer["offsets"])
        self.master_offsets = ha_metadata.offsets_of(answer["offsets"])
        if not self.delays.started:
            await asyncio.to_thread(self.delays.schedule.follow, answer.get("delay_offsets", []))
        for name, part in self.metadata_parts.items():
            if name in answer:  # a master without the part leaves the slave's as it is
                await part.follow_metadata(answer[name])

    async def offsets_ahead_of_master(self) -> list[dict[str, Any]]:
        """A slave's committed offsets ahead of its master's last answer: handed to the master.
        None until its log follows the master's (replication connected): before, a former master's
        offsets may cover messages only it had, at queue offsets the master fills with others."""
        slave = self.ha.slave
        if slave is None or not slave.connected:
            return []
        return await asyncio.to_thread(ha_metadata.offsets_ahead, self.store, self.master_offsets)

    def log_cut(self) -> None:
        """This slave's log was cut to follow its master: its groups' members read again, and so
        does every cursor registered with :meth:`on_log_cut` (called on the event loop)."""
        self.groups.log_cut()
        self.log_cut_listeners.call()

    def on_log_cut(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` each time this broker's log is cut under its queue offsets (a former
        master, or a slave, cut back to follow its master): other messages will be stored at the
        offsets cut, so a cursor past them would skip those, and a commit of what it read would
        pass them. The listener runs on the event loop, before the slave copies anything more; it
        must end its cursor there and then, without a commit. Returns the function that removes it."""
        return self.log_cut_listeners.add(listener)

    async def take_slave_offsets(self, found: list[dict[str, Any]]) -> int:
        """A master takes the offsets a slave committed that are ahead of its own; how many moved.
        Its slaves hear of them at once (the metadata version moves)."""
        self.require_master()
        moved = await asyncio.to_thread(ha_metadata.apply_offsets, self.store, found, True)
        if moved:
            self.metadata.bump()
        return moved

    # -- topics ----------------------------------------------------------------------------------

    async def _not_here(self, name: str) -> TopicNotFoundError | MisdirectedError:
        """The error for a topic this broker does not have: misdirected if others host it."""
        if self.routing is not None:
            elsewhere = await self.routing.brokers_hosting(name)
            if elsewhere:
                return MisdirectedError(
                    f"topic {name!r} is not served by this broker; send to one of {elsewhere}", elsewhere
                )
        return TopicNotFoundError(f"topic {name!r} not found")

    async def topic(self, name: str) -> TopicConfig:
        config = self.topics.get(name)
        if config is None:
            raise await self._not_here(name)
        return config

    async def topic_for_write(self, name: str) -> TopicConfig:
        config = self.topics.get(name)
        if config is None:
            if not self.settings.auto_create_topics:
                raise await self._not_here(name)
            validate_topic(name, self.settings.max_topic_length)  # InvalidTopicError
            error = await self._not_here(name)
            if isinstance(error, MisdirectedError):
                raise error
            queues = self.settings.default_topic_queue_nums
            ((config, _),) = await self.creator.create([TopicConfig(name, queues, queues)])
        if not config.writable:
            raise TopicNotWritableError(f"topic {name!r} does not accept messages")
        return config

    def read_queue_count(self, name: str) -> int:
        """The topic's read queues here; 0 when it is not here (a group's members then read none)."""
        config = self.topics.get(name)
        return config.read_queue_nums if config is not None else 0

    async def queue_of(self, name: str, queue_id: int) -> TopicConfig:
        config = await self.topic(name)
        if not 0 <= queue_id < config.queue_nums:
            raise QueueNotFoundError(f"topic {name!r} has queues 0..{config.queue_nums - 1}, not {queue_id}")
        return config

    async def delete_topic(self, name: str) -> None:
        """Delete a topic here: its configuration, queues, groups' offsets and its messages (which
        never come back, not even for a retried unique id)."""
        self.refuse_on_slave("topic changes")
        await self.topic(name)
        await self.require_registry()
        await asyncio.to_thread(self.topics.delete, name)
        await asyncio.to_thread(self.store.delete_topic, name)
        self.metrics.forget_topic(name)
        self.queue_rates.forget(name)
        await self.topics_changed(deleted=[name])

    async def require_registry(self) -> None:
        """Raise RegistryUnavailableError (503) before a change the route registry must take."""
        if self.routing is not None:
            await self.routing.require()

    async def topics_changed(self, upserted: Iterable[TopicConfig] = (), deleted: Iterable[str] = ()) -> None:
        """Publish these created or deleted topics to the route registry (everything when none given)."""
        self.metadata.bump()
        if self.routing is not None:
            await self.routing.topics_changed(upserted, deleted)

    async def topics_published(self) -> None:
        """Publish a topic change that a failed publication left for the next heartbeat."""
        if self.routing is not None and not self.routing.published:
            await self.routing.topics_changed()

    # -- producing -------------------------------------------------------------------------------

    def choose_queue(self, config: TopicConfig, incoming: IncomingMessage) -> int:
        queues = config.write_queue_nums
        if incoming.queue_id is not None:
            if incoming.queue_id >= queues:
                raise WriteQueueError(
                    f"topic {config.name!r} has write queues 0..{queues - 1}, not {incoming.queue_id}"
                )
            return incoming.queue_id
        if incoming.sharding_key is not None:
            return queue_for_key(incoming.sharding_key, queues)
        turn = self.round_robin.get(config.name, 0)
        self.round_robin[config.name] = turn + 1
        return turn % queues

    def to_message(
        self, topic: str, queue_id: int, incoming: IncomingMessage, unique_id: str, born_host: bytes = NO_HOST
    ) -> Message:
        properties = incoming.properties
        if properties:
            reserved = RESERVED_PROPERTIES.intersection(properties)
            if reserved:
                raise InvalidPropertyError(
                    f"properties {sorted(reserved)} are reserved: use the fields tags, keys, unique_id, "
                    "delay_level, delay_ms and deliver_at_ms"
                )
            empty = [name for name, value in properties.items() if not value]
            if empty:
                raise InvalidPropertyError(
                    f"property {empty[0]!r} has an empty value: RocketMQ's decoder drops such a "
                    "property, so Wharf does not store it; leave it out or give it a value"
                )
            properties = dict(properties)
        else:
            properties = {}
        if incoming.tags:
            properties[PROPERTY_TAGS] = incoming.tags
        if incoming.keys:
            for key in incoming.keys:
                if not key or key.split() != [key]:
                    raise InvalidPropertyError(f"key {key!r} is empty or holds whitespace")
            properties[PROPERTY_KEYS] = " ".join(incoming.keys)
        properties[PROPERTY_UNIQ_KEY] = unique_id
        return Message(
            topic,
            incoming.body,
            queue_id,
            properties,
            flag=incoming.flag,
            born_timestamp=incoming.born_timestamp,
            born_host=born_host,
        )

    async def produce(
        self, topic: str, batch: Sequence[IncomingMessage], born_host: bytes = NO_HOST
    ) -> list[dict[str, Any]]:
        """Store a batch in one append; results in request order. Repeats of a producer's unique id
        within the idempotency window are answered with the first message and not stored again.
        A batch of plain messages is encoded in one compiled call (:func:`plain.produce_messages`);
        any other takes :meth:`produce_general`. ``born_host`` is the producer's address
        (:func:`~app.store.record_format.encode_host`), stored in every record."""
        stored = await plain.produce_messages(self, topic, batch, born_host)
        if stored is not None:
            return stored
        return await self.produce_general(topic, batch, born_host)

    async def produce_general(
        self, topic: str, batch: Sequence[IncomingMessage], born_host: bytes = NO_HOST
    ) -> list[dict[str, Any]]:
        """:meth:`produce` for any batch: message by message in Python (the compiled path's twin)."""
        self.ha.check_writable("messages")
        config = await self.topic_for_write(topic)
        window = self.idempotency if self.idempotency.enabled else None
        answers: list[Answer] = []
        fresh: list[tuple[int, str, str | None]] = []  # (answer index, unique id, as supplied)
        first_in_batch: dict[str, int] = {}  # supplied unique id -> answer index of its first copy
        messages: list[Message] = []
        delayed: set[int] = set()  # indexes in messages of those moved to wait for their time
        for incoming in batch:
            supplied = incoming.unique_id
            if supplied is not None and window is not None:
                earlier: int | StoredMessage | None = first_in_batch.get(supplied)
                if earlier is None:
                    earlier = repeats.stored_first(self, window, topic, supplied)
                if earlier is not None:
                    answers.append(earlier)
                    continue
                first_in_batch[supplied] = len(answers)
            unique_id = supplied or self.unique_ids.next()
            message = self.to_message(
                topic, self.choose_queue(config, incoming), incoming, unique_id, born_host
            )
            if supplied is not None:
                message.sysflag |= SYSFLAG_PRODUCER_UNIQ_KEY
            if is_delayed(incoming) and self.delays.schedule_message(
                message, incoming, int(time.time() * 1000)
            ):
                delayed.add(len(messages))
            messages.append(message)
            fresh.append((len(answers), unique_id, supplied))
            answers.append({})
        if messages:
            woken = self.holds.woken
            appended = self.store.append(messages)
            self.metrics.count_produced(topic, len(messages), sum(len(message.body) for message in messages))
            if self.holds.woken != woken:
                # The pulls this append woke answer before the producer does: end-to-end latency
                # is the consumer's, and the producer's answer waits one turn of the loop.
                await asyncio.sleep(0)
            if delayed:
                self.delays.wakeup()
            if window is not None:
                # Remembered before the group commit: a retry that races this request finds the
                # record and waits for the same group commit, instead of storing a copy.
                window.put_many(
                    topic,
                    (
                        (supplied, result.physical_offset)
                        for (_, _, supplied), result in zip(fresh, appended, strict=True)
                        if supplied is not None
                    ),
                )
            status = self.acknowledge_now(appended) or await self.acknowledge(appended)
            for position, ((index, unique_id, _), result) in enumerate(zip(fresh, appended, strict=True)):
                made: dict[str, Any] = {
                    "msg_id": result.msg_id,
                    "unique_id": unique_id,
                    "queue_id": result.queue_id,
                    "queue_offset": result.queue_offset,
                    "status": status,
                }
                if position in delayed:
                    made.update(self.delays.answer(messages[position], result))
                answers[index] = made
        results: list[dict[str, Any]] = []
        for answer in answers:
            if isinstance(answer, int):  # a repeat within this batch
                results.append(results[answer])
            elif isinstance(answer, StoredMessage):
                results.append(await repeats.answer_from_log(self, topic, answer))
            else:
                results.append(answer)
        return results

    async def produce_batch(
        self, topic: str, data: bytes, born_host: bytes = NO_HOST
    ) -> list[dict[str, Any]] | None:
        """Store a binary batch of plain messages in one compiled call (:func:`plain.produce_plain`);
        None when it is not one: parse it and call :meth:`produce`."""
        stored = await plain.produce_plain(self, topic, [data], born_host)
        return stored[0] if stored else None

    async def produce_batches(
        self, topic: str, batches: Sequence[bytes], born_host: bytes = NO_HOST
    ) -> list[list[dict[str, Any]]]:
        """Store binary batches in order, in one append, up to the first that is not plain
        (:func:`plain.produce_plain`); the answers of those stored."""
        return await plain.produce_plain(self, topic, batches, born_host)

    def acknowledges_at_once(self) -> bool:
        """Whether neither the flush mode nor the replication mode makes an acknowledgement wait
        (ASYNC_FLUSH, no SYNC_MASTER): :meth:`acknowledge_now` then answers."""
        return self.store.group_commit is None and self.ha.confirms_at_once()

    def acknowledge_now(self, appended: Sequence[AppendResult]) -> str | None:
        """:meth:`acknowledge` without waiting when :meth:`acknowledges_at_once`: SEND_OK; None when
        it must be awaited."""
        if self.store.group_commit is not None:
            return None
        return self.ha.confirm_now(appended[-1].end_offset)  # the results are in log order

    async def acknowledge(self, appended: Sequence[AppendResult]) -> str:
        """The status of appended messages once they are as durable as the flush mode and the
        replication mode promise: SEND_OK, or which promise timed out."""
        durable = True
        if self.store.group_commit is not None:
            durable = await self.store.wait_durable(appended)
        if not durable:
            return "FLUSH_DISK_TIMEOUT"
        return await self.ha.confirm(appended[-1].end_offset)  # the results are in log order

    def restore_idempotency(self) -> int:
        """Rebuild the idempotency window from the CommitLog (:func:`repeats.restore_window`)."""
        return repeats.restore_window(self)

    def resolve_pull_offset(
        self,
        topic: str,
        queue_id: int,
        offset: int | None,
        group: str | None,
        commit_offset: int | None,
        start: str = "last",
    ) -> int:
        """The offset a pull reads from: the one asked for, else the group's committed offset."""
        if commit_offset is not None:
            if group is None:
                raise BadRequestError("commit_offset needs a group")
            if commit_offset < 0:
                raise InvalidOffsetError(f"commit_offset must be 0 or more, got {commit_offset}")
            self.commit_offset(group, topic, queue_id, commit_offset)
        if offset is not None:
            return offset
        if group is None:
            raise BadRequestError("give an offset, or a group to read from its committed offset")
        policy, timestamp_ms = parse_start(start)
        return self.group_offset(group, topic, queue_id, policy, timestamp_ms)

    def check_commit(self, topic: str, queue_id: int, offset: int) -> None:
        """An offset can be committed only within the queue's [min offset, max offset]."""
        low, high = self.store.min_offset(topic, queue_id), self.store.max_offset(topic, queue_id)
        if not low <= offset <= high:
            raise OffsetOutOfRangeError(topic, queue_id, offset, low, high)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit ``offset`` as the group's next offset on the queue; OFFSET_OUT_OF_RANGE if it is
        outside the queue's [min offset, max offset]."""
        self.check_commit(topic, queue_id, offset)
        self.store.consumer_offsets.commit(group, topic, queue_id, offset)

    def group_offset(
        self,
        group: str,
        topic: str,
        queue_id: int,
        start: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET,
        timestamp_ms: int | None = None,
    ) -> int:
        """The group's committed offset, else where its start policy says (RocketMQ's
        computePullFromWhere): the last offset, the first, or the first at or after a time."""
        return self.store.consumer_offsets.start_offset(group, topic, queue_id, start, timestamp_ms)

    async def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        message_filter: MessageFilter | None,
        max_wait_ms: int,
        receive: Receive | None = None,
        group: str | None = None,
    ) -> GetMessageResult:
        """Read from ``offset``; with nothing new and a wait allowed, hold until a matching message
        arrives or the wait ends. Non-matching messages move the offset on while holding. What it
        hands out is counted for ``group`` (None: a pull without a group)."""
        wait_s = min(max_wait_ms, self.settings.max_wait_ms) / 1000
        metrics = self.metrics
        long_poll = int(wait_s > 0)  # counted as held while it runs
        metrics.long_polls_held += long_poll
        try:
            read = await read_or_hold(
                self.store, self.holds, topic, queue_id, offset, max_messages, message_filter, wait_s, receive
            )
        finally:
            metrics.long_polls_held -= long_poll
        if read.result.records:
            metrics.count_consumed(topic, group, len(read.result.records))
        return read.result
