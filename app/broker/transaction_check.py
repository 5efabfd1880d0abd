"""The check service (RocketMQ's TransactionalMessageCheckService): asks producers about the
transactions they left open, and rolls back those nobody resolves.

A transaction still open ``timeout_s`` after its begin (WHARF_TRANSACTION_TIMEOUT_S, 6 s) is
checked, then again every ``interval_s`` (WHARF_TRANSACTION_CHECK_INTERVAL_S, 60 s); after
``check_max`` checks (WHARF_TRANSACTION_CHECK_MAX, 15) it is rolled back at its next turn. A check
first makes the half message's next copy (:func:`~app.broker.transaction_message.checked_copy`:
the count is in the log), then, when the producer group registered a check endpoint, POSTs the
transaction there off the request path - a call of the outbound adapter's check-back
(:class:`app.broker.outbound.CheckBack`, a short timeout), at most :data:`MAX_CHECKS_IN_FLIGHT` at
once. The endpoint answers ``{"status": "commit"}``, ``"rollback"`` or ``"unknown"``; a timeout, an
error or anything else counts as unknown. A group without an endpoint sees its checked transactions
in ``GET /v1/transactions/pending``.

The service runs on the event loop, as do commits and rollbacks: no lock between them. It also
writes the table's checkpoint, at most every :data:`PERSIST_INTERVAL_S` and at stop, once what
it skips is as durable as the flush mode promises.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from app.broker.transaction_table import OpenTransaction, TransactionTable

log = logging.getLogger(__name__)

MAX_CHECKS_IN_FLIGHT = 64
IDLE_WAIT_S = 1.0  # the longest sleep: a new transaction is looked at within this
RETRY_WAIT_S = 1.0  # after a failed pass (a full disk)
PERSIST_INTERVAL_S = 1.0


class CheckAnswer(enum.Enum):
    """What a producer says about its transaction (RocketMQ's LocalTransactionState)."""

    COMMIT = "commit"
    ROLLBACK = "rollback"
    UNKNOWN = "unknown"

    @classmethod
    def parse(cls, document: object) -> CheckAnswer:
        status = document.get("status") if isinstance(document, dict) else None
        try:
            return cls(status.lower()) if isinstance(status, str) else cls.UNKNOWN
        except ValueError:
            return cls.UNKNOWN


Ask = Callable[[str, dict[str, Any]], Awaitable[CheckAnswer]]


class CheckedTransactions(Protocol):
    """What the check service needs of the transactions it checks (app.broker.transactions)."""

    table: TransactionTable

    def recheck(self, entry: OpenTransaction) -> tuple[str, dict[str, Any]] | None: ...

    async def resolve_checked(self, transaction_id: str, commit: bool) -> None: ...

    async def roll_back_unresolved(self, entry: OpenTransaction) -> None: ...

    async def durable_so_far(self) -> None: ...


class TransactionCheckService:
    def __init__(
        self,
        transactions: CheckedTransactions,
        timeout_s: float,
        interval_s: float,
        check_max: int,
        ask: Ask,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.transactions = transactions
        self.timeout_ms = int(timeout_s * 1000)
        self.interval_ms = int(interval_s * 1000)
        self.check_max = check_max
        self.ask = ask
        self.clock = clock
        self._task: asyncio.Task[None] | None = None
        self._asking: set[asyncio.Task[None]] = set()
        self._persisted_at = 0.0

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="wharf-transaction-check")

    async def stop(self) -> None:
        """Stop checking, drop the checks in flight (they are asked again after a restart) and
        write the checkpoint."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for task in self._asking:
            task.cancel()
        await asyncio.gather(*self._asking, return_exceptions=True)
        await self.persist(force=True)

    async def _run(self) -> None:
        while True:
            try:
                wait_s = await self.run_once()
            except Exception:
                log.exception("transaction check pass failed; trying again in %.0f s", RETRY_WAIT_S)
                wait_s = RETRY_WAIT_S
            await asyncio.sleep(wait_s)

    async def run_once(self) -> float:
        """Check (or roll back) every transaction whose turn came; how long to sleep."""
        now = self.now_ms()
        soonest = min(self.timeout_ms, self.interval_ms)
        wake = now + int(IDLE_WAIT_S * 1000)
        due: list[OpenTransaction] = []
        # Oldest latest copy first: past the first one younger than the shortest wait, none is due.
        for entry in self.transactions.table.open.values():
            if entry.stored_ms + soonest > now:
                wake = min(wake, entry.stored_ms + soonest)
                break
            turn = entry.stored_ms + (self.timeout_ms if entry.check_times == 0 else self.interval_ms)
            if turn > now:
                wake = min(wake, turn)
            else:
                due.append(entry)
        for entry in due:
            if entry.check_times >= self.check_max:
                await self.transactions.roll_back_unresolved(entry)
                continue
            if len(self._asking) >= MAX_CHECKS_IN_FLIGHT:
                wake = now  # the rest at the next pass, once some answers came
                break
            checked = self.transactions.recheck(entry)
            if checked is not None:
                url, transaction = checked
                task = asyncio.create_task(self._ask(url, transaction))
                self._asking.add(task)
                task.add_done_callback(self._asking.discard)
        await self.persist()
        return max(0.01, (wake - self.now_ms()) / 1000)

    async def _ask(self, url: str, transaction: dict[str, Any]) -> None:
        answer = await self.ask(url, transaction)
        if answer is not CheckAnswer.UNKNOWN:
            await self.transactions.resolve_checked(
                transaction["transaction_id"], answer is CheckAnswer.COMMIT
            )

    async def persist(self, force: bool = False) -> None:
        """Write the table's checkpoint if it moved (at most every PERSIST_INTERVAL_S unless forced)."""
        table = self.transactions.table
        progress = table.progress()
        if not table.checkpoint_changed(progress):
            return
        if not force and self.clock() - self._persisted_at < PERSIST_INTERVAL_S:
            return
        await self.transactions.durable_so_far()
        await asyncio.to_thread(table.write_checkpoint, progress)
        self._persisted_at = self.clock()
