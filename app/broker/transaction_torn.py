"""A transaction's commit torn by a crash: found at start and cut back whole.

A commit appends the messages it makes visible and then its op record in one append (a commit of
many transactions appends each one's records in turn). A crash in the middle of that copy (a
SIGKILL, a power loss) can leave the first messages whole and the rest, op record included, not:
recovery keeps every whole record, so the transaction would be open again while some of its
messages were visible, and the commit that finishes it (a rerun, the resolve command, a check)
would store those again.

So before anything reads the log's tail at start, the broker looks at its last record, and cuts
the log back to where a torn commit begins when the log ends with one:

* a single message's commit: a record with sysflag TRANSACTION_COMMIT whose prepared transaction
  offset names the half copy of a transaction still open;
* a batch transaction's (:mod:`app.broker.transaction_batch`): the first ``j`` messages of an open
  batch transaction's commit - the same records its commit makes now (body, properties and unique
  ids: a commit gives the messages without an id of their own ids made from the transaction id,
  :func:`~app.broker.transaction_batch.commit_ids`), contiguous, ending where the log ends, and
  written by one append (one store time, one born time).

The transaction is then open with none of its messages visible, as if the crash had come before
the commit, and the commit that finishes it stores each message once.

Left alone: a slave (the master it follows cuts its tail at the handshake), and a torn commit
followed by other records (a commit is one append, so only the log's last append can be torn).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from app.broker.errors import BrokerError
from app.broker.transaction_batch import encode_commit, is_batch
from app.broker.transaction_message import HALF_TOPIC, OP_TOPIC, SYSFLAG_TRANSACTION_COMMIT
from app.store.errors import CorruptRecordError, StoreError
from app.store.record import StoredMessage, decode_record
from app.store.record_format import SYSFLAG_TRANSACTION_MASK

if TYPE_CHECKING:
    from app.broker.transaction_broker import Broker
    from app.broker.transaction_table import OpenTransaction, TransactionTable
    from app.store import MessageStore

log = logging.getLogger(__name__)


def torn_commit(broker: Broker, table: TransactionTable) -> tuple[str, int] | None:
    """(transaction id, CommitLog offset where its torn commit begins) when the log ends with one;
    else None. Reads the disk: call it off the event loop, before requests."""
    store = broker.store
    last_offset = store.commitlog.last_record_offset
    if last_offset < 0:
        return None
    last = store.look_message(last_offset)
    if last is None or last.topic in (HALF_TOPIC, OP_TOPIC):
        return None
    if last.sysflag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_COMMIT:
        # A single message's commit: its message names the half copy it makes visible.
        for entry in table.open.values():
            if entry.physical_offset == last.prepared_transaction_offset:
                return entry.transaction_id, last_offset
        return None
    end = last_offset + last.size
    for entry in table.open.values():
        if entry.topic != last.topic or entry.physical_offset >= last_offset:
            continue
        start = _commit_start(broker, entry, last, end)
        if start is not None:
            return entry.transaction_id, start
    return None


def cut_torn_commit(broker: Broker, table: TransactionTable) -> int | None:
    """Cut a torn commit off the log's end (see the module); the offset cut back to, if any."""
    found = torn_commit(broker, table)
    if found is None:
        return None
    transaction_id, start = found
    log.warning(
        "the commit of transaction %s was torn by a crash: cutting its %d bytes off the log",
        transaction_id,
        broker.store.commitlog.max_offset - start,
    )
    broker.store.cut_back(start)
    return start


def _commit_start(broker: Broker, entry: OpenTransaction, last: StoredMessage, end: int) -> int | None:
    """Where the commit of ``entry`` begins if the log up to ``end`` ends with its first messages."""
    store = broker.store
    half = store.look_message(entry.physical_offset)
    if half is None or not is_batch(half) or last.body not in half.body:
        return None
    config = broker.topics.get(entry.topic)
    if config is None:
        return None
    # The records its commit makes now: the same bytes, unique ids included (supplied, or the
    # transaction's own), but for queues, offsets and times. Encoding moves the round robin: undo it.
    topic = entry.topic
    round_robin = broker.round_robin.get(topic, 0)
    try:
        expected = [decode_record(record.data) for record in encode_commit(broker, config, half).records]
    except (BrokerError, StoreError):  # a batch its commit refuses now was not committed either
        return None
    finally:
        broker.round_robin[topic] = round_robin
    starts, total = [], 0  # where the commit begins if its first j + 1 messages were written
    for record in expected:
        total += record.size
        starts.append(end - total)
    # The most messages first: with repeated bodies the last record could be more than one of the
    # batch's messages, and every one of the j records must match.
    for j in range(len(expected), 0, -1):
        start = starts[j - 1]
        if (
            start > entry.physical_offset
            and _same(expected[j - 1], last)
            and _written(store, start, expected[:j])
        ):
            return start
    return None


def _written(store: MessageStore, start: int, expected: list[StoredMessage]) -> bool:
    """Whether the log holds ``expected`` from ``start`` on, one after the other, from one append."""
    offset = start
    first: StoredMessage | None = None
    for record in expected:
        try:
            stored = store.look_message(offset)
        except CorruptRecordError:
            return False
        if stored is None or stored.size != record.size or not _same(record, stored):
            return False
        if first is None:
            first = stored
        elif (stored.store_timestamp, stored.born_timestamp) != (first.store_timestamp, first.born_timestamp):
            return False
        offset += stored.size
    return True


def _same(expected: StoredMessage, stored: StoredMessage) -> bool:
    """The record a commit makes now and a stored one: the same message, unique id included. So
    not a produce of the same messages: the ids the broker gives it come from its generator, never
    a transaction's. Only a produce carrying the very ids the producer supplied for the
    transaction's messages could pass, and the idempotency window answers such a repeat without
    storing it for as long as it remembers them."""
    return (
        stored.topic == expected.topic
        and stored.body == expected.body
        and stored.properties == expected.properties
        and stored.sysflag == expected.sysflag
        and stored.flag == expected.flag
        and stored.born_host == expected.born_host
    )
