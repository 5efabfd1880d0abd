"""CloudEvents 1.0.2 (CNCF): events produced in the HTTP binding's three modes, messages rendered back.

Produce (``POST /v1/topics/{t}/messages``) takes an event in each mode of the HTTP protocol binding:

* binary: the attributes in ``ce-*`` headers (percent-encoded), the data the body as it is, its
  ``Content-Type`` the ``datacontenttype`` (:func:`binary_event`);
* structured: one event as a JSON object, ``application/cloudevents+json`` (:func:`structured_events`);
* batched: a JSON array of them, ``application/cloudevents-batch+json``.

An event becomes one message (the table is in docs/guides/browser.md, "CloudEvents"):

==================  ==============================================================================
``id`` + ``source``  the unique id: a hash of both, so a resent event is stored once (the
                     idempotency window)
``type``             the tags, unless the produce's ``tags`` parameter names others
``subject``          the key
every attribute      a property ``ce_<name>`` (extensions too), so it comes back unchanged
data                 the body: JSON ``data`` encoded, a string's UTF-8, ``data_base64`` decoded;
                     ``null`` when the event has none (a message's body is never empty)
==================  ==============================================================================

How the data was given is kept in the property :data:`DATA_FORM` (``json``, ``text``, ``base64``
or ``none``), so :func:`render_cloudevent` gives it back in the same form. A message that did not
come in as an event is rendered with ``id`` its unique id, ``source`` the broker's URL of its topic,
``type`` its tags (``wharf.message`` without), ``subject`` its first key, ``time`` its store time and
its body as JSON data, text or base64, whichever it is.

Errors: :class:`CloudEventError` (a ``ValueError``) names what is wrong; app.api answers it 400.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote

import orjson
from wharf_client.codec import IncomingMessage, decode_body

STRUCTURED_MEDIA_TYPE = "application/cloudevents+json"
BATCH_MEDIA_TYPE = "application/cloudevents-batch+json"
# Not a media type: what produce dispatches on for an event in binary mode (its body may be any type).
BINARY_MODE = "cloudevents;mode=binary"

SPEC_VERSION = "1.0"
REQUIRED = ("specversion", "id", "source", "type")
PREFIX = "ce_"  # attribute ``name`` is property ``ce_name``
DATA_FORM = "CE_DATA"  # upper case: never an attribute's property (attribute names are lower case)
DEFAULT_TYPE = "wharf.message"
# The body of an event without data: a message's body is never empty (a pull shows it as JSON null).
NO_DATA_BODY = b"null"
# The spec's attribute names: lower-case letters and digits, 20 at most (recommended; kept as a rule).
_NAME = re.compile(r"^[a-z0-9]{1,20}$")
_DATA_MEMBERS = ("data", "data_base64")


class CloudEventError(ValueError):
    """An event that is not a valid CloudEvent 1.0; the message names the attribute."""


def is_json_type(content_type: str | None) -> bool:
    """Whether data of ``content_type`` is JSON (absent: it is, in the JSON event format)."""
    if content_type is None:
        return True
    media = content_type.split(";", 1)[0].strip().lower()
    return media in ("application/json", "text/json") or media.endswith("+json")


def unique_id_of(source: str, event_id: str) -> str:
    """The message's unique id for the event ``(source, id)``: what makes an event unique."""
    return hashlib.sha256(f"{source}\n{event_id}".encode()).hexdigest()[:32].upper()


def _checked(attributes: dict[str, str]) -> dict[str, str]:
    for name in REQUIRED:
        if not attributes.get(name):
            raise CloudEventError(f"the CloudEvent attribute {name!r} is required")
    if attributes["specversion"] != SPEC_VERSION:
        raise CloudEventError(f"specversion must be {SPEC_VERSION!r}, not {attributes['specversion']!r}")
    for name in attributes:
        if not _NAME.match(name):
            raise CloudEventError(f"attribute name {name!r} must be 1-20 lower-case letters or digits")
    return attributes


def _message(attributes: dict[str, str], body: bytes, form: str, tags: str | None) -> IncomingMessage:
    attributes = _checked(attributes)
    properties = {PREFIX + name: value for name, value in attributes.items()}
    properties[DATA_FORM] = form
    subject = attributes.get("subject")
    return IncomingMessage(
        body=body,
        tags=tags if tags is not None else attributes["type"],
        keys=[subject] if subject else [],
        properties=properties,
        unique_id=unique_id_of(attributes["source"], attributes["id"]),
    )


def binary_event(headers: Iterable[tuple[bytes, bytes]], body: bytes, tags: str | None) -> IncomingMessage:
    """The message of an event in binary mode: ``ce-*`` headers, the body its data."""
    attributes: dict[str, str] = {}
    content_type = None
    for raw_name, raw_value in headers:
        name = raw_name.decode("latin-1").lower()
        if name.startswith("ce-"):
            # The binding percent-encodes what is not printable ASCII; the value is UTF-8 then.
            attributes[name[3:]] = unquote(raw_value.decode("latin-1"), errors="strict")
        elif name == "content-type":
            content_type = raw_value.decode("latin-1")
    if content_type is not None:
        attributes["datacontenttype"] = content_type
    if not body:
        body, form = NO_DATA_BODY, "none"
    elif is_json_type(content_type) and _parses_as_json(body):
        form = "json"
    elif _is_text(content_type, body):
        form = "text"
    else:
        form = "base64"
    return _message(attributes, body, form, tags)


def structured_events(raw: bytes, batched: bool, tags: str | None) -> list[IncomingMessage]:
    """The messages of one event in structured mode, or of a batch (a JSON array of them)."""
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CloudEventError(f"the body is not valid JSON: {exc}") from None
    if batched:
        if not isinstance(document, list):
            raise CloudEventError("a CloudEvents batch is a JSON array of events")
        return [_structured(event, f"event {index}: ", tags) for index, event in enumerate(document)]
    return [_structured(document, "", tags)]


def _structured(event: Any, where: str, tags: str | None) -> IncomingMessage:
    if not isinstance(event, dict):
        raise CloudEventError(f"{where}a CloudEvent is a JSON object")
    attributes: dict[str, str] = {}
    for name, value in event.items():
        if name in _DATA_MEMBERS:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)
        elif not isinstance(value, str):
            raise CloudEventError(f"{where}attribute {name!r} must be a string, number or boolean")
        attributes[name] = value
    try:
        if "data_base64" in event:
            if "data" in event:
                raise CloudEventError(f"{where}an event has data or data_base64, not both")
            encoded = event["data_base64"]
            if not isinstance(encoded, str):
                raise CloudEventError(f"{where}data_base64 must be a string")
            try:
                body, form = base64.b64decode(encoded, validate=True), "base64"
            except binascii.Error:
                raise CloudEventError(f"{where}data_base64 is not base64") from None
        elif "data" not in event:
            body, form = NO_DATA_BODY, "none"
        elif isinstance(event["data"], str) and not is_json_type(attributes.get("datacontenttype")):
            body, form = event["data"].encode(), "text"
        else:
            body, form = orjson.dumps(event["data"]), "json"
        return _message(attributes, body, form, tags)
    except CloudEventError as exc:
        message = str(exc)
        raise CloudEventError(message if message.startswith(where) else where + message) from None


def _parses_as_json(body: bytes) -> bool:
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return True


def _is_text(content_type: str | None, body: bytes) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if not (media.startswith("text/") or media in ("application/xml", "application/x-ndjson")):
        return False
    try:
        body.decode()
    except UnicodeDecodeError:
        return False
    return True


# -- rendering ---------------------------------------------------------------------------------------


def _rfc3339(timestamp_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _with_data(event: dict[str, Any], body: bytes, form: str) -> dict[str, Any]:
    if form == "json":
        event["data"] = orjson.loads(body)
    elif form == "text":
        event["data"] = body.decode()
    elif form == "base64":
        event["data_base64"] = base64.b64encode(body).decode("ascii")
    return event


def topic_source(base_url: str, topic: str) -> str:
    """The ``source`` of a message that did not come in as an event: the broker's URL of its topic."""
    return f"{base_url.rstrip('/')}/v1/topics/{quote(topic, safe='')}"


def render_cloudevent(message: dict[str, Any], topic_url: str) -> dict[str, Any]:
    """The structured CloudEvent of a message (a pull's JSON message object); ``topic_url`` is the
    ``source`` of a message that did not come in as an event."""
    body = decode_body(message["body"], message["encoding"])
    properties: dict[str, str] = message["properties"]
    if PREFIX + "specversion" in properties:
        event: dict[str, Any] = {
            name[len(PREFIX) :]: value for name, value in properties.items() if name.startswith(PREFIX)
        }
        return _with_data(event, body, properties.get(DATA_FORM, "base64"))
    event = {
        "specversion": SPEC_VERSION,
        "id": message["unique_id"] or message["msg_id"],
        "source": topic_url,
        "type": message["tags"] or DEFAULT_TYPE,
        "time": _rfc3339(message["store_timestamp"]),
    }
    if message["keys"]:
        event["subject"] = message["keys"][0]
    if _parses_as_json(body):
        event["datacontenttype"] = "application/json"
        return _with_data(event, body, "json")
    try:
        body.decode()
    except UnicodeDecodeError:
        event["datacontenttype"] = "application/octet-stream"
        return _with_data(event, body, "base64")
    event["datacontenttype"] = "text/plain; charset=utf-8"
    return _with_data(event, body, "text")
