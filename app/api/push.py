"""Push subscriptions: ``PUT``, ``GET`` and ``DELETE /v1/groups/{group}/push``, and
``GET /v1/push`` listing them (:mod:`app.push`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from app.api.errors import ApiError, ErrorCode
from app.api.groups import GroupName
from app.api.schemas import ErrorEnvelope
from app.push.service import PushService

router = APIRouter(tags=["push"])


def get_push(request: Request) -> PushService:
    push: PushService | None = getattr(request.app.state, "push", None)
    if push is None:
        raise ApiError(ErrorCode.NOT_READY, "the broker is starting")
    return push


PushDep = Annotated[PushService, Depends(get_push)]


class PushFilterBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tags: str | None = Field(None, max_length=4096, description="Tags, RocketMQ's `a || b`")
    sql92: str | None = Field(None, max_length=4096, description="A SQL92 expression over the properties")


class PushSubscriptionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: str = Field(
        min_length=1, max_length=255, description="The topic to push (its queues on this broker)"
    )
    url: str = Field(min_length=1, max_length=2048, description="The endpoint: http:// or https://")
    filter: PushFilterBody | None = Field(None, description='{"tags": ...} or {"sql92": ...}; none: all')
    ordered: bool = Field(False, description="One request in flight per queue, in queue order")
    max_in_flight: int = Field(16, ge=1, le=1024, description="Requests in flight at once")
    batch: int = Field(1, ge=1, le=1000, description="Messages per request; above 1 a JSON array")
    timeout_ms: int = Field(10_000, ge=100, le=300_000, description="A request unanswered this long failed")
    max_reconsume_times: int = Field(
        16, ge=0, le=1000, description="Deliveries again before a message goes to %DLQ%<group>"
    )
    secret: str | None = Field(
        None,
        max_length=200,
        description="whsec_ and base64 of 24 to 64 bytes; left out, the kept one (made for a new subscription)",
    )
    paused: bool = Field(False, description="A paused subscription reads and delivers nothing")
    format: Literal["raw", "cloudevents"] = Field(
        "raw",
        description="raw: the body as produced with Wharf's headers; cloudevents: a CloudEvent in the HTTP "
        "binding's binary mode (ce-* headers), a batch in its batched mode",
    )


class PushError(BaseModel):
    at_ms: int
    message: str


class PushState(BaseModel):
    running: bool
    lag: int | None = None
    held_messages: int | None = Field(None, description="Messages read and not yet acknowledged or sent back")
    in_flight: int | None = None
    delivered: int | None = None
    failed: int | None = None
    failed_by_kind: dict[str, int] | None = None
    retried: int | None = None
    dead_lettered: int | None = None
    consecutive_failures: int | None = None
    last_error: PushError | None = None
    last_success_ms: int | None = None


class PushSubscriptionView(BaseModel):
    group: str
    topic: str
    url: str
    filter: dict[Literal["tags", "sql92"], str] | None
    ordered: bool
    max_in_flight: int
    batch: int
    timeout_ms: int
    max_reconsume_times: int
    paused: bool
    format: Literal["raw", "cloudevents"]
    secret: str | None = Field(None, description="Only in the answer that made it: shown once")
    state: PushState | None = None


class PushSubscriptionList(BaseModel):
    subscriptions: list[PushSubscriptionView]


def _body(request: PushSubscriptionRequest) -> dict[str, Any]:
    fields = request.model_dump(exclude_unset=True)
    if request.filter is not None:
        fields["filter"] = request.filter.model_dump(exclude_none=True) or None
    return fields


@router.put(
    "/v1/groups/{group}/push",
    response_model=PushSubscriptionView,
    response_model_exclude_none=True,
    status_code=200,
    summary="Create or change the group's push subscription (201 when created, with its secret once)",
    responses={201: {"model": PushSubscriptionView}, 400: {"model": ErrorEnvelope}},
)
async def put_push(
    group: GroupName, body: PushSubscriptionRequest, push: PushDep, response: Response
) -> dict[str, Any]:
    subscription, created, made_secret = await push.put(group, _body(body))
    if created:
        response.status_code = 201
    return subscription.as_json(with_secret=made_secret)


@router.get(
    "/v1/groups/{group}/push",
    response_model=PushSubscriptionView,
    response_model_exclude_none=True,
    summary="The group's push subscription and its state (lag, in flight, counts, last error)",
)
def get_push_subscription(group: GroupName, push: PushDep) -> dict[str, Any]:
    found = push.describe(group)
    if found is None:
        raise ApiError(ErrorCode.GROUP_NOT_FOUND, f"group {group!r} has no push subscription")
    return found


@router.delete(
    "/v1/groups/{group}/push",
    status_code=204,
    summary="Stop and remove the group's push subscription (its committed offsets stay)",
)
async def delete_push(group: GroupName, push: PushDep) -> Response:
    if not await push.delete(group):
        raise ApiError(ErrorCode.GROUP_NOT_FOUND, f"group {group!r} has no push subscription")
    return Response(status_code=204)


@router.get(
    "/v1/push",
    response_model=PushSubscriptionList,
    response_model_exclude_none=True,
    summary="The broker's push subscriptions, by group, with their state",
)
def list_push(push: PushDep) -> dict[str, Any]:
    return {"subscriptions": push.list()}
