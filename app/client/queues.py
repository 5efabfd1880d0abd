"""Deprecated: moved to :mod:`wharf_client.queues` (the ``wharf-client`` distribution); this alias
goes in the next release. Importing it gives that very module, so patching one patches both."""

import sys

from wharf_client import queues as _module
from wharf_client.queues import *  # noqa: F403

sys.modules[__name__] = _module
