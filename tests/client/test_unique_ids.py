"""Message ids made without coordination: by the broker and by each client producer."""

from __future__ import annotations

from wharf_client.unique_ids import UniqueIdGenerator


def test_two_generators_of_one_process_in_one_millisecond_never_name_a_message_alike() -> None:
    """Same host, same process, same clock: the random salt alone keeps their ids apart."""
    first, second = UniqueIdGenerator(), UniqueIdGenerator()
    second.counter = first.counter
    ids = [first.next() for _ in range(2_000)] + [second.next() for _ in range(2_000)]
    assert len(set(ids)) == len(ids)
    assert all(len(unique_id) == 32 and unique_id == unique_id.upper() for unique_id in ids)
    int(ids[0], 16)
