"""The fast lane's requests served on the connection itself, below uvicorn's ASGI request cycle.

Through uvicorn, every request builds a request-response cycle (an event, a task, the ASGI
messages as dicts, the answer's headers checked and written apart from its body) and passes the
proxy-headers middleware and the app's entry before :class:`~app.api.fast_lane.FastLane` takes it.
For a single-message produce that costs more than the produce itself (BENCHMARKS.md, "The lane
on the connection"). :class:`EdgeHttpProtocol` therefore asks the lane, once a request's headers
are in, whether it takes the request; when it does, a :class:`LaneCycle` stands in for uvicorn's
cycle: it keeps the body as it arrives, runs :meth:`FastLane.serve` once the request is complete
(the same code, ACL and histogram as through the app), and writes the answer - status line,
uvicorn's default headers, the answer's own and its body - in one write.

It is uvicorn's cycle for the protocol's purposes: it has the attributes the protocol reads and
sets (``response_complete``, ``keep_alive``, ``disconnected``, ``message_event``), so keep-alive,
pipelined requests (queued behind it as behind any cycle), a lost connection and a graceful
shutdown are handled by uvicorn's own code. What the lane does not take - another route, a
pipelined request while an answer is pending, a request through a trusted proxy's
``X-Forwarded-*`` headers, HTTP/1.0 - goes to uvicorn's cycle and the app unchanged.
"""

from __future__ import annotations

import asyncio
import logging
from time import perf_counter
from typing import TYPE_CHECKING, Any, cast

from uvicorn.protocols.http.httptools_impl import HEADER_VALUE_RE, STATUS_LINE
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

if TYPE_CHECKING:
    from starlette.types import Message
    from uvicorn._types import HTTPScope

    from app.api.fast_lane import FastLane, Taken

log = logging.getLogger("uvicorn.error")
access_logger = logging.getLogger("uvicorn.access")

_JSON = (b"content-type", b"application/json")  # as Starlette's Response(..., media_type=JSON)
# The default headers a 200 answer's head last started with, and that start.
_ok_start: tuple[object, bytes] = (None, b"")
INTERNAL_ERROR = (
    b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 21\r\nconnection: close\r\n\r\nInternal Server Error"
)


class LaneCycle:
    """One request the lane takes, from its complete headers to its answer (see the module)."""

    __slots__ = (
        "body",
        "default_headers",
        "disconnected",
        "keep_alive",
        "lane",
        "log_access",
        "on_response",
        "protocol",
        "response_complete",
        "response_started",
        "scope",
        "taken",
        "transport",
        "_disconnect",
        "_head",
        "_received",
        "_remaining",
    )

    def __init__(
        self,
        protocol: Any,
        lane: FastLane,
        taken: Taken,
        scope: dict[str, Any],
        keep_alive: bool,
        log_access: bool,
    ) -> None:
        self.protocol = protocol
        self.transport: asyncio.Transport = protocol.transport
        self.lane = lane
        self.taken = taken
        self.scope = scope
        self.keep_alive = keep_alive
        self.log_access = log_access
        self.default_headers: list[tuple[bytes, bytes]] = protocol.server_state.default_headers
        self.on_response = protocol.on_response_complete
        self.body = bytearray()
        self.disconnected = False
        self.response_started = False
        self.response_complete = False
        self._disconnect: asyncio.Future[None] | None = None
        self._received = False
        self._head: bytes | None = None
        self._remaining = -1  # the answer's bytes still to come; -1: no Content-Length

    # -- what the protocol calls -------------------------------------------------------------------

    @property
    def message_event(self) -> LaneCycle:
        """What the protocol sets when the connection is lost: the cycle itself. A property, not an
        attribute: a cycle referring to itself would be garbage only the collector frees, and with
        it the request's scope and headers, for every request."""
        return self

    def set(self) -> None:
        """The protocol's ``message_event.set()``: on a lost connection, or the answer complete."""
        if self.disconnected and self._disconnect is not None and not self._disconnect.done():
            self._disconnect.set_result(None)

    async def run(self) -> None:
        """Serve the request (its body complete) through the lane; as uvicorn's cycle does, a
        failure before the answer started is answered 500, one after it closes the connection."""
        lane = self.lane
        lane.durations.lane_cycle_requests += 1
        try:
            await lane.serve(self.taken, self.scope, self.receive, self.send)
        except BaseException as exc:  # noqa: BLE001 - as uvicorn's run_asgi: logged, then answered
            self._fail(exc)
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                raise
        else:
            if not self.response_complete and not self.disconnected:
                log.error("ASGI callable returned without completing response.")
                self.transport.close()
        finally:
            self.on_response = _nothing

    def run_now(self) -> bool:
        """Answer the request here and now when the lane makes its answer without waiting (a
        produce: :meth:`FastLane.produce_now`); False, with nothing done, when :meth:`run` must
        serve it. An answer that woke held pulls is written once they had their turn."""
        lane = self.lane
        if self.taken.produce is None or self.protocol.flow.write_paused:
            return False
        started = perf_counter()
        try:
            made = lane.produce_now(self.taken, self.scope, bytes(self.body))
        except Exception as exc:  # noqa: BLE001 - stored, then failed: answered as run answers it
            self._fail(exc)
            return True
        if made is None:
            return False
        lane.durations.lane_cycle_requests += 1
        lane.durations.lane_answered_now += 1
        self._received = True
        self.body = bytearray()
        answer, woke = made
        if woke:
            asyncio.get_running_loop().call_soon(self._answer_now, answer, started)
        else:
            self._answer_now(answer, started)
        return True

    def _answer_now(self, answer: bytes, started: float) -> None:
        try:
            if not self.disconnected:
                self.response_started = True
                self.transport.write(self._json_answer(answer))
                self.response_complete = True
                if not self.keep_alive:
                    self.transport.close()
                self.on_response()
        except Exception as exc:  # noqa: BLE001 - as run: logged, then answered
            self._fail(exc)
        finally:
            self.on_response = _nothing
            self.lane.observe_now(self.taken, started)

    def _fail(self, exc: BaseException) -> None:
        """A failure serving the request: logged, answered 500 before the answer started, and the
        connection closed (uvicorn's way)."""
        log.error("Exception in ASGI application\n", exc_info=exc)
        if not self.response_started and not self.disconnected:
            self.response_started = self.response_complete = True
            self.transport.write(INTERNAL_ERROR)
        self.transport.close()

    # -- ASGI ----------------------------------------------------------------------------------------

    async def receive(self) -> Message:
        """The whole body once; then, when asked again, a disconnect when the client goes away
        (what a held pull waits for)."""
        if not self._received and not self.disconnected:
            self._received = True
            body, self.body = bytes(self.body), bytearray()
            return {"type": "http.request", "body": body, "more_body": False}
        if not self.disconnected and not self.response_complete:
            if self._disconnect is None:
                self._disconnect = asyncio.get_running_loop().create_future()
            await self._disconnect
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        protocol = self.protocol
        if protocol.flow.write_paused and not self.disconnected:
            await protocol.flow.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got {kind!r}.")
            self.response_started = True
            self._head = self._status_and_headers(message["status"], message.get("headers", ()))
            return
        if self.response_complete or kind != "http.response.body":
            raise RuntimeError(f"Unexpected ASGI message {kind!r} for this answer.")
        body: bytes = message.get("body", b"")
        more_body: bool = message.get("more_body", False)
        if self._remaining >= 0:
            self._remaining -= len(body)
            if self._remaining < 0:
                raise RuntimeError("Response content longer than Content-Length")
        head, self._head = self._head, None
        if head is None:
            self.transport.write(body)
        elif body:
            self.transport.writelines((head, body))
        else:
            self.transport.write(head)
        if more_body:
            return
        if self._remaining > 0:
            raise RuntimeError("Response content shorter than Content-Length")
        self.response_complete = True
        if not self.keep_alive:
            self.transport.close()
        self.on_response()

    def _json_answer(self, body: bytes) -> bytes:
        """A 200 JSON answer of ``body``, its head as :meth:`_status_and_headers` makes it; the
        head's start (status line and default headers) kept while the default headers stay."""
        global _ok_start
        defaults = self.default_headers
        if self.log_access or not self.keep_alive:
            return self._status_and_headers(200, ((b"content-length", b"%d" % len(body)), _JSON)) + body
        if _ok_start[0] is not defaults:  # uvicorn makes a new list when the date changes
            content = [STATUS_LINE[200]]
            for name, value in defaults:
                content.extend((name, b": ", value, b"\r\n"))
            _ok_start = (defaults, b"".join(content))
        return b"%scontent-length: %d\r\ncontent-type: application/json\r\n\r\n%s" % (
            _ok_start[1],
            len(body),
            body,
        )

    def _status_and_headers(self, status: int, headers: Any) -> bytes:
        """The answer's head, as uvicorn writes it: status line, default headers, its own (values
        checked for control characters), ``connection: close`` when the connection ends after it."""
        if self.log_access:
            scope = cast("HTTPScope", self.scope)
            access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                get_client_addr(scope),
                scope["method"],
                get_path_with_query_string(scope),
                scope["http_version"],
                status,
            )
        closes = False  # the answer names connection: close itself
        content = [STATUS_LINE[status]]
        for name, value in self.default_headers:
            content.extend((name, b": ", value, b"\r\n"))
        for name, value in headers:
            if HEADER_VALUE_RE.search(value):
                raise RuntimeError("Invalid HTTP header value.")
            name = name.lower()
            if name == b"content-length":
                self._remaining = int(value)
            elif name == b"connection" and b"close" in value.lower():
                self.keep_alive = False
                closes = True
            content.extend((name, b": ", value, b"\r\n"))
        if self._remaining < 0:
            self.keep_alive = False  # no length: the answer ends with the connection
        if not self.keep_alive and not closes:
            content.append(b"connection: close\r\n")
        content.append(b"\r\n")
        return b"".join(content)


def _nothing() -> None:
    return None
