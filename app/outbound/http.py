"""The outbound adapter over HTTP (httpx) and WebSocket (websockets): carries out the interfaces of
:mod:`app.broker.outbound` for the broker core.

* The replication stream is the master's ``/v1/ha/replicate`` WebSocket (app.api.ha), its metadata
  ``GET /v1/ha/metadata`` and ``POST /v1/ha/offsets``, with the slave's admin account as Basic auth.
* A forwarded create is ``POST {address}/v1/topics`` with the caller's headers; a broker that cannot
  be reached answers 503.
* A check-back POSTs the transaction as JSON to the endpoint and reads ``{"status"}``.
* A push delivery (:class:`app.push.request.PushTransport`) POSTs a subscription's request, follows no
  redirect, reads at most :data:`PUSH_MAX_ANSWER_BYTES` of the answer and gives up after the
  subscription's timeout, counted from the request's start to the answer's end.

Every client verifies TLS with :func:`wharf_client.tls.client_ssl_context`.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx
import websockets
from wharf_client.tls import client_ssl_context

from app.broker.ha_slave import encode_epochs
from app.broker.outbound import Account, PeerAnswer
from app.broker.transaction_check import CheckAnswer
from app.push.request import FailureKind, PushAnswer
from app.store.epochs import Epoch

log = logging.getLogger(__name__)

REPLICATE_PATH = "/v1/ha/replicate"
METADATA_PATH = "/v1/ha/metadata"
OFFSETS_PATH = "/v1/ha/offsets"
FORWARD_TIMEOUT_S = 10.0
CHECK_TIMEOUT_S = 3.0
PUSH_MAX_ANSWER_BYTES = 64 * 1024


def replicate_url(master_url: str, offset: int, broker_id: int, own_url: str, epochs: Sequence[Epoch]) -> str:
    parts = urlsplit(master_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    query = urlencode(
        {"offset": offset, "broker_id": broker_id, "url": own_url, "epochs": encode_epochs(epochs)}
    )
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + REPLICATE_PATH, query, ""))


def basic_header(access_key: str, secret_key: str) -> str:
    return "Basic " + base64.b64encode(f"{access_key}:{secret_key}".encode()).decode("ascii")


def account_headers(account: Account | None) -> dict[str, str]:
    """Sent to a master with an ACL: an admin account's access and secret key, as Basic auth."""
    return {"Authorization": basic_header(*account)} if account is not None else {}


class HttpMasterMetadata:
    """A slave's metadata session: one HTTP client for the pushes and the held GETs."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def push_offsets(self, offsets: list[dict[str, Any]]) -> None:
        pushed = await self.http.post(OFFSETS_PATH, json={"offsets": offsets})
        pushed.raise_for_status()

    async def fetch(self, version: int, wait_ms: int) -> dict[str, Any]:
        response = await self.http.get(METADATA_PATH, params={"version": version, "wait_ms": wait_ms})
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer


class HttpPeerTopics:
    """Forwards creates to other brokers with one HTTP client."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def create_topic(
        self, address: str, request: Mapping[str, Any], headers: Mapping[str, str]
    ) -> PeerAnswer:
        try:
            answer = await self.http.post(f"{address}/v1/topics", json=dict(request), headers=dict(headers))
        except httpx.HTTPError as exc:
            return PeerAnswer(503, str(exc))
        error = None if answer.status_code < 300 else answer.json().get("message", answer.text)
        return PeerAnswer(answer.status_code, error)


class HttpCheckBack:
    """Asks a check endpoint over HTTP: POST the transaction as JSON, read ``{"status"}``."""

    def __init__(self, timeout_s: float = CHECK_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._client: httpx.AsyncClient | None = None

    async def __call__(self, url: str, transaction: dict[str, Any]) -> CheckAnswer:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self.timeout_s, follow_redirects=False, verify=client_ssl_context()
            )
        try:
            response = await self._client.post(url, json=transaction)
            if not response.is_success:
                return CheckAnswer.UNKNOWN
            return CheckAnswer.parse(response.json())
        except (httpx.HTTPError, ValueError) as exc:
            log.debug("check of transaction %s at %s failed: %s", transaction["transaction_id"], url, exc)
            return CheckAnswer.UNKNOWN

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _push_failure(error: BaseException) -> FailureKind:
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ssl.SSLError):
            return FailureKind.TLS
        cause = cause.__cause__ or cause.__context__
    if isinstance(error, httpx.TimeoutException):
        return FailureKind.TIMEOUT
    if isinstance(error, httpx.ConnectError | OSError):
        return FailureKind.CONNECT
    return FailureKind.PROTOCOL


class HttpPushTransport:
    """Push deliveries over one HTTP client shared by every subscription (their ``max_in_flight``
    bounds the connections)."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                follow_redirects=False,
                verify=client_ssl_context(),
                timeout=None,  # the whole request is timed below
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=256),
                headers={"user-agent": "wharf-push"},
            )
        return self._client

    async def post(self, url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> PushAnswer:
        try:
            async with asyncio.timeout(timeout_s):
                async with self._http().stream("POST", url, content=body, headers=headers) as response:
                    read = 0
                    async for chunk in response.aiter_raw():
                        read += len(chunk)
                        if read > PUSH_MAX_ANSWER_BYTES:
                            break
                    status = response.status_code
                    retry_after = response.headers.get("retry-after")
        except TimeoutError:
            return PushAnswer(None, FailureKind.TIMEOUT, f"no answer in {timeout_s:g} s")
        except (httpx.HTTPError, OSError, ssl.SSLError) as error:
            return PushAnswer(None, _push_failure(error), str(error) or type(error).__name__)
        failure = None if 200 <= status < 300 else FailureKind.STATUS
        return PushAnswer(status, failure, retry_after=retry_after)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


class HttpOutbound:
    """The broker core's calls to other processes, over HTTP and WebSocket
    (:class:`app.broker.outbound.Outbound`)."""

    @asynccontextmanager
    async def replicate(
        self,
        master: str,
        offset: int,
        broker_id: int,
        own_url: str,
        epochs: Sequence[Epoch],
        account: Account | None,
    ) -> AsyncIterator[websockets.ClientConnection]:
        url = replicate_url(master, offset, broker_id, own_url, epochs)
        async with websockets.connect(
            url, max_size=None, open_timeout=5, close_timeout=1, additional_headers=account_headers(account)
        ) as connection:
            yield connection

    @asynccontextmanager
    async def metadata(
        self, master: str, wait_ms: int, account: Account | None
    ) -> AsyncIterator[HttpMasterMetadata]:
        async with httpx.AsyncClient(
            base_url=master,
            timeout=wait_ms / 1000 + 10,
            headers=account_headers(account),
            verify=client_ssl_context(),
        ) as http:
            yield HttpMasterMetadata(http)

    @asynccontextmanager
    async def peers(self) -> AsyncIterator[HttpPeerTopics]:
        async with httpx.AsyncClient(timeout=FORWARD_TIMEOUT_S, verify=client_ssl_context()) as http:
            yield HttpPeerTopics(http)

    def check_back(self) -> HttpCheckBack:
        return HttpCheckBack()
