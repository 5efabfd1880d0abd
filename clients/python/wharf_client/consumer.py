"""The pull consumer: long-poll every queue of a topic, hand messages out in order per queue,
commit what the application finished.

:class:`PullConsumer` is :class:`wharf_client.aio_consumer.AsyncConsumer` run on an event loop of
its own thread (:class:`wharf_client.blocking.LoopThread`): one fetcher task per queue long-polls its
broker, fetched messages wait in a local cache, and fetchers pause while it holds 1000 messages or
100 MiB (flow control, SPEC 4). A message counts as processed when the application asks for the
next one (or calls :meth:`PullConsumer.commit` after handling it), so a crash re-delivers at most
the message in hand: at-least-once.

Options for one-off readers (the ``wharf consume`` command): ``start`` is where a group without a
committed offset begins (``last``, ``first`` or a time in ms); ``auto_commit=False`` commits only
when :meth:`PullConsumer.commit` is called; ``stop_at_end`` reads each queue up to its end once,
after which :attr:`PullConsumer.drained` turns true.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from wharf_client.aio_consumer import AsyncConsumer
from wharf_client.auth import User
from wharf_client.blocking import LoopThread
from wharf_client.consumed import AT_END, MOVE_ON, ConsumedMessage, pull_params
from wharf_client.routes import MessageQueue

__all__ = ["AT_END", "MOVE_ON", "ConsumedMessage", "PullConsumer", "pull_params"]


class PullConsumer:
    def __init__(
        self,
        bootstrap: str | Sequence[str],
        topic: str,
        group: str,
        *,
        tags: str = "*",
        sql92: str | None = None,
        batch_size: int = 32,
        max_wait_ms: int = 2_000,
        max_cached_messages: int = 1_000,
        max_cached_bytes: int = 100 * 1024 * 1024,
        commit_interval_s: float = 5.0,
        timeout_s: float = 10.0,
        user: User | None = None,
        start: str = "last",
        auto_commit: bool = True,
        stop_at_end: bool = False,
    ) -> None:
        self.topic = topic
        self.group = group
        self._loop = LoopThread("wharf-consumer")

        async def make() -> AsyncConsumer:  # its connection pool belongs to the loop
            return AsyncConsumer(
                bootstrap,
                topic,
                group,
                tags=tags,
                sql92=sql92,
                batch_size=batch_size,
                max_wait_ms=max_wait_ms,
                max_cached_messages=max_cached_messages,
                max_cached_bytes=max_cached_bytes,
                commit_interval_s=commit_interval_s,
                timeout_s=timeout_s,
                user=user,
                start=start,
                auto_commit=auto_commit,
                stop_at_end=stop_at_end,
            )

        self.consumer = self._loop.run(make())
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> PullConsumer:
        """Look the topic's route up and start a fetcher per readable queue."""
        try:
            self._loop.run(self.consumer.start())
        except BaseException:
            self._loop.run(self.consumer.http.aclose())
            self._loop.close()
            self._closed = True
            raise
        return self

    def close(self) -> None:
        """Stop fetching and, with ``auto_commit``, commit what was finished."""
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self.consumer.close())
        finally:
            self._loop.close()

    def __enter__(self) -> PullConsumer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def queues(self) -> list[MessageQueue]:
        return self.consumer.queues

    @property
    def drained(self) -> bool:
        """With ``stop_at_end``: every queue was read to its end and every message fetched handed out."""
        return self.consumer.drained

    # -- consuming -------------------------------------------------------------------------------

    def poll(self, timeout_s: float = 1.0) -> ConsumedMessage | None:
        """The next message, or None after ``timeout_s``. Asking for it finishes the previous one.

        Raises the BrokerError (401 or 403) of a pull the broker's ACL refused."""
        return self._loop.run(self.consumer.poll(timeout_s))

    def __iter__(self) -> Iterator[ConsumedMessage]:
        """Every message, as they come; with ``stop_at_end``, until the consumer is drained."""
        while not self._closed and not (self.consumer.stop_at_end and self.drained):
            consumed = self.poll(0.5)
            if consumed is not None:
                yield consumed

    def commit(self, *, strict: bool = False) -> None:
        """Commit, per broker, the offsets after the messages the application finished, counting
        the message in hand as finished. A broker that refuses or does not answer is logged and
        tried again at the next commit; ``strict`` raises its error instead."""
        self._loop.run(self.consumer.commit(strict=strict))
