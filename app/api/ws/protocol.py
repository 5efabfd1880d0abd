"""What the WebSocket endpoints share: close codes, the close exception, frame parsing and sending.

Every refusal ends in a close frame with a code and a reason, never a dropped socket. The code is
``4000 + the HTTP status`` of the matching HTTP error and the reason starts with Wharf's error code,
so ``4404 "40402 topic 'x' not found"`` means what ``404 {"error_code": 40402}`` means over HTTP:

====  =================================================================================
code  meaning
====  =================================================================================
1000  normal close (the client's, or the server's answer to it)
1001  the broker is shutting down (1012 when uvicorn closes the socket itself)
1008  policy: the broker waited on a silent client (no credit left, or its unacked limit
      reached) longer than ``ws_idle_timeout_s``
1009  a client frame is over the frame size limit
1012  the broker's log was cut to follow its new master (a former master stepped down): the
      subscriber's read positions are void; subscribe again, from the group's committed offset
1013  try again later: the client did not take a frame within ``ws_send_timeout_s``
4400  bad request: a malformed or unknown frame, a bad parameter or tag filter, credit
      over the limit, an ack without a group
4401  not authenticated: missing or wrong credentials (with ``WHARF_ACL_FILE``)
4403  the account lacks the permission the subscription or produce needs (ACL)
4404  unknown topic or queue
4409  the topic's permission forbids reading (subscribe) or writing (produce)
4421  this broker does not host the topic; the reason names brokers that do
4500  unexpected fault; it is logged
4503  the broker is starting, its store is closed, or the route registry cannot be reached
====  =================================================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from app.api.errors import ApiError, ErrorCode, code_for, from_broker
from app.api.ws.going_away import websocket_sessions
from app.broker import Broker, BrokerError
from app.routing.errors import RegistryUnavailableError
from app.store import errors as store_errors
from app.store.filter import FilterExpressionError

log = logging.getLogger(__name__)

NORMAL = 1000
GOING_AWAY = 1001
POLICY_VIOLATION = 1008
MESSAGE_TOO_BIG = 1009
SERVICE_RESTART = 1012
TRY_AGAIN_LATER = 1013
INTERNAL = 4500

# Closes that end a client for its behaviour rather than a request: logged as warnings.
BOUND_CLOSES = (POLICY_VIOLATION, MESSAGE_TOO_BIG, TRY_AGAIN_LATER)

DEFAULT_CLOSE_TIMEOUT_S = 10.0  # before the settings are known (the broker is starting)
FORMATS = ("json", "binary")  # the ``format`` of produce (subscribe takes cloudevents too: params.py)
MAX_REASON_BYTES = 123  # RFC 6455: a close frame's payload is at most 125 bytes, 2 of them the code


class WsClose(Exception):
    """End the socket with this close code and reason."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code} {reason}")
        self.code = code
        self.reason = reason

    @classmethod
    def from_error(cls, code: ErrorCode, message: str) -> WsClose:
        return cls(4000 + code.http_status, f"{int(code)} {message}")


def bad_frame(message: str) -> WsClose:
    return WsClose.from_error(ErrorCode.BAD_REQUEST, message)


def truncate_reason(reason: str) -> str:
    raw = reason.encode()
    if len(raw) <= MAX_REASON_BYTES:
        return reason
    return raw[: MAX_REASON_BYTES - 3].decode(errors="ignore") + "..."


def close_for(error: BaseException) -> WsClose:
    """The close frame that answers an exception raised while serving a socket."""
    if isinstance(error, WsClose):
        return error
    if isinstance(error, BrokerError):
        error = from_broker(error)
    if isinstance(error, ApiError):
        return WsClose.from_error(error.code, error.message)
    if isinstance(error, store_errors.StoreError | FilterExpressionError | RegistryUnavailableError):
        code = code_for(error)
        if code is ErrorCode.INTERNAL_ERROR:
            log.error("store fault on a WebSocket", exc_info=error)
        return WsClose.from_error(code, str(error))
    log.error("unexpected fault on a WebSocket", exc_info=error)
    return WsClose(INTERNAL, f"{int(ErrorCode.INTERNAL_ERROR)} internal error")


def parse_frame(data: str | bytes) -> dict[str, Any]:
    """A client frame: one JSON object, in a text or a binary frame."""
    try:
        frame = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise WsClose.from_error(ErrorCode.MALFORMED_BODY, "a frame is not valid JSON") from None
    if not isinstance(frame, dict):
        raise WsClose.from_error(ErrorCode.MALFORMED_BODY, "a frame must be a JSON object")
    return frame


def int_field(frame: dict[str, Any], name: str, minimum: int = 0) -> int:
    value = frame.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise bad_frame(f"{frame.get('type')!r} frame needs {name!r}: an integer >= {minimum}")
    return value


async def receive_frame(websocket: WebSocket, max_frame_bytes: int) -> tuple[dict[str, Any], int] | None:
    """The next client frame and its size in bytes, or None once the client has gone.

    A frame over ``max_frame_bytes`` closes the socket with 1009 before it is parsed. Text and
    binary frames are read alike: a binary frame must hold the same JSON.
    """
    received = await receive_raw(websocket, max_frame_bytes)
    if received is None:
        return None
    data, size = received
    return parse_frame(data), size


async def receive_raw(websocket: WebSocket, max_frame_bytes: int) -> tuple[str | bytes, int] | None:
    """The next client frame as it came (text or bytes) and its size in bytes, or None once the
    client has gone; a frame over ``max_frame_bytes`` closes the socket with 1009."""
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        return None
    text = message.get("text")
    data: str | bytes = text if text is not None else (message.get("bytes") or b"")
    # A str's length is at most its UTF-8 length, at most 4 times it: encode only near the limit.
    size = len(data) if isinstance(data, bytes) or len(data) * 4 <= max_frame_bytes else len(data.encode())
    if size > max_frame_bytes:
        raise WsClose(
            MESSAGE_TOO_BIG,
            f"{int(ErrorCode.WS_FRAME_TOO_LARGE)} a frame of {size} bytes is over the limit of "
            f"{max_frame_bytes} bytes",
        )
    return data, size


def wants_binary(query: Mapping[str, str]) -> bool:
    """Whether the client asked for binary frames (``format=binary``); ApiError for an unknown format."""
    wanted = query.get("format", "json")
    if wanted not in FORMATS:
        raise ApiError(ErrorCode.INVALID_PARAMETER, f"format must be json or binary, not {wanted[:50]!r}")
    return wanted == "binary"


def broker_of(websocket: WebSocket) -> Broker:
    broker: Broker | None = getattr(websocket.app.state, "broker", None)
    if broker is None or not broker.store.is_open:
        raise WsClose.from_error(ErrorCode.NOT_READY, "the broker is starting")
    return broker


async def serve(websocket: WebSocket, handler: Callable[[Broker], Awaitable[None]]) -> None:
    """Accept, run ``handler`` and end with the close frame its outcome calls for.

    The socket is accepted before anything is checked: a refusal before the handshake is a bare
    HTTP 403, and a client could not tell an unknown topic from a bad filter. The socket counts as
    open until its close frame is sent: the shutdown waits for that (app/api/ws/going_away.py).
    """
    with websocket_sessions(websocket.app.state).session():
        await _serve(websocket, handler)


async def _serve(websocket: WebSocket, handler: Callable[[Broker], Awaitable[None]]) -> None:
    await websocket.accept()
    close = WsClose(NORMAL, "")
    close_timeout_s = DEFAULT_CLOSE_TIMEOUT_S
    try:
        broker = broker_of(websocket)
        close_timeout_s = broker.settings.ws_send_timeout_s
        await handler(broker)
    except WebSocketDisconnect:
        return
    except Exception as exc:  # every failure becomes a close frame with a reason
        close = close_for(exc)
    if close.code in BOUND_CLOSES:
        log.warning(
            "WebSocket %s from %s closed %d: %s",
            websocket.url.path,
            _peer(websocket),
            close.code,
            close.reason,
        )
    if websocket.application_state is WebSocketState.CONNECTED and (
        websocket.client_state is WebSocketState.CONNECTED
    ):
        # The client may have gone first. A client that reads nothing never takes the close frame
        # either: past the timeout the socket is left to the server, which closes the connection
        # once its buffer drains (or the peer is gone); nothing of the session is kept for it.
        with contextlib.suppress(RuntimeError, WebSocketDisconnect, OSError, TimeoutError):
            async with asyncio.timeout(close_timeout_s):
                await websocket.close(close.code, truncate_reason(close.reason))


def _peer(websocket: WebSocket) -> str:
    client = websocket.client
    return f"{client.host}:{client.port}" if client is not None else "?"
