"""A transactional message on its way (RocketMQ's half message): the system topics it and its end
live in, the properties that say where it goes, and the records the broker writes for it.

* A **half message** is stored in queue 0 of ``RMQ_SYS_TRANS_HALF_TOPIC``, its real topic and queue
  in REAL_TOPIC and REAL_QID, TRAN_MSG ``true`` and its producer group in PGROUP. No consumer reads
  that topic, so the message is invisible until it is committed. Its **transaction id** is the
  first copy's message id (store host and CommitLog offset: the id finds the record).
* A check makes a new copy at the end of the half queue with TRANSACTION_CHECK_TIMES one higher
  and TRANSACTION_ID naming the first copy: the count survives a restart, and the check service's
  progress moves past the old copy.
* **Commit** appends the real message (body, unique id, keys, tags, user properties, flag and born
  time kept; sysflag COMMIT) to its topic and queue, then an **op record**; **rollback** appends
  the op record only. An op record sits in queue 0 of ``RMQ_SYS_TRANS_OP_HALF_TOPIC``: body the half
  copy's queue offset (as RocketMQ writes it), tag ``d``, key the transaction id (so the outcome
  can be looked up), TRANSACTION_STATE ``COMMITTED`` or ``ROLLED_BACK``.

System topics have no topic configuration: they are not listed, created, produced to, pulled,
popped, subscribed or deleted, and a lookup by key names the real topic, never them.
"""

from __future__ import annotations

import enum
import re

from app.broker.delay_message import copy_message
from app.store import Message
from app.store.record import StoredMessage
from app.store.record_format import (
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_STATE,
    SYSFLAG_PRODUCER_UNIQ_KEY,
)
from app.store.record_format import PROPERTY_TRANSACTION_CHECK_TIMES as PROPERTY_CHECK_TIMES

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANSACTION_TOPICS = frozenset({HALF_TOPIC, OP_TOPIC})

# What a producer may not set: the broker writes them.
TRANSACTION_PROPERTIES = frozenset(
    {
        PROPERTY_TRANSACTION_PREPARED,
        PROPERTY_PRODUCER_GROUP,
        PROPERTY_CHECK_TIMES,
        PROPERTY_TRANSACTION_ID,
        PROPERTY_TRANSACTION_STATE,
    }
)
# Dropped from the message a commit makes visible, and from what a check or the pending list shows.
_HALF_ONLY = (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_CHECK_TIMES, PROPERTY_TRANSACTION_ID)

OP_TAG = "d"  # RocketMQ's TransactionalMessageUtil.REMOVE_TAG
SYSFLAG_TRANSACTION_COMMIT = 0x8  # RocketMQ's MessageSysFlag.TRANSACTION_COMMIT_TYPE

PRODUCER_GROUP_PATTERN = re.compile(r"[a-zA-Z0-9_-]{1,255}")


class TransactionState(enum.Enum):
    """How a transaction ended."""

    COMMITTED = "COMMITTED"
    ROLLED_BACK = "ROLLED_BACK"


def half_message(message: Message, producer_group: str) -> Message:
    """Move ``message`` (made for its real topic and queue) to the half queue, in place."""
    properties = message.properties
    properties[PROPERTY_REAL_TOPIC] = message.topic
    properties[PROPERTY_REAL_QUEUE_ID] = str(message.queue_id)
    properties[PROPERTY_TRANSACTION_PREPARED] = "true"
    properties[PROPERTY_PRODUCER_GROUP] = producer_group
    message.topic, message.queue_id = HALF_TOPIC, 0
    return message


def transaction_id_of(half: StoredMessage) -> str:
    """The transaction a half copy belongs to: the first copy's message id."""
    return half.properties.get(PROPERTY_TRANSACTION_ID) or half.msg_id


def check_times_of(half: StoredMessage) -> int:
    return int(half.properties.get(PROPERTY_CHECK_TIMES, "0"))


def checked_copy(half: StoredMessage, transaction_id: str, check_times: int) -> Message:
    """The next copy of a half message: the same message, checked ``check_times`` times."""
    properties = dict(half.properties)
    properties[PROPERTY_CHECK_TIMES] = str(check_times)
    properties[PROPERTY_TRANSACTION_ID] = transaction_id
    return copy_message(half, HALF_TOPIC, 0, properties)


def real_topic_of(half: StoredMessage) -> str:
    return half.properties[PROPERTY_REAL_TOPIC]


def committed_message(half: StoredMessage, queue_count: int) -> Message:
    """The message a commit makes visible: the half message for its real topic and queue (the
    queue id modulo ``queue_count``, should the topic have fewer queues now), sysflag COMMIT."""
    properties = {name: value for name, value in half.properties.items() if name not in _HALF_ONLY}
    real_queue = int(half.properties[PROPERTY_REAL_QUEUE_ID]) % queue_count
    message = copy_message(half, real_topic_of(half), real_queue, properties)
    message.sysflag = SYSFLAG_TRANSACTION_COMMIT | (half.sysflag & SYSFLAG_PRODUCER_UNIQ_KEY)
    message.prepared_transaction_offset = half.physical_offset
    return message


def op_message(half_offset: int, transaction_id: str, state: TransactionState) -> Message:
    """The op record that ends the half copy at ``half_offset`` of the half queue."""
    properties = {
        PROPERTY_TAGS: OP_TAG,
        PROPERTY_KEYS: transaction_id,
        PROPERTY_TRANSACTION_STATE: state.value,
    }
    return Message(OP_TOPIC, str(half_offset).encode(), 0, properties)


def op_half_offset(op: StoredMessage) -> int:
    """The half queue offset an op record ends."""
    return int(op.body)


def op_state(op: StoredMessage) -> TransactionState:
    return TransactionState(op.properties.get(PROPERTY_TRANSACTION_STATE, "ROLLED_BACK"))


def visible_properties(half: StoredMessage) -> dict[str, str]:
    """The properties of a half message as a check or the pending list shows them."""
    return {
        name: value
        for name, value in half.properties.items()
        if name not in _HALF_ONLY and name not in TRANSACTION_PROPERTIES
    }
