"""Transactions over HTTP: a batch transaction's begin, commit, rollback, the pending list and
producer groups' check endpoints. The broker core decides (app.broker.transactions); this module
parses, encodes, and opens and closes the transaction service with the app. A begin of one
transaction per message is a produce (app.api.messages); a batch transaction - one transaction for a
whole binary batch - begins at ``POST /v1/topics/{topic}/transactions``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, FastAPI, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.routing import Route

from app.api.edge import media_type_of
from app.api.errors import ApiError, ErrorCode, from_broker
from app.api.peers import client_born_host
from app.api.schemas import ErrorEnvelope
from app.api.topics import BrokerDep, TopicName, get_broker
from app.broker.errors import BrokerError
from app.broker.transaction_batch import MAX_TRANSACTION_KEY
from app.broker.transactions import MAX_END_BATCH, MAX_PENDING_LIST
from app.codec import BATCH_MEDIA_TYPE


@asynccontextmanager
async def transactions_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Runs inside the app's lifespan: the open transactions are rebuilt before the first request,
    and the checkpoint written before the store closes."""
    transactions = app.state.broker.transactions
    await transactions.open()
    try:
        yield
    finally:
        await transactions.close()


router = APIRouter(prefix="/v1", tags=["transactions"], lifespan=transactions_lifespan)

TransactionId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        description="The transaction id a begin answered (the half message's id)",
        json_schema_extra={"pattern": "^[0-9A-Fa-f]{32}$"},
    ),
]
ProducerGroup = Annotated[
    str, Path(min_length=1, max_length=255, pattern=r"^[a-zA-Z0-9_-]+$", description="Producer group")
]

_ERRORS: dict[int | str, dict[str, Any]] = {404: {"model": ErrorEnvelope}, 409: {"model": ErrorEnvelope}}


class BatchTransaction(BaseModel):
    """A batch transaction: begun now, or found by its transaction key (``repeated``)."""

    transaction_id: str
    state: Literal["OPEN", "COMMITTED", "ROLLED_BACK", "UNKNOWN"] = Field(
        description="OPEN for a new one; a repeated key's transaction as it stands (UNKNOWN: its end "
        "is no longer stored)"
    )
    topic: str
    messages: int = Field(description="How many messages the transaction holds")
    transaction_key: str | None
    repeated: bool = Field(description="True when the key named an earlier transaction: nothing was stored")
    status: Literal["SEND_OK", "FLUSH_DISK_TIMEOUT"]


class TransactionEnd(BaseModel):
    transaction_id: str
    state: Literal["COMMITTED", "ROLLED_BACK"]
    status: Literal["SEND_OK", "FLUSH_DISK_TIMEOUT"] = Field(
        description="Whether the end's records are as durable as the flush mode promises"
    )
    msg_id: str | None = Field(None, description="A commit: the id of the message made visible")
    unique_id: str | None = None
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    messages: int | None = Field(None, description="A batch transaction's commit: the messages made visible")
    transaction_key: str | None = None


class TransactionIds(BaseModel):
    transaction_ids: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        min_length=1,
        max_length=MAX_END_BATCH,
        description=f"The transactions to end, each once: 1 to {MAX_END_BATCH} ids a begin answered",
    )
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"transaction_ids": ["7F00000100001F900000000000000000", "7F00000100001F9000000000000000D1"]}
            ]
        },
    )

    @field_validator("transaction_ids")
    @classmethod
    def _each_once(cls, ids: list[str]) -> list[str]:
        if len(set(ids)) != len(ids):
            raise ValueError("each transaction id once")
        return ids


class TransactionEndResult(BaseModel):
    """One transaction of a batch: ended (``state`` and the rest as a single commit or rollback
    answers), or refused alone (``error_code`` and ``message``, as the single call's error envelope)."""

    transaction_id: str
    state: Literal["COMMITTED", "ROLLED_BACK"] | None = None
    status: Literal["SEND_OK", "FLUSH_DISK_TIMEOUT"] | None = None
    msg_id: str | None = None
    unique_id: str | None = None
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    messages: int | None = None
    transaction_key: str | None = None
    error_code: int | None = Field(
        None, description="Why this one was not ended: 40408 no such transaction, 40904 it ended already, ..."
    )
    message: str | None = None


class TransactionEnds(BaseModel):
    results: list[TransactionEndResult] = Field(description="One per id, in the order of the request")


class OpenTransactionOut(BaseModel):
    transaction_id: str
    producer_group: str
    topic: str
    queue_id: int
    unique_id: str
    tags: str
    keys: list[str]
    properties: dict[str, str]
    body: str
    encoding: Literal["utf8", "base64"]
    born_timestamp: int
    check_times: int = Field(description="How often the broker asked about it")
    messages: int = Field(
        1,
        description="How many messages it holds: more than one for a batch transaction, whose body is the batch",
    )


class PendingTransactions(BaseModel):
    producer_group: str
    transactions: list[OpenTransactionOut]


class ProducerRegistration(BaseModel):
    check_url: str | None = Field(
        max_length=2048,
        description="http(s) URL the broker POSTs an open transaction to; null removes it (then poll)",
    )
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"check_url": "http://10.0.0.5:9000/check"}]}
    )


class ProducerOut(BaseModel):
    producer_group: str
    check_url: str | None
    open_transactions: int


def _json(answer: dict[str, Any]) -> Response:
    return Response(orjson.dumps(answer), media_type="application/json")


# The binary batch, under its own media type or as plain bytes (what generic clients can send).
BATCH_BODY_TYPES = (BATCH_MEDIA_TYPE, "application/octet-stream")
_BATCH_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            media_type: {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "description": "Wharf's binary batch, as a produce takes it; no message may be delayed",
                }
            }
            for media_type in BATCH_BODY_TYPES
        },
    }
}


@router.post(
    "/topics/{topic}/transactions",
    response_model=BatchTransaction,
    summary="Begin one transaction for a whole binary batch: none of its messages is visible before "
    "the commit, all of them after it",
    responses={
        400: {"model": ErrorEnvelope},
        404: {"model": ErrorEnvelope},
        409: {"model": ErrorEnvelope},
        413: {"model": ErrorEnvelope},
        415: {"model": ErrorEnvelope},
    },
    openapi_extra=_BATCH_BODY,
)
async def begin_batch_transaction(
    topic: TopicName,
    request: Request,
    broker: BrokerDep,
    producer_group: Annotated[
        str, Query(min_length=1, max_length=255, description="The producer group the transaction belongs to")
    ],
    transaction_key: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_TRANSACTION_KEY,
            description="Names the transaction: a begin repeating a key of this topic and producer "
            "group stores nothing and answers the earlier transaction and its state",
        ),
    ] = None,
) -> Response:
    content_type = request.headers.get("content-type")
    media_type = media_type_of(content_type)[0] if content_type else None
    if media_type not in BATCH_BODY_TYPES:
        raise ApiError(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            f"a batch transaction takes a binary batch: Content-Type {' or '.join(BATCH_BODY_TYPES)}, "
            f"not {media_type!r}",
        )
    raw = await request.body()
    answer = await broker.transactions.begin_batch(
        topic, raw, producer_group, transaction_key, client_born_host(request.scope)
    )
    return _json(answer)


@router.post(
    "/transactions/{transaction_id}/commit",
    response_model=TransactionEnd,
    summary="Commit a transaction: its half message becomes visible in its topic",
    responses=_ERRORS,
)
async def commit_transaction(transaction_id: TransactionId, broker: BrokerDep) -> Response:
    # Encoded here, not through the response model: a commit is as hot as a produce.
    return _json(await broker.transactions.commit(transaction_id))


@router.post(
    "/transactions/{transaction_id}/rollback",
    response_model=TransactionEnd,
    summary="Roll a transaction back: its half message is dropped",
    responses=_ERRORS,
)
async def rollback_transaction(transaction_id: TransactionId, broker: BrokerDep) -> Response:
    return _json(await broker.transactions.rollback(transaction_id))


def _ends(transaction_ids: list[str], answers: list[dict[str, Any] | BrokerError]) -> Response:
    results = []
    for transaction_id, answer in zip(transaction_ids, answers, strict=True):
        if isinstance(answer, BrokerError):
            refusal = from_broker(answer)
            answer = {
                "transaction_id": transaction_id,
                "error_code": int(refusal.code),
                "message": refusal.message,
            }
            if refusal.extra:
                answer.update(refusal.extra)
        results.append(answer)
    return _json({"results": results})


@router.post(
    "/transactions/commit",
    response_model=TransactionEnds,
    summary="Commit several transactions in one append: each half message becomes visible in its topic",
)
async def commit_transactions(body: TransactionIds, broker: BrokerDep) -> Response:
    return _ends(body.transaction_ids, await broker.transactions.commit_many(body.transaction_ids))


@router.post(
    "/transactions/rollback",
    response_model=TransactionEnds,
    summary="Roll several transactions back in one append: their half messages are dropped",
)
async def rollback_transactions(body: TransactionIds, broker: BrokerDep) -> Response:
    return _ends(body.transaction_ids, await broker.transactions.rollback_many(body.transaction_ids))


@router.get(
    "/transactions/pending",
    response_model=PendingTransactions,
    summary="A producer group's transactions still open after their first check (or all of its open "
    "ones), oldest first",
)
async def list_pending_transactions(
    broker: BrokerDep,
    producer_group: Annotated[str, Query(min_length=1, max_length=255, description="Producer group")],
    limit: Annotated[int, Query(description=f"At most this many (1 to {MAX_PENDING_LIST})")] = 100,
    checked: Annotated[
        bool,
        Query(
            description="true: only those checked at least once; false: every open transaction of the group"
        ),
    ] = True,
) -> dict[str, Any]:
    found = broker.transactions.pending(producer_group, limit, checked)
    return {"producer_group": producer_group, "transactions": found}


@router.put(
    "/producers/{producer_group}",
    response_model=ProducerOut,
    summary="Register (or remove) a producer group's check endpoint",
)
async def register_producer(
    producer_group: ProducerGroup, body: ProducerRegistration, broker: BrokerDep
) -> dict[str, Any]:
    return await broker.transactions.register(producer_group, body.check_url)


@router.get(
    "/producers/{producer_group}",
    response_model=ProducerOut,
    summary="A producer group's check endpoint and how many of its transactions are open",
)
async def get_producer(producer_group: ProducerGroup, broker: BrokerDep) -> dict[str, Any]:
    return broker.transactions.producer(producer_group)


async def _commit_route(request: Request) -> Response:
    broker = await get_broker(request)
    return _json(await broker.transactions.commit(request.path_params["transaction_id"]))


async def _rollback_route(request: Request) -> Response:
    broker = await get_broker(request)
    return _json(await broker.transactions.rollback(request.path_params["transaction_id"]))


# As produce (app.api.messages.PRODUCE_ROUTE): plain Starlette routes placed ahead of FastAPI's
# routing, which costs more per request than the commit itself; the FastAPI routes above describe
# them in the OpenAPI document.
END_ROUTES = (
    Route("/v1/transactions/{transaction_id}/commit", _commit_route, methods=["POST"]),
    Route("/v1/transactions/{transaction_id}/rollback", _rollback_route, methods=["POST"]),
)
