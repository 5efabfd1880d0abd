"""The FastAPI application factory: one app per store, so tests can start one on a temporary store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from app.settings import Settings
from app.store import MessageStore


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = MessageStore(settings.store_config())
        # Loading and recovery read the disk: keep them off the event loop.
        await asyncio.to_thread(store.open)
        app.state.store = store
        try:
            yield
        finally:
            await asyncio.to_thread(store.close)

    app = FastAPI(
        title="Wharf",
        version="0.1.0",
        description="An HTTP-native, RocketMQ-style message broker.",
        lifespan=lifespan,
    )
    app.state.settings = settings

    @app.get("/healthz", tags=["health"], summary="Liveness: the process answers")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="Readiness: the store is recovered and writable")
    async def readyz() -> JSONResponse:
        store: MessageStore | None = getattr(app.state, "store", None)
        if store is None or not store.is_open:
            return JSONResponse(
                {"error_code": 50301, "message": "the store is not open yet"}, status_code=503
            )
        return JSONResponse({"status": "ready"})

    return app
