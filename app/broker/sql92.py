"""SQL92 filter expressions over message properties, as RocketMQ's ``MessageSelector.bySql``.

    region = 'eu' AND (price BETWEEN 10 AND 99.5 OR vip IS NOT NULL) AND TAGS IN ('a', 'b')

The grammar (lark, LALR) has comparisons ``= <> < <= > >=``, ``[NOT] BETWEEN x AND y``,
``[NOT] IN ('s', ...)``, ``IS [NOT] NULL``, ``AND``, ``OR``, ``NOT``, parentheses, string literals in
single quotes (``''`` is a quote), numbers (``10``, ``-2.5``, ``1e3``) and ``TRUE``/``FALSE``.
Keywords are case-insensitive and reserved; property names are case-sensitive. ``TAGS`` is the
message's tag.

Semantics (RocketMQ's, with three-valued logic):

- A property is a string, or NULL when the message does not have it. A comparison with a NULL
  side is unknown; ``NOT`` unknown is unknown, ``FALSE AND`` unknown is false, ``TRUE OR`` unknown is
  true; a message matches only when the whole expression is true.
- Numbers compare as numbers: a property compared with a number is read as one (``'10' > 9``); one
  that is not a number makes the comparison unknown. ``<``, ``<=``, ``>``, ``>=`` and ``BETWEEN``
  take numbers (two properties compare as numbers when both are); a string literal there is a
  parse error. ``=`` and ``<>`` between strings compare the text.
- A property compared with ``TRUE``/``FALSE`` holds "true" or "false" (any case).
- ``IN`` takes string literals.

:func:`compile_sql92` parses an expression once (compiled expressions are cached, bounded) into a
:class:`Sql92Filter`, the store's :class:`~app.store.filter.MessageFilter`. Cheap checks come first:
when the expression can only be true for some tags (``TAGS = 'a' AND ...``, ``TAGS IN (...)``),
those tags' hashes prefilter the ConsumeQueue entries; a record whose encoded properties lack a
``name=value`` pair that a top-level ``name = 'value'`` needs is passed over undecoded. Records that
pass have their properties decoded and the expression evaluated (:mod:`app.broker.sql92_eval`);
evaluation never raises.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from lark import Lark, Token, Transformer_NonRecursive, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput
from lark.exceptions import VisitError

from app.broker.sql92_eval import (
    MIRRORED,
    Operand,
    Predicate,
    Properties,
    Value,
    all_of,
    any_of,
    comparison,
    membership,
    negation_of,
    property_test,
    to_number,
)
from app.store.record import record_property_bytes
from app.store.record_format import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    decode_properties,
    tags_hash,
)

MAX_EXPRESSION_LENGTH = 4096
# Parentheses and NOT nest at most this deep (evaluation recurses once per level).
MAX_NESTING = 64
# Compiled expressions kept (the least recently used go first).
CACHE_SIZE = 1024

GRAMMAR = r"""
?start: disjunction

?disjunction: conjunction (_OR conjunction)*
?conjunction: negation (_AND negation)*
?negation: predicate
    | NOT negation                                -> not_

?predicate: operand COMPARATOR operand            -> compare
    | operand BETWEEN operand _AND operand        -> between
    | operand NOT BETWEEN operand _AND operand    -> not_between
    | operand IN "(" STRING ("," STRING)* ")"     -> in_
    | operand NOT IN "(" STRING ("," STRING)* ")" -> not_in
    | operand IS NULL                             -> is_null
    | operand IS NOT NULL                         -> is_not_null
    | BOOLEAN                                     -> boolean
    | "(" disjunction ")"                         -> group

?operand: IDENTIFIER                              -> property
    | STRING                                      -> string
    | NUMBER                                      -> number
    | BOOLEAN                                     -> boolean_value

_OR.2: /or\b/i
_AND.2: /and\b/i
NOT.2: /not\b/i
BETWEEN.2: /between\b/i
IN.2: /in\b/i
IS.2: /is\b/i
NULL.2: /null\b/i
BOOLEAN.2: /(true|false)\b/i
COMPARATOR: "<>" | "<=" | ">=" | "=" | "<" | ">"
IDENTIFIER: /[A-Za-z_$][A-Za-z0-9_$.]*/
STRING: /'(?:[^']|'')*'/
NUMBER: /[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?/

%import common.WS
%ignore WS
"""

# The basic lexer keeps keywords reserved: NULL is never a property name, wherever it stands.
_PARSER = Lark(GRAMMAR, parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=False)

# What a parse error names instead of a terminal's name.
_TERMINALS = {
    "_OR": "OR",
    "_AND": "AND",
    "LPAR": "'('",
    "RPAR": "')'",
    "COMMA": "','",
    "$END": "the end",
    "COMPARATOR": "a comparison (= <> < <= > >=)",
    "IDENTIFIER": "a property name",
    "STRING": "a string in single quotes",
    "NUMBER": "a number",
    "BOOLEAN": "TRUE or FALSE",
}


class Sql92Error(ValueError):
    """An expression that does not parse; ``line`` and ``column`` (from 1) say where."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.reason = message
        self.line = line
        self.column = column


@dataclass(frozen=True, slots=True)
class Sql92Filter:
    """A compiled expression: a :class:`~app.store.filter.MessageFilter`."""

    expression: str
    codes: frozenset[int] | None
    predicate: Predicate
    # Encoded ``name=value`` pairs a match must hold (from ``name = 'value'`` conditions it needs):
    # a record without one of them is passed over before its properties are decoded.
    needles: tuple[bytes, ...] = ()

    def matches(self, properties: Properties) -> bool:
        """Whether a message with these properties (its tag under TAGS) matches."""
        try:
            return self.predicate(properties) is True
        except Exception:  # an odd value the checks did not foresee is no match, never a fault
            return False

    def matches_record(self, record: memoryview) -> bool:
        try:
            raw = record_property_bytes(record)
            if self.needles:
                # Each needle ends in a separator, which RocketMQ 4.9.1+ leaves out after the last
                # property (Wharf's records keep it: no copy for them).
                padded = raw if raw.endswith(b"\x02") else raw + b"\x02"
                for needle in self.needles:
                    if needle not in padded:
                        return False
            properties = decode_properties(raw)
        except (UnicodeDecodeError, ValueError, IndexError):
            return False
        return self.matches(properties)


def compile_sql92(expression: str) -> Sql92Filter:
    """The filter for ``expression``; Sql92Error says what does not parse and where."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise Sql92Error(f"the expression is longer than {MAX_EXPRESSION_LENGTH} characters", 1, 1)
    return _compile(expression)


@functools.lru_cache(maxsize=CACHE_SIZE)
def _compile(expression: str) -> Sql92Filter:
    try:
        tree = _PARSER.parse(expression)
    except UnexpectedInput as exc:
        raise _syntax_error(expression, exc) from None
    try:
        node = _Compiler().transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, Sql92Error):
            raise exc.orig_exc from None
        raise
    if not isinstance(node, _Node):  # a lone operand: the grammar does not produce one
        raise Sql92Error("the expression is not a condition", 1, 1)
    tags = node.tags
    codes = frozenset(tags_hash(tag) for tag in tags) if tags is not None else None
    return Sql92Filter(expression, codes, node.predicate, tuple(sorted(node.needles)))


def _syntax_error(expression: str, exc: UnexpectedInput) -> Sql92Error:
    if isinstance(exc, UnexpectedCharacters):
        return Sql92Error(f"unexpected character {exc.char!r}", max(exc.line, 1), max(exc.column, 1))
    expected = sorted({_TERMINALS.get(name, name) for name in getattr(exc, "expected", None) or ()})
    hint = f"; expected {', '.join(expected)}" if expected else ""
    token = getattr(exc, "token", None)
    if isinstance(exc, UnexpectedEOF) or token is None or token.type == "$END":
        lines = expression.split("\n")
        return Sql92Error(f"the expression ends too early{hint}", len(lines), len(lines[-1]) + 1)
    return Sql92Error(f"unexpected {str(token)!r}{hint}", max(exc.line, 1), max(exc.column, 1))


# -- compiling the parse tree into closures ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Node:
    """A compiled condition: its predicate, how deep it nests, the tags it needs (None: any), and
    the encoded properties it needs."""

    predicate: Predicate
    depth: int = 1
    tags: frozenset[str] | None = None
    needles: frozenset[bytes] = frozenset()


@dataclass(frozen=True, slots=True)
class _Operand:
    evaluate: Operand
    kind: str  # "property", "string", "number", "boolean"
    token: Token
    constant: Value = None

    def is_tags(self) -> bool:
        return self.kind == "property" and self.token == PROPERTY_TAGS


def _nested(token_or_node: object, depth: int) -> int:
    if depth > MAX_NESTING:
        line = getattr(token_or_node, "line", 1) or 1
        column = getattr(token_or_node, "column", 1) or 1
        raise Sql92Error(f"the expression nests deeper than {MAX_NESTING} levels", line, column)
    return depth


class _Compiler(Transformer_NonRecursive[Token, object]):
    # -- operands

    def property(self, children: list[Token]) -> _Operand:
        (token,) = children
        name = str(token)
        return _Operand(lambda properties: properties.get(name), "property", token)

    def string(self, children: list[Token]) -> _Operand:
        (token,) = children
        value = token[1:-1].replace("''", "'")
        return _Operand(lambda _: value, "string", token, value)

    def number(self, children: list[Token]) -> _Operand:
        (token,) = children
        value = to_number(str(token))
        return _Operand(lambda _: value, "number", token, value)

    def boolean_value(self, children: list[Token]) -> _Operand:
        (token,) = children
        value = token.lower() == "true"
        return _Operand(lambda _: value, "boolean", token, value)

    # -- conditions

    def boolean(self, children: list[Token]) -> _Node:
        (token,) = children
        value = token.lower() == "true"
        return _Node(lambda _: value)

    def group(self, children: list[_Node]) -> _Node:
        (node,) = children
        return _Node(node.predicate, _nested(node, node.depth + 1), node.tags, node.needles)

    def not_(self, children: list[object]) -> _Node:
        token, node = children
        assert isinstance(node, _Node)
        return _Node(negation_of(node.predicate), _nested(token, node.depth + 1))

    def disjunction(self, children: list[_Node]) -> _Node:
        tags: frozenset[str] | None = frozenset()
        for node in children:
            tags = None if tags is None or node.tags is None else tags | node.tags
        return _Node(any_of([node.predicate for node in children]), max(n.depth for n in children) + 1, tags)

    def conjunction(self, children: list[_Node]) -> _Node:
        tags: frozenset[str] | None = None
        for node in children:
            if node.tags is not None:
                tags = node.tags if tags is None else tags & node.tags
        needles = frozenset().union(*(node.needles for node in children))
        depth = max(node.depth for node in children) + 1
        return _Node(all_of([node.predicate for node in children]), depth, tags, needles)

    def compare(self, children: list[object]) -> _Node:
        left, operator, right = children
        assert isinstance(left, _Operand) and isinstance(right, _Operand) and isinstance(operator, Token)
        op = str(operator)
        if op not in ("=", "<>"):
            _check_ordered(left, op)
            _check_ordered(right, op)
        if left.kind != "property" and right.kind == "property":
            left, right, op = right, left, MIRRORED[op]
        if left.kind == "property" and right.kind != "property":
            predicate = property_test(str(left.token), op, right.constant)
        else:
            predicate = comparison(left.evaluate, op, right.evaluate)
        tags: frozenset[str] | None = None
        needles: frozenset[bytes] = frozenset()
        if op == "=" and left.kind == "property" and right.kind == "string":
            value = str(right.constant)
            tags = frozenset([value]) if left.is_tags() else None
            if NAME_VALUE_SEPARATOR not in value and PROPERTY_SEPARATOR not in value:
                needles = frozenset(
                    [f"{left.token}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}".encode()]
                )
        return _Node(predicate, tags=tags, needles=needles)

    def between(self, children: list[object]) -> _Node:
        value, _, low, high = children
        return _Node(self._between(value, low, high))

    def not_between(self, children: list[object]) -> _Node:
        value, _, _, low, high = children
        return _Node(negation_of(self._between(value, low, high)))

    def _between(self, value: object, low: object, high: object) -> Predicate:
        assert isinstance(value, _Operand) and isinstance(low, _Operand) and isinstance(high, _Operand)
        for operand in (value, low, high):
            _check_ordered(operand, "BETWEEN")
        return all_of(
            [
                comparison(value.evaluate, ">=", low.evaluate),
                comparison(value.evaluate, "<=", high.evaluate),
            ]
        )

    def in_(self, children: list[object]) -> _Node:
        value, _, *strings = children
        assert isinstance(value, _Operand)
        choices = frozenset(str(token)[1:-1].replace("''", "'") for token in strings)
        return _Node(membership(value.evaluate, choices), tags=choices if value.is_tags() else None)

    def not_in(self, children: list[object]) -> _Node:
        value, _, _, *strings = children
        assert isinstance(value, _Operand)
        choices = frozenset(str(token)[1:-1].replace("''", "'") for token in strings)
        return _Node(negation_of(membership(value.evaluate, choices)))

    def is_null(self, children: list[object]) -> _Node:
        value = children[0]
        assert isinstance(value, _Operand)
        evaluate = value.evaluate
        return _Node(lambda properties: evaluate(properties) is None)

    def is_not_null(self, children: list[object]) -> _Node:
        value = children[0]
        assert isinstance(value, _Operand)
        evaluate = value.evaluate
        return _Node(lambda properties: evaluate(properties) is not None)


def _check_ordered(operand: _Operand, operator: str) -> None:
    """``<``, ``>``, ... and BETWEEN compare numbers: a string or boolean literal there is an error."""
    if operand.kind in ("string", "boolean"):
        token = operand.token
        raise Sql92Error(
            f"{operator} compares numbers, not the {operand.kind} {str(token)!r}",
            token.line or 1,
            token.column or 1,
        )
