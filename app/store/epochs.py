"""The epoch log: which master wrote which stretch of the CommitLog (RocketMQ 5's EpochFile).

Each entry is ``(epoch, start offset)``: from that CommitLog offset on, the log was written by the
master of that epoch, until the next entry's start. A master that takes office appends its epoch at
its log's end; a slave copies its master's entries. Two logs agree up to the point
:func:`common_point` finds: the end of the last epoch both hold with the same start, cut at the
shorter of the two. A slave whose log goes past that point holds bytes the master never had (a
former master's tail the new master lacks) and must cut them before it appends.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from app.store.atomic_file import write_atomically

Epoch = tuple[int, int]  # (epoch, CommitLog offset where it starts)

# A store with no epoch file: everything it holds was written in epoch 0.
FIRST: tuple[Epoch, ...] = ((0, 0),)


class EpochLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[Epoch] = list(FIRST)
        if path.exists():
            loaded = json.loads(path.read_bytes())
            self.entries = [(int(epoch), int(start)) for epoch, start in loaded] or list(FIRST)

    @property
    def last(self) -> int:
        return self.entries[-1][0]

    def begin(self, epoch: int, start: int) -> None:
        """This broker is the master of ``epoch`` from CommitLog offset ``start`` on."""
        if epoch < self.last:
            raise ValueError(f"epoch {epoch} is older than this log's epoch {self.last}")
        entries = [entry for entry in self.entries if entry[0] < epoch]
        self.replace([*entries, (epoch, start)])

    def replace(self, entries: Sequence[Epoch]) -> None:
        """Take a master's entries as they are (a slave follows its master's history)."""
        self.entries = [(int(epoch), int(start)) for epoch, start in entries] or list(FIRST)
        write_atomically(self.path, json.dumps(self.entries).encode())


def common_point(master: Sequence[Epoch], master_end: int, slave: Sequence[Epoch], slave_end: int) -> int:
    """The CommitLog offset up to which a slave's log (``slave`` entries, ending at
    ``slave_end``) is certainly the master's: the end of the last epoch both started at the same
    offset, where each log's epoch ends at its next entry's start or at the log's end."""
    master_starts = dict(master)
    for index in range(len(slave) - 1, -1, -1):
        epoch, start = slave[index]
        if master_starts.get(epoch) != start:
            continue
        slave_epoch_end = slave[index + 1][1] if index + 1 < len(slave) else slave_end
        later = [begin for other, begin in master if other > epoch]
        master_epoch_end = min(later) if later else master_end
        return min(slave_epoch_end, master_epoch_end, slave_end)
    return 0
