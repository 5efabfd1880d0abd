"""Deprecated: moved to :mod:`wharf_client.outgoing` (the ``wharf-client`` distribution); this alias
goes in the next release. Importing it gives that very module, so patching one patches both."""

import sys

from wharf_client import outgoing as _module
from wharf_client.outgoing import *  # noqa: F403

sys.modules[__name__] = _module
