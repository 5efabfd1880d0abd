"""Topic endpoints: create (one, a list, or across a cluster), list by pages, describe, delete, queue offsets."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from app.api.errors import ApiError, ErrorCode, from_broker
from app.api.paging import CursorParam, LimitParam, decode_cursor, encode_cursor, parse_limit
from app.api.schemas import (
    ErrorEnvelope,
    QueueList,
    SearchOffsetResponse,
    TopicBulkCreate,
    TopicBulkResponse,
    TopicCreateBody,
    TopicList,
    TopicOut,
    TopicSpec,
    TopicUpdate,
)
from app.broker import Broker, BrokerError, topic_admin
from app.broker.topic_admin import MAX_BULK_TOPICS
from app.routing.topic_config import TopicConfig

router = APIRouter(prefix="/v1/topics", tags=["topics"])

TopicName = Annotated[str, Path(min_length=1, max_length=255, description="Topic name")]
QueueId = Annotated[int, Path(ge=0, le=65535, description="Queue id")]


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


def _wanted(broker: Broker, body: TopicSpec) -> TopicConfig:
    default = broker.settings.default_topic_queue_nums
    read = body.read_queues or body.queues or default
    write = body.write_queues or body.queues or default
    return TopicConfig(body.name, read, write, body.perm, body.order)


async def _create_here(broker: Broker, wanted: TopicConfig) -> tuple[int, dict[str, Any]]:
    created = await topic_admin.create_topic(broker, wanted)
    return (201 if created else 200), topic_out(wanted)


async def _create_many(broker: Broker, body: TopicBulkCreate) -> dict[str, Any]:
    """Create a list of topics: one append to the topic log, one registry write for all new ones."""
    outcomes = await topic_admin.create_topics(broker, [_wanted(broker, item) for item in body.topics])
    results = []
    counts = {201: 0, 200: 0}
    for item, outcome in zip(body.topics, outcomes, strict=True):
        if isinstance(outcome, BrokerError):
            error = from_broker(outcome)
            results.append(
                {
                    "name": item.name,
                    "status": error.code.http_status,
                    "error": {"error_code": int(error.code), "message": error.message},
                }
            )
            continue
        config, created = outcome
        status = 201 if created else 200
        counts[status] += 1
        results.append({"name": item.name, "status": status, "topic": topic_out(config)})
    return {
        "results": results,
        "created": counts[201],
        "existing": counts[200],
        "failed": len(results) - counts[201] - counts[200],
    }


def _placement_out(placement: topic_admin.Placement) -> dict[str, Any]:
    out: dict[str, Any] = {"broker_name": placement.broker_name, "address": placement.address}
    if placement.refused is not None:
        error = from_broker(placement.refused)
        return {**out, "status": error.code.http_status, "error": error.message}
    if placement.created is not None:
        return {**out, "status": 201 if placement.created else 200}
    return {**out, "status": placement.status, "error": placement.error}


@router.post(
    "",
    status_code=201,
    response_model=TopicOut | TopicBulkResponse,
    response_model_exclude_none=True,
    summary="Create a topic here, on every master of a cluster or a list of brokers; or a list of topics here",
    description=(
        "A single create answers the topic (201 created, 200 already there with this configuration). "
        f'A body `{{"topics": [...]}}` (at most {MAX_BULK_TOPICS}, each like a single create without '
        "cluster or brokers) answers 200 with one result per topic, in request order: its status "
        "(201, 200, or an error's) and the topic or the error envelope."
    ),
    responses={
        200: {"model": TopicOut | TopicBulkResponse, "description": "The topic exists; or a bulk answer"},
        404: {"model": ErrorEnvelope},
        409: {"model": ErrorEnvelope},
        413: {"model": ErrorEnvelope, "description": "A bulk create over the cap"},
        422: {"model": ErrorEnvelope},
        503: {"model": ErrorEnvelope},
    },
)
async def create_topic(
    body: TopicCreateBody, broker: BrokerDep, response: Response, request: Request
) -> dict[str, Any]:
    if isinstance(body, TopicBulkCreate):
        response.status_code = 200
        return await _create_many(broker, body)
    wanted = _wanted(broker, body)
    if body.cluster is not None or body.brokers is not None:
        authorization = request.headers.get("authorization")
        placements = await topic_admin.create_across(
            broker,
            wanted,
            body.model_dump(exclude={"cluster", "brokers"}, exclude_none=True),
            body.cluster,
            body.brokers,
            {"authorization": authorization} if authorization else {},
        )
        return {**topic_out(wanted), "brokers": [_placement_out(p) for p in placements]}
    status, out = await _create_here(broker, wanted)
    response.status_code = status
    return out


@router.get(
    "",
    response_model=TopicList,
    response_model_exclude_none=True,
    summary="List this broker's topics, a page at a time, by name",
    responses={400: {"model": ErrorEnvelope}},
)
def list_topics(broker: BrokerDep, limit: LimitParam = None, cursor: CursorParam = None) -> dict[str, Any]:
    size = parse_limit(limit)
    configs, more = broker.topics.page(decode_cursor("topics", cursor), size)
    answer: dict[str, Any] = {"topics": [topic_out(config) for config in configs]}
    if more:
        answer["next_cursor"] = encode_cursor("topics", configs[-1].name)
    return answer


@router.get(
    "/{topic}",
    response_model=TopicOut,
    response_model_exclude_none=True,
    summary="Describe a topic",
    responses={404: {"model": ErrorEnvelope}, 421: {"model": ErrorEnvelope}, 503: {"model": ErrorEnvelope}},
)
async def get_topic(topic: TopicName, broker: BrokerDep) -> dict[str, Any]:
    return topic_out(await broker.topic(topic))


@router.put(
    "/{topic}",
    response_model=TopicOut,
    response_model_exclude_none=True,
    summary="Change a topic's queue numbers, permission or order flag on this broker",
    description=(
        "Fields as a create names them; one left out keeps its value. More queues are added empty. "
        "Fewer write queues stop writes to the dropped queues, whose messages stay readable while the "
        "read queues cover them: read queues may not be fewer than write queues (400). A permission "
        "takes effect at once (a produce to a read-only topic answers 409 40902). The route registry "
        "and the slaves follow. A group's %RETRY% and %DLQ% topics and the broker's internal topics "
        "are refused (400 40005)."
    ),
    responses={
        400: {"model": ErrorEnvelope},
        404: {"model": ErrorEnvelope},
        421: {"model": ErrorEnvelope},
        422: {"model": ErrorEnvelope},
        503: {"model": ErrorEnvelope},
    },
)
async def update_topic(topic: TopicName, body: TopicUpdate, broker: BrokerDep) -> dict[str, Any]:
    if body.queues is not None and (body.read_queues is not None or body.write_queues is not None):
        raise ApiError(ErrorCode.INVALID_PARAMETER, "give queues, or read_queues and write_queues, not both")
    change = topic_admin.TopicChange(
        body.read_queues or body.queues, body.write_queues or body.queues, body.perm, body.order
    )
    return topic_out(await topic_admin.update_topic(broker, topic, change))


@router.delete(
    "/{topic}",
    status_code=204,
    summary="Delete a topic and its queues on this broker",
    responses={404: {"model": ErrorEnvelope}, 503: {"model": ErrorEnvelope}},
)
async def delete_topic(topic: TopicName, broker: BrokerDep) -> Response:
    await broker.delete_topic(topic)
    return Response(status_code=204)


@router.get(
    "/{topic}/queues",
    response_model=QueueList,
    summary="Offsets of every queue of a topic, and the rate messages are stored at in each",
)
async def list_queues(topic: TopicName, broker: BrokerDep) -> dict[str, Any]:
    config = await broker.topic(topic)
    store = broker.store
    ends = [store.max_offset(topic, queue_id) for queue_id in range(config.queue_nums)]
    rates, window_s = broker.queue_rates.sample(topic, ends)
    queues = []
    for queue_id in range(config.queue_nums):
        queues.append(
            {
                "queue_id": queue_id,
                "min_offset": store.min_offset(topic, queue_id),
                "max_offset": ends[queue_id],
                "last_store_timestamp": store.last_store_timestamp(topic, queue_id),
                "produce_rate_per_s": rates[queue_id],
            }
        )
    return {"topic": topic, "queues": queues, "rate_window_s": window_s}


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
