"""The ACL at the door: one ASGI middleware that authenticates every request and checks the
permission its route needs (app.acl.classify) before the app sees it. :func:`install_acl` puts it
in front of every route when ``WHARF_ACL_FILE`` names the rules (app.acl).

A refused HTTP request is answered ``401`` (with ``WWW-Authenticate: Basic realm="wharf"``) or
``403`` in the error envelope; a refused WebSocket is accepted and closed at once with ``4401`` or
``4403`` and the same error code at the start of the reason. Nothing of a refused request reaches
a route, so it changes nothing. The ``token`` parameter of a WebSocket, or of an event stream
(``GET /v1/topics/{topic}/events``: a browser's EventSource cannot send headers), is cut out of the
scope's query string, which the server logs and the route reads.
"""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import unquote_plus

from fastapi import FastAPI
from starlette.datastructures import Headers, QueryParams
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.acl.addresses import parse_address
from app.acl.classify import RequestView, match_rule
from app.acl.credentials import (
    Credentials,
    CredentialsError,
    Principal,
    authenticate,
    from_authorization,
    from_token,
)
from app.acl.rules import ACCOUNT
from app.acl.watch import AclFile
from app.api.errors import ApiError, ErrorCode, code_for, error_response
from app.routing.errors import RegistryUnavailableError
from app.settings import Settings
from app.store.errors import StoreError

log = logging.getLogger(__name__)

# Where the request's Principal is kept in the ASGI scope, for GET /v1/access to answer.
PRINCIPAL_SCOPE_KEY = "wharf.principal"
CHALLENGE = {"WWW-Authenticate": 'Basic realm="wharf"'}
MAX_REASON_BYTES = 123  # RFC 6455: a close frame's payload is at most 125 bytes, 2 of them the code


class ClientGone(Exception):
    """The client left while its request body was read."""


def take_token(scope: Scope) -> str | None:
    """The ``token`` query parameter, cut out of the scope's query string (servers log it)."""
    raw: bytes = scope.get("query_string", b"")
    if b"token" not in raw and b"%" not in raw:
        return None
    kept, token = [], None
    for part in raw.split(b"&"):
        name, _, value = part.partition(b"=")
        if unquote_plus(name.decode("latin-1")) == "token":
            token = unquote_plus(value.decode("latin-1"))
        else:
            kept.append(part)
    if token is not None:
        scope["query_string"] = b"&".join(kept)
    return token


def _is_event_stream(scope: Scope) -> bool:
    path: str = scope["path"]
    return scope["method"] == "GET" and path.startswith("/v1/topics/") and path.endswith("/events")


def _credentials(headers: Headers, token: str | None) -> Credentials | None:
    authorization = headers.get("authorization")
    if authorization is not None:
        return from_authorization(authorization)
    if token is not None:
        return from_token(token)
    return None


class _ReplayedBody:
    """The request body, read at most once for a classifier and then handed to the app."""

    def __init__(self, receive: Receive, limit_bytes: int) -> None:
        self._receive = receive
        self._limit_bytes = limit_bytes
        self._body: bytes | None = None
        self._replayed = False

    async def read(self) -> bytes:
        if self._body is None:
            chunks, size = [], 0
            more = True
            while more:
                message = await self._receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self._limit_bytes:
                    raise ApiError(
                        ErrorCode.REQUEST_TOO_LARGE,
                        f"request body is over the limit of {self._limit_bytes} bytes",
                    )
                chunks.append(chunk)
                more = message.get("more_body", False)
            self._body = b"".join(chunks)
        return self._body

    async def receive(self) -> Message:
        if self._body is not None and not self._replayed:
            self._replayed = True
            return {"type": "http.request", "body": self._body, "more_body": False}
        return await self._receive()


class AclMiddleware:
    def __init__(self, app: ASGIApp, acl: AclFile, max_body_bytes: int) -> None:
        self.app = app
        self.acl = acl
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        websocket = scope["type"] == "websocket"
        token = take_token(scope) if websocket or _is_event_stream(scope) else None
        found = match_rule("WEBSOCKET" if websocket else scope["method"], scope["path"])
        if found is not None and found[0].is_open:
            await self.app(scope, receive, send)
            return
        body = _ReplayedBody(receive, self.max_body_bytes)
        try:
            principal = self._principal(scope, token)
            scope[PRINCIPAL_SCOPE_KEY] = principal
            account = principal.account
            if not principal.trusted and account is not None and not account.admin:
                need = ACCOUNT
                if found is not None:
                    rule, path_params = found
                    view = RequestView(path_params, QueryParams(scope.get("query_string", b"")), body.read)
                    need = await rule.classify(view, scope["app"].state.broker)
                refusal = account.refusal(need)
                if refusal is not None:
                    log.info("refused %s %s: %s", _method(scope), scope["path"], refusal)
                    raise ApiError(ErrorCode.FORBIDDEN, refusal)
        except CredentialsError as exc:
            error = ApiError(ErrorCode.UNAUTHORIZED, str(exc), headers=CHALLENGE)
            await _refuse(scope, receive, send, error)
            return
        except ApiError as exc:
            await _refuse(scope, receive, send, exc)
            return
        except (StoreError, RegistryUnavailableError) as exc:
            await _refuse(scope, receive, send, ApiError(code_for(exc), str(exc)))
            return
        except ClientGone:
            return
        await self.app(scope, body.receive, send)

    def _principal(self, scope: Scope, token: str | None) -> Principal:
        rules = self.acl.current()
        client = scope.get("client")
        host = client[0] if client else None
        try:
            return authenticate(rules, parse_address(host), _credentials(Headers(scope=scope), token))
        except CredentialsError as exc:
            # The reason never holds the secret, nor an access key that names no account.
            log.warning("authentication failed: %s %s from %s: %s", _method(scope), scope["path"], host, exc)
            raise


def _method(scope: Scope) -> str:
    return "WebSocket" if scope["type"] == "websocket" else str(scope["method"])


async def _refuse(scope: Scope, receive: Receive, send: Send, error: ApiError) -> None:
    if scope["type"] == "http":
        response = error_response(error.code, error.message, error.headers)
        await response(scope, receive, send)
        return
    # A browser cannot read the HTTP answer to a refused handshake: accept, then close with the code.
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    reason = f"{int(error.code)} {error.message}".encode()
    if len(reason) > MAX_REASON_BYTES:
        reason = reason[: MAX_REASON_BYTES - 3] + b"..."
    text = reason.decode(errors="ignore")
    await send({"type": "websocket.close", "code": 4000 + error.code.http_status, "reason": text})


def install_acl(app: FastAPI, settings: Settings) -> AclFile | None:
    """Guard every route with the rules of ``settings.acl_file``; nothing when it is not set."""
    if not settings.acl_file:
        return None
    acl = AclFile(Path(settings.acl_file), settings.acl_reload_interval_ms / 1000)
    app.add_middleware(AclMiddleware, acl=acl, max_body_bytes=settings.max_request_bytes)
    app.state.acl = acl
    return acl
