"""The store benchmark's plan (how much work ``--quick`` and a full run do), targets and helpers."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from app.api.app import settle_garbage_collector
from app.store import Message, MessageStore
from app.store.record_format import Limits, encode_host, encode_record

TOPIC = "bench"
QUEUES = 4
MIB = 1 << 20
GIB = 1 << 30
MB = 1_000_000
SECTIONS = ("disk", "append", "sync", "read", "recovery")

# Targets for this 2-core machine.
APPEND_BATCH_TARGET = 400_000  # msgs/s, 128 B bodies, batched appends
APPEND_SINGLE_TARGET = 150_000  # msgs/s, 128 B bodies, one message per append
DISK_SHARE_TARGET = 0.5  # 4 KiB appends drained to disk, as a share of dd's bandwidth
GROUP_COMMIT_TARGET = 5.0  # group commit over one fsync per message
READ_TARGET = 300_000  # msgs/s through get_message
RECOVERY_TARGET_S_PER_GIB = 10.0


@dataclass(frozen=True, slots=True)
class Plan:
    """How much work each section does; ``--quick`` shrinks everything by about eight."""

    repeats: int
    append_segment: int
    small_messages: int  # 128 B append test
    large_bytes: int  # 4 KiB append test, bytes of CommitLog
    batch_sizes: tuple[int, ...]
    sync_threads: int
    sync_seconds: float
    read_messages: int
    read_repeats: int
    recovery_bytes: int
    recovery_segment: int
    recovery_body_sizes: tuple[int, ...]
    recovery_repeats: int


FULL = Plan(
    repeats=3,
    append_segment=64 * MIB,
    small_messages=500_000,
    large_bytes=512 * MIB,
    batch_sizes=(100, 1000),
    sync_threads=64,
    sync_seconds=3.0,
    read_messages=200_000,
    read_repeats=5,
    recovery_bytes=GIB,
    recovery_segment=128 * MIB,
    recovery_body_sizes=(1024, 128),
    recovery_repeats=2,
)
# About an eighth of the work: what is not named here is as in FULL.
QUICK = replace(
    FULL,
    append_segment=32 * MIB,
    small_messages=200_000,
    large_bytes=128 * MIB,
    sync_seconds=1.0,
    read_messages=100_000,
    read_repeats=3,
    recovery_bytes=128 * MIB,
    recovery_segment=32 * MIB,
)


# -- helpers ----------------------------------------------------------------------------------------


def make_messages(count: int, body_size: int) -> list[Message]:
    """Prebuilt messages over four queues; a few distinct random bodies, a unique id each.

    The garbage collector is then settled as the broker settles it after start-up: what exists so
    far (these messages among it) is frozen out of its sight and its thresholds are the broker's.
    A broker never holds a run's worth of messages at once; with the prebuilt ones in sight, every
    full collection would walk them all, and the store's figures would be the collector's."""
    bodies = [os.urandom(body_size) for _ in range(16)]
    messages = [
        Message(TOPIC, bodies[i % 16], i % QUEUES, {"TAGS": "TagA", "UNIQ_KEY": f"{i:032X}"})
        for i in range(count)
    ]
    settle_garbage_collector()
    return messages


def record_size(body_size: int) -> int:
    message = make_messages(1, body_size)[0]
    return len(encode_record(message, encode_host("127.0.0.1", 8080), 0, Limits()).data)


class Scratch:
    """Fresh directories under one temporary root, removed as soon as a measurement is done."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._count = 0

    def new(self) -> Path:
        self._count += 1
        path = self.root / f"run-{self._count}"
        path.mkdir()
        return path

    @staticmethod
    def remove(path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)


def append_all(store: MessageStore, messages: list[Message], batch: int) -> None:
    append = store.append
    if batch == 1:
        for message in messages:
            append([message])
    else:
        for start in range(0, len(messages), batch):
            append(messages[start : start + batch])


def mode_name(batch: int) -> str:
    return "single" if batch == 1 else f"batch {batch}"


def needed_bytes(plan: Plan, sections: list[str]) -> int:
    needs = [0]
    if "disk" in sections:
        needs.append(plan.large_bytes + plan.append_segment)
    if "recovery" in sections:
        needs.append(plan.recovery_bytes + plan.recovery_segment)
    if "append" in sections:
        needs.append(plan.small_messages * record_size(128) + plan.append_segment)
    return max(needs)
