"""Deprecated: moved to :mod:`wharf_client.consumer` (the ``wharf-client`` distribution); this alias
goes in the next release. Importing it gives that very module, so patching one patches both."""

import sys

from wharf_client import consumer as _module
from wharf_client.consumer import *  # noqa: F403

sys.modules[__name__] = _module
