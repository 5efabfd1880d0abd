"""A push subscription's fields as PUT takes them: defaults, bounds, the secret (made once, kept on a
change), filters, and the registry's file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.broker.errors import BadRequestError, InvalidParameterError
from app.push.registry import PushRegistry
from app.push.signing import secret_key
from app.push.subscription import PushFilter, generate_secret, parse_subscription

BASE = {"topic": "orders", "url": "https://example.com/hook"}


def test_the_defaults_are_the_issues() -> None:
    subscription, made = parse_subscription("billing", dict(BASE), None)
    assert made
    assert subscription.as_json() == {
        "group": "billing",
        "topic": "orders",
        "url": "https://example.com/hook",
        "filter": None,
        "ordered": False,
        "max_in_flight": 16,
        "batch": 1,
        "timeout_ms": 10_000,
        "max_reconsume_times": 16,
        "paused": False,
        "format": "raw",
    }
    assert subscription.secret.startswith("whsec_") and len(secret_key(subscription.secret)) == 24


def test_a_change_keeps_the_secret_and_a_given_one_replaces_it() -> None:
    kept = generate_secret()
    subscription, made = parse_subscription("billing", dict(BASE), kept)
    assert (subscription.secret, made) == (kept, False)
    given = generate_secret()
    subscription, made = parse_subscription("billing", BASE | {"secret": given}, kept)
    assert (subscription.secret, made) == (given, False)


def test_filters() -> None:
    assert parse_subscription("g", BASE | {"filter": {"tags": "a || b"}}, None)[0].filter == PushFilter(
        tags="a || b"
    )
    assert parse_subscription("g", BASE | {"filter": {"sql92": "x > 1"}}, None)[0].filter == PushFilter(
        sql92="x > 1"
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"topic": ""},
        {"url": ""},
        {"max_in_flight": 0},
        {"max_in_flight": 1025},
        {"batch": True},
        {"timeout_ms": 99},
        {"max_reconsume_times": -1},
        {"ordered": "yes"},
        {"secret": "whsec_!!!"},
        {"secret": "whsec_" + "QUFB" * 2},  # 6 bytes
        {"secret": "sk_" + "QUFB" * 8},
        {"filter": {"tags": "a", "sql92": "b"}},
        {"filter": {"regex": "a"}},
        {"filter": {"tags": " "}},
    ],
)
def test_bad_fields_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(InvalidParameterError):
        parse_subscription("g", BASE | fields, None)


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(BadRequestError):
        parse_subscription("g", BASE | {"retries": 3}, None)


def test_the_registry_keeps_subscriptions_with_their_secrets_readable_by_the_owner_only(
    tmp_path: Path,
) -> None:
    registry = PushRegistry(tmp_path)
    first, _ = parse_subscription("a", BASE | {"filter": {"tags": "x"}, "ordered": True}, None)
    second, _ = parse_subscription("b", dict(BASE), None)
    registry.put(first)
    registry.put(second)
    assert os.stat(registry.path).st_mode & 0o777 == 0o600
    again = PushRegistry(tmp_path)
    assert again.all() == [first, second]
    assert again.delete("a") and not again.delete("a")
    assert PushRegistry(tmp_path).all() == [second]
