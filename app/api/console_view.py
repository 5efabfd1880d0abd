"""The console's own JSON view: everything one refresh of the page shows, in one request (topics
and groups a page at a time)."""

from __future__ import annotations

import bisect
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from app.api.paging import CursorParam, decode_cursor, encode_cursor
from app.api.topics import BrokerDep
from app.broker import Broker

router = APIRouter(prefix="/console/api", include_in_schema=False)


def known_groups(request: Request, broker: Broker) -> set[tuple[str, str]]:
    """(group, topic) pairs with committed offsets, and those with live WebSocket subscribers."""
    pairs = {(entry.group, entry.topic) for entry in broker.store.consumer_offsets.all()}
    members = getattr(request.app.state, "ws_group_members", None)
    if members is not None:
        pairs.update(members.keys())
    return pairs


def group_view(broker: Broker, group: str, topic: str, subscribers: int) -> dict[str, Any] | None:
    config = broker.topics.get(topic)
    if config is None:
        return None
    store, offsets = broker.store, broker.store.consumer_offsets
    queues = []
    for queue_id in range(config.read_queue_nums):
        committed = offsets.query(group, topic, queue_id)  # -1: none yet
        max_offset = store.max_offset(topic, queue_id)
        # The same lag as GET /v1/groups/{group}/offsets: from the committed or the first offset.
        base = committed if committed >= 0 else store.min_offset(topic, queue_id)
        queues.append(
            {
                "queue_id": queue_id,
                "committed_offset": committed if committed >= 0 else None,
                "max_offset": max_offset,
                "lag": max(0, max_offset - base),
            }
        )
    return {
        "group": group,
        "topic": topic,
        "subscribers": subscribers,
        "lag": sum(queue["lag"] for queue in queues),
        "queues": queues,
    }


PAGE = 100


def _page(keys: list[str], after: str | None) -> tuple[list[str], str | None]:
    """The PAGE keys after ``after`` in sorted ``keys``, and the last one if more follow."""
    start = 0 if after is None else bisect.bisect_right(keys, after)
    chosen = keys[start : start + PAGE]
    return chosen, (chosen[-1] if start + PAGE < len(keys) else None)


@router.get("/overview")
def overview(
    request: Request,
    broker: BrokerDep,
    topics_cursor: CursorParam = None,
    groups_cursor: CursorParam = None,
    groups_q: Annotated[str | None, Query(max_length=255)] = None,
) -> dict[str, Any]:
    """Broker identity and counters over everything; one page of topics (with queue offsets) and
    one page of groups (with lag per queue), 100 each, by name, with cursors for the next ones;
    ``groups_q``: only the groups whose name contains it (case-insensitive)."""
    settings, store = broker.settings, broker.store
    stored = 0
    for config in broker.topics.all():
        stored += sum(store.max_offset(config.name, queue_id) for queue_id in range(config.queue_nums))
    configs, more = broker.topics.page(decode_cursor("console-topics", topics_cursor), PAGE)
    topics = []
    for config in configs:
        queues = [
            {
                "queue_id": queue_id,
                "min_offset": store.min_offset(config.name, queue_id),
                "max_offset": store.max_offset(config.name, queue_id),
            }
            for queue_id in range(config.queue_nums)
        ]
        topics.append(
            {
                "name": config.name,
                "read_queues": config.read_queue_nums,
                "write_queues": config.write_queue_nums,
                "perm": config.perm,
                "messages": sum(queue["max_offset"] for queue in queues),
                "queues": queues,
            }
        )
    members = getattr(request.app.state, "ws_group_members", None)
    # Pairs sort as "group NUL topic": the order of (group, topic).
    needle = (groups_q or "").lower()
    every = [(group, topic) for group, topic in known_groups(request, broker) if broker.topics.get(topic)]
    pairs = sorted(f"{group}\0{topic}" for group, topic in every if needle in group.lower())
    chosen, groups_after = _page(pairs, decode_cursor("console-groups", groups_cursor))
    groups = []
    for pair in chosen:
        group, _, topic = pair.partition("\0")
        subscribers = len(members.members(group, topic)) if members is not None else 0
        view = group_view(broker, group, topic, subscribers)
        if view is not None:
            groups.append(view)
    pushes = getattr(request.app.state, "push", None)
    push = pushes.list()[:PAGE] if pushes is not None else []
    consumed = sum(
        entry.offset for entry in broker.store.consumer_offsets.all() if broker.topics.get(entry.topic)
    )
    return {
        "broker": {
            "cluster": settings.cluster_name,
            "broker_name": settings.broker_name,
            "broker_id": settings.broker_id,
            "address": settings.resolved_advertised_url,
        },
        "stats": {
            "held_pulls": broker.holds.held_count,
            "commitlog_min_offset": store.commitlog.min_offset,
            "commitlog_max_offset": store.commitlog.max_offset,
        },
        "totals": {
            "stored": stored,
            "consumed": consumed,
            "topics": len(broker.topics),
            "groups": len(every),
        },
        "groups_matching": len(pairs),
        "topics": topics,
        "topics_next_cursor": encode_cursor("console-topics", configs[-1].name) if more else None,
        "groups": groups,
        "groups_next_cursor": encode_cursor("console-groups", groups_after) if groups_after else None,
        "push": push,  # the first PAGE push subscriptions, by group, with their state
    }
