"""Producer groups and their check endpoints: where the broker asks about a transaction left open.

``PUT /v1/producers/{producer_group}`` ``{"check_url": "http://..."}`` registers (or replaces) the
endpoint, ``{"check_url": null}`` removes it: the group's producers then poll
``GET /v1/transactions/pending``. Kept in ``config/transactionProducers.json``, written before the
answer, so a restarted broker keeps asking the same endpoints.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

from app.broker.errors import InvalidParameterError
from app.broker.transaction_message import PRODUCER_GROUP_PATTERN
from app.store.atomic_file import write_atomically
from app.store.errors import StoreConfigError

MAX_URL_LENGTH = 2048


def validate_producer_group(name: str | None) -> str:
    """The producer group's name; InvalidParameterError when it is missing or not a valid name."""
    if name is None:
        raise InvalidParameterError("a transactional produce needs a producer_group")
    if PRODUCER_GROUP_PATTERN.fullmatch(name) is None:
        raise InvalidParameterError(
            f"producer_group must be 1 to 255 letters, digits, '_' or '-', not {name[:300]!r}"
        )
    return name


def validate_check_url(url: str) -> str:
    parts = urlsplit(url)
    if len(url) > MAX_URL_LENGTH or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidParameterError(
            f"check_url must be an http:// or https:// URL of at most {MAX_URL_LENGTH} characters"
        )
    return url


class ProducerGroups:
    """The check endpoint of each producer group that registered one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.check_urls: dict[str, str] = {}

    def load(self) -> None:
        try:
            document = json.loads(self.path.read_bytes())
            self.check_urls = {
                str(name): str(entry["check_url"]) for name, entry in document["groups"].items()
            }
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreConfigError(f"{self.path} is not a producer group table: {exc}") from None

    def check_url(self, group: str) -> str | None:
        return self.check_urls.get(group)

    def register(self, group: str, check_url: str | None) -> None:
        """Set (or, with None, remove) the group's check endpoint and write the table. Blocks on
        the disk: call it off the event loop."""
        validate_producer_group(group)
        urls = dict(self.check_urls)
        if check_url is None:
            urls.pop(group, None)
        else:
            urls[group] = validate_check_url(check_url)
        document = {"groups": {name: {"check_url": url} for name, url in sorted(urls.items())}}
        write_atomically(self.path, json.dumps(document, indent=2).encode())
        self.check_urls = urls
