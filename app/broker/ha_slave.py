"""The slave's side of replication: it connects to its master's replication stream (a WebSocket, over
the outbound adapter's :class:`~app.broker.outbound.MasterLink`), asks for the CommitLog from its own
end, writes each chunk at the same offsets (:meth:`MessageStore.append_replica`, which dispatches the
messages to its ConsumeQueues and index) and acknowledges after each chunk and at least every second. A lost connection is tried
again with a growing backoff, from wherever its log then ends. Beside it, the slave follows the
master's topic configurations and consumer offsets (app.broker.ha_metadata)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from app.broker.ha_master import unframe
from app.broker.outbound import Account, MasterLink, MasterMetadata, ReplicationStream
from app.store import MessageStore
from app.store.epochs import Epoch

log = logging.getLogger(__name__)

ACK_INTERVAL_S = 1.0
BACKOFF_FIRST_S = 0.2
BACKOFF_MAX_S = 5.0

# The master's address (http://host:port), or "" when it is not known yet.
MasterFinder = Callable[[], Awaitable[str]]
# Applies a metadata answer of the master (app.broker.ha_metadata) to this broker.
MetadataApplier = Callable[[dict[str, Any]], Awaitable[None]]
# The offsets committed on this slave that are ahead of the master's last answer.
OffsetsAhead = Callable[[], Awaitable[list[dict[str, Any]]]]

T = TypeVar("T")


async def cancel_tasks(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel the tasks and wait until each has ended; raise the first one's error, if any.

    asyncio.wait, not ``await task`` under ``suppress(CancelledError)``: that would also swallow a
    cancellation of the caller itself (which then went on as if the tasks had ended)."""
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    await asyncio.wait(tasks)
    for task in tasks:
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error


async def run_to_end(work: Awaitable[T]) -> T:
    """Await ``work``; a cancellation that comes meanwhile waits for it to end, then goes on.

    For the slave's writes to its store, which run in threads: a cancelled ``asyncio.to_thread``
    returns at once while its thread goes on, so without this a promotion (which stops the slave,
    then clamps the offsets and begins an epoch at the log's end) could run beside a metadata
    answer's offsets or a replicated chunk still being written, and those would land after it."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved: the caller gets the cancellation
        raise


class StaleMasterError(Exception):
    """The broker asked is behind this slave's epoch: a former master, not the master."""


def encode_epochs(entries: Sequence[Epoch]) -> str:
    """``epoch:start`` pairs, comma-separated: the ``epochs`` parameter of the replication socket."""
    return ",".join(f"{epoch}:{start}" for epoch, start in entries)


def decode_epochs(text: str) -> list[Epoch]:
    """The entries of an ``epochs`` parameter; ValueError for one that is not ``epoch:start,...``."""
    entries: list[Epoch] = []
    for pair in filter(None, text.split(",")):
        epoch, _, start = pair.partition(":")
        if not (epoch.isdigit() and start.isdigit()):
            raise ValueError("epochs is a list of epoch:start pairs, e.g. 0:0,1:4096")
        entries.append((int(epoch), int(start)))
    return entries


class NoMasterLink:
    """A slave built without an outbound adapter: it cannot reach a master (every attempt fails
    and is tried again after the backoff)."""

    def replicate(
        self,
        master: str,
        offset: int,
        broker_id: int,
        own_url: str,
        epochs: Sequence[Epoch],
        account: Account | None,
    ) -> AbstractAsyncContextManager[ReplicationStream]:
        raise ConnectionError(f"no outbound adapter to reach {master}")

    def metadata(
        self, master: str, wait_ms: int, account: Account | None
    ) -> AbstractAsyncContextManager[MasterMetadata]:
        raise ConnectionError(f"no outbound adapter to reach {master}")


class HaSlave:
    def __init__(
        self,
        store: MessageStore,
        find_master: MasterFinder,
        broker_id: int,
        own_url: str,
        apply_metadata: MetadataApplier | None = None,
        metadata_interval_ms: int = 10_000,
        account: Account | None = None,
        offsets_ahead: OffsetsAhead | None = None,
        link: MasterLink | None = None,
        log_cut: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.find_master = find_master
        self.broker_id = broker_id
        self.own_url = own_url
        self.apply_metadata = apply_metadata
        self.metadata_interval_ms = metadata_interval_ms
        self.offsets_ahead = offsets_ahead
        # Sent to a master with an ACL: an admin account's access and secret key.
        self.account = account
        self.link: MasterLink = link if link is not None else NoMasterLink()
        # Told when this log was cut or started again elsewhere, before anything is stored at the
        # offsets it no longer holds.
        self.log_cut = log_cut
        self.metadata_version = -1  # the master's version last applied; -1: none yet
        self.master_url = ""
        # The master this log follows (replication connected, logs agreed); "" when none. Offsets
        # are taken only from its metadata: a former master's, still answering, may cover
        # messages it alone stored, at queue offsets this log's master fills with others.
        self.following = ""
        self._offsets = asyncio.Lock()  # a clamp and a copy of offsets never interleave
        self._tasks: list[asyncio.Task[None]] = []
        self._connection: ReplicationStream | None = None

    @property
    def connected(self) -> bool:
        """Replication is connected and this log agrees with its master's."""
        return bool(self.following)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._retrying("replication", self._replicate), name="ha-slave")]
        if self.apply_metadata is not None:
            self._tasks.append(
                asyncio.create_task(
                    self._retrying("metadata sync", self._follow_metadata), name="ha-metadata"
                )
            )

    async def stop(self) -> None:
        await cancel_tasks(self._tasks)
        self._tasks = []

    async def retarget(self) -> None:
        """The master changed: drop the stream, so the next attempt asks who the master is."""
        if self._connection is not None:
            await self._connection.close()

    async def _retrying(self, what: str, follow: Callable[[str], Awaitable[None]]) -> None:
        """Run ``follow(master)`` again after each failure, with a growing backoff."""
        backoff = BACKOFF_FIRST_S
        while True:
            try:
                master = await self.find_master()
                if master:
                    self.master_url = master
                    await follow(master)
                    backoff = BACKOFF_FIRST_S
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a lost master, a refused chunk: try again later
                log.warning("%s from %s stopped: %s", what, self.master_url or "(no master)", error)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _follow_metadata(self, master: str) -> None:
        """Ask for the master's metadata again as soon as the last answer is applied: the master
        holds each request until its metadata changes or the interval passes. Offsets committed
        here ahead of the master's go to it first."""
        assert self.apply_metadata is not None
        wait_ms = self.metadata_interval_ms
        async with self.link.metadata(master, wait_ms, self.account) as session:
            while True:
                ahead = await self.offsets_ahead() if self.offsets_ahead is not None else []
                if ahead:
                    await session.push_offsets(ahead)
                answer = await session.fetch(self.metadata_version, wait_ms)
                async with self._offsets:
                    if self.following != master:
                        answer = {**answer, "offsets": []}
                    await run_to_end(self.apply_metadata(answer))
                self.metadata_version = answer["version"]

    async def _replicate(self, master: str) -> None:
        offset = self.store.commitlog.max_offset
        epochs = self.store.epochs.entries
        async with self.link.replicate(
            master, offset, self.broker_id, self.own_url, epochs, self.account
        ) as connection:
            if not await self._agree(connection, master, offset):
                return
            async with self._offsets:
                # Offsets copied past this log's queue ends (from an earlier master, or from this
                # one while the log lagged) may cover messages this master never had: lowered
                # before any is handed over, so none skips what this master stores there.
                await run_to_end(asyncio.to_thread(self.store.consumer_offsets.clamp_to_queue_ends))
                self._connection = connection
                self.following = master
            log.info("replicating from %s at CommitLog offset %d", master, offset)
            acks = asyncio.create_task(self._ack_every_second(connection))
            try:
                async for message in connection:
                    if isinstance(message, str):
                        raise ValueError(f"the master sent text: {message[:200]}")
                    start, data = unframe(message)
                    await run_to_end(asyncio.to_thread(self.store.append_replica, start, data))
                    await self._ack(connection)
            finally:
                self.following = ""
                self._connection = None
                acks.cancel()
                # Not ``await acks`` under suppress(CancelledError): a cancellation of this task
                # arriving meanwhile would be taken for the acks' own, and the task would go on.
                await asyncio.wait([acks])
                if not acks.cancelled():
                    acks.exception()  # retrieved: the stream's own error is the one that counts

    async def _agree(self, connection: ReplicationStream, master: str, offset: int) -> bool:
        """Read the master's first frame, its epochs and where this log must be cut to follow it.
        False when the log was cut: the caller connects again from the new end."""
        first = await connection.recv()
        if not isinstance(first, str):
            raise ValueError("the master's first frame is not its epochs")
        answer = json.loads(first)
        entries = [(int(epoch), int(start)) for epoch, start in answer["epochs"]]
        if entries[-1][0] < self.store.epochs.last:
            raise StaleMasterError(
                f"{master} is in epoch {entries[-1][0]}, behind this log's epoch {self.store.epochs.last}"
            )
        start = answer.get("start_at", offset)
        if start > offset:
            log.warning("%s stores its CommitLog from %d only: starting this copy again there", master, start)
            await run_to_end(asyncio.to_thread(self.store.restart_replica_at, start))
            self._cut()
        cut = answer.get("truncate_to")
        if cut is not None and cut < offset:
            log.warning("%s lacks this log past %d (epochs %s): cutting it there", master, cut, entries)
            await run_to_end(asyncio.to_thread(self.store.cut_back, cut))
            self._cut()
        if entries != self.store.epochs.entries:
            await run_to_end(asyncio.to_thread(self.store.epochs.replace, entries))
        return cut is None or cut >= offset

    def _cut(self) -> None:
        if self.log_cut is not None:
            self.log_cut()

    async def _ack(self, connection: ReplicationStream) -> None:
        await connection.send(json.dumps({"acked_offset": self.store.commitlog.max_offset}))

    async def _ack_every_second(self, connection: ReplicationStream) -> None:
        while True:
            await self._ack(connection)
            await asyncio.sleep(ACK_INTERVAL_S)
