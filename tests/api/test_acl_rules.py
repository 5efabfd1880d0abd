"""The ACL file's parts on their own: address patterns, permissions, validation and the reload check."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.acl import AclFile, AclFileError, parse_rules
from app.acl.addresses import AddressPattern, parse_address
from app.acl.credentials import CredentialsError, authenticate, from_authorization, from_token
from app.acl.rules import Action, Need, Perm
from app.api.app import create_app
from app.settings import Settings


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("*", ["10.1.2.3", "::1"], []),
        ("*.*.*.*", ["192.168.9.9"], []),
        ("", [], ["127.0.0.1"]),
        ("192.168.0.7", ["192.168.0.7", "::ffff:192.168.0.7"], ["192.168.0.8"]),
        ("192.168.0.*", ["192.168.0.0", "192.168.0.255"], ["192.168.1.1"]),
        ("192.168.*.*", ["192.168.200.3"], ["192.169.0.1"]),
        ("192.168.0.1-19", ["192.168.0.1", "192.168.0.19"], ["192.168.0.20", "192.168.0.0"]),
        ("192.168.1-10.*", ["192.168.10.77"], ["192.168.11.1"]),
        ("192.168.0.{1,7}", ["192.168.0.1", "192.168.0.7"], ["192.168.0.2"]),
        ("192.168.0.1,192.168.0.2", ["192.168.0.2"], ["192.168.0.3"]),
        ("10.0.0.0/8", ["10.255.0.1"], ["11.0.0.1", "::1"]),
        ("::1", ["::1"], ["127.0.0.1"]),
        ("fd00::/8", ["fd12::1"], ["fe80::1"]),
    ],
)
def test_address_patterns(pattern: str, inside: list[str], outside: list[str]) -> None:
    parsed = AddressPattern.parse(pattern)
    for address in inside:
        assert parsed.matches(parse_address(address)), address
    for address in outside:
        assert not parsed.matches(parse_address(address)), address
    assert not AddressPattern.parse("127.0.0.1").matches(parse_address("not an address"))


@pytest.mark.parametrize(
    "pattern", ["192.168.0.256", "192.168.0.9-1", "10.0.0.0/33", "example.com", "1.2.3.4,,"]
)
def test_bad_address_patterns(pattern: str) -> None:
    with pytest.raises(ValueError, match="192|10|example|1.2"):
        AddressPattern.parse(pattern)


def test_permissions_deny_wins_and_any_is_pub_or_sub() -> None:
    owned = {"DENY": Perm.DENY, "PUB": Perm.PUB, "SUB": Perm.SUB, "BOTH": Perm.PUB | Perm.SUB}
    allowed = {
        Action.PUB: {"PUB", "BOTH"},
        Action.SUB: {"SUB", "BOTH"},
        Action.ANY: {"PUB", "SUB", "BOTH"},
    }
    for action, names in allowed.items():
        for name, perm in owned.items():
            assert action.allowed_by(perm) is (name in names), (action, name)
        assert not action.allowed_by(Perm.DENY | Perm.PUB | Perm.SUB)


ACCOUNT = "accounts: [{accessKey: account1, secretKey: secret-123456, %s}]"


def test_defaults_listed_perms_and_admin() -> None:
    rules = parse_rules(ACCOUNT % 'defaultTopicPerm: ANY, topicPerms: ["audit=DENY"], groupPerms: ["g1=SUB"]')
    account = rules.accounts["account1"]
    assert account.refusal(Need.on((("orders", Action.PUB),))) is None  # default ANY
    assert account.refusal(Need.on((("audit", Action.SUB),))) is not None  # DENY wins
    assert account.refusal(Need.on((), (("g1", Action.SUB),))) is None
    assert account.refusal(Need.on((), (("g2", Action.SUB),))) is not None  # default group perm: DENY
    assert account.refusal(Need.admin("creating topics")) is not None
    admin = parse_rules(ACCOUNT % 'admin: true, topicPerms: ["audit=DENY"]').accounts["account1"]
    assert admin.refusal(Need.admin("creating topics")) is None
    assert admin.refusal(Need.on((("audit", Action.PUB),))) is None  # as RocketMQ: an admin skips checks


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("[1, 2]", "must be a mapping"),
        ("acounts: []", "unknown key 'acounts'"),
        ("accounts: [{accessKey: ab, secretKey: secret-123456}]", "accessKey must be a string of at least 6"),
        ("accounts: [{accessKey: account1, secretKey: short}]", "secretKey must be a string of at least 6"),
        ("accounts: [{accessKey: 'acc:ount1', secretKey: secret-123456}]", "must not hold ':'"),
        (ACCOUNT % "topicPerms: [orders]", "'orders' is not 'name=PERM'"),
        (ACCOUNT % 'topicPerms: ["orders=PUB", "orders=SUB"]', "'orders' is listed twice"),
        (ACCOUNT % "defaultGroupPerm: READ", "'READ' is not one of"),
        (ACCOUNT % "whiteRemoteAddress: 300.1.1.1", "300 is not an octet"),
        (ACCOUNT % "colour: blue", "unknown key 'colour'"),
        (ACCOUNT % "admin: 1", "admin must be true or false"),
        (
            "accounts: [{accessKey: account1, secretKey: secret-123456}, {accessKey: account1, secretKey: x-123456}]",
            "used twice",
        ),
        ("accounts: [{accessKey: account1, secretKey: 'secret-123456\n", "not valid YAML: line"),
    ],
)
def test_a_bad_file_is_one_line_without_the_secret(document: str, message: str) -> None:
    with pytest.raises(AclFileError) as raised:
        parse_rules(document)
    text = str(raised.value)
    assert message in text
    assert "\n" not in text
    assert "secret-123456" not in text


def test_create_app_refuses_a_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "acl.yml"
    with pytest.raises(AclFileError, match="cannot be read"):
        create_app(Settings(acl_file=str(path)))
    path.write_text("accounts: {}")
    with pytest.raises(AclFileError, match=f"ACL file {path}: accounts must be a list"):
        create_app(Settings(acl_file=str(path)))


def test_credentials_from_the_header_and_the_token() -> None:
    assert (
        from_authorization("Basic YWNjb3VudDE6czNjcjN0OndpdGg6Y29sb25z").secret_key == b"s3cr3t:with:colons"
    )
    assert from_token("YWNjb3VudDE6c2VjcmV0LTEyMzQ1Ng").access_key == "account1"  # unpadded base64url
    rules = parse_rules(ACCOUNT % "whiteRemoteAddress: 10.0.0.*")
    here, elsewhere = parse_address("10.0.0.5"), parse_address("10.0.1.5")
    assert authenticate(rules, here, from_token("YWNjb3VudDE6d3Jvbmc")).trusted  # white address: no secret
    with pytest.raises(CredentialsError):
        authenticate(rules, elsewhere, from_token("YWNjb3VudDE6d3Jvbmc"))
    assert not authenticate(rules, elsewhere, from_token("YWNjb3VudDE6c2VjcmV0LTEyMzQ1Ng")).trusted


def test_the_file_is_looked_at_once_per_interval(tmp_path: Path) -> None:
    path = tmp_path / "acl.yml"
    path.write_text(ACCOUNT % "admin: false")
    now = [0.0]
    acl = AclFile(path, check_interval_s=1.0, clock=lambda: now[0])
    path.write_text(ACCOUNT % "admin: true ")
    now[0] = 0.5
    assert not acl.current().accounts["account1"].admin  # not looked at yet
    now[0] = 1.0
    assert acl.current().accounts["account1"].admin
    assert acl.reloads == 1
