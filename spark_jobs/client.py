"""The few broker calls the Spark source makes, over HTTP with httpx.

The driver asks for routes, queue offsets and time lookups; executors pull pages of stored records
in the binary format and producers post binary batches. Every call is one short request: pulls never
wait (``max_wait_ms=0``) because a batch read knows exactly which offsets it wants.

Exceptions::

    WharfSourceError            anything the source cannot do; the message says what and where
    ├── BrokerUnavailableError  no answer from a broker after the retries
    ├── BrokerRequestError      a broker answered with its error envelope (status, error_code)
    └── DataLossError           offsets a read was planned for are gone (retention), failOnDataLoss
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from app.api.codec import BATCH_MEDIA_TYPE, RECORDS_MEDIA_TYPE

# Error codes of the envelope this module tells apart.
TOPIC_NOT_FOUND = 40402

RETRY_STATUSES = frozenset({502, 503, 504})


class WharfSourceError(Exception):
    """A read or write through the Wharf source failed."""


class BrokerUnavailableError(WharfSourceError):
    """The broker did not answer (connection refused, timeout, 5xx) within the retries."""


class BrokerRequestError(WharfSourceError):
    """The broker refused a request with its error envelope."""

    def __init__(self, url: str, status: int, error_code: int, message: str) -> None:
        super().__init__(f"{url} answered {status} ({error_code}): {message}")
        self.status = status
        self.error_code = error_code
        self.message = message


class DataLossError(WharfSourceError):
    """Messages a read was planned for are no longer stored (retention deleted them)."""


@dataclass(frozen=True, slots=True)
class PullPage:
    """One binary pull answer: the records and the queue's offsets at the time."""

    status: str
    next_offset: int
    min_offset: int
    max_offset: int
    records: bytes


class BrokerClient:
    """A keep-alive HTTP client to one or more brokers, with a few retries on transport errors."""

    def __init__(
        self, timeout_s: float = 30.0, retries: int = 3, backoff_s: float = 0.2, user: str | None = None
    ) -> None:
        """``user``: ``"accessKey:secretKey"`` for brokers with an ACL, sent as HTTP Basic auth."""
        auth = None
        if user is not None:
            access_key, _, secret_key = user.partition(":")
            auth = httpx.BasicAuth(access_key, secret_key)
        self._http = httpx.Client(timeout=timeout_s, auth=auth)
        self._retries = retries
        self._backoff_s = backoff_s

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        error: Exception | None = None
        for attempt in range(self._retries + 1):
            if attempt:
                time.sleep(self._backoff_s * 2 ** (attempt - 1))
            try:
                response = self._http.request(method, url, **kwargs)
            except httpx.TransportError as exc:
                error = exc
                continue
            if response.status_code in RETRY_STATUSES:
                error = _request_error(url, response)
                continue
            if response.status_code >= 400:
                raise _request_error(url, response)
            return response
        if isinstance(error, BrokerRequestError):
            raise error
        raise BrokerUnavailableError(f"{method} {url} failed after {self._retries + 1} tries: {error}")

    # -- planning (driver) -------------------------------------------------------------------------

    def route(self, address: str, topic: str) -> dict[str, Any] | None:
        """The topic's route from ``address``'s registry; None when the registry has no route."""
        try:
            return self._request("GET", f"{address}/v1/topics/{topic}/route").json()  # type: ignore[no-any-return]
        except BrokerRequestError as exc:
            if exc.status == 404:
                return None
            raise

    def queues(self, address: str, topic: str) -> list[dict[str, Any]]:
        """``[{"queue_id", "min_offset", "max_offset", "last_store_timestamp"}]`` of the topic there."""
        return self._request("GET", f"{address}/v1/topics/{topic}/queues").json()["queues"]  # type: ignore[no-any-return]

    def search_offset(self, address: str, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The offset of the queue's first message stored at or after ``timestamp_ms``."""
        answer = self._request(
            "GET", f"{address}/v1/topics/{topic}/queues/{queue_id}/offset", params={"timestamp": timestamp_ms}
        ).json()
        return int(answer["offset"])

    # -- reading (executors) -----------------------------------------------------------------------

    def pull(
        self, address: str, topic: str, queue_id: int, offset: int, max_messages: int, tags: str | None
    ) -> PullPage:
        """One page of records from ``offset``, answered at once (no long polling)."""
        params: dict[str, Any] = {"offset": offset, "max_messages": max_messages, "max_wait_ms": 0}
        if tags:
            params["tags"] = tags
        response = self._request(
            "GET",
            f"{address}/v1/topics/{topic}/queues/{queue_id}/messages",
            params=params,
            headers={"Accept": RECORDS_MEDIA_TYPE},
        )
        headers = response.headers
        return PullPage(
            status=headers["X-Wharf-Status"],
            next_offset=int(headers["X-Wharf-Next-Offset"]),
            min_offset=int(headers["X-Wharf-Min-Offset"]),
            max_offset=int(headers["X-Wharf-Max-Offset"]),
            records=response.content,
        )

    # -- writing (executors) -----------------------------------------------------------------------

    def produce_batch(self, address: str, topic: str, batch: bytes) -> list[dict[str, Any]]:
        """Post one binary batch (app.api.codec.encode_batch); the per-message results."""
        response = self._request(
            "POST",
            f"{address}/v1/topics/{topic}/messages",
            content=batch,
            headers={"Content-Type": BATCH_MEDIA_TYPE},
        )
        return response.json()["results"]  # type: ignore[no-any-return]


def _request_error(url: str, response: httpx.Response) -> BrokerRequestError:
    try:
        body = response.json()
        return BrokerRequestError(url, response.status_code, int(body["error_code"]), str(body["message"]))
    except (ValueError, KeyError, TypeError):
        return BrokerRequestError(url, response.status_code, response.status_code * 100, response.text[:200])
