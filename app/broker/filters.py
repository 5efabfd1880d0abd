"""A consumer's filter: a tag expression (the default) or a SQL92 expression, and the store's
:class:`~app.store.filter.MessageFilter` it compiles to.

Pulls, pops and WebSocket subscribers name one with ``filter_type`` (``tag`` or ``sql92``) and
the expression; a group member's subscription carries one per topic.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.broker.errors import InvalidFilterExpressionError, InvalidParameterError
from app.broker.sql92 import Sql92Error, compile_sql92
from app.store import MessageFilter, TagFilter

TAG = "tag"
SQL92 = "sql92"
FILTER_TYPES = (TAG, SQL92)


@dataclass(frozen=True, slots=True)
class FilterExpression:
    """What a consumer asks for: ``type`` is ``tag`` or ``sql92``."""

    type: str
    expression: str

    @classmethod
    def tags(cls, expression: str = "*") -> FilterExpression:
        return cls(TAG, expression)

    def compile(self) -> MessageFilter | None:
        """The filter, None for every message. A tag expression that does not parse raises the
        store's FilterExpressionError (40004), a SQL92 one InvalidFilterExpressionError (40015)."""
        if self.type == TAG:
            return TagFilter.parse(self.expression)
        if self.type != SQL92:
            raise InvalidParameterError(
                f"filter_type must be one of {', '.join(FILTER_TYPES)}, not {self.type!r}"
            )
        try:
            return compile_sql92(self.expression)
        except Sql92Error as exc:
            raise InvalidFilterExpressionError(f"SQL92 filter, {exc}", exc.line, exc.column) from None


def filter_of(filter_type: str | None, expression: str | None, tags: str | None = None) -> FilterExpression:
    """The filter a request's parameters name: ``filter_type`` (default ``tag``) with ``filter``
    as the expression; for tags, ``tags`` may give it instead."""
    kind = (filter_type or TAG).lower()
    if kind not in FILTER_TYPES:
        raise InvalidParameterError(
            f"filter_type must be one of {', '.join(FILTER_TYPES)}, not {filter_type!r}"
        )
    if kind == SQL92:
        if tags is not None:
            raise InvalidParameterError("filter_type=sql92 takes its expression in filter, not tags")
        if not expression or not expression.strip():
            raise InvalidParameterError("filter_type=sql92 needs a filter expression")
        return FilterExpression(SQL92, expression)
    if tags is not None and expression is not None:
        raise InvalidParameterError("give the tag expression in tags or in filter, not both")
    return FilterExpression.tags(tags if tags is not None else expression or "*")


def compile_filter(
    filter_type: str | None, expression: str | None, tags: str | None = None
) -> MessageFilter | None:
    """:func:`filter_of`, compiled."""
    return filter_of(filter_type, expression, tags).compile()
