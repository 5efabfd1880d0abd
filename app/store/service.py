"""Background service threads with an explicit lifecycle, and the wake-up primitive they share."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)


class Wakeup:
    """A "notified" flag plus an event: wake-ups merge, and none is lost between two waits."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def notify(self) -> None:
        # Set already: the waiter clears it only before its next pass, which sees what the caller
        # published before this call. Skipping the set spares the event's lock and notify.
        if not self._event.is_set():
            self._event.set()

    def wait(self, timeout_s: float) -> None:
        self._event.wait(timeout_s)
        self._event.clear()


class ServiceThread:
    """A daemon loop: ``run_once`` every ``interval_s`` or on :meth:`wakeup`; ``on_stop`` drains."""

    name = "service"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.wakeup_signal = Wakeup()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stopping.clear()  # a service stopped before can start again
        self._thread = threading.Thread(target=self._run, name=f"wharf-{self.name}", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        self.wakeup_signal.notify()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        self.wakeup_signal.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.wakeup_signal.wait(self.interval_s)
            if self._stopping.is_set():
                break
            try:
                self.run_once()
            except Exception:  # a failing pass must not kill the service
                log.exception("%s pass failed", self.name)
        try:
            self.on_stop()
        except Exception:
            log.exception("%s failed to drain", self.name)

    def run_once(self) -> None:
        raise NotImplementedError

    def on_stop(self) -> None:
        """Last pass after the loop ends; by default one more ``run_once``."""
        self.run_once()
