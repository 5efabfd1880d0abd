"""Loads Wharf's compiled kernel, the C extensions built from app/store/_kernel*.pyx at install.

The kernel is one extension module per concern (records, the CommitLog, the index, the produce
path, Spark's columns, mapped files, over a shared layer they cimport); ``app.store._kernel``
gathers their functions into the one namespace :data:`compiled` is, so a caller never names the
module a function lives in (app/store/_kernel.pyx lists them, with their twins).

Each kernel function has a pure-Python twin beside the code that uses it, with identical results
byte for byte (tests/kernel checks it): ``app.store.record_format.encode_record``,
``app.store.record.check_record`` and ``record_is``, ``app.codec.messages_json`` and
``decode_records``, ``app.store.log_codec.write_records`` and ``collect_records`` (a pull's
records within one segment), ``app.store.single_append.write_single`` (one message's record and its
ConsumeQueue entry), ``app.store.mapped_file.populate`` (a spare segment's pages faulted
in without the GIL), ``app.client.aio_producer.outgoing_batch`` (``encode_outgoing``: a client's binary
batch, twin ``app.codec.encode_batch``), ``app.store.index_file.key_hash`` (``index_key_hash``,
twin ``python_key_hash``) and ``app.store.index_file.IndexFile.index_messages`` take the
compiled function when :data:`compiled` is loaded and the twin otherwise; so does
``spark_jobs.schema.BatchBuilder.from_page`` (``record_columns``: a pull answer straight into Arrow
columns), whose twin is the builder's record-by-record path. ``encode_batch`` (a plain
binary batch into records, ``app.broker.plain``) has the broker's general produce path as its
twin. Which one runs is logged once, here. ``WHARF_KERNEL=python`` chooses the twins even when the
extensions are there.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType

log = logging.getLogger(__name__)


def _load() -> ModuleType | None:
    if os.environ.get("WHARF_KERNEL", "").lower() == "python":
        log.info("kernel: pure Python (WHARF_KERNEL=python)")
        return None
    try:
        from app.store import _kernel
    except ImportError as exc:
        log.warning("kernel: the compiled extension is missing (%s); running its pure-Python twin", exc)
        return None
    return _kernel


compiled = _load()
NAME = "compiled" if compiled is not None else "python"
