"""What a read keeps: the :class:`MessageFilter` interface and the tag filter.

A read asks a filter twice. First on the ConsumeQueue entry's tag hash (``codes``: the hashes a
matching message may have; None when any may), so that most non-matching messages are skipped
without reading the CommitLog; then on the record itself (:meth:`MessageFilter.matches_record`),
which confirms a hash match against the real tags or evaluates an expression over the properties.

Tag expressions: "TagA || TagB", "*" or nothing for every message. SQL92 expressions over message
properties are compiled by the broker (:mod:`app.broker.sql92`) into another MessageFilter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.store.record import record_tags
from app.store.record_format import tags_hash

MAX_EXPRESSION_LENGTH = 4096


class FilterExpressionError(ValueError):
    """The expression is not a valid tag filter."""


class MessageFilter(Protocol):
    """Which messages a read hands out."""

    @property
    def codes(self) -> frozenset[int] | None:
        """The tag hashes a matching message may have; None when a message with any may match."""

    def matches_record(self, record: memoryview) -> bool:
        """Whether the stored record matches. Never raises, whatever the record holds."""


@dataclass(frozen=True, slots=True)
class TagFilter:
    tags: frozenset[str]
    codes: frozenset[int]

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter | None:
        """None for "match everything" ("*", empty or None); otherwise the filter."""
        if expression is None:
            return None
        expression = expression.strip()
        if not expression or expression == "*":
            return None
        if len(expression) > MAX_EXPRESSION_LENGTH:
            raise FilterExpressionError(f"tag expression is longer than {MAX_EXPRESSION_LENGTH} characters")
        tags = set()
        for part in expression.split("||"):
            tag = part.strip()
            if not tag:
                raise FilterExpressionError(f"empty tag in expression {expression!r}")
            if tag == "*":
                return None
            tags.add(tag)
        return cls(frozenset(tags), frozenset(tags_hash(tag) for tag in tags))

    def matches_code(self, tags_code: int) -> bool:
        return tags_code in self.codes

    def matches(self, tags: str) -> bool:
        return tags in self.tags

    def matches_record(self, record: memoryview) -> bool:
        return record_tags(record) in self.tags
