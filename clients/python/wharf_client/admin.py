"""Administration of one broker: create, describe and delete topics (one, or many in lists of up to
1,000), walk every topic and consumer group page by page, read a group's offsets, look messages up,
the operator's views (clusters, retention, the store's disk), and push subscriptions."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import quote

import httpx

from wharf_client.auth import User, basic_auth
from wharf_client.closing import HttpOwner
from wharf_client.errors import raise_for_envelope
from wharf_client.tls import client_ssl_context

# The broker's cap on a bulk create, and on a page.
MAX_BULK_TOPICS = 1000
MAX_PAGE = 1000


class Admin(HttpOwner):
    def __init__(self, address: str, *, timeout_s: float = 30.0, user: User | None = None) -> None:
        """``user``: ``"accessKey:secretKey"`` (or a pair) for a broker with an ACL."""
        self.address = address.rstrip("/")
        self.http = httpx.Client(
            base_url=self.address, timeout=timeout_s, auth=basic_auth(user), verify=client_ssl_context()
        )

    def create_topic(self, name: str, queues: int | None = None, **fields: Any) -> dict[str, Any]:
        """Create a topic (or find it there with this configuration); BrokerError otherwise."""
        body = {"name": name, **({"queues": queues} if queues is not None else {}), **fields}
        response = self.http.post("/v1/topics", json=body)
        raise_for_envelope(response)
        result: dict[str, Any] = response.json()
        return result

    def topic(self, name: str) -> dict[str, Any]:
        """The topic's configuration: read and write queues, permission, order."""
        return self._get(f"/v1/topics/{_segment(name)}")

    def topic_queues(self, name: str) -> list[dict[str, Any]]:
        """Each queue of the topic on this broker: min and max offsets, last store time (ms)."""
        queues: list[dict[str, Any]] = self._get(f"/v1/topics/{_segment(name)}/queues")["queues"]
        return queues

    def delete_topic(self, name: str) -> None:
        """Delete the topic and its queues on this broker."""
        raise_for_envelope(self.http.delete(f"/v1/topics/{_segment(name)}"))

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

    def group_offsets(self, group: str, topic: str | None = None) -> list[dict[str, Any]]:
        """Per queue of the group's topics (or of ``topic`` only): committed offset, max offset, lag."""
        params = {"topic": topic} if topic is not None else {}
        offsets: list[dict[str, Any]] = self._get(f"/v1/groups/{_segment(group)}/offsets", params)["offsets"]
        return offsets

    def message(self, msg_id: str) -> dict[str, Any]:
        """The message with this id (stored by this broker)."""
        return self._get(f"/v1/messages/{_segment(msg_id)}")

    def messages_by_key(self, topic: str, key: str, max_messages: int = 32) -> list[dict[str, Any]]:
        """The topic's messages with this key (a word of their keys, or their unique id), newest first."""
        params = {"key": key, "max": str(max_messages)}
        found: list[dict[str, Any]] = self._get(f"/v1/topics/{_segment(topic)}/messages", params)["messages"]
        return found

    def clusters(self) -> list[dict[str, Any]]:
        """The clusters the route registry knows, with their brokers and liveness."""
        clusters: list[dict[str, Any]] = self._get("/v1/clusters")["clusters"]
        return clusters

    def clean(self) -> dict[str, Any]:
        """Run a retention pass now; what it deleted."""
        response = self.http.post("/v1/admin/clean")
        raise_for_envelope(response)
        report: dict[str, Any] = response.json()
        return report

    def disk(self) -> dict[str, Any]:
        """The store's disk: use, free bytes, and whether the broker accepts writes."""
        return self._get("/v1/admin/disk")

    def push_subscriptions(self) -> list[dict[str, Any]]:
        """Every push subscription of the broker, with its state."""
        found: list[dict[str, Any]] = self._get("/v1/push")["subscriptions"]
        return found

    def push_subscription(self, group: str) -> dict[str, Any]:
        """The group's push subscription and its state (lag, in flight, counts, last error)."""
        return self._get(f"/v1/groups/{_segment(group)}/push")

    def put_push_subscription(self, group: str, **fields: Any) -> dict[str, Any]:
        """Create or change the group's push subscription (``topic``, ``url``, ``filter``, ...); a new
        one's answer holds its ``secret`` (made when none is given), shown this once."""
        response = self.http.put(f"/v1/groups/{_segment(group)}/push", json=fields)
        raise_for_envelope(response)
        answer: dict[str, Any] = response.json()
        return answer

    def delete_push_subscription(self, group: str) -> None:
        """Stop and remove the group's push subscription (its committed offsets stay)."""
        raise_for_envelope(self.http.delete(f"/v1/groups/{_segment(group)}/push"))

    def _get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        response = self.http.get(path, params=params)
        raise_for_envelope(response)
        answer: dict[str, Any] = response.json()
        return answer

    def _pages(self, path: str, key: str, page_size: int) -> Iterator[dict[str, Any]]:
        cursor: str | None = None
        while True:
            params = {"limit": str(page_size), **({"cursor": cursor} if cursor is not None else {})}
            page = self._get(path, params)
            yield from page[key]
            cursor = page.get("next_cursor")
            if cursor is None:
                return


def _segment(name: str) -> str:
    """A name as one path segment: topic and group names may hold ``%`` and ``|``."""
    return quote(name, safe="")
