"""The broker core's exceptions. They know nothing of HTTP: app/api/errors.py maps each class to its
error code in one table (a test fails when a class is missing from it), and the fields some carry
(the brokers that host a topic, a queue's offset range) go into the error answer as they are."""

from __future__ import annotations

from app.routing.topic_config import TopicConfig


class BrokerError(Exception):
    """A request the broker core refuses; ``fields`` go into the error answer beside the message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def fields(self) -> dict[str, object]:
        return {}


class BadRequestError(BrokerError):
    """The request's parameters do not go together (a commit without a group, a pull without both)."""


class InvalidParameterError(BrokerError):
    """A parameter is out of range (``from`` that is neither last, first nor a timestamp)."""


class InvalidOffsetError(BrokerError):
    """An offset is negative."""


class InvalidPropertyError(BrokerError):
    """A property is reserved, or a key is empty or holds whitespace."""


class WriteQueueError(BrokerError):
    """A produce names a queue outside the topic's write queues."""


class TopicNotFoundError(BrokerError):
    """The topic does not exist anywhere this broker knows of."""


class QueueNotFoundError(BrokerError):
    """The queue does not exist in the topic."""


class TopicNotWritableError(BrokerError):
    """The topic's permission forbids producing."""


class TopicExistsError(BrokerError):
    """A create names a topic that exists with another configuration; nothing was changed."""

    def __init__(self, name: str, existing: TopicConfig) -> None:
        super().__init__(
            f"topic {name!r} exists with another configuration: read_queues={existing.read_queue_nums}, "
            f"write_queues={existing.write_queue_nums}, perm={existing.perm}, order={existing.order}"
        )
        self.existing = existing


class TooManyTopicsError(BrokerError):
    """A bulk create lists more topics than its cap."""


class NoRegistryError(BrokerError):
    """A request needs the route registry and this broker runs without one."""


class ClusterNotFoundError(BrokerError):
    """No live master in the named cluster or broker list."""


class MisdirectedError(BrokerError):
    """Other brokers host the topic: the client should ask one of ``brokers``."""

    def __init__(self, message: str, brokers: list[str]) -> None:
        super().__init__(message)
        self.brokers = brokers

    @property
    def fields(self) -> dict[str, object]:
        return {"brokers": self.brokers}


class OffsetOutOfRangeError(BrokerError):
    """A committed offset is outside the queue's [min_offset, max_offset]; nothing was committed."""

    def __init__(self, topic: str, queue_id: int, offset: int, min_offset: int, max_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside queue {queue_id} of topic {topic!r}: {min_offset}..{max_offset}"
        )
        self.topic = topic
        self.queue_id = queue_id
        self.min_offset = min_offset
        self.max_offset = max_offset

    @property
    def fields(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "queue_id": self.queue_id,
            "min_offset": self.min_offset,
            "max_offset": self.max_offset,
        }


class MemberNotFoundError(BrokerError):
    """The client is not a member of the group (never joined, left or expired): heartbeat first."""


class GroupConflictError(BrokerError):
    """A member asks for another model or allocation strategy than the group's other members use."""


class GroupFullError(BrokerError):
    """A new member would pass the group's cap on members (WHARF_MAX_GROUP_MEMBERS)."""


class GenerationFencedError(BrokerError):
    """A member's commit names an older generation, or a queue it does not own in this one: nothing
    was committed. ``generation`` is the group's current one."""

    def __init__(self, message: str, generation: int) -> None:
        super().__init__(message)
        self.generation = generation

    @property
    def fields(self) -> dict[str, object]:
        return {"generation": self.generation}


class ReceiptHandleNotFoundError(BrokerError):
    """A receipt handle names no message the group popped from the topic (never handed out, of
    another group or topic, or not a handle at all)."""


class ReceiptHandleExpiredError(BrokerError):
    """A receipt handle is not the message's latest: it was acked, handed out again, nacked or
    given another invisible time since."""


class MessageNotFoundError(BrokerError):
    """No stored message here has that id, or sits at that queue offset."""


class InvalidFilterExpressionError(BrokerError):
    """A SQL92 filter expression does not parse; ``line`` and ``column`` (from 1) say where."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.line = line
        self.column = column

    @property
    def fields(self) -> dict[str, object]:
        return {"line": self.line, "column": self.column}


class QueueNotLockedError(BrokerError):
    """An ordered member commits a queue whose lock it does not hold (it expired, was released,
    or another member holds it): nothing was committed."""


class TransactionNotFoundError(BrokerError):
    """A transaction id names no transaction stored on this broker."""


class TooManyOpenTransactionsError(BrokerError):
    """A begin would pass the cap on open transactions (WHARF_MAX_OPEN_TRANSACTIONS): nothing was stored."""


class TransactionEndedError(BrokerError):
    """The transaction was committed or rolled back already (``state``, when it is known)."""

    def __init__(self, transaction_id: str, state: object | None, how: str = "has ended") -> None:
        value = getattr(state, "value", None)
        ended = {"COMMITTED": "was committed", "ROLLED_BACK": "was rolled back"}.get(str(value), how)
        super().__init__(f"transaction {transaction_id} {ended}")
        self.transaction_id = transaction_id
        self.state = value

    @property
    def fields(self) -> dict[str, object]:
        return {"transaction_id": self.transaction_id, "state": self.state}


class TooManyPushSubscriptionsError(BrokerError):
    """A new push subscription would pass the broker's cap (WHARF_PUSH_MAX_SUBSCRIPTIONS)."""


class PromotionError(BrokerError):
    """A promotion that cannot happen: this broker is the master already, or another broker of its
    name was promoted first (the epoch it expected moved on)."""


class MasterAliveError(PromotionError):
    """A manual promotion of a slave whose master still holds its lease (or, without a route
    registry, whose master it is connected to): nothing was changed; ``force`` promotes anyway."""

    def __init__(self, message: str, master_url: str, lease_ends_in_ms: int | None) -> None:
        super().__init__(message)
        self.master_url = master_url
        self.lease_ends_in_ms = lease_ends_in_ms

    @property
    def fields(self) -> dict[str, object]:
        return {"master_url": self.master_url, "lease_ends_in_ms": self.lease_ends_in_ms}
