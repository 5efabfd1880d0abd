"""The nemesis: faults at random, each healed a few seconds later, at most one at a time in each
broker name (a name that loses two of its three brokers at once has nobody to fail over to).

kill/restart        SIGKILL, then the same process started again on its store
pause/resume        SIGSTOP, then SIGCONT: alive but silent, its leases and connections stall
cut_registry        the broker's connections to the route registry reset, new ones refused
cut_replication     the master's front proxy cut: its slaves (and clients) cannot reach it
fill_disk           the tmpfs a slave keeps its store on filled to its last 64 KiB
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tests.chaos.cluster import Cluster, Node
from tests.chaos.history import History

HEALS = {
    "kill": "restart",
    "pause": "resume",
    "cut_registry": "heal_registry",
    "cut_replication": "heal_replication",
    "fill_disk": "free_disk",
}


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    node: Node
    heal_at: float


class Nemesis:
    def __init__(
        self,
        cluster: Cluster,
        history: History,
        rng: random.Random,
        every_s: tuple[float, float] = (1.0, 4.0),
        lasting_s: tuple[float, float] = (2.0, 8.0),
    ) -> None:
        self.cluster = cluster
        self.history = history
        self.rng = rng
        self.every_s = every_s
        self.lasting_s = lasting_s
        self.active: list[Fault] = []
        self.counts: dict[str, int] = {}

    def run_for(self, seconds: float, stop: threading.Event | None = None) -> None:
        end = time.monotonic() + seconds
        next_fault = time.monotonic() + self.rng.uniform(*self.every_s)
        while time.monotonic() < end and not (stop is not None and stop.is_set()):
            now = time.monotonic()
            for fault in [fault for fault in self.active if fault.heal_at <= now]:
                self._heal(fault)
            if now >= next_fault:
                self._strike()
                next_fault = time.monotonic() + self.rng.uniform(*self.every_s)
            time.sleep(0.05)
        for fault in list(self.active):
            self._heal(fault)

    def _strike(self) -> None:
        """A fault of the kind struck least so far (so every kind comes, even in short runs), on a
        node it applies to in a broker name without an active fault."""
        busy = {fault.node.name for fault in self.active}
        free = [node for node in self.cluster.nodes if node.name not in busy]
        masters = [node for node in free if self._is_master(node)]
        targets = {
            "kill": free,
            "pause": free,
            "cut_registry": free,
            "cut_replication": masters,
            "fill_disk": [node for node in free if node.tmpfs is not None],
        }
        kinds = [kind for kind, nodes in targets.items() if nodes]
        if not kinds:
            return
        fewest = min(self.counts.get(kind, 0) for kind in kinds)
        kind = self.rng.choice([kind for kind in kinds if self.counts.get(kind, 0) == fewest])
        # Half the time a master, where a fault makes a failover: a third of the nodes are masters.
        struck = [node for node in targets[kind] if node in masters]
        node = self.rng.choice(struck if struck and self.rng.random() < 0.5 else targets[kind])
        actions: dict[str, Callable[[], None]] = {
            "kill": node.kill,
            "pause": node.pause,
            "cut_registry": node.registry.stop,
            "cut_replication": node.front.stop,
            "fill_disk": node.fill_disk,
        }
        actions[kind]()
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.history.add("fault", fault=kind, target=node.label)
        self.active.append(Fault(kind, node, time.monotonic() + self.rng.uniform(*self.lasting_s)))

    def _heal(self, fault: Fault) -> None:
        node = fault.node
        actions: dict[str, Callable[[], None]] = {
            "kill": node.restart,
            "pause": node.resume,
            "cut_registry": node.registry.start,
            "cut_replication": node.front.start,
            "fill_disk": node.free_disk,
        }
        actions[fault.kind]()
        self.history.add("fault", fault=HEALS[fault.kind], target=node.label)
        self.active.remove(fault)

    @staticmethod
    def _is_master(node: Node) -> bool:
        status = node.ha(timeout_s=0.5)
        return status is not None and status["role"] != "SLAVE"
