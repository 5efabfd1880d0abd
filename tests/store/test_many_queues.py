"""Many more ConsumeQueues than the store may keep open: a bounded cache of mapped segments.

The store is given a cache of 16 mapped ConsumeQueue segments and 500 queues (250 topics x 2), each
of several segments; it produces to and pulls from every one, restarts (cleanly and after SIGKILL)
and reads everything back, while the process's descriptors and mappings stay bounded. A batch that
cannot open a queue's segment for want of descriptors is refused whole: nothing of it is served.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store import Message, MessageStore
from app.store.errors import ResourceExhaustedError
from app.store.record import decode_record
from tests.store.conftest import StoreFactory

TOPICS = 250
QUEUES = 2
ROUNDS = 12  # messages per queue: 1.5 segments of 8 entries
CACHE = 16
ROOT = Path(__file__).resolve().parents[2]


def open_fds(under: Path | None = None) -> int:
    """Descriptors this process holds (only those of files under ``under``, if given)."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except FileNotFoundError:  # the one listdir used
            continue
        count += under is None or target.startswith(str(under))
    return count


def mappings(under: Path) -> int:
    """Memory mappings of files under ``under``."""
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if str(under) in line)


def keys() -> Iterator[tuple[str, int]]:
    for topic in range(TOPICS):
        for queue_id in range(QUEUES):
            yield f"t{topic}", queue_id


def produce_all(store: MessageStore) -> None:
    """ROUNDS messages to every queue, in batches that each touch ten queues."""
    every = list(keys())
    for round_number in range(ROUNDS):
        for start in range(0, len(every), 10):
            batch = [
                Message(topic, f"{topic}/{queue_id}/{round_number}".encode(), queue_id=queue_id)
                for topic, queue_id in every[start : start + 10]
            ]
            store.append(batch)


def check_all(store: MessageStore) -> None:
    for topic, queue_id in keys():
        assert store.max_offset(topic, queue_id) == ROUNDS
        bodies: list[bytes] = []
        offset = 0
        while len(bodies) < ROUNDS + 1:  # one more than there is: nothing must follow
            result = store.get_message(topic, queue_id, offset, ROUNDS)
            if not result.records:
                break
            bodies += [decode_record(record).body for record in result.records]
            offset = result.next_offset
        assert bodies == [f"{topic}/{queue_id}/{n}".encode() for n in range(ROUNDS)], (topic, queue_id)


def test_descriptors_and_mappings_stay_bounded_across_500_queues(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    store_dir = tmp_path / "store"
    store = make_store(store_dir, max_mapped_segments=CACHE, message_index_enable=False)
    produce_all(store)
    check_all(store)
    assert len(store.segment_cache) <= CACHE
    commitlog_files = len(store.commitlog.files.files) + len(store.commitlog.files.prepared)
    # One descriptor and one mapping per mapped file; a few descriptors more: the directory lock,
    # and files a flush or a checkpoint write has open for a moment.
    bound = CACHE + commitlog_files + 4
    assert open_fds(store_dir) <= bound
    assert mappings(store_dir) <= bound
    store.close()

    store = make_store(store_dir, max_mapped_segments=CACHE, message_index_enable=False)
    assert len(store.segment_cache) == 0  # a start maps no queue
    check_all(store)
    assert len(store.segment_cache) <= CACHE
    assert open_fds(store_dir) <= bound
    assert mappings(store_dir) <= bound


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from tests.store.test_many_queues import produce_all
    from tests.store.conftest import tiny_config
    from app.store import MessageStore

    store = MessageStore(tiny_config(Path(sys.argv[1]), max_mapped_segments=16, message_index_enable=False))
    store.open()
    produce_all(store)
    print("written", flush=True)
    sys.stdin.read()  # until killed
    """
)


@pytest.mark.crash
def test_500_queues_read_back_after_sigkill(make_store: StoreFactory, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(store_dir)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"written\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    store = make_store(store_dir, max_mapped_segments=CACHE, message_index_enable=False)
    assert store.recovery is not None and not store.recovery.clean
    check_all(store)
    assert len(store.segment_cache) <= CACHE


def test_a_batch_that_cannot_open_a_queue_segment_is_refused_whole(make_store: StoreFactory) -> None:
    store = make_store(max_mapped_segments=CACHE, message_index_enable=False)
    store.append([Message("old", b"x", queue_id=q) for q in range(4)])
    end = store.commitlog.max_offset
    # Three queues that have a segment, then one whose first segment needs a descriptor.
    batch = [Message("old", b"a", queue_id=q) for q in range(3)] + [Message("new", b"b", queue_id=0)]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    spent: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds() + 64, hard))
    try:
        while True:  # take every descriptor left
            try:
                spent.append(os.open("/dev/null", os.O_RDONLY))
            except OSError:
                break
        with pytest.raises(ResourceExhaustedError):
            store.append(batch)
    finally:
        for fd in spent:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert store.commitlog.max_offset == end
    for queue_id in range(3):
        assert [m.body for m in store.read_messages("old", queue_id, 0)] == [b"x"]
    assert store.read_messages("new", 0, 0) == []
    # The refused batch took no queue offsets: the next one starts where the first left off.
    results = store.append(batch)
    assert [r.queue_offset for r in results] == [1, 1, 1, 0]
    assert [m.body for m in store.read_messages("new", 0, 0)] == [b"b"]


def test_idle_queues_are_unmapped_and_mapped_again_on_the_next_read(make_store: StoreFactory) -> None:
    store = make_store(max_mapped_segments=4, message_index_enable=False)
    for queue_id in range(8):
        store.append([Message("t", b"m%d" % queue_id, queue_id=queue_id)])
    assert len(store.segment_cache) <= 4
    for queue_id in range(8):
        assert [m.body for m in store.read_messages("t", queue_id, 0)] == [b"m%d" % queue_id]
    assert len(store.segment_cache) <= 4
    assert store.segment_cache.unmaps >= 4
