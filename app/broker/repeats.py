"""Repeated produces: a unique id the idempotency window remembers is answered from the message
stored first, and the window is rebuilt from the CommitLog at start."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from app.broker.idempotency import IdempotencyWindow
from app.store.record import StoredMessage
from app.store.record_format import SYSFLAG_PRODUCER_UNIQ_KEY
from app.store.results import AppendResult, PutStatus

if TYPE_CHECKING:
    from app.broker.delay import DelayedDelivery
    from app.broker.ha_role import HaRole
    from app.store import MessageStore


class Broker(Protocol):
    """What answering a repeat needs of the broker core."""

    store: MessageStore
    delays: DelayedDelivery
    idempotency: IdempotencyWindow
    ha: HaRole


def stored_first(
    broker: Broker, window: IdempotencyWindow, topic: str, unique_id: str
) -> StoredMessage | None:
    """The first message of ``unique_id`` if the window remembers it, else None. Checked against
    the record: a digest collision, a record gone with retention or a deleted topic's record is
    a miss, never a wrong answer."""
    physical_offset = window.find((topic, unique_id))
    if physical_offset is None:
        return None
    first = broker.store.query_message_by_unique_id_at(topic, unique_id, physical_offset)
    return first or broker.delays.scheduled_first(topic, unique_id, physical_offset)


async def answer_from_log(broker: Broker, topic: str, first: StoredMessage) -> dict[str, Any]:
    """The answer for a repeat: the first message, SEND_OK once it is as durable as the flush
    mode and the replication mode promise (so a retry racing the first request waits for the same
    group commit, and a retry of a message a SYNC_MASTER answered SLAVE_NOT_AVAILABLE is answered
    SEND_OK only once a slave holds it: promised otherwise, a failover to a slave without it
    would lose an acknowledged message)."""
    durable = True
    if broker.store.group_commit is not None:
        result = AppendResult(
            PutStatus.PUT_OK,
            topic,
            first.queue_id,
            first.queue_offset,
            first.physical_offset,
            first.size,
            first.store_timestamp,
            first.store_host,
        )
        durable = await broker.store.wait_durable([result])
    answer = {
        "msg_id": first.msg_id,
        "unique_id": first.unique_id,
        "queue_id": first.queue_id,
        "queue_offset": first.queue_offset,
        "status": await broker.ha.confirm(first.physical_offset + first.size)
        if durable
        else "FLUSH_DISK_TIMEOUT",
    }
    if first.topic != topic:  # a scheduled message, waiting in an internal topic
        answer.update(broker.delays.answer_from_log(first))
    return answer


def restore_window(broker: Broker) -> int:
    """Rebuild the idempotency window from the messages stored within it whose unique id the
    producer chose: a retry after a restart is still recognised. Reads the CommitLog: run it
    off the event loop, before the broker takes requests. Returns how many ids it restored."""
    window = broker.idempotency
    if not window.enabled:
        return 0
    now_ms = time.time() * 1000
    since_ms = int(now_ms - window.window_s * 1000)
    return window.restore(
        (
            (broker.delays.idempotency_topic(offset, record.topic), record.uniq_key),
            offset,
            (now_ms - record.store_timestamp) / 1000,
        )
        for offset, record in broker.store.records_since(since_ms)
        if record.sysflag & SYSFLAG_PRODUCER_UNIQ_KEY
    )


# -- pulling ---------------------------------------------------------------------------------
