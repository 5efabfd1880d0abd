"""Standard Webhooks signatures (https://www.standardwebhooks.com): every request carries
``webhook-id``, ``webhook-timestamp`` (seconds) and ``webhook-signature: v1,<base64>``, the
HMAC-SHA256 of ``{id}.{timestamp}.{body}`` under the key of the subscription's ``whsec_`` secret."""

from __future__ import annotations

import base64
import hashlib
import hmac


def signature(key: bytes, webhook_id: str, timestamp_s: int, body: bytes) -> str:
    signed = f"{webhook_id}.{timestamp_s}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode("ascii")


def signed_headers(key: bytes, webhook_id: str, timestamp_s: int, body: bytes) -> dict[str, str]:
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": signature(key, webhook_id, timestamp_s, body),
    }
