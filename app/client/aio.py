"""Deprecated: moved to :mod:`wharf_client.aio` (the ``wharf-client`` distribution); this alias
goes in the next release. Importing it gives that very module, so patching one patches both."""

import sys

from wharf_client import aio as _module
from wharf_client.aio import *  # noqa: F403

sys.modules[__name__] = _module
