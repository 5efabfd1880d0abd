"""The Python client installs alone: its wheel, built from clients/python, goes into a fresh virtual
environment with its two dependencies (httpx, websockets) from the index and nothing of the broker,
and a script there produces, consumes in a group, consumes every queue, subscribes over WebSocket
and administers topics against a real broker run from the checkout's environment."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.api.server import ROOT, BrokerProcess

pytestmark = pytest.mark.slow

SERVER_PACKAGES = {"fastapi", "sqlalchemy", "pyspark", "uvicorn", "cython", "alembic", "psycopg", "lark"}

SCRIPT = textwrap.dedent(
    """
    import asyncio
    import sys

    import wharf_client
    from wharf_client import (
        Admin,
        AsyncSubscriber,
        BrokerError,
        GroupConsumer,
        Message,
        OutgoingMessage,
        Producer,
        PullConsumer,
    )
    from wharf_client import codec

    url = sys.argv[1]
    assert "app" not in sys.modules and codec.compiled is None, "the client loaded the broker"
    assert wharf_client.__version__ == "0.1.0"

    with Admin(url) as admin:
        admin.create_topic("wheel-orders", queues=2)
        assert "wheel-orders" in {topic["name"] for topic in admin.iter_topics()}
        admin.create_topic("wheel-scratch", queues=1)
        admin.delete_topic("wheel-scratch")
        try:
            admin.topic("wheel-scratch")
        except BrokerError as error:
            assert error.status == 404, error
        else:
            raise AssertionError("a deleted topic is still there")

    with Producer([url]) as producer:
        sent = [producer.send("wheel-orders", f"m{i}".encode(), tags="TagA", keys=[f"k{i}"]) for i in range(6)]
        sent += producer.send_batch(
            "wheel-orders", [OutgoingMessage(b"\\xff\\x00binary", properties={"p": "1"})], queue_id=0
        )
    assert all(result.status == "SEND_OK" for result in sent), sent
    expected = {f"m{i}".encode() for i in range(6)} | {b"\\xff\\x00binary"}

    got = set()
    with GroupConsumer(url, "wheel-group", {"wheel-orders": "*"}) as consumer:
        for _ in range(20):
            batch = consumer.poll(max_messages=32, max_wait_ms=1_000)
            for message in batch.messages:
                got.add(codec.decode_body(message["body"], message["encoding"]))
            consumer.commit(batch)
            if got >= expected:
                break
    assert got == expected, got

    seen = []
    with PullConsumer(url, "wheel-orders", group="wheel-pull", start="first") as consumer:
        while len(seen) < len(expected):
            consumed = consumer.poll(timeout_s=10.0)
            assert consumed is not None, seen
            assert type(consumed.message) is Message
            seen.append(consumed.message)
    assert {message.body for message in seen} == expected
    first = next(message for message in seen if message.body == b"m0")
    assert (first.topic, first.tags, first.keys, first.reconsume_times) == ("wheel-orders", "TagA", "k0", 0)
    assert first.msg_id in {result.msg_id for result in sent} and first.unique_id
    assert first.store_timestamp >= first.born_timestamp > 0

    async def subscribe() -> set[bytes]:
        bodies = set()
        async with AsyncSubscriber(url, "wheel-orders", "wheel-subscriber", start="first") as subscriber:
            while len(bodies) < len(expected):
                message = await subscriber.poll(timeout_s=10.0)
                assert message is not None, bodies
                assert type(message.message) is Message
                bodies.add(message.body)
            await subscriber.commit()
        return bodies

    assert asyncio.run(subscribe()) == expected
    print("client ok")
    """
)


def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done


def test_the_client_wheel_installs_alone_and_talks_to_a_broker(tmp_path: Path) -> None:
    wheels, venv = tmp_path / "wheels", tmp_path / "venv"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--wheel-dir",
            str(wheels),
            str(ROOT / "clients/python"),
        ]
    )
    (wheel,) = wheels.glob("wharf_client-0.1.0-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "wharf_client/py.typed" in names and "wharf_client/codec.py" in names
    assert not [name for name in names if name.startswith("app/")]

    run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not name.startswith("WHARF_")
    }
    run(
        [python, "-m", "pip", "install", "-q", "--constraint", str(ROOT / "constraints.txt"), str(wheel)],
        env=env,
    )
    listed = run([python, "-m", "pip", "list", "--format=freeze"], env=env).stdout.lower()
    installed = {line.partition("==")[0].replace("_", "-") for line in listed.split()}
    assert {"wharf-client", "httpx", "websockets"} <= installed, installed
    assert not installed & SERVER_PACKAGES, installed & SERVER_PACKAGES
    assert "wharf" not in installed

    broker = BrokerProcess(tmp_path / "store").start()
    try:
        # Run from an empty directory: the checkout (and its app package) is not on the path.
        done = run([python, "-c", SCRIPT, broker.url], cwd=tmp_path, env=env)
    finally:
        broker.stop()
    assert done.stdout.strip().endswith("client ok"), done.stdout
