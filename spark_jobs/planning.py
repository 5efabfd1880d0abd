"""Planning on the driver: which (broker, queue) pairs hold the topic, and which offset range to read.

Discovery asks the route endpoint (``GET /v1/topics/{topic}/route``) of the first bootstrap address
that answers (wharf_client's QueueClient, which reads the route as every client does); the route names every broker whose queues hold the topic and the master's address,
so a topic spread over several brokers is read from each of them. When the registry has no route
yet (a topic created a moment ago, before the broker's next heartbeat) ``auto`` discovery falls
back to reading the given addresses directly. Each broker is then asked for its queues' offsets
(``GET /v1/topics/{topic}/queues``) and, for time starts, for the offset of a time.

A queue is named by its key: the queue id when the addresses were given directly, or
``broker:queue_id`` when the route named the broker. Offset maps (startingOffsets, the streaming
checkpoint) use these keys; a bare queue id in a map applies to that queue id on every broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition
from wharf_client.queues import QueueClient

from spark_jobs.errors import DataLossError, WharfSourceError
from spark_jobs.options import EARLIEST, LATEST, OffsetSpec, ReadOptions


@dataclass(frozen=True, slots=True, order=True)
class QueueRef:
    """One queue of the topic on one broker."""

    broker: str  # the broker's name from the route; "" when the address was given directly
    queue_id: int
    address: str
    replicas: tuple[str, ...] = ()  # the other brokers of its name, read when it does not answer

    @property
    def key(self) -> str:
        return f"{self.broker}:{self.queue_id}" if self.broker else str(self.queue_id)


@dataclass(frozen=True, slots=True)
class QueueState:
    """A queue and its offsets when planning looked."""

    ref: QueueRef
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark input partition: the messages ``[from_offset, until_offset)`` of one queue."""

    topic: str
    broker: str
    address: str
    queue_id: int
    from_offset: int
    until_offset: int
    replicas: tuple[str, ...] = ()  # the other brokers of its name, read when it does not answer

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def discover(client: QueueClient, options: ReadOptions) -> list[QueueState]:
    """Every readable queue of the topic with its current offsets, in (broker, queue) order."""
    topic = options.topic
    route = None
    if options.discovery != "direct":
        route = client.route(options.addresses, topic)
        if route is None and options.discovery == "route":
            raise WharfSourceError(f"no route for topic {topic!r} at {', '.join(options.addresses)}")
    brokers: dict[tuple[str, str], set[int] | None] = {}  # (name, address) -> readable queue ids
    if route is not None:
        by_broker: dict[tuple[str, str], set[int]] = {}
        for readable_queue in route.read_queues:
            key = (readable_queue.broker_name, readable_queue.address)
            by_broker.setdefault(key, set()).add(readable_queue.queue_id)
        brokers.update(by_broker)
    else:
        several = len(options.addresses) > 1
        brokers = {
            (address.split("://")[-1] if several else "", address): None for address in options.addresses
        }
    states = []
    for (name, address), readable in brokers.items():
        for queue in client.queues(address, topic):
            if readable is None or queue.queue_id in readable:
                states.append(
                    QueueState(
                        QueueRef(name, queue.queue_id, address, client.fallbacks.get(address, ())),
                        queue.min_offset,
                        queue.max_offset,
                    )
                )
    return sorted(states, key=lambda state: state.ref)


def lookup(offsets: Mapping[str, int], ref: QueueRef) -> int | None:
    """The offset a map gives a queue: by its full key, else by its bare queue id."""
    value = offsets.get(ref.key)
    if value is None:
        value = offsets.get(str(ref.queue_id))
    return value


def resolve_starts(
    client: QueueClient, options: ReadOptions, states: list[QueueState], spec: OffsetSpec | None = None
) -> dict[QueueRef, int]:
    """Where each queue's read begins; a start before the queue's first stored message is data loss."""
    spec = options.starting_offsets if spec is None else spec
    starts = {}
    for state in states:
        if options.starting_timestamp is not None:
            offset = _offset_of_time(client, options, state, options.starting_timestamp)
        elif spec == "earliest":
            offset = state.min_offset
        elif spec == "latest":
            offset = state.max_offset
        else:
            wanted = lookup(spec, state.ref)
            if wanted is None or wanted == EARLIEST:
                offset = state.min_offset
            elif wanted == LATEST:
                offset = state.max_offset
            else:
                offset = wanted
        if offset > state.max_offset:
            raise WharfSourceError(
                f"queue {state.ref.key} of {options.topic!r} ends at offset {state.max_offset}; "
                f"a read cannot start at {offset}"
            )
        if offset < state.min_offset:
            if options.fail_on_data_loss:
                raise DataLossError(
                    f"queue {state.ref.key} of {options.topic!r}: offsets {offset}..{state.min_offset - 1} "
                    "were deleted by retention (set failOnDataLoss=false to skip them)"
                )
            offset = state.min_offset
        starts[state.ref] = offset
    return starts


def resolve_ends(client: QueueClient, options: ReadOptions, states: list[QueueState]) -> dict[QueueRef, int]:
    """Where each queue's batch read stops (exclusive), never past what is stored now."""
    ends = {}
    spec = options.ending_offsets
    for state in states:
        if options.ending_timestamp is not None:
            offset = _offset_of_time(client, options, state, options.ending_timestamp)
        elif spec == "latest" or spec == "earliest":
            offset = state.max_offset
        else:
            wanted = lookup(spec, state.ref)
            offset = state.max_offset if wanted is None or wanted == LATEST else wanted
        if offset > state.max_offset:
            raise WharfSourceError(
                f"endingOffsets asks queue {state.ref.key} of {options.topic!r} for offset {offset}, "
                f"but it ends at {state.max_offset}"
            )
        ends[state.ref] = offset
    return ends


def _offset_of_time(client: QueueClient, options: ReadOptions, state: QueueState, timestamp_ms: int) -> int:
    if state.max_offset == state.min_offset:
        return state.max_offset
    offset = client.search_offset(state.ref.address, options.topic, state.ref.queue_id, timestamp_ms)
    # The lookup answers within the queue's stored offsets; clamp in case retention moved in between.
    return min(max(offset, state.min_offset), state.max_offset)


def plan_ranges(
    topic: str,
    starts: Mapping[QueueRef, int],
    ends: Mapping[QueueRef, int],
    min_partitions: int | None = None,
) -> list[OffsetRange]:
    """One range per non-empty queue interval; large ones split so there are about ``min_partitions``.

    As Spark's Kafka source does, a range gets a share of ``min_partitions`` proportional to its
    size (at least one), and is cut into that many nearly equal pieces."""
    ranges = []
    for ref, start in sorted(starts.items()):
        end = ends.get(ref, start)
        if end < start:
            raise WharfSourceError(
                f"queue {ref.key} of {topic!r}: the read would start at {start} but end at {end}"
            )
        if end > start:
            ranges.append(OffsetRange(topic, ref.broker, ref.address, ref.queue_id, start, end, ref.replicas))
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(piece.size for piece in ranges)
    split: list[OffsetRange] = []
    for piece in ranges:
        parts = max(1, round(piece.size / total * min_partitions))
        parts = min(parts, piece.size)
        bounds = [piece.from_offset + piece.size * i // parts for i in range(parts + 1)]
        split.extend(
            OffsetRange(topic, piece.broker, piece.address, piece.queue_id, low, high, piece.replicas)
            for low, high in zip(bounds, bounds[1:], strict=False)
        )
    return split
