"""Every route of the API and the permission it needs: one table, :data:`RULES`.

A rule names a method (``WEBSOCKET`` for a WebSocket, ``*`` for any), a path template and what
the request needs. Most needs follow from the path and the query; a few ask the broker: a produce
that would create its topic needs an admin account (and is only a produce when the topic exists,
auto-creation is off, or another broker hosts it); a message read by id needs SUB on the topic its
record names; a group's offsets without a topic need SUB on every topic the group has offsets on;
a commit needs SUB on every topic of its body; a transaction's commit or rollback needs PUB on the
topic of the transaction its id names, a batch's on the topic of each transaction it names. Producer groups are groups of the ACL file: a begin, the
pending list and a check endpoint need PUB on the producer group. A request no rule names needs an account (it is
answered 404 or 405 then); a test fails when a route of the app has no rule.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.datastructures import QueryParams

from app.acl.rules import ACCOUNT, OPEN, Access, Action, Need
from app.broker import Broker
from app.store import parse_message_id
from app.store.record import decode_record


@dataclass(slots=True)
class RequestView:
    """What a classifier may look at: the matched path parameters, the query, and the body."""

    path_params: dict[str, str]
    query: QueryParams
    body: Callable[[], Awaitable[bytes]]


Classifier = Callable[[RequestView, Broker | None], Awaitable[Need]]


def _on_topic(action: Action) -> Classifier:
    async def classify(view: RequestView, broker: Broker | None) -> Need:
        return Need.on(((view.path_params["topic"], action),))

    return classify


async def _produce_to(topic: str | None, broker: Broker | None) -> Need:
    if not topic or broker is None:
        return ACCOUNT  # answered 400 (no topic) or 503 (starting) by the route
    # The produce would create the topic here, unless another broker hosts it (answered 421).
    if (
        broker.topics.get(topic) is None
        and broker.settings.auto_create_topics
        and (broker.routing is None or not await broker.routing.brokers_hosting(topic))
    ):
        return Need.admin(f"creating topic {topic!r} (a produce to a topic that does not exist creates it)")
    return Need.on(((topic, Action.PUB),))


async def produce(view: RequestView, broker: Broker | None) -> Need:
    need = await _produce_to(view.path_params["topic"], broker)
    group = view.query.get("producer_group")
    if view.query.get("transaction") is not None and group and need.access is Access.RESOURCES:
        return Need.on(need.topics, ((group, Action.PUB),))  # a begin: PUB on its producer group too
    return need


async def begin_batch_transaction(view: RequestView, broker: Broker | None) -> Need:
    """As a begin: PUB on the topic (admin if it would be created) and on the producer group."""
    need = await _produce_to(view.path_params["topic"], broker)
    group = view.query.get("producer_group")
    if group and need.access is Access.RESOURCES:
        return Need.on(need.topics, ((group, Action.PUB),))
    return need


async def end_transaction(view: RequestView, broker: Broker | None) -> Need:
    """PUB on the topic of the transaction the id names, when this broker holds it."""
    if broker is None:
        return ACCOUNT
    topic = await asyncio.to_thread(broker.transactions.topic_of, view.path_params["transaction_id"])
    if topic is None:
        return ACCOUNT  # answered 404
    return Need.on(((topic, Action.PUB),))


async def end_transactions(view: RequestView, broker: Broker | None) -> Need:
    """PUB on the topic of every transaction the body names that this broker holds."""
    document = _json_object(await view.body())
    ids = document.get("transaction_ids") if document is not None else None
    if broker is None or not isinstance(ids, list) or not all(isinstance(one, str) for one in ids):
        return ACCOUNT  # the route refuses the request (422), or answers 503
    transactions = broker.transactions

    def topics() -> list[str]:
        return sorted({topic for one in ids if (topic := transactions.topic_of(one)) is not None})

    found = await asyncio.to_thread(topics)
    if not found:
        return ACCOUNT  # each answered 40408 in the results
    return Need.on(tuple((topic, Action.PUB) for topic in found))


def _on_producer_group(group: str | None) -> Need:
    if not group:
        return ACCOUNT  # the route refuses the request (400/422)
    return Need.on((), ((group, Action.PUB),))


async def producer_group(view: RequestView, broker: Broker | None) -> Need:
    return _on_producer_group(view.path_params["producer_group"])


async def pending_transactions(view: RequestView, broker: Broker | None) -> Need:
    return _on_producer_group(view.query.get("producer_group"))


async def ws_produce(view: RequestView, broker: Broker | None) -> Need:
    return await _produce_to(view.query.get("topic"), broker)


def _consume(topic: str | None, group: str | None) -> Need:
    if not topic:
        return ACCOUNT  # the route refuses the request (400)
    return Need.on(((topic, Action.SUB),), ((group, Action.SUB),) if group else ())


async def pull(view: RequestView, broker: Broker | None) -> Need:
    return _consume(view.path_params["topic"], view.query.get("group"))


async def ws_subscribe(view: RequestView, broker: Broker | None) -> Need:
    return _consume(view.query.get("topic"), view.query.get("group"))


async def message_by_id(view: RequestView, broker: Broker | None) -> Need:
    """SUB on the topic of the message the id names, when this broker stored it."""
    msg_id = view.path_params["msg_id"]
    if broker is None:
        return ACCOUNT
    try:
        _, _, physical_offset = parse_message_id(msg_id)
    except ValueError:
        return ACCOUNT  # answered 400
    if bytes.fromhex(msg_id[:16]) != broker.store.store_host:
        return ACCOUNT  # answered 404 naming the broker that stored it
    raw = await asyncio.to_thread(broker.store.read_live_record, physical_offset)
    if raw is None:
        return ACCOUNT  # answered 404
    return Need.on(((decode_record(raw).topic, Action.SUB),))


async def read_offsets(view: RequestView, broker: Broker | None) -> Need:
    group = view.path_params["group"]
    topic = view.query.get("topic")
    if topic is not None:
        topics = [topic]
    elif broker is not None:
        topics = sorted(broker.store.consumer_offsets.topics_of_group(group))
    else:
        topics = []
    return Need.on(tuple((name, Action.SUB) for name in topics), ((group, Action.SUB),))


def _json_object(body: bytes) -> dict[str, Any] | None:
    """The body's JSON object; None for a body that is not one (the route refuses it: 400/422)."""
    try:
        document: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return document if isinstance(document, dict) else None


def _commit_topics(body: bytes) -> list[str]:
    """The topics of a commit's body; a body of another shape is refused by the route (400/422)."""
    document = _json_object(body)
    items = document.get("offsets") if document is not None else None
    if not isinstance(items, list):
        return []
    return sorted(
        {item["topic"] for item in items if isinstance(item, dict) and isinstance(item.get("topic"), str)}
    )


async def commit_offsets(view: RequestView, broker: Broker | None) -> Need:
    topics = _commit_topics(await view.body())
    group = view.path_params["group"]
    return Need.on(tuple((name, Action.SUB) for name in topics), ((group, Action.SUB),))


def _group_need(group: str, topics: list[str] | tuple[str, ...] = ()) -> Need:
    return Need.on(tuple((name, Action.SUB) for name in sorted(topics)), ((group, Action.SUB),))


async def heartbeat(view: RequestView, broker: Broker | None) -> Need:
    """SUB on the group and on every topic the member subscribes to."""
    document = _json_object(await view.body())
    subscriptions = document.get("subscriptions") if document is not None else None
    topics = (
        [name for name in subscriptions if isinstance(name, str)] if isinstance(subscriptions, dict) else []
    )
    return _group_need(view.path_params["group"], topics)


async def group_pull(view: RequestView, broker: Broker | None) -> Need:
    """SUB on the group and on the topics its member subscribed to when it joined."""
    group = view.path_params["group"]
    found = broker.groups.get(group) if broker is not None else None
    member = found.members.get(view.query.get("client_id", "")) if found is not None else None
    # The group's own retry topic is the group's: SUB on the group covers it.
    topics = [name for name in member.subscriptions if not name.startswith("%RETRY%")] if member else []
    return _group_need(group, tuple(topics))


async def retry_message(view: RequestView, broker: Broker | None) -> Need:
    """SUB on the group and on the topic the body names (a message named by id: the group's SUB
    and the id's topic, looked up as a message read by id is)."""
    document = _json_object(await view.body())
    if document is None:
        return ACCOUNT  # answered 400/422 by the route
    group = view.path_params["group"]
    topic = document.get("topic")
    if isinstance(topic, str):
        return _group_need(group, [topic])
    msg_id = document.get("msg_id")
    if isinstance(msg_id, str) and broker is not None:
        found = await message_by_id(RequestView({"msg_id": msg_id}, view.query, view.body), broker)
        return Need.on(found.topics, ((group, Action.SUB),)) if found.topics else _group_need(group)
    return _group_need(group)


async def push_subscription(view: RequestView, broker: Broker | None) -> Need:
    """SUB on the group and on the topic the body names (creating or changing a push subscription)."""
    document = _json_object(await view.body())
    topic = document.get("topic") if document is not None else None
    return _group_need(view.path_params["group"], [topic] if isinstance(topic, str) else [])


async def on_group(view: RequestView, broker: Broker | None) -> Need:
    return _group_need(view.path_params["group"])


async def on_group_topic(view: RequestView, broker: Broker | None) -> Need:
    """SUB on the group and on the topic of the path (pop, ack, nack, invisibility)."""
    return _group_need(view.path_params["group"], (view.path_params["topic"],))


@dataclass(frozen=True, slots=True)
class Rule:
    method: str
    template: str
    need: Need | Classifier  # fixed, or found from the request
    summary: str  # the security guide's words for the permission

    @property
    def pattern(self) -> re.Pattern[str]:
        return _compile(self.template)

    @property
    def is_open(self) -> bool:
        return isinstance(self.need, Need) and self.need.access is Access.OPEN

    async def classify(self, view: RequestView, broker: Broker | None) -> Need:
        if isinstance(self.need, Need):
            return self.need
        return await self.need(view, broker)


def _compile(template: str) -> re.Pattern[str]:
    def group(match: re.Match[str]) -> str:
        name, _, kind = match.group(1).partition(":")
        return f"(?P<{name}>.*)" if kind == "path" else f"(?P<{name}>[^/]+)"

    return re.compile("^" + re.sub(r"\{([^}]+)\}", group, template) + "$")


# First match wins: the more specific path comes first.
RULES: tuple[Rule, ...] = (
    Rule("*", "/healthz", OPEN, "open (liveness probe)"),
    Rule("*", "/readyz", OPEN, "open (readiness probe)"),
    Rule("GET", "/openapi.json", OPEN, "open (the API's description)"),
    Rule("GET", "/docs", OPEN, "open (the API's description)"),
    Rule("GET", "/docs/oauth2-redirect", OPEN, "open (the API's description)"),
    Rule("GET", "/redoc", OPEN, "open (the API's description)"),
    Rule("GET", "/docs/assets", OPEN, "open (the docs pages' scripts and styles)"),
    Rule("GET", "/docs/assets/{file:path}", OPEN, "open (the docs pages' scripts and styles)"),
    Rule("GET", "/", OPEN, "open (a redirect to the console)"),
    Rule("*", "/console/api/{rest:path}", Need.admin("the console's overview"), "admin"),
    Rule("GET", "/console", OPEN, "open (the console's static files)"),
    Rule("GET", "/console/{file:path}", OPEN, "open (the console's static files)"),
    Rule("OPTIONS", "/{rest:path}", OPEN, "open (CORS preflight; no route answers OPTIONS)"),
    Rule("GET", "/v1/stats", ACCOUNT, "any account"),
    Rule("GET", "/v1/access", ACCOUNT, "any account"),
    Rule("GET", "/metrics", Need.admin("scraping the metrics (every topic's and group's counters)"), "admin"),
    Rule("POST", "/v1/topics/{topic}/messages", produce, "PUB on the topic; admin if it would be created"),
    Rule("GET", "/v1/topics/{topic}/messages", _on_topic(Action.SUB), "SUB on the topic"),
    Rule(
        "POST",
        "/v1/topics/{topic}/transactions",
        begin_batch_transaction,
        "PUB on the topic and on the group `producer_group`; admin if the topic would be created",
    ),
    Rule("GET", "/v1/topics/{topic}/queues/{queue_id}/messages", pull, "SUB on the topic, and on `group`"),
    Rule("GET", "/v1/topics/{topic}/events", pull, "SUB on the topic, and on `group`"),
    Rule(
        "GET", "/v1/topics/{topic}/queues/{queue_id}/offset", _on_topic(Action.ANY), "PUB or SUB on the topic"
    ),
    Rule("GET", "/v1/topics/{topic}/queues", _on_topic(Action.ANY), "PUB or SUB on the topic"),
    Rule("GET", "/v1/topics/{topic}/route", _on_topic(Action.ANY), "PUB or SUB on the topic"),
    Rule("GET", "/v1/topics/{topic}", _on_topic(Action.ANY), "PUB or SUB on the topic"),
    Rule("DELETE", "/v1/topics/{topic}", Need.admin("deleting a topic"), "admin"),
    Rule("PUT", "/v1/topics/{topic}", Need.admin("changing a topic's queues or permission"), "admin"),
    Rule("POST", "/v1/topics", Need.admin("creating topics"), "admin"),
    Rule("GET", "/v1/topics", ACCOUNT, "any account"),
    Rule("GET", "/v1/messages/{msg_id}", message_by_id, "SUB on the message's topic"),
    Rule("GET", "/v1/clusters", ACCOUNT, "any account"),
    Rule("GET", "/v1/groups", ACCOUNT, "any account"),
    Rule("GET", "/v1/groups/{group}/offsets", read_offsets, "SUB on the group and on each topic"),
    Rule("POST", "/v1/groups/{group}/heartbeat", heartbeat, "SUB on the group and on each subscribed topic"),
    Rule("DELETE", "/v1/groups/{group}/members/{client_id}", on_group, "SUB on the group"),
    Rule("GET", "/v1/groups/{group}/messages", group_pull, "SUB on the group and on the member's topics"),
    Rule("POST", "/v1/groups/{group}/locks", on_group, "SUB on the group"),
    Rule("DELETE", "/v1/groups/{group}/locks", on_group, "SUB on the group"),
    Rule("GET", "/v1/groups/{group}", on_group, "SUB on the group"),
    Rule("PUT", "/v1/groups/{group}/config", Need.admin("changing a group's settings"), "admin"),
    Rule("POST", "/v1/groups/{group}/retry", retry_message, "SUB on the group and on the message's topic"),
    Rule("GET", "/v1/groups/{group}/dlq", on_group, "SUB on the group"),
    Rule("PUT", "/v1/groups/{group}/push", push_subscription, "SUB on the group and on the body's topic"),
    Rule("GET", "/v1/groups/{group}/push", on_group, "SUB on the group"),
    Rule("DELETE", "/v1/groups/{group}/push", on_group, "SUB on the group"),
    Rule("GET", "/v1/push", Need.admin("listing every group's push subscriptions"), "admin"),
    Rule("POST", "/v1/groups/{group}/dlq/resend", Need.admin("resending dead letters"), "admin"),
    Rule("POST", "/v1/groups/{group}/dlq/skip", Need.admin("skipping dead letters"), "admin"),
    Rule(
        "POST", "/v1/groups/{group}/topics/{topic}/pop", on_group_topic, "SUB on the group and on the topic"
    ),
    Rule(
        "POST", "/v1/groups/{group}/topics/{topic}/ack", on_group_topic, "SUB on the group and on the topic"
    ),
    Rule(
        "POST", "/v1/groups/{group}/topics/{topic}/nack", on_group_topic, "SUB on the group and on the topic"
    ),
    Rule(
        "POST",
        "/v1/groups/{group}/topics/{topic}/invisibility",
        on_group_topic,
        "SUB on the group and on the topic",
    ),
    Rule("PUT", "/v1/groups/{group}/offsets", commit_offsets, "SUB on the group and on each topic"),
    Rule(
        "POST",
        "/v1/transactions/{transaction_id}/commit",
        end_transaction,
        "PUB on the transaction's topic",
    ),
    Rule(
        "POST",
        "/v1/transactions/{transaction_id}/rollback",
        end_transaction,
        "PUB on the transaction's topic",
    ),
    Rule("POST", "/v1/transactions/commit", end_transactions, "PUB on each transaction's topic"),
    Rule("POST", "/v1/transactions/rollback", end_transactions, "PUB on each transaction's topic"),
    Rule("GET", "/v1/transactions/pending", pending_transactions, "PUB on the group `producer_group`"),
    Rule("PUT", "/v1/producers/{producer_group}", producer_group, "PUB on the group `producer_group`"),
    Rule("GET", "/v1/producers/{producer_group}", producer_group, "PUB on the group `producer_group`"),
    Rule("*", "/v1/admin/{rest:path}", Need.admin("an operator request (/v1/admin)"), "admin"),
    Rule("WEBSOCKET", "/v1/ws/subscribe", ws_subscribe, "SUB on the topic, and on `group`"),
    Rule("WEBSOCKET", "/v1/ws/produce", ws_produce, "PUB on the topic; admin if it would be created"),
    Rule("WEBSOCKET", "/v1/ha/replicate", Need.admin("replicating the CommitLog to a slave"), "admin"),
    Rule("GET", "/v1/ha/metadata", Need.admin("copying topics and offsets to a slave"), "admin"),
    Rule("POST", "/v1/ha/offsets", Need.admin("handing a slave's offsets to its master"), "admin"),
)

_COMPILED = tuple((rule, rule.pattern) for rule in RULES)


def match_rule(method: str, path: str) -> tuple[Rule, dict[str, str]] | None:
    """The first rule for this method and path, and the path's parameters; None when none is."""
    if method == "HEAD":
        method = "GET"
    for rule, pattern in _COMPILED:
        if rule.method != method and not (rule.method == "*" and method not in ("WEBSOCKET", "OPTIONS")):
            continue
        found = pattern.match(path)
        if found is not None:
            return rule, found.groupdict()
    return None
