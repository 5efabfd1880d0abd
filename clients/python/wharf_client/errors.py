"""The client's exceptions.

WharfClientError                no broker could be reached, or retries ran out
├── BrokerUnavailableError      no answer (connection refused, timeout, 502-504) after the retries
└── BrokerError                 a broker answered with the error envelope (error_code, message)
"""

from __future__ import annotations

import os

import httpx


class WharfClientError(Exception):
    pass


class BrokerUnavailableError(WharfClientError):
    pass


class BrokerError(WharfClientError):
    def __init__(
        self, status: int, error_code: int, message: str, body: dict[str, object] | None = None
    ) -> None:
        super().__init__(f"{error_code}: {message}")
        self.status = status
        self.error_code = error_code
        self.message = message
        self.body = body or {}

    @property
    def retryable(self) -> bool:
        """Worth trying on another broker: the broker is unwell, not the request."""
        return self.status in (421, 503, 507) or self.status >= 500


def raise_for_envelope(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body = response.json()
        raise BrokerError(response.status_code, int(body["error_code"]), str(body["message"]), body)
    except (ValueError, KeyError, TypeError):
        raise BrokerError(response.status_code, response.status_code * 100, response.text[:200]) from None


def transport_reason(error: BaseException) -> str:
    """What a failed connection says, down to the system's reason when one is known ("Connection
    refused"): asyncio's transports bury the errno a few causes deep."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno:
            return f"{error!r} ({os.strerror(seen.errno)})"
        seen = seen.__cause__ or seen.__context__
    return repr(error)
