"""The FastAPI application factory: one app per store, so tests can start one on a temporary store."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import JSONResponse, RedirectResponse

from app.api import (
    admin,
    cluster,
    console_view,
    consumers,
    dead_letters,
    events,
    groups,
    ha,
    inspection,
    locks,
    lookup,
    messages,
    operator,
    pop,
    push,
    topics,
    transactions,
)
from app.api.acl import install_acl
from app.api.docs import install_docs
from app.api.edge import install_edge
from app.api.errors import ApiError, ErrorCode, error_response, install_error_handlers
from app.api.fast_lane import FastLane, WharfApi
from app.api.metrics import install_metrics
from app.api.openapi import install_openapi
from app.api.schemas import BrokerStats, HealthStatus, ReadyStatus
from app.api.ws import router as ws_router
from app.api.ws.going_away import WebSocketSessions
from app.broker import Broker
from app.broker.ha_master import AppendSignal
from app.console import install_console
from app.longpoll.hold import PullHoldService
from app.outbound import HttpOutbound, HttpPushTransport
from app.push.service import PushService
from app.routing.registry import BrokerIdentity, RouteRegistry
from app.routing.schema import ensure_schema, make_engine
from app.routing.service import RoutingService
from app.routing.topic_config import TopicConfigManager
from app.settings import Settings
from app.store import MessageStore
from app.store.queue_table import QueueTable

log = logging.getLogger(__name__)

DESCRIPTION = """An HTTP-native, RocketMQ-style message broker.

Every error is answered in one envelope, `{"error_code": 40402, "message": "..."}`, whose HTTP
status is `error_code // 100`. The codes are listed in the `ErrorCode` schema.
"""


# A request makes many short-lived objects; a larger first generation lets them die young instead of
# triggering collections that walk everything start-up made.
GC_THRESHOLDS = (20_000, 20, 20)


def settle_garbage_collector() -> None:
    """Move what start-up made out of the collector's sight and raise its thresholds."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store_config = settings.store_config()
        queues = QueueTable(store_config)
        holds = PullHoldService(queues.max_offset, settings.hold_check_interval_ms / 1000)
        # Wakes the replication streams when the CommitLog grows.
        ha_signal = AppendSignal()
        ha_signal.bind(asyncio.get_running_loop())
        store = MessageStore(
            store_config,
            [holds.notify_arrival, ha_signal.notify],
            queues=queues,
            on_flush=metrics.observe_flush,
        )
        # Loading and recovery read the disk: keep them off the event loop.
        await asyncio.to_thread(store.open)
        config_dir = settings.store_config().config_dir
        topic_configs = await asyncio.to_thread(
            TopicConfigManager, config_dir / "topics.log", config_dir / "topics.json"
        )
        engine = make_engine(settings.resolved_database_url, settings.database_timeout_s)
        try:
            await asyncio.to_thread(ensure_schema, engine, settings.database_auto_upgrade)
            routing = RoutingService(
                RouteRegistry(engine),
                BrokerIdentity(
                    settings.cluster_name,
                    settings.broker_name,
                    settings.broker_id,
                    settings.resolved_advertised_url,
                ),
                topic_configs.all,
                settings.heartbeat_interval_s,
                settings.broker_expiry_s,
                settings.expiry_scan_interval_s,
                settings.database_timeout_s,
            )
            await routing.start()
        except BaseException:
            topic_configs.close()
            await asyncio.to_thread(store.close)
            engine.dispose()
            raise
        await holds.start()
        broker = Broker(
            settings, store, topic_configs, holds, routing, metrics, ha_signal, outbound=HttpOutbound()
        )
        try:
            # Before anything reads the log's tail: a commit a crash tore is cut off it.
            await broker.transactions.recover()
            # Before the first request: a retry after the restart must find its first message.
            restored = await asyncio.to_thread(broker.restore_idempotency)
            log.info("idempotency window: %d unique ids restored from the CommitLog", restored)
            app.state.ws_sessions = WebSocketSessions()
            # Made before replication starts: a slave copies its master's subscriptions into it.
            app.state.push = pushes = PushService(broker, HttpPushTransport())
            # A master starts delivering delayed messages (what fell due while the broker was down
            # goes out first); a slave writes only what its master sends.
            await broker.ha.start()
            # A slave's pushers wait: they start reading if it is promoted.
            await pushes.start()
            app.state.broker = broker
            settle_garbage_collector()
            yield
        finally:
            pushes, app.state.push = app.state.push, None
            if pushes is not None:
                await pushes.stop()
            await broker.ha.stop()
            await asyncio.to_thread(broker.delays.stop)
            await holds.stop()
            app.state.broker = None
            try:
                # The store first: what was acknowledged is safe before the registry is waited on.
                await asyncio.to_thread(store.close)
                log.info("shutdown: store closed (flushed, consumer offsets and checkpoint written)")
            finally:
                await routing.stop()
                engine.dispose()
                topic_configs.close()

    app = WharfApi(
        title="Wharf",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        # Served from the package by install_docs, not from a CDN.
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.broker = None
    app.state.push = None
    install_error_handlers(app)
    # Middlewares: the last added runs first. The HTTP histogram, CORS, then the edge's limits and
    # Origin check, then the ACL, so that every refusal carries CORS headers and is timed, and the
    # ACL sees only bounded bodies.
    install_acl(app, settings)
    install_edge(app, settings)
    metrics = install_metrics(app)
    if settings.fast_lane:
        cors = bool(settings.cors_origin_list)
        app.fast_lane = FastLane(app, app.state.http_durations, settings.max_request_bytes, cors)
    install_openapi(app)
    install_docs(app)
    app.router.routes.append(messages.PRODUCE_ROUTE)
    app.router.routes.extend(transactions.END_ROUTES)
    app.include_router(messages.router)
    app.include_router(events.router)
    app.include_router(topics.router)
    app.include_router(lookup.router)
    app.include_router(cluster.router)
    app.include_router(groups.router)
    app.include_router(consumers.router)
    app.include_router(dead_letters.router)
    app.include_router(locks.router)
    app.include_router(pop.router)
    app.include_router(transactions.router)
    app.include_router(push.router)
    app.include_router(admin.router)
    app.include_router(operator.router)
    app.include_router(inspection.router)
    app.include_router(ha.router)
    app.include_router(ws_router)
    app.include_router(console_view.router)
    install_console(app)

    @app.get("/", include_in_schema=False)
    async def front_door() -> RedirectResponse:
        return RedirectResponse("/console/")

    @app.get(
        "/healthz", response_model=HealthStatus, tags=["health"], summary="Liveness: the process answers"
    )
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["health"],
        summary="Readiness: the store is recovered and writable, and the route registry answers",
        response_model=ReadyStatus,
    )
    async def readyz() -> JSONResponse:
        broker: Broker | None = app.state.broker
        if broker is None or not broker.store.is_open:
            return error_response(ErrorCode.NOT_READY, "the store is not open")  # type: ignore[return-value]
        routing = broker.routing
        if routing is not None and not await routing.available():
            return error_response(  # type: ignore[return-value]
                ErrorCode.REGISTRY_UNAVAILABLE,
                f"the route registry cannot be reached ({routing.last_error}); "
                "produce and pull on this broker's topics go on",
            )
        return JSONResponse({"status": "ready"})

    @app.get(
        "/v1/stats",
        response_model=BrokerStats,
        tags=["health"],
        summary="Broker counters: held pulls, topics, CommitLog offsets",
    )
    async def stats() -> dict[str, int]:
        broker: Broker | None = app.state.broker
        if broker is None:
            raise ApiError(ErrorCode.NOT_READY, "the broker is starting")
        store = broker.store
        return {
            "held_pulls": broker.holds.held_count,
            "topics": len(broker.topics),
            "commitlog_min_offset": store.commitlog.min_offset,
            "commitlog_max_offset": store.commitlog.max_offset,
        }

    return app
