"""The TLS context the client's HTTP connections share.

Making httpx's default verifying context reads the whole CA bundle, 20-30 ms of CPU, and httpx
makes one for every client it opens, ``http://`` or not. Short-lived clients (a subscriber's route
look-up, each consumer, the broker's own calls to its peers) would pay that every time; one context
per process serves them all, as an ``ssl.SSLContext`` may be shared.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def client_ssl_context() -> ssl.SSLContext:
    """httpx's default context (certifi's bundle, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), made once."""
    return httpx.create_ssl_context()
