"""Callbacks the broker core calls on an event, registered by the services above it.

The core does not import app/api or app/push: a WebSocket subscription, an event stream and the
push service register here, each with the function that ends its own cursors, and the core calls
them without knowing what they are. Each registration returns the function that removes it, so a
subscriber that ends leaves nothing behind.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

Listener = Callable[[], None]


class Listeners:
    """The listeners of one event, called in the order they were added. ``event`` names it in the
    log when a listener fails."""

    def __init__(self, event: str) -> None:
        self.event = event
        self._listeners: dict[int, Listener] = {}
        self._keys = itertools.count()

    def __len__(self) -> int:
        return len(self._listeners)

    def add(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` on every event from now on; the function that stops it (repeat-safe)."""
        key = next(self._keys)
        self._listeners[key] = listener

        def remove() -> None:
            self._listeners.pop(key, None)

        return remove

    def call(self) -> None:
        """Call every listener. One that raises is logged: the others are still called."""
        for listener in list(self._listeners.values()):
            try:
                listener()
            except Exception:
                log.exception("a listener of %s failed", self.event)
