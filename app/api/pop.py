"""Pop consumption over HTTP: pop, ack, nack and change of invisibility, by receipt handle. The
broker core decides (app.broker.pop); this module parses, encodes and starts the pop service
with the app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, FastAPI, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from app.api.errors import ApiError, ErrorCode
from app.api.groups import GroupName
from app.api.schemas import ErrorEnvelope, MessageOut
from app.api.topics import BrokerDep, TopicName
from app.broker.filters import compile_filter
from app.broker.pop import AckStatus, PopService
from app.codec import record_to_json

# RocketMQ 5's bounds on an invisible time are 10 s .. 12 h; a shorter one is allowed here (tests,
# fast retries), the longest is the same.
MIN_INVISIBLE_MS = 10
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_HANDLES = 1000


@asynccontextmanager
async def pop_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Runs inside the app's lifespan: the broker is up when the pop service opens, and still up
    when it closes."""
    service = await PopService.open(app.state.broker)
    app.state.pop = service
    try:
        yield
    finally:
        app.state.pop = None
        await service.close()


router = APIRouter(prefix="/v1/groups", tags=["pop"], lifespan=pop_lifespan)

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorEnvelope},
    404: {"model": ErrorEnvelope},
    409: {"model": ErrorEnvelope},
    421: {"model": ErrorEnvelope},
}


async def get_pop(request: Request) -> PopService:
    service: PopService | None = getattr(request.app.state, "pop", None)
    if service is None:
        raise ApiError(ErrorCode.NOT_READY, "the broker is starting")
    return service


PopDep = Annotated[PopService, Depends(get_pop)]


class PopRequest(BaseModel):
    max_messages: int | None = Field(
        None,
        ge=1,
        description="Most messages (default WHARF_PULL_DEFAULT_MESSAGES, at most WHARF_PULL_MAX_MESSAGES)",
    )
    max_wait_ms: int = Field(
        0, ge=0, description="Hold this long when nothing is visible (capped by WHARF_MAX_WAIT_MS)"
    )
    invisible_ms: int = Field(
        30_000,
        ge=MIN_INVISIBLE_MS,
        le=MAX_INVISIBLE_MS,
        description="How long the messages stay invisible to other pops unless acked",
    )
    consume_from: Literal["last", "first", "timestamp"] = Field(
        "last", description="Where the group starts on a queue it has no offset for"
    )
    consume_timestamp_ms: int | None = Field(None, ge=0, description="With consume_from=timestamp")
    tags: str | None = Field(None, max_length=4096, description="Tag filter: 'TagA || TagB' or '*'")
    filter_type: Literal["tag", "sql92"] | None = Field(
        None, description="tag (the default: tags or filter is a tag expression) or sql92"
    )
    filter: str | None = Field(
        None, max_length=4096, description="With filter_type=sql92: an expression over message properties"
    )
    consume_mode: Literal["concurrently", "orderly"] = Field(
        "concurrently",
        description="orderly: a queue one batch at a time, the next only once the batch is acked; a "
        "message nacked or not acked in time comes again first (retried in place)",
    )

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"max_messages": 16, "max_wait_ms": 20000, "invisible_ms": 60000},
                {"max_messages": 16, "filter_type": "sql92", "filter": "region = 'eu' AND amount > 100"},
            ]
        },
    )


class PoppedMessage(MessageOut):
    """A message object as a pull answers it, ``reconsume_times`` counting this group's deliveries."""

    receipt_handle: str = Field(description="Opaque: ack, nack or change the invisibility with it")
    reconsume_times: int = Field(description="How often the group was handed this message before")
    invisible_until_ms: int = Field(
        description="When the message becomes visible again unless acked (epoch ms)"
    )


class PopResponse(BaseModel):
    group: str
    topic: str
    messages: list[PoppedMessage] = Field(
        description="Message objects, as a queue pull answers them, each with its receipt handle"
    )


class AckRequest(BaseModel):
    receipt_handles: list[str] = Field(min_length=1, max_length=MAX_HANDLES)
    model_config = ConfigDict(extra="forbid")


class NackRequest(BaseModel):
    receipt_handles: list[str] = Field(min_length=1, max_length=MAX_HANDLES)
    delay_ms: int = Field(0, ge=0, le=MAX_INVISIBLE_MS, description="0: visible again now")
    model_config = ConfigDict(extra="forbid")


class HandleResult(BaseModel):
    receipt_handle: str
    status: Literal["ok", "expired", "unknown"] = Field(
        description="ok; expired: not the message's latest handle; unknown: names no popped message"
    )


class HandleResults(BaseModel):
    results: list[HandleResult]


class InvisibilityRequest(BaseModel):
    receipt_handle: str = Field(min_length=1, max_length=1024)
    invisible_ms: int = Field(ge=MIN_INVISIBLE_MS, le=MAX_INVISIBLE_MS, description="From now")
    model_config = ConfigDict(extra="forbid")


class InvisibilityResponse(BaseModel):
    receipt_handle: str = Field(description="The new handle; the old one is expired")
    invisible_until_ms: int


def _start(body: PopRequest) -> str:
    if body.consume_from != "timestamp":
        return body.consume_from
    if body.consume_timestamp_ms is None:
        raise ApiError(ErrorCode.INVALID_PARAMETER, "consume_from=timestamp needs consume_timestamp_ms")
    return str(body.consume_timestamp_ms)


@router.post(
    "/{group}/topics/{topic}/pop",
    response_model=PopResponse,
    summary="Pop messages from any queue of the topic, each invisible to other pops until acked or its time ends",
    responses=_ERRORS,
)
async def pop(
    group: GroupName,
    topic: TopicName,
    request: Request,
    broker: BrokerDep,
    service: PopDep,
    body: PopRequest,
) -> Response:
    settings = broker.settings
    count = body.max_messages if body.max_messages is not None else settings.pull_default_messages
    if count > settings.pull_max_messages:
        raise ApiError(
            ErrorCode.INVALID_PARAMETER, f"max_messages is {count}, the limit is {settings.pull_max_messages}"
        )
    config = await broker.topic(topic)
    if not config.readable:
        raise ApiError(ErrorCode.TOPIC_NOT_READABLE, f"topic {topic!r} does not allow reading")
    message_filter = compile_filter(body.filter_type, body.filter, body.tags)
    popped = await service.pop(
        group,
        topic,
        count,
        body.invisible_ms,
        body.max_wait_ms,
        _start(body),
        request.receive,
        message_filter,
        orderly=body.consume_mode == "orderly",
    )
    messages = []
    for item in popped:
        message = record_to_json(item.record)
        message["reconsume_times"] = item.reconsume_times
        message["receipt_handle"] = item.receipt_handle
        message["invisible_until_ms"] = item.invisible_until_ms
        messages.append(message)
    return Response(
        orjson.dumps({"group": group, "topic": topic, "messages": messages}), media_type="application/json"
    )


@router.post(
    "/{group}/topics/{topic}/ack",
    response_model=HandleResults,
    summary="Ack popped messages by receipt handle: a status per handle",
    responses=_ERRORS,
)
async def ack(group: GroupName, topic: TopicName, body: AckRequest, service: PopDep) -> Response:
    statuses = await service.ack(group, topic, body.receipt_handles)
    return _results(body.receipt_handles, statuses)


@router.post(
    "/{group}/topics/{topic}/nack",
    response_model=HandleResults,
    summary="Give popped messages back: visible again now or after delay_ms, one reconsume higher",
    responses=_ERRORS,
)
async def nack(group: GroupName, topic: TopicName, body: NackRequest, service: PopDep) -> Response:
    statuses = await service.nack(group, topic, body.receipt_handles, body.delay_ms)
    return _results(body.receipt_handles, statuses)


@router.post(
    "/{group}/topics/{topic}/invisibility",
    response_model=InvisibilityResponse,
    summary="Set a popped message's invisible time from now; answers its new receipt handle",
    responses=_ERRORS,
)
async def change_invisibility(
    group: GroupName, topic: TopicName, body: InvisibilityRequest, service: PopDep
) -> dict[str, Any]:
    handle, until = await service.change_invisibility(group, topic, body.receipt_handle, body.invisible_ms)
    return {"receipt_handle": handle, "invisible_until_ms": until}


def _results(handles: list[str], statuses: list[AckStatus]) -> Response:
    """The statuses in order, encoded here: an ack is as hot as a pop."""
    results = [
        {"receipt_handle": handle, "status": status} for handle, status in zip(handles, statuses, strict=True)
    ]
    return Response(orjson.dumps({"results": results}), media_type="application/json")
