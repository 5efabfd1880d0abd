"""The ACL file and its reloads: the last good rules, swapped for new ones when the file changes.

A request looks at the file at most once per check interval (one ``stat``): a new inode (an editor's
or ``mv``'s atomic rename), size, modification or change time means it is read again. A version that
does not parse, or cannot be read, leaves the last good rules in force and is logged once, with
the reason; the next change is read again.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from app.acl.rules import AclFileError, AclRules, load_rules

log = logging.getLogger(__name__)

Signature = tuple[int, int, int, int, int]  # device, inode, size, mtime ns, ctime ns


def file_signature(path: Path) -> Signature | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


class AclFile:
    """The rules in force. Raises AclFileError at construction when the file is not valid."""

    def __init__(
        self, path: Path, check_interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self.check_interval_s = check_interval_s
        self.clock = clock
        # The signature is taken before the read: a write racing the read changes it again.
        self._signature = file_signature(path)
        self.rules: AclRules = load_rules(path)
        self._checked_at = clock()
        self.reloads = 0
        self.last_error: str | None = None

    def current(self) -> AclRules:
        """The rules in force, read again first if the file changed and a check is due."""
        now = self.clock()
        if now - self._checked_at >= self.check_interval_s:
            self._checked_at = now
            self.reload_if_changed()
        return self.rules

    def reload_if_changed(self) -> bool:
        """Read the file again if it changed since the last look; True when new rules are in force."""
        signature = file_signature(self.path)
        if signature == self._signature:
            return False
        self._signature = signature
        try:
            rules = load_rules(self.path)
        except AclFileError as exc:
            self.last_error = str(exc)
            log.error("%s; the rules loaded before stay in force", exc)
            return False
        self.rules = rules
        self.reloads += 1
        self.last_error = None
        log.info(
            "ACL file %s reloaded: %d accounts, %d global white addresses",
            self.path,
            len(rules.accounts),
            len(rules.global_white),
        )
        return True
