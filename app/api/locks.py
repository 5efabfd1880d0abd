"""Queue locks of ordered members over HTTP: lock (and renew) and unlock. The broker core decides
(app.broker.orderly, app.broker.queue_locks); this module parses and encodes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from app.api.consumers import CLIENT_ID_PATTERN, QueueRef
from app.api.groups import GroupName
from app.api.schemas import ErrorEnvelope
from app.api.topics import BrokerDep
from app.broker import orderly

router = APIRouter(prefix="/v1/groups", tags=["groups"])

MAX_QUEUES = 1000


class LockRequest(BaseModel):
    client_id: str = Field(min_length=1, max_length=128, pattern=CLIENT_ID_PATTERN)
    queues: list[QueueRef] = Field(max_length=MAX_QUEUES, description="The queues to lock or renew")

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"client_id": "worker-1", "queues": [{"topic": "orders", "queue_id": 0}]}]
        },
    )


class UnlockRequest(BaseModel):
    client_id: str = Field(min_length=1, max_length=128, pattern=CLIENT_ID_PATTERN)
    queues: list[QueueRef] | None = Field(
        None, max_length=MAX_QUEUES, description="The queues to unlock; absent: every lock of the client"
    )

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"client_id": "worker-1"}]})


class LockAnswer(BaseModel):
    group: str
    client_id: str
    queues: list[QueueRef] = Field(description="Lock: the queues asked for that the client now holds")
    lock_expiry_ms: int = Field(description="A lock lives this long after its last renewal")


def _answer(broker: BrokerDep, group: str, client_id: str, queues: list[tuple[str, int]]) -> dict[str, Any]:
    return {
        "group": group,
        "client_id": client_id,
        "queues": [{"topic": topic, "queue_id": queue_id} for topic, queue_id in queues],
        "lock_expiry_ms": broker.queue_locks.expiry_ms,
    }


@router.post(
    "/{group}/locks",
    response_model=LockAnswer,
    summary="Lock or renew queues for an ordered member; answers the queues it now holds",
    responses={400: {"model": ErrorEnvelope}, 404: {"model": ErrorEnvelope}},
)
async def lock_queues(group: GroupName, body: LockRequest, broker: BrokerDep) -> dict[str, Any]:
    asked = [(queue.topic, queue.queue_id) for queue in body.queues]
    held = await orderly.lock(broker, group, body.client_id, asked)
    return _answer(broker, group, body.client_id, held)


@router.delete(
    "/{group}/locks",
    response_model=LockAnswer,
    summary="Unlock queues (or every lock) of a client; answers the queues released",
    responses={},
)
async def unlock_queues(group: GroupName, body: UnlockRequest, broker: BrokerDep) -> dict[str, Any]:
    asked = None if body.queues is None else [(queue.topic, queue.queue_id) for queue in body.queues]
    released = await orderly.unlock(broker, group, body.client_id, asked)
    return _answer(broker, group, body.client_id, released)
