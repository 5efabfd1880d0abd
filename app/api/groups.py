"""Consumer group endpoints: commit offsets, read them back with each queue's lag."""

from __future__ import annotations

import bisect
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from app.api.errors import ApiError, ErrorCode
from app.api.paging import CursorParam, LimitParam, decode_cursor, encode_cursor, parse_limit
from app.api.schemas import ErrorEnvelope, GroupList, GroupOffsets, OffsetCommitRequest
from app.api.topics import BrokerDep
from app.broker import group_consume

router = APIRouter(prefix="/v1/groups", tags=["groups"])

GroupName = Annotated[
    str, Path(min_length=1, max_length=255, pattern=r"^[%|a-zA-Z0-9_-]+$", description="Consumer group")
]


async def queue_offsets(broker: BrokerDep, group: str, topics: list[str]) -> list[dict[str, Any]]:
    manager = broker.store.consumer_offsets
    store = broker.store
    rows = []
    for topic in topics:
        config = await broker.topic(topic)
        for queue_id in range(config.queue_nums):
            committed = manager.query(group, topic, queue_id)
            max_offset = store.max_offset(topic, queue_id)
            base = committed if committed >= 0 else store.min_offset(topic, queue_id)
            rows.append(
                {
                    "topic": topic,
                    "queue_id": queue_id,
                    "committed_offset": committed if committed >= 0 else None,
                    "max_offset": max_offset,
                    "lag": max(0, max_offset - base),
                }
            )
    return rows


@router.get(
    "",
    response_model=GroupList,
    response_model_exclude_none=True,
    summary="Consumer groups with committed offsets, and their topics, a page at a time, by name",
    responses={400: {"model": ErrorEnvelope}},
)
def list_groups(broker: BrokerDep, limit: LimitParam = None, cursor: CursorParam = None) -> dict[str, Any]:
    size = parse_limit(limit)
    after = decode_cursor("groups", cursor)
    topics_by_group = broker.store.consumer_offsets.group_topics()
    names = sorted(topics_by_group)
    start = 0 if after is None else bisect.bisect_right(names, after)
    chosen = names[start : start + size]
    answer: dict[str, Any] = {"groups": [{"group": g, "topics": sorted(topics_by_group[g])} for g in chosen]}
    if start + size < len(names):
        answer["next_cursor"] = encode_cursor("groups", chosen[-1])
    return answer


@router.put(
    "/{group}/offsets",
    response_model=GroupOffsets,
    summary="Commit offsets: the next offset the group will read, per queue (all or nothing)",
    responses={
        400: {"model": ErrorEnvelope},
        404: {"model": ErrorEnvelope},
        409: {
            "model": ErrorEnvelope,
            "description": "A member's commit from an older generation, or for a queue it does not own",
        },
        422: {"model": ErrorEnvelope},
    },
)
async def commit_offsets(group: GroupName, body: OffsetCommitRequest, broker: BrokerDep) -> dict[str, Any]:
    # All or nothing: every entry is checked before any is committed.
    for item in body.offsets:
        await broker.queue_of(item.topic, item.queue_id)
    if body.client_id is not None:
        entries = [(item.topic, item.queue_id, item.offset) for item in body.offsets]
        key = await group_consume.commit(broker, group, body.client_id, body.generation, entries)
        topics = sorted({item.topic for item in body.offsets})
        # A broadcasting member's offsets are its own: answer those.
        return {"group": group, "offsets": await queue_offsets(broker, key, topics)}
    for item in body.offsets:
        broker.check_commit(item.topic, item.queue_id, item.offset)
    for item in body.offsets:
        broker.commit_offset(group, item.topic, item.queue_id, item.offset)
    topics = sorted({item.topic for item in body.offsets})
    return {"group": group, "offsets": await queue_offsets(broker, group, topics)}


@router.get(
    "/{group}/offsets",
    response_model=GroupOffsets,
    summary="Committed offsets, max offsets and lag per queue",
    responses={404: {"model": ErrorEnvelope}},
)
async def get_offsets(
    group: GroupName,
    broker: BrokerDep,
    topic: Annotated[str | None, Query(min_length=1, max_length=255, description="Only this topic")] = None,
) -> dict[str, Any]:
    if topic is not None:
        topics = [topic]
    else:
        topics = sorted(broker.store.consumer_offsets.topics_of_group(group))
        if not topics:
            raise ApiError(ErrorCode.GROUP_NOT_FOUND, f"group {group!r} has no committed offsets")
    return {"group": group, "offsets": await queue_offsets(broker, group, topics)}
