"""Topic endpoints: create, list, describe, delete, queue offsets, offset by timestamp."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from app.api.broker import Broker
from app.api.errors import ApiError, ErrorCode
from app.api.schemas import QueueList, SearchOffsetResponse, TopicCreate, TopicList, TopicOut
from app.routing.topic_config import TopicConfig

router = APIRouter(prefix="/v1/topics", tags=["topics"])

TopicName = Annotated[str, Path(min_length=1, max_length=255, description="Topic name")]
QueueId = Annotated[int, Path(ge=0, le=65535, description="Queue id")]


def get_broker(request: Request) -> Broker:
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


@router.post(
    "",
    status_code=201,
    response_model=TopicOut,
    summary="Create a topic (or confirm one with the same configuration)",
    responses={200: {"model": TopicOut, "description": "The topic exists with this configuration"}},
)
def create_topic(body: TopicCreate, broker: BrokerDep, response: Response) -> dict[str, Any]:
    default = broker.settings.default_topic_queue_nums
    read = body.read_queues or body.queues or default
    write = body.write_queues or body.queues or default
    wanted = TopicConfig(body.name, read, write, body.perm, body.order)
    existing = broker.topics.get(body.name)
    if existing is not None:
        if existing != wanted:
            raise ApiError(
                ErrorCode.TOPIC_EXISTS,
                f"topic {body.name!r} exists with another configuration: {topic_out(existing)}",
            )
        response.status_code = 200
        return topic_out(existing)
    return topic_out(broker.topics.put(wanted))


@router.get("", response_model=TopicList, summary="List topics")
def list_topics(broker: BrokerDep) -> dict[str, Any]:
    return {"topics": [topic_out(config) for config in broker.topics.all()]}


@router.get("/{topic}", response_model=TopicOut, summary="Describe a topic")
def get_topic(topic: TopicName, broker: BrokerDep) -> dict[str, Any]:
    return topic_out(broker.topic(topic))


@router.delete("/{topic}", status_code=204, summary="Delete a topic and its queues")
def delete_topic(topic: TopicName, broker: BrokerDep) -> Response:
    broker.topic(topic)
    broker.topics.delete(topic)
    broker.store.delete_topic(topic)
    return Response(status_code=204)


@router.get("/{topic}/queues", response_model=QueueList, summary="Offsets of every queue of a topic")
def list_queues(topic: TopicName, broker: BrokerDep) -> dict[str, Any]:
    config = broker.topic(topic)
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
def search_offset(
    topic: TopicName,
    queue_id: QueueId,
    broker: BrokerDep,
    timestamp: Annotated[int, Query(ge=0, description="Milliseconds since the epoch")],
) -> dict[str, Any]:
    broker.queue_of(topic, queue_id)
    return {
        "topic": topic,
        "queue_id": queue_id,
        "timestamp": timestamp,
        "offset": broker.store.search_offset(topic, queue_id, timestamp),
    }
