"""Topic endpoints: create (here or across a cluster), list, describe, delete, queue offsets."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Depends, Path, Query, Request, Response

from app.api.broker import Broker
from app.api.errors import ApiError, ErrorCode
from app.api.schemas import ErrorEnvelope, QueueList, SearchOffsetResponse, TopicCreate, TopicList, TopicOut
from app.routing.topic_config import TopicConfig

router = APIRouter(prefix="/v1/topics", tags=["topics"])

TopicName = Annotated[str, Path(min_length=1, max_length=255, description="Topic name")]
QueueId = Annotated[int, Path(ge=0, le=65535, description="Queue id")]

FORWARD_TIMEOUT_S = 10.0


async def get_broker(request: Request) -> Broker:
    broker: Broker | None = getattr(request.app.state, "broker", None)
    if broker is None:
        raise ApiError(ErrorCode.NOT_READY, "the broker is starting")
    return broker


BrokerDep = Annotated[Broker, Depends(get_broker)]


def topic_out(config: TopicConfig) -> dict[str, Any]:
    return {
        "name": config.name,
        "read_queues": config.read_queue_nums,
        "write_queues": config.write_queue_nums,
        "perm": config.perm,
        "order": config.order,
    }


async def _create_here(broker: Broker, wanted: TopicConfig) -> tuple[int, dict[str, Any]]:
    existing = broker.topics.get(wanted.name)
    if existing is not None:
        if existing != wanted:
            raise ApiError(
                ErrorCode.TOPIC_EXISTS,
                f"topic {wanted.name!r} exists with another configuration: {topic_out(existing)}",
            )
        return 200, topic_out(existing)
    broker.topics.put(wanted)
    await broker.topics_changed()
    return 201, topic_out(wanted)


async def _create_across(broker: Broker, body: TopicCreate, wanted: TopicConfig) -> dict[str, Any]:
    routing = broker.routing
    if routing is None:
        raise ApiError(ErrorCode.BAD_REQUEST, "this broker has no route registry")
    targets = await asyncio.to_thread(routing.registry.masters, body.cluster, body.brokers)
    if not targets:
        where = f"cluster {body.cluster!r}" if body.cluster else f"brokers {body.brokers}"
        raise ApiError(ErrorCode.CLUSTER_NOT_FOUND, f"no live master in {where}")
    request = body.model_dump(exclude={"cluster", "brokers"}, exclude_none=True)
    placements = []
    async with httpx.AsyncClient(timeout=FORWARD_TIMEOUT_S) as client:
        for name, address in targets:
            if name == routing.identity.broker_name:
                try:
                    status, _ = await _create_here(broker, wanted)
                    placements.append({"broker_name": name, "address": address, "status": status})
                except ApiError as exc:
                    placements.append(
                        {
                            "broker_name": name,
                            "address": address,
                            "status": exc.code.http_status,
                            "error": exc.message,
                        }
                    )
                continue
            try:
                answer = await client.post(f"{address}/v1/topics", json=request)
                error = None if answer.status_code < 300 else answer.json().get("message", answer.text)
                placements.append(
                    {"broker_name": name, "address": address, "status": answer.status_code, "error": error}
                )
            except httpx.HTTPError as exc:
                placements.append({"broker_name": name, "address": address, "status": 503, "error": str(exc)})
    return {**topic_out(wanted), "brokers": placements}


@router.post(
    "",
    status_code=201,
    response_model=TopicOut,
    response_model_exclude_none=True,
    summary="Create a topic here, or on every master of a cluster or a list of brokers",
    responses={
        200: {"model": TopicOut, "description": "The topic exists with this configuration"},
        404: {"model": ErrorEnvelope},
        409: {"model": ErrorEnvelope},
        422: {"model": ErrorEnvelope},
    },
)
async def create_topic(body: TopicCreate, broker: BrokerDep, response: Response) -> dict[str, Any]:
    default = broker.settings.default_topic_queue_nums
    read = body.read_queues or body.queues or default
    write = body.write_queues or body.queues or default
    wanted = TopicConfig(body.name, read, write, body.perm, body.order)
    if body.cluster is not None or body.brokers is not None:
        return await _create_across(broker, body, wanted)
    status, out = await _create_here(broker, wanted)
    response.status_code = status
    return out


@router.get("", response_model=TopicList, summary="List this broker's topics")
def list_topics(broker: BrokerDep) -> dict[str, Any]:
    return {"topics": [topic_out(config) for config in broker.topics.all()]}


@router.get(
    "/{topic}",
    response_model=TopicOut,
    response_model_exclude_none=True,
    summary="Describe a topic",
    responses={404: {"model": ErrorEnvelope}, 421: {"model": ErrorEnvelope}},
)
async def get_topic(topic: TopicName, broker: BrokerDep) -> dict[str, Any]:
    return topic_out(await broker.topic(topic))


@router.delete("/{topic}", status_code=204, summary="Delete a topic and its queues on this broker")
async def delete_topic(topic: TopicName, broker: BrokerDep) -> Response:
    await broker.delete_topic(topic)
    return Response(status_code=204)


@router.get("/{topic}/queues", response_model=QueueList, summary="Offsets of every queue of a topic")
async def list_queues(topic: TopicName, broker: BrokerDep) -> dict[str, Any]:
    config = await broker.topic(topic)
    store = broker.store
    queues = []
    for queue_id in range(config.queue_nums):
        queues.append(
            {
                "queue_id": queue_id,
                "min_offset": store.min_offset(topic, queue_id),
                "max_offset": store.max_offset(topic, queue_id),
                "last_store_timestamp": store.last_store_timestamp(topic, queue_id),
            }
        )
    return {"topic": topic, "queues": queues}


@router.get(
    "/{topic}/queues/{queue_id}/offset",
    response_model=SearchOffsetResponse,
    summary="The queue offset of the first message stored at or after a time",
)
async def search_offset(
    topic: TopicName,
    queue_id: QueueId,
    broker: BrokerDep,
    timestamp: Annotated[int, Query(ge=0, description="Milliseconds since the epoch")],
) -> dict[str, Any]:
    await broker.queue_of(topic, queue_id)
    offset = await asyncio.to_thread(broker.store.search_offset, topic, queue_id, timestamp)
    return {"topic": topic, "queue_id": queue_id, "timestamp": timestamp, "offset": offset}
