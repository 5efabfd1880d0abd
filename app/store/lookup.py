"""Finding a message without reading its queue: by message id, by key or unique id through the
index (SPEC 1.6; RocketMQ's viewMessageById, queryMessage and queryMessageByUniqKey), and the
queue offset of a point in time (searchOffset).

The index holds 31-bit hashes of ``topic#key``, so an index hit is a candidate: every answer is
checked against the message itself (topic, key, store time) before it is returned, and an offset
the index holds twice (a re-dispatch after a crash) is returned once.
"""

from __future__ import annotations

from collections.abc import Callable

from app.store.commit_log import CommitLog
from app.store.consume_queue import ConsumeQueue
from app.store.index_service import IndexService
from app.store.record import TIMESTAMP_END, StoredMessage, store_timestamp

MAX_TIMESTAMP_MS = (1 << 63) - 1
KEY_SEPARATOR = " "


class MessageLookup:
    def __init__(
        self,
        commitlog: CommitLog,
        index: IndexService | None,
        look_message: Callable[[int], StoredMessage | None],
        max_results: int,
    ) -> None:
        self.commitlog = commitlog
        self.index = index
        self.look_message = look_message
        self.max_results = max_results

    def by_id(self, msg_id: str) -> StoredMessage | None:
        """The message a message id names (store host + CommitLog offset), or None if the id is
        malformed, names another store host, or its data is gone."""
        try:
            raw = bytes.fromhex(msg_id)
        except ValueError:
            return None
        if len(raw) != 16 or raw[:8] != self.commitlog.store_host:
            return None  # another broker's offset means nothing in this CommitLog: never read it
        message = self.look_message(int.from_bytes(raw[8:], "big"))
        if message is None or message.store_host != raw[:8]:
            return None
        return message

    def by_key(
        self, topic: str, key: str, max_messages: int | None, begin_ms: int, end_ms: int
    ) -> list[StoredMessage]:
        """Messages whose KEYS hold the word ``key`` or whose unique id is ``key``, newest first."""
        limit = self.max_results if max_messages is None else min(self.max_results, max_messages)
        return self._query(
            topic,
            key,
            limit,
            begin_ms,
            end_ms,
            lambda message: message.unique_id == key or key in message.keys.split(KEY_SEPARATOR),
        )

    def by_unique_id(self, topic: str, unique_id: str) -> StoredMessage | None:
        found = self._query(
            topic, unique_id, 1, 0, MAX_TIMESTAMP_MS, lambda message: message.unique_id == unique_id
        )
        return found[0] if found else None

    def by_unique_id_at(self, topic: str, unique_id: str, physical_offset: int) -> StoredMessage | None:
        """The message at ``physical_offset``, if it is ``topic``'s message with that unique id."""
        message = self.look_message(physical_offset)
        if message is None or message.topic != topic or message.unique_id != unique_id:
            return None
        return message

    def _query(
        self,
        topic: str,
        key: str,
        limit: int,
        begin_ms: int,
        end_ms: int,
        matches: Callable[[StoredMessage], bool],
    ) -> list[StoredMessage]:
        index = self.index
        if index is None or limit <= 0 or not key:
            return []
        index.wait_indexed()  # a message appended before the query is found
        messages: list[StoredMessage] = []
        seen: set[int] = set()

        def accept(offset: int) -> bool:
            if offset in seen:
                return False
            seen.add(offset)
            message = self.look_message(offset)
            if (
                message is None
                or message.topic != topic
                or not begin_ms <= message.store_timestamp <= end_ms
                or not matches(message)
            ):
                return False
            messages.append(message)
            return True

        index.query(topic, key, limit, begin_ms, end_ms, accept)
        return messages

    def search_offset(self, queue: ConsumeQueue | None, timestamp_ms: int) -> int:
        """The queue offset of the first message stored at or after ``timestamp_ms``, the max offset
        if there is none: a binary search over the store timestamps of the queue's messages."""
        if queue is None:
            return 0
        low, high = queue.min_offset, queue.max_offset
        while low < high:
            middle = (low + high) // 2
            stored = self._store_timestamp_at(queue, middle)
            if stored is not None and stored >= timestamp_ms:
                high = middle
            else:  # older, or deleted since min_offset was read
                low = middle + 1
        return low

    def _store_timestamp_at(self, queue: ConsumeQueue, queue_offset: int) -> int | None:
        entry = queue.entry(queue_offset)
        if entry is None:
            return None
        raw = self.commitlog.read(entry[0], TIMESTAMP_END)
        return store_timestamp(raw) if raw is not None else None
