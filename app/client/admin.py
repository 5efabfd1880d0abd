"""Administration of one broker: create topics (one, or many in lists of up to 1,000), and walk
every topic and consumer group page by page."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import httpx

from app.client.auth import User, basic_auth
from app.client.closing import HttpOwner
from app.client.errors import raise_for_envelope

# The broker's cap on a bulk create, and on a page.
MAX_BULK_TOPICS = 1000
MAX_PAGE = 1000


class Admin(HttpOwner):
    def __init__(self, address: str, *, timeout_s: float = 30.0, user: User | None = None) -> None:
        """``user``: ``"accessKey:secretKey"`` (or a pair) for a broker with an ACL."""
        self.address = address.rstrip("/")
        self.http = httpx.Client(base_url=self.address, timeout=timeout_s, auth=basic_auth(user))

    def create_topic(self, name: str, queues: int | None = None, **fields: Any) -> dict[str, Any]:
        """Create a topic (or find it there with this configuration); BrokerError otherwise."""
        body = {"name": name, **({"queues": queues} if queues is not None else {}), **fields}
        response = self.http.post("/v1/topics", json=body)
        raise_for_envelope(response)
        result: dict[str, Any] = response.json()
        return result

    def create_topics(self, topics: Iterable[str | dict[str, Any]]) -> list[dict[str, Any]]:
        """Create many topics, in requests of up to 1,000; one result per topic, in order, each
        with its name, status (201 created, 200 there already, else an error's) and the topic or
        the error envelope. A topic is a name or a dict like a single create's body."""
        specs = [{"name": topic} if isinstance(topic, str) else topic for topic in topics]
        results: list[dict[str, Any]] = []
        for start in range(0, len(specs), MAX_BULK_TOPICS):
            response = self.http.post("/v1/topics", json={"topics": specs[start : start + MAX_BULK_TOPICS]})
            raise_for_envelope(response)
            results += response.json()["results"]
        return results

    def iter_topics(self, page_size: int = MAX_PAGE) -> Iterator[dict[str, Any]]:
        """Every topic of the broker, by name, fetched ``page_size`` at a time."""
        return self._pages("/v1/topics", "topics", page_size)

    def iter_groups(self, page_size: int = MAX_PAGE) -> Iterator[dict[str, Any]]:
        """Every consumer group with committed offsets (and its topics), by name."""
        return self._pages("/v1/groups", "groups", page_size)

    def _pages(self, path: str, key: str, page_size: int) -> Iterator[dict[str, Any]]:
        cursor: str | None = None
        while True:
            params = {"limit": str(page_size), **({"cursor": cursor} if cursor is not None else {})}
            response = self.http.get(path, params=params)
            raise_for_envelope(response)
            page = response.json()
            yield from page[key]
            cursor = page.get("next_cursor")
            if cursor is None:
                return
