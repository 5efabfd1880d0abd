"""Authentication and access control: RocketMQ's plain ACL over HTTP and WebSocket.

Off unless ``WHARF_ACL_FILE`` names a YAML file in RocketMQ's plain_acl.yml shape (app.acl.rules).
:func:`install_acl` reads it when the app is made - a file that is not valid raises
:class:`AclFileError`, whose message is one line fit for stderr - and puts :class:`AclMiddleware`
in front of every route. The file is read again when it changes (app.acl.watch).

Exceptions::

    AclFileError        the ACL file cannot be read or is not valid (at start: exit status 2)
    CredentialsError    a request's credentials are missing, malformed or wrong (401)
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI

from app.acl.credentials import CredentialsError
from app.acl.middleware import AclMiddleware
from app.acl.rules import AclFileError, AclRules, load_rules, parse_rules
from app.acl.watch import AclFile
from app.settings import Settings


def install_acl(app: FastAPI, settings: Settings) -> AclFile | None:
    """Guard every route with the rules of ``settings.acl_file``; nothing when it is not set."""
    if not settings.acl_file:
        return None
    acl = AclFile(Path(settings.acl_file), settings.acl_reload_interval_ms / 1000)
    app.add_middleware(AclMiddleware, acl=acl, max_body_bytes=settings.max_request_bytes)
    app.state.acl = acl
    return acl


__all__ = [
    "AclFile",
    "AclFileError",
    "AclMiddleware",
    "AclRules",
    "CredentialsError",
    "install_acl",
    "load_rules",
    "parse_rules",
]
