"""Operator endpoints."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from fastapi import APIRouter

from app.api.schemas import CleanReportOut
from app.api.topics import BrokerDep

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.post(
    "/clean",
    response_model=CleanReportOut,
    summary="Run a retention pass now: expired segments go even outside deleteWhen",
)
async def clean(broker: BrokerDep) -> dict[str, Any]:
    report = await asyncio.to_thread(broker.store.trigger_clean)
    return dataclasses.asdict(report)
