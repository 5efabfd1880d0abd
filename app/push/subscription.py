"""A push subscription's settings, as ``PUT /v1/groups/{group}/push`` takes them and
``config/pushSubscriptions.json`` keeps them.

=====================  =======  ==============================================================
field                  default  meaning
=====================  =======  ==============================================================
topic                  -        the topic whose queues on this broker are pushed
url                    -        the endpoint: ``http://`` or ``https://``
filter                 none     ``{"tags": "a || b"}`` or ``{"sql92": "..."}``
ordered                false    one request in flight per queue, in queue order
max_in_flight          16       requests in flight at once (1-1024)
batch                  1        messages per request (1-1000); above 1 the body is a JSON array
timeout_ms             10000    a request not answered in this long has failed
max_reconsume_times    16       deliveries again before a message goes to ``%DLQ%<group>``
secret                 made     ``whsec_`` + base64 of 24-64 bytes: the signing key
paused                 false    a paused subscription reads and delivers nothing
format                 raw      ``raw``: the body as produced, Wharf's headers; ``cloudevents``: a
                                CloudEvent in the HTTP binding's binary mode (a batch: batched mode)
=====================  =======  ==============================================================
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import secrets
from typing import Any

from app.broker.errors import BadRequestError, InvalidParameterError
from app.push.signing import SECRET_PREFIX, secret_key

SECRET_BYTES = 24
MIN_SECRET_BYTES, MAX_SECRET_BYTES = 24, 64
MAX_URL_LENGTH = 2048
MAX_FILTER_LENGTH = 4096


@dataclasses.dataclass(frozen=True)
class PushFilter:
    """Which messages are pushed: by tags (RocketMQ's ``a || b``), by a SQL92 expression, or all."""

    tags: str | None = None
    sql92: str | None = None

    def as_json(self) -> dict[str, str] | None:
        if self.tags is not None:
            return {"tags": self.tags}
        if self.sql92 is not None:
            return {"sql92": self.sql92}
        return None


@dataclasses.dataclass(frozen=True)
class PushSubscription:
    group: str
    topic: str
    url: str
    secret: str
    filter: PushFilter = PushFilter()
    ordered: bool = False
    max_in_flight: int = 16
    batch: int = 1
    timeout_ms: int = 10_000
    max_reconsume_times: int = 16
    paused: bool = False
    format: str = "raw"

    def as_json(self, with_secret: bool = False) -> dict[str, Any]:
        """The subscription as GET shows it; the secret only where asked (kept on disk, shown once)."""
        fields = {
            "group": self.group,
            "topic": self.topic,
            "url": self.url,
            "filter": self.filter.as_json(),
            "ordered": self.ordered,
            "max_in_flight": self.max_in_flight,
            "batch": self.batch,
            "timeout_ms": self.timeout_ms,
            "max_reconsume_times": self.max_reconsume_times,
            "paused": self.paused,
            "format": self.format,
        }
        if with_secret:
            fields["secret"] = self.secret
        return fields


def generate_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def check_secret(secret: object) -> str:
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise InvalidParameterError("secret must be a string starting with whsec_")
    try:
        key = secret_key(secret)
    except (binascii.Error, ValueError):
        raise InvalidParameterError("secret must be whsec_ followed by base64") from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise InvalidParameterError(
            f"secret must hold {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, not {len(key)}"
        )
    return secret


def _check_filter(value: object) -> PushFilter:
    if value is None:
        return PushFilter()
    if not isinstance(value, dict) or len(value) != 1 or not set(value) <= {"tags", "sql92"}:
        raise InvalidParameterError('filter must be {"tags": "..."} or {"sql92": "..."}')
    ((kind, expression),) = value.items()
    if not isinstance(expression, str) or not expression.strip() or len(expression) > MAX_FILTER_LENGTH:
        raise InvalidParameterError(
            f"filter {kind} must be a non-empty string of at most {MAX_FILTER_LENGTH}"
        )
    return PushFilter(**{kind: expression})


def _integer(fields: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = fields.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidParameterError(f"{name} must be an integer from {low} to {high}, not {value!r}")
    return value


def _boolean(fields: dict[str, Any], name: str, default: bool) -> bool:
    value = fields.get(name, default)
    if not isinstance(value, bool):
        raise InvalidParameterError(f"{name} must be true or false, not {value!r}")
    return value


FORMATS = ("raw", "cloudevents")
FIELDS = frozenset(
    {"topic", "url", "filter", "ordered", "max_in_flight", "batch", "timeout_ms", "max_reconsume_times"}
    | {"secret", "paused", "format"}
)


def _format(fields: dict[str, Any]) -> str:
    value = fields.get("format", "raw")
    if value not in FORMATS:
        raise InvalidParameterError(f"format must be raw or cloudevents, not {value!r}")
    return str(value)


def parse_subscription(
    group: str, fields: dict[str, Any], kept_secret: str | None
) -> tuple[PushSubscription, bool]:
    """The subscription a PUT's body describes, and whether its secret was made here (none given
    and none kept: a new subscription's secret is shown once). The URL is checked apart
    (:mod:`app.push.endpoint`)."""
    unknown = set(fields) - FIELDS
    if unknown:
        raise BadRequestError(f"unknown fields: {', '.join(sorted(unknown))}")
    topic, url = fields.get("topic"), fields.get("url")
    if not isinstance(topic, str) or not topic:
        raise InvalidParameterError("topic is required: the topic to push")
    if not isinstance(url, str) or not url or len(url) > MAX_URL_LENGTH:
        raise InvalidParameterError(
            f"url is required: an http:// or https:// URL of at most {MAX_URL_LENGTH}"
        )
    given = fields.get("secret")
    secret = check_secret(given) if given is not None else kept_secret or generate_secret()
    subscription = PushSubscription(
        group=group,
        topic=topic,
        url=url,
        secret=secret,
        filter=_check_filter(fields.get("filter")),
        ordered=_boolean(fields, "ordered", False),
        max_in_flight=_integer(fields, "max_in_flight", 16, 1, 1024),
        batch=_integer(fields, "batch", 1, 1, 1000),
        timeout_ms=_integer(fields, "timeout_ms", 10_000, 100, 300_000),
        max_reconsume_times=_integer(fields, "max_reconsume_times", 16, 0, 1000),
        paused=_boolean(fields, "paused", False),
        format=_format(fields),
    )
    return subscription, given is None and kept_secret is None


def from_stored(fields: dict[str, Any]) -> PushSubscription:
    """A subscription as the registry's file keeps it."""
    stored = dict(fields)
    stored["filter"] = PushFilter(**(stored.get("filter") or {}))
    return PushSubscription(**stored)


def to_stored(subscription: PushSubscription) -> dict[str, Any]:
    return subscription.as_json(with_secret=True)
