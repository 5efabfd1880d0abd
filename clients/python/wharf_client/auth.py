"""Credentials for a broker that enforces an ACL: ``user="AK:SK"`` or ``("AK", "SK")``, sent as HTTP
Basic authentication on every request (``Authorization: Basic base64(AK:SK)``, as ``curl -u``)."""

from __future__ import annotations

import httpx

User = str | tuple[str, str]


def basic_auth(user: User | None) -> httpx.BasicAuth | None:
    """The httpx auth for ``user``; None for a broker without an ACL. ValueError when malformed."""
    if user is None:
        return None
    if isinstance(user, str):
        access_key, separator, secret_key = user.partition(":")
        if not separator:
            raise ValueError("user must be 'accessKey:secretKey'")
    else:
        access_key, secret_key = user
    if not access_key:
        raise ValueError("user names no access key")
    return httpx.BasicAuth(access_key, secret_key)
