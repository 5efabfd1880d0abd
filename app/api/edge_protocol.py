"""The broker's HTTP/1.1 connection: uvicorn's httptools protocol with the edge's limits.

Uvicorn's protocol waits for header bytes as long as a client dribbles them, keeps a URL and
headers of any size, and refuses in plain text. :class:`EdgeHttpProtocol` adds, per connection:

- a deadline for a request's headers (slowloris): armed when the connection opens and when a
  request begins, cancelled when its headers are complete. A connection that sent nothing is
  closed silently; one in the middle of its headers is answered 408 and closed.
- limits on the URL (414) and the headers (431). A header is handed over only once complete, so
  the bytes read while the headers are incomplete are bounded too. A WebSocket handshake is also
  held to the websockets library's own limits (a line of 8,192 bytes, 128 headers): past them
  the library's parser would never answer.
- a cap on open connections: one over it is answered 503 at once and closed, before its request
  is read, so that a flood holds at most the cap plus the listen backlog in descriptors.
- the error envelope for every refusal, the parser's own 400 included.

Every refusal closes the connection: after it, nothing on the connection can be trusted.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, ClassVar, cast

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
from websockets.http11 import MAX_LINE_LENGTH, MAX_NUM_HEADERS

from app.api.errors import ErrorCode
from app.api.fast_lane import FastLane
from app.api.lane_cycle import LaneCycle

# "GET " + url + " HTTP/1.1\r\n": the request line's bytes besides the method and the URL.
REQUEST_LINE_OVERHEAD = len(b"  HTTP/1.1\r\n")
# ": " and "\r\n" around each header's name and value.
HEADER_LINE_OVERHEAD = 4


@dataclasses.dataclass(frozen=True)
class EdgeLimits:
    max_url_bytes: int
    max_header_bytes: int
    header_timeout_s: float
    max_connections: int

    @property
    def max_head_bytes(self) -> int:
        """Bytes a request may send before its headers are complete: its URL, headers and lines."""
        return self.max_url_bytes + self.max_header_bytes + 1024


class RequestRefused(Exception):
    """Raised inside a parser callback: the request is answered ``code`` and the connection closed."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class EdgeHttpProtocol(HttpToolsProtocol):
    """Subclassed per server by :func:`protocol_class`, which sets :attr:`limits` and :attr:`lane`."""

    limits: ClassVar[EdgeLimits]
    lane: ClassVar[FastLane | None] = None  # the app's fast lane, served on the connection

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        # When the head now being read began (the connection's start for its first request), None
        # between requests: the header deadline counts from it.
        self._headers_since: float | None = None
        self._in_headers = False
        self._head_bytes = 0
        self._header_bytes = 0
        self._refusal: RequestRefused | None = None
        # Since when the connection waits for a next request, None while one is being served: the
        # keep-alive deadline counts from it.
        self._idle_since: float | None = None

    # Connection lifecycle.

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self.refuse(
                ErrorCode.TOO_MANY_CONNECTIONS,
                f"the broker holds {self.limits.max_connections} connections already; retry later",
            )
            return
        self._headers_since = self.loop.time()
        self._arm_header_timer(self._headers_since)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        super().data_received(data)
        if self._in_headers and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_head_bytes:
                self.refuse(
                    ErrorCode.HEADERS_TOO_LARGE,
                    f"the request's headers are over {self.limits.max_header_bytes} bytes",
                )

    # Parser callbacks.

    # uvicorn's own callbacks (on_message_begin, on_url, on_header) are written out in these, not
    # called: each runs once per request or header, and a call is a good part of what they cost.

    def on_message_begin(self) -> None:
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        self.scope = {  # type: ignore[typeddict-item]
            "type": "http",
            "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
            "http_version": "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,  # type: ignore[typeddict-item]
            "root_path": self.root_path,
            "headers": self.headers,
            "state": self.app_state.copy(),
        }
        self._in_headers = True
        self._head_bytes = 0
        self._header_bytes = 0
        if self._headers_since is None:  # else the first request counts from the connection's start
            self._headers_since = self.loop.time()
        if self._header_timer is None:
            self._arm_header_timer(self._headers_since)

    def on_url(self, url: bytes) -> None:
        if len(self.url) + len(url) > self.limits.max_url_bytes:
            raise self._refused(ErrorCode.URI_TOO_LONG, f"the URL is over {self.limits.max_url_bytes} bytes")
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + HEADER_LINE_OVERHEAD
        if self._header_bytes > self.limits.max_header_bytes:
            raise self._refused(
                ErrorCode.HEADERS_TOO_LARGE,
                f"the request's headers are over {self.limits.max_header_bytes} bytes",
            )
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_headers = False
        self._headers_since = None  # the timer, if armed, finds no head to time and stops
        if self.parser.should_upgrade() and self._should_upgrade():
            self._check_handshake_lines()
        elif self.lane is not None:
            cycle = self._lane_cycle(self.lane)
            if cycle is not None:
                self.cycle = cast(RequestResponseCycle, cycle)  # it stands in for uvicorn's
                return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        cycle: object = self.cycle
        if type(cycle) is LaneCycle:
            cycle.body += body  # bounded: a produce's Content-Length within the request limit, or none
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        cycle: object = self.cycle
        if type(cycle) is LaneCycle:
            if cycle.run_now():
                return
            task = self.loop.create_task(cycle.run())
            task.add_done_callback(self.tasks.discard)
            self.tasks.add(task)
            return
        super().on_message_complete()

    def _lane_cycle(self, lane: FastLane) -> LaneCycle | None:
        """A cycle serving this request through ``lane`` (:mod:`app.api.lane_cycle`), or None for
        uvicorn's cycle and the app to serve it."""
        existing = self.cycle
        if existing is not None and not existing.response_complete:
            return None  # pipelined behind an answer still pending: queued as uvicorn queues it
        parser = self.parser
        if parser.get_http_version() != "1.1" or self.root_path or self.limit_concurrency is not None:
            return None
        method = parser.get_method()
        if method != b"POST" and method != b"GET":
            return None
        try:
            parsed = httptools.parse_url(self.url)
            raw_path: bytes = parsed.path
            if b"%" in raw_path or not raw_path.startswith(b"/v1/topics/"):
                return None
            path = raw_path.decode("ascii")
        except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
            return None
        for name, value in self.headers:
            if name.startswith(b"x-forwarded-") or name == b"forwarded":
                return None  # the proxy-headers middleware may rewrite the client: the app's way
            if method == b"GET" and (
                name == b"transfer-encoding" or (name == b"content-length" and value != b"0")
            ):
                # A pull with a body: the cycle here keeps bodies whole, so only a produce's (its
                # length checked by the lane against the request limit); uvicorn's bounds this one.
                return None
        scope = cast(dict[str, Any], self.scope)
        scope["method"] = method.decode("ascii")
        scope["path"] = path
        scope["raw_path"] = raw_path
        scope["query_string"] = parsed.query or b""
        taken = lane.route(scope)
        if taken is None:
            return None
        scope["app"] = lane.app  # as the app's entry sets it: the ACL's classifiers read the broker there
        return LaneCycle(self, lane, taken, scope, parser.should_keep_alive(), self.access_log)

    def _check_handshake_lines(self) -> None:
        line = len(self.parser.get_method()) + len(self.url) + REQUEST_LINE_OVERHEAD
        if line > MAX_LINE_LENGTH:
            raise self._refused(
                ErrorCode.URI_TOO_LONG,
                f"a WebSocket handshake's request line is over {MAX_LINE_LENGTH} bytes",
            )
        if len(self.headers) > MAX_NUM_HEADERS or any(
            len(name) + len(value) + HEADER_LINE_OVERHEAD > MAX_LINE_LENGTH for name, value in self.headers
        ):
            raise self._refused(
                ErrorCode.HEADERS_TOO_LARGE,
                f"a WebSocket handshake may have {MAX_NUM_HEADERS} headers of {MAX_LINE_LENGTH} bytes at most",
            )

    # Refusals.

    def _refused(self, code: ErrorCode, message: str) -> RequestRefused:
        # The parser turns an exception raised in a callback into its own error, caught by
        # data_received, which calls send_400_response: the refusal waits here for it.
        self._refusal = RequestRefused(code, message)
        return self._refusal

    def send_400_response(self, msg: str) -> None:
        refusal, self._refusal = self._refusal, None
        if refusal is None:
            self.refuse(ErrorCode.BAD_REQUEST, "the request is not valid HTTP/1.1")
        else:
            self.refuse(refusal.code, refusal.message)

    def refuse(self, code: ErrorCode, message: str) -> None:
        """Answer ``code`` in the envelope and close the connection."""
        self._cancel_header_timer()
        self._in_headers = False
        if self.transport.is_closing():
            return
        body = orjson.dumps({"error_code": int(code), "message": message})
        content = [STATUS_LINE[code.http_status]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: %d\r\n" % len(body),
                b"connection: close\r\n\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()

    # The keep-alive deadline: one timer per connection. Uvicorn arms one per answer and cancels it
    # when the next request's bytes come; here those only mark the connection busy or idle, and the
    # timer, when it fires, closes the connection only if it has been idle for the whole timeout.

    def _unset_keepalive_if_required(self) -> None:
        self._idle_since = None

    def on_response_complete(self) -> None:
        """Uvicorn's, but for the keep-alive timer (see above)."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._idle_since = None
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_since = now = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self._arm_keep_alive_timer(now)

    def _arm_keep_alive_timer(self, since: float) -> None:
        self.timeout_keep_alive_task = self.loop.call_at(
            since + self.timeout_keep_alive, self._keep_alive_timed_out
        )

    def _keep_alive_timed_out(self) -> None:
        self.timeout_keep_alive_task = None
        since = self._idle_since
        if since is None or self.transport.is_closing():
            return  # serving a request: its answer arms the timer again
        if self.loop.time() < since + self.timeout_keep_alive:
            self._arm_keep_alive_timer(since)
            return
        self.timeout_keep_alive_handler()

    # The header deadline.

    def _arm_header_timer(self, since: float) -> None:
        self._header_timer = self.loop.call_at(since + self.limits.header_timeout_s, self._headers_timed_out)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_timed_out(self) -> None:
        """The header deadline's timer, one per connection rather than one per request: it fires at
        the deadline of the head being read when it was armed, and either finds no head being read
        (it stops; the next request arms it), a later head (it waits for that one's deadline), or
        the head it was armed for, still incomplete."""
        self._header_timer = None
        since = self._headers_since
        if self.transport.is_closing() or since is None:
            return
        if self.loop.time() < since + self.limits.header_timeout_s:
            self._arm_header_timer(since)
            return
        if self._in_headers:
            self.refuse(
                ErrorCode.REQUEST_TIMEOUT,
                f"the request's headers did not arrive within {self.limits.header_timeout_s:g} s",
            )
        else:
            self.transport.close()


def protocol_class(limits: EdgeLimits, lane: FastLane | None = None) -> type[EdgeHttpProtocol]:
    """The protocol uvicorn instantiates per connection (its ``http`` option), bound to ``limits``
    and serving ``lane``'s requests below uvicorn's request cycle."""
    return type("EdgeHttpProtocol", (EdgeHttpProtocol,), {"limits": limits, "lane": lane})
