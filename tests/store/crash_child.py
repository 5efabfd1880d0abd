"""A producer process for the crash tests: appends under SYNC_FLUSH until it is killed.

Run as ``python -m tests.store.crash_child STORE_DIR --round N --seed S``. It opens a MessageStore
with tiny segments, starts a few producer threads (so that group commit acknowledges several
producers with one flush) and has each put single messages and small batches to several queues of
two topics. After ``put`` returns PUT_OK it writes one line per acknowledged message to stdout::

    topic queue_id queue_offset physical_offset seq

preceded by one ``# open`` line once the store is open (so the parent knows it got that far).
A batch's lines go out in one ``os.write`` of less than PIPE_BUF bytes, so a kill never leaves half
a line. The parent kills this process with SIGKILL and then checks that every acknowledged message
survived. As a safety net the process stops by itself after ``--max-seconds``.

Every message is a pure function of its sequence number (:func:`message_for`): topic, queue,
properties, body, and whether it is a half (prepared) transaction message, which gets no queue
offset (its line says 0). A body starts with ``b"<seq>|"`` and ends with the CRC32 of what precedes it,
so any record found in the store, acknowledged or not, can be checked for integrity.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import traceback
import zlib
from pathlib import Path

from app.store import FlushMode, Message, MessageStore, PutStatus, StoreConfig
from app.store.record_format import SYSFLAG_TRANSACTION_PREPARED

COMMITLOG_FILE_SIZE = 64 * 1024
CONSUMEQUEUE_FILE_ENTRIES = 64
INDEX_HASH_SLOTS = 512
INDEX_ENTRIES = 4096
TOPICS = (("crash-a", 4), ("crash-b", 2))
TAGS = ("TagA", "TagB", "TagC")

# Sequence numbers: round * ROUND_SPAN + producer * PRODUCER_SPAN + n, so they never repeat.
ROUND_SPAN = 10**9
PRODUCER_SPAN = 10**7
MAX_BATCH = 6
HALF_MESSAGE_SHARE = 0.05
HALF_ONLY_TOPIC = "crash-txn"

OPEN_LINE = "# open\n"


def child_config(store_dir: Path) -> StoreConfig:
    """The configuration the child writes with; the parent reopens the store with the same one."""
    return StoreConfig(
        store_dir=store_dir,
        flush_mode=FlushMode.SYNC,
        commitlog_file_size=COMMITLOG_FILE_SIZE,
        consumequeue_file_entries=CONSUMEQUEUE_FILE_ENTRIES,
        # A small message index, so that it rolls over too and a copy of the store stays small.
        max_hash_slots=INDEX_HASH_SLOTS,
        max_index_count=INDEX_ENTRIES,
    )


def body_size(rng: random.Random) -> int:
    """Mostly small bodies, some of a few KiB, a few large enough to force blank fillers at roll-over."""
    draw = rng.random()
    if draw < 0.85:
        return rng.randint(1, 600)
    if draw < 0.97:
        return rng.randint(1_000, 6_000)
    return rng.randint(10_000, 20_000)


def body_for(seq: int, rng: random.Random) -> bytes:
    head = b"%d|" % seq
    payload = head + rng.randbytes(body_size(rng))
    return payload + b"|%08x" % zlib.crc32(payload)


def message_for(seq: int) -> Message:
    """The one message that sequence number ``seq`` stands for."""
    rng = random.Random(seq)
    topic, queue_count = TOPICS[rng.randrange(len(TOPICS))]
    queue_id = rng.randrange(queue_count)
    properties: dict[str, str] = {}
    if rng.random() < 0.8:  # the rest carry no properties at all
        properties["UNIQ_KEY"] = f"seq-{seq}"
        properties["TAGS"] = rng.choice(TAGS)
        if rng.random() < 0.5:
            properties["KEYS"] = f"k{seq % 97} k{seq % 89}"
    # A few half (prepared) transaction messages: stored, but kept out of the ConsumeQueues. Half of
    # them go to a topic nothing else is sent to, whose queue must therefore stay empty.
    sysflag = 0
    if rng.random() < HALF_MESSAGE_SHARE:
        sysflag = SYSFLAG_TRANSACTION_PREPARED
        if rng.random() < 0.5:
            topic, queue_id = HALF_ONLY_TOPIC, 0
    return Message(topic, body_for(seq, rng), queue_id=queue_id, properties=properties, sysflag=sysflag)


def seq_of(body: bytes) -> int:
    """The sequence number a body carries; ValueError when the body is not intact."""
    head, sep, _ = body.partition(b"|")
    payload, crc = body[:-9], body[-9:]
    if not sep or crc[:1] != b"|" or int(crc[1:], 16) != zlib.crc32(payload):
        raise ValueError(f"body is not intact: {body[:40]!r}...")
    return int(head)


class AckWriter:
    """Writes acknowledgement lines to a file descriptor, one batch per ``os.write``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()

    def write(self, lines: list[str]) -> None:
        if lines:
            data = "".join(lines).encode()
            with self.lock:
                os.write(self.fd, data)


def produce(store: MessageStore, writer: AckWriter, stop: threading.Event, first_seq: int, seed: str) -> None:
    try:
        _produce(store, writer, stop, first_seq, seed)
    except BaseException:
        # A producer that dies must not go unnoticed: the parent fails on a child that exits early.
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(2)


def _produce(
    store: MessageStore, writer: AckWriter, stop: threading.Event, first_seq: int, seed: str
) -> None:
    rng = random.Random(seed)
    seq = first_seq
    while not stop.is_set():
        count = 1 if rng.random() < 0.6 else rng.randint(2, MAX_BATCH)
        seqs = list(range(seq, seq + count))
        seq += count
        results = store.put([message_for(s) for s in seqs])
        writer.write(
            [
                f"{r.topic} {r.queue_id} {r.queue_offset} {r.physical_offset} {s}\n"
                for r, s in zip(results, seqs, strict=True)
                if r.status is PutStatus.PUT_OK
            ]
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store_dir", type=Path)
    parser.add_argument("--round", type=int, default=0, help="crash round, makes sequence numbers unique")
    parser.add_argument("--seed", type=int, default=0, help="seeds the producers' choice of batch sizes")
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=30.0, help="stop by itself after this long")
    args = parser.parse_args(argv)

    store = MessageStore(child_config(args.store_dir)).open()
    writer = AckWriter(sys.stdout.fileno())
    writer.write([OPEN_LINE])
    stop = threading.Event()
    producers = [
        threading.Thread(
            target=produce,
            args=(
                store,
                writer,
                stop,
                args.round * ROUND_SPAN + index * PRODUCER_SPAN,
                f"{args.seed}-{args.round}-{index}",
            ),
            name=f"producer-{index}",
            daemon=True,
        )
        for index in range(args.producers)
    ]
    for thread in producers:
        thread.start()
    stop.wait(args.max_seconds)
    stop.set()
    for thread in producers:
        thread.join()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
