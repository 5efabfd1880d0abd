# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The record codec and checks, compiled. Twins: ``app.store.record_format.encode_record`` (a
message into its CommitLog record), ``app.store.record.check_record`` (recovery's and the log
walks' check of a stored record) and ``record_is`` (whether a read is the record a ConsumeQueue
entry names), ``app.codec.message_json`` and ``messages_json`` (stored records as the pull API's
JSON messages) and ``decode_records`` (a binary pull answer back into messages, for clients).

The record's layout: app/store/record_format.py. Linked with zlib (CRC32).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.long cimport PyLong_Check
from cpython.unicode cimport PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport free
from libc.string cimport memchr, memcmp, memcpy

from app.store._kernel_base cimport (
    BLANK_MAGIC_CODE,
    FIXED_SIZE,
    HOSTS_V6,
    MAX_QUEUE_ID,
    MESSAGE_MAGIC_CODE,
    POS_BODY,
    POS_BODYLENGTH,
    POS_BORNTIMESTAMP,
    POS_PHYSICALOFFSET,
    POS_QUEUEID,
    POS_QUEUEOFFSET,
    POS_RECONSUMETIMES,
    POS_STOREHOST,
    POS_STORETIMESTAMP,
    POS_SYSFLAG,
    PROPERTIES_END,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED,
    TRANSACTION_ROLLBACK,
    Buffer,
    is_ascii,
    java_hash,
    put,
    put_base64_string,
    put_bytes,
    put_int,
    put_json_string,
    read_i16,
    read_i32,
    read_i64,
    reserve,
    take,
    utf8_of,
    valid_utf8,
    write_i32,
    write_i64,
)


cdef extern from "zlib.h":
    unsigned long zcrc32 "crc32" (unsigned long crc, const uint8_t* data, unsigned int length) nogil


cdef enum:
    # Records with more properties go to the Python twin (the duplicate check here is quadratic).
    MAX_FAST_PROPERTIES = 64


# A message id's hex digits (each module that writes ids has this table).
cdef const char* HEX_UPPER = b"0123456789ABCDEF"


# ---------------------------------------------------------------------------------------------
# The pull API's message object, straight from a stored record (app.codec.record_to_json).

cdef struct Span:
    Py_ssize_t start
    Py_ssize_t length


cdef struct Property:
    Span name
    Span value
    bint dropped


cdef inline bint same(const uint8_t* text, Span a, Span b) noexcept nogil:
    return a.length == b.length and memcmp(text + a.start, text + b.start, a.length) == 0


cdef inline bint named(const uint8_t* text, Span span, const char* name, Py_ssize_t length) noexcept nogil:
    return span.length == length and memcmp(text + span.start, name, length) == 0


cdef bint is_split_space(uint8_t c) noexcept nogil:
    # What str.split() splits on, among ASCII characters.
    return c == 32 or (9 <= c <= 13) or (28 <= c <= 31)


cdef const char* RETRY_PREFIX = b"%RETRY%"


cdef int put_message(Buffer* buffer, const uint8_t* record, Py_ssize_t size, bint consumed) except -1:
    """Write the record's message object; 1 (and nothing written) when the record is a shape the
    Python twin handles instead."""
    cdef Property properties[MAX_FAST_PROPERTIES]
    cdef int count = 0, i, j
    cdef Py_ssize_t start = buffer.size, at, item_end, cut
    cdef Span tags = Span(0, 0), keys = Span(0, 0), unique_id = Span(0, 0), span
    cdef bint has_tags = False, has_keys = False, has_unique_id = False, first
    cdef int32_t body_length
    cdef int16_t properties_length
    cdef Py_ssize_t body_end, topic_end, properties_start, properties_end
    cdef int64_t physical_offset
    cdef char hex_id[32]
    if size < FIXED_SIZE or read_i32(record + POS_SYSFLAG) & HOSTS_V6:
        return 1  # short, or IPv6 hosts: the twin reads those
    body_length = read_i32(record + POS_BODYLENGTH)
    if body_length < 0 or POS_BODY + <Py_ssize_t>body_length + 3 > size:
        return 1
    body_end = POS_BODY + body_length
    topic_end = body_end + 1 + record[body_end]
    if topic_end + 2 > size:
        return 1
    properties_length = read_i16(record + topic_end)
    properties_start = topic_end + 2
    properties_end = properties_start + properties_length
    if properties_length < 0 or properties_end > size:
        return 1
    physical_offset = read_i64(record + POS_PHYSICALOFFSET)
    if physical_offset < 0 or not is_ascii(record + body_end + 1, topic_end - body_end - 1):
        return 1
    if not valid_utf8(record + properties_start, properties_length):
        return 1
    # Properties: "name\x01value\x02"..., split as the Python twin splits them; a later duplicate
    # replaces an earlier one's value in the earlier one's place.
    at = properties_start
    while at < properties_end:
        item_end = at
        while item_end < properties_end and record[item_end] != 2:
            item_end += 1
        if item_end > at:
            if count == MAX_FAST_PROPERTIES:
                return 1
            cut = at
            while cut < item_end and record[cut] != 1:
                cut += 1
            properties[count].name.start = at
            properties[count].name.length = cut - at
            properties[count].value.start = cut + 1 if cut < item_end else item_end
            properties[count].value.length = item_end - properties[count].value.start
            properties[count].dropped = False
            for j in range(count):
                if not properties[j].dropped and same(record, properties[j].name, properties[count].name):
                    properties[j].value = properties[count].value
                    properties[count].dropped = True
                    break
            count += 1
        at = item_end + 1
    for i in range(count):
        if properties[i].dropped:
            continue
        span = properties[i].name
        if named(record, span, b"TAGS", 4):
            tags, has_tags, properties[i].dropped = properties[i].value, True, True
        elif named(record, span, b"KEYS", 4):
            keys, has_keys, properties[i].dropped = properties[i].value, True, True
        elif named(record, span, b"UNIQ_KEY", 8):
            unique_id, has_unique_id, properties[i].dropped = properties[i].value, True, True
        elif consumed and named(record, span, b"RETRY_TOPIC", 11) and properties[i].value.length:
            if topic_end - body_end - 1 >= 7 and memcmp(record + body_end + 1, RETRY_PREFIX, 7) == 0:
                return 1  # shown under its original topic: the Python twin rewrites it
    if has_keys and not is_ascii(record + keys.start, keys.length):
        return 1  # str.split() splits on non-ASCII spaces too
    # msg_id: STOREHOST and PHYSICALOFFSET in 32 upper-case hex digits.
    for i in range(8):
        hex_id[2 * i] = HEX_UPPER[record[POS_STOREHOST + i] >> 4]
        hex_id[2 * i + 1] = HEX_UPPER[record[POS_STOREHOST + i] & 15]
    for i in range(8):
        hex_id[16 + 2 * i] = HEX_UPPER[record[POS_PHYSICALOFFSET + i] >> 4]
        hex_id[17 + 2 * i] = HEX_UPPER[record[POS_PHYSICALOFFSET + i] & 15]
    put(buffer, b'{"msg_id":"', 11)
    put(buffer, hex_id, 32)
    put(buffer, b'","unique_id":', 14)
    if has_unique_id:
        put_json_string(buffer, record + unique_id.start, unique_id.length)
    else:
        put(buffer, b'""', 2)
    put(buffer, b',"topic":', 9)
    put_json_string(buffer, record + body_end + 1, topic_end - body_end - 1)
    put(buffer, b',"queue_id":', 12)
    put_int(buffer, read_i32(record + POS_QUEUEID))
    put(buffer, b',"queue_offset":', 16)
    put_int(buffer, read_i64(record + POS_QUEUEOFFSET))
    put(buffer, b',"tags":', 8)
    if has_tags:
        put_json_string(buffer, record + tags.start, tags.length)
    else:
        put(buffer, b'""', 2)
    put(buffer, b',"keys":[', 9)
    if has_keys:
        first = True
        at = keys.start
        item_end = keys.start + keys.length
        while at < item_end:
            while at < item_end and is_split_space(record[at]):
                at += 1
            cut = at
            while cut < item_end and not is_split_space(record[cut]):
                cut += 1
            if cut > at:
                if not first:
                    put(buffer, b",", 1)
                put_json_string(buffer, record + at, cut - at)
                first = False
            at = cut
    put(buffer, b'],"properties":{', 16)
    first = True
    for i in range(count):
        if properties[i].dropped:
            continue
        if not first:
            put(buffer, b",", 1)
        put_json_string(buffer, record + properties[i].name.start, properties[i].name.length)
        put(buffer, b":", 1)
        put_json_string(buffer, record + properties[i].value.start, properties[i].value.length)
        first = False
    put(buffer, b'},"body":', 9)
    if valid_utf8(record + POS_BODY, body_length):
        put_json_string(buffer, record + POS_BODY, body_length)
        put(buffer, b',"encoding":"utf8"', 18)
    else:
        put_base64_string(buffer, record + POS_BODY, body_length)
        put(buffer, b',"encoding":"base64"', 20)
    put(buffer, b',"born_timestamp":', 18)
    put_int(buffer, read_i64(record + POS_BORNTIMESTAMP))
    put(buffer, b',"store_timestamp":', 19)
    put_int(buffer, read_i64(record + POS_STORETIMESTAMP))
    put(buffer, b',"reconsume_times":', 19)
    put_int(buffer, read_i32(record + POS_RECONSUMETIMES))
    put(buffer, b"}", 1)
    return 0


cdef int put_record(Buffer* buffer, object record, bint consumed, object fallback) except -1:
    cdef Py_buffer view
    cdef Py_ssize_t start = buffer.size
    cdef int handled
    PyObject_GetBuffer(record, &view, PyBUF_SIMPLE)
    try:
        handled = view.len > 0 and put_message(buffer, <const uint8_t*>view.buf, view.len, consumed) == 0
    finally:
        PyBuffer_Release(&view)
    if not handled:
        buffer.size = start
        put_bytes(buffer, fallback(record, consumed))
    return 0


def message_json(record, bint consumed, fallback):
    """The JSON message object of one stored record (``consumed``: as a group's consumer sees it);
    ``fallback(record, consumed)`` encodes the shapes this code leaves to Python."""
    cdef Buffer buffer = Buffer(NULL, 0, 0)
    try:
        put_record(&buffer, record, consumed, fallback)
        return take(&buffer)
    finally:
        free(buffer.data)


def messages_json(records, bint consumed, fallback):
    """A JSON array of the records' message objects."""
    cdef Buffer buffer = Buffer(NULL, 0, 0)
    cdef bint first = True
    cdef Py_ssize_t estimate = 2
    if type(records) is list:
        # Room for text bodies and the fields around them, so that the buffer seldom grows.
        for record in <list>records:
            estimate += len(record) + 320
    try:
        reserve(&buffer, estimate)
        put(&buffer, b"[", 1)
        for record in records:
            if not first:
                put(&buffer, b",", 1)
            put_record(&buffer, record, consumed, fallback)
            first = False
        put(&buffer, b"]", 1)
        return take(&buffer)
    finally:
        free(buffer.data)


# ---------------------------------------------------------------------------------------------
# The CommitLog record of a message (app.store.record_format.encode_record).


_EncodedRecord = None  # declared in _kernel_records.pxd: PlainEncoder builds records of it too
cdef object _validate_topic = None


def bind(encoded_record, validate_topic):
    """Give the kernel the tuple type it returns records as, and the store's topic check (which
    raises the store's own error)."""
    global _EncodedRecord, _validate_topic
    _EncodedRecord = encoded_record
    _validate_topic = validate_topic


cdef char* put_record_head(
    char* out,
    Py_ssize_t total,
    const char* body,
    Py_ssize_t body_length,
    int32_t queue_id,
    int32_t flag,
    int32_t sysflag,
    int64_t born_timestamp,
    const char* born_host,
    const char* store_host,
    int32_t reconsume_times,
    int64_t prepared,
    const char* topic,
    Py_ssize_t topic_length,
    Py_ssize_t properties_length,
) noexcept nogil:
    """Write a record up to its properties (placeholders for the queue offset, physical offset
    and store timestamp); returns where the properties go."""
    write_i32(out, <int32_t>total)
    write_i32(out + 4, <int32_t>0xDAA320A7)
    write_i32(out + 8, <int32_t>(zcrc32(0, <const uint8_t*>body, <unsigned int>body_length) & 0x7FFFFFFF))
    write_i32(out + POS_QUEUEID, queue_id)
    write_i32(out + 16, flag)
    write_i64(out + POS_QUEUEOFFSET, -1)
    write_i64(out + POS_PHYSICALOFFSET, -1)
    write_i32(out + 36, sysflag)
    write_i64(out + POS_BORNTIMESTAMP, born_timestamp)
    memcpy(out + 48, born_host, 8)
    write_i64(out + POS_STORETIMESTAMP, -1)
    memcpy(out + POS_STOREHOST, store_host, 8)
    write_i32(out + POS_RECONSUMETIMES, reconsume_times)
    write_i64(out + 76, prepared)
    write_i32(out + POS_BODYLENGTH, <int32_t>body_length)
    memcpy(out + POS_BODY, body, body_length)
    out += POS_BODY + body_length
    out[0] = <char>topic_length
    memcpy(out + 1, topic, topic_length)
    out += 1 + topic_length
    out[0] = <char>(properties_length >> 8)
    out[1] = <char>properties_length
    return out + 2


def encode_record(message, bytes store_host, int64_t now_ms, limits):
    """The record of ``message`` with placeholders unpatched, as an EncodedRecord; None when the
    message is one the Python twin must handle (to refuse it), checked in the twin's order."""
    return _encode_record(
        message, store_host, now_ms, limits.max_message_size, limits.max_properties_size, limits.max_topic_length
    )


def encode_records(messages, bytes store_host, int64_t now_ms, limits, Py_ssize_t max_record_size):
    """``app.store.writer.MessageWriter.append``'s loop in one call (its twin: that loop): the
    records of ``messages``, their total size and their new ConsumeQueue entries per (topic, queue
    id). None when a message is one the loop must refuse or the Python encoder must take (a queue id
    out of range, a record over ``max_record_size`` bytes, any message :func:`encode_record` leaves):
    the loop then encodes them all again and raises the error it would have."""
    cdef Py_ssize_t max_message_size = limits.max_message_size, max_properties_size = limits.max_properties_size
    cdef object max_topic_length = limits.max_topic_length
    cdef list records = []
    cdef dict entries = {}
    cdef Py_ssize_t total = 0, size
    cdef int64_t kind
    cdef object queue_id, record, key, sysflag
    for message in messages:
        queue_id = message.queue_id
        if not PyLong_Check(queue_id) or not 0 <= queue_id < MAX_QUEUE_ID:
            return None
        record = _encode_record(message, store_host, now_ms, max_message_size, max_properties_size, max_topic_length)
        if record is None:
            return None
        size = len(<bytes>(<tuple>record)[0])
        if size > max_record_size:
            return None
        total += size
        records.append(record)
        sysflag = message.sysflag
        kind = <int64_t>sysflag & TRANSACTION_MASK
        if kind != TRANSACTION_PREPARED and kind != TRANSACTION_ROLLBACK:
            key = (message.topic, queue_id)
            entries[key] = entries.get(key, 0) + 1
    return records, total, entries


cdef object _encode_record(
    message,
    bytes store_host,
    int64_t now_ms,
    Py_ssize_t max_message_size,
    Py_ssize_t max_properties_size,
    object max_topic_length,
):
    cdef object body = message.body
    cdef object properties = message.properties
    cdef bytes topic
    cdef Py_ssize_t body_length, topic_length, properties_length = 0, total, name_length, value_length
    cdef const char* name
    cdef const char* value
    cdef char* out
    cdef int32_t queue_id, flag, sysflag, reconsume_times, tags_code = 0
    cdef int64_t born_timestamp, prepared
    cdef str tags = "", keys = "", unique_id = ""
    if type(body) is not bytes or type(properties) is not dict or len(store_host) != 8:
        return None
    body_length = len(body)
    if body_length == 0 or body_length > max_message_size:
        return None
    topic = _validate_topic(message.topic, max_topic_length)
    topic_length = len(topic)
    if topic_length > 255:
        return None
    born_host = message.born_host
    if type(born_host) is not bytes or len(born_host) != 8:
        return None
    fields = (
        message.queue_id,
        message.flag,
        message.sysflag,
        message.reconsume_times,
        message.born_timestamp or now_ms,
        message.prepared_transaction_offset,
    )
    for field in fields:
        if not PyLong_Check(field):
            return None  # struct refuses what is not an int; C conversion would not
    try:
        queue_id, flag, sysflag, reconsume_times, born_timestamp, prepared = fields
    except OverflowError:
        return None
    sysflag = (sysflag & ~HOSTS_V6) | PROPERTIES_END  # Wharf writes IPv4 hosts
    for key, text in (<dict>properties).items():
        name = utf8_of(key, &name_length)
        value = utf8_of(text, &value_length)
        if name == NULL or value == NULL or name_length == 0 or value_length == 0:
            return None
        if memchr(name, 1, name_length) or memchr(name, 2, name_length):
            return None
        if memchr(value, 1, value_length) or memchr(value, 2, value_length):
            return None
        properties_length += name_length + value_length + 2
    if properties_length > max_properties_size or properties_length > 32767:
        return None
    total = FIXED_SIZE + body_length + topic_length + properties_length
    data = PyBytes_FromStringAndSize(NULL, total)
    out = put_record_head(
        PyBytes_AS_STRING(data),
        total,
        PyBytes_AS_STRING(body),
        body_length,
        queue_id,
        flag,
        sysflag,
        born_timestamp,
        PyBytes_AS_STRING(born_host),
        PyBytes_AS_STRING(store_host),
        reconsume_times,
        prepared,
        PyBytes_AS_STRING(topic),
        topic_length,
        properties_length,
    )
    for key, text in (<dict>properties).items():
        name = utf8_of(key, &name_length)
        value = utf8_of(text, &value_length)
        memcpy(out, name, name_length)
        out[name_length] = 1
        out += name_length + 1
        memcpy(out, value, value_length)
        out[value_length] = 2
        out += value_length + 1
    if properties:
        tags = (<dict>properties).get("TAGS", "")
        keys = (<dict>properties).get("KEYS", "")
        unique_id = (<dict>properties).get("UNIQ_KEY", "")
        if tags:
            tags_code = java_hash(tags)
    return tuple.__new__(_EncodedRecord, (data, message.topic, queue_id, tags_code, keys, unique_id, sysflag))


# ---------------------------------------------------------------------------------------------
# Validating a stored record, as recovery and the log walks do (app.store.record.check_record).


cdef object _CheckedRecord = None
cdef object _BLANK = None


def bind_checker(checked_record, blank):
    """Give the kernel the tuple type it returns checked records as, and the blank one."""
    global _CheckedRecord, _BLANK
    _CheckedRecord = checked_record
    _BLANK = blank


cdef bint topic_character(uint8_t c) noexcept nogil:
    # [%|a-zA-Z0-9_-]
    return (
        (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122) or c == 37 or c == 124 or c == 95 or c == 45
    )


cdef object check(const uint8_t* buf, Py_ssize_t length, Py_ssize_t pos, int64_t physical_offset,
                  bint with_properties):
    cdef Py_ssize_t remaining = length - pos, body_end, topic_end, record_end, at, item_end, cut
    cdef int32_t total, magic, body_crc, body_length
    cdef unsigned long crc
    cdef int16_t properties_length
    cdef int64_t queue_offset, store_ts
    cdef Py_ssize_t i
    cdef Span tags = Span(0, 0), keys = Span(0, 0), unique_id = Span(0, 0), name
    cdef bint has_tags = False, has_keys = False, has_unique_id = False
    if remaining < 8:
        return None
    total = read_i32(buf + pos)
    magic = read_i32(buf + pos + 4)
    if magic == BLANK_MAGIC_CODE:
        return _BLANK if total == remaining else None
    if magic != MESSAGE_MAGIC_CODE or total < FIXED_SIZE or total > remaining:
        return None
    if read_i32(buf + pos + POS_SYSFLAG) & HOSTS_V6:
        return NotImplemented  # IPv6 hosts (RocketMQ's records only): the twin checks those
    queue_offset = read_i64(buf + pos + POS_QUEUEOFFSET)
    store_ts = read_i64(buf + pos + POS_STORETIMESTAMP)
    if read_i64(buf + pos + POS_PHYSICALOFFSET) != physical_offset or queue_offset < 0 or store_ts < 0:
        return None
    body_length = read_i32(buf + pos + POS_BODYLENGTH)
    if body_length < 0 or body_length > total - FIXED_SIZE:
        return None
    body_end = pos + POS_BODY + body_length
    topic_end = body_end + 1 + buf[body_end]
    record_end = pos + total
    if topic_end + 2 > record_end:
        return None
    properties_length = read_i16(buf + topic_end)
    if properties_length < 0 or topic_end + 2 + properties_length != record_end:
        return None
    if properties_length and read_i32(buf + pos + 36) & PROPERTIES_END and buf[record_end - 1] != 2:
        return None  # Wharf's records end their properties with a separator: else a torn tail
    # RocketMQ's masked CRC, or the full one a store written before the mask holds.
    body_crc = read_i32(buf + pos + 8)
    crc = zcrc32(0, buf + pos + POS_BODY, <unsigned int>body_length)
    if <int32_t>(crc & 0x7FFFFFFF) != body_crc and <int32_t><uint32_t>crc != body_crc:
        return None
    if topic_end == body_end + 1:
        return None
    for i in range(body_end + 1, topic_end):
        if not topic_character(buf[i]):
            return None
    topic = PyUnicode_DecodeASCII(<char*>buf + body_end + 1, topic_end - body_end - 1, NULL)
    queue_id = read_i32(buf + pos + POS_QUEUEID)
    sysflag = read_i32(buf + pos + 36)
    if not with_properties:
        return tuple.__new__(_CheckedRecord, (total, topic, queue_id, queue_offset, 0, "", "", sysflag, store_ts))
    at = topic_end + 2
    if not valid_utf8(buf + at, properties_length):
        return None
    # The last of each name wins, as in the dict the Python twin builds.
    while at < record_end:
        item_end = at
        while item_end < record_end and buf[item_end] != 2:
            item_end += 1
        if item_end > at:
            cut = at
            while cut < item_end and buf[cut] != 1:
                cut += 1
            name.start = at
            name.length = cut - at
            if cut < item_end:
                cut += 1
            if named(buf, name, b"TAGS", 4):
                tags.start, tags.length, has_tags = cut, item_end - cut, True
            elif named(buf, name, b"KEYS", 4):
                keys.start, keys.length, has_keys = cut, item_end - cut, True
            elif named(buf, name, b"UNIQ_KEY", 8):
                unique_id.start, unique_id.length, has_unique_id = cut, item_end - cut, True
        at = item_end + 1
    tags_text = PyUnicode_DecodeUTF8(<char*>buf + tags.start, tags.length, NULL) if has_tags else ""
    return tuple.__new__(
        _CheckedRecord,
        (
            total,
            topic,
            queue_id,
            queue_offset,
            java_hash(tags_text) if tags_text else 0,
            PyUnicode_DecodeUTF8(<char*>buf + keys.start, keys.length, NULL) if has_keys else "",
            PyUnicode_DecodeUTF8(<char*>buf + unique_id.start, unique_id.length, NULL) if has_unique_id else "",
            sysflag,
            store_ts,
        ),
    )


def check_record(buf, Py_ssize_t pos, physical_offset, bint with_properties):
    """The Python twin's answer for the record at ``pos``: a CheckedRecord, the blank, or None;
    NotImplemented when the twin must answer (a position or offset outside what this code reads)."""
    cdef Py_buffer view
    cdef int64_t offset
    if pos < 0 or type(physical_offset) is not int:
        return NotImplemented
    try:
        offset = physical_offset
    except OverflowError:
        return NotImplemented
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if view.len < pos:
            return NotImplemented
        return check(<const uint8_t*>view.buf, view.len, pos, offset, with_properties)
    finally:
        PyBuffer_Release(&view)


# ---------------------------------------------------------------------------------------------
# Whether a read is the record a ConsumeQueue entry promises (app.store.record.record_is).

cdef object _python_record_is = None


def bind_reader(python_record_is):
    """Give the kernel the Python twin it hands odd arguments to."""
    global _python_record_is
    _python_record_is = python_record_is


def record_is(buf, bytes topic, queue_id, queue_offset, physical_offset):
    """Whether ``buf`` is exactly the message record of that topic, queue and queue offset, stored
    at ``physical_offset`` (the Python twin's answer, for the same arguments)."""
    cdef Py_buffer view
    cdef int64_t wanted_queue_id, wanted_queue_offset, wanted_offset
    if type(queue_id) is not int or type(queue_offset) is not int or type(physical_offset) is not int:
        return _python_record_is(buf, topic, queue_id, queue_offset, physical_offset)
    try:
        wanted_queue_id = queue_id
        wanted_queue_offset = queue_offset
        wanted_offset = physical_offset
    except OverflowError:
        return False  # no stored field holds such a number
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return is_record(<const uint8_t*>view.buf, view.len, topic, wanted_queue_id, wanted_queue_offset, wanted_offset)
    finally:
        PyBuffer_Release(&view)




# ---------------------------------------------------------------------------------------------
# A binary pull answer back into messages (app.codec.decode_records), for clients.

cdef object _StoredMessage = None


def bind_decoder(stored_message):
    """Give the kernel the class it decodes records into."""
    global _StoredMessage
    _StoredMessage = stored_message


cdef object decode_one(const uint8_t* record, Py_ssize_t size):
    """The record's StoredMessage, or None when it is not a whole, valid message record."""
    cdef int32_t body_length
    cdef int16_t properties_length
    cdef Py_ssize_t body_end, topic_end, properties_start, at, item_end, cut
    cdef dict properties = {}
    if size < FIXED_SIZE or read_i32(record + 4) != MESSAGE_MAGIC_CODE or read_i32(record) != size:
        return None
    if read_i32(record + POS_SYSFLAG) & HOSTS_V6:
        return None  # IPv6 hosts: the twin decodes those
    body_length = read_i32(record + POS_BODYLENGTH)
    if body_length < 0 or body_length > size - FIXED_SIZE:
        return None
    body_end = POS_BODY + body_length
    topic_end = body_end + 1 + record[body_end]
    if topic_end + 2 > size:
        return None
    properties_length = read_i16(record + topic_end)
    properties_start = topic_end + 2
    if properties_length < 0 or properties_start + properties_length != size:
        return None
    if not is_ascii(record + body_end + 1, topic_end - body_end - 1):
        return None
    if not valid_utf8(record + properties_start, properties_length):
        return None
    at = properties_start
    while at < size:
        item_end = at
        while item_end < size and record[item_end] != 2:
            item_end += 1
        if item_end > at:
            cut = at
            while cut < item_end and record[cut] != 1:
                cut += 1
            properties[PyUnicode_DecodeUTF8(<char*>record + at, cut - at, NULL)] = (
                PyUnicode_DecodeUTF8(<char*>record + cut + 1, item_end - cut - 1, NULL) if cut < item_end else ""
            )
        at = item_end + 1
    return _StoredMessage(
        PyUnicode_DecodeASCII(<char*>record + body_end + 1, topic_end - body_end - 1, NULL),
        read_i32(record + POS_QUEUEID),
        read_i64(record + POS_QUEUEOFFSET),
        read_i64(record + POS_PHYSICALOFFSET),
        size,
        PyBytes_FromStringAndSize(<char*>record + POS_BODY, body_length),
        properties,
        read_i32(record + 16),
        read_i32(record + 36),
        read_i32(record + 8),
        read_i64(record + POS_BORNTIMESTAMP),
        PyBytes_FromStringAndSize(<char*>record + 48, 8),
        read_i64(record + POS_STORETIMESTAMP),
        PyBytes_FromStringAndSize(<char*>record + POS_STOREHOST, 8),
        read_i32(record + POS_RECONSUMETIMES),
        read_i64(record + 76),
    )


def decode_records(data, fallback):
    """The StoredMessages of a binary pull answer (concatenated records); ``fallback(data)`` (the
    Python twin) answers, or raises, for one this code finds anything wrong with."""
    cdef Py_buffer view
    cdef const uint8_t* at
    cdef Py_ssize_t position = 0, size
    cdef list messages = []
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        at = <const uint8_t*>view.buf
        while position < view.len:
            if view.len - position < 4:
                return fallback(data)
            size = read_i32(at + position)
            if size <= 0 or position + size > view.len:
                return fallback(data)
            message = decode_one(at + position, size)
            if message is None:
                return fallback(data)
            messages.append(message)
            position += size
    finally:
        PyBuffer_Release(&view)
    return messages
