"""Transactional messages (RocketMQ's TransactionalMessageService and EndTransactionProcessor):
begin, commit, rollback, the open transactions a producer group polls, and the service life cycle.

* **Begin** (a produce with ``transaction=begin`` and a ``producer_group``): every message of the
  batch is its own transaction. It is stored as a half message (:mod:`app.broker.transaction_message`)
  and answered with its ``transaction_id``, its real ``queue_id`` and no queue offset. A delayed
  message cannot be transactional. A producer's unique id repeated within the idempotency window
  is answered with the first begin's transaction and stores nothing.
* **Commit** appends the real message and the op record in one append; **rollback** the op record.
  A transaction that ended already answers :class:`TransactionEndedError` (409), with its state when
  the op record can still be found by its key; an id that names no transaction here
  :class:`TransactionNotFoundError` (404).
* A **batch transaction** (:meth:`Transactions.begin_batch`, :mod:`app.broker.transaction_batch`)
  covers a whole binary produce batch with one transaction id and one half record; its commit
  makes every message of the batch visible in one append.
* Transactions left open are checked back and finally rolled back by
  :class:`~app.broker.transaction_check.TransactionCheckService`.

A commit may be stored twice only if the broker dies between its real message and its op record:
the transaction is then still open after the restart, and a check may commit it again (at least once,
as in RocketMQ).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from app.broker import repeats
from app.broker.delay import is_delayed
from app.broker.durable import append_all_durably
from app.broker.errors import (
    BrokerError,
    InvalidParameterError,
    TooManyOpenTransactionsError,
    TopicNotWritableError,
    TransactionEndedError,
    TransactionNotFoundError,
)
from app.broker.producer_groups import ProducerGroups, validate_producer_group
from app.broker.transaction_batch import (
    EncodedEnd,
    batch_size_of,
    encode_commit,
    encode_messages,
    encode_plain,
    half_batch,
    is_batch,
    key_of,
    matches,
    parse,
    validate_key,
)
from app.broker.transaction_broker import Broker
from app.broker.transaction_check import TransactionCheckService
from app.broker.transaction_message import (
    HALF_TOPIC,
    OP_TOPIC,
    TransactionState,
    checked_copy,
    committed_message,
    half_message,
    op_message,
    op_state,
    real_topic_of,
    transaction_id_of,
    visible_properties,
)
from app.broker.transaction_table import OpenTransaction, TransactionTable
from app.broker.transaction_torn import cut_torn_commit
from app.codec import IncomingMessage, encode_body
from app.store import Message, parse_message_id
from app.store.record import StoredMessage
from app.store.record_format import (
    NO_HOST,
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_TAGS,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_UNIQ_KEY,
    SYSFLAG_PRODUCER_UNIQ_KEY,
    EncodedRecord,
    encode_record,
)
from app.store.results import AppendResult

log = logging.getLogger(__name__)

MAX_PENDING_LIST = 1000


MAX_END_BATCH = 1000  # transactions one request may commit or roll back together


def _status(durable: bool) -> str:
    return "SEND_OK" if durable else "FLUSH_DISK_TIMEOUT"


class Transactions:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.store = broker.store
        settings = broker.settings
        config_dir = broker.store.config.config_dir
        self.table = TransactionTable(broker.store, config_dir / "transactionCheckpoint.json")
        self.producers = ProducerGroups(config_dir / "transactionProducers.json")
        self.check_back = broker.outbound.check_back()
        self.checker = TransactionCheckService(
            self,
            settings.transaction_timeout_s,
            settings.transaction_check_interval_s,
            settings.transaction_check_max,
            self.check_back,
        )
        self._ending: set[str] = set()  # transactions whose end is being written
        self._keys_beginning: set[tuple[str, str, str]] = set()  # (topic, group, key) of batch begins
        self._last_appended: AppendResult | None = None
        self._recovered = False

    # -- life cycle ------------------------------------------------------------------------------

    async def recover(self) -> None:
        """Rebuild the open transactions, and cut a commit a crash tore off the log's end
        (:mod:`app.broker.transaction_torn`): before anything else reads the log's tail."""
        if self._recovered:
            return
        await asyncio.to_thread(self.table.load)
        self._recovered = True
        log.info("transactions: %d open after the restart", len(self.table.open))
        if not self.store.replica:  # a slave's tail is cut by the master it follows
            await asyncio.to_thread(cut_torn_commit, self.broker, self.table)

    async def open(self) -> None:
        """Recover the open transactions (if not done yet), load the check endpoints and start
        checking."""
        await self.recover()
        await asyncio.to_thread(self.producers.load)
        if not self.store.replica:  # a slave's half messages are checked by its master
            self.checker.start()

    async def close(self) -> None:
        """Stop checking and write the checkpoint. Before the store closes."""
        await self.checker.stop()
        await self.check_back.aclose()

    async def durable_so_far(self) -> None:
        """Wait until everything this service appended is as durable as the flush mode promises."""
        last = self._last_appended
        if last is not None:
            await self.store.wait_durable([last])

    # -- begin -----------------------------------------------------------------------------------

    async def begin(
        self,
        topic: str,
        batch: Sequence[IncomingMessage],
        transaction: str,
        producer_group: str | None,
        born_host: bytes = NO_HOST,
    ) -> list[dict[str, Any]]:
        """Store each message of ``batch`` as a half message of ``producer_group``; an answer per
        message, in request order, with its ``transaction_id``. ``born_host``: the producer's
        address."""
        if transaction != "begin":
            raise InvalidParameterError(f"transaction must be 'begin', not {transaction[:50]!r}")
        group = validate_producer_group(producer_group)
        if any(is_delayed(incoming) for incoming in batch):
            raise InvalidParameterError("a transactional message cannot be delayed")
        broker = self.broker
        config = await broker.topic_for_write(topic)
        window = broker.idempotency if broker.idempotency.enabled else None
        answers: list[dict[str, Any] | int | StoredMessage] = []
        fresh: list[tuple[int, str, str | None]] = []  # (answer index, unique id, as supplied)
        first_in_batch: dict[str, int] = {}
        halves: list[Message] = []
        for incoming in batch:
            supplied = incoming.unique_id
            if supplied is not None and window is not None:
                earlier: int | StoredMessage | None = first_in_batch.get(supplied)
                if earlier is None:
                    earlier = repeats.stored_first(broker, window, HALF_TOPIC, supplied)
                    if earlier is not None and real_topic_of(earlier) != topic:
                        earlier = None
                if earlier is not None:
                    answers.append(earlier)
                    continue
                first_in_batch[supplied] = len(answers)
            unique_id = supplied or broker.unique_ids.next()
            message = broker.to_message(
                topic, broker.choose_queue(config, incoming), incoming, unique_id, born_host
            )
            if supplied is not None:
                message.sysflag |= SYSFLAG_PRODUCER_UNIQ_KEY
            halves.append(half_message(message, group))
            fresh.append((len(answers), unique_id, supplied))
            answers.append({})
        if halves:
            self._check_room(len(halves))
            appended = self.store.append(halves)
            self._last_appended = appended[-1]
            for half, (index, unique_id, supplied), result in zip(halves, fresh, appended, strict=True):
                transaction_id = result.msg_id
                self.table.add(OpenTransaction.stored(transaction_id, group, topic, result))
                if supplied is not None and window is not None:
                    window.put((HALF_TOPIC, supplied), result.physical_offset)
                answers[index] = {
                    "transaction_id": transaction_id,
                    "msg_id": transaction_id,
                    "unique_id": unique_id,
                    "queue_id": int(half.properties[PROPERTY_REAL_QUEUE_ID]),
                    "queue_offset": None,
                }
            durable = await self.store.wait_durable(appended)
            for index, _, _ in fresh:
                answers[index]["status"] = _status(durable)  # type: ignore[index]
        results: list[dict[str, Any]] = []
        for answer in answers:
            if isinstance(answer, int):
                results.append(results[answer])
            elif isinstance(answer, StoredMessage):
                results.append(await self._repeat_answer(answer))
            else:
                results.append(answer)
        return results

    async def _repeat_answer(self, first: StoredMessage) -> dict[str, Any]:
        answer = await repeats.answer_from_log(self.broker, HALF_TOPIC, first)
        transaction_id = transaction_id_of(first)
        answer.update(
            transaction_id=transaction_id,
            msg_id=transaction_id,
            queue_id=int(first.properties[PROPERTY_REAL_QUEUE_ID]),
            queue_offset=None,
        )
        return answer

    async def begin_batch(
        self,
        topic: str,
        data: bytes,
        producer_group: str | None,
        transaction_key: str | None = None,
        born_host: bytes = NO_HOST,
    ) -> dict[str, Any]:
        """Store the binary batch ``data`` as one batch transaction of ``producer_group`` (see
        :mod:`app.broker.transaction_batch`): its messages are checked as a produce checks them, and
        none is visible before the commit. A ``transaction_key`` this topic and group used before
        answers the earlier transaction and its state, and stores nothing."""
        group = validate_producer_group(producer_group)
        key = validate_key(transaction_key)
        broker = self.broker
        config = await broker.topic_for_write(topic)
        now_ms = int(time.time() * 1000)
        # Encoded once to check it (the commit encodes it again, choosing the queues and ids then).
        round_robin, counter = broker.round_robin.get(topic, 0), broker.unique_ids.counter
        try:
            checked = encode_plain(broker, config, data, born_host, now_ms)
            if checked is None:  # the general path's checks: properties, queue ids, sizes
                checked = encode_messages(broker, config, parse(data), born_host, now_ms)
        finally:
            broker.round_robin[topic], broker.unique_ids.counter = round_robin, counter
        count = len(checked.records)
        if key is None:
            return await self._store_batch(topic, data, count, group, None, born_host)
        flight = (topic, group, key)
        if flight in self._keys_beginning:
            raise TransactionEndedError(key, None, "is being begun by another request")
        self._keys_beginning.add(flight)
        try:
            earlier = await self.batch_by_key(topic, group, key)
            if earlier is not None:
                return earlier
            return await self._store_batch(topic, data, count, group, key, born_host)
        finally:
            self._keys_beginning.discard(flight)

    async def _store_batch(
        self, topic: str, data: bytes, count: int, group: str, key: str | None, born_host: bytes
    ) -> dict[str, Any]:
        self._check_room(1)
        (result,) = self.store.append([half_batch(topic, data, count, group, key, born_host)])
        self._last_appended = result
        transaction_id = result.msg_id
        self.table.add(OpenTransaction.stored(transaction_id, group, topic, result))
        durable = await self.store.wait_durable([result])
        return {
            "transaction_id": transaction_id,
            "state": "OPEN",
            "topic": topic,
            "messages": count,
            "transaction_key": key,
            "repeated": False,
            "status": _status(durable),
        }

    async def batch_by_key(self, topic: str, producer_group: str, key: str) -> dict[str, Any] | None:
        """The batch transaction ``key`` names for ``topic`` and ``producer_group`` and its state
        (OPEN, COMMITTED, ROLLED_BACK, or UNKNOWN when its op record is no longer stored); None when
        no half record of it is stored."""
        limit = self.store.config.max_index_query_results
        found = await asyncio.to_thread(self.store.query_message_by_key, HALF_TOPIC, key, limit)
        half = next((copy for copy in found if matches(copy, topic, producer_group, key)), None)
        if half is None:
            return None
        transaction_id = transaction_id_of(half)
        if transaction_id in self.table.open:
            state = "OPEN"
        else:
            ops = await asyncio.to_thread(self.store.query_message_by_key, OP_TOPIC, transaction_id, 1)
            state = op_state(ops[0]).value if ops else "UNKNOWN"
        return {
            "transaction_id": transaction_id,
            "state": state,
            "topic": topic,
            "messages": batch_size_of(half),
            "transaction_key": key,
            "repeated": True,
            "status": "SEND_OK",
        }

    # -- end -------------------------------------------------------------------------------------

    async def commit(self, transaction_id: str) -> dict[str, Any]:
        return await self._end(transaction_id, TransactionState.COMMITTED)

    async def rollback(self, transaction_id: str) -> dict[str, Any]:
        return await self._end(transaction_id, TransactionState.ROLLED_BACK)

    async def commit_many(self, transaction_ids: Sequence[str]) -> list[dict[str, Any] | BrokerError]:
        return await self._end_many(transaction_ids, TransactionState.COMMITTED)

    async def rollback_many(self, transaction_ids: Sequence[str]) -> list[dict[str, Any] | BrokerError]:
        return await self._end_many(transaction_ids, TransactionState.ROLLED_BACK)

    async def _end(self, transaction_id: str, state: TransactionState) -> dict[str, Any]:
        half, end = await self._start_end(transaction_id, state)
        try:
            appended, durable = await self._append(end)
            return self._finish_end(transaction_id, state, half, end.records, appended, durable, end)
        finally:
            self._ending.discard(transaction_id)

    async def _append(self, end: EncodedEnd) -> tuple[list[AppendResult], bool]:
        """Append the records of one or more ends in one append; wait until they are as durable as
        the flush mode promises."""
        store = self.store
        appended = store.append_records(end.records, end.total_size, end.entries)
        durable = await store.wait_durable(appended)
        return appended, durable

    async def _end_many(
        self, transaction_ids: Sequence[str], state: TransactionState
    ) -> list[dict[str, Any] | BrokerError]:
        """End each transaction as :meth:`_end` does, the records of all of them in one append
        (one wait for the disk); each answered in order, or with the refusal that concerns it alone
        (not open, ended, gone, its topic not writable). The ids must differ."""
        answers: list[dict[str, Any] | BrokerError] = []
        started: list[tuple[int, str, StoredMessage, int, EncodedEnd]] = []  # answer, id, half, end
        together = EncodedEnd()
        try:
            for transaction_id in transaction_ids:
                try:
                    half, own = await self._start_end(transaction_id, state)
                except BrokerError as error:
                    answers.append(error)
                    continue
                started.append((len(answers), transaction_id, half, len(together.records), own))
                answers.append({})
                together.extend(own)
            if not together.records:
                return answers
            appended, durable = await self._append(together)
            for at, transaction_id, half, first, own in started:
                count = len(own.records)
                answers[at] = self._finish_end(
                    transaction_id,
                    state,
                    half,
                    own.records,
                    appended[first : first + count],
                    durable,
                    own,
                )
        finally:
            for _, transaction_id, *_ in started:
                self._ending.discard(transaction_id)
        return answers

    async def _start_end(
        self, transaction_id: str, state: TransactionState
    ) -> tuple[StoredMessage, EncodedEnd]:
        """The half message of an open transaction and the records that end it (for a commit the
        real message - a batch transaction's messages - then the op record); the transaction is held in ``_ending`` from here until
        the caller's append is done: neither a check nor another end touches it meanwhile."""
        entry = self.table.open.get(transaction_id)
        if entry is None or transaction_id in self._ending:
            raise await self._not_open(transaction_id)
        half = self.store.look_message(entry.physical_offset)
        if half is None:  # gone with retention: nothing left to commit
            self.table.end(transaction_id)
            raise TransactionNotFoundError(f"transaction {transaction_id} is no longer stored")
        self._ending.add(transaction_id)
        try:
            store = self.store
            now_ms = int(time.time() * 1000)
            messages: list[Message] = []
            end = EncodedEnd()
            if state is TransactionState.COMMITTED:
                topic = real_topic_of(half)
                config = self.broker.topics.get(topic) or await self.broker.topic_for_write(topic)
                if not config.writable:
                    raise TopicNotWritableError(f"topic {topic!r} does not accept messages")
                if is_batch(half):
                    end = encode_commit(self.broker, config, half, now_ms)
                else:
                    messages.append(committed_message(half, config.write_queue_nums))
                    end.body_bytes = len(half.body)
            entry = self.table.open.get(transaction_id)  # the latest copy (a check may have made one)
            if entry is None:  # ended while the topic was being created
                raise await self._not_open(transaction_id)
            messages.append(op_message(entry.half_offset, transaction_id, state))
            for message in messages:
                record = encode_record(message, store.store_host, now_ms, store.limits)
                store.commitlog.check_fits(len(record.data))
                end.add(record)
        except BaseException:
            self._ending.discard(transaction_id)
            raise
        return half, end

    def _finish_end(
        self,
        transaction_id: str,
        state: TransactionState,
        half: StoredMessage,
        records: Sequence[EncodedRecord],
        appended: list[AppendResult],
        durable: bool,
        end: EncodedEnd,
    ) -> dict[str, Any]:
        """Take an ended transaction out of the table once its records are appended; its answer."""
        self._ended(transaction_id, self.table.open[transaction_id].half_offset, appended[-1])
        answer: dict[str, Any] = {
            "transaction_id": transaction_id,
            "state": state.value,
            "status": _status(durable),
        }
        if state is TransactionState.COMMITTED:
            topic = real_topic_of(half)
            window = self.broker.idempotency
            self.broker.metrics.count_produced(topic, len(records) - 1, end.body_bytes)
            if is_batch(half):
                if window.enabled and end.supplied:
                    window.put_records(topic, records[:-1], appended[:-1])
                answer.update(topic=topic, messages=len(records) - 1, transaction_key=key_of(half))
                return answer
            result = appended[0]
            unique_id = half.unique_id
            if window.enabled and half.sysflag & SYSFLAG_PRODUCER_UNIQ_KEY:
                window.put((topic, unique_id), result.physical_offset)
            answer.update(
                msg_id=result.msg_id,
                unique_id=unique_id,
                topic=topic,
                queue_id=result.queue_id,
                queue_offset=result.queue_offset,
            )
        return answer

    def _ended(self, transaction_id: str, half_offset: int, op: AppendResult) -> None:
        """Out of the table, once ``op``, the transaction's op record, is appended."""
        self.table.end(transaction_id)
        self.table.ended_by(op.queue_offset, half_offset)
        self._last_appended = op

    async def _not_open(self, transaction_id: str) -> TransactionNotFoundError | TransactionEndedError:
        """Why ``transaction_id`` cannot be ended: it names no transaction here (404), or it ended."""
        first = self._first_copy(transaction_id)
        if first is None:
            return TransactionNotFoundError(f"no transaction {transaction_id} on this broker")
        if transaction_id in self._ending:
            return TransactionEndedError(transaction_id, None, "is being committed or rolled back")
        found = await asyncio.to_thread(self.store.query_message_by_key, OP_TOPIC, transaction_id, 1)
        state = op_state(found[0]) if found else None
        return TransactionEndedError(transaction_id, state)

    def _first_copy(self, transaction_id: str) -> StoredMessage | None:
        """The first half copy of the transaction, if ``transaction_id`` names one stored here."""
        try:
            _, _, physical_offset = parse_message_id(transaction_id)
        except ValueError:
            return None
        if bytes.fromhex(transaction_id[:16]) != self.store.store_host:
            return None
        first = self.store.look_message(physical_offset)
        if first is None or first.topic != HALF_TOPIC or PROPERTY_TRANSACTION_ID in first.properties:
            return None
        return first

    def topic_of(self, transaction_id: str) -> str | None:
        """The real topic of a transaction stored here (open or ended), None if there is none."""
        entry = self.table.open.get(transaction_id)
        if entry is not None:
            return entry.topic
        first = self._first_copy(transaction_id)
        return real_topic_of(first) if first is not None else None

    # -- checks ----------------------------------------------------------------------------------

    def _check_room(self, more: int) -> None:
        """TooManyOpenTransactionsError when ``more`` open transactions would pass the bound."""
        cap = self.broker.settings.max_open_transactions
        if len(self.table.open) + more > cap:
            raise TooManyOpenTransactionsError(
                f"{len(self.table.open)} transactions are open and {more} more would pass "
                f"WHARF_MAX_OPEN_TRANSACTIONS ({cap}); commit or roll back some first"
            )

    def recheck(self, entry: OpenTransaction) -> tuple[str, dict[str, Any]] | None:
        """Count one more check: store the half message's next copy. The group's check endpoint
        and what to send it, or None when the group has none (it polls the pending list)."""
        if entry.transaction_id in self._ending:
            return None
        half = self.store.look_message(entry.physical_offset)
        if half is None:
            self.table.end(entry.transaction_id)
            log.warning("open transaction %s is no longer stored; dropped", entry.transaction_id)
            return None
        check_times = entry.check_times + 1
        (result,) = self.store.append([checked_copy(half, entry.transaction_id, check_times)])
        self._last_appended = result
        self.table.add(
            OpenTransaction.stored(
                entry.transaction_id, entry.producer_group, entry.topic, result, check_times
            )
        )
        url = self.producers.check_url(entry.producer_group)
        if url is None:
            return None
        return url, self.describe(half, check_times)

    async def resolve_checked(self, transaction_id: str, commit: bool) -> None:
        """End a transaction as its check endpoint answered; nothing if it ended meanwhile."""
        if transaction_id not in self.table.open or transaction_id in self._ending:
            return
        try:
            await (self.commit if commit else self.rollback)(transaction_id)
        except (TransactionEndedError, TransactionNotFoundError):
            pass
        except Exception as exc:  # the topic is gone, the disk is full: the next check asks again
            log.warning(
                "transaction %s: the checked %s failed: %s",
                transaction_id,
                "commit" if commit else "rollback",
                exc,
            )

    async def roll_back_unresolved(self, entry: OpenTransaction) -> None:
        """Roll back a transaction checked as often as allowed without an answer."""
        if entry.transaction_id in self._ending:
            return
        log.info(
            "transaction %s of producer group %r rolled back: unresolved after %d checks",
            entry.transaction_id,
            entry.producer_group,
            entry.check_times,
        )
        op = op_message(entry.half_offset, entry.transaction_id, TransactionState.ROLLED_BACK)
        self._ending.add(entry.transaction_id)
        try:
            appended, _ = await append_all_durably(self.store, [op])
            self._ended(entry.transaction_id, entry.half_offset, appended[-1])
        finally:
            self._ending.discard(entry.transaction_id)

    # -- what producers see ----------------------------------------------------------------------

    def describe(self, half: StoredMessage, check_times: int) -> dict[str, Any]:
        """A transaction as a check and the pending list show it: the message for its real topic."""
        body, encoding = encode_body(half.body)
        keys = half.properties.get(PROPERTY_KEYS, "")
        properties = visible_properties(half)
        properties.pop(PROPERTY_TAGS, None)
        properties.pop(PROPERTY_KEYS, None)
        properties.pop(PROPERTY_UNIQ_KEY, None)
        return {
            "transaction_id": transaction_id_of(half),
            "producer_group": half.properties.get(PROPERTY_PRODUCER_GROUP, ""),
            "topic": real_topic_of(half),
            "queue_id": int(half.properties[PROPERTY_REAL_QUEUE_ID]),
            "unique_id": half.unique_id,
            "tags": half.properties.get(PROPERTY_TAGS, ""),
            "keys": keys.split() if keys else [],
            "properties": properties,
            "body": body,
            "encoding": encoding,
            "born_timestamp": half.born_timestamp,
            "check_times": check_times,
            "messages": batch_size_of(half),
        }

    def pending(self, producer_group: str, limit: int, checked: bool = True) -> list[dict[str, Any]]:
        """The group's open transactions that were checked at least once (open for
        WHARF_TRANSACTION_TIMEOUT_S), or with ``checked`` False every one of them, oldest latest
        copy first, at most ``limit``."""
        validate_producer_group(producer_group)
        if not 1 <= limit <= MAX_PENDING_LIST:
            raise InvalidParameterError(f"limit must be 1 to {MAX_PENDING_LIST}, not {limit}")
        found = []
        for entry in self.table.open.values():
            if entry.producer_group != producer_group or (checked and entry.check_times == 0):
                continue
            half = self.store.look_message(entry.physical_offset)
            if half is not None:
                found.append(self.describe(half, entry.check_times))
                if len(found) == limit:
                    break
        return found

    def producer(self, producer_group: str) -> dict[str, Any]:
        validate_producer_group(producer_group)
        return {
            "producer_group": producer_group,
            "check_url": self.producers.check_url(producer_group),
            "open_transactions": sum(
                1 for entry in self.table.open.values() if entry.producer_group == producer_group
            ),
        }

    async def register(self, producer_group: str, check_url: str | None) -> dict[str, Any]:
        await asyncio.to_thread(self.producers.register, producer_group, check_url)
        return self.producer(producer_group)
