"""``GET /v1/topics/{topic}/events``: a topic followed as Server-Sent Events (``text/event-stream``).

One event per message: ``id:`` the cursor naming every read queue's next offset
(:mod:`app.api.event_cursor`), ``event:`` the message's tags (``message`` when it has none),
``data:`` the message on one line, as a JSON pull shows it (or, with ``format=cloudevents``, as a
structured CloudEvent). The parameters are a pull's: ``queue_id`` (default: every read queue),
``from``, ``group``, ``tags`` or ``filter_type=sql92&filter=``. A reconnect with ``Last-Event-ID``
(or ``last_event_id``) resumes every queue right after the last event received. With ``group`` and
``commit=true`` the group's offsets are committed as events are written (at most once for the
client); otherwise nothing is committed. The stream itself is :mod:`app.api.event_stream`.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated, Literal

import orjson
from fastapi import APIRouter, Header, Query
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.api.errors import ApiError, ErrorCode
from app.api.event_cursor import CursorError, decode_cursor
from app.api.event_stream import EventStream, Render, StreamPlan
from app.api.topics import BrokerDep, TopicName
from app.broker import Broker, parse_start
from app.broker.filters import filter_of
from app.cloudevents import render_cloudevent, topic_source
from app.codec import record_to_json
from app.store.consumer_offsets import ConsumeFromWhere
from app.store.filter import FilterExpressionError

router = APIRouter(prefix="/v1/topics", tags=["messages"])

EVENT_STREAM = "text/event-stream"
_EVENT_NAME_FORBIDDEN = frozenset("\r\n")

_STREAM_DOC = {
    200: {
        "description": "The event stream: first `retry:`, then per message `id:` (the cursor to "
        "resume after it), `event:` (its tags, or `message`) and `data:` (the message on one line); "
        "`: ping` comments while nothing happens. It ends when the broker shuts down.",
        "content": {
            EVENT_STREAM: {
                # Each event of the stream (comments and the retry: block are not events).
                "schema": {
                    "type": "object",
                    "required": ["id", "event", "data"],
                    "properties": {
                        "id": {
                            "type": "string",
                            "description": "The cursor after this event: send it as Last-Event-ID to resume",
                        },
                        "event": {"type": "string", "description": "The message's tags, or message"},
                        "data": {
                            "type": "string",
                            "description": "One line of JSON: the message as a JSON pull shows it, or "
                            "with format=cloudevents a structured CloudEvent",
                        },
                    },
                },
                "example": 'retry: 3000\n\nid: AQABAQACAAMA\nevent: TagA\ndata: {"msg_id": "..."}\n\n',
            }
        },
    }
}


def render_message(record: memoryview) -> tuple[str, bytes]:
    """The event of a stored message as a JSON pull shows it; its name, its tags."""
    message = record_to_json(record)
    return _event_name(message["tags"]), orjson.dumps(message)


def render_event(source: str, record: memoryview) -> tuple[str, bytes]:
    """The event of a stored message as a structured CloudEvent (format=cloudevents)."""
    message = record_to_json(record)
    return _event_name(message["tags"]), orjson.dumps(render_cloudevent(message, source))


def _event_name(tags: str) -> str:
    return tags if tags and _EVENT_NAME_FORBIDDEN.isdisjoint(tags) else "message"


class EventStreamResponse(Response):
    """Runs an :class:`EventStream` as the response."""

    def __init__(self, stream: EventStream) -> None:
        super().__init__(media_type=EVENT_STREAM)
        self.stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.stream.run(receive, send)


def start_offsets(
    broker: Broker,
    topic: str,
    queue_ids: list[int],
    start: str,
    group: str | None,
    resume: dict[int, int] | None,
    commit: bool = False,
) -> dict[int, int]:
    """Where the stream starts on each queue: after the resumed event, else at the group's committed
    offset, else where ``from`` says - each within the queue's offsets.

    A resumed event names offsets read on the log as it was then. Past the queue's end (a former
    master cut what the stream had read, and the new master has not stored as much yet), the stream
    starts at the end: the messages stored next are the first events. With ``commit``, it starts
    at the group's committed offset where that is lower: a stream commits what it writes, so that
    offset is past every event written unless it was moved back since - a cut to follow a new
    master lowers it to the queue's new end, and the new master stores other messages there."""
    policy, timestamp_ms = parse_start(start)
    store = broker.store
    offsets = {}
    for queue_id in queue_ids:
        low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
        if resume is not None and queue_id in resume:
            offset = resume[queue_id]
            if commit and group is not None:
                committed = store.consumer_offsets.query(group, topic, queue_id)
                if 0 <= committed < offset:
                    offset = committed
        elif group is not None:
            offset = broker.group_offset(group, topic, queue_id, policy, timestamp_ms)
        elif policy is ConsumeFromWhere.LAST_OFFSET:
            offset = high
        elif policy is ConsumeFromWhere.FIRST_OFFSET:
            offset = low
        else:
            assert timestamp_ms is not None
            offset = store.search_offset(topic, queue_id, timestamp_ms)
        offsets[queue_id] = max(low, min(offset, high))
    return offsets


@router.get(
    "/{topic}/events",
    response_class=EventStreamResponse,
    status_code=200,
    responses=_STREAM_DOC,  # type: ignore[arg-type]
    summary="Follow a topic as Server-Sent Events (curl -N, EventSource)",
)
async def follow_events(
    topic: TopicName,
    broker: BrokerDep,
    queue_id: Annotated[
        int | None, Query(ge=0, le=65535, description="Only this queue (default: every read queue)")
    ] = None,
    start: Annotated[
        str,
        Query(
            alias="from",
            max_length=20,
            description="Where to start: last, first or a timestamp (ms); with `group`, where a "
            "queue without a committed offset starts",
        ),
    ] = "last",
    group: Annotated[
        str | None,
        Query(min_length=1, max_length=255, description="Start at this group's committed offsets"),
    ] = None,
    commit: Annotated[
        bool, Query(description="With `group`: commit its offsets as events are written (at most once)")
    ] = False,
    tags: Annotated[
        str | None, Query(max_length=4096, description="Tag filter: 'TagA || TagB' or '*'")
    ] = None,
    filter_type: Annotated[
        Literal["tag", "sql92"] | None,
        Query(description="tag (the default: tags or filter is a tag expression) or sql92"),
    ] = None,
    filter: Annotated[  # noqa: A002 - the query parameter's name
        str | None,
        Query(max_length=4096, description="With filter_type=sql92: an expression over message properties"),
    ] = None,
    format: Annotated[  # noqa: A002 - the query parameter's name
        Literal["json", "cloudevents"],
        Query(
            description="json (the default): data is the message object; cloudevents: a structured CloudEvent"
        ),
    ] = "json",
    last_event_id_query: Annotated[
        str | None,
        Query(
            alias="last_event_id",
            max_length=4096,
            description="Resume after this event (for clients that cannot send Last-Event-ID)",
        ),
    ] = None,
    last_event_id: Annotated[
        str | None,
        Header(alias="Last-Event-ID", max_length=4096, description="Resume after this event"),
    ] = None,
) -> Response:
    config = await broker.topic(topic)
    if not config.readable:
        raise ApiError(ErrorCode.TOPIC_NOT_READABLE, f"topic {topic!r} does not allow reading")
    if commit and group is None:
        raise ApiError(ErrorCode.BAD_REQUEST, "commit=true needs a group")
    if queue_id is None:
        queue_ids = list(range(config.read_queue_nums))
    elif queue_id >= config.read_queue_nums:
        raise ApiError(
            ErrorCode.QUEUE_NOT_FOUND,
            f"topic {topic!r} has read queues 0..{config.read_queue_nums - 1}, not {queue_id}",
        )
    else:
        queue_ids = [queue_id]
    try:
        message_filter = filter_of(filter_type, filter, tags).compile()
    except FilterExpressionError as exc:
        raise ApiError(ErrorCode.INVALID_TAG_EXPRESSION, str(exc)) from None
    # The header is what EventSource sends on its own; the parameter is for clients without headers.
    resume_from = last_event_id if last_event_id else last_event_id_query
    resume = None
    if resume_from:
        try:
            resume = decode_cursor(resume_from)
        except CursorError as exc:
            raise ApiError(ErrorCode.INVALID_CURSOR, f"Last-Event-ID: {exc}") from None
    offsets = start_offsets(broker, topic, queue_ids, start, group, resume, commit)
    render: Render = render_message
    if format == "cloudevents":
        render = partial(render_event, topic_source(broker.settings.resolved_advertised_url, topic))
    plan = StreamPlan(topic, offsets, message_filter, render, group, commit)
    return EventStreamResponse(EventStream(broker, plan))
