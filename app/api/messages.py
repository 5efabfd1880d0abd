"""Produce and pull: the message endpoints of a topic's queues."""

from __future__ import annotations

from typing import Annotated, Literal

import orjson
from fastapi import APIRouter, Query, Request
from starlette.datastructures import QueryParams
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope

from app.api import wire
from app.api.edge import media_type_of
from app.api.errors import ApiError, ErrorCode
from app.api.peers import client_born_host
from app.api.produce_docs import JSON, NDJSON, OCTET_STREAM, PRODUCE_BODY, PRODUCE_PARAMETERS
from app.api.schemas import ProduceResponse, PullResponse
from app.api.topics import BrokerDep, QueueId, TopicName, get_broker
from app.broker import Broker, plain
from app.broker.filters import filter_of
from app.cloudevents import BATCH_MEDIA_TYPE as CLOUDEVENTS_BATCH
from app.cloudevents import (
    BINARY_MODE,
    CloudEventError,
    binary_event,
    render_cloudevent,
    structured_events,
    topic_source,
)
from app.cloudevents import STRUCTURED_MEDIA_TYPE as CLOUDEVENT
from app.codec import (
    BATCH_MEDIA_TYPE,
    RECORDS_MEDIA_TYPE,
    BatchFormatError,
    IncomingMessage,
    messages_json,
    parse_batch,
    record_to_json,
)
from app.store import GetMessageResult
from app.store.filter import FilterExpressionError

router = APIRouter(prefix="/v1/topics", tags=["messages"])

PRODUCE_MEDIA_TYPES = (JSON, NDJSON, OCTET_STREAM, BATCH_MEDIA_TYPE, CLOUDEVENT, CLOUDEVENTS_BATCH)
_JSON_TYPES = (JSON, NDJSON, CLOUDEVENT, CLOUDEVENTS_BATCH)
# The header that makes a produce one CloudEvent in binary mode, whatever its Content-Type.
CLOUDEVENT_HEADER = "ce-specversion"


def _media_type(request: Request) -> str:
    """The body's media type; a missing or unknown one is refused before the body is read (415).
    A CloudEvent in binary mode (``ce-specversion``) may be of any type: its data is the body."""
    if CLOUDEVENT_HEADER in request.headers:
        return BINARY_MODE
    return produce_media_type(request.headers.get("content-type"))


def produce_media_type(content_type: str | None) -> str:
    """The media type of a produce's Content-Type, or ApiError (415) for one it cannot be."""
    if content_type is None:
        raise ApiError(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            f"a produce needs a Content-Type: {', '.join(PRODUCE_MEDIA_TYPES)}",
        )
    media_type, charset = media_type_of(content_type)
    if media_type not in PRODUCE_MEDIA_TYPES:
        raise ApiError(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            f"Content-Type {media_type!r} is not accepted: use {', '.join(PRODUCE_MEDIA_TYPES)}",
        )
    if media_type in _JSON_TYPES and charset not in (None, "utf-8", "utf8"):
        raise ApiError(ErrorCode.UNSUPPORTED_MEDIA_TYPE, f"JSON is read as UTF-8, not {charset!r}")
    return media_type


def _parse_json(raw: bytes) -> list[IncomingMessage]:
    batch = wire.body_of(raw)
    if batch is not None:
        return batch
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(ErrorCode.MALFORMED_BODY, f"body is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ApiError(
            ErrorCode.MALFORMED_BODY, 'body must be a JSON object: {"messages": [...]} or one message'
        )
    return wire.messages_of(document)


def _parse_ndjson(raw: bytes) -> list[IncomingMessage]:
    messages = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        messages.append(wire.ndjson_line(line, number))
    if not messages:
        raise ApiError(ErrorCode.MALFORMED_BODY, "the NDJSON body holds no message")
    return messages


def _parse_cloudevents(
    media_type: str, raw: bytes, query: QueryParams, scope: Scope
) -> list[IncomingMessage]:
    """The messages of CloudEvents in binary, structured or batched mode (app.cloudevents)."""
    tags = _query_text(query, "tags", 1024)
    try:
        if media_type == BINARY_MODE:
            return [binary_event(scope["headers"], raw, tags)]
        return structured_events(raw, media_type == CLOUDEVENTS_BATCH, tags)
    except CloudEventError as exc:
        raise ApiError(ErrorCode.INVALID_CLOUDEVENT, str(exc)) from None
    except UnicodeDecodeError:
        raise ApiError(ErrorCode.INVALID_CLOUDEVENT, "a ce- header is not percent-encoded UTF-8") from None


def _parse_properties(pairs: list[str]) -> dict[str, str]:
    properties = {}
    for pair in pairs:
        name, separator, value = pair.partition(":")
        if not separator or not name:
            raise ApiError(ErrorCode.INVALID_PROPERTY, f"property {pair!r} must be written name:value")
        properties[name] = value
    return properties


def _query_text(query: QueryParams, name: str, max_length: int) -> str | None:
    value = query.get(name)
    if value is not None and not 0 < len(value) <= max_length:
        raise ApiError(ErrorCode.VALIDATION_FAILED, f"query.{name}: must be 1 to {max_length} characters")
    return value


def _query_int(query: QueryParams, name: str) -> int | None:
    value = query.get(name)
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()):
        raise ApiError(ErrorCode.VALIDATION_FAILED, f"query.{name}: must be an integer, 0 or more")
    return int(value)


def _raw_body_message(raw: bytes, query: QueryParams) -> IncomingMessage:
    """A raw body is one message; its fields come from the query string."""
    if not query:
        return IncomingMessage(body=raw)
    keys = _query_text(query, "keys", 4096)
    return IncomingMessage(
        body=raw,
        tags=_query_text(query, "tags", 1024) or "",
        keys=keys.split() if keys else [],
        properties=_parse_properties(query.getlist("property")),
        queue_id=_query_int(query, "queue_id"),
        sharding_key=_query_text(query, "sharding_key", 1024),
        unique_id=_query_text(query, "unique_id", 128),
        delay_level=_query_int(query, "delay_level"),
        delay_ms=_query_int(query, "delay_ms"),
        deliver_at_ms=_query_int(query, "deliver_at_ms"),
    )


@router.post(
    "/{topic}/messages",
    response_model=ProduceResponse,
    summary="Produce messages (JSON, NDJSON, a raw body, or the binary batch)",
    openapi_extra={**PRODUCE_BODY, **PRODUCE_PARAMETERS},
)
async def produce(topic: TopicName, request: Request) -> Response:
    broker = await get_broker(request)
    media_type = _media_type(request)
    # The body is bounded by WHARF_MAX_REQUEST_BYTES while it streams in (app.api.edge.RequestGuard).
    raw = await request.body()
    answer = await produce_answer(broker, topic, media_type, raw, request.query_params, request.scope)
    return Response(answer, media_type=JSON)


async def produce_answer(
    broker: Broker, topic: str, media_type: str, raw: bytes, query: QueryParams, scope: Scope
) -> bytes:
    """The JSON answer to a produce of ``raw`` (of ``media_type``, accepted already) to ``topic``,
    with the request's query parameters; ApiError (or a broker error) for one refused."""
    transaction = query.get("transaction")
    tried_binary = media_type == BATCH_MEDIA_TYPE and transaction is None
    born_host = client_born_host(scope)
    if tried_binary:
        # A batch of plain messages is stored in one compiled call; any other is parsed below.
        plain = await broker.produce_batch(topic, raw, born_host)
        if plain is not None:
            return orjson.dumps({"results": plain})
    if media_type == JSON:
        batch = _parse_json(raw)
    elif media_type == BATCH_MEDIA_TYPE:
        try:
            batch = parse_batch(raw)
        except BatchFormatError as exc:
            raise ApiError(ErrorCode.MALFORMED_BATCH, str(exc)) from None
    elif media_type == NDJSON:
        batch = _parse_ndjson(raw)
    elif media_type in (CLOUDEVENT, CLOUDEVENTS_BATCH, BINARY_MODE):
        batch = _parse_cloudevents(media_type, raw, query, scope)
    else:
        batch = [_raw_body_message(raw, query)]
    if not batch:
        raise ApiError(ErrorCode.MALFORMED_BODY, "the request holds no message")
    if tried_binary:  # the compiled call declined it already: straight to the general path
        results = await broker.produce_general(topic, batch, born_host)
    elif transaction is None:
        results = await broker.produce(topic, batch, born_host)
    else:
        results = await broker.transactions.begin(
            topic, batch, transaction, query.get("producer_group"), born_host
        )
    return orjson.dumps({"results": results})


# What produce_now parses; any other type but the binary batch and CloudEvents is a raw body.
_PARSERS_NOW = {JSON: _parse_json, NDJSON: _parse_ndjson}
_NOT_NOW = frozenset((BATCH_MEDIA_TYPE, CLOUDEVENT, CLOUDEVENTS_BATCH, BINARY_MODE))


def produce_now(
    broker: Broker, topic: str, media_type: str, raw: bytes, query: QueryParams, scope: Scope
) -> tuple[bytes, bool] | None:
    """:func:`produce_answer`'s answer made without waiting, for the usual produce: plain messages
    in JSON, NDJSON or a raw body, stored in one compiled call, under a flush and replication mode
    that acknowledge at once. With it, whether the append woke held pulls (they answer before the
    producer does). None, with nothing stored, when :func:`produce_answer` must answer: another
    kind of produce or body, a batch the general path takes, and every refusal (a body it cannot
    parse, a slave, a full disk: raised before anything is stored), which produce_answer, asked
    again, answers."""
    if media_type in _NOT_NOW or "transaction" in query or not broker.acknowledges_at_once():
        return None
    parse = _PARSERS_NOW.get(media_type)
    try:
        batch = parse(raw) if parse is not None else [_raw_body_message(raw, query)]
        stored = plain.store_messages_now(broker, topic, batch, client_born_host(scope)) if batch else None
    except Exception:  # noqa: BLE001 - nothing was stored: produce_answer answers it
        return None
    if stored is None:
        return None
    status = broker.acknowledge_now(stored.appended)
    assert status is not None  # acknowledges_at_once
    return orjson.dumps({"results": stored.answers(status)[0]}), stored.woke


async def _produce_route(request: Request) -> Response:
    return await produce(request.path_params["topic"], request)


# Produce is the hottest path: served by a plain Starlette route placed ahead of FastAPI's routing,
# which spends more per request than the rest of a one-message produce. The FastAPI route above
# describes it in the OpenAPI document and runs the same function.
PRODUCE_ROUTE = Route("/v1/topics/{topic}/messages", _produce_route, methods=["POST"])


_RECORDS_HEADERS = {
    name: {"description": description + " (records answers only)", "schema": schema}
    for name, description, schema in (
        ("X-Wharf-Status", "The pull status", {"type": "string"}),
        ("X-Wharf-Next-Offset", "The offset to pull from next", {"type": "integer"}),
        ("X-Wharf-Min-Offset", "The queue's first offset", {"type": "integer"}),
        ("X-Wharf-Max-Offset", "The queue's offset after its last message", {"type": "integer"}),
        ("X-Wharf-Message-Count", "Records in the body", {"type": "integer"}),
        (
            "X-Wharf-Suggest-Broker-Id",
            "The broker id of this broker name to pull from next (0: the master)",
            {"type": "integer"},
        ),
    )
}


def pull_body(result: GetMessageResult, suggest_broker_id: int, source: str | None = None) -> bytes:
    """The JSON pull answer; with ``source`` (format=cloudevents) its messages as structured
    CloudEvents, ``source`` the one of messages that did not come in as events."""
    if source is None:
        messages = orjson.Fragment(messages_json(result.records))
    else:
        messages = orjson.Fragment(
            orjson.dumps([render_cloudevent(record_to_json(record), source) for record in result.records])
        )
    return orjson.dumps(
        {
            "status": result.status.value,
            "next_offset": result.next_offset,
            "min_offset": result.min_offset,
            "max_offset": result.max_offset,
            "suggest_broker_id": suggest_broker_id,
            "messages": messages,
        }
    )


def pull_headers(result: GetMessageResult, suggest_broker_id: int) -> dict[str, str]:
    return {
        "X-Wharf-Status": result.status.value,
        "X-Wharf-Next-Offset": str(result.next_offset),
        "X-Wharf-Min-Offset": str(result.min_offset),
        "X-Wharf-Max-Offset": str(result.max_offset),
        "X-Wharf-Message-Count": str(len(result.records)),
        "X-Wharf-Suggest-Broker-Id": str(suggest_broker_id),
    }


@router.get(
    "/{topic}/queues/{queue_id}/messages",
    response_model=PullResponse,
    summary="Pull messages from a queue, holding the request until one arrives (long polling)",
    responses={
        200: {
            "description": "The messages; with `Accept: application/vnd.wharf.records`, the stored records",
            "content": {
                RECORDS_MEDIA_TYPE: {
                    "schema": {
                        "type": "string",
                        "format": "binary",
                        "description": "The stored records, concatenated; status and offsets in X-Wharf-* headers.",
                    }
                }
            },
            "headers": _RECORDS_HEADERS,
        },
    },
)
async def pull(
    topic: TopicName,
    queue_id: QueueId,
    request: Request,
    broker: BrokerDep,
    offset: Annotated[
        int | None, Query(description="Queue offset to read from; default: the group's offset")
    ] = None,
    max_messages: Annotated[
        int | None, Query(ge=1, description="Most messages to return (default 32)")
    ] = None,
    max_wait_ms: Annotated[int, Query(ge=0, description="Hold this long when nothing is new (capped)")] = 0,
    tags: Annotated[
        str | None, Query(max_length=4096, description="Tag filter: 'TagA || TagB' or '*'")
    ] = None,
    filter_type: Annotated[
        Literal["tag", "sql92"] | None,
        Query(description="tag (the default: tags or filter is a tag expression) or sql92"),
    ] = None,
    filter: Annotated[
        str | None,
        Query(
            max_length=4096,
            description="With filter_type=sql92: an expression over message properties, "
            "e.g. region = 'eu' AND amount > 100",
        ),
    ] = None,
    group: Annotated[str | None, Query(min_length=1, max_length=255, description="Consumer group")] = None,
    commit_offset: Annotated[
        int | None,
        Query(description="Commit this offset for the group first; within the queue's min..max offsets"),
    ] = None,
    start: Annotated[
        str,
        Query(
            alias="from",
            max_length=20,
            description="Where a group without a committed offset starts: last, first or a timestamp (ms)",
        ),
    ] = "last",
    format: Annotated[  # noqa: A002 - the query parameter's name
        Literal["json", "cloudevents"],
        Query(description="json (the default): message objects; cloudevents: each a structured CloudEvent"),
    ] = "json",
) -> Response:
    return await pull_answer(
        broker,
        topic,
        queue_id,
        request.receive,
        request.headers.get("accept", ""),
        offset,
        max_messages,
        max_wait_ms,
        tags,
        filter_type,
        filter,
        group,
        commit_offset,
        start,
        format,
    )


async def pull_answer(
    broker: Broker,
    topic: str,
    queue_id: int,
    receive: Receive,
    accept: str,
    offset: int | None = None,
    max_messages: int | None = None,
    max_wait_ms: int = 0,
    tags: str | None = None,
    filter_type: str | None = None,
    filter: str | None = None,  # noqa: A002 - the query parameter's name
    group: str | None = None,
    commit_offset: int | None = None,
    start: str = "last",
    format: str = "json",  # noqa: A002 - the query parameter's name
) -> Response:
    """The answer to a pull whose parameters are valid in type and range (the route's own
    validation, or :mod:`app.api.fast_lane`'s); ApiError for one the broker refuses."""
    config = await broker.queue_of(topic, queue_id)
    if not config.readable:
        raise ApiError(ErrorCode.TOPIC_NOT_READABLE, f"topic {topic!r} does not allow pulls")
    settings = broker.settings
    count = max_messages if max_messages is not None else settings.pull_default_messages
    if count > settings.pull_max_messages:
        raise ApiError(
            ErrorCode.INVALID_PARAMETER,
            f"max_messages is {count}, the limit is {settings.pull_max_messages}",
        )
    if offset is not None and offset < 0:
        raise ApiError(ErrorCode.INVALID_OFFSET, f"offset must be 0 or more, got {offset}")
    try:
        message_filter = filter_of(filter_type, filter, tags).compile()
    except FilterExpressionError as exc:
        raise ApiError(ErrorCode.INVALID_TAG_EXPRESSION, str(exc)) from None
    offset = broker.resolve_pull_offset(topic, queue_id, offset, group, commit_offset, start)
    result = await broker.pull(topic, queue_id, offset, count, message_filter, max_wait_ms, receive, group)
    suggest = broker.ha.suggest_broker_id(result.reads_disk)
    if RECORDS_MEDIA_TYPE in accept:
        return Response(
            b"".join(result.records), media_type=RECORDS_MEDIA_TYPE, headers=pull_headers(result, suggest)
        )
    source = topic_source(settings.resolved_advertised_url, topic) if format == "cloudevents" else None
    return Response(pull_body(result, suggest, source), media_type=JSON)
