"""An optional speedup: the broker's compiled kernel, when the broker (the ``wharf`` distribution)
happens to be installed beside the client and its C extensions were built. The client uses two of its
functions, each with a pure-Python twin here that gives the same result (tests/kernel and
tests/client/test_codec.py check them): ``encode_outgoing`` (a producer's binary batch, twin
:func:`wharf_client.codec.encode_batch`) and ``decode_records`` (a binary pull answer's records,
twin :func:`wharf_client.codec.python_decode_records`). Nothing else of the broker is imported;
``WHARF_KERNEL=python`` turns the kernel off here as in the broker."""

from __future__ import annotations

from types import ModuleType

compiled: ModuleType | None
try:
    from app.store.kernel import compiled
except ImportError:
    compiled = None
