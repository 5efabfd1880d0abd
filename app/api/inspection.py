"""Reads of the broker's own machinery, for an operator and the console: the route registry's
health, the store's files, and a group's pop messages in flight. All under ``/v1/admin`` (admin
when the ACL is on)."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from app.api.groups import GroupName
from app.api.pop import PopDep
from app.api.topics import BrokerDep
from app.broker.pop_table import in_flight_of
from app.broker.store_files import describe_files

router = APIRouter(tags=["admin"])

MAX_SEGMENTS = 1000


class RegistryHealth(BaseModel):
    configured: bool = Field(description="Whether this broker has a route registry (WHARF_DATABASE_URL)")
    kind: str | None = Field(None, description="The registry's database: sqlite or postgresql")
    reachable: bool | None = Field(None, description="Whether it answers now (asked at most once a second)")
    last_error: str | None = Field(None, description="Why the last call failed, while it does not answer")
    last_heartbeat_ms: int | None = Field(
        None, description="When it last took this broker's registration (heartbeat), ms since the epoch"
    )
    heartbeat_interval_s: float | None = None
    published: bool | None = Field(
        None, description="False while a topic change waits for the next heartbeat to reach it"
    )


@router.get(
    "/v1/admin/registry",
    response_model=RegistryHealth,
    summary="The route registry's health: its kind, whether it answers, its last heartbeat",
)
async def registry_health(broker: BrokerDep) -> dict[str, Any]:
    if broker.routing is None:
        return {"configured": False}
    return {"configured": True, **await broker.routing.health()}


class SegmentOut(BaseModel):
    name: str = Field(description="The file's name: its first CommitLog offset, 20 digits")
    from_offset: int
    size_bytes: int = Field(description="The file's size (preallocated)")
    written_bytes: int = Field(description="How much of it holds records")


class CommitLogFiles(BaseModel):
    segments: int = Field(description="Segments on disk")
    bytes: int = Field(description="Their sizes added up")
    min_offset: int
    max_offset: int
    segment_bytes: int = Field(description="The size of a new segment (WHARF_COMMITLOG_FILE_SIZE)")
    files: list[SegmentOut] = Field(description="The latest segments, oldest first, at most `segments`")


class FileTotals(BaseModel):
    files: int
    bytes: int


class QueueFileTotals(FileTotals):
    queues: int = Field(description="ConsumeQueues (topic and queue id pairs) with a directory")


class StoreFiles(BaseModel):
    commitlog: CommitLogFiles
    consume_queues: QueueFileTotals
    index: FileTotals


@router.get(
    "/v1/admin/store",
    response_model=StoreFiles,
    summary="The store's files: the latest CommitLog segments, and ConsumeQueue and index totals",
)
async def store_files(
    broker: BrokerDep,
    segments: Annotated[
        int, Query(ge=0, le=MAX_SEGMENTS, description="How many of the latest CommitLog segments to list")
    ] = 20,
) -> dict[str, Any]:
    return await asyncio.to_thread(describe_files, broker.store, segments)


class PopQueueOut(BaseModel):
    topic: str
    queue_id: int
    in_flight: int = Field(description="Messages popped and not acked yet")
    invisible: int = Field(description="Of those, the ones still within their invisible time")
    visible_again: int = Field(
        description="Of those, the ones whose invisible time passed: popped again next, or dead-lettered"
    )
    next_deadline_ms: int | None = Field(None, description="When the next invisible time ends")
    popped_until: int = Field(description="The first queue offset never popped")


class PopInFlight(BaseModel):
    group: str
    now_ms: int
    in_flight: int = Field(description="Over every queue")
    queues: list[PopQueueOut] = Field(description="The queues with messages in flight")


@router.get(
    "/v1/admin/groups/{group}/pop",
    response_model=PopInFlight,
    summary="A group's pop messages in flight (popped, not acked yet), per topic and queue",
)
async def pop_in_flight(group: GroupName, pop: PopDep) -> dict[str, Any]:
    now_ms = int(time.time() * 1000)
    queues = in_flight_of(pop.table.queues, group, now_ms)
    return {
        "group": group,
        "now_ms": now_ms,
        "in_flight": sum(int(queue["in_flight"] or 0) for queue in queues),
        "queues": queues,
    }
