"""Operator endpoints."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app.api.schemas import CleanReportOut
from app.api.topics import BrokerDep

router = APIRouter(prefix="/v1/admin", tags=["admin"])


class DiskUsageOut(BaseModel):
    used_percent: float = Field(description="Share of the store's partition in use, read now (statvfs)")
    free_bytes: int | None = Field(description="Bytes of the partition the broker may still write")
    writable: bool = Field(description="Whether the disk guard accepts writes")
    refuse_writes_percent: float = Field(description="Writes are refused above this use")
    accept_writes_percent: float = Field(description="Refused writes are accepted again at or under this use")


@router.post(
    "/clean",
    response_model=CleanReportOut,
    summary="Run a retention pass now: expired segments go even outside deleteWhen",
)
async def clean(broker: BrokerDep) -> dict[str, Any]:
    report = await asyncio.to_thread(broker.store.trigger_clean)
    return dataclasses.asdict(report)


@router.get(
    "/disk",
    response_model=DiskUsageOut,
    summary="The store's disk: how full it is and whether the broker accepts writes",
)
async def disk_usage(broker: BrokerDep) -> dict[str, Any]:
    guard = broker.store.disk_guard
    # A fresh reading, as an append would take one: the guard's state follows it.
    used = await asyncio.to_thread(guard.refresh)
    free = await asyncio.to_thread(guard.free_bytes) if guard.free_bytes is not None else None
    return {
        "used_percent": used,
        "free_bytes": free,
        "writable": guard.writable,
        "refuse_writes_percent": guard.refuse_ratio,
        "accept_writes_percent": guard.accept_ratio,
    }
