"""Route endpoints served by every broker: a topic's route and the clusters' brokers (SPEC 2)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from app.api.errors import ApiError, ErrorCode
from app.api.schemas import ClusterList, ErrorEnvelope, TopicRoute
from app.api.topics import BrokerDep
from app.routing.service import RoutingService

router = APIRouter(prefix="/v1", tags=["routing"])


def _routing(broker: BrokerDep) -> RoutingService:
    if broker.routing is None:
        raise ApiError(ErrorCode.NOT_READY, "this broker has no route registry")
    return broker.routing


@router.get(
    "/topics/{topic}/route",
    response_model=TopicRoute,
    summary="A topic's route: queue data per broker and the brokers' addresses",
    responses={404: {"model": ErrorEnvelope}, 503: {"model": ErrorEnvelope}},
)
async def topic_route(
    topic: Annotated[str, Path(min_length=1, max_length=255)], broker: BrokerDep
) -> dict[str, Any]:
    routing = _routing(broker)
    route = await routing.topic_route(topic)
    if route is None:
        raise ApiError(ErrorCode.TOPIC_NOT_FOUND, f"no broker serves topic {topic!r}")
    return route


@router.get(
    "/clusters",
    response_model=ClusterList,
    summary="Clusters, their brokers and liveness",
    responses={503: {"model": ErrorEnvelope}},
)
async def clusters(broker: BrokerDep) -> dict[str, Any]:
    routing = _routing(broker)
    found = await routing.clusters()
    return {"clusters": found}
