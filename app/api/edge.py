"""The edge of the app: what one request may cost, what it may claim to be, and where it may come from.

Three ASGI middlewares, outermost first (connection-level limits are in :mod:`app.api.edge_protocol`):

- Starlette's ``CORSMiddleware``, only when ``WHARF_CORS_ORIGINS`` lists origins: those origins get
  CORS headers (refusals included), any other none.
- :class:`RequestGuard`: a request body is bounded while it streams in (Content-Length or chunked):
  ``WHARF_MAX_REQUEST_BYTES`` for produce, ``WHARF_MAX_ADMIN_REQUEST_BYTES`` for every other body.
  Past the limit the request is answered 413 and the connection closed; never more than the limit
  is handed to the app, and a Content-Length over it is answered before anything is read. It also
  answers 415 to a POST, PUT, PATCH or DELETE whose Content-Type the route does not take (as its
  OpenAPI request body says; JSON only as UTF-8), or that lacks one when the route takes a body;
  a route that takes no body refuses any type but JSON - so a cross-site form (``text/plain``,
  ``application/x-www-form-urlencoded``, ``multipart/form-data``) can neither produce nor create a
  topic. Produce checks its own types (app.api.messages).
- :class:`OriginGuard`: a WebSocket handshake whose ``Origin`` is neither the broker's own (the
  Host header's or the advertised URL's host and port) nor listed in ``WHARF_CORS_ORIGINS`` is
  answered 403; a handshake without ``Origin`` (not a browser) is let through.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import ErrorCode, error_response
from app.settings import Settings

PRODUCE_PATH = re.compile(r"^/v1/topics/[^/]+/messages$")
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON = "application/json"
DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


class BodyTooLarge(Exception):
    """Raised to the app by the guarded ``receive`` once the body passes its limit.

    Not an ApiError on purpose: no handler inside the app may turn it into an answer of its own;
    it reaches :class:`RequestGuard`, which answers 413."""


def _refusal(code: ErrorCode, message: str) -> ASGIApp:
    return error_response(code, message, headers={"connection": "close"})


def media_type_of(content_type: str) -> tuple[str, str | None]:
    """The lower-cased media type of a Content-Type and its charset parameter, if any."""
    media_type, *parameters = content_type.split(";")
    charset = None
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip('"').lower()
    return media_type.strip().lower(), charset


def _content_length(raw_headers: Iterable[tuple[bytes, bytes]]) -> int | None:
    """The Content-Length of a request without Transfer-Encoding, else None."""
    length = None
    for name, value in raw_headers:
        if name == b"content-length":
            if not value.isdigit():
                return None
            length = int(value)
        elif name == b"transfer-encoding":
            return None
    return length


class RequestGuard:
    def __init__(
        self, app: ASGIApp, *, routes_of: FastAPI, max_request_bytes: int, max_admin_request_bytes: int
    ):
        self.app = app
        self.routes_of = routes_of
        self.max_request_bytes = max_request_bytes
        self.max_admin_request_bytes = max_admin_request_bytes
        # (method, path pattern, media types) of every route that takes a body.
        self._bodies: list[tuple[str, re.Pattern[str], frozenset[str]]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        produce = method == "POST" and PRODUCE_PATH.match(scope["path"]) is not None
        if produce:
            # The hot path: a produce whose Content-Length is within the limit cannot hand the app
            # more than that (the HTTP parser ends the body there), so it needs no guard.
            declared = _content_length(scope["headers"])
            if declared is not None and declared <= self.max_request_bytes:
                await self.app(scope, receive, send)
                return
        headers = Headers(scope=scope)
        if method in UNSAFE_METHODS and not produce:
            refused = self._unaccepted_media_type(scope, headers.get("content-type"))
            if refused is not None:
                await _refusal(ErrorCode.UNSUPPORTED_MEDIA_TYPE, refused)(scope, receive, send)
                return
        length = headers.get("content-length")
        if length is None and "transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body
            return
        limit = self.max_request_bytes if produce else self.max_admin_request_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            await self._too_large(
                scope, receive, send, f"request body is {length} bytes, the limit is {limit}"
            )
            return
        await self._guarded(scope, receive, send, limit)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        received = 0
        exceeded = False
        body_complete = False
        response_started = False

        async def guarded_receive() -> Message:
            nonlocal received, exceeded, body_complete
            if exceeded:
                raise BodyTooLarge
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    raise BodyTooLarge
                body_complete = not message.get("more_body", False)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal response_started
            if exceeded and not response_started:
                return  # whatever the app makes of the BodyTooLarge, the answer is 413
            if message["type"] == "http.response.start":
                response_started = True
                if not body_complete:
                    # Answered without reading the body (a route that takes none, an early
                    # refusal): closing ends it, instead of reading what may never end.
                    message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except Exception:
            if not exceeded or response_started:
                raise
        if exceeded and not response_started:
            await self._too_large(scope, receive, send, f"request body is over the limit of {limit} bytes")

    @staticmethod
    async def _too_large(scope: Scope, receive: Receive, send: Send, message: str) -> None:
        # Closing the connection ends the body as well: the rest is never read.
        await _refusal(ErrorCode.REQUEST_TOO_LARGE, message)(scope, receive, send)

    def _unaccepted_media_type(self, scope: Scope, content_type: str | None) -> str | None:
        """Why the Content-Type is not taken here, or None."""
        accepted = self._accepted_media_types(scope["method"], scope["path"])
        if content_type is None:
            if accepted:
                return f"a {scope['method']} to this path needs Content-Type: {', '.join(sorted(accepted))}"
            return None
        media_type, charset = media_type_of(content_type)
        if media_type not in (accepted or {JSON}):
            return f"Content-Type {media_type!r} is not accepted here: send {', '.join(sorted(accepted or {JSON}))}"
        if media_type == JSON and charset not in (None, "utf-8", "utf8"):
            return f"JSON is read as UTF-8, not {charset!r}"
        return None

    def _accepted_media_types(self, method: str, path: str) -> frozenset[str]:
        """The media types the route's request body takes, as the OpenAPI document says; empty
        for a route that takes no body."""
        if self._bodies is None:
            self._bodies = []
            for template, operations in self.routes_of.openapi().get("paths", {}).items():
                pattern = re.compile(
                    "^"
                    + "/".join(
                        "[^/]+" if part.startswith("{") else re.escape(part) for part in template.split("/")
                    )
                    + "$"
                )
                for operation_method, operation in operations.items():
                    content = operation.get("requestBody", {}).get("content", {})
                    if content:
                        self._bodies.append((operation_method.upper(), pattern, frozenset(content)))
        for body_method, pattern, media_types in self._bodies:
            if body_method == method and pattern.match(path):
                return media_types
        return frozenset()


def _host_port(netloc: str, scheme: str) -> tuple[str, int | None] | None:
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        return (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None


class OriginGuard:
    def __init__(self, app: ASGIApp, *, allowed_origins: Iterable[str], advertised_url: str) -> None:
        self.app = app
        self.allowed_origins = {origin.lower().rstrip("/") for origin in allowed_origins}
        advertised = urlsplit(advertised_url)
        self.advertised = _host_port(advertised.netloc, advertised.scheme)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is None or self.allows(origin, headers.get("host", ""), scope.get("scheme", "ws")):
            await self.app(scope, receive, send)
            return
        await receive()  # websocket.connect
        message = (
            f"origin {origin!r} may not open a WebSocket here; WHARF_CORS_ORIGINS lists the allowed ones"
        )
        if "websocket.http.response" in scope.get("extensions", {}):
            response = error_response(ErrorCode.ORIGIN_NOT_ALLOWED, message)
            await send(
                {"type": "websocket.http.response.start", "status": 403, "headers": response.raw_headers}
            )
            await send({"type": "websocket.http.response.body", "body": response.body})
        else:
            await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})

    def allows(self, origin: str, host: str, scheme: str) -> bool:
        origin = origin.strip().lower().rstrip("/")
        if origin in self.allowed_origins:
            return True
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https"):
            return False
        claimed = _host_port(parts.netloc, parts.scheme)
        own = _host_port(host, "https" if scheme == "wss" else "http")
        return claimed is not None and claimed in (own, self.advertised)


def install_edge(app: FastAPI, settings: Settings) -> None:
    """Add the edge's middlewares to ``app`` (the last added runs first)."""
    app.add_middleware(
        OriginGuard,
        allowed_origins=settings.cors_origin_list,
        advertised_url=settings.resolved_advertised_url,
    )
    app.add_middleware(
        RequestGuard,
        routes_of=app,
        max_request_bytes=settings.max_request_bytes,
        max_admin_request_bytes=settings.max_admin_request_bytes,
    )
    if settings.cors_origin_list:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origin_list,
            allow_methods=["GET", "POST", "PUT", "DELETE"],
            allow_headers=["*"],
            expose_headers=[
                "X-Wharf-Status",
                "X-Wharf-Next-Offset",
                "X-Wharf-Min-Offset",
                "X-Wharf-Max-Offset",
                "X-Wharf-Message-Count",
            ],
            max_age=600,
        )
