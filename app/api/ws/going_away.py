"""Ending every WebSocket with 1001 (going away) when the broker shuts down.

Uvicorn's own shutdown ends every socket at once with 1012 (service restart), whatever a producer's
batch was doing. So the server first calls :meth:`WebSocketSessions.close_all`: ``going_away`` is
set, each session ends on its own (a subscriber at once, a producer once the frames it took in are
stored and answered) and closes with 1001, and the server waits for the last one, within its
shutdown budget; a socket still open then gets uvicorn's 1012.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class WebSocketSessions:
    """The open WebSocket sessions of one app, and the signal that ends them."""

    def __init__(self) -> None:
        self.going_away = asyncio.Event()
        self.open_count = 0
        self._all_closed = asyncio.Event()
        self._all_closed.set()

    @contextmanager
    def session(self) -> Iterator[None]:
        """Count a socket as open while the block runs."""
        self.open_count += 1
        self._all_closed.clear()
        try:
            yield
        finally:
            self.open_count -= 1
            if not self.open_count:
                self._all_closed.set()

    async def close_all(self, timeout_s: float) -> bool:
        """Ask every session to end with 1001; True once all have, False if ``timeout_s`` passed first."""
        self.going_away.set()
        try:
            async with asyncio.timeout(max(0.0, timeout_s)):
                await self._all_closed.wait()
        except TimeoutError:
            return False
        return True


def websocket_sessions(state: Any) -> WebSocketSessions:
    """The sessions of the app whose ``app.state`` is ``state`` (made on first use)."""
    sessions: WebSocketSessions | None = getattr(state, "ws_sessions", None)
    if sessions is None:
        sessions = state.ws_sessions = WebSocketSessions()
    return sessions
