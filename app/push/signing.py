"""Standard Webhooks signatures (https://www.standardwebhooks.com): every request carries
``webhook-id``, ``webhook-timestamp`` (seconds) and ``webhook-signature: v1,<base64>``, the
HMAC-SHA256 of ``{id}.{timestamp}.{body}`` under the key of the subscription's ``whsec_`` secret."""

from __future__ import annotations

import base64
import hashlib
import hmac

SECRET_PREFIX = "whsec_"


def secret_key(secret: str) -> bytes:
    """The HMAC key a ``whsec_`` secret stands for (its base64 part, decoded); binascii.Error
    (a ValueError) for one that is not base64."""
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)


def signature(key: bytes, webhook_id: str, timestamp_s: int, body: bytes) -> str:
    signed = f"{webhook_id}.{timestamp_s}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode("ascii")


def signed_headers(key: bytes, webhook_id: str, timestamp_s: int, body: bytes) -> dict[str, str]:
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": signature(key, webhook_id, timestamp_s, body),
    }
