"""A delivery's request and the endpoint's answer.

One message is POSTed as it was produced: its body as the request body, ``Content-Type`` from its
``CONTENT_TYPE`` property (else ``application/octet-stream``), and the rest as headers:

=========================  ==================================================================
header                     value
=========================  ==================================================================
``wharf-msg-id``           the stored message's id
``wharf-unique-id``        the producer's unique id (the same on every delivery of it)
``wharf-topic``            the topic it was produced to
``wharf-queue-id``         its queue, and ``wharf-queue-offset`` its offset in the queue
``wharf-retry-topic``      ``%RETRY%<group>`` when it comes back after a failure (queue id and
                           offset are then the retry topic's)
``wharf-tags``             its tags, ``wharf-keys`` its keys (space separated), percent-encoded
``wharf-properties``       its other properties as a JSON object (ASCII)
``wharf-reconsume-times``  how often it was delivered before and failed
``wharf-born-timestamp``   when it was produced (ms)
=========================  ==================================================================

A batch (``batch`` above 1) is a JSON array of the pull API's message objects (``body`` and
``encoding`` as GET .../messages has them), ``Content-Type: application/json``, with
``wharf-topic`` and ``wharf-count``. Both carry the Standard Webhooks headers
(:mod:`app.push.signing`): ``webhook-id`` is ``msg_<unique id>`` for a message (the same on every
delivery, for receivers that drop repeats), ``batch_<hash of the unique ids>`` for a batch.

With ``format: cloudevents`` a message is a CloudEvent in the HTTP binding's binary mode: its
attributes as ``ce-*`` headers (percent-encoded where the binding says so), ``Content-Type`` its
``datacontenttype``, the body its data as stored; an event that was produced as a CloudEvent comes
with its own attributes, any other message as ``format=cloudevents`` pulls render it
(:func:`app.cloudevents.render_cloudevent`). A batch is the batched mode:
``application/cloudevents-batch+json``, a JSON array of structured events. The Standard Webhooks
headers are there too.
"""

from __future__ import annotations

import dataclasses
import email.utils
import enum
import hashlib
import json
import time
from collections.abc import Sequence
from typing import Protocol
from urllib.parse import quote

import orjson

from app.cloudevents import render_cloudevent
from app.codec import messages_json, record_to_json
from app.store.record import StoredMessage
from app.store.record_format import PROPERTY_KEYS, PROPERTY_RETRY_TOPIC, PROPERTY_TAGS, PROPERTY_UNIQ_KEY

PROPERTY_CONTENT_TYPE = "CONTENT_TYPE"
DEFAULT_CONTENT_TYPE = "application/octet-stream"
_HIDDEN = frozenset({PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, PROPERTY_RETRY_TOPIC})
_SAFE = " !#$&'()*+,/:;=?@[]~|"


class FailureKind(enum.StrEnum):
    """Why a delivery failed (a label of the failures metric)."""

    STATUS = "status"  # answered, but not 2xx
    TIMEOUT = "timeout"
    CONNECT = "connect"  # refused, unreachable, not resolved
    TLS = "tls"
    PROTOCOL = "protocol"  # a broken answer
    REFUSED = "refused"  # not sent: the endpoint now resolves to a private address


@dataclasses.dataclass(frozen=True)
class PushAnswer:
    """What became of a request: an HTTP status, or the failure that kept it from one."""

    status: int | None
    failure: FailureKind | None = None
    detail: str = ""
    retry_after: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class PushTransport(Protocol):
    """Sends a delivery's request; never raises for what the endpoint or the network did."""

    async def post(self, url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> PushAnswer: ...

    async def aclose(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class PushRequest:
    webhook_id: str
    body: bytes
    headers: dict[str, str]


def original_topic(message: StoredMessage) -> str:
    return message.properties.get(PROPERTY_RETRY_TOPIC, message.topic)


# What the HTTP binding percent-encodes in a ce-* header: space, '"', '%' and all but printable ASCII.
_CE_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"%')
_CE_DATA = frozenset({"data", "data_base64", "datacontenttype"})


def build_request(
    messages: Sequence[StoredMessage],
    records: Sequence[bytes],
    reconsume_times: int,
    cloudevents_source: str | None = None,
    batched: bool = False,
) -> PushRequest:
    """The request delivering ``messages`` (whose stored ``records`` they are); ``reconsume_times``
    overrides the records' count (an ordered queue retries in place). ``batched`` (a subscription
    whose ``batch`` is above 1): a batch's body, however many messages it holds. With
    ``cloudevents_source`` (the ``source`` of a message not produced as an event: its topic's URL
    on this broker), as CloudEvents."""
    if cloudevents_source is not None:
        return _cloudevents_request(messages, records, cloudevents_source, batched)
    if not batched:
        (message,) = messages
        properties = message.properties
        headers = {
            "content-type": properties.get(PROPERTY_CONTENT_TYPE, DEFAULT_CONTENT_TYPE),
            "wharf-msg-id": message.msg_id,
            "wharf-unique-id": message.unique_id,
            "wharf-topic": original_topic(message),
            "wharf-queue-id": str(message.queue_id),
            "wharf-queue-offset": str(message.queue_offset),
            "wharf-tags": quote(properties.get(PROPERTY_TAGS, ""), safe=_SAFE),
            "wharf-keys": quote(properties.get(PROPERTY_KEYS, ""), safe=_SAFE),
            "wharf-properties": json.dumps(
                {k: v for k, v in properties.items() if k not in _HIDDEN}, separators=(",", ":")
            ),
            "wharf-reconsume-times": str(reconsume_times),
            "wharf-born-timestamp": str(message.born_timestamp),
        }
        if PROPERTY_RETRY_TOPIC in properties and message.topic != original_topic(message):
            headers["wharf-retry-topic"] = message.topic
        return PushRequest(f"msg_{message.unique_id or message.msg_id}", message.body, headers)
    ids = "\n".join(message.unique_id or message.msg_id for message in messages)
    body = messages_json(records, consumed=True)
    headers = {
        "content-type": "application/json",
        "wharf-topic": original_topic(messages[0]),
        "wharf-count": str(len(messages)),
    }
    return PushRequest("batch_" + hashlib.sha256(ids.encode()).hexdigest()[:32], body, headers)


def _cloudevents_request(
    messages: Sequence[StoredMessage], records: Sequence[bytes], source: str, batched: bool
) -> PushRequest:
    events = [render_cloudevent(record_to_json(record), source) for record in records]
    if not batched:
        ((message,), (event,)) = messages, events
        headers = {
            f"ce-{name}": quote(str(value), safe=_CE_SAFE)
            for name, value in event.items()
            if name not in _CE_DATA
        }
        if "datacontenttype" in event:  # else none: the binding maps Content-Type to it
            headers["content-type"] = event["datacontenttype"]
        body = message.body if "data" in event or "data_base64" in event else b""
        return PushRequest(f"msg_{message.unique_id or message.msg_id}", body, headers)
    ids = "\n".join(message.unique_id or message.msg_id for message in messages)
    headers = {"content-type": "application/cloudevents-batch+json"}
    return PushRequest(
        "batch_" + hashlib.sha256(ids.encode()).hexdigest()[:32], orjson.dumps(events), headers
    )


def retry_after_s(value: str | None, now_s: float | None = None) -> float | None:
    """A Retry-After header's wait in seconds (delta-seconds or an HTTP date), None if it has none."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now_s is None else now_s))
