"""The base of the client's classes that own one keep-alive HTTP client."""

from __future__ import annotations

from typing import Self

import httpx


class HttpOwner:
    """Owns ``self.http``: closed by :meth:`close`, or at the end of a ``with`` block."""

    http: httpx.Client

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
