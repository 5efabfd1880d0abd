"""Reads an operator (and the console) needs that no other endpoint answers: topics and groups found
by a part of their name a page at a time, the delay levels' backlogs, every open transaction, and
what the account calling may do.

Everything under ``/v1/admin`` needs an admin account when the ACL is on; ``GET /v1/access`` needs
any account.
"""

from __future__ import annotations

import bisect
import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from app.acl.credentials import Principal
from app.api.acl import PRINCIPAL_SCOPE_KEY
from app.api.paging import CursorParam, LimitParam, decode_cursor, encode_cursor, parse_limit
from app.api.schemas import ErrorEnvelope
from app.api.topics import BrokerDep
from app.broker import Broker
from app.broker.delay import LEVEL_NAMES
from app.broker.delay_message import TIMER_TOPIC, level_due_ms, record_properties
from app.store.record import store_timestamp
from app.store.record_format import LEVEL_DELAYS_MS, PROPERTY_TIMER_OUT_MS, PROPERTY_UNIQ_KEY, SCHEDULE_TOPIC

router = APIRouter(tags=["admin"])

SearchParam = Annotated[
    str | None,
    Query(max_length=255, description="Only the names containing this text (case-insensitive)"),
]
_PAGED_ERRORS: dict[int | str, dict[str, Any]] = {400: {"model": ErrorEnvelope}}


class QueueRange(BaseModel):
    queue_id: int
    min_offset: int
    max_offset: int
    produce_rate_per_s: float | None = Field(
        None, description="Messages stored per second over the topic's `rate_window_s` (null: first look)"
    )


TIMER_SCAN_LIMIT = 100_000
TIMER_SCAN_BATCH = 1000
HOUR_MS = 3_600_000


class AdminTopic(BaseModel):
    name: str
    read_queues: int
    write_queues: int
    perm: int
    order: bool
    messages: int = Field(description="Messages stored over the topic's life: the sum of its max offsets")
    queues: list[QueueRange]
    rate_window_s: float = Field(0.0, description="The seconds the queues' rates cover; 0: none yet")


class AdminTopicPage(BaseModel):
    total: int = Field(description="Topics matching the search, on every page")
    topics: list[AdminTopic]
    next_cursor: str | None = None


class AdminGroup(BaseModel):
    group: str
    topics: list[str] = Field(description="Topics with committed offsets or subscribed by a member")
    members: int = Field(description="Live members (heartbeating over HTTP)")
    generation: int | None = Field(None, description="The group's generation; none without live members")
    consume_mode: str | None = Field(None, description="concurrently or orderly; none without live members")
    lag: int = Field(description="Messages behind over every queue of its topics")


class AdminGroupPage(BaseModel):
    total: int = Field(description="Groups matching the search, on every page")
    groups: list[AdminGroup]
    next_cursor: str | None = None


class DelayLevelOut(BaseModel):
    level: int = Field(description="1 to 18")
    delay: str = Field(description="The level's delay, e.g. 10s")
    delay_ms: int
    pending: int = Field(description="Messages of the level not delivered yet")
    next_due_ms: int | None = Field(
        description="When the level's next message is due (epoch ms); none if none"
    )


class TimerOut(BaseModel):
    due_next_hour: int = Field(description="Messages for an arbitrary time due within the next hour")
    due_later: int = Field(description="Those due after the next hour")
    next_due_ms: int | None = Field(description="When the earliest is due (epoch ms); none if none")
    complete: bool = Field(
        description=f"Whether every stored timer message was looked at (at most {TIMER_SCAN_LIMIT:,} are)"
    )


class DelaysOut(BaseModel):
    levels: list[DelayLevelOut]
    timer: TimerOut = Field(description="Messages produced with delay_ms or deliver_at_ms, not delivered yet")
    now_ms: int = Field(description="The broker's clock when it answered (epoch ms)")


class OpenTransactionRow(BaseModel):
    transaction_id: str
    producer_group: str
    topic: str
    stored_ms: int = Field(description="When the half message's latest copy was stored (epoch ms)")
    age_ms: int
    check_times: int = Field(description="How often the broker asked the producer's check endpoint")
    check_url: str | None = Field(description="The producer group's check endpoint, if registered")


class OpenTransactionRows(BaseModel):
    total: int = Field(description="Open transactions (of the producer group, if one is given)")
    transactions: list[OpenTransactionRow] = Field(description="Oldest first")


class AccessOut(BaseModel):
    acl: bool = Field(description="Whether the broker asks for credentials")
    account: str | None = Field(description="The access key the request was made with")
    admin: bool = Field(
        description="Whether the account may make admin requests (all of them without an ACL)"
    )


def _matching(names: list[str], search: str | None) -> list[str]:
    if not search:
        return names
    needle = search.lower()
    return [name for name in names if needle in name.lower()]


def _page(kind: str, names: list[str], cursor: str | None, limit: str | None) -> tuple[list[str], str | None]:
    """The page of sorted ``names`` after ``cursor``, and the cursor of the next one."""
    size = parse_limit(limit)
    after = decode_cursor(kind, cursor)
    start = 0 if after is None else bisect.bisect_right(names, after)
    chosen = names[start : start + size]
    return chosen, (encode_cursor(kind, chosen[-1]) if start + size < len(names) else None)


@router.get(
    "/v1/admin/topics",
    response_model=AdminTopicPage,
    response_model_exclude_none=True,
    summary="Topics whose name contains a text, a page at a time, with every queue's offsets",
    responses=_PAGED_ERRORS,
)
def search_topics(
    broker: BrokerDep, q: SearchParam = None, limit: LimitParam = None, cursor: CursorParam = None
) -> dict[str, Any]:
    names = _matching(sorted(config.name for config in broker.topics.all()), q)
    chosen, next_cursor = _page("admin-topics", names, cursor, limit)
    store = broker.store
    topics = []
    for name in chosen:
        config = broker.topics.get(name)
        if config is None:  # deleted meanwhile
            continue
        ends = [store.max_offset(name, queue_id) for queue_id in range(config.queue_nums)]
        rates, window_s = broker.queue_rates.sample(name, ends)
        queues = [
            {
                "queue_id": queue_id,
                "min_offset": store.min_offset(name, queue_id),
                "max_offset": ends[queue_id],
                "produce_rate_per_s": rates[queue_id],
            }
            for queue_id in range(config.queue_nums)
        ]
        topics.append(
            {
                "name": name,
                "read_queues": config.read_queue_nums,
                "write_queues": config.write_queue_nums,
                "perm": config.perm,
                "order": config.order,
                "messages": sum(ends),
                "queues": queues,
                "rate_window_s": window_s,
            }
        )
    return {"total": len(names), "topics": topics, "next_cursor": next_cursor}


def _group_lag(broker: Broker, group: str, topics: list[str]) -> int:
    store, offsets = broker.store, broker.store.consumer_offsets
    lag = 0
    for topic in topics:
        config = broker.topics.get(topic)
        if config is None:
            continue
        for queue_id in range(config.queue_nums):
            committed = offsets.query(group, topic, queue_id)
            base = committed if committed >= 0 else store.min_offset(topic, queue_id)
            lag += max(0, store.max_offset(topic, queue_id) - base)
    return lag


@router.get(
    "/v1/admin/groups",
    response_model=AdminGroupPage,
    response_model_exclude_none=True,
    summary="Consumer groups whose name contains a text, a page at a time, with members and total lag",
    responses=_PAGED_ERRORS,
)
def search_groups(
    broker: BrokerDep, q: SearchParam = None, limit: LimitParam = None, cursor: CursorParam = None
) -> dict[str, Any]:
    topics_by_group: dict[str, set[str]] = {
        group: set(topics) for group, topics in broker.store.consumer_offsets.group_topics().items()
    }
    for name in broker.groups.names():
        found = broker.groups.get(name)
        if found is not None:
            subscribed = topics_by_group.setdefault(name, set())
            for member in found.members.values():
                subscribed.update(member.subscriptions)
    names = _matching(sorted(topics_by_group), q)
    chosen, next_cursor = _page("admin-groups", names, cursor, limit)
    groups = []
    for name in chosen:
        found = broker.groups.get(name)
        topics = sorted(topic for topic in topics_by_group[name] if broker.topics.get(topic))
        groups.append(
            {
                "group": name,
                "topics": topics,
                "members": len(found.members) if found is not None else 0,
                "generation": found.generation if found is not None else None,
                "consume_mode": found.consume_mode if found is not None else None,
                "lag": _group_lag(broker, name, topics),
            }
        )
    return {"total": len(names), "groups": groups, "next_cursor": next_cursor}


@router.get(
    "/v1/admin/delays",
    response_model=DelaysOut,
    summary="Delayed messages: per delay level the messages pending and when the next is due",
)
def delay_levels(broker: BrokerDep) -> dict[str, Any]:
    store = broker.store
    schedule = broker.delays.schedule
    names = LEVEL_NAMES.split()
    levels = []
    for queue_id, delay_ms in enumerate(LEVEL_DELAYS_MS):
        level = queue_id + 1
        # The service's offset may trail what retention deleted; pending counts what is still stored.
        offset = max(schedule.offsets[queue_id], store.min_offset(SCHEDULE_TOPIC, queue_id))
        pending = max(0, store.max_offset(SCHEDULE_TOPIC, queue_id) - offset)
        next_due = None
        if pending:
            result = store.get_message(SCHEDULE_TOPIC, queue_id, offset, 1)
            if result.records:
                next_due = level_due_ms(level, store_timestamp(result.records[0]))
        levels.append(
            {
                "level": level,
                "delay": names[queue_id] if queue_id < len(names) else f"{delay_ms} ms",
                "delay_ms": delay_ms,
                "pending": pending,
                "next_due_ms": next_due,
            }
        )
    now = int(time.time() * 1000)
    return {
        "levels": levels,
        "timer": _timer_backlog(broker, now),
        "now_ms": int(time.time() * 1000),
    }


def _timer_backlog(broker: Broker, now_ms: int) -> dict[str, Any]:
    """Read the timer topic from its start: a message whose time is still ahead is not delivered
    yet. A long wait is stored again as it rolls; its copies share its unique id and count once."""
    store = broker.store
    offset, end = store.min_offset(TIMER_TOPIC, 0), store.max_offset(TIMER_TOPIC, 0)
    start = max(offset, end - TIMER_SCAN_LIMIT)
    due: dict[str, int] = {}
    offset = start
    while offset < end:
        result = store.get_message(TIMER_TOPIC, 0, offset, TIMER_SCAN_BATCH)
        if result.next_offset <= offset:
            break
        for record, queue_offset in zip(result.records, result.queue_offsets, strict=True):
            properties = record_properties(record)
            due_ms = int(properties.get(PROPERTY_TIMER_OUT_MS, "0") or 0)
            if due_ms > now_ms:
                due[properties.get(PROPERTY_UNIQ_KEY) or f"#{queue_offset}"] = due_ms
        offset = result.next_offset
    soon = sum(1 for at in due.values() if at <= now_ms + HOUR_MS)
    return {
        "due_next_hour": soon,
        "due_later": len(due) - soon,
        "next_due_ms": min(due.values()) if due else None,
        "complete": start == store.min_offset(TIMER_TOPIC, 0),
    }


@router.get(
    "/v1/admin/transactions",
    response_model=OpenTransactionRows,
    summary="Every open transaction (or a producer group's), oldest first, checked or not yet",
    responses={422: {"model": ErrorEnvelope}},
)
def open_transactions(
    broker: BrokerDep,
    producer_group: Annotated[
        str | None, Query(min_length=1, max_length=255, description="Only this producer group's")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many")] = 100,
) -> dict[str, Any]:
    manager = broker.transactions
    found = [
        entry
        for entry in list(manager.table.open.values())
        if producer_group is None or entry.producer_group == producer_group
    ]
    found.sort(key=lambda entry: entry.stored_ms)
    now = int(time.time() * 1000)
    return {
        "total": len(found),
        "transactions": [
            {
                "transaction_id": entry.transaction_id,
                "producer_group": entry.producer_group,
                "topic": entry.topic,
                "stored_ms": entry.stored_ms,
                "age_ms": max(0, now - entry.stored_ms),
                "check_times": entry.check_times,
                "check_url": manager.producers.check_url(entry.producer_group),
            }
            for entry in found[:limit]
        ],
    }


@router.get(
    "/v1/access",
    response_model=AccessOut,
    summary="The account this request was made with and whether it may make admin requests",
)
def get_access(request: Request) -> dict[str, Any]:
    principal: Principal | None = request.scope.get(PRINCIPAL_SCOPE_KEY)
    if getattr(request.app.state, "acl", None) is None or principal is None:
        return {"acl": False, "account": None, "admin": True}
    account = principal.account
    return {
        "acl": True,
        "account": account.access_key if account is not None else None,
        "admin": principal.trusted or (account is not None and account.admin),
    }
