"""The pop table: every (group, topic, queue)'s pop state, kept in step with the group's committed
offset and with the journal.

Every change goes through :meth:`PopTable.change` (applied at once, in memory) and then, before
the caller awaits anything, :meth:`PopTable.record`, which commits the changed queues' ``done``
as the group's offset and appends the records to the journal; the returned future resolves once
they are written. So at every await the consumer offset table agrees with the pop state, and a
snapshot taken for compaction holds exactly what the appends before it lead to.

Someone else may move the group's offset (a commit over the offsets API, a reset, a deleted
offset table): when a queue is next looked at, the group's offset is not the one this table last
committed, and the state follows - SKIP when the offset moved on, POSITION when it moved back or
went away. At start, the journal is authoritative over the
offset table, which is persisted only every few seconds: a ``done`` ahead of the committed offset
is committed again.
"""

from __future__ import annotations

import logging
import secrets
from concurrent.futures import Future
from typing import TYPE_CHECKING

from app.broker.core import parse_start
from app.broker.pop_journal import PopJournal, encode_records
from app.broker.pop_state import PopQueue, PopRecord, QueueKey, RecordKind, apply, snapshot

if TYPE_CHECKING:
    from app.broker.core import Broker

log = logging.getLogger(__name__)

# The journal is compacted into a snapshot once it is larger than both this and twice the last snapshot.
COMPACT_MIN_LOG_BYTES = 4 << 20


class PopTable:
    def __init__(self, broker: Broker, journal: PopJournal) -> None:
        self.broker = broker
        self.journal = journal
        self.queues: dict[QueueKey, PopQueue] = {}
        self._log_bytes = 0
        self._snapshot_bytes = 0

    # -- start -----------------------------------------------------------------------------------

    def load(self) -> None:
        """Replay the journal, drop the queues of topics gone, line the group offsets up with it
        and start the journal on a fresh snapshot. Reads the disk: call it off the event loop."""
        for record in self.journal.load():
            apply(self.queues, record)
        offsets = self.broker.store.consumer_offsets
        for (group, topic, queue_id), queue in list(self.queues.items()):
            config = self.broker.topics.get(topic)
            if config is None or queue_id >= config.queue_nums:
                del self.queues[group, topic, queue_id]
                continue
            queue.sort()
            committed = offsets.committed(group, topic, queue_id)
            if committed > queue.done:
                queue.skip(committed)
            elif committed < queue.done:
                offsets.commit(group, topic, queue_id, queue.done)
            queue.committed = queue.done
        data = encode_records(snapshot(self.queues))
        self.journal.open(data)
        self._snapshot_bytes = len(data)

    # -- looking up ------------------------------------------------------------------------------

    def queue(self, key: QueueKey, start: str, changes: list[PopRecord]) -> PopQueue:
        """The queue's state, made at the group's offset (or where ``start`` says, when the group
        has none) if it is new, and following the group's offset if someone else moved it."""
        offsets = self.broker.store.consumer_offsets
        committed = offsets.committed(*key)
        queue = self.queues.get(key)
        if queue is not None and committed == queue.committed >= 0:
            return queue
        group, topic, queue_id = key
        if committed < 0:
            policy, timestamp_ms = parse_start(start)
            offset = self.broker.group_offset(group, topic, queue_id, policy, timestamp_ms)
            self.change(changes, PopRecord(RecordKind.POSITION, group, topic, queue_id, offset))
        elif queue is None or committed < queue.done:
            self.change(changes, PopRecord(RecordKind.POSITION, group, topic, queue_id, committed))
        elif committed > queue.done:
            self.change(changes, PopRecord(RecordKind.SKIP, group, topic, queue_id, committed))
        queue = self.queues[key]
        queue.committed = queue.done
        if committed != queue.done:
            offsets.commit(*key, queue.done)
        return queue

    def existing(self, key: QueueKey, changes: list[PopRecord]) -> PopQueue | None:
        """As :meth:`queue`, but None for a queue this group never popped."""
        if key not in self.queues:
            return None
        return self.queue(key, "last", changes)

    # -- changing --------------------------------------------------------------------------------

    def change(self, changes: list[PopRecord], record: PopRecord) -> None:
        """Apply ``record``; the caller passes ``changes`` to :meth:`record` before it awaits."""
        apply(self.queues, record)
        changes.append(record)

    def hand_out(
        self, changes: list[PopRecord], key: QueueKey, offset: int, deadline_ms: int, reconsume_times: int
    ) -> int:
        """Mark the offset in flight until ``deadline_ms`` under a new nonce; the nonce."""
        nonce = secrets.randbits(64)
        group, topic, queue_id = key
        record = PopRecord(
            RecordKind.HANDOUT, group, topic, queue_id, offset, deadline_ms, reconsume_times, nonce
        )
        self.change(changes, record)
        return nonce

    def ack(self, changes: list[PopRecord], key: QueueKey, offset: int) -> None:
        group, topic, queue_id = key
        self.change(changes, PopRecord(RecordKind.ACK, group, topic, queue_id, offset))

    def record(self, changes: list[PopRecord]) -> Future[None] | None:
        """Commit the changed queues' ``done`` as the group's offsets and journal ``changes``; the
        future resolves once they are written. None when there are none."""
        if not changes:
            return None
        offsets = self.broker.store.consumer_offsets
        for key in {record.key for record in changes}:
            queue = self.queues.get(key)
            if queue is not None and queue.done != queue.committed:
                offsets.commit(*key, queue.done)
                queue.committed = queue.done
        data = encode_records(changes)
        written = self.journal.append(data)
        self._log_bytes += len(data)
        due = self._log_bytes > max(COMPACT_MIN_LOG_BYTES, 2 * self._snapshot_bytes)
        if due and not self.journal.compacting:
            self.compact()
        return written

    def compact(self) -> None:
        """Snapshot the table (leaving out the queues of topics gone) and empty the journal."""
        topics = self.broker.topics
        for key in [key for key in self.queues if topics.get(key[1]) is None]:
            del self.queues[key]
        data = encode_records(snapshot(self.queues))
        done = self.journal.compact(data)
        if done is not None:
            self._log_bytes, self._snapshot_bytes = 0, len(data)
            done.add_done_callback(_log_failure)


def in_flight_of(
    queues: dict[QueueKey, PopQueue], group: str, now_ms: int
) -> list[dict[str, int | str | None]]:
    """Per queue the group pops from: its messages popped and not acked, those still invisible and
    those whose invisible time passed (handed out again at the next pop, or dead-lettered), and
    the next deadline. Queues with nothing in flight are left out."""
    found: list[dict[str, int | str | None]] = []
    for (owner, topic, queue_id), queue in sorted(queues.items()):
        if owner != group or not queue.inflight:
            continue
        invisible = sum(1 for entry in queue.inflight.values() if entry.deadline_ms > now_ms)
        found.append(
            {
                "topic": topic,
                "queue_id": queue_id,
                "in_flight": len(queue.inflight),
                "invisible": invisible,
                "visible_again": len(queue.inflight) - invisible,
                "next_deadline_ms": queue.next_deadline_ms(),
                "popped_until": queue.popped_until,
            }
        )
    return found


def _log_failure(future: Future[None]) -> None:
    error = future.exception()
    if error is not None:
        log.error("pop journal compaction failed; the journal grows until the next start: %s", error)
