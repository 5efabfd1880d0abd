"""The console's own JSON view: everything one refresh of the page shows, in one request."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.api.broker import Broker
from app.api.topics import BrokerDep

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


@router.get("/overview")
def overview(request: Request, broker: BrokerDep) -> dict[str, Any]:
    """Broker identity, counters, topics with queue offsets, and groups with lag per queue."""
    settings, store = broker.settings, broker.store
    topics = []
    stored = 0
    for config in broker.topics.all():
        queues = [
            {
                "queue_id": queue_id,
                "min_offset": store.min_offset(config.name, queue_id),
                "max_offset": store.max_offset(config.name, queue_id),
            }
            for queue_id in range(config.queue_nums)
        ]
        messages = sum(queue["max_offset"] for queue in queues)
        stored += messages
        topics.append(
            {
                "name": config.name,
                "read_queues": config.read_queue_nums,
                "write_queues": config.write_queue_nums,
                "perm": config.perm,
                "messages": messages,
                "queues": queues,
            }
        )
    members = getattr(request.app.state, "ws_group_members", None)
    groups = []
    consumed = 0
    for group, topic in sorted(known_groups(request, broker)):
        subscribers = len(members.members(group, topic)) if members is not None else 0
        view = group_view(broker, group, topic, subscribers)
        if view is not None:
            groups.append(view)
            consumed += sum(queue["committed_offset"] or 0 for queue in view["queues"])
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
        "totals": {"stored": stored, "consumed": consumed},
        "topics": topics,
        "groups": groups,
    }
