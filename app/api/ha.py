"""Replication: the master's replication WebSocket and the operator's view of it.

``/v1/ha/replicate?offset=N&broker_id=B&url=U&epochs=E:S,...``: the slave asks for the CommitLog
from offset N, naming the epochs its log holds (app.store.epochs). The master's first frame is text,
``{"epochs": [[E, S], ...], "truncate_to": T, "start_at": A}``: when T is not null the slave's log
goes past what the two share, and the slave cuts it to T and asks again; when A is past N (retention
deleted the CommitLog before A) the slave drops its log and the stream starts at A. Then the master sends binary frames (8-byte
big-endian CommitLog offset, then whole records) and the slave sends text frames
``{"acked_offset": M}``. ``GET /v1/ha/metadata``: the master's topic
configurations and offsets, which a slave follows (app.broker.ha_metadata).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, WebSocket
from pydantic import BaseModel, Field

from app.api.schemas import ErrorEnvelope
from app.api.topics import BrokerDep
from app.api.ws.going_away import websocket_sessions
from app.api.ws.protocol import GOING_AWAY, WsClose, receive_frame, serve
from app.broker import Broker
from app.broker.errors import InvalidParameterError
from app.broker.ha_slave import decode_epochs

router = APIRouter()

ACK_FRAME_BYTES = 4096


class SlaveOut(BaseModel):
    url: str = Field(description="The slave's address, as it gave it")
    broker_id: int
    acked_offset: int = Field(description="CommitLog offset up to which the slave holds the log")
    lag_bytes: int = Field(description="How far the slave is behind this broker's CommitLog")
    lag_ms: int | None = Field(
        None,
        description="How long ago this master stored the oldest record the slave does not hold (its "
        "store timestamp, at the slave's acknowledged offset, against this master's clock); 0 when the "
        "slave holds everything, null when that record is no longer stored",
    )
    in_sync: bool = Field(description="Whether the slave is close enough to count for SYNC_MASTER")


class HaOut(BaseModel):
    role: str = Field(description="ASYNC_MASTER, SYNC_MASTER or SLAVE")
    epoch: int = Field(description="The replication epoch: raised by each promotion")
    broker_name: str
    broker_id: int
    master_url: str = Field(description="A slave's master; this broker's own address on a master")
    commitlog_max_offset: int
    confirmed_offset: int = Field(description="A master: the CommitLog offset its SEND_OK answers covered")
    connected: bool = Field(description="A slave: whether it is connected to its master now")
    slaves: list[SlaveOut] = Field(description="A master: its connected slaves")
    master_alive: bool = Field(
        False,
        description="A slave: its master holds its lease in the route registry (without a registry: "
        "the slave is connected to it); a promotion without force=true is refused while it does",
    )
    master_lease_left_ms: int | None = Field(
        None,
        description="A slave under a route registry: how long its master's lease still counts as "
        "current on this slave's clock (it must stand still for WHARF_HA_FAILOVER_S)",
    )


@router.get("/v1/admin/ha", response_model=HaOut, summary="Replication: this broker's role and its slaves")
async def ha_status(broker: BrokerDep) -> dict[str, Any]:
    return broker.ha.status()


@router.post(
    "/v1/admin/ha/promote",
    response_model=HaOut,
    summary="Replication: make this slave the master of its broker name, in a new epoch",
    description=(
        "Refused (409, 40941) while the slave's master is alive - its lease in the route registry is "
        "current, or without a registry the slave is connected to it - unless `force=true`; refused "
        "(409, 40940) on a master, or when another broker of the name was promoted first."
    ),
    responses={409: {"model": ErrorEnvelope}},
)
async def ha_promote(
    broker: BrokerDep,
    force: Annotated[
        bool,
        Query(description="Promote even while the master is alive (it is fenced once it sees the new epoch)"),
    ] = False,
) -> dict[str, Any]:
    return await broker.ha.promote(force=force)


class TopicConfigOut(BaseModel):
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    order: bool


class OffsetOut(BaseModel):
    group: str
    topic: str
    queue_id: int
    offset: int


class MetadataOut(BaseModel):
    version: int = Field(description="The master's metadata version: pass it back to wait for a change")
    topics: list[TopicConfigOut] = Field(description="Every topic configuration of the master")
    offsets: list[OffsetOut] = Field(description="Every committed consumer offset of the master")
    delay_offsets: list[int] = Field(
        description="The next offset of each delay level's queue (level 1 first): delivered below it"
    )
    push_subscriptions: list[dict[str, Any]] | None = Field(
        None,
        description="Every push subscription of the master, its signing secret included (a slave "
        "promoted pushes them on)",
    )


@router.get(
    "/v1/ha/metadata",
    response_model=MetadataOut,
    summary="Replication: the master's topics and offsets, held until they change (a slave's long poll)",
)
async def ha_metadata(
    broker: BrokerDep,
    version: Annotated[int, Query(ge=-1, description="The version the slave holds; -1: none")] = -1,
    wait_ms: Annotated[
        int,
        Query(ge=0, le=60_000, description="Longest hold when nothing changed (at most WHARF_MAX_WAIT_MS)"),
    ] = 0,
) -> dict[str, Any]:
    metrics = broker.metrics
    held = int(wait_ms > 0 and broker.metadata.is_current(version))  # waits for the next change
    metrics.ha_metadata_waiting += held
    try:
        return await broker.master_metadata(version, wait_ms)
    finally:
        metrics.ha_metadata_waiting -= held


class OffsetIn(BaseModel):
    group: str = Field(min_length=1, max_length=255)
    topic: str = Field(min_length=1, max_length=255)
    queue_id: int = Field(ge=0)
    offset: int = Field(ge=0)


class OffsetsIn(BaseModel):
    offsets: list[OffsetIn] = Field(description="Offsets committed on a slave, ahead of the master's")


class OffsetsTaken(BaseModel):
    moved: int = Field(description="How many were ahead of this master's and were taken")


@router.post(
    "/v1/ha/offsets",
    response_model=OffsetsTaken,
    summary="Replication: a slave hands over the offsets committed on it (the greater offset wins)",
)
async def ha_offsets(broker: BrokerDep, body: OffsetsIn) -> dict[str, int]:
    return {"moved": await broker.take_slave_offsets([entry.model_dump() for entry in body.offsets])}


def _int_param(websocket: WebSocket, name: str) -> int:
    value = websocket.query_params.get(name, "")
    if not value.isdigit():
        raise InvalidParameterError(f"{name} must be a non-negative integer")
    return int(value)


@router.websocket("/v1/ha/replicate")
async def replicate(websocket: WebSocket) -> None:
    """Stream this master's CommitLog to a slave from the offset it asks for."""

    async def handle(broker: Broker) -> None:
        master = broker.require_master()
        offset = _int_param(websocket, "offset")
        try:
            epochs = decode_epochs(websocket.query_params.get("epochs", ""))
        except ValueError as error:
            raise InvalidParameterError(str(error)) from None
        if epochs and epochs[-1][0] > broker.ha.epoch:
            # The slave knows a later epoch than this broker's: this one is a former master.
            await broker.ha.check_fenced()
            raise broker.ha.slave_refusal("replication")
        first = master.handshake(epochs, offset)
        await websocket.send_text(json.dumps(first))
        if first["truncate_to"] is not None:
            return  # the slave cuts its log and asks again
        offset = first["start_at"]
        link = master.connect(
            _int_param(websocket, "broker_id"), websocket.query_params.get("url", ""), offset
        )

        async def acks() -> None:
            while (received := await receive_frame(websocket, ACK_FRAME_BYTES)) is not None:
                acked = received[0].get("acked_offset")
                if isinstance(acked, int):
                    master.ack(link, acked)

        async def going_away() -> None:
            await websocket_sessions(websocket.app.state).going_away.wait()
            raise WsClose(GOING_AWAY, "the broker is shutting down")

        tasks = [
            asyncio.create_task(master.stream(offset, websocket.send_bytes)),
            asyncio.create_task(acks()),
            asyncio.create_task(going_away()),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            master.disconnect(link)
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        for task in done:
            task.result()  # a failure becomes the close frame

    await serve(websocket, handle)
