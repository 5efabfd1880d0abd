"""A batch transaction: one transaction id for a whole binary produce batch.

A per-message transaction (:mod:`app.broker.transaction_message`) costs a half record, an entry in
the open table and a copy at commit for every message. A batch transaction stores the producer's
binary batch as it came, as the body of **one** half record (TRAN_BATCH the number of messages it
holds, REAL_QID -1: its messages choose their queues at commit); the open table, the checks, the
checkpoint and recovery treat it as any half message. Its commit encodes the batch's records as a
plain produce does (the compiled ``encode_batch`` when the batch is plain, the broker's general
path otherwise) and appends them and the op record in one append: the messages become visible
together. A crash in the middle of that append can leave the first messages and not the op record:
the broker cuts them off as it starts (:mod:`app.broker.transaction_torn`), so a crash leaves
either all of them and the op record, or neither. A rollback appends the op record only.

A producer may name a batch transaction with a **transaction key** (the half record's KEYS): a
begin that repeats a key of the same topic and producer group stores nothing and answers the
earlier transaction and its state (open, committed or rolled back), however long ago it began, as
long as the half record is stored. This is what lets a replayed write find what it did before.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.broker.delay import is_delayed
from app.broker.errors import InvalidParameterError
from app.broker.plain import plain_encoder
from app.broker.transaction_message import HALF_TOPIC, half_message, transaction_id_of
from app.codec import BatchFormatError, IncomingMessage, parse_batch
from app.routing.topic_config import TopicConfig
from app.store import Message
from app.store.commit_log import skips_consume_queue
from app.store.kernel import compiled
from app.store.record import StoredMessage
from app.store.record_format import (
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    SYSFLAG_PRODUCER_UNIQ_KEY,
    EncodedRecord,
    encode_record,
    validate_topic,
)

if TYPE_CHECKING:
    from app.broker.transaction_broker import Broker

PROPERTY_TRANSACTION_BATCH = "TRAN_BATCH"  # how many messages a batch transaction's half holds
MAX_TRANSACTION_KEY = 128
COMMIT_ID_PREFIX_BYTES = 10  # 20 hex digits, as the generator's prefix: ids of 32 digits


class EncodedEnd:
    """Records ready for one append: the records, their bytes and their ConsumeQueue entries."""

    __slots__ = ("records", "total_size", "entries", "supplied", "body_bytes")

    def __init__(self) -> None:
        self.records: list[EncodedRecord] = []
        self.total_size = 0
        self.body_bytes = 0
        self.entries: dict[tuple[str, int], int] = {}
        self.supplied = False  # some record carries a producer's own unique id

    def add(self, record: EncodedRecord) -> None:
        self.records.append(record)
        self.total_size += len(record.data)
        if not skips_consume_queue(record.sysflag):
            key = (record.topic, record.queue_id)
            self.entries[key] = self.entries.get(key, 0) + 1

    def extend(self, other: EncodedEnd) -> None:
        self.records.extend(other.records)
        self.total_size += other.total_size
        self.body_bytes += other.body_bytes
        for key, count in other.entries.items():
            self.entries[key] = self.entries.get(key, 0) + count
        self.supplied = self.supplied or other.supplied


def validate_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not key or len(key) > MAX_TRANSACTION_KEY or key.split() != [key]:
        raise InvalidParameterError(
            f"transaction_key must be 1 to {MAX_TRANSACTION_KEY} characters without whitespace"
        )
    return key


def is_batch(half: StoredMessage) -> bool:
    return PROPERTY_TRANSACTION_BATCH in half.properties


def batch_size_of(half: StoredMessage) -> int:
    return int(half.properties.get(PROPERTY_TRANSACTION_BATCH, "1"))


def key_of(half: StoredMessage) -> str | None:
    return half.properties.get(PROPERTY_KEYS) or None


def parse(data: bytes) -> list[IncomingMessage]:
    """The messages of a binary batch; InvalidParameterError when it is malformed, empty or delayed."""
    try:
        batch = parse_batch(data)
    except BatchFormatError as exc:
        raise InvalidParameterError(f"malformed batch: {exc}") from None
    if not batch:
        raise InvalidParameterError("the batch holds no message")
    if any(is_delayed(incoming) for incoming in batch):
        raise InvalidParameterError("a transactional message cannot be delayed")
    return batch


def half_batch(
    topic: str, data: bytes, count: int, producer_group: str, key: str | None, born_host: bytes
) -> Message:
    """The half record of a batch transaction: ``data`` (the binary batch) as its body, and the
    producer's address (``born_host``), which its commit gives each message."""
    properties = {PROPERTY_TRANSACTION_BATCH: str(count)}
    if key is not None:
        properties[PROPERTY_KEYS] = key
    message = Message(topic, data, 0, properties, born_host=born_host)
    half = half_message(message, producer_group)
    half.properties[PROPERTY_REAL_QUEUE_ID] = "-1"
    return half


def matches(half: StoredMessage, topic: str, producer_group: str, key: str) -> bool:
    """Whether ``half`` is a copy of the batch transaction ``key`` names for this topic and group."""
    properties = half.properties
    return (
        half.topic == HALF_TOPIC
        and PROPERTY_TRANSACTION_BATCH in properties
        and properties.get(PROPERTY_KEYS) == key
        and properties.get(PROPERTY_REAL_TOPIC) == topic
        and properties.get(PROPERTY_PRODUCER_GROUP) == producer_group
    )


def commit_ids(transaction_id: str) -> tuple[str, int]:
    """The unique ids a batch transaction's commit gives the messages that came without one:
    (prefix, first counter), from the transaction id alone. A commit made again (after a crash
    tore the first, :mod:`app.broker.transaction_torn`) gives the same ids, and no id the broker's
    own generator gives can be one of them (its prefix is its host, process and a random salt)."""
    return hashlib.blake2b(transaction_id.encode(), digest_size=COMMIT_ID_PREFIX_BYTES).hexdigest().upper(), 0


def encode_messages(
    broker: Broker,
    config: TopicConfig,
    batch: Sequence[IncomingMessage],
    born_host: bytes,
    now_ms: int,
    unique_ids: tuple[str, int] | None = None,
) -> EncodedEnd:
    """The records of ``batch`` as the broker's general produce path makes them (queues chosen,
    unique ids given - from ``unique_ids``' prefix and counter when given, else the broker's -
    properties checked); MessageRejectedError or a BrokerError for a bad one."""
    store = broker.store
    end = EncodedEnd()
    check_fits = store.commitlog.check_fits
    counter = unique_ids[1] if unique_ids is not None else 0
    for incoming in batch:
        supplied = incoming.unique_id
        if supplied is not None:
            unique_id = supplied
        elif unique_ids is not None:
            unique_id = f"{unique_ids[0]}{counter & 0xFFFFFFFFFFFF:012X}"
            counter += 1
        else:
            unique_id = broker.unique_ids.next()
        message = broker.to_message(
            config.name, broker.choose_queue(config, incoming), incoming, unique_id, born_host
        )
        if supplied is not None:
            message.sysflag |= SYSFLAG_PRODUCER_UNIQ_KEY
            end.supplied = True
        record = encode_record(message, store.store_host, now_ms, store.limits)
        check_fits(len(record.data))
        end.add(record)
        end.body_bytes += len(message.body)
    return end


def encode_plain(
    broker: Broker,
    config: TopicConfig,
    data: bytes,
    born_host: bytes,
    now_ms: int,
    unique_ids: tuple[str, int] | None = None,
) -> EncodedEnd | None:
    """The records of the binary batch ``data`` in one compiled call, as a plain produce makes them
    (unique ids from ``unique_ids``' prefix and counter when given, else the broker's); None when
    the kernel is not loaded or the batch is not plain (then :func:`encode_messages`)."""
    if compiled is None:
        return None
    store = broker.store
    limits = store.limits
    topic = config.name
    round_robin = broker.round_robin.get(topic, 0)
    encoder = plain_encoder(
        store,
        config,
        validate_topic(topic, limits.max_topic_length),
        now_ms,
        round_robin,
        unique_ids or (broker.unique_ids.prefix, broker.unique_ids.counter),
        born_host,
    )
    if not compiled.encode_batch(data, encoder):
        return None
    made, ids, queues, size, body_size, round_robin_after, counter_after = encoder.result()
    broker.round_robin[topic] = round_robin_after
    if unique_ids is None:
        broker.unique_ids.counter = counter_after
    end = EncodedEnd()
    end.records = list(made)
    end.total_size = size
    end.body_bytes = body_size
    end.entries = dict(queues)
    end.supplied = bool(ids)
    return end


def encode_commit(
    broker: Broker, config: TopicConfig, half: StoredMessage, now_ms: int | None = None
) -> EncodedEnd:
    """The records a batch transaction's commit makes visible, in the batch's order; the messages
    without a unique id of their own get the transaction's (:func:`commit_ids`)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    data = bytes(half.body)
    ids = commit_ids(transaction_id_of(half))
    end = encode_plain(broker, config, data, half.born_host, now, ids)
    if end is None:
        end = encode_messages(broker, config, parse(data), half.born_host, now, ids)
    return end
