"""Consumer group members over HTTP: heartbeat, leave, pull across the assigned queues, and the
group's view (members, assignments, offsets and lag). The broker core decides (app.broker.groups,
app.broker.group_consume); this module parses and encodes."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from app.api.errors import ApiError, ErrorCode
from app.api.groups import GroupName, queue_offsets
from app.api.schemas import ErrorEnvelope, GroupQueueOffset
from app.api.topics import BrokerDep
from app.broker import dead_letter, group_consume, orderly
from app.broker import retry as retry_module
from app.broker.filters import SQL92, TAG, FilterExpression
from app.broker.groups import Group, Member
from app.codec import as_consumed, message_json, record_to_json

router = APIRouter(prefix="/v1/groups", tags=["groups"])

CLIENT_ID_PATTERN = r"^[a-zA-Z0-9_.:-]+$"
ClientId = Annotated[str, Path(min_length=1, max_length=128, pattern=CLIENT_ID_PATTERN)]

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorEnvelope},
    404: {"model": ErrorEnvelope},
    409: {"model": ErrorEnvelope},
    421: {"model": ErrorEnvelope},
}


class FilterBody(BaseModel):
    """A subscription's filter given as an object: a SQL92 expression over message properties
    (docs/guides/filters.md), or a tag expression."""

    type: Literal["tag", "sql92"]
    expression: str = Field(min_length=1, max_length=4096)

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"type": "sql92", "expression": "region = 'eu'"}]}
    )


Subscription = str | FilterBody


def _subscription(value: Subscription) -> FilterExpression:
    if isinstance(value, str):
        return FilterExpression.tags(value)
    return FilterExpression(value.type, value.expression)


def _subscription_view(expression: FilterExpression) -> Subscription:
    if expression.type == TAG:
        return expression.expression
    return FilterBody(type=SQL92, expression=expression.expression)


class HeartbeatRequest(BaseModel):
    client_id: str = Field(min_length=1, max_length=128, pattern=CLIENT_ID_PATTERN)
    subscriptions: dict[str, Subscription] = Field(
        min_length=1,
        max_length=1000,
        description=(
            "topic -> tag expression ('*', 'TagA || TagB'), or "
            '{"type": "sql92", "expression": "..."} for a SQL92 filter over message properties'
        ),
    )
    model: Literal["clustering", "broadcasting"] = "clustering"
    strategy: Literal["averagely", "circle", "consistent_hash"] = "averagely"
    consume_from: Literal["last", "first", "timestamp"] = Field(
        "last", description="Where the group starts on a queue it has no offset for"
    )
    consume_timestamp_ms: int | None = Field(None, ge=0, description="With consume_from=timestamp")
    consume_mode: Literal["concurrently", "orderly"] = Field(
        "concurrently",
        description="orderly: the member locks its queues (POST /v1/groups/{group}/locks) and reads each "
        "in order, one batch at a time",
    )

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"client_id": "worker-1", "subscriptions": {"orders": "*"}, "consume_from": "first"}]
        },
    )


class Assigned(BaseModel):
    topic: str
    queue_id: int
    offset: int = Field(description="Where the member reads this queue from: the group's offset")


class HeartbeatResponse(BaseModel):
    group: str
    generation: int
    assignments: list[Assigned]
    heartbeat_interval_ms: int


class NextOffset(BaseModel):
    topic: str
    queue_id: int
    next_offset: int


class GroupPullResponse(BaseModel):
    group: str
    generation: int
    messages: list[dict[str, Any]] = Field(
        description="Message objects, as a queue pull answers them; one read from %RETRY%{group} shows "
        "the topic it was produced to as topic, and %RETRY%{group} as retry_topic (its queue_id and "
        "queue_offset are the retry topic's)"
    )
    offsets: list[NextOffset] = Field(
        description="Per queue read past its offset: the offset to commit (%RETRY%{group} for retried messages)"
    )


class QueueRef(BaseModel):
    topic: str = Field(min_length=1, max_length=255)
    queue_id: int = Field(ge=0)


class MemberView(BaseModel):
    client_id: str
    subscriptions: dict[str, Subscription]
    last_heartbeat_ms_ago: int
    assignments: list[Assigned]
    locks: list[QueueRef] = Field(description="The queues whose live lock the member holds (ordered members)")


class GroupConfigBody(BaseModel):
    max_reconsume_times: int = Field(
        ge=0, le=1000, description="Consumed again at most this often, then to %DLQ%{group}"
    )

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"max_reconsume_times": 3}]})


class GroupView(BaseModel):
    group: str
    config: GroupConfigBody
    model: str | None
    strategy: str | None
    consume_mode: str | None
    generation: int | None
    members: list[MemberView]
    offsets: list[GroupQueueOffset]


def _consume_from(body: HeartbeatRequest) -> str:
    if body.consume_from != "timestamp":
        return body.consume_from
    if body.consume_timestamp_ms is None:
        raise ApiError(ErrorCode.INVALID_PARAMETER, "consume_from=timestamp needs consume_timestamp_ms")
    return str(body.consume_timestamp_ms)


def _assigned(broker: BrokerDep, group: Group, member: Member) -> list[dict[str, Any]]:
    """The member's queues with the offsets it reads them from (its own when broadcasting)."""
    key = group_consume.offset_group(group, member)
    query = broker.store.consumer_offsets.query
    return [
        {"topic": topic, "queue_id": queue_id, "offset": max(0, query(key, topic, queue_id))}
        for topic, queue_ids in sorted(member.assignment.items())
        for queue_id in queue_ids
    ]


@router.post(
    "/{group}/heartbeat",
    response_model=HeartbeatResponse,
    summary="Join the group or stay in it; answers the member's queues and the group's generation",
    responses=_ERRORS,
)
async def heartbeat(group: GroupName, body: HeartbeatRequest, broker: BrokerDep) -> dict[str, Any]:
    subscriptions = {topic: _subscription(value) for topic, value in body.subscriptions.items()}
    member = Member(
        body.client_id, subscriptions, body.model, body.strategy, _consume_from(body), body.consume_mode
    )
    joined, assignments = await group_consume.heartbeat(broker, group, member)
    return {
        "group": group,
        "generation": joined.generation,
        "assignments": [{"topic": t, "queue_id": q, "offset": o} for t, q, o in assignments],
        "heartbeat_interval_ms": int(broker.settings.consumer_expiry_s * 1000 / 3),
    }


@router.delete(
    "/{group}/members/{client_id}",
    status_code=204,
    summary="Leave the group now; its queues go to the other members at once",
    responses={404: {"model": ErrorEnvelope}},
)
async def leave(group: GroupName, client_id: ClientId, broker: BrokerDep) -> Response:
    if not await orderly.leave(broker, group, client_id):
        raise ApiError(ErrorCode.MEMBER_NOT_FOUND, f"client {client_id!r} is not a member of group {group!r}")
    return Response(status_code=204)


@router.get(
    "/{group}/messages",
    response_model=GroupPullResponse,
    summary="Pull as a member: across the member's queues from the group's offsets, holding until one arrives",
    responses=_ERRORS,
)
async def group_pull(
    group: GroupName,
    request: Request,
    broker: BrokerDep,
    client_id: Annotated[str, Query(min_length=1, max_length=128, pattern=CLIENT_ID_PATTERN)],
    max_messages: Annotated[int | None, Query(ge=1, description="Most messages in all (default 32)")] = None,
    max_wait_ms: Annotated[int, Query(ge=0, description="Hold this long when nothing is new (capped)")] = 0,
) -> Response:
    settings = broker.settings
    count = max_messages if max_messages is not None else settings.pull_default_messages
    if count > settings.pull_max_messages:
        raise ApiError(
            ErrorCode.INVALID_PARAMETER, f"max_messages is {count}, the limit is {settings.pull_max_messages}"
        )
    found, reads = await group_consume.pull(broker, group, client_id, count, max_wait_ms, request.receive)
    answer = {
        "group": group,
        "generation": found.generation,
        "messages": [_message(read, record, offset) for read in reads for record, offset in _records(read)],
        "offsets": [
            {"topic": read.topic, "queue_id": read.queue_id, "next_offset": read.result.next_offset}
            for read in reads
            if read.result.next_offset > read.offset
        ],
    }
    return Response(orjson.dumps(answer), media_type="application/json")


def _records(read: group_consume.QueueRead) -> zip[tuple[memoryview, int]]:
    return zip(read.result.records, read.result.queue_offsets, strict=True)


def _message(
    read: group_consume.QueueRead, record: memoryview, offset: int
) -> dict[str, Any] | orjson.Fragment:
    if read.reconsumed is not None and read.reconsumed[0] == offset:
        message = as_consumed(record_to_json(record))
        message["reconsume_times"] = read.reconsumed[1]  # retried in place
        return message
    return orjson.Fragment(message_json(record, True))


@router.get(
    "/{group}",
    response_model=GroupView,
    summary="A group: its members and their queues, its generation, committed offsets and lag per queue",
    responses={404: {"model": ErrorEnvelope}},
)
async def describe_group(group: GroupName, broker: BrokerDep) -> dict[str, Any]:
    found = broker.groups.get(group)
    topics = set(broker.store.consumer_offsets.topics_of_group(group))
    if found is None and not topics and not broker.group_configs.has(group):
        raise ApiError(
            ErrorCode.GROUP_NOT_FOUND, f"group {group!r} has no members, committed offsets or settings"
        )
    members = list(found.members.values()) if found is not None else []
    for member in members:
        topics.update(member.subscriptions)
    offsets = await queue_offsets(
        broker, group, sorted(topic for topic in topics if broker.topics.get(topic))
    )
    now = time.monotonic()
    return {
        "group": group,
        "config": dataclasses.asdict(broker.group_configs.get(group)),
        "model": found.model if found else None,
        "strategy": found.strategy if found else None,
        "consume_mode": found.consume_mode if found else None,
        "generation": found.generation if found else None,
        "members": [
            {
                "client_id": member.client_id,
                "subscriptions": {
                    topic: _subscription_view(expression)
                    for topic, expression in member.subscriptions.items()
                },
                "last_heartbeat_ms_ago": int((now - member.last_heartbeat) * 1000),
                "assignments": _assigned(broker, found, member) if found else [],
                "locks": [
                    {"topic": topic, "queue_id": queue_id}
                    for topic, queue_id in broker.queue_locks.held_by(group, member.client_id)
                ],
            }
            for member in sorted(members, key=lambda member: member.client_id)
        ],
        "offsets": offsets,
    }


@router.put(
    "/{group}/config",
    response_model=GroupConfigBody,
    summary="Change the group's settings: how often a message is consumed again before the dead-letter topic",
    responses={422: {"model": ErrorEnvelope}},
)
async def set_group_config(group: GroupName, body: GroupConfigBody, broker: BrokerDep) -> dict[str, Any]:
    config = await asyncio.to_thread(broker.group_configs.set, group, **body.model_dump())
    return dataclasses.asdict(config)


class RetryRequest(BaseModel):
    msg_id: str | None = Field(None, min_length=32, max_length=32, pattern=r"^[0-9A-Fa-f]{32}$")
    topic: str | None = Field(None, min_length=1, max_length=255)
    retry_topic: str | None = Field(
        None,
        min_length=1,
        max_length=255,
        description="A retried message's retry_topic: its queue_id and offset are in %RETRY%{group}",
    )
    queue_id: int | None = Field(None, ge=0)
    offset: int | None = Field(None, ge=0)

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"topic": "orders", "queue_id": 0, "offset": 42}]},
    )


class RetryAnswer(BaseModel):
    status: Literal["RETRY", "DEAD_LETTER", "SUSPENDED"] = Field(
        description="SUSPENDED: a message of an ordered queue, handed out again in place once its "
        "queue's suspension ends"
    )
    topic: str = Field(description="Where the message went: %RETRY%{group}, %DLQ%{group}, or its own topic")
    msg_id: str
    reconsume_times: int
    delay_level: int | None = None
    suspended_until_ms: int | None = Field(
        None, description="SUSPENDED: when the queue is read again (epoch ms)"
    )


@router.post(
    "/{group}/retry",
    response_model=RetryAnswer,
    response_model_exclude_none=True,
    summary="Send a message back for another try: to %RETRY%{group} after a growing delay, or to %DLQ%{group}",
    responses=_ERRORS,
)
async def retry(group: GroupName, body: RetryRequest, broker: BrokerDep) -> dict[str, Any]:
    by_place = (body.retry_topic or body.topic, body.queue_id, body.offset)
    if (body.msg_id is not None) == (None not in by_place) or (body.retry_topic and body.msg_id):
        raise ApiError(ErrorCode.BAD_REQUEST, "give either msg_id, or topic, queue_id and offset")
    if body.retry_topic is not None and body.retry_topic != retry_module.retry_topic(group):
        raise ApiError(
            ErrorCode.BAD_REQUEST,
            f"retry_topic is {body.retry_topic!r}: group {group!r} retries through "
            f"{retry_module.retry_topic(group)!r}",
        )
    if by_place[0] is not None and body.queue_id is not None:
        await broker.queue_of(by_place[0], body.queue_id)
    stored = await asyncio.to_thread(retry_module.find, broker, body.msg_id, *by_place, body.topic)
    return dataclasses.asdict(await retry_module.send_back(broker, group, stored))


class DeadLetter(BaseModel):
    queue_offset: int
    msg_id: str
    original_topic: str
    original_msg_id: str | None
    reconsume_times: int
    store_timestamp: int
    message: dict[str, Any] = Field(description="The dead letter as a pull answers it")


class DeadLetterPage(BaseModel):
    group: str
    dead_letters: list[DeadLetter]
    next_offset: int
    resent_until: int = Field(description="Dead letters below this offset were resent by a resend of all")


class ResendRequest(BaseModel):
    msg_ids: list[str] | None = Field(None, min_length=1, max_length=1000)
    all: bool = Field(False, description="Every dead letter not resent yet by an earlier resend of all")

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"all": True}]})


class Resent(BaseModel):
    msg_id: str = Field(description="The dead letter's id")
    topic: str = Field(description="The topic it went back to")
    new_msg_id: str


class ResendAnswer(BaseModel):
    group: str
    resent: list[Resent]


@router.get(
    "/{group}/dlq",
    response_model=DeadLetterPage,
    summary="The group's dead letters (%DLQ%{group}): original topic and id, reconsume times",
    responses={400: {"model": ErrorEnvelope}},
)
async def list_dead_letters(
    group: GroupName,
    broker: BrokerDep,
    offset: Annotated[int, Query(ge=0, description="Queue offset in the dead-letter topic")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000, description="Most dead letters to answer")] = 100,
) -> dict[str, Any]:
    letters, next_offset = await asyncio.to_thread(
        dead_letter.list_dead_letters, broker, group, offset, limit
    )
    topic = dead_letter.dead_letter_topic(group)
    return {
        "group": group,
        "dead_letters": [
            {
                "queue_offset": letter.queue_offset,
                "msg_id": letter.msg_id,
                "original_topic": dead_letter.original_topic(letter),
                "original_msg_id": letter.properties.get(dead_letter.PROPERTY_DLQ_ORIGIN_MESSAGE_ID),
                "reconsume_times": letter.reconsume_times,
                "store_timestamp": letter.store_timestamp,
                "message": record_to_json(record),
            }
            for letter, record in letters
        ],
        "next_offset": max(next_offset, offset),
        "resent_until": max(broker.store.consumer_offsets.query(group, topic, 0), 0),
    }


@router.post(
    "/{group}/dlq/resend",
    response_model=ResendAnswer,
    summary="Send dead letters back to the topics they were produced to: chosen ones, or all not resent yet",
    responses=_ERRORS,
)
async def resend_dead_letters(group: GroupName, body: ResendRequest, broker: BrokerDep) -> dict[str, Any]:
    if (body.msg_ids is not None) == body.all:
        raise ApiError(ErrorCode.BAD_REQUEST, 'give either "msg_ids" or "all": true')
    sent = await dead_letter.resend(broker, group, body.msg_ids)
    return {
        "group": group,
        "resent": [
            {"msg_id": letter.msg_id, "topic": dead_letter.original_topic(letter), "new_msg_id": new_id}
            for letter, new_id in sent
        ],
    }
