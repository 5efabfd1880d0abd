"""Running the app under uvicorn: the connection limits, TLS, logging, and a bounded graceful shutdown.

On SIGTERM or SIGINT the broker stops within ``WHARF_SHUTDOWN_TIMEOUT_S`` (:class:`WharfServer`):

1. the listening sockets close: no new connection is accepted;
2. every held pull is answered at once (200, no messages, its next offset unchanged), and so is a
   pull that comes later on a connection still open;
3. every WebSocket ends with 1001: a subscriber at once, a producer once the frames it took in are
   stored and answered (app/api/ws/going_away.py);
4. uvicorn waits for the requests in flight (produces finish and are answered), then closes the
   connections, within what is left of the timeout minus the share kept for closing;
5. the lifespan closes (app/api/app.py): the store drains its flush services, persists the
   consumer offsets, writes the checkpoint and removes the abort file; then the broker leaves the
   route registry.

A second SIGINT skips the waiting. When the timeout passes first (a disk that stopped answering
holds the store's close) the process exits at once with status 1, leaving the abort file: the next
start recovers as after a crash, which is what such a stop is. A graceful stop exits with status 0.

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

import asyncio
import dataclasses
import logging
import os
import signal
import socket
import threading
import time
from types import FrameType

import uvicorn
from fastapi import FastAPI

from app.api.edge_protocol import EdgeLimits, protocol_class
from app.api.ws.going_away import websocket_sessions
from app.logs import log_config
from app.settings import Settings
from app.store.file_cache import max_map_count, raise_nofile_limit, store_file_budget

log = logging.getLogger(__name__)

FD_RESERVE = 64
MAX_BACKLOG = 2048
MIN_BACKLOG = 16
MIN_CONNECTIONS = 16

# Of the shutdown timeout, the share kept for the lifespan's closing (store, registry) after the
# connections' drain.
CLOSING_SHARE = 0.25
EXIT_FORCED = 1
HANDSHAKE_POLL_S = 0.02  # how often the shutdown looks whether the WebSocket close handshakes are done
DEFAULT_SHUTDOWN_TIMEOUT_S: float = Settings.model_fields["shutdown_timeout_s"].default


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
    """uvicorn's server with Wharf's shutdown (see the module docstring); ``config``'s
    ``timeout_graceful_shutdown`` is the whole shutdown's budget, ``WHARF_SHUTDOWN_TIMEOUT_S``."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.stop_reason = "asked to stop"

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # uvicorn's, except that the signal is not raised again once the server stopped: a graceful
        # stop exits with status 0. (Logging waits for shutdown(): this runs inside a signal handler.)
        if not self.should_exit:
            self.stop_reason = f"{signal.Signals(sig).name} received"
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        budget_s = float(self.config.timeout_graceful_shutdown or DEFAULT_SHUTDOWN_TIMEOUT_S)
        started = time.monotonic()
        log.info("shutdown: %s; stopping within %g s", self.stop_reason, budget_s)
        watchdog = threading.Timer(budget_s, _exit_forced, (budget_s,))
        watchdog.daemon = True
        watchdog.start()
        try:
            await self._shut_down(sockets, started + budget_s * (1 - CLOSING_SHARE))
        finally:
            watchdog.cancel()
        log.info("shutdown: complete in %.2f s", time.monotonic() - started)

    async def _shut_down(self, sockets: list[socket.socket] | None, drained_by: float) -> None:
        """Steps 1-3 here, then uvicorn's shutdown (step 4) and the lifespan's (step 5)."""
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        state = getattr(self.config.app, "state", None)
        broker = getattr(state, "broker", None)
        if broker is not None:
            held = broker.holds.held_count
            await broker.holds.stop()
            log.info("shutdown: %d held pulls answered", held)
        if state is not None and not self.force_exit:
            sessions = websocket_sessions(state)
            count = sessions.open_count
            closed = await sessions.close_all(drained_by - time.monotonic())
            if closed and await self._close_handshakes_done(drained_by):
                log.info("shutdown: %d WebSockets closed (1001)", count)
            else:
                log.warning("shutdown: %d of %d WebSockets still open", sessions.open_count, count)
        # uvicorn's wait for the requests in flight gets what is left of the drain's share.
        remaining_s = max(0.0, drained_by - time.monotonic())
        self.config.timeout_graceful_shutdown = remaining_s  # type: ignore[assignment]
        await super().shutdown(sockets)

    async def _close_handshakes_done(self, deadline: float) -> bool:
        """Wait until the clients have answered the close frames (their connections are gone): uvicorn's
        shutdown cuts every connection it still holds, and a client that was still sending would get a
        reset instead of the close frame."""
        websocket_class = getattr(self.config, "ws_protocol_class", None)
        while websocket_class is not None and any(
            isinstance(connection, websocket_class) for connection in self.server_state.connections
        ):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(HANDSHAKE_POLL_S)
        return True


def _exit_forced(budget_s: float) -> None:
    """The shutdown outlived its budget: exit now, leaving the abort file for the next start."""
    # Writing the line may block too (a log file on the disk that hangs): exit a second later anyway.
    backstop = threading.Timer(1.0, os._exit, (EXIT_FORCED,))
    backstop.daemon = True
    backstop.start()
    log.error(
        "shutdown: not complete within %g s (WHARF_SHUTDOWN_TIMEOUT_S); exiting now, the next start "
        "recovers the store as after a crash",
        budget_s,
    )
    os._exit(EXIT_FORCED)


# How often uvicorn pings a WebSocket client (its default), and how much longer than the broker's own
# bounds on a silent client it waits for the answer.
WS_PING_INTERVAL_S = 20.0
KEEPALIVE_MARGIN_S = 20.0


def keepalive_timeout_s(settings: Settings) -> float:
    """How long a WebSocket peer may leave a ping unanswered: past the broker's bounds, which close a
    client that stopped reading first, with their own code and reason."""
    return max(settings.ws_send_timeout_s, settings.ws_idle_timeout_s) + KEEPALIVE_MARGIN_S


def server_config(app: FastAPI, settings: Settings, **overrides: object) -> uvicorn.Config:
    """The uvicorn configuration; raises the open-file limit first (see the module docstring)."""
    budget = descriptor_budget(raise_nofile_limit(), max_map_count(), settings.max_connections)
    limits = EdgeLimits(
        max_url_bytes=settings.max_url_bytes,
        max_header_bytes=settings.max_header_bytes,
        header_timeout_s=settings.header_timeout_s,
        max_connections=budget.connections,
    )
    options: dict[str, object] = {
        "host": settings.host,
        "port": settings.port,
        "log_config": log_config(settings),
        "log_level": settings.log_level,
        "access_log": settings.access_log,
        "timeout_graceful_shutdown": settings.shutdown_timeout_s,
        "timeout_keep_alive": settings.keep_alive_timeout_s,
        "backlog": budget.backlog,
        "loop": "uvloop",
        "http": protocol_class(limits, getattr(app, "fast_lane", None)),
        # The sans-I/O WebSocket protocol: a frame in or out is parsed or written in the transport's
        # callback, with no reader task and no lock per frame, and the socket is not read again
        # until the endpoint took the last message (one message of memory per client, not a queue
        # of 32). A message produced and delivered alone reaches its subscriber sooner (BENCHMARKS).
        "ws": "websockets-sansio",
        # The WebSocket library refuses (1009) a frame far over the largest cap before reading it
        # whole; frames just over a cap reach the endpoint, which closes with Wharf's reason.
        "ws_max_size": max(settings.ws_max_frame_bytes, settings.ws_produce_max_frame_bytes) + 64 * 1024,
        # uvicorn's keepalive pings every WS_PING_INTERVAL_S and closes (1011, "keepalive ping
        # timeout") a peer that answers none in time. A client that stops reading answers no ping
        # either: its close must be the broker's own, with its reason (1013 after
        # ws_send_timeout_s, 1008 after ws_idle_timeout_s), so the keepalive waits longer than both.
        "ws_ping_interval": WS_PING_INTERVAL_S,
        "ws_ping_timeout": keepalive_timeout_s(settings),
        "proxy_headers": True,
        "forwarded_allow_ips": settings.forwarded_allow_ips,
    }
    if settings.tls_certfile:
        options["ssl_certfile"] = settings.tls_certfile
        options["ssl_keyfile"] = settings.tls_keyfile or None
    options.update(overrides)
    config = uvicorn.Config(app, **options)  # type: ignore[arg-type]
    # Logged once the logging is set up (uvicorn.Config applies log_config).
    if settings.max_connections > budget.connections:
        log.warning(
            "WHARF_MAX_CONNECTIONS=%d does not fit %d open files; the cap is %d",
            settings.max_connections,
            budget.nofile,
            budget.connections,
        )
    return config
