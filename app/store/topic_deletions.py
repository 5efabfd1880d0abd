"""Deleted topics: the CommitLog offset below which a topic's records are dead.

Deleting a topic drops its ConsumeQueues at once, but its records stay in the CommitLog until
retention removes their segment. Without a mark, an unclean recovery that walks those records would
dispatch them again and a re-created topic would get the old messages back; lookups by key, unique id
or message id would find them too. So the deletion is recorded as a floor, the CommitLog's max
offset at the moment of deletion, in ``config/topicDeletions.json``::

    {"floors": {"orders": 1048576}}

Every record of ``orders`` below 1048576 is dead; a re-created ``orders`` writes above it. Deleting
again raises the floor. A floor at or below the CommitLog's min offset guards nothing any more and
is dropped at the next write. The file is written atomically (temporary file, fsync, rename).
"""

from __future__ import annotations

import json
from pathlib import Path

from app.store.atomic_file import write_atomically
from app.store.errors import StoreConfigError


class TopicDeletions:
    def __init__(self, path: Path) -> None:
        self.path = path
        # Replaced whole, never changed in place: readers on other threads need no lock.
        self.floors: dict[str, int] = {}

    def load(self) -> TopicDeletions:
        """Read the file if there is one; StoreConfigError if it is not a valid floor table."""
        if not self.path.exists():
            return self
        try:
            document = json.loads(self.path.read_bytes())
            floors = {str(topic): int(floor) for topic, floor in document["floors"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise StoreConfigError(f"{self.path} is not a valid topic deletion table: {error}") from error
        self.floors = floors
        return self

    def floor(self, topic: str) -> int:
        """The CommitLog offset below which ``topic``'s records are dead; 0 if never deleted."""
        return self.floors.get(topic, 0)

    def is_dead(self, topic: str, physical_offset: int) -> bool:
        floors = self.floors
        return bool(floors) and physical_offset < floors.get(topic, 0)

    def record(self, topic: str, floor: int, commitlog_min_offset: int) -> None:
        """Mark ``topic``'s records below ``floor`` dead, on disk before in memory."""
        floors = {name: offset for name, offset in self.floors.items() if offset > commitlog_min_offset}
        floors[topic] = max(floor, floors.get(topic, 0))
        write_atomically(self.path, json.dumps({"floors": floors}, indent=2, sort_keys=True).encode())
        self.floors = floors
