"""The transactions still open, in memory, rebuilt at start from the two system topics and a
checkpoint (RocketMQ keeps the same two offsets as the consumer offsets of CID_RMQ_SYS_TRANS).

The checkpoint, ``config/transactionCheckpoint.json`` = ``{"halfOffset": H, "opOffset": O}``:

* every half copy below ``H`` is done - ended by an op record, or superseded by a later copy;
* every op record below ``O`` ends a half copy below ``H``.

So at start the table reads the op queue from ``O`` (the copies ended at or past ``H``) and the half
queue from ``H``: a copy that no op record ends and no later copy of the same transaction follows is
open. ``H`` is the oldest open transaction's latest copy; each check makes a new copy at the end of
the half queue, so ``H`` moves on at least once per check interval and the scan at start stays short.
The checkpoint may lag behind (it is written now and then, and only once what it skips is as durable
as the flush mode promises): the table then reads more, never less.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from app.broker.transaction_message import (
    HALF_TOPIC,
    OP_TOPIC,
    TransactionState,
    check_times_of,
    op_half_offset,
    op_state,
    real_topic_of,
    transaction_id_of,
)
from app.store import MessageStore
from app.store.atomic_file import write_atomically
from app.store.errors import StoreConfigError
from app.store.record import StoredMessage, decode_record
from app.store.record_format import PROPERTY_PRODUCER_GROUP
from app.store.results import AppendResult

SCAN_BATCH = 256


@dataclass(slots=True)
class OpenTransaction:
    """A transaction not ended yet: where its latest half copy is, and how often it was checked."""

    transaction_id: str
    producer_group: str
    topic: str
    half_offset: int  # queue offset of the latest copy in the half queue
    physical_offset: int  # CommitLog offset of the latest copy
    stored_ms: int  # when the latest copy was stored
    check_times: int

    @classmethod
    def of(cls, half: StoredMessage) -> OpenTransaction:
        return cls(
            transaction_id_of(half),
            half.properties.get(PROPERTY_PRODUCER_GROUP, ""),
            real_topic_of(half),
            half.queue_offset,
            half.physical_offset,
            half.store_timestamp,
            check_times_of(half),
        )

    @classmethod
    def stored(
        cls, transaction_id: str, producer_group: str, topic: str, copy: AppendResult, check_times: int = 0
    ) -> OpenTransaction:
        """The transaction whose latest half copy was just appended as ``copy``."""
        return cls(
            transaction_id,
            producer_group,
            topic,
            copy.queue_offset,
            copy.physical_offset,
            copy.store_timestamp,
            check_times,
        )


class TransactionTable:
    """Open transactions by id, oldest latest copy first (the order of the half queue)."""

    def __init__(self, store: MessageStore, checkpoint_path: Path) -> None:
        self.store = store
        self.checkpoint_path = checkpoint_path
        self.open: dict[str, OpenTransaction] = {}
        # (op queue offset, half offset it ends) of the op records that may end a copy at or past H.
        self._ops: deque[tuple[int, int]] = deque()
        self._persisted = (-1, -1)

    # -- changes ---------------------------------------------------------------------------------

    def add(self, entry: OpenTransaction) -> None:
        """A new half copy: the transaction's latest (a new transaction, or a checked one)."""
        self.open.pop(entry.transaction_id, None)
        self.open[entry.transaction_id] = entry  # at the end: the copy is the newest

    def end(self, transaction_id: str) -> OpenTransaction | None:
        """Take the transaction out; None if it is not open."""
        return self.open.pop(transaction_id, None)

    def ended_by(self, op_offset: int, half_offset: int) -> None:
        """An op record at ``op_offset`` of the op queue ended the copy at ``half_offset``."""
        self._ops.append((op_offset, half_offset))

    # -- progress --------------------------------------------------------------------------------

    def progress(self) -> tuple[int, int]:
        """(H, O): the half queue offset below which everything is done, and the op queue offset
        below which every op record ends a copy below H."""
        first = next(iter(self.open.values()), None)
        half = first.half_offset if first is not None else self.store.max_offset(HALF_TOPIC, 0)
        ops = self._ops
        while ops and ops[0][1] < half:
            ops.popleft()
        op = ops[0][0] if ops else self.store.max_offset(OP_TOPIC, 0)
        return half, op

    def checkpoint_changed(self, progress: tuple[int, int]) -> bool:
        return progress != self._persisted

    def write_checkpoint(self, progress: tuple[int, int]) -> None:
        """Write (H, O); call it once everything below them is as durable as the flush mode promises."""
        document = {"halfOffset": progress[0], "opOffset": progress[1]}
        write_atomically(self.checkpoint_path, json.dumps(document).encode())
        self._persisted = progress

    def _read_checkpoint(self) -> tuple[int, int]:
        try:
            document = json.loads(self.checkpoint_path.read_bytes())
            return int(document["halfOffset"]), int(document["opOffset"])
        except FileNotFoundError:
            return 0, 0
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreConfigError(f"{self.checkpoint_path} is not a transaction checkpoint: {exc}") from None

    # -- start -----------------------------------------------------------------------------------

    def load(self) -> dict[str, TransactionState]:
        """Rebuild the open transactions from the checkpoint and the two queues; the ends it read
        (transaction id -> state). Reads the disk: call it off the event loop, before requests."""
        half_from, op_from = self._read_checkpoint()
        half_from = self._within(HALF_TOPIC, half_from)
        op_from = self._within(OP_TOPIC, op_from)
        ended: dict[int, TransactionState] = {}
        for op in self._scan(OP_TOPIC, op_from):
            half_offset = op_half_offset(op)
            if half_offset >= half_from:
                ended[half_offset] = op_state(op)
                self._ops.append((op.queue_offset, half_offset))
        states: dict[str, TransactionState] = {}
        for half in self._scan(HALF_TOPIC, half_from):
            transaction_id = transaction_id_of(half)
            state = ended.get(half.queue_offset)
            if state is None:
                self.add(OpenTransaction.of(half))
            else:
                self.open.pop(transaction_id, None)
                states[transaction_id] = state
        self._persisted = (half_from, op_from)
        return states

    def _within(self, topic: str, offset: int) -> int:
        return min(max(offset, self.store.min_offset(topic, 0)), self.store.max_offset(topic, 0))

    def _scan(self, topic: str, offset: int) -> list[StoredMessage]:
        found: list[StoredMessage] = []
        while True:
            result = self.store.get_message(topic, 0, offset, SCAN_BATCH)
            found.extend(decode_record(record) for record in result.records)
            if result.next_offset <= offset:
                return found
            offset = result.next_offset
