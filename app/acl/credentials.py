"""Credentials of a request and who they make it: an account, or a trusted peer.

HTTP sends ``Authorization: Basic base64(accessKey:secretKey)`` (``curl -u AK:SK``). A browser's
WebSocket cannot set headers, so the WebSocket also takes a ``token`` query parameter holding
``base64url(accessKey:secretKey)`` (padding optional); the header wins when both are sent.

Who a request is, as RocketMQ's PlainPermissionManager decides:

1. a peer in ``globalWhiteRemoteAddresses`` is trusted, whatever it sends (or does not);
2. otherwise the access key must name an account;
3. a peer in that account's ``whiteRemoteAddress`` is trusted as that account without its secret
   and without permission checks;
4. otherwise the secret must match (compared in constant time).
"""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass

from app.acl.addresses import IPAddress
from app.acl.rules import Account, AclRules

# Compared against when the access key is unknown, so both failures take the same time.
_NO_SECRET = b"\0" * 32


class CredentialsError(Exception):
    """Credentials are missing, malformed or wrong (401). The message never holds the secret."""


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key: str
    secret_key: bytes

    def __repr__(self) -> str:
        return f"Credentials(access_key={self.access_key!r})"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request is: an account, or a peer the ACL trusts. ``trusted`` skips permission checks."""

    account: Account | None
    trusted: bool

    @property
    def name(self) -> str:
        return self.account.access_key if self.account is not None else "a white-listed address"


def _split(decoded: bytes) -> Credentials:
    try:
        text = decoded.decode("utf-8")
    except UnicodeDecodeError:
        raise CredentialsError("the credentials are not UTF-8") from None
    access_key, separator, secret_key = text.partition(":")
    if not separator or not access_key:
        raise CredentialsError("the credentials must be accessKey:secretKey")
    return Credentials(access_key, secret_key.encode("utf-8"))


def from_authorization(header: str) -> Credentials:
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        raise CredentialsError("the Authorization header must be Basic base64(accessKey:secretKey)")
    try:
        return _split(base64.b64decode(value.strip(), validate=True))
    except (binascii.Error, ValueError):
        raise CredentialsError("the Authorization header is not valid base64") from None


def from_token(token: str) -> Credentials:
    token = token.strip()
    try:
        return _split(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError):
        raise CredentialsError("the token is not base64url(accessKey:secretKey)") from None


def authenticate(rules: AclRules, address: IPAddress | None, credentials: Credentials | None) -> Principal:
    """Who the request is; CredentialsError when it is nobody the rules know."""
    if rules.globally_trusted(address):
        return Principal(None, trusted=True)
    if credentials is None:
        raise CredentialsError("credentials are required: Authorization: Basic base64(accessKey:secretKey)")
    account = rules.accounts.get(credentials.access_key)
    if account is None:
        hmac.compare_digest(_NO_SECRET, credentials.secret_key)
        raise CredentialsError("unknown access key or wrong secret key")
    if account.white_remote.matches(address):
        return Principal(account, trusted=True)
    if not account.secret_matches(credentials.secret_key):
        raise CredentialsError("unknown access key or wrong secret key")
    return Principal(account, trusted=False)
