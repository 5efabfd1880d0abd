"""Authentication and access control: RocketMQ's plain ACL over HTTP and WebSocket.

Off unless ``WHARF_ACL_FILE`` names a YAML file in RocketMQ's plain_acl.yml shape (app.acl.rules).
The rules, the credentials and the permission each request needs (app.acl.classify) live here;
the HTTP door that applies them, ``app.api.acl.install_acl``, reads the file when the app is made
- a file that is not valid raises :class:`AclFileError`, whose message is one line fit for stderr
- and puts its middleware in front of every route. The file is read again when it changes
(app.acl.watch).

Exceptions::

    AclFileError        the ACL file cannot be read or is not valid (at start: exit status 2)
    CredentialsError    a request's credentials are missing, malformed or wrong (401)
"""

from __future__ import annotations

from app.acl.credentials import CredentialsError
from app.acl.rules import AclFileError, AclRules, load_rules, parse_rules
from app.acl.watch import AclFile

__all__ = [
    "AclFile",
    "AclFileError",
    "AclRules",
    "CredentialsError",
    "load_rules",
    "parse_rules",
]
