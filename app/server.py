"""Running the app under uvicorn: the connection limits, TLS, and a shutdown that answers held pulls first.

Uvicorn waits for in-flight requests before the lifespan shutdown; a long poll may be held for
30 s, so the hold service is told to answer every held pull as soon as shutdown begins.

Open files are shared by the store and the connections, and a flood of connections must never
leave the store without one (a flush or a checkpoint that fails with EMFILE). At start the soft
``RLIMIT_NOFILE`` is raised to the hard limit and split (:func:`descriptor_budget`):

    store files   what the store's segment cache may map (app/store/file_cache.py: at most half)
    reserve       FD_RESERVE: flush and checkpoint opens, config logs, the registry's database,
                  listening sockets, standard streams, log files
    backlog       the listen backlog: connections the kernel queues, all accepted in one go
    connections   the rest: the cap on open connections (WHARF_MAX_CONNECTIONS may lower it)

With 1,024 descriptors: 512 store files, 64 reserved, a backlog of 56 and 392 connections.
"""

from __future__ import annotations

import dataclasses
import logging
import socket

import uvicorn
from fastapi import FastAPI

from app.api.edge_protocol import EdgeLimits, protocol_class
from app.settings import Settings
from app.store.file_cache import max_map_count, raise_nofile_limit, store_file_budget

log = logging.getLogger(__name__)

FD_RESERVE = 64
MAX_BACKLOG = 2048
MIN_BACKLOG = 16
MIN_CONNECTIONS = 16


@dataclasses.dataclass(frozen=True)
class DescriptorBudget:
    nofile: int
    store_files: int
    reserve: int
    backlog: int
    connections: int


def descriptor_budget(nofile: int, map_count: int, max_connections: int = 0) -> DescriptorBudget:
    """Split ``nofile`` descriptors; ``max_connections`` (0: as many as fit) can only lower the cap."""
    store_files = store_file_budget(nofile, map_count)
    for_connections = nofile - store_files - FD_RESERVE
    backlog = max(MIN_BACKLOG, min(MAX_BACKLOG, for_connections // 8))
    connections = max(MIN_CONNECTIONS, for_connections - backlog)
    if max_connections:
        connections = min(connections, max_connections)
    return DescriptorBudget(nofile, store_files, FD_RESERVE, backlog, connections)


class WharfServer(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app = self.config.app
        broker = getattr(getattr(app, "state", None), "broker", None)
        if broker is not None:
            await broker.holds.stop()
        await super().shutdown(sockets)


def server_config(app: FastAPI, settings: Settings, **overrides: object) -> uvicorn.Config:
    """The uvicorn configuration; raises the open-file limit first (see the module docstring)."""
    budget = descriptor_budget(raise_nofile_limit(), max_map_count(), settings.max_connections)
    if settings.max_connections > budget.connections:
        log.warning(
            "WHARF_MAX_CONNECTIONS=%d does not fit %d open files; the cap is %d",
            settings.max_connections,
            budget.nofile,
            budget.connections,
        )
    limits = EdgeLimits(
        max_url_bytes=settings.max_url_bytes,
        max_header_bytes=settings.max_header_bytes,
        header_timeout_s=settings.header_timeout_s,
        max_connections=budget.connections,
    )
    options: dict[str, object] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "timeout_graceful_shutdown": 10,
        "timeout_keep_alive": settings.keep_alive_timeout_s,
        "backlog": budget.backlog,
        "loop": "uvloop",
        "http": protocol_class(limits),
        # The WebSocket library refuses (1009) a frame far over the largest cap before reading it
        # whole; frames just over a cap reach the endpoint, which closes with Wharf's reason.
        "ws_max_size": max(settings.ws_max_frame_bytes, settings.ws_produce_max_frame_bytes) + 64 * 1024,
    }
    if settings.tls_certfile:
        options["ssl_certfile"] = settings.tls_certfile
        options["ssl_keyfile"] = settings.tls_keyfile or None
    options.update(overrides)
    return uvicorn.Config(app, **options)  # type: ignore[arg-type]
