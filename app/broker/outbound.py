"""What the broker core asks of other processes, as interfaces the core declares and an outbound
adapter carries out (:class:`app.outbound.http.HttpOutbound`, over HTTP and WebSocket). The core is
handed one at construction (``Broker(..., outbound=...)``) and never imports an HTTP library itself.

* a slave's link to its master (:mod:`app.broker.ha_slave`): the replication stream, and the
  metadata it follows beside it;
* a create forwarded to the other masters of a cluster (:mod:`app.broker.topic_admin`);
* a transaction's check-back at its producer group's endpoint (:mod:`app.broker.transaction_check`).

Failures of the transport reach the core as ordinary exceptions, except where an interface says
otherwise: the callers retry (replication), count it as an answer (a forwarded create) or as unknown
(a check-back).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from app.broker.transaction_check import CheckAnswer
from app.store.epochs import Epoch

# An admin account's access key and secret key: a slave's credentials at a master with an ACL.
Account = tuple[str, str]


class ReplicationStream(Protocol):
    """A slave's open replication stream: the master's frames in (its epochs as text, then CommitLog
    chunks as bytes), the slave's acknowledgements out. Iterating ends when the master closes it."""

    async def recv(self) -> str | bytes: ...

    async def send(self, message: str, /) -> None: ...

    async def close(self) -> None: ...

    def __aiter__(self) -> AsyncIterator[str | bytes]: ...


class MasterMetadata(Protocol):
    """A slave's session with its master's metadata (app.broker.ha_metadata)."""

    async def push_offsets(self, offsets: list[dict[str, Any]]) -> None:
        """Hand the master the offsets committed here ahead of its own."""

    async def fetch(self, version: int, wait_ms: int) -> dict[str, Any]:
        """The master's metadata once its version is not ``version`` (or ``wait_ms`` passed)."""


class MasterLink(Protocol):
    """How a slave reaches its master (``master`` is its address, ``http://host:port``)."""

    def replicate(
        self,
        master: str,
        offset: int,
        broker_id: int,
        own_url: str,
        epochs: Sequence[Epoch],
        account: Account | None,
    ) -> AbstractAsyncContextManager[ReplicationStream]:
        """The replication stream from CommitLog ``offset``, this log holding ``epochs``."""

    def metadata(
        self, master: str, wait_ms: int, account: Account | None
    ) -> AbstractAsyncContextManager[MasterMetadata]:
        """A metadata session whose requests may be held up to ``wait_ms``."""


@dataclasses.dataclass(frozen=True)
class PeerAnswer:
    """What another broker answered to a forwarded create: its HTTP status (503 when it could not be
    reached) and, for a refusal, its message."""

    status: int
    error: str | None = None


class PeerTopics(Protocol):
    """A session forwarding topic creates to other brokers."""

    async def create_topic(
        self, address: str, request: Mapping[str, Any], headers: Mapping[str, str]
    ) -> PeerAnswer:
        """Forward ``request`` (a create's body) with ``headers`` (the caller's credentials)."""


class CheckBack(Protocol):
    """Asks a producer group's check endpoint about a transaction; anything but an answer (a timeout,
    an error) is :attr:`CheckAnswer.UNKNOWN`."""

    async def __call__(self, url: str, transaction: dict[str, Any]) -> CheckAnswer: ...

    async def aclose(self) -> None: ...


class Outbound(MasterLink, Protocol):
    """Everything the core asks of other processes: handed to :class:`app.broker.core.Broker`."""

    def peers(self) -> AbstractAsyncContextManager[PeerTopics]:
        """A session for forwarding creates to other brokers."""

    def check_back(self) -> CheckBack:
        """A check-back client of its own (its owner closes it)."""
