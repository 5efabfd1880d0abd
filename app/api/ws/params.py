"""The query parameters of ``/v1/ws/subscribe`` and where a subscriber starts reading."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from app.api.errors import ApiError, ErrorCode
from app.broker import Broker, parse_start
from app.broker.filters import FilterExpression, filter_of
from app.store import MessageFilter
from app.store.consumer_offsets import ConsumeFromWhere
from app.store.filter import FilterExpressionError

SUBSCRIBE_FORMATS = ("json", "binary", "cloudevents")
GROUP_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]{1,255}$")


@dataclass(frozen=True, slots=True)
class SubscribeParams:
    topic: str
    group: str | None
    message_filter: MessageFilter | None
    policy: ConsumeFromWhere  # from=last, first, or a timestamp (store time, ms)
    timestamp_ms: int | None
    queues: list[int] | None  # None: every read queue (shared with the group's other members)
    credit: int
    read_queues: int
    expression: FilterExpression = FilterExpression.tags()  # the filter as given
    binary: bool = False  # format=binary: messages frames carry the stored records
    cloudevents: bool = False  # format=cloudevents: messages frames carry structured CloudEvents


def _integer(name: str, raw: str) -> int:
    if not raw.strip().isdigit():
        raise ApiError(ErrorCode.INVALID_PARAMETER, f"{name} must be a whole number >= 0, got {raw!r}")
    return int(raw)


async def parse_subscribe(query: Mapping[str, str], broker: Broker) -> SubscribeParams:
    """Validate the query; ApiError names the first problem (the socket closes with it)."""
    topic = query.get("topic")
    if not topic:
        raise ApiError(ErrorCode.BAD_REQUEST, "the topic parameter is required")
    config = await broker.topic(topic)
    if not config.readable:
        raise ApiError(ErrorCode.TOPIC_NOT_READABLE, f"topic {topic!r} does not allow reading")
    group = query.get("group") or None
    if group is not None and not GROUP_PATTERN.match(group):
        raise ApiError(
            ErrorCode.INVALID_PARAMETER,
            f"group {group!r} must be 1-255 letters, digits or % | - _",
        )
    expression = filter_of(query.get("filter_type"), query.get("filter"), query.get("tags"))
    try:
        message_filter = expression.compile()
    except FilterExpressionError as exc:
        raise ApiError(ErrorCode.INVALID_TAG_EXPRESSION, str(exc)) from None
    policy, timestamp_ms = parse_start(query.get("from") or "last")
    queues = None
    raw_queues = query.get("queues")
    if raw_queues:
        queues = sorted({_integer("queues", part) for part in raw_queues.split(",")})
        for queue_id in queues:
            if queue_id >= config.read_queue_nums:
                raise ApiError(
                    ErrorCode.QUEUE_NOT_FOUND,
                    f"topic {topic!r} has read queues 0..{config.read_queue_nums - 1}, not {queue_id}",
                )
    wanted = query.get("format", "json")
    if wanted not in SUBSCRIBE_FORMATS:
        raise ApiError(
            ErrorCode.INVALID_PARAMETER, f"format must be json, binary or cloudevents, not {wanted[:50]!r}"
        )
    credit = _integer("credit", query.get("credit", "0"))
    limit = broker.settings.ws_max_credit
    if credit > limit:
        raise ApiError(ErrorCode.INVALID_PARAMETER, f"credit is {credit}, the limit is {limit}")
    return SubscribeParams(
        topic,
        group,
        message_filter,
        policy,
        timestamp_ms,
        queues,
        credit,
        config.read_queue_nums,
        expression,
        wanted == "binary",
        wanted == "cloudevents",
    )


def start_offset(broker: Broker, params: SubscribeParams, queue_id: int) -> int:
    """Where a subscriber starts on a queue.

    With a group: its committed offset, else where the broker's start rules put a new group (those
    of the HTTP consumers: RocketMQ's computePullFromWhere with ``from`` as the policy). That first
    position is committed at once: otherwise a subscriber that disconnects before its first ack
    would, with ``from=last``, come back past the messages stored in between. A committed offset
    past the queue's end (the queue lost its tail in a crash) starts at the end. Without a group:
    simply the queue's last or first offset, or the first at or after the timestamp.
    """
    topic, group = params.topic, params.group
    store = broker.store
    if group is not None:
        offset = broker.group_offset(group, topic, queue_id, params.policy, params.timestamp_ms)
        offset = max(store.min_offset(topic, queue_id), min(offset, store.max_offset(topic, queue_id)))
        broker.commit_offset(group, topic, queue_id, offset)
        return offset
    if params.policy is ConsumeFromWhere.LAST_OFFSET:
        return store.max_offset(topic, queue_id)
    if params.policy is ConsumeFromWhere.FIRST_OFFSET:
        return store.min_offset(topic, queue_id)
    assert params.timestamp_ms is not None
    return store.search_offset(topic, queue_id, params.timestamp_ms)
