"""Faults raised by the store. Normal outcomes (an empty queue, an offset past the end) are
results, not errors: see :class:`app.store.results.GetMessageStatus`.

Exception tree::

    StoreError
    ├── MessageRejectedError          the message breaks a limit; nothing was stored
    │   ├── EmptyBodyError
    │   ├── MessageTooLargeError
    │   ├── InvalidTopicError
    │   ├── PropertiesTooLargeError
    │   └── InvalidQueueError
    ├── CorruptRecordError            bytes on disk that are not a valid record
    ├── DiskFullError                 writes refused until the disk has room again
    ├── ResourceExhaustedError        out of file descriptors or mappings; nothing was stored
    ├── StoreClosedError              the store is not open
    ├── StoreConfigError              files on disk disagree with the configuration
    └── StoreLockedError              another process has the store directory open
"""

from __future__ import annotations

import errno

# errno values of a write or an allocation that mean DiskFullError: no room on the disk, or in the
# user's quota.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
# errno values of an open or a mapping that mean ResourceExhaustedError: the process or the system
# is out of file descriptors, or of mappings (ENOMEM from mmap past vm.max_map_count).
NO_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


class StoreError(Exception):
    """Base class of every fault the store raises."""


class MessageRejectedError(StoreError):
    """The message breaks one of the store's limits; nothing was stored."""


class EmptyBodyError(MessageRejectedError):
    pass


class MessageTooLargeError(MessageRejectedError):
    pass


class InvalidTopicError(MessageRejectedError):
    pass


class PropertiesTooLargeError(MessageRejectedError):
    pass


class InvalidQueueError(MessageRejectedError):
    pass


class CorruptRecordError(StoreError):
    """A record whose magic, size, offsets or CRC do not check out."""


class DiskFullError(StoreError):
    """The store's disk is over the refuse-writes ratio, or has no room for a new file; nothing of
    the refused write was stored, and reads keep working."""


class ResourceExhaustedError(StoreError):
    """A file could not be opened or mapped: the process is out of file descriptors or of
    mappings. A write refused for it stored nothing; it can be retried."""


class StoreClosedError(StoreError):
    pass


class StoreConfigError(StoreError):
    pass


class ReplicaReadOnlyError(StoreError):
    """The store is a slave's copy of its master's CommitLog: only replicated bytes are written to
    it, so that it stays byte for byte the master's."""


class StoreLockedError(StoreError):
    """Another process holds the store directory's lock."""
