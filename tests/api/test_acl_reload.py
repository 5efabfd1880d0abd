"""The ACL file is read again when it changes - atomic renames and edits in place - and a bad edit
keeps the last good rules; a bad file at start stops the broker with one clear line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.acl_setup import (
    ACL_YAML,
    ADMIN,
    PRODUCER,
    READ_WRITE,
    acl_broker,
    assert_refused,
    client_for,
    write_atomically,
)
from tests.api.server import ROOT, BrokerProcess

NEWCOMER = ("newcomer-ak", "newcomer-secret-0006")
NEWCOMER_YAML = (
    ACL_YAML
    + f"""\
  - accessKey: {NEWCOMER[0]}
    secretKey: {NEWCOMER[1]}
    defaultTopicPerm: SUB
"""
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = acl_broker(tmp_path_factory.mktemp("acl-reload")).start()
    with client_for(process, ADMIN) as admin:
        assert admin.post("/v1/topics", json={"name": "orders", "queues": 1}).status_code == 201
    yield process
    process.stop()


@pytest.fixture
def acl_file(broker: BrokerProcess) -> Iterator[Path]:
    path = Path(broker.env["WHARF_ACL_FILE"])
    yield path
    write_atomically(path, ACL_YAML)


def topics(broker: BrokerProcess, account: tuple[str, str] | None) -> httpx.Response:
    with client_for(broker, account) as client:
        return client.get("/v1/topics")


def test_an_atomic_rename_is_picked_up(broker: BrokerProcess, acl_file: Path) -> None:
    assert_refused(topics(broker, NEWCOMER), 401)
    write_atomically(acl_file, NEWCOMER_YAML)
    assert topics(broker, NEWCOMER).status_code == 200
    write_atomically(acl_file, ACL_YAML)
    assert_refused(topics(broker, NEWCOMER), 401)


def test_an_edit_in_place_is_picked_up(broker: BrokerProcess, acl_file: Path) -> None:
    acl_file.write_text(NEWCOMER_YAML)
    assert topics(broker, NEWCOMER).status_code == 200


def test_a_bad_edit_keeps_the_last_good_rules_and_says_why(broker: BrokerProcess, acl_file: Path) -> None:
    write_atomically(acl_file, NEWCOMER_YAML)
    assert topics(broker, NEWCOMER).status_code == 200
    # A half-finished edit: the line YAML trips on holds a secret, which must not be logged.
    broken = NEWCOMER_YAML + "  - accessKey: broken-ak\n    secretKey: [leaked-secret-0007\n"
    write_atomically(acl_file, broken)
    assert topics(broker, NEWCOMER).status_code == 200
    assert topics(broker, PRODUCER).status_code == 200
    invalid = NEWCOMER_YAML.replace("defaultTopicPerm: SUB", "defaultTopicPerm: WRITE")
    write_atomically(acl_file, invalid)
    assert topics(broker, NEWCOMER).status_code == 200
    log = broker.log()
    assert "not valid YAML: line" in log and "the rules loaded before stay in force" in log
    assert "'WRITE' is not one of DENY" in log
    assert "leaked-secret-0007" not in log
    write_atomically(acl_file, ACL_YAML)  # a good edit after bad ones is read
    assert_refused(topics(broker, NEWCOMER), 401)


def test_global_white_addresses_skip_authentication(broker: BrokerProcess, acl_file: Path) -> None:
    assert_refused(topics(broker, None), 401)
    write_atomically(
        acl_file,
        ACL_YAML.replace("globalWhiteRemoteAddresses: []", 'globalWhiteRemoteAddresses: ["127.0.0.*"]'),
    )
    assert topics(broker, None).status_code == 200
    with httpx.Client(base_url=broker.url) as anonymous:  # trusted: admin-only requests too
        assert anonymous.post("/v1/topics", json={"name": "made-by-a-white-address"}).status_code == 201
    write_atomically(
        acl_file,
        ACL_YAML.replace("globalWhiteRemoteAddresses: []", 'globalWhiteRemoteAddresses: ["10.0.0.0/8"]'),
    )
    assert_refused(topics(broker, None), 401)


def test_a_bad_file_at_start_is_one_clear_line(tmp_path: Path) -> None:
    process = acl_broker(tmp_path, ACL_YAML.replace("admin: true", "admin: maybe"))
    run = subprocess.run(
        [sys.executable, "-m", "app"], cwd=ROOT, env=process.env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0, run.stderr
    assert (
        f"wharf: ACL file {tmp_path / 'plain_acl.yml'}: accounts[0] (admin-ak): admin must be true or false"
        in run.stderr
    )
    assert ADMIN[1] not in run.stderr


def test_without_auto_creation_a_produce_to_a_missing_topic_is_404(tmp_path: Path) -> None:
    process = acl_broker(tmp_path, auto_create_topics="false").start()
    try:
        for account in (READ_WRITE, ADMIN):
            with client_for(process, account) as client:
                response = client.post("/v1/topics/missing/messages", json={"body": "x"})
            assert response.status_code == 404 and response.json()["error_code"] == 40402, response.text
    finally:
        process.stop()
