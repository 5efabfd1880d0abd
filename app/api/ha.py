"""Replication: the master's replication WebSocket and the operator's view of it.

``/v1/ha/replicate?offset=N&broker_id=B&url=U``: the slave asks for the CommitLog from offset N;
the master answers with binary frames (8-byte big-endian CommitLog offset, then whole records) and
the slave sends text frames ``{"acked_offset": M}``. ``GET /v1/ha/metadata``: the master's topic
configurations and offsets, which a slave follows (app.broker.ha_metadata).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated, Any

from fastapi import APIRouter, Query, WebSocket
from pydantic import BaseModel, Field

from app.api.topics import BrokerDep
from app.api.ws.going_away import websocket_sessions
from app.api.ws.protocol import GOING_AWAY, WsClose, receive_frame, serve
from app.broker import Broker
from app.broker.errors import InvalidParameterError

router = APIRouter()

ACK_FRAME_BYTES = 4096


class SlaveOut(BaseModel):
    url: str = Field(description="The slave's address, as it gave it")
    broker_id: int
    acked_offset: int = Field(description="CommitLog offset up to which the slave holds the log")
    lag_bytes: int = Field(description="How far the slave is behind this broker's CommitLog")
    in_sync: bool = Field(description="Whether the slave is close enough to count for SYNC_MASTER")


class HaOut(BaseModel):
    role: str = Field(description="ASYNC_MASTER, SYNC_MASTER or SLAVE")
    epoch: int = Field(description="The replication epoch (0 until failover exists)")
    broker_name: str
    broker_id: int
    master_url: str = Field(description="A slave's master; this broker's own address on a master")
    commitlog_max_offset: int
    connected: bool = Field(description="A slave: whether it is connected to its master now")
    slaves: list[SlaveOut] = Field(description="A master: its connected slaves")


@router.get("/v1/admin/ha", response_model=HaOut, summary="Replication: this broker's role and its slaves")
async def ha_status(broker: BrokerDep) -> dict[str, Any]:
    return broker.ha_status()


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
    return await broker.master_metadata(version, wait_ms)


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
