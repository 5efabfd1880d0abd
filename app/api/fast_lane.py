"""The hot routes in one pass: produce and pull served below the framework's routing.

A plain HTTP client sends one request, waits for its answer and sends the next, so what a request
costs the server before and after the broker's own work sets its rate. Through the whole app a
request passes eight middlewares and FastAPI's router, which resolves and validates a pull's ten
query parameters through its dependency machinery: that cost more than the produce or the pull.

:class:`FastLane` sits in front of the app (:class:`WharfApi` asks it first) and serves, in one
pass, the requests it can answer exactly as the app would:

- ``POST /v1/topics/{topic}/messages`` with a Content-Type produce takes and a Content-Length
  within ``WHARF_MAX_REQUEST_BYTES`` (the route is a plain Starlette one, whose query parameters
  the produce code reads itself);
- ``GET /v1/topics/{topic}/queues/{queue_id}/messages`` whose query parameters are among
  ``offset``, ``max_messages``, ``max_wait_ms``, ``tags`` and ``group``, each at most once, the
  numbers plain decimal digits within the route's declared ranges.

It runs the routes' own code (:func:`~app.api.messages.produce_answer`,
:func:`~app.api.messages.pull_answer`) behind the app's own ACL middleware when ``WHARF_ACL_FILE`` is
set, answers errors through the app's exception handlers and times each request (an ACL refusal
included) in the HTTP histogram under its route template, as the middlewares would. Anything else -
another route, a parameter or header it does not take, a body of another type or length, an
``Origin`` header while CORS is configured - goes to the app unchanged, which answers it (and every
refusal) as before. The lane is off with ``WHARF_FAST_LANE=false``.

Most of its requests do not even reach the app: the broker's HTTP protocol asks :meth:`FastLane.route`
once a request's headers are in and serves what it takes on the connection itself
(:mod:`app.api.lane_cycle`), below uvicorn's ASGI request cycle; the rest comes through the app's
entry (:class:`WharfApi`) as before.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from time import perf_counter
from typing import Any, NamedTuple, cast
from urllib.parse import unquote

from fastapi import FastAPI
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app.acl.watch import AclFile
from app.api.acl import AclMiddleware
from app.api.errors import ApiError, ErrorCode
from app.api.messages import produce_answer, produce_media_type, produce_now, pull_answer
from app.api.metrics import HttpDurations, StatusNote
from app.broker import Broker

log = logging.getLogger(__name__)

PRODUCE_TEMPLATE = "/v1/topics/{topic}/messages"
PULL_TEMPLATE = "/v1/topics/{topic}/queues/{queue_id}/messages"
MAX_TOPIC_LENGTH = 255  # the routes' TopicName
MAX_QUEUE_ID = 65535  # the routes' QueueId
MAX_TAGS_LENGTH = 4096
MAX_GROUP_LENGTH = 255
# What a pull's number may be: plain digits, short enough for a 64-bit integer.
MAX_DIGITS = 18
_PULL_PARAMETERS = {
    name.encode(): name for name in ("offset", "max_messages", "max_wait_ms", "tags", "group")
}
_JSON_CONTENT_TYPE = (b"content-type", b"application/json")
MAX_MEDIA_TYPES = 256  # Content-Type values whose media type the lane keeps (a client sends a few)
NO_QUERY = QueryParams(b"")

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]


class WharfApi(FastAPI):
    """The app, asking its :class:`FastLane` (when it has one) first for each HTTP request."""

    fast_lane: FastLane | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lane = self.fast_lane
        if lane is not None and scope["type"] == "http":
            taken = lane.route(scope)
            if taken is not None:
                scope["app"] = self  # as Starlette sets it: the ACL's classifiers read the broker there
                await lane.serve(taken, scope, receive, send)
                return
        await super().__call__(scope, receive, send)


class Taken(NamedTuple):
    """A request the lane serves: its route's template (the histogram's label) and its handler,
    bound to the parts of the request route parsed."""

    template: str
    handler: Handler
    # A produce's (topic, media type): what FastLane.produce_now needs to answer it at once.
    produce: tuple[str, str] | None = None


class FastLane:
    """Serves the requests it takes (see the module's docstring): :meth:`route` says which, and
    :meth:`serve` answers one, behind the ACL when the app has one."""

    def __init__(
        self, app: WharfApi, durations: HttpDurations, max_request_bytes: int, cors: bool = False
    ) -> None:
        self.app = app
        # The state's own dict: read without State.__getattr__, a Python call, on every request.
        self._state: dict[str, Any] = app.state._state
        self.exception_handlers = app.exception_handlers
        self.durations = durations
        self.max_request_bytes = max_request_bytes
        self.cors = cors  # CORS configured: a request with an Origin goes to the app's CORS middleware
        # Content-Type header -> the produce's media type, None when the lane does not take it.
        self._media_types: dict[bytes, str | None] = {}
        acl: AclFile | None = getattr(app.state, "acl", None)
        # The app's own ACL middleware, around the lane's handler instead of the app.
        self.acl = (
            None if acl is None else AclMiddleware(_lane_handler, acl=acl, max_body_bytes=max_request_bytes)
        )

    def route(self, scope: Scope) -> Taken | None:
        """What serves an HTTP request this lane answers, or None for the app to answer it."""
        path: str = scope["path"]
        if not path.startswith("/v1/topics/"):
            return None
        # The request is parsed here, once: its handler gets the parts.
        method = scope["method"]
        if method == "POST":
            topic = _produce_topic(path)
            media_type = self._producible(scope) if topic is not None else None
            if topic is None or media_type is None:
                return None
            taken = Taken(PRODUCE_TEMPLATE, partial(self._produce, topic, media_type), (topic, media_type))
        elif method == "GET":
            placed = _pull_queue(path)
            parameters = _pull_parameters(scope["query_string"]) if placed is not None else None
            if placed is None or parameters is None:
                return None
            taken = Taken(PULL_TEMPLATE, partial(self._pull, *placed, parameters))
        else:
            return None
        if self.cors and any(name == b"origin" for name, _ in scope["headers"]):
            return None
        return taken

    async def serve(self, taken: Taken, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a request :meth:`route` took, timed in the HTTP histogram as the app times it
        (refusals by the ACL included)."""
        started = perf_counter()
        noted = StatusNote(_VaryOrigin(send) if self.cors else send)
        try:
            if self.acl is None:
                await taken.handler(scope, receive, noted)
            else:
                scope[_HANDLER] = taken.handler
                await self.acl(scope, receive, noted)
        finally:
            self.durations.observe((scope["method"], taken.template, noted.status), perf_counter() - started)
            self.durations.fast_lane_requests += 1

    # -- produce -----------------------------------------------------------------------------------

    def produce_now(self, taken: Taken, scope: Scope, raw: bytes) -> tuple[bytes, bool] | None:
        """A produce's answer made without waiting (:func:`~app.api.messages.produce_now`), and
        whether held pulls it woke answer first; None, with nothing stored, when :meth:`serve` must
        answer it: behind the ACL, with CORS, a broker still starting, a refusal (serve answers it
        as the app does)."""
        if taken.produce is None or self.acl is not None or self.cors:
            return None
        broker: Broker | None = self._state.get("broker")
        if broker is None:
            return None
        topic, media_type = taken.produce
        query_string = scope["query_string"]
        query = QueryParams(query_string) if query_string else NO_QUERY
        return produce_now(broker, topic, media_type, raw, query, scope)

    def observe_now(self, taken: Taken, started: float) -> None:
        """Time an answer :meth:`produce_now` made, as :meth:`serve` times its own."""
        self.durations.observe(("POST", taken.template, 200), perf_counter() - started)
        self.durations.fast_lane_requests += 1

    async def _produce(self, topic: str, media_type: str, scope: Scope, receive: Receive, send: Send) -> None:
        raw = await _body(receive)
        if raw is None:
            return  # the client went away before its body was in: nobody to answer
        try:
            query_string = scope["query_string"]
            query = QueryParams(query_string) if query_string else NO_QUERY  # as Starlette's Request has them
            answer = await produce_answer(self._broker(), topic, media_type, raw, query, scope)
        except Exception as exc:  # noqa: BLE001 - answered by the app's handler for it
            await self._error(scope, receive, send, exc)
            return
        # As Starlette's Response(answer, media_type=JSON) has them.
        await _answer(send, 200, [(b"content-length", b"%d" % len(answer)), _JSON_CONTENT_TYPE], answer)

    def _producible(self, scope: Scope) -> str | None:
        """The media type of a produce this lane takes: one produce accepts, a Content-Length
        within the limit, no Transfer-Encoding."""
        length = content_type = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                if length is not None or not value.isdigit():
                    return None
                length = int(value)
            elif name == b"content-type":
                if content_type is not None:
                    return None
                content_type = value
            elif name == b"transfer-encoding" or name == b"expect" or name == b"ce-specversion":
                # A CloudEvent in binary mode: its Content-Type is its data's, not a produce format.
                return None
        if length is None or length > self.max_request_bytes or content_type is None:
            return None
        if content_type in self._media_types:
            return self._media_types[content_type]
        try:
            media_type: str | None = produce_media_type(content_type.decode("latin-1"))
        except ApiError:
            media_type = None
        if len(self._media_types) >= MAX_MEDIA_TYPES:
            self._media_types.clear()
        self._media_types[content_type] = media_type
        return media_type

    # -- pull --------------------------------------------------------------------------------------

    async def _pull(
        self,
        topic: str,
        queue_id: int,
        parameters: dict[str, Any],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        accept = ""
        for name, value in scope["headers"]:
            if name == b"accept":
                accept = value.decode("latin-1")  # as Starlette's Headers.get: the first
                break
        try:
            response = await pull_answer(self._broker(), topic, queue_id, receive, accept, **parameters)
        except Exception as exc:  # noqa: BLE001 - answered by the app's handler for it
            await self._error(scope, receive, send, exc)
            return
        await _answer(send, response.status_code, response.raw_headers, bytes(response.body))

    # -- both --------------------------------------------------------------------------------------

    def _broker(self) -> Broker:
        broker: Broker | None = self._state.get("broker")
        if broker is None:
            raise ApiError(ErrorCode.NOT_READY, "the broker is starting")
        return broker

    async def _error(self, scope: Scope, receive: Receive, send: Send, exc: Exception) -> None:
        """Answer ``exc`` with the app's handler for its class (the nearest in its MRO)."""
        handlers = self.exception_handlers
        handler = next((handlers[cls] for cls in type(exc).__mro__ if cls in handlers), None)
        if handler is None:  # the app has a handler for Exception; without one, as Starlette would
            raise exc
        response = await cast(Awaitable[Response], handler(Request(scope, receive), exc))
        await response(scope, receive, send)


class _VaryOrigin:
    """The ``send`` of an answer while CORS is configured, to a request without ``Origin``: with
    ``Vary: Origin``, as Starlette's CORS middleware gives every such answer (a cache must not
    serve it to a request with an Origin)."""

    __slots__ = ("send",)

    def __init__(self, send: Send) -> None:
        self.send = send

    def __call__(self, message: Message) -> Awaitable[None]:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), (b"vary", b"Origin")]}
        return self.send(message)


# Where serve leaves the handler for the ACL middleware to call once the request passes.
_HANDLER = "wharf.fast_lane.handler"


async def _lane_handler(scope: Scope, receive: Receive, send: Send) -> None:
    handler: Handler = scope[_HANDLER]
    await handler(scope, receive, send)


async def _body(receive: Receive) -> bytes | None:
    """The whole request body, or None if the client disconnected first."""
    message = await receive()
    if message["type"] != "http.request":
        return None
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    chunks = [body]
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _answer(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _segment(text: str) -> str | None:
    """A path segment as a route parameter: non-empty, at most a topic name's length."""
    return text if 0 < len(text) <= MAX_TOPIC_LENGTH else None


def _produce_topic(path: str) -> str | None:
    """The topic of ``/v1/topics/{topic}/messages``, else None."""
    parts = path.split("/")
    if len(parts) != 5 or parts[4] != "messages":
        return None
    return _segment(parts[3])


def _pull_queue(path: str) -> tuple[str, int] | None:
    """(topic, queue id) of ``/v1/topics/{topic}/queues/{queue_id}/messages``, else None."""
    parts = path.split("/")
    if len(parts) != 7 or parts[4] != "queues" or parts[6] != "messages":
        return None
    topic, queue = _segment(parts[3]), parts[5]
    if topic is None or not queue.isascii() or not queue.isdigit() or len(queue) > 5:
        return None
    queue_id = int(queue)
    return (topic, queue_id) if queue_id <= MAX_QUEUE_ID else None


def _pull_parameters(query_string: bytes) -> dict[str, Any] | None:
    """The pull's parameters when each is one this lane takes, once, and valid; else None."""
    parameters: dict[str, Any] = {}
    if not query_string:
        return parameters
    for pair in query_string.split(b"&"):
        raw_name, equals, raw = pair.partition(b"=")
        name = _PULL_PARAMETERS.get(raw_name)
        if name is None or not equals or name in parameters:
            return None
        if name in ("tags", "group"):
            try:
                text = unquote(raw.decode("ascii").replace("+", " "), errors="strict")
            except UnicodeError:
                return None
            if not 0 < len(text) <= (MAX_TAGS_LENGTH if name == "tags" else MAX_GROUP_LENGTH):
                return None
            parameters[name] = text
        else:
            if not raw.isdigit() or len(raw) > MAX_DIGITS:
                return None
            number = int(raw)
            if name == "max_messages" and number < 1:
                return None
            parameters[name] = number
    return parameters
