# cython: language_level=3
"""Wharf's compiled kernel: the per-message work the interpreter is slowest at, in C.

Every function here has a pure-Python twin that gives identical results (``app.store.kernel`` picks one
and says which); tests/kernel compares them byte for byte. A record or batch this code does not
handle itself (a rare shape: an invalid UTF-8 text, duplicated or many properties, non-ASCII keys)
goes to the Python twin whole, so the twins never disagree on an edge case.

The record's layout: app/store/record_format.py. Built by setup.py (Cython, linked with zlib).

This module holds no code: it gathers the kernel's modules, one concern each, into the one
namespace ``app.store.kernel.compiled`` is (the names in _kernel.pyi). Their Python twins:

- _kernel_base.pxd/.pyx: the shared low-level layer the others cimport (the record's fixed part,
  a growable buffer, big-endian fields, UTF-8 checks, JSON strings and base64, Java's string hash).
- _kernel_records.pyx: one record's bytes (app.store.record_format.encode_record, and
  encode_records: app.store.writer.MessageWriter.append's loop over a batch,
  app.store.record.check_record and record_is, app.codec.message_json, messages_json and
  decode_records).
- _kernel_log.pyx: runs of records in a CommitLog segment (app.store.log_codec.write_records and
  collect_records) and one message's record with its ConsumeQueue entry
  (app.store.single_append.write_single).
- _kernel_index.pyx: the IndexFile's entries (app.store.index_file.IndexFile.index_messages, key_hash).
- _kernel_produce.pyx: the produce path's batches (app.broker.plain, app.broker.idempotency's
  BucketTable, app.codec.encode_batch for app.client.aio_producer).
- _kernel_columns.pyx: a pull answer as Arrow columns (spark_jobs.schema.BatchBuilder.from_page).
- _kernel_mapped.pyx: a mapped file's pages faulted in (app.store.mapped_file.populate).
"""

from app.store._kernel_columns import record_columns
from app.store._kernel_index import index_key_hash, index_messages
from app.store._kernel_log import bind_schedule, bind_writer, collect_records, write_records, write_single
from app.store._kernel_mapped import populate
from app.store._kernel_produce import (
    INT64_HIGH,
    INT64_LOW,
    DigestTable,
    PlainEncoder,
    encode_batch,
    encode_messages,
    encode_outgoing,
    plain_answers,
)
from app.store._kernel_records import (
    bind,
    bind_checker,
    bind_decoder,
    bind_reader,
    check_record,
    decode_records,
    encode_record,
    encode_records,
    message_json,
    messages_json,
    record_is,
)
