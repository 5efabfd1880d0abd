"""WebSocket endpoints under ``/v1/ws``: subscribe (push within credit) and pipelined produce."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.ws import produce, subscribe

router = APIRouter(prefix="/v1/ws")
router.include_router(subscribe.router)
router.include_router(produce.router)

__all__ = ["router"]
