"""The cluster a nemesis run works on: two broker names, each a SYNC_MASTER with two slaves and
automatic failover, sharing a PostgreSQL route registry.

Every broker is a real process behind two TCP proxies the run controls: one in front of its HTTP
port (the address it advertises, so clients and its slaves reach it only through the proxy) and
one between it and the registry. The last slave of each name keeps its store on a small tmpfs, so
that its disk can be filled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy.engine import make_url

from tests.api.server import BrokerProcess
from tests.routing.proxy import TcpProxy
from tests.small_disk import fill

BROKER_NAMES = ("broker-a", "broker-b")
SLAVES = 2
TOPIC = "chaos"
QUEUES = 4
FAILOVER_S = 2
TMPFS_MIB = 192
TMPFS_LEFT_BYTES = 64 * 1024  # what a filled disk keeps free


@dataclass(eq=False)
class Node:
    """One broker process, its proxies and what the nemesis did to it."""

    name: str
    broker_id: int
    process: BrokerProcess
    front: TcpProxy
    registry: TcpProxy
    tmpfs: Path | None = None
    paused: bool = False
    killed: bool = False
    filler: Path | None = None
    faults: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.name}/{self.broker_id}"

    @property
    def url(self) -> str:
        """The address it advertises: through its front proxy."""
        return f"http://127.0.0.1:{self.front.port}"

    @property
    def direct_url(self) -> str:
        return self.process.url

    @property
    def store_dir(self) -> Path:
        return self.process.store_dir

    @property
    def pid(self) -> int | None:
        return self.process.process.pid if self.process.process is not None else None

    def ha(self, timeout_s: float = 1.0) -> dict[str, object] | None:
        """Its /v1/admin/ha, straight from its port; None when it does not answer."""
        if self.killed or self.paused:
            return None
        try:
            answer = httpx.get(f"{self.direct_url}/v1/admin/ha", timeout=timeout_s)
        except httpx.HTTPError:
            return None
        return dict(answer.json()) if answer.status_code == 200 else None

    # -- faults ----------------------------------------------------------------------------------

    def kill(self) -> None:
        if self.paused:
            self.resume()
        self.process.kill()
        self.killed = True

    def restart(self) -> None:
        self.process.start(timeout_s=60)
        self.killed = False

    def pause(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def fill_disk(self) -> None:
        assert self.tmpfs is not None
        self.filler = fill(self.tmpfs, TMPFS_LEFT_BYTES)

    def free_disk(self) -> None:
        if self.filler is not None:
            self.filler.unlink(missing_ok=True)
            self.filler = None


class Cluster:
    """Starts and stops the nodes; :meth:`heal` undoes every fault."""

    def __init__(self, root: Path, registry_url: str) -> None:
        self.root = root
        self.registry_url = registry_url
        self.nodes: list[Node] = []
        self._mounts: list[Path] = []

    def start(self) -> Cluster:
        url = make_url(self.registry_url)
        for name in BROKER_NAMES:
            for broker_id in range(SLAVES + 1):
                registry = TcpProxy(url.host or "127.0.0.1", url.port or 5432).start()
                through = url.set(host="127.0.0.1", port=registry.port).render_as_string(hide_password=False)
                store, tmpfs = self._store_dir(name, broker_id)
                process = BrokerProcess(
                    store,
                    database_url=through,
                    database_timeout_s=1,
                    broker_name=name,
                    broker_id=broker_id,
                    broker_role="SYNC_MASTER" if broker_id == 0 else "SLAVE",
                    ha_auto_failover="true",
                    ha_failover_s=FAILOVER_S,
                    ha_metadata_interval_ms=300,
                )
                process.log_path = self.root / f"{name}-{broker_id}.log"  # not on a disk that fills
                front = TcpProxy("127.0.0.1", process.port).start()
                process.env["WHARF_ADVERTISED_URL"] = f"http://127.0.0.1:{front.port}"
                self.nodes.append(Node(name, broker_id, process, front, registry, tmpfs))
        with ThreadPoolExecutor(len(self.nodes)) as starting:  # the masters first, then the slaves
            for slaves in (False, True):
                chosen = [node for node in self.nodes if (node.broker_id > 0) == slaves]
                list(starting.map(lambda node: node.process.start(timeout_s=60), chosen))
        for name in BROKER_NAMES:
            created = httpx.post(
                f"{self.master(name).url}/v1/topics", json={"name": TOPIC, "queues": QUEUES}, timeout=30
            )
            assert created.status_code == 201, created.text
        self.wait_converged(60)
        return self

    def _store_dir(self, name: str, broker_id: int) -> tuple[Path, Path | None]:
        directory = self.root / f"{name}-{broker_id}"
        if broker_id != SLAVES:
            return directory / "store", None
        directory.mkdir(parents=True)
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MIB}m", "tmpfs", str(directory)],
            capture_output=True,
            text=True,
        )
        if mounted.returncode != 0:
            raise RuntimeError(
                f"the nemesis fills a slave's disk on a tmpfs and cannot mount one: {mounted.stderr}"
            )
        self._mounts.append(directory)
        return directory / "store", directory

    def by_name(self, name: str) -> list[Node]:
        return [node for node in self.nodes if node.name == name]

    def master(self, name: str) -> Node:
        """The node of ``name`` that says it is the master in the highest epoch."""
        best: tuple[int, Node] | None = None
        for node in self.by_name(name):
            status = node.ha()
            if status is not None and status["role"] != "SLAVE":
                epoch = int(str(status["epoch"]))
                if best is None or epoch > best[0]:
                    best = (epoch, node)
        if best is None:
            raise LookupError(f"{name} has no master")
        return best[1]

    @property
    def bootstrap(self) -> list[str]:
        return [node.url for node in self.nodes]

    def heal(self) -> None:
        for node in self.nodes:
            if node.paused:
                node.resume()
            node.free_disk()
            node.front.start()
            node.registry.start()
        for node in self.nodes:
            if node.killed:
                node.restart()

    def converged(self, name: str) -> bool:
        """One master, every slave connected to it and holding its CommitLog to the end."""
        statuses = [node.ha(timeout_s=5) for node in self.by_name(name)]
        if any(status is None for status in statuses):
            return False
        masters = [status for status in statuses if status is not None and status["role"] != "SLAVE"]
        if len(masters) != 1:
            return False
        end = masters[0]["commitlog_max_offset"]
        return all(
            status["commitlog_max_offset"] == end and (status["role"] != "SLAVE" or status["connected"])
            for status in statuses
            if status is not None
        )

    def wait_converged(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self.converged(name) for name in BROKER_NAMES):
                return True
            time.sleep(0.25)
        return False

    def close(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                if node.paused:
                    node.resume()
                node.process.kill()
            for proxy in (node.front, node.registry):
                with contextlib.suppress(Exception):
                    proxy.close()
        for mount in self._mounts:
            subprocess.run(["umount", "--lazy", str(mount)], check=False)
