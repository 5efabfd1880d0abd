"""Crash safety (SPEC 1.7, 1.8): a SYNC_FLUSH producer killed with SIGKILL loses nothing it was told
was stored, and recovery leaves no half-visible record behind.

Each round starts :mod:`tests.store.crash_child` on the same store directory, lets it append for a
random short time and kills it with SIGKILL, so the log grows across many segments and many crashes.
Then the store is reopened and checked:

* recovery was unclean (the abort file was left behind);
* a walk of the CommitLog validates every record and ends exactly where recovery said the log ends,
  with nothing but zeros after it;
* every ConsumeQueue runs from 0 to its max offset with no gap, and each entry points at a valid
  record of its own topic, queue and queue offset; every record of the log is in its ConsumeQueue;
* every record reads back intact (its body, topic, queue and properties are those its sequence
  number stands for), and no sequence number is stored twice;
* every message acknowledged in any round so far is readable by (queue, offset) and by physical
  offset.

Even rounds check the directory in place, append a few messages and close it cleanly; odd rounds
check a copy and leave the crashed directory to the next child, which recovers it itself. The
random choices come from a printed seed: rerun with ``WHARF_CRASH_SEED=<seed>`` to repeat them
(thread interleaving and the exact kill instant cannot be repeated); ``WHARF_CRASH_ROUNDS=<n>`` runs
more rounds for a longer hunt.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.store import GetMessageStatus, MessageStore, PutStatus, decode_record
from app.store.record import CheckedRecord, check_record
from app.store.record_format import BLANK_MIN_SIZE, SYSFLAG_PROPERTIES_END, SYSFLAG_TRANSACTION_PREPARED
from tests.store.crash_child import (
    COMMITLOG_FILE_SIZE,
    HALF_ONLY_TOPIC,
    OPEN_LINE,
    PRODUCER_SPAN,
    ROUND_SPAN,
    child_config,
    message_for,
    seq_of,
)

ROUNDS = int(os.environ.get("WHARF_CRASH_ROUNDS") or 6)

pytestmark = [pytest.mark.crash, pytest.mark.timeout(60 + 15 * ROUNDS)]
REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD_START_TIMEOUT_S = 30.0
# Sequence numbers of the messages the test appends itself between rounds.
TEST_PRODUCER = 99
MESSAGES_APPENDED_BETWEEN_ROUNDS = 8
INDEX_SAMPLE = 200


@dataclass(frozen=True, slots=True)
class Ack:
    """One acknowledged message, as the child reported it."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    seq: int
    round: int


@dataclass(frozen=True, slots=True)
class ChildRun:
    opened: bool
    acks: list[Ack]


def run_child_until_killed(store_dir: Path, round_no: int, seed: int, rng: random.Random) -> ChildRun:
    """Start the producer, kill it with SIGKILL at a random moment, return what it acknowledged."""
    stderr_path = store_dir.parent / f"child-{round_no}.stderr"
    with stderr_path.open("wb") as stderr:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.store.crash_child",
                str(store_dir),
                "--round",
                str(round_no),
                "--seed",
                str(seed),
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    lines: list[bytes] = []
    first_ack = threading.Event()

    def read_stdout() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.append(line)
            if line != OPEN_LINE.encode():
                first_ack.set()
        first_ack.set()  # end of output: the child is gone

    reader = threading.Thread(target=read_stdout, daemon=True)
    reader.start()
    try:
        if rng.random() < 0.25:
            # Early: possibly while the child is still starting or recovering the last crash.
            time.sleep(rng.uniform(0.0, 0.4))
        else:
            assert first_ack.wait(CHILD_START_TIMEOUT_S), "the child acknowledged nothing in time"
            time.sleep(rng.uniform(0.02, 0.8))
        exited = child.poll()
        assert exited is None, (
            f"the child exited with {exited} before it was killed: {stderr_path.read_text()[-3000:]}"
        )
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        reader.join(10)
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL, (
        f"the child exited with {child.returncode}: {stderr_path.read_text()[-3000:]}"
    )

    opened = False
    acks = []
    for line in lines:
        if line == OPEN_LINE.encode():
            opened = True
            continue
        assert line.endswith(b"\n"), f"a partial acknowledgement line: {line!r}"
        topic, queue_id, queue_offset, physical_offset, seq = line.decode().split()
        acks.append(Ack(topic, int(queue_id), int(queue_offset), int(physical_offset), int(seq), round_no))
    return ChildRun(opened, acks)


# -- checks ----------------------------------------------------------------------------------------


def walk_commitlog(store: MessageStore) -> tuple[dict[int, CheckedRecord], int]:
    """Validate the whole CommitLog from its first segment: (records by physical offset, end)."""
    files = store.commitlog.files.files
    records: dict[int, CheckedRecord] = {}
    for index, mapped in enumerate(files):
        assert mapped.file_from_offset == index * COMMITLOG_FILE_SIZE, f"segments are not contiguous: {files}"
        base, view, position = mapped.file_from_offset, mapped.view, 0
        while True:
            checked = check_record(view, position, base + position)
            if checked is None:
                assert mapped is files[-1], (
                    f"the log ends at {base + position} in segment {index}, but {len(files) - index - 1} "
                    "segment(s) follow it"
                )
                tail = view[position:]
                assert tail == bytes(len(tail)), (
                    f"non-zero bytes after the end of the log at {base + position}"
                )
                return records, base + position
            if checked.size == 0:  # blank filler: the log goes on in the next segment
                assert COMMITLOG_FILE_SIZE - position >= BLANK_MIN_SIZE
                break
            records[base + position] = checked
            position += checked.size
    return records, len(files) * COMMITLOG_FILE_SIZE


Where = tuple[str, int, int, int]  # topic, queue id, queue offset, physical offset


def decode_every_record(store: MessageStore, records: dict[int, CheckedRecord]) -> dict[int, Where]:
    """Read every record of the log by its physical offset; each must be the message its sequence
    number names, and no sequence number may be stored twice. Returns where each one is."""
    stored: dict[int, Where] = {}
    for physical_offset in records:
        message = store.look_message(physical_offset)
        assert message is not None, f"the record at {physical_offset} is not readable by its offset"
        seq = seq_of(message.body)
        expected = message_for(seq)
        assert (message.topic, message.queue_id, message.body, message.properties, message.sysflag) == (
            expected.topic,
            expected.queue_id,
            expected.body,
            expected.properties,
            expected.sysflag | SYSFLAG_PROPERTIES_END,  # every record the store writes has it
        ), f"the record at {physical_offset} is not message {seq}"
        assert seq not in stored, f"message {seq} is stored twice: at {stored[seq][3]} and {physical_offset}"
        stored[seq] = (message.topic, message.queue_id, message.queue_offset, physical_offset)
    return stored


def check_consume_queues(store: MessageStore, records: dict[int, CheckedRecord]) -> None:
    """Each queue is gapless from 0 to its max and each entry matches its record; every record is
    indexed, except half (prepared) transaction messages, which never are."""
    indexed: set[int] = set()
    for (topic, queue_id), queue in store.consume_queues.items():
        assert queue.min_offset == 0, f"{topic}/{queue_id} lost its head: min offset {queue.min_offset}"
        count = 0
        previous = -1
        for queue_offset, physical_offset, size, tags_code in queue.iter_entries(0):
            assert queue_offset == count
            record = records.get(physical_offset)
            assert record is not None, (
                f"{topic}/{queue_id} entry {queue_offset} points at {physical_offset}, which is not "
                "a valid record of the log"
            )
            assert (record.topic, record.queue_id, record.queue_offset, record.size, record.tags_code) == (
                topic,
                queue_id,
                queue_offset,
                size,
                tags_code,
            ), f"{topic}/{queue_id} entry {queue_offset} does not match the record at {physical_offset}"
            assert not record.sysflag & SYSFLAG_TRANSACTION_PREPARED, (
                f"{topic}/{queue_id} entry {queue_offset} points at a half message"
            )
            assert physical_offset > previous, f"{topic}/{queue_id} entries go backwards at {queue_offset}"
            previous = physical_offset
            indexed.add(physical_offset)
            count += 1
        assert count == queue.max_offset, (
            f"{topic}/{queue_id} has a gap: entries stop at {count}, max offset is {queue.max_offset}"
        )
    unindexed = sorted(
        offset
        for offset, record in records.items()
        if offset not in indexed and not record.sysflag & SYSFLAG_TRANSACTION_PREPARED
    )
    assert not unindexed, f"records no ConsumeQueue points at: {unindexed[:10]}"


def read_through_queues(store: MessageStore, stored: dict[int, Where]) -> None:
    """Read every queue through get_message: each message is the one the log holds at that place."""
    for topic, queue_id in list(store.consume_queues):
        offset, max_offset = 0, store.max_offset(topic, queue_id)
        while offset < max_offset:
            result = store.get_message(topic, queue_id, offset, max_messages=32)
            assert result.status is GetMessageStatus.FOUND, f"{topic}/{queue_id} at {offset}: {result.status}"
            assert result.queue_offsets == list(range(offset, offset + len(result.records)))
            for queue_offset, raw in zip(result.queue_offsets, result.records, strict=True):
                message = decode_record(raw, check_crc=True)
                where = (topic, queue_id, queue_offset, message.physical_offset)
                assert stored[seq_of(message.body)] == where
            offset = result.next_offset
            del result, raw


def check_acknowledged(store: MessageStore, acks: list[Ack], stored: dict[int, Where]) -> None:
    for ack in acks:
        where = (ack.topic, ack.queue_id, ack.queue_offset, ack.physical_offset)
        assert stored.get(ack.seq) == where, (
            f"message {ack.seq} acknowledged in round {ack.round} at {where} is at {stored.get(ack.seq)} now"
        )


def check_index_sample(store: MessageStore, acks: list[Ack], rng: random.Random) -> None:
    """A sample of the acknowledged messages is found by its unique id through the message index."""
    candidates = [ack for ack in acks if message_for(ack.seq).properties.get("UNIQ_KEY")]
    for ack in rng.sample(candidates, min(INDEX_SAMPLE, len(candidates))):
        unique_id = message_for(ack.seq).properties["UNIQ_KEY"]
        found = store.query_message_by_unique_id(ack.topic, unique_id)
        assert found is not None, f"message {ack.seq} (round {ack.round}) is not found by its unique id"
        assert found.physical_offset == ack.physical_offset


def check_store(store: MessageStore, acks: list[Ack]) -> None:
    report = store.recovery
    assert report is not None
    records, end = walk_commitlog(store)
    assert end == report.end_offset == store.commitlog.max_offset
    assert store.max_offset(HALF_ONLY_TOPIC, 0) == 0, "a half message was put into a ConsumeQueue"
    stored = decode_every_record(store, records)
    check_consume_queues(store, records)
    read_through_queues(store, stored)
    check_acknowledged(store, acks, stored)


def append_after_recovery(store: MessageStore, round_no: int) -> list[Ack]:
    """Append a few messages to the recovered store: they continue each queue and the log."""
    first = round_no * ROUND_SPAN + TEST_PRODUCER * PRODUCER_SPAN
    seqs = list(range(first, first + MESSAGES_APPENDED_BETWEEN_ROUNDS))
    messages = [message_for(seq) for seq in seqs]
    next_offsets = {(m.topic, m.queue_id): store.max_offset(m.topic, m.queue_id) for m in messages}
    end = store.commitlog.max_offset
    results = store.put(messages)
    acks: list[Ack] = []
    for result, seq, message in zip(results, seqs, messages, strict=True):
        assert result.status is PutStatus.PUT_OK
        key = (result.topic, result.queue_id)
        if not message.sysflag & SYSFLAG_TRANSACTION_PREPARED:
            assert result.queue_offset == next_offsets[key], f"{key} did not continue at its max offset"
            next_offsets[key] += 1
        position = end % COMMITLOG_FILE_SIZE
        if position + result.size + BLANK_MIN_SIZE > COMMITLOG_FILE_SIZE:
            end += COMMITLOG_FILE_SIZE - position
        assert result.physical_offset == end, "the log did not continue where recovery ended it"
        end += result.size
        acks.append(
            Ack(result.topic, result.queue_id, result.queue_offset, result.physical_offset, seq, round_no)
        )
    return acks


# -- the test --------------------------------------------------------------------------------------


def test_acknowledged_messages_survive_sigkill(tmp_path: Path) -> None:
    seed = int(os.environ.get("WHARF_CRASH_SEED") or random.SystemRandom().randrange(2**32))
    print(f"crash test seed {seed}: rerun with WHARF_CRASH_SEED={seed}")
    rng = random.Random(seed)
    # Its own generator, so that how many messages a round acknowledged cannot shift the kill times.
    sampler = random.Random(seed + 1)
    store_dir = tmp_path / "store"
    acks: list[Ack] = []
    for round_no in range(ROUNDS):
        run = run_child_until_killed(store_dir, round_no, seed, rng)
        acks.extend(run.acks)
        print(f"round {round_no}: {len(run.acks)} acknowledged, store opened: {run.opened}")
        if run.opened:
            assert (store_dir / "abort").exists(), "the killed process left no abort file"
        in_place = round_no % 2 == 0 or round_no == ROUNDS - 1
        checked_dir = store_dir if in_place else tmp_path / f"copy-{round_no}"
        if not in_place:
            shutil.copytree(store_dir, checked_dir)
        store = MessageStore(child_config(checked_dir)).open()
        try:
            assert store.recovery is not None
            if run.opened:
                assert not store.recovery.clean, "the abort file of the killed process was not seen"
            check_store(store, acks)
            check_index_sample(store, acks, sampler)
            if in_place:
                acks.extend(append_after_recovery(store, round_no))
        finally:
            store.close()
        if not in_place:
            shutil.rmtree(checked_dir)

    # The log now spans many segments and crashes; a clean reopen still holds every acknowledgement.
    with MessageStore(child_config(store_dir)) as store:
        assert store.recovery is not None and store.recovery.clean
        assert len(store.commitlog.files.files) > 1
        check_store(store, acks)
        check_index_sample(store, acks, sampler)
