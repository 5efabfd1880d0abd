"""The data source's options, parsed once on the driver into frozen values (names as Spark's Kafka source).

Spark hands options over as a case-insensitive map of strings; a wrong value fails the query at
planning time with a message that names the option.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from spark_jobs.errors import WharfSourceError

EARLIEST = -2  # in offset JSON, as in Spark's Kafka source
LATEST = -1

OffsetSpec = Literal["earliest", "latest"] | dict[str, int]
Discovery = Literal["auto", "route", "direct"]
DeliveryGuarantee = Literal["exactly_once", "at_least_once"]
PRODUCER_GROUP = re.compile(r"[a-zA-Z0-9_-]{1,200}")


class OptionError(WharfSourceError):
    """An option is missing or malformed."""


def _get(options: Mapping[str, str], name: str) -> str | None:
    # Spark lowercases option names; a plain dict from tests may not have.
    value = options.get(name.lower(), options.get(name))
    return None if value is None else str(value)


def _required(options: Mapping[str, str], name: str) -> str:
    value = _get(options, name)
    if not value:
        raise OptionError(f"option {name!r} is required")
    return value


def _int(options: Mapping[str, str], name: str, default: int | None, minimum: int) -> int | None:
    raw = _get(options, name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {name!r} must be {minimum} or more, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(f"option {name!r} must be true or false, got {raw!r}")
    return lowered == "true"


def _user(options: Mapping[str, str]) -> str | None:
    """``accessKey:secretKey`` for a broker with an ACL; never quoted in an error (it is a secret)."""
    user = _get(options, "user")
    if user is None or user == "":
        return None
    access_key, separator, _ = user.partition(":")
    if not separator or not access_key:
        raise OptionError("option 'user' must be accessKey:secretKey")
    return user


def _addresses(options: Mapping[str, str]) -> tuple[str, ...]:
    addresses = tuple(
        part.strip().rstrip("/") for part in _required(options, "url").split(",") if part.strip()
    )
    if not addresses:
        raise OptionError("option 'url' names no broker")
    return addresses


def parse_offsets(name: str, raw: str, topic: str) -> OffsetSpec:
    """``earliest``, ``latest`` or JSON: ``{"<topic>": {"0": 23, "1": -2}}`` or just ``{"0": 23}``.

    Keys are queue ids, or ``broker:queue_id`` when several brokers serve the topic; -2 is
    the earliest offset and -1 the latest."""
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return "earliest" if text.lower() == "earliest" else "latest"
    try:
        document = json.loads(text)
    except ValueError:
        raise OptionError(f"option {name!r} must be earliest, latest or JSON, got {raw!r}") from None
    if isinstance(document, dict) and set(document) == {topic} and isinstance(document[topic], dict):
        document = document[topic]
    if not isinstance(document, dict):
        raise OptionError(f"option {name!r} must be a JSON object of queue -> offset, got {raw!r}")
    offsets = {}
    for key, value in document.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < EARLIEST:
            raise OptionError(f"option {name!r}: queue {key!r} has offset {value!r}, not an integer >= -2")
        queue = str(key).rpartition(":")[2]
        if not queue.isdigit():
            raise OptionError(f"option {name!r}: {key!r} is not a queue id nor broker:queue_id")
        offsets[str(key)] = value
    return offsets


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Everything a batch or streaming read needs, planned on the driver and shipped to executors."""

    addresses: tuple[str, ...]
    topic: str
    discovery: Discovery = "auto"
    starting_offsets: OffsetSpec = "earliest"
    ending_offsets: OffsetSpec = "latest"
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    max_messages_per_pull: int = 5000
    tags: str | None = None
    push_filters: bool = False
    max_offsets_per_trigger: int | None = None
    timeout_s: float = 30.0
    user: str | None = field(default=None, repr=False)  # accessKey:secretKey

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool = False) -> ReadOptions:
        topic = _required(options, "topic")
        addresses = _addresses(options)
        discovery = (_get(options, "discovery") or "auto").lower()
        if discovery not in ("auto", "route", "direct"):
            raise OptionError(f"option 'discovery' must be auto, route or direct, got {discovery!r}")
        starting_raw = _get(options, "startingOffsets")
        starting = parse_offsets("startingOffsets", starting_raw, topic) if starting_raw else None
        if starting is None:
            starting = "latest" if streaming else "earliest"
        ending_raw = _get(options, "endingOffsets")
        if streaming and ending_raw:
            raise OptionError("option 'endingOffsets' is for batch reads; a stream has no end")
        ending = parse_offsets("endingOffsets", ending_raw, topic) if ending_raw else "latest"
        if not streaming and starting == "latest":
            raise OptionError("startingOffsets 'latest' reads nothing in a batch query; use earliest or JSON")
        if ending == "earliest" or (isinstance(ending, dict) and EARLIEST in ending.values()):
            raise OptionError("endingOffsets cannot be earliest (-2)")
        ending_timestamp = _int(options, "endingTimestamp", None, 0)
        if streaming and ending_timestamp is not None:
            raise OptionError("option 'endingTimestamp' is for batch reads; a stream has no end")
        tags = _get(options, "tags")
        return cls(
            addresses=addresses,
            topic=topic,
            discovery=discovery,  # type: ignore[arg-type]
            starting_offsets=starting,
            ending_offsets=ending,
            starting_timestamp=_int(options, "startingTimestamp", None, 0),
            ending_timestamp=ending_timestamp,
            min_partitions=_int(options, "minPartitions", None, 1),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            max_messages_per_pull=_int(options, "maxMessagesPerPull", 5000, 1) or 5000,
            tags=None if not tags or tags.strip() == "*" else tags.strip(),
            push_filters=_bool(options, "pushFilters", False),
            max_offsets_per_trigger=_int(options, "maxOffsetsPerTrigger", None, 1),
            timeout_s=(_int(options, "timeoutMs", 30_000, 1) or 30_000) / 1000,
            user=_user(options),
        )


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Where and how a DataFrame's rows are produced: ``addresses`` bootstrap the topic's route."""

    addresses: tuple[str, ...]
    topic: str
    batch_size: int = 1000
    timeout_s: float = 30.0
    user: str | None = field(default=None, repr=False)  # accessKey:secretKey
    delivery_guarantee: DeliveryGuarantee = "exactly_once"
    producer_group: str | None = None  # exactly once: the transactions' group (default per write/query)

    @property
    def exactly_once(self) -> bool:
        return self.delivery_guarantee == "exactly_once"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        guarantee = (_get(options, "deliveryGuarantee") or "exactly_once").strip().lower()
        if guarantee not in ("exactly_once", "at_least_once"):
            raise OptionError(
                f"option 'deliveryGuarantee' must be exactly_once or at_least_once, got {guarantee!r}"
            )
        group = _get(options, "producerGroup") or None
        if group is not None and not PRODUCER_GROUP.fullmatch(group):
            raise OptionError(
                f"option 'producerGroup' must be 1 to 200 letters, digits, '-' or '_', got {group!r}"
            )
        return cls(
            addresses=_addresses(options),
            topic=_required(options, "topic"),
            batch_size=_int(options, "batchSize", 1000, 1) or 1000,
            timeout_s=(_int(options, "timeoutMs", 30_000, 1) or 30_000) / 1000,
            user=_user(options),
            delivery_guarantee=guarantee,  # type: ignore[arg-type]
            producer_group=group,
        )
