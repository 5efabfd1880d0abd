"""The ACL file the ACL tests run under, its accounts, and a broker that enforces it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx

from tests.api.server import BrokerProcess

ADMIN = ("admin-ak", "admin-secret-0001")
PRODUCER = ("producer-ak", "producer-secret-0002")  # PUB on orders, nothing else
CONSUMER = ("consumer-ak", "consumer-secret-0003")  # SUB on orders, groups billing
READ_WRITE = (
    "readwrite-ak",
    "rw-secret-0004",
)  # PUB|SUB on every topic and group, but DENY on audit and blocked
TRUSTED = ("trusted-ak", "trusted-secret-0005")  # white-listed at 127.0.0.1, no permissions
SECRETS = [account[1] for account in (ADMIN, PRODUCER, CONSUMER, READ_WRITE, TRUSTED)]

ACL_YAML = f"""\
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {PRODUCER[0]}
    secretKey: {PRODUCER[1]}
    defaultTopicPerm: DENY
    topicPerms: ["orders=PUB"]
  - accessKey: {CONSUMER[0]}
    secretKey: {CONSUMER[1]}
    defaultGroupPerm: DENY
    topicPerms: ["orders=SUB", "audit=DENY"]
    groupPerms: ["billing=SUB"]
  - accessKey: {READ_WRITE[0]}
    secretKey: {READ_WRITE[1]}
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    topicPerms: ["audit=DENY"]
    groupPerms: ["blocked=DENY"]
  - accessKey: {TRUSTED[0]}
    secretKey: {TRUSTED[1]}
    whiteRemoteAddress: 127.0.0.1
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
"""


def write_atomically(path: Path, text: str) -> None:
    """Replace the file as editors and deployment tools do: a new file renamed over the old one."""
    temporary = path.with_name(path.name + ".new")
    temporary.write_text(text)
    os.replace(temporary, path)


def acl_broker(directory: Path, text: str = ACL_YAML, **settings: Any) -> BrokerProcess:
    acl_file = directory / "plain_acl.yml"
    acl_file.write_text(text)
    options: dict[str, Any] = {
        "acl_file": acl_file,
        "acl_reload_interval_ms": 0,
        "hold_check_interval_ms": 60000,
    }
    options.update(settings)
    return BrokerProcess(directory / "store", **options)


def client_for(broker: BrokerProcess, account: tuple[str, str] | None) -> httpx.Client:
    return httpx.Client(base_url=broker.url, timeout=30.0, auth=account)


def assert_refused(response: httpx.Response, status: int) -> dict[str, Any]:
    """A refusal in the error envelope; 401 carries the Basic challenge."""
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["error_code"] == status * 100 + 1, body
    if status == 401:
        assert response.headers["www-authenticate"] == 'Basic realm="wharf"'
    return body
