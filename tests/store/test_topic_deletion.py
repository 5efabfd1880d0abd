"""Deleting a topic: its queues, its groups' offsets and its messages go, and stay gone - through a
reopen, an unclean recovery that walks the deleted records again, and a crash in the middle of the
deletion. A re-created topic starts empty. Also the walk the idempotency window is rebuilt from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from app.store import MessageStore
from app.store.checkpoint import Checkpoint
from app.store.consumer_offsets import ConsumerOffsetManager
from app.store.record_format import PROPERTY_KEYS, PROPERTY_UNIQ_KEY
from tests.store.conftest import StoreFactory, message

TOPIC = "orders"


def produce(store: MessageStore, count: int, prefix: str, topic: str = TOPIC) -> list[int]:
    """``count`` messages with unique ids and keys ``{prefix}{n}``; their CommitLog offsets."""
    results = store.put(
        [
            message(topic, f"{prefix}{n}".encode(), queue_id=n % 2, **{PROPERTY_UNIQ_KEY: f"{prefix}{n}"})
            for n in range(count)
        ]
    )
    return [result.physical_offset for result in results]


def bodies(store: MessageStore, topic: str = TOPIC) -> list[bytes]:
    return sorted(m.body for queue_id in (0, 1) for m in store.read_messages(topic, queue_id, 0, 100))


def checkpoint_before_everything(store_dir: Path) -> None:
    """Age the checkpoint so that an unclean recovery walks the log from its first record."""
    checkpoint = Checkpoint(store_dir / "checkpoint")
    checkpoint.commitlog_timestamp = checkpoint.consumequeue_timestamp = 1
    checkpoint.commitlog_offset = checkpoint.consumequeue_offset = 0  # no boundary known either
    checkpoint.flush()


def test_a_deleted_topic_is_recreated_empty_and_its_old_messages_are_not_found(
    make_store: StoreFactory,
) -> None:
    store = make_store()
    old = produce(store, 6, "old-")
    old_id = store.look_message(old[0])
    assert old_id is not None
    store.delete_topic(TOPIC)
    produce(store, 2, "new-")

    assert bodies(store) == [b"new-0", b"new-1"]
    assert store.max_offset(TOPIC, 0) == 1
    assert store.query_message_by_id(old_id.msg_id) is None
    assert store.query_message_by_unique_id(TOPIC, "old-0") is None
    assert store.query_message_by_key(TOPIC, "old-0") == []
    assert store.query_message_by_unique_id_at(TOPIC, "old-0", old[0]) is None
    assert store.query_message_by_unique_id(TOPIC, "new-0") is not None


def test_an_unclean_recovery_does_not_bring_back_a_deleted_topics_messages(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    store = make_store()
    produce(store, 20, "old-")  # several 4 KiB segments
    store.delete_topic(TOPIC)
    produce(store, 2, "new-")
    store.close()
    store_dir = store.config.store_dir
    checkpoint_before_everything(store_dir)
    (store_dir / "abort").touch()

    reopened = make_store(store_dir)
    assert reopened.recovery is not None and not reopened.recovery.clean
    assert reopened.recovery.start_offset == 0  # the deleted records were walked again
    assert reopened.recovery.records_checked == 22
    assert bodies(reopened) == [b"new-0", b"new-1"]
    assert reopened.query_message_by_unique_id(TOPIC, "old-3") is None


def test_the_deletion_survives_a_reopen_and_a_second_deletion_raises_the_floor(
    make_store: StoreFactory,
) -> None:
    store = make_store()
    first = produce(store, 3, "a-")
    store.delete_topic(TOPIC)
    second = produce(store, 3, "b-")
    store.delete_topic(TOPIC)
    produce(store, 1, "c-")
    store_dir = store.config.store_dir
    store.close()

    floors = json.loads((store_dir / "config" / "topicDeletions.json").read_text())["floors"]
    assert first[-1] < second[0] < floors[TOPIC]
    reopened = make_store(store_dir)
    assert reopened.deletions.floor(TOPIC) == floors[TOPIC]
    assert bodies(reopened) == [b"c-0"]
    assert reopened.query_message_by_unique_id(TOPIC, "b-0") is None


def test_deleting_a_topic_deletes_its_committed_offsets_on_disk(make_store: StoreFactory) -> None:
    store = make_store()
    produce(store, 4, "m-")
    produce(store, 4, "m-", topic="audit")
    store.consumer_offsets.commit("billing", TOPIC, 0, 2)
    store.consumer_offsets.commit("billing", "audit", 0, 1)
    store.consumer_offsets.persist()
    store.delete_topic(TOPIC)

    assert store.consumer_offsets.committed("billing", TOPIC, 0) == -1
    on_disk = ConsumerOffsetManager(store.config.consumer_offset_path)
    on_disk.load()
    assert [(e.group, e.topic, e.offset) for e in on_disk.all()] == [("billing", "audit", 1)]


def test_queues_a_crash_left_in_the_middle_of_a_deletion_are_removed_at_start(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    store = make_store()
    produce(store, 6, "old-")
    produce(store, 2, "keep-", topic="audit")
    store_dir = store.config.store_dir
    saved = tmp_path / "saved-queues"
    shutil.copytree(store_dir / "consumequeue" / TOPIC, saved)
    store.delete_topic(TOPIC)
    store.close()
    # The deletion was recorded, then the process died before the queue files went.
    shutil.copytree(saved, store_dir / "consumequeue" / TOPIC)

    reopened = make_store(store_dir)
    assert reopened.queue(TOPIC, 0) is None and reopened.queue(TOPIC, 1) is None
    assert not (store_dir / "consumequeue" / TOPIC).exists()
    assert bodies(reopened) == []
    assert bodies(reopened, "audit") == [b"keep-0", b"keep-1"]
    produce(reopened, 1, "new-")
    assert bodies(reopened) == [b"new-0"]


def test_records_since_walks_the_live_messages_stored_from_a_time(make_store: StoreFactory) -> None:
    store = make_store()
    produce(store, 5, "gone-")
    store.delete_topic(TOPIC)
    early = produce(store, 30, "early-", topic="audit")  # several segments
    late = produce(store, 3, "late-", topic="audit")
    late_ms = store.look_message(late[0]).store_timestamp  # type: ignore[union-attr]

    walked = [(offset, record.uniq_key) for offset, record in store.records_since(0)]
    assert walked == [(o, f"early-{n}") for n, o in enumerate(early)] + [
        (o, f"late-{n}") for n, o in enumerate(late)
    ]
    recent = [record.uniq_key for _, record in store.records_since(late_ms)]
    assert recent[-3:] == ["late-0", "late-1", "late-2"]
    assert all(record.store_timestamp >= late_ms for _, record in store.records_since(late_ms))
    assert list(store.records_since(late_ms + 60_000)) == []


def test_keys_of_a_deleted_topic_are_not_found_after_a_reopen(make_store: StoreFactory) -> None:
    store = make_store()
    store.put([message(TOPIC, b"x", **{PROPERTY_KEYS: "invoice-7"})])
    store.delete_topic(TOPIC)
    store_dir = store.config.store_dir
    store.close()
    reopened = make_store(store_dir)
    assert reopened.query_message_by_key(TOPIC, "invoice-7") == []


def test_a_unique_id_at_an_offset_must_be_that_records_topic_and_id(make_store: StoreFactory) -> None:
    store = make_store()
    offsets = produce(store, 2, "u-")
    assert store.query_message_by_unique_id_at(TOPIC, "u-0", offsets[0]) is not None
    assert store.query_message_by_unique_id_at(TOPIC, "u-0", offsets[1]) is None  # a digest collision
    assert store.query_message_by_unique_id_at("refunds", "u-0", offsets[0]) is None
    assert store.query_message_by_unique_id_at(TOPIC, "u-0", offsets[1] + 4096) is None
