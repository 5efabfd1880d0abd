"""Memory soak: 40 WebSocket subscribers that never read, 200 MB produced, then a minute of mixed
load. The broker's memory stays bounded and comes back once it has closed the slow sockets.

Memory is the broker's anonymous resident memory (``RssAnon`` in /proc/<pid>/status: heap, frames,
buffers). ``VmRSS`` also counts the CommitLog's mapped pages, which grow with every byte produced
whoever reads (page cache the kernel reclaims), so it is printed but not bounded here.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.ws.rawsocket import RawWebSocket
from tests.ws.wsclient import WsBroker, wait_for

SLOW_SOCKETS = 40
PRODUCED_BYTES = 200 * 1024 * 1024
MESSAGE_BYTES = 64 * 1024
MAX_QUEUED_BYTES = 256 * 1024
SEND_TIMEOUT_S = 10
MIXED_LOAD_S = float(os.environ.get("WHARF_MEMORY_SOAK_S", "60"))
GROWTH_LIMIT_MB = 200
SETTLED_LIMIT_MB = 100


def memory_mb(pid: int) -> dict[str, int]:
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile"):
                fields[name] = int(value.split()[0]) // 1024
    return fields


@pytest.mark.slow
def test_slow_subscribers_cost_bounded_memory_and_are_closed(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "store",
        commitlog_file_size=64 * 1024 * 1024,
        ws_max_queued_bytes=MAX_QUEUED_BYTES,
        ws_send_timeout_s=SEND_TIMEOUT_S,
    ).start()
    assert broker.process is not None
    pid = broker.process.pid
    peak = start = memory_mb(pid)

    def sample() -> None:
        nonlocal peak
        now = memory_mb(pid)
        if now["RssAnon"] > peak["RssAnon"]:
            peak = now

    slow: list[RawWebSocket] = []
    try:
        with httpx.Client(base_url=broker.url, timeout=60) as client:
            for name in ("soak", "mixed"):
                assert client.post("/v1/topics", json={"name": name, "queues": 16}).status_code == 201
            body = "s" * MESSAGE_BYTES
            for _ in range(PRODUCED_BYTES // (16 * MESSAGE_BYTES)):
                response = client.post("/v1/topics/soak/messages", json={"messages": [{"body": body}] * 16})
                assert response.status_code == 200, response.text
                sample()
            # Every queue holds full batches: each reader of a socket has a whole frame to send.
            for number in range(SLOW_SOCKETS):
                group = f"slow-{number}" if number % 2 else None
                slow.append(
                    RawWebSocket(
                        broker.url,
                        "/v1/ws/subscribe",
                        recv_buffer_bytes=4096,
                        topic="soak",
                        group=group,
                        credit=10_000,
                        **{"from": "first"},
                    )
                )
            mixed_load(broker, client, sample)
            ports = [raw.sock.getsockname()[1] for raw in slow]
            assert wait_for(lambda: all(f":{port} closed 1013:" in broker.log() for port in ports), 60)
            sample()
            settled = memory_mb(pid)
        print(f"memory (MB): start {start}, peak {peak}, settled {settled}")
        assert peak["RssAnon"] - start["RssAnon"] <= GROWTH_LIMIT_MB
        assert settled["RssAnon"] - start["RssAnon"] <= SETTLED_LIMIT_MB

        # Each slow socket was closed by the broker: it finds the close frame after what it was sent.
        def drain(raw: RawWebSocket) -> tuple[int | None, int]:
            code, _, received = raw.read_until_close(max_bytes=16 * 1024 * 1024, timeout_s=60)
            return code, received

        with ThreadPoolExecutor(8) as pool:
            endings = list(pool.map(drain, slow))
        assert all(code in (1013, None) for code, _ in endings), endings
    finally:
        for raw in slow:
            raw.close()
        broker.stop()


def mixed_load(broker: BrokerProcess, client: httpx.Client, sample: object) -> None:
    """Produce, pull and a subscriber that reads, for MIXED_LOAD_S seconds."""
    assert callable(sample)
    body = "m" * 4096
    offset = 0
    received = 0
    deadline = time.monotonic() + MIXED_LOAD_S
    with WsBroker(broker).subscribe(topic="mixed", credit=1000, **{"from": "first"}) as reader:
        while time.monotonic() < deadline:
            response = client.post(
                "/v1/topics/mixed/messages", json={"messages": [{"body": body, "queue_id": 0}] * 16}
            )
            assert response.status_code == 200, response.text
            pulled = client.get(
                "/v1/topics/mixed/queues/0/messages", params={"offset": offset, "max_messages": 32}
            )
            assert pulled.status_code == 200, pulled.text
            offset = pulled.json()["next_offset"]
            while received < offset:
                frame = reader.next("messages")
                received += len(frame["messages"])
                reader.send(type="permit", n=len(frame["messages"]))
            sample()
    assert received >= offset > 0  # the reading subscriber kept up with the pulls
