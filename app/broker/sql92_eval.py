"""Evaluating SQL92 filter expressions (:mod:`app.broker.sql92`): the closures a compiled
expression is made of, with RocketMQ's semantics in three-valued logic. A predicate answers True,
False or None (unknown: a NULL or an uncomparable side); a message matches only on True. Nothing
here raises on odd property values: what cannot be compared is unknown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_INTEGER = re.compile(r"[+-]?[0-9]+")

Value = str | int | float | bool | None
Properties = dict[str, str]
# Evaluates to True, False or None (unknown).
Predicate = Callable[[Properties], bool | None]
Operand = Callable[[Properties], Value]


def to_number(text: str) -> int | float | None:
    if _INTEGER.fullmatch(text):
        return int(text)
    if _NUMBER.fullmatch(text):
        return float(text)
    return None


def _is_number(value: Value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _comparable(left: Value, right: Value) -> tuple[Value, Value] | None:
    """Both values of one type (numbers as numbers), or None when they cannot be compared."""
    if left is None or right is None:
        return None
    if isinstance(left, bool) or isinstance(right, bool):
        if isinstance(left, str):
            left = {"true": True, "false": False}.get(left.lower())
        if isinstance(right, str):
            right = {"true": True, "false": False}.get(right.lower())
        return (left, right) if isinstance(left, bool) and isinstance(right, bool) else None
    if _is_number(left) or _is_number(right):
        left = to_number(left) if isinstance(left, str) else left
        right = to_number(right) if isinstance(right, str) else right
        return (left, right) if left is not None and right is not None else None
    return left, right


MIRRORED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def property_test(name: str, operator: str, constant: Value) -> Predicate:
    """A property against a literal, the common case, with the literal's type settled once."""
    test = _TESTS[operator]
    if isinstance(constant, bool):
        wanted = constant

        def against_boolean(properties: Properties) -> bool | None:
            found = properties.get(name)
            if found is None:
                return None
            value = _BOOLEANS.get(found.lower())
            return None if value is None else test(value, wanted)

        return against_boolean
    if isinstance(constant, int | float):
        number = constant

        def against_number(properties: Properties) -> bool | None:
            found = properties.get(name)
            value = to_number(found) if found is not None else None
            return None if value is None else test(value, number)

        return against_number
    text = constant

    def against_string(properties: Properties) -> bool | None:
        found = properties.get(name)
        return None if found is None else test(found, text)

    return against_string


_BOOLEANS = {"true": True, "false": False}


def comparison(left: Operand, operator: str, right: Operand) -> Predicate:
    equality = operator in ("=", "<>")
    test = _TESTS[operator]

    def compare(properties: Properties) -> bool | None:
        pair = _comparable(left(properties), right(properties))
        if pair is None:
            return None
        a, b = pair
        if not equality and not (_is_number(a) and _is_number(b)):
            # Strings (two properties) are ordered only when both are numbers; booleans never.
            if not isinstance(a, str) or not isinstance(b, str):
                return None
            a, b = to_number(a), to_number(b)
            if a is None or b is None:
                return None
        return test(a, b)

    return compare


_TESTS: dict[str, Callable[[object, object], bool]] = {
    "=": lambda a, b: a == b,
    "<>": lambda a, b: a != b,
    "<": lambda a, b: a < b,  # type: ignore[operator]
    "<=": lambda a, b: a <= b,  # type: ignore[operator]
    ">": lambda a, b: a > b,  # type: ignore[operator]
    ">=": lambda a, b: a >= b,  # type: ignore[operator]
}


def membership(value: Operand, choices: frozenset[str]) -> Predicate:
    def member(properties: Properties) -> bool | None:
        found = value(properties)
        return found in choices if isinstance(found, str) else None

    return member


def negation_of(predicate: Predicate) -> Predicate:
    def negation(properties: Properties) -> bool | None:
        value = predicate(properties)
        return None if value is None else not value

    return negation


def all_of(predicates: Iterable[Predicate]) -> Predicate:
    """AND: false as soon as one part is false; else unknown if one is unknown."""
    return _logic(tuple(predicates), deciding=False)


def any_of(predicates: Iterable[Predicate]) -> Predicate:
    """OR: true as soon as one part is true; else unknown if one is unknown."""
    return _logic(tuple(predicates), deciding=True)


def _logic(parts: tuple[Predicate, ...], deciding: bool) -> Predicate:
    def combined(properties: Properties) -> bool | None:
        unknown = False
        for predicate in parts:
            value = predicate(properties)
            if value is deciding:
                return deciding
            unknown = unknown or value is None
        return None if unknown else not deciding

    return combined
