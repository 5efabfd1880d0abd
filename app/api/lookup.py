"""Message lookup: by message id (no index needed: the id names the CommitLog offset) and by key.

A message id names the broker that stored the message (its STOREHOST, the address it advertises)
as well as the offset. An id of another broker is answered 404 with that broker's address in
``owner``: the offset means nothing in this broker's CommitLog, so it is never read here.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from app.api.errors import ApiError, ErrorCode
from app.api.schemas import ErrorEnvelope, MessageList, MessageOut
from app.api.topics import BrokerDep, TopicName
from app.codec import record_to_json
from app.store import parse_message_id
from app.store.record_format import decode_host, layout_at

router = APIRouter(prefix="/v1", tags=["messages"])

MAX_KEY_RESULTS = 1000


@router.get(
    "/messages/{msg_id}",
    response_model=MessageOut,
    summary="Look a message up by its id",
    responses={
        400: {"model": ErrorEnvelope},
        404: {
            "model": ErrorEnvelope,
            "description": "No such message here; for an id of another broker, `owner` is its host:port",
        },
    },
)
def get_message(
    msg_id: Annotated[
        str,
        # Documented, checked by hand: a bad id is a 400 (40009), not a 422.
        Path(
            description="32 hexadecimal digits: store host and CommitLog offset",
            json_schema_extra={"pattern": "^[0-9A-Fa-f]{32}$"},
        ),
    ],
    broker: BrokerDep,
) -> dict[str, Any]:
    try:
        host, port, physical_offset = parse_message_id(msg_id)
    except ValueError as exc:
        raise ApiError(ErrorCode.INVALID_MESSAGE_ID, f"message id {msg_id!r} is not valid: {exc}") from None
    store = broker.store
    store_host = bytes.fromhex(msg_id[:-16])
    if store_host != store.store_host:
        owner = f"{host}:{port}"
        here = "{}:{}".format(*decode_host(store.store_host))
        raise ApiError(
            ErrorCode.MESSAGE_NOT_FOUND,
            f"message {msg_id} was stored by the broker at {owner}, not by this one ({here}): ask {owner}",
            extra={"owner": owner},
        )
    raw = store.read_live_record(physical_offset)
    # A record written under an earlier address of this store is not the message this id names.
    at = layout_at(raw).store_host if raw is not None else 0
    if raw is None or raw[at : at + len(store_host)] != store_host:
        raise ApiError(ErrorCode.MESSAGE_NOT_FOUND, f"no message with id {msg_id}")
    return record_to_json(raw)


@router.get(
    "/topics/{topic}/messages",
    response_model=MessageList,
    summary="Messages of a topic by key (a word of KEYS, or a unique id), newest first",
    responses={400: {"model": ErrorEnvelope}, 404: {"model": ErrorEnvelope}},
)
async def query_by_key(
    topic: TopicName,
    broker: BrokerDep,
    key: Annotated[str, Query(min_length=1, max_length=1024, description="The key to look up")],
    begin: Annotated[int, Query(ge=0, description="Stored at or after (ms since the epoch)")] = 0,
    end: Annotated[int | None, Query(ge=0, description="Stored at or before (ms); default now")] = None,
    max: Annotated[int, Query(ge=1, le=MAX_KEY_RESULTS, description="Most messages to return")] = 32,  # noqa: A002
) -> dict[str, Any]:
    await broker.topic(topic)
    if end is not None and end < begin:
        raise ApiError(ErrorCode.INVALID_PARAMETER, f"end ({end}) is before begin ({begin})")
    store = broker.store
    kwargs: dict[str, Any] = {"max_messages": max, "begin_ms": begin}
    if end is not None:
        kwargs["end_ms"] = end
    found = await asyncio.to_thread(store.query_message_by_key, topic, key, **kwargs)
    messages = []
    for message in found:
        raw = store.read_record(message.physical_offset)
        if raw is not None:
            messages.append(record_to_json(raw))
    return {"topic": topic, "key": key, "messages": messages}
