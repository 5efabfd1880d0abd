"""Tag filter expressions: "TagA || TagB", "*" or nothing for every message.

The ConsumeQueue keeps each message's tag hash, so most non-matching messages are skipped without
reading the CommitLog; a hash match is then confirmed against the record's real tags.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.store.record_format import tags_hash

MAX_EXPRESSION_LENGTH = 4096


class FilterExpressionError(ValueError):
    """The expression is not a valid tag filter."""


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
