"""The rules of an ACL file in RocketMQ's plain_acl.yml shape, and the decision they make.

::

    globalWhiteRemoteAddresses: ["10.10.103.*", "192.168.0.*"]
    accounts:
      - accessKey: producer1
        secretKey: s3cret-pr0ducer
        whiteRemoteAddress: ""
        admin: false
        defaultTopicPerm: DENY
        defaultGroupPerm: SUB
        topicPerms: ["orders=PUB|SUB", "audit=DENY"]
        groupPerms: ["billing=SUB"]

A permission is ``DENY``, ``PUB``, ``SUB``, ``PUB|SUB`` (also ``SUB|PUB``) or ``ANY`` (= ``PUB|SUB``).
A topic or group an account does not list takes its default permission, ``DENY`` when not given
(as RocketMQ's PlainAccessResource). ``DENY`` wins over anything a request needs; an admin account
may do everything, admin-only requests included.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from app.acl.addresses import AddressPattern, IPAddress

MIN_KEY_LENGTH = 6  # RocketMQ refuses shorter access and secret keys
TOP_LEVEL_KEYS = frozenset({"globalWhiteRemoteAddresses", "accounts", "dataVersion"})
ACCOUNT_KEYS = frozenset(
    {
        "accessKey",
        "secretKey",
        "whiteRemoteAddress",
        "admin",
        "defaultTopicPerm",
        "defaultGroupPerm",
        "topicPerms",
        "groupPerms",
    }
)


class AclFileError(Exception):
    """The ACL file cannot be read or is not valid; the message is one line and holds no secret."""


class Perm(enum.Flag):
    """What an account owns on a topic or group."""

    DENY = enum.auto()
    PUB = enum.auto()
    SUB = enum.auto()


PERM_NAMES: dict[str, Perm] = {
    "DENY": Perm.DENY,
    "PUB": Perm.PUB,
    "SUB": Perm.SUB,
    "PUB|SUB": Perm.PUB | Perm.SUB,
    "SUB|PUB": Perm.PUB | Perm.SUB,
    "ANY": Perm.PUB | Perm.SUB,
}


class Action(enum.Enum):
    """What a request needs on a topic or group: publish, subscribe, or either (a metadata read)."""

    PUB = "PUB"
    SUB = "SUB"
    ANY = "PUB or SUB"

    def allowed_by(self, owned: Perm) -> bool:
        if Perm.DENY in owned:
            return False
        if self is Action.ANY:
            return bool(owned & (Perm.PUB | Perm.SUB))
        return Perm[self.value] in owned


class Access(enum.Enum):
    OPEN = "open"  # no credentials asked
    ACCOUNT = "account"  # any authenticated account
    ADMIN = "admin"  # an admin account
    RESOURCES = "resources"  # the listed permissions on topics and groups


@dataclass(frozen=True, slots=True)
class Need:
    """The permission a request needs."""

    access: Access
    topics: tuple[tuple[str, Action], ...] = ()
    groups: tuple[tuple[str, Action], ...] = ()
    why: str = ""  # what an admin-only request does, for the refusal

    @classmethod
    def on(
        cls, topics: tuple[tuple[str, Action], ...] = (), groups: tuple[tuple[str, Action], ...] = ()
    ) -> Need:
        return cls(Access.RESOURCES, topics, groups)

    @classmethod
    def admin(cls, why: str) -> Need:
        return cls(Access.ADMIN, why=why)


OPEN = Need(Access.OPEN)
ACCOUNT = Need(Access.ACCOUNT)


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: bytes = field(repr=False)
    white_remote: AddressPattern
    admin: bool
    default_topic_perm: Perm
    default_group_perm: Perm
    topic_perms: Mapping[str, Perm]
    group_perms: Mapping[str, Perm]

    def secret_matches(self, secret: bytes) -> bool:
        return hmac.compare_digest(self.secret_key, secret)

    def refusal(self, need: Need) -> str | None:
        """Why this account may not do what ``need`` asks; None when it may."""
        if self.admin or need.access in (Access.OPEN, Access.ACCOUNT):
            return None
        if need.access is Access.ADMIN:
            return f"{need.why} needs an admin account, and {self.access_key!r} is not one"
        for kind, wanted, owned, default in (
            ("topic", need.topics, self.topic_perms, self.default_topic_perm),
            ("group", need.groups, self.group_perms, self.default_group_perm),
        ):
            for name, action in wanted:
                if not action.allowed_by(owned.get(name, default)):
                    return f"account {self.access_key!r} has no {action.value} permission on {kind} {name!r}"
        return None


@dataclass(frozen=True, slots=True)
class AclRules:
    global_white: tuple[AddressPattern, ...]
    accounts: Mapping[str, Account]

    def globally_trusted(self, address: IPAddress | None) -> bool:
        return any(pattern.matches(address) for pattern in self.global_white)


def _perm(value: Any, where: str) -> Perm:
    if not isinstance(value, str) or value.strip().upper() not in PERM_NAMES:
        raise AclFileError(f"{where}: {value!r} is not one of {', '.join(PERM_NAMES)}")
    return PERM_NAMES[value.strip().upper()]


def _perm_list(value: Any, where: str) -> dict[str, Perm]:
    if value is None:
        return {}
    if not isinstance(value, list):
        raise AclFileError(f"{where}: must be a list of 'name=PERM'")
    perms: dict[str, Perm] = {}
    for index, item in enumerate(value):
        name, separator, perm = item.partition("=") if isinstance(item, str) else ("", "", "")
        name = name.strip()
        if not separator or not name:
            raise AclFileError(f"{where}[{index}]: {item!r} is not 'name=PERM'")
        if name in perms:
            raise AclFileError(f"{where}[{index}]: {name!r} is listed twice")
        perms[name] = _perm(perm, f"{where}[{index}]")
    return perms


def _address(value: Any, where: str) -> AddressPattern:
    if value is not None and not isinstance(value, str):
        raise AclFileError(f"{where}: must be a string")
    try:
        return AddressPattern.parse(value)
    except ValueError as exc:
        raise AclFileError(f"{where}: {exc}") from None


def _key(entry: dict[str, Any], name: str, where: str) -> str:
    value = entry.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # YAML reads an all-digit key as a number
    if not isinstance(value, str) or len(value) < MIN_KEY_LENGTH:
        # Never quote the value: it may be a secret.
        raise AclFileError(f"{where}: {name} must be a string of at least {MIN_KEY_LENGTH} characters")
    return value


def _account(entry: Any, where: str) -> Account:
    if not isinstance(entry, dict):
        raise AclFileError(f"{where}: must be a mapping")
    unknown = sorted(str(key) for key in entry if key not in ACCOUNT_KEYS)
    if unknown:
        raise AclFileError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(ACCOUNT_KEYS))})")
    access_key = _key(entry, "accessKey", where)
    if ":" in access_key or not access_key.isprintable() or access_key != access_key.strip():
        raise AclFileError(
            f"{where}: accessKey {access_key!r} must not hold ':', spaces at its ends or controls"
        )
    where = f"{where} ({access_key})"
    secret_key = _key(entry, "secretKey", where)
    admin = entry.get("admin", False)
    if isinstance(admin, str) and admin.strip().lower() in ("true", "false"):
        admin = admin.strip().lower() == "true"
    if not isinstance(admin, bool):
        raise AclFileError(f"{where}: admin must be true or false")
    return Account(
        access_key=access_key,
        secret_key=secret_key.encode(),
        white_remote=_address(entry.get("whiteRemoteAddress"), f"{where}: whiteRemoteAddress"),
        admin=admin,
        default_topic_perm=_perm(entry.get("defaultTopicPerm", "DENY"), f"{where}: defaultTopicPerm"),
        default_group_perm=_perm(entry.get("defaultGroupPerm", "DENY"), f"{where}: defaultGroupPerm"),
        topic_perms=_perm_list(entry.get("topicPerms"), f"{where}: topicPerms"),
        group_perms=_perm_list(entry.get("groupPerms"), f"{where}: groupPerms"),
    )


def _document(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        # Only the position and the problem: the default text quotes the line, which may hold a secret.
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise AclFileError(f"not valid YAML: {where}{exc.problem}") from None
    except yaml.YAMLError as exc:
        raise AclFileError(f"not valid YAML: {type(exc).__name__}") from None


def parse_rules(text: str) -> AclRules:
    """The rules of an ACL document; AclFileError (one line, no secret) when it is not valid."""
    document = _document(text)
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise AclFileError("the document must be a mapping with accounts and globalWhiteRemoteAddresses")
    unknown = sorted(str(key) for key in document if key not in TOP_LEVEL_KEYS)
    if unknown:
        raise AclFileError(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(TOP_LEVEL_KEYS))})")
    white = document.get("globalWhiteRemoteAddresses")
    white = [] if white is None else white
    if not isinstance(white, list):
        raise AclFileError("globalWhiteRemoteAddresses must be a list")
    global_white = tuple(
        _address(item, f"globalWhiteRemoteAddresses[{index}]") for index, item in enumerate(white)
    )
    entries = document.get("accounts")
    entries = [] if entries is None else entries
    if not isinstance(entries, list):
        raise AclFileError("accounts must be a list")
    accounts: dict[str, Account] = {}
    for index, entry in enumerate(entries):
        account = _account(entry, f"accounts[{index}]")
        if account.access_key in accounts:
            raise AclFileError(f"accounts[{index}]: accessKey {account.access_key!r} is used twice")
        accounts[account.access_key] = account
    return AclRules(global_white, accounts)


def load_rules(path: Path) -> AclRules:
    """The rules of the file at ``path``; AclFileError names the file and the problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise AclFileError(f"ACL file {path} cannot be read: {reason}") from None
    try:
        return parse_rules(text)
    except AclFileError as exc:
        raise AclFileError(f"ACL file {path}: {exc}") from None
