# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Wharf's compiled kernel: the per-message work the interpreter is slowest at, in C.

Every function here has a pure-Python twin that gives identical results (``app.store.kernel`` picks one
and says which); tests/kernel compares them byte for byte. A record or batch this code does not
handle itself (a rare shape: an invalid UTF-8 text, duplicated or many properties, non-ASCII keys)
goes to the Python twin whole, so the twins never disagree on an edge case.

The record's layout: app/store/record_format.py. Built by setup.py (Cython, linked with zlib).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.long cimport PyLong_Check
from cpython.sequence cimport PySequence_GetSlice
from cpython.mem cimport PyMem_Calloc, PyMem_Free, PyMem_Malloc
from cpython.unicode cimport (
    PyUnicode_AsUTF8AndSize,
    PyUnicode_DecodeASCII,
    PyUnicode_DecodeUTF8,
    PyUnicode_READ_CHAR,
)
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memchr, memcmp, memcpy, memset


cdef extern from "zlib.h":
    unsigned long zcrc32 "crc32" (unsigned long crc, const uint8_t* data, unsigned int length) nogil

# The record's fixed part (app.store.record_format).
cdef enum:
    FIXED_SIZE = 91
    POS_QUEUEID = 12
    POS_QUEUEOFFSET = 20
    POS_PHYSICALOFFSET = 28
    POS_BORNTIMESTAMP = 40
    POS_STORETIMESTAMP = 56
    POS_STOREHOST = 64
    POS_RECONSUMETIMES = 72
    POS_BODYLENGTH = 84
    POS_BODY = 88
    POS_SYSFLAG = 36
    # SYSFLAG bits of a record with an IPv6 born / store host (20 bytes where IPv4 takes 8): the
    # fields after such a host move 12 bytes on (app.store.record_format.layout_of).
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    HOSTS_V6 = 0x30
    V6_EXTRA = 12
    # Records with more properties go to the Python twin (the duplicate check here is quadratic).
    MAX_FAST_PROPERTIES = 64


# ---------------------------------------------------------------------------------------------
# A growable byte buffer.

cdef struct Buffer:
    char* data
    Py_ssize_t size
    Py_ssize_t capacity


cdef int reserve(Buffer* buffer, Py_ssize_t extra) except -1:
    cdef Py_ssize_t needed = buffer.size + extra
    cdef Py_ssize_t capacity = buffer.capacity if buffer.capacity else 4096
    cdef char* data
    if needed <= buffer.capacity:
        return 0
    while capacity < needed:
        capacity *= 2
    data = <char*>realloc(buffer.data, capacity)
    if data == NULL:
        raise MemoryError()
    buffer.data = data
    buffer.capacity = capacity
    return 0


cdef inline int put(Buffer* buffer, const char* text, Py_ssize_t length) except -1:
    if buffer.size + length > buffer.capacity:
        reserve(buffer, length)
    memcpy(buffer.data + buffer.size, text, length)
    buffer.size += length
    return 0


cdef inline int put_bytes(Buffer* buffer, bytes text) except -1:
    return put(buffer, text, len(text))


cdef int put_int(Buffer* buffer, int64_t value) except -1:
    cdef char digits[24]
    cdef int at = 24
    cdef uint64_t magnitude = <uint64_t>(-(value + 1)) + 1 if value < 0 else <uint64_t>value
    if magnitude == 0:
        at -= 1
        digits[at] = 48
    while magnitude:
        at -= 1
        digits[at] = <char>(48 + magnitude % 10)
        magnitude //= 10
    if value < 0:
        at -= 1
        digits[at] = 45
    return put(buffer, digits + at, 24 - at)


cdef bytes take(Buffer* buffer):
    result = PyBytes_FromStringAndSize(buffer.data, buffer.size)
    free(buffer.data)
    buffer.data = NULL
    buffer.size = buffer.capacity = 0
    return result


# ---------------------------------------------------------------------------------------------
# Big-endian fields.

cdef inline int64_t read_i64(const uint8_t* at) noexcept nogil:
    return <int64_t>(
        (<uint64_t>at[0] << 56) | (<uint64_t>at[1] << 48) | (<uint64_t>at[2] << 40) | (<uint64_t>at[3] << 32)
        | (<uint64_t>at[4] << 24) | (<uint64_t>at[5] << 16) | (<uint64_t>at[6] << 8) | <uint64_t>at[7]
    )


cdef inline int32_t read_i32(const uint8_t* at) noexcept nogil:
    return <int32_t>((<uint32_t>at[0] << 24) | (<uint32_t>at[1] << 16) | (<uint32_t>at[2] << 8) | <uint32_t>at[3])


cdef inline Py_ssize_t host_bytes_extra(const uint8_t* record) noexcept nogil:
    """How far an IPv6 born or store host moves a record's later fields (0, 12 or 24 bytes)."""
    cdef int32_t sysflag = read_i32(record + POS_SYSFLAG)
    return (V6_EXTRA if sysflag & BORNHOST_V6 else 0) + (V6_EXTRA if sysflag & STOREHOST_V6 else 0)


cdef inline int16_t read_i16(const uint8_t* at) noexcept nogil:
    return <int16_t>((<uint16_t>at[0] << 8) | <uint16_t>at[1])


# ---------------------------------------------------------------------------------------------
# Text: UTF-8 validation as strict as Python's decoder, JSON strings as orjson writes them.

# Eight bytes at a time (SWAR): which words hold a byte that needs a closer look.
cdef uint64_t ONES = 0x0101010101010101ULL
cdef uint64_t HIGHS = 0x8080808080808080ULL


cdef inline uint64_t load(const uint8_t* at) noexcept nogil:
    cdef uint64_t word
    memcpy(&word, at, 8)
    return word


cdef inline bint has_byte(uint64_t word, uint8_t value) noexcept nogil:
    cdef uint64_t x = word ^ (ONES * value)
    return ((x - ONES) & ~x & HIGHS) != 0


cdef inline bint needs_escape(uint64_t word) noexcept nogil:
    """Whether a byte of ``word`` is below 0x20, a quote or a backslash (exact, no false negative)."""
    return (((word - ONES * 0x20) & ~word & HIGHS) != 0) or has_byte(word, 34) or has_byte(word, 92)


cdef bint valid_utf8(const uint8_t* text, Py_ssize_t length) noexcept nogil:
    cdef Py_ssize_t i = 0
    cdef uint8_t c, c1
    while i < length:
        if i + 8 <= length and (load(text + i) & HIGHS) == 0:
            i += 8
            continue
        c = text[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2 or c > 0xF4:
            return False
        if c < 0xE0:
            if i + 1 >= length or (text[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
        elif c < 0xF0:
            if i + 2 >= length:
                return False
            c1 = text[i + 1]
            if (c1 & 0xC0) != 0x80 or (text[i + 2] & 0xC0) != 0x80:
                return False
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F):
                return False
            i += 3
        else:
            if i + 3 >= length:
                return False
            c1 = text[i + 1]
            if (c1 & 0xC0) != 0x80 or (text[i + 2] & 0xC0) != 0x80 or (text[i + 3] & 0xC0) != 0x80:
                return False
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F):
                return False
            i += 4
    return True


cdef bint is_ascii(const uint8_t* text, Py_ssize_t length) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(length):
        if text[i] >= 0x80:
            return False
    return True


cdef const char* HEX_LOWER = b"0123456789abcdef"
cdef const char* HEX_UPPER = b"0123456789ABCDEF"


cdef int put_json_string(Buffer* buffer, const uint8_t* text, Py_ssize_t length) except -1:
    """``text`` (valid UTF-8) as a JSON string, escaped exactly as orjson escapes it."""
    cdef Py_ssize_t i, run = 0
    cdef uint8_t c
    cdef char escape[6]
    reserve(buffer, length + 2)
    put(buffer, b'"', 1)
    i = 0
    while i < length:
        if i + 8 <= length and not needs_escape(load(text + i)):
            i += 8
            continue
        c = text[i]
        if c >= 0x20 and c != 34 and c != 92:
            i += 1
            continue
        if i > run:
            put(buffer, <const char*>text + run, i - run)
        run = i + 1
        if c == 34:
            put(buffer, b'\\"', 2)
        elif c == 92:
            put(buffer, b"\\\\", 2)
        elif c == 10:
            put(buffer, b"\\n", 2)
        elif c == 13:
            put(buffer, b"\\r", 2)
        elif c == 9:
            put(buffer, b"\\t", 2)
        elif c == 8:
            put(buffer, b"\\b", 2)
        elif c == 12:
            put(buffer, b"\\f", 2)
        else:
            escape[0] = 92
            escape[1] = 117
            escape[2] = 48
            escape[3] = 48
            escape[4] = HEX_LOWER[c >> 4]
            escape[5] = HEX_LOWER[c & 15]
            put(buffer, escape, 6)
        i += 1
    if length > run:
        put(buffer, <const char*>text + run, length - run)
    put(buffer, b'"', 1)
    return 0


cdef const char* BASE64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


cdef int put_base64_string(Buffer* buffer, const uint8_t* data, Py_ssize_t length) except -1:
    cdef Py_ssize_t whole = length - length % 3
    cdef Py_ssize_t i
    cdef uint32_t triple
    cdef char* out
    reserve(buffer, (length + 2) // 3 * 4 + 2)
    out = buffer.data + buffer.size
    out[0] = 34
    out += 1
    i = 0
    while i < whole:
        triple = (<uint32_t>data[i] << 16) | (<uint32_t>data[i + 1] << 8) | data[i + 2]
        out[0] = BASE64[(triple >> 18) & 63]
        out[1] = BASE64[(triple >> 12) & 63]
        out[2] = BASE64[(triple >> 6) & 63]
        out[3] = BASE64[triple & 63]
        out += 4
        i += 3
    if length - whole == 1:
        triple = <uint32_t>data[i] << 16
        out[0] = BASE64[(triple >> 18) & 63]
        out[1] = BASE64[(triple >> 12) & 63]
        out[2] = 61
        out[3] = 61
        out += 4
    elif length - whole == 2:
        triple = (<uint32_t>data[i] << 16) | (<uint32_t>data[i + 1] << 8)
        out[0] = BASE64[(triple >> 18) & 63]
        out[1] = BASE64[(triple >> 12) & 63]
        out[2] = BASE64[(triple >> 6) & 63]
        out[3] = 61
        out += 4
    out[0] = 34
    out += 1
    buffer.size = out - buffer.data
    return 0


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


cdef object _EncodedRecord = None
cdef object _validate_topic = None


def bind(encoded_record, validate_topic):
    """Give the kernel the tuple type it returns records as, and the store's topic check (which
    raises the store's own error)."""
    global _EncodedRecord, _validate_topic
    _EncodedRecord = encoded_record
    _validate_topic = validate_topic


cdef inline void write_i64(char* at, int64_t value) noexcept nogil:
    cdef uint64_t bits = <uint64_t>value
    cdef int i
    for i in range(8):
        at[i] = <char>(bits >> (56 - 8 * i))


cdef inline void write_i32(char* at, int32_t value) noexcept nogil:
    cdef uint32_t bits = <uint32_t>value
    at[0] = <char>(bits >> 24)
    at[1] = <char>(bits >> 16)
    at[2] = <char>(bits >> 8)
    at[3] = <char>bits


cdef inline uint32_t java_hash_on(uint32_t h, str text, Py_ssize_t start, Py_ssize_t end):
    """Java's String.hashCode continued from ``h`` over ``text[start:end]`` (UTF-16 code units)."""
    cdef uint32_t c
    cdef Py_ssize_t i
    for i in range(start, end):
        c = PyUnicode_READ_CHAR(text, i)
        if c > 0xFFFF:
            c -= 0x10000
            h = 31 * h + (0xD800 + (c >> 10))
            h = 31 * h + (0xDC00 + (c & 0x3FF))
        else:
            h = 31 * h + c
    return h


cdef inline uint32_t positive_hash(uint32_t h):
    """RocketMQ's indexKeyHashMethod: Math.abs of the int, 0 for Integer.MIN_VALUE."""
    if h == 0x80000000:
        return 0
    return (0 - h) if h & 0x80000000 else h


cdef int32_t java_hash(str text):
    """Java's String.hashCode: over UTF-16 code units."""
    return <int32_t>java_hash_on(0, text, 0, len(text))


cdef const char* utf8_of(object text, Py_ssize_t* length):
    """The UTF-8 of a str, or NULL (no error set) when it is not a str or has no UTF-8 form."""
    cdef const char* data
    if type(text) is not str:
        return NULL
    try:
        data = PyUnicode_AsUTF8AndSize(text, length)
    except UnicodeEncodeError:
        return NULL
    return data


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
    cdef object body = message.body
    cdef object properties = message.properties
    cdef bytes topic
    cdef Py_ssize_t max_message_size = limits.max_message_size, max_properties_size = limits.max_properties_size
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
    topic = _validate_topic(message.topic, limits.max_topic_length)
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


cdef enum:
    # Wharf's sysflag bit: the properties end with their separator (app.store.record_format).
    PROPERTIES_END = 0x20000
    BLANK_MAGIC_CODE = <int32_t>0xCBD43194
    MESSAGE_MAGIC_CODE = <int32_t>0xDAA320A7

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


cdef bint is_record(
    const uint8_t* record, Py_ssize_t size, bytes topic, int64_t queue_id, int64_t queue_offset, int64_t physical_offset
) noexcept:
    cdef Py_ssize_t topic_at, topic_length = len(topic), extra
    cdef int32_t body_length
    if size < FIXED_SIZE:
        return False
    if (
        read_i32(record) != size
        or read_i32(record + 4) != MESSAGE_MAGIC_CODE
        or read_i32(record + POS_QUEUEID) != queue_id
        or read_i64(record + POS_QUEUEOFFSET) != queue_offset
        or read_i64(record + POS_PHYSICALOFFSET) != physical_offset
    ):
        return False
    extra = host_bytes_extra(record)
    if size < FIXED_SIZE + extra:
        return False
    body_length = read_i32(record + POS_BODYLENGTH + extra)
    topic_at = POS_BODY + extra + <Py_ssize_t>body_length
    if body_length < 0 or topic_at + 1 + topic_length > size or record[topic_at] != topic_length:
        return False
    return memcmp(record + topic_at + 1, <const char*>topic, topic_length) == 0


def collect_records(
    entries,
    Py_ssize_t at,
    segment,
    int64_t segment_from,
    int64_t readable,
    int64_t commitlog_min,
    bytes topic,
    int32_t queue_id,
    int64_t base_offset,
    Py_ssize_t max_messages,
    int64_t max_bytes,
    list records,
    list queue_offsets,
    int64_t total,
):
    """app.store.commit_log.python_collect_records, compiled: the same slices, offsets and answer."""
    cdef Py_buffer entry_view, segment_view
    cdef const uint8_t* entry
    cdef Py_ssize_t count, index = at, taken = len(records)
    cdef int64_t physical, position, limit
    cdef int32_t size
    PyObject_GetBuffer(entries, &entry_view, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(segment, &segment_view, PyBUF_SIMPLE)
        try:
            count = entry_view.len // CQ_UNIT_SIZE
            limit = readable if readable < segment_view.len else segment_view.len
            while index < count:
                entry = <const uint8_t*>entry_view.buf + index * CQ_UNIT_SIZE
                physical = read_i64(entry)
                size = read_i32(entry + 8)
                if taken and (taken >= max_messages or total + size > max_bytes):
                    break
                if size <= 0 or physical < commitlog_min:
                    index += 1
                    continue
                position = physical - segment_from
                if position < 0 or position + size > limit:
                    break
                if not is_record(
                    <const uint8_t*>segment_view.buf + position, size, topic, queue_id, base_offset + index, physical
                ):
                    break
                records.append(PySequence_GetSlice(segment, position, position + size))
                queue_offsets.append(base_offset + index)
                total += size
                taken += 1
                index += 1
        finally:
            PyBuffer_Release(&segment_view)
    finally:
        PyBuffer_Release(&entry_view)
    return index, total


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


# ---------------------------------------------------------------------------------------------
# Writing a batch's hash index entries (app.store.index_file.IndexFile.index_messages).

cdef enum:
    INDEX_HEADER_SIZE = 40
    INDEX_ENTRY_SIZE = 20
    INDEX_MAX_INT = 0x7FFFFFFF
    TRANSACTION_MASK = 0x0C
    TRANSACTION_ROLLBACK = 0x0C


cdef struct Hashes:
    uint32_t* items
    Py_ssize_t count
    Py_ssize_t capacity


cdef int add_hash(Hashes* hashes, uint32_t value) except -1:
    cdef uint32_t* grown
    if hashes.count == hashes.capacity:
        grown = <uint32_t*>realloc(hashes.items, (hashes.capacity * 2 + 16) * sizeof(uint32_t))
        if grown == NULL:
            raise MemoryError()
        hashes.items = grown
        hashes.capacity = hashes.capacity * 2 + 16
    hashes.items[hashes.count] = value
    hashes.count += 1
    return 0


def index_key_hash(str key):
    """The hash RocketMQ files an index key under (the twin: ``app.store.index_file.key_hash``)."""
    return positive_hash(java_hash_on(0, key, 0, len(key)))


cdef int key_hashes(Hashes* hashes, str keys, str uniq_key, uint32_t prefix) except -1:
    """The hashes of "topic#key" for each space-separated key, then for the unique id: Java's
    String.hashCode continued from the topic's prefix, as RocketMQ's index takes it."""
    cdef Py_ssize_t length, start = 0, i
    hashes.count = 0
    if keys:
        length = len(keys)
        for i in range(length + 1):
            if i == length or PyUnicode_READ_CHAR(keys, i) == 32:
                if i > start:
                    add_hash(hashes, positive_hash(java_hash_on(prefix, keys, start, i)))
                start = i + 1
    if uniq_key:
        add_hash(hashes, positive_hash(java_hash_on(prefix, uniq_key, 0, len(uniq_key))))
    return 0


cdef uint32_t topic_prefix(str topic) except? 0:
    """Java's hash of "topic#", where every key hash of the topic starts."""
    return 31 * java_hash_on(0, topic, 0, len(topic)) + 35


def index_messages(
    mm,
    records,
    placements,
    Py_ssize_t start,
    dict prefixes,
    int64_t slots,
    int64_t entries_at,
    int64_t begin,
    int64_t number,
    int64_t limit,
    int64_t end_offset,
    int64_t end_timestamp,
):
    """The index thread's loop (the twin: ``IndexFile.index_messages``): write the entries of
    ``records`` from ``start`` into the mapped file ``mm`` until they are done or the next one's keys
    do not all fit. Returns (position of the first message not indexed, next entry number, slots
    newly used, end offset, end timestamp)."""
    cdef Py_buffer view
    cdef uint8_t* base
    cdef Py_ssize_t position = start, count = len(records), k, taken
    cdef Hashes hashes
    cdef int64_t used = 0, offset, store_timestamp, seconds, slot_at
    cdef int32_t previous
    cdef uint32_t hashed, prefix
    cdef object record, placed, topic, keys, uniq_key, sysflag, cached
    hashes.items = NULL
    hashes.count = hashes.capacity = 0
    PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE)
    try:
        base = <uint8_t*>view.buf
        while position < count:
            record = records[position]
            placed = placements[position]
            topic, keys, uniq_key, sysflag = record.topic, record.keys, record.uniq_key, record.sysflag
            if sysflag and (<int64_t>sysflag & TRANSACTION_MASK) == TRANSACTION_ROLLBACK:
                keys = uniq_key = ""  # never looked up; prepared messages are, as in RocketMQ
            cached = prefixes.get(topic)
            if cached is None:
                cached = prefixes[topic] = topic_prefix(topic)
            prefix = <uint32_t>cached
            key_hashes(&hashes, keys, uniq_key, prefix)
            taken = hashes.count
            if taken > limit - number:
                if number > 1:
                    break  # the next file takes this message
                taken = max(limit - number, 0)
            offset = placed.physical_offset
            store_timestamp = placed.store_timestamp
            seconds = (store_timestamp - begin) // 1000
            if store_timestamp < begin:
                seconds = 0
            elif seconds > INDEX_MAX_INT:
                seconds = INDEX_MAX_INT
            if taken and entries_at + (number + taken) * INDEX_ENTRY_SIZE > view.len:
                raise IndexError("index entry past the end of the file")
            for k in range(taken):
                hashed = hashes.items[k]
                slot_at = INDEX_HEADER_SIZE + (hashed % slots) * 4
                previous = read_i32(base + slot_at)
                if previous <= 0 or previous >= number:  # empty, or written after the last flush
                    previous = 0
                    used += 1
                write_i32(<char*>base + entries_at + number * INDEX_ENTRY_SIZE, <int32_t>hashed)
                write_i64(<char*>base + entries_at + number * INDEX_ENTRY_SIZE + 4, offset)
                write_i32(<char*>base + entries_at + number * INDEX_ENTRY_SIZE + 12, <int32_t>seconds)
                write_i32(<char*>base + entries_at + number * INDEX_ENTRY_SIZE + 16, previous)
                write_i32(<char*>base + slot_at, <int32_t>number)  # after the entry: a reader never follows a blank
                number += 1
            end_offset = offset + <int64_t>placed.size
            if store_timestamp > end_timestamp:
                end_timestamp = store_timestamp
            position += 1
    finally:
        free(hashes.items)
        PyBuffer_Release(&view)
    return position, number, used, end_offset, end_timestamp


# ---------------------------------------------------------------------------------------------
# Copying a batch's records into a CommitLog segment (app.store.commit_log.python_write_records).

cdef object _AppendResult = None
cdef object _PUT_OK = None


def bind_writer(append_result, put_ok):
    """Give the kernel the tuple type it returns each record's place as, and the PUT_OK status."""
    global _AppendResult, _PUT_OK
    _AppendResult = append_result
    _PUT_OK = put_ok


cdef enum:
    TRANSACTION_PREPARED = 0x04
    CQ_UNIT_SIZE = 20


# The delay levels' topic and delays (app.store.record_format), bound at import by the twin's module.
cdef object _SCHEDULE_TOPIC = None
cdef tuple _LEVEL_DELAYS_MS = ()


def bind_schedule(str topic, tuple delays_ms):
    """Give the kernel the delay levels' topic and each level's delay in ms."""
    global _SCHEDULE_TOPIC, _LEVEL_DELAYS_MS
    _SCHEDULE_TOPIC, _LEVEL_DELAYS_MS = topic, delays_ms


def write_records(
    mm,
    Py_ssize_t position,
    Py_ssize_t limit,
    int64_t base,
    records,
    Py_ssize_t start,
    int64_t now,
    dict queue_offsets,
    bytes store_host,
    list results,
    dict runs,
):
    """The twin's loop, in C: copy records from ``start`` while each ends by ``limit``, patch the
    store timestamp and the offsets (last), add each AppendResult to ``results`` and each
    ConsumeQueue entry to its queue's run. Returns (the first record not written, the position
    after the last written)."""
    cdef Py_buffer view
    cdef char* out
    cdef Py_ssize_t index, count = len(records), size, end, run_length
    cdef int64_t physical_offset, queue_offset
    cdef int64_t sysflag, kind
    cdef tuple record
    cdef bytes data
    cdef object topic, queue_id, key, last_key = None, known, run, entries, last_run = None
    cdef object tags_code, item
    PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE)
    try:
        out = <char*>view.buf
        if limit > view.len:
            raise ValueError("the limit is past the end of the mapping")
        for index in range(start, count):
            item = records[index]
            if not isinstance(item, tuple) or len(item) != 7:
                raise TypeError(f"an EncodedRecord is a tuple of 7, not {type(item).__name__}")
            record = <tuple>item
            data = record[0]
            size = len(data)
            end = position + size
            if end > limit:
                return index, position
            topic = record[1]
            queue_id = record[2]
            tags_code = record[3]
            sysflag = record[6]
            physical_offset = base + position
            kind = sysflag & TRANSACTION_MASK
            if kind != TRANSACTION_PREPARED and kind != TRANSACTION_ROLLBACK:
                if last_key is not None and (<tuple>last_key)[0] == topic and (<tuple>last_key)[1] == queue_id:
                    key = last_key
                else:
                    key = (topic, queue_id)
                known = queue_offsets.get(key)
                queue_offset = 0 if known is None else <int64_t>known
                queue_offsets[key] = queue_offset + 1
                if key is last_key:
                    run = last_run
                else:
                    run = runs.get(key)
                    if run is None:
                        run = runs[key] = (queue_offset, bytearray())
                    last_key, last_run = key, run
                entries = (<tuple>run)[1]
                run_length = len(entries)
                PyByteArray_Resize(entries, run_length + CQ_UNIT_SIZE)
                write_i64(PyByteArray_AS_STRING(entries) + run_length, physical_offset)
                write_i32(PyByteArray_AS_STRING(entries) + run_length + 8, <int32_t>size)
                if topic is _SCHEDULE_TOPIC or topic == _SCHEDULE_TOPIC:
                    # A delay level's entry holds when its message is due (the twin's queue_tags_code).
                    if 0 <= queue_id < len(_LEVEL_DELAYS_MS):
                        tags_code = now + <int64_t>_LEVEL_DELAYS_MS[queue_id]
                write_i64(PyByteArray_AS_STRING(entries) + run_length + 12, <int64_t>tags_code)
            else:
                queue_offset = 0
            memcpy(out + position, PyBytes_AS_STRING(data), size)
            write_i64(out + position + POS_STORETIMESTAMP, now)
            # Written last: a record whose offsets are still placeholders is not valid.
            write_i64(out + position + POS_QUEUEOFFSET, queue_offset)
            write_i64(out + position + POS_PHYSICALOFFSET, physical_offset)
            results.append(
                tuple.__new__(
                    _AppendResult,
                    (_PUT_OK, topic, queue_id, queue_offset, physical_offset, size, now, store_host),
                )
            )
            position = end
    finally:
        PyBuffer_Release(&view)
    return count, position


# ---------------------------------------------------------------------------------------------
# A binary produce batch of plain messages straight into records (app.broker.core.Broker.produce_batch,
# whose twin is the general path: app.codec.parse_batch, Broker.to_message, encode_record).

cdef enum:
    PRODUCER_UNIQ_KEY = 0x10000
    MAX_QUEUE_ID = 1 << 16
    UNIQUE_ID_COUNTER_DIGITS = 12

cdef inline uint16_t read_u16(const uint8_t* at) noexcept nogil:
    return <uint16_t>((at[0] << 8) | at[1])


cdef inline uint32_t read_u32(const uint8_t* at) noexcept nogil:
    return (<uint32_t>at[0] << 24) | (<uint32_t>at[1] << 16) | (<uint32_t>at[2] << 8) | at[3]


cdef bint property_safe(const uint8_t* text, Py_ssize_t length) noexcept nogil:
    """No property separator (0x01, 0x02) in a property's text."""
    return memchr(text, 1, length) == NULL and memchr(text, 2, length) == NULL


cdef Py_ssize_t plain_keys(const uint8_t* text, Py_ssize_t length, char* out) noexcept nogil:
    """The keys as ``" ".join(text.split())`` writes them into ``out`` (room for ``length``); -1
    when a byte is not printable ASCII or a space (the general path splits those)."""
    cdef Py_ssize_t i, written = 0
    cdef bint gap = False
    for i in range(length):
        if text[i] == 32:
            gap = written > 0
        elif 33 <= text[i] <= 126:
            if gap:
                out[written] = 32
                written += 1
                gap = False
            out[written] = <char>text[i]
            written += 1
        else:
            return -1
    return written


cdef class PlainEncoder:
    """Encodes plain messages into records one by one, choosing queues and unique ids as the
    broker does: an explicit queue, else the next of the topic's round robin (from
    ``round_robin``); the supplied unique id, else ``id_prefix`` and the counter (from
    ``id_counter``). ``encode_batch`` and ``encode_messages`` feed it."""

    cdef str topic
    cdef bytes topic_bytes, store_host, born_host
    cdef int64_t now_ms, queues, round_robin, id_counter
    cdef Py_ssize_t max_body, max_properties, max_record, prefix_length
    cdef const char* prefix
    cdef str id_prefix
    cdef list records, supplied
    cdef dict entries
    cdef Py_ssize_t total_size, body_bytes

    def __cinit__(
        self,
        str topic,
        bytes topic_bytes,
        bytes store_host,
        int64_t now_ms,
        Py_ssize_t max_body,
        Py_ssize_t max_properties,
        Py_ssize_t max_record,
        int64_t queues,
        int64_t round_robin,
        str id_prefix,
        int64_t id_counter,
        bytes born_host=b"\0\0\0\0\0\0\0\0",
    ):
        if len(store_host) != 8 or len(born_host) != 8 or len(topic_bytes) > 255 or queues <= 0:
            raise ValueError("hosts of 8 bytes, a topic of at most 255 and a queue or more")
        self.topic, self.topic_bytes, self.store_host = topic, topic_bytes, store_host
        self.born_host = born_host
        self.now_ms, self.queues, self.round_robin, self.id_counter = now_ms, queues, round_robin, id_counter
        self.max_body, self.max_properties, self.max_record = max_body, max_properties, max_record
        self.id_prefix = id_prefix
        self.prefix = PyUnicode_AsUTF8AndSize(id_prefix, &self.prefix_length)
        if self.prefix_length + UNIQUE_ID_COUNTER_DIGITS > 64:
            raise ValueError("the unique id prefix is too long")
        self.records, self.supplied, self.entries = [], [], {}
        self.total_size = self.body_bytes = 0

    cdef bint add(
        self,
        const uint8_t* body,
        Py_ssize_t body_length,
        object tags_text,
        const uint8_t* tags,
        Py_ssize_t tags_length,
        const char* keys,
        Py_ssize_t keys_length,
        object supplied,
        const uint8_t* supplied_id,
        Py_ssize_t id_length,
        int64_t queue_id,
        int32_t flag,
        int64_t born_timestamp,
    ) except -1:
        """Encode one message: its tags (``tags_text`` their str, or None when there are none),
        keys already as ``" ".join(keys)`` makes them, its supplied unique id (``supplied`` the str,
        or None), its queue (-1: the round robin's). False when the general path must take it."""
        cdef char id_text[64]
        cdef Py_ssize_t properties_length = 0, total, digit, topic_length = len(self.topic_bytes)
        cdef int64_t counter
        cdef int32_t tags_code = 0, sysflag
        cdef bint by_turn
        cdef char* out
        cdef object unique_id, keys_value, key, known
        if body_length == 0 or body_length > self.max_body:
            return False
        if tags_length:
            if not property_safe(tags, tags_length):
                return False
            tags_code = java_hash(tags_text)
            properties_length += 4 + tags_length + 2
        if keys_length:
            properties_length += 4 + keys_length + 2
        if supplied is not None:
            if not property_safe(supplied_id, id_length):
                return False
            unique_id = supplied
            sysflag = PRODUCER_UNIQ_KEY | PROPERTIES_END
        else:
            memcpy(id_text, self.prefix, self.prefix_length)
            counter = self.id_counter & 0xFFFFFFFFFFFF
            for digit in range(UNIQUE_ID_COUNTER_DIGITS):
                id_text[self.prefix_length + UNIQUE_ID_COUNTER_DIGITS - 1 - digit] = HEX_UPPER[counter & 15]
                counter >>= 4
            id_length = self.prefix_length + UNIQUE_ID_COUNTER_DIGITS
            unique_id = PyUnicode_DecodeASCII(id_text, id_length, NULL)
            supplied_id = <const uint8_t*>id_text
            sysflag = PROPERTIES_END
        if id_length == 0:
            return False  # an empty value: the general path decides
        properties_length += 8 + id_length + 2
        if properties_length > self.max_properties or properties_length > 32767:
            return False
        by_turn = queue_id < 0
        if by_turn:
            queue_id = self.round_robin % self.queues
        elif queue_id >= self.queues:
            return False
        if queue_id >= MAX_QUEUE_ID:
            return False
        total = FIXED_SIZE + body_length + topic_length + properties_length
        if total > self.max_record:
            return False
        # Everything checked: from here on the message is taken.
        if supplied is None:
            self.id_counter += 1
        else:
            self.supplied.append(supplied)
        if by_turn:
            self.round_robin += 1
        record = PyBytes_FromStringAndSize(NULL, total)
        out = put_record_head(
            PyBytes_AS_STRING(record),
            total,
            <const char*>body,
            body_length,
            <int32_t>queue_id,
            flag,
            sysflag,
            born_timestamp if born_timestamp else self.now_ms,
            PyBytes_AS_STRING(self.born_host),
            PyBytes_AS_STRING(self.store_host),
            0,
            0,
            PyBytes_AS_STRING(self.topic_bytes),
            topic_length,
            properties_length,
        )
        if tags_length:
            memcpy(out, b"TAGS\x01", 5)
            memcpy(out + 5, tags, tags_length)
            out[5 + tags_length] = 2
            out += 6 + tags_length
        if keys_length:
            memcpy(out, b"KEYS\x01", 5)
            memcpy(out + 5, keys, keys_length)
            out[5 + keys_length] = 2
            out += 6 + keys_length
            keys_value = PyUnicode_DecodeASCII(keys, keys_length, NULL)
        else:
            keys_value = ""
        memcpy(out, b"UNIQ_KEY\x01", 9)
        memcpy(out + 9, supplied_id, id_length)
        out[9 + id_length] = 2
        key = (self.topic, queue_id)
        known = self.entries.get(key)
        self.entries[key] = 1 if known is None else known + 1
        self.records.append(
            tuple.__new__(_EncodedRecord, (record, self.topic, queue_id, tags_code, keys_value, unique_id, sysflag))
        )
        self.total_size += total
        self.body_bytes += body_length
        return True

    def result(self):
        """(records, the supplied unique ids in order, new ConsumeQueue entries per queue, the
        records' bytes, the bodies' bytes, the round robin's next value, the counter's next value)."""
        return (
            self.records,
            self.supplied,
            self.entries,
            self.total_size,
            self.body_bytes,
            self.round_robin,
            self.id_counter,
        )


def encode_batch(data, PlainEncoder encoder):
    """Parse a binary batch (app.codec.parse_batch's layout) and encode each message into
    ``encoder``. False when the batch is malformed or empty, or a message is not plain
    (properties, a sharding key, keys other than printable ASCII, a field the store refuses): the
    general path then takes the batch and says what is wrong."""
    cdef Py_buffer view
    cdef const uint8_t* buf
    cdef const uint8_t* at
    cdef const uint8_t* end
    cdef const uint8_t* tags
    cdef const uint8_t* keys
    cdef const uint8_t* supplied_id
    cdef const uint8_t* body
    cdef char keys_text[65536]
    cdef Py_ssize_t index, keys_length
    cdef uint32_t count, body_length
    cdef uint16_t tags_length, keys_raw_length, id_raw_length
    cdef int32_t queue_id, flag
    cdef int64_t born_timestamp
    cdef object tags_text, unique_id
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        buf = <const uint8_t*>view.buf
        end = buf + view.len
        if view.len < 8 or memcmp(buf, b"WHB1", 4) != 0:
            return False
        count = read_u32(buf + 4)
        if count == 0:
            return False
        at = buf + 8
        for index in range(count):
            # queue id 4 | flag 4 | born timestamp 8 | tags 2+n | keys 2+n | unique id 2+n |
            # sharding key 2+n | properties 4+n | body 4+n
            if end - at < 18:
                return False
            queue_id = read_i32(at)
            flag = read_i32(at + 4)
            born_timestamp = read_i64(at + 8)
            tags_length = read_u16(at + 16)
            tags = at + 18
            at = tags + tags_length
            if end - at < 2:
                return False
            keys_raw_length = read_u16(at)
            keys = at + 2
            at = keys + keys_raw_length
            if end - at < 2:
                return False
            id_raw_length = read_u16(at)
            supplied_id = at + 2
            at = supplied_id + id_raw_length
            if end - at < 2 or read_u16(at) != 0:  # a sharding key
                return False
            at += 2
            if end - at < 4 or read_u32(at) != 0:  # properties
                return False
            at += 4
            if end - at < 4:
                return False
            body_length = read_u32(at)
            body = at + 4
            if <uint64_t>(end - body) < body_length:
                return False
            at = body + body_length
            tags_text = None
            if tags_length:
                try:
                    tags_text = PyUnicode_DecodeUTF8(<const char*>tags, tags_length, NULL)
                except UnicodeDecodeError:
                    return False
            keys_length = plain_keys(keys, keys_raw_length, keys_text)
            if keys_length < 0:
                return False
            unique_id = None
            if id_raw_length:
                try:
                    unique_id = PyUnicode_DecodeUTF8(<const char*>supplied_id, id_raw_length, NULL)
                except UnicodeDecodeError:
                    return False
            if not encoder.add(
                body,
                body_length,
                tags_text,
                tags,
                tags_length,
                keys_text,
                keys_length,
                unique_id,
                supplied_id,
                id_raw_length,
                queue_id if queue_id >= 0 else -1,
                flag,
                born_timestamp,
            ):
                return False
        if at != end:
            return False
    finally:
        PyBuffer_Release(&view)
    return True


def plain_answers(records, appended, str status):
    """Produce's answers for stored records (app.broker.plain.python_answers): per message its
    msg_id (the store host and physical offset, 32 hex digits), unique id, queue id, queue offset
    and ``status``."""
    cdef list answers = []
    cdef Py_ssize_t index, count = len(records)
    cdef int64_t offset
    cdef int digit
    cdef char text[32]
    cdef const uint8_t* host
    cdef object result
    cdef dict answer
    if len(appended) != count:
        raise ValueError("as many results as records")
    for index in range(count):
        result = appended[index]
        store_host = result.store_host
        if type(store_host) is not bytes or len(store_host) != 8:
            raise ValueError("a store host is 8 bytes")
        host = <const uint8_t*>PyBytes_AS_STRING(store_host)
        for digit in range(8):
            text[2 * digit] = HEX_UPPER[host[digit] >> 4]
            text[2 * digit + 1] = HEX_UPPER[host[digit] & 15]
        offset = result.physical_offset
        for digit in range(16):
            text[31 - digit] = HEX_UPPER[(<uint64_t>offset >> (4 * digit)) & 15]
        answer = {
            "msg_id": PyUnicode_DecodeASCII(text, 32, NULL),
            "unique_id": records[index][5],
            "queue_id": result.queue_id,
            "queue_offset": result.queue_offset,
            "status": status,
        }
        answers.append(answer)
    return answers


# ---------------------------------------------------------------------------------------------
# The produce idempotency window's table (app.broker.idempotency.BucketTable, its twin): digests
# and CommitLog offsets in an open-addressing hash table (linear probing, deletion by backward
# shift, so no tombstones), insertion order in a ring of digests, offsets and expiry times.

cdef struct Slot:
    int64_t digest  # negative; 0: an empty slot
    int64_t offset

cdef enum:
    FIRST_SLOTS = 16
    FIRST_RING = 16


cdef inline Py_ssize_t home_of(int64_t digest, Py_ssize_t mask) noexcept nogil:
    cdef uint64_t bits = <uint64_t>digest
    bits ^= bits >> 29
    bits *= 0xBF58476D1CE4E5B9ULL
    bits ^= bits >> 32
    return <Py_ssize_t>(bits & <uint64_t>mask)


cdef class DigestTable:
    """A digest table in C memory (PyMem, so tracemalloc sees it): about 16 bytes per slot at a
    load of at most three quarters, and 24 per ring entry."""

    cdef Slot* slots
    cdef Py_ssize_t mask
    cdef public Py_ssize_t count
    cdef int64_t* ring_digest
    cdef int64_t* ring_offset
    cdef double* ring_expiry
    cdef Py_ssize_t ring_capacity, ring_head, ring_size

    def __cinit__(self):
        self.slots = <Slot*>PyMem_Calloc(FIRST_SLOTS, sizeof(Slot))
        self.mask = FIRST_SLOTS - 1
        self.ring_capacity = FIRST_RING
        self.ring_digest = <int64_t*>PyMem_Malloc(FIRST_RING * sizeof(int64_t))
        self.ring_offset = <int64_t*>PyMem_Malloc(FIRST_RING * sizeof(int64_t))
        self.ring_expiry = <double*>PyMem_Malloc(FIRST_RING * sizeof(double))
        if not self.slots or not self.ring_digest or not self.ring_offset or not self.ring_expiry:
            raise MemoryError()

    def __dealloc__(self):
        PyMem_Free(self.slots)
        PyMem_Free(self.ring_digest)
        PyMem_Free(self.ring_offset)
        PyMem_Free(self.ring_expiry)

    cdef Py_ssize_t locate(self, int64_t digest) noexcept:
        """The slot holding ``digest``, else -1 - the empty slot where it would go."""
        cdef Py_ssize_t index = home_of(digest, self.mask)
        while True:
            if self.slots[index].digest == digest:
                return index
            if self.slots[index].digest == 0:
                return -1 - index
            index = (index + 1) & self.mask

    cdef int grow(self) except -1:
        cdef Slot* old = self.slots
        cdef Py_ssize_t old_size = self.mask + 1, index, spot
        cdef Slot* grown = <Slot*>PyMem_Calloc(old_size * 2, sizeof(Slot))
        if grown == NULL:
            raise MemoryError()
        self.slots = grown
        self.mask = old_size * 2 - 1
        for index in range(old_size):
            if old[index].digest != 0:
                spot = -1 - self.locate(old[index].digest)
                self.slots[spot] = old[index]
        PyMem_Free(old)
        return 0

    cdef void remove_at(self, Py_ssize_t index) noexcept:
        cdef Py_ssize_t hole = index, probe = index, home
        while True:
            probe = (probe + 1) & self.mask
            if self.slots[probe].digest == 0:
                break
            home = home_of(self.slots[probe].digest, self.mask)
            # The entry at probe may move back into the hole unless its home lies in (hole, probe].
            if (hole <= probe and hole < home <= probe) or (hole > probe and (home > hole or home <= probe)):
                continue
            self.slots[hole] = self.slots[probe]
            hole = probe
        self.slots[hole].digest = 0
        self.slots[hole].offset = 0

    cdef int ring_push(self, int64_t digest, int64_t offset, double expires) except -1:
        cdef Py_ssize_t capacity = self.ring_capacity, index, at
        cdef int64_t* digests
        cdef int64_t* offsets
        cdef double* expiries
        if self.ring_size == capacity:
            digests = <int64_t*>PyMem_Malloc(capacity * 2 * sizeof(int64_t))
            offsets = <int64_t*>PyMem_Malloc(capacity * 2 * sizeof(int64_t))
            expiries = <double*>PyMem_Malloc(capacity * 2 * sizeof(double))
            if not digests or not offsets or not expiries:
                PyMem_Free(digests)
                PyMem_Free(offsets)
                PyMem_Free(expiries)
                raise MemoryError()
            for index in range(self.ring_size):
                at = (self.ring_head + index) % capacity
                digests[index] = self.ring_digest[at]
                offsets[index] = self.ring_offset[at]
                expiries[index] = self.ring_expiry[at]
            PyMem_Free(self.ring_digest)
            PyMem_Free(self.ring_offset)
            PyMem_Free(self.ring_expiry)
            self.ring_digest, self.ring_offset, self.ring_expiry = digests, offsets, expiries
            self.ring_capacity = capacity = capacity * 2
            self.ring_head = 0
        at = (self.ring_head + self.ring_size) % capacity
        self.ring_digest[at] = digest
        self.ring_offset[at] = offset
        self.ring_expiry[at] = expires
        self.ring_size += 1
        return 0

    cdef void drop_oldest(self) noexcept:
        cdef int64_t digest = self.ring_digest[self.ring_head]
        cdef int64_t offset = self.ring_offset[self.ring_head]
        cdef Py_ssize_t index
        self.ring_head = (self.ring_head + 1) % self.ring_capacity
        self.ring_size -= 1
        index = self.locate(digest)
        # Only if no later insert of the same digest replaced this entry's offset.
        if index >= 0 and self.slots[index].offset == offset:
            self.remove_at(index)
            self.count -= 1

    def find(self, int64_t d):
        """The offset remembered for digest ``d``, None if none."""
        cdef Py_ssize_t index
        if d == 0:
            return None
        index = self.locate(d)
        return None if index < 0 else self.slots[index].offset

    cpdef insert(self, int64_t d, int64_t physical_offset, double expires, Py_ssize_t max_entries):
        """Remember digest ``d`` at ``physical_offset`` until ``expires``, then drop the oldest
        entries while more than ``max_entries`` remain."""
        cdef Py_ssize_t index
        if d == 0:
            raise ValueError("a digest is never 0")
        index = self.locate(d)
        if index >= 0:  # the same key again, or a digest collision
            self.slots[index].offset = physical_offset
        else:
            if (self.count + 1) * 4 > (self.mask + 1) * 3:
                self.grow()
                index = self.locate(d)
            self.slots[-1 - index].digest = d
            self.slots[-1 - index].offset = physical_offset
            self.count += 1
        self.ring_push(d, physical_offset, expires)
        while self.count > max_entries and self.ring_size:
            self.drop_oldest()

    def put_many(self, str topic, entries, double expires, Py_ssize_t max_entries):
        """Remember each (unique id, offset) of ``topic``: digests of (topic, unique id)."""
        cdef int64_t d
        for unique_id, physical_offset in entries:
            d = <int64_t>(<uint64_t>hash((topic, unique_id)) | 0x8000000000000000ULL)
            self.insert(d, physical_offset, expires, max_entries)

    def first_known(self, str topic, ids, Py_ssize_t start):
        """The index of the first of ``ids`` from ``start`` whose digest of (topic, unique id) is
        in the table; -1 when none is."""
        cdef Py_ssize_t index, count = len(ids)
        cdef int64_t d
        for index in range(start, count):
            d = <int64_t>(<uint64_t>hash((topic, ids[index])) | 0x8000000000000000ULL)
            if self.locate(d) >= 0:
                return index
        return -1

    def put_records(self, str topic, records, appended, double expires, Py_ssize_t max_entries):
        """Remember where each record with a supplied unique id (its sysflag says so) was stored."""
        cdef Py_ssize_t index, count = len(records)
        cdef int64_t d
        if len(appended) != count:
            raise ValueError("as many results as records")
        for index in range(count):
            record = records[index]
            if <int64_t>record[6] & PRODUCER_UNIQ_KEY:
                d = <int64_t>(<uint64_t>hash((topic, record[5])) | 0x8000000000000000ULL)
                self.insert(d, appended[index].physical_offset, expires, max_entries)

    def expire(self, double now):
        """Drop the entries that expired before ``now``."""
        while self.ring_size and self.ring_expiry[self.ring_head] < now:
            self.drop_oldest()


cdef bint int_in(object value, object low, object high):
    """Whether ``value`` is an int (not a bool) from ``low`` to ``high``."""
    return type(value) is int and low <= value <= high


INT64_LOW, INT64_HIGH = -(1 << 63), (1 << 63) - 1


def encode_messages(messages, PlainEncoder encoder):
    """As ``encode_batch``, for parsed messages (app.codec.IncomingMessage, as the JSON and NDJSON
    bodies and the produce socket's JSON frames give them): False unless each is plain (a bytes
    body, no properties, sharding key or delay, keys of printable ASCII, ints in their fields'
    ranges, text that has UTF-8)."""
    cdef char keys_text[65536]
    cdef const char* text
    cdef const char* tags
    cdef const char* supplied_id
    cdef Py_ssize_t length, keys_length, tags_length, id_length, i
    cdef object body, tags_text, unique_id, queue_id, key
    if not messages:
        return False
    for message in messages:
        body = message.body
        if type(body) is not bytes or message.properties or message.sharding_key is not None:
            return False
        if message.delay_level is not None or message.delay_ms is not None or message.deliver_at_ms is not None:
            return False
        queue_id = message.queue_id
        if queue_id is None:
            queue_id = -1
        elif not int_in(queue_id, 0, 0x7FFFFFFF):
            return False
        if not int_in(message.flag, -0x80000000, 0x7FFFFFFF):
            return False
        if not int_in(message.born_timestamp, INT64_LOW, INT64_HIGH):
            return False
        tags_text = message.tags
        tags_length = 0
        tags = NULL
        if tags_text:
            tags = utf8_of(tags_text, &tags_length)
            if tags == NULL:
                return False
        else:
            tags_text = None
        keys_length = 0
        key_list = message.keys
        if type(key_list) is not list:
            return False
        for key in key_list:
            text = utf8_of(key, &length)
            if text == NULL or length == 0 or keys_length + length + 1 > 65535:
                return False
            for i in range(length):
                if not 33 <= <uint8_t>text[i] <= 126:
                    return False
            if keys_length:
                keys_text[keys_length] = 32
                keys_length += 1
            memcpy(keys_text + keys_length, text, length)
            keys_length += length
        unique_id = message.unique_id
        id_length = 0
        supplied_id = NULL
        if unique_id is not None:
            supplied_id = utf8_of(unique_id, &id_length)
            if supplied_id == NULL or id_length == 0:
                return False
        if not encoder.add(
            <const uint8_t*>PyBytes_AS_STRING(body),
            len(body),
            tags_text,
            <const uint8_t*>tags,
            tags_length,
            keys_text,
            keys_length,
            unique_id,
            <const uint8_t*>supplied_id,
            id_length,
            queue_id,
            message.flag,
            message.born_timestamp,
        ):
            return False
    return True


# ---------------------------------------------------------------------------------------------
# A binary pull answer as Arrow column buffers (spark_jobs.schema.BatchBuilder.from_page).

cdef enum:
    COLUMN_BUFFERS = 23
    INT32_LIMIT = 0x7FFFFFFF

cdef int64_t MS_LIMIT = 9223372036854775  # milliseconds whose microseconds still fit 64 bits


cdef inline int column_i32(Buffer* buffer, int32_t value) except -1:
    return put(buffer, <const char*>&value, 4)


cdef inline int column_i64(Buffer* buffer, int64_t value) except -1:
    return put(buffer, <const char*>&value, 8)


cdef inline int put_text(Buffer* offsets, Buffer* data, const uint8_t* text, Py_ssize_t length) except -1:
    """One value of a string or binary column: its bytes, and the offset after them."""
    if length:
        put(data, <const char*>text, length)
    return column_i32(offsets, <int32_t>data.size)


cdef const char* HEX_DIGITS = b"0123456789ABCDEF"


cdef inline bint is_name(const uint8_t* text, Py_ssize_t length, const char* name, Py_ssize_t name_length) noexcept:
    return length == name_length and memcmp(text, name, length) == 0


cdef inline bint spaced_keys(const uint8_t* text, Py_ssize_t length) noexcept:
    """Whether the only whitespace in this (valid UTF-8) text is the space, so that str.split()
    cuts it where this code does: no other ASCII whitespace (tab to carriage return, the
    separators 0x1C-0x1F), no U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F,
    U+205F or U+3000."""
    cdef Py_ssize_t i
    cdef uint8_t c
    for i in range(length):
        c = text[i]
        if (9 <= c <= 13) or (0x1C <= c <= 0x1F):
            return False
        if c == 0xC2 and i + 1 < length and (text[i + 1] == 0x85 or text[i + 1] == 0xA0):
            return False
        if c == 0xE1 and i + 2 < length and text[i + 1] == 0x9A and text[i + 2] == 0x80:
            return False
        if c == 0xE2 and i + 2 < length and text[i + 1] == 0x80 and (
            text[i + 2] <= 0x8A or text[i + 2] == 0xA8 or text[i + 2] == 0xA9 or text[i + 2] == 0xAF
        ):
            return False
        if c == 0xE2 and i + 2 < length and text[i + 1] == 0x81 and text[i + 2] == 0x9F:
            return False
        if c == 0xE3 and i + 2 < length and text[i + 1] == 0x80 and text[i + 2] == 0x80:
            return False
    return True


def record_columns(data, int64_t until):
    """The Arrow column buffers of the records of a binary pull answer before the first at queue
    offset ``until`` or later (every record is checked): (rows, buffers, the first row's queue
    offset when each row's is the one before it plus one, else -1), the buffers in the order
    spark_jobs.schema.BatchBuilder.from_page reads them. None for an answer with anything the
    Python path decides itself: a damaged record, text that is not what the columns hold, a
    property named twice or without a value, keys split by other whitespace than spaces."""
    cdef Py_buffer view
    cdef Buffer columns[COLUMN_BUFFERS]
    cdef const uint8_t* at
    cdef const uint8_t* record
    cdef const uint8_t* item
    cdef const uint8_t* value
    cdef const uint8_t* tags_value
    cdef const uint8_t* keys_value
    cdef const uint8_t* uniq_value
    cdef const uint8_t* names[64]
    cdef Py_ssize_t name_lengths[64]
    cdef Py_ssize_t position = 0, size, body_length, body_end, topic_end, properties_start
    cdef Py_ssize_t item_end, cut, name_length, value_length, tags_length, keys_length, uniq_length
    cdef Py_ssize_t seen, i, start
    cdef Py_ssize_t rows = 0, entries = 0, key_count = 0
    cdef int64_t born, stored, queue_offset, first = 0
    cdef bint past = False, in_order = True
    cdef char hex_id[32]
    cdef int k
    memset(columns, 0, sizeof(columns))
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        at = <const uint8_t*>view.buf
        for k in (5, 7, 9, 11, 13, 15, 16, 18, 19, 21):
            column_i32(&columns[k], 0)
        while position < view.len:
            record = at + position
            if view.len - position < FIXED_SIZE:
                return None
            size = read_i32(record)
            if read_i32(record + 4) != MESSAGE_MAGIC_CODE or size < FIXED_SIZE or position + size > view.len:
                return None
            if read_i32(record + POS_SYSFLAG) & HOSTS_V6:
                return None  # IPv6 hosts: the Python path reads those
            # Every record is checked, as the Python path decodes them all; none from the first at
            # ``until`` on becomes a row.
            past = past or read_i64(record + POS_QUEUEOFFSET) >= until
            body_length = read_i32(record + POS_BODYLENGTH)
            if body_length < 0 or POS_BODY + body_length + 3 > size:
                return None
            body_end = POS_BODY + body_length
            topic_end = body_end + 1 + record[body_end]
            properties_start = topic_end + 2
            if properties_start > size or not is_ascii(record + body_end + 1, record[body_end]):
                return None
            if not valid_utf8(record + properties_start, size - properties_start):
                return None
            born = read_i64(record + POS_BORNTIMESTAMP)
            stored = read_i64(record + POS_STORETIMESTAMP)
            if born > MS_LIMIT or born < -MS_LIMIT or stored > MS_LIMIT or stored < -MS_LIMIT:
                return None
            if read_i64(record + POS_PHYSICALOFFSET) < 0:
                return None  # no message id holds it
            # The properties: the system ones have columns of their own, the rest go to the map.
            tags_value = keys_value = uniq_value = NULL
            tags_length = keys_length = uniq_length = 0
            seen = 0
            start = properties_start
            while start < size:
                item = record + start
                item_end = start
                while item_end < size and record[item_end] != 2:
                    item_end += 1
                if item_end > start:
                    cut = start
                    while cut < item_end and record[cut] != 1:
                        cut += 1
                    if cut == item_end or seen == 64:
                        return None
                    name_length = cut - start
                    value = record + cut + 1
                    value_length = item_end - cut - 1
                    for i in range(seen):
                        if is_name(item, name_length, <const char*>names[i], name_lengths[i]):
                            return None
                    names[seen] = item
                    name_lengths[seen] = name_length
                    seen += 1
                    if is_name(item, name_length, b"TAGS", 4):
                        tags_value, tags_length = value, value_length
                    elif is_name(item, name_length, b"KEYS", 4):
                        keys_value, keys_length = value, value_length
                    elif is_name(item, name_length, b"UNIQ_KEY", 8):
                        uniq_value, uniq_length = value, value_length
                    elif not past:
                        put_text(&columns[19], &columns[20], item, name_length)
                        put_text(&columns[21], &columns[22], value, value_length)
                        entries += 1
                start = item_end + 1
            if keys_value != NULL and not spaced_keys(keys_value, keys_length):
                return None
            if past:
                position += size
                continue
            column_i32(&columns[18], <int32_t>entries)
            if keys_value != NULL:
                i = 0
                while i < keys_length:
                    while i < keys_length and keys_value[i] == 32:
                        i += 1
                    cut = i
                    while cut < keys_length and keys_value[cut] != 32:
                        cut += 1
                    if cut > i:
                        put_text(&columns[16], &columns[17], keys_value + i, cut - i)
                        key_count += 1
                    i = cut
            column_i32(&columns[15], <int32_t>key_count)
            column_i32(&columns[0], read_i32(record + POS_QUEUEID))
            queue_offset = read_i64(record + POS_QUEUEOFFSET)
            if rows == 0:
                first = queue_offset
            elif queue_offset != first + rows:
                in_order = False
            column_i64(&columns[1], queue_offset)
            column_i64(&columns[2], born * 1000)
            column_i64(&columns[3], stored * 1000)
            column_i32(&columns[4], read_i32(record + POS_RECONSUMETIMES))
            put_text(&columns[5], &columns[6], record + POS_BODY, body_length)
            put_text(&columns[7], &columns[8], record + body_end + 1, record[body_end])
            for i in range(8):
                hex_id[2 * i] = HEX_DIGITS[record[POS_STOREHOST + i] >> 4]
                hex_id[2 * i + 1] = HEX_DIGITS[record[POS_STOREHOST + i] & 15]
                hex_id[16 + 2 * i] = HEX_DIGITS[record[POS_PHYSICALOFFSET + i] >> 4]
                hex_id[16 + 2 * i + 1] = HEX_DIGITS[record[POS_PHYSICALOFFSET + i] & 15]
            put_text(&columns[9], &columns[10], <const uint8_t*>hex_id, 32)
            put_text(&columns[11], &columns[12], uniq_value, uniq_length)
            put_text(&columns[13], &columns[14], tags_value, tags_length)
            for k in (6, 8, 10, 12, 14, 17, 20, 22):
                if columns[k].size > INT32_LIMIT:
                    return None
            rows += 1
            position += size
        return rows, [take(&columns[k]) for k in range(COLUMN_BUFFERS)], first if in_order else -1
    finally:
        PyBuffer_Release(&view)
        for k in range(COLUMN_BUFFERS):
            free(columns[k].data)


# ---------------------------------------------------------------------------------------------
# Faulting a prepared segment's pages in ahead of the writer (app.store.mapped_file.populate).

cdef extern from "sys/mman.h" nogil:
    int madvise(void* addr, size_t length, int advice)

cdef enum:
    MADV_POPULATE_READ = 22  # Linux 5.14: fault pages in for reading, without touching them
    TOUCH_PAGE = 4096


def populate(mm, Py_ssize_t start, Py_ssize_t length):
    """Fault in the pages of ``mm[start:start + length]`` for reading, with the GIL released, so the
    writer's first touch of each page costs it no page allocation. Changes no byte, dirties no
    page. Reads a byte of each page itself where the system has no MADV_POPULATE_READ."""
    cdef Py_buffer view
    cdef uint8_t* base
    cdef Py_ssize_t at, end
    cdef uint64_t seen = 0
    cdef int failed
    PyObject_GetBuffer(mm, &view, PyBUF_SIMPLE)
    try:
        if start < 0 or length <= 0 or start >= view.len:
            return 0
        end = start + length if start + length < view.len else view.len
        base = <uint8_t*>view.buf
        with nogil:
            # madvise wants a page-aligned address; segments are mapped whole, from a page boundary.
            at = start - start % TOUCH_PAGE
            failed = madvise(base + at, <size_t>(end - at), MADV_POPULATE_READ)
            if failed:
                while at < end:
                    seen += (<volatile uint8_t*>base)[at]
                    at += TOUCH_PAGE
        return seen
    finally:
        PyBuffer_Release(&view)


# ---------------------------------------------------------------------------------------------
# A client's binary produce batch (app.client.aio_producer, app.codec.encode_batch's twin).

cdef int put_be(Buffer* buffer, int64_t value, int width) except -1:
    cdef char raw[8]
    cdef int i
    for i in range(width):
        raw[i] = <char>((<uint64_t>value >> (8 * (width - 1 - i))) & 0xFF)
    return put(buffer, raw, width)


cdef int put_text16(Buffer* buffer, str text) except -1:
    """A text field of the batch: its UTF-8 length (16 bits) and bytes; -2 when it does not fit."""
    cdef Py_ssize_t length
    cdef const char* raw = PyUnicode_AsUTF8AndSize(text, &length)
    if length > 0xFFFF:
        return -2
    put_be(buffer, length, 2)
    if length:
        put(buffer, raw, length)
    return 0


def encode_outgoing(messages, int32_t queue_id):
    """``app.codec.encode_batch`` of an AsyncProducer's messages (OutgoingMessage), every one to
    ``queue_id``: the same bytes. None for a batch with anything it leaves to the twin: a delay, a
    field of another type than the message declares, text longer than its length field holds."""
    cdef Buffer buffer = Buffer(NULL, 0, 0)
    cdef Buffer properties = Buffer(NULL, 0, 0)
    cdef Py_ssize_t length, joined
    cdef int64_t born_ms
    cdef const char* raw
    cdef bint first
    if type(messages) is not list:
        return None
    try:
        reserve(&buffer, 8 + 64 * len(<list>messages))
        put(&buffer, b"WHB1", 4)
        put_be(&buffer, len(<list>messages), 4)
        for message in <list>messages:
            if (
                message.delay_level is not None
                or message.delay_ms is not None
                or message.deliver_at_ms is not None
            ):
                return None
            tags, keys, unique_id, born = message.tags, message.keys, message.unique_id, message.born_timestamp
            props, body = message.properties, message.body
            if (
                type(tags) is not str
                or type(keys) is not list
                or (unique_id is not None and type(unique_id) is not str)
                or type(born) is not int
                or type(props) is not dict
                or type(body) is not bytes
            ):
                return None
            try:
                born_ms = born
            except OverflowError:
                return None
            put_be(&buffer, queue_id, 4)
            put_be(&buffer, 0, 4)  # flag
            put_be(&buffer, born_ms, 8)
            if put_text16(&buffer, tags) == -2:
                return None
            # The keys joined by spaces: their length first, then each.
            joined = len(<list>keys) - 1 if keys else 0
            for key in <list>keys:
                if type(key) is not str:
                    return None
                PyUnicode_AsUTF8AndSize(key, &length)
                joined += length
            if joined > 0xFFFF:
                return None
            put_be(&buffer, joined, 2)
            first = True
            for key in <list>keys:
                if not first:
                    put(&buffer, b" ", 1)
                raw = PyUnicode_AsUTF8AndSize(key, &length)
                if length:
                    put(&buffer, raw, length)
                first = False
            if put_text16(&buffer, unique_id or "") == -2:
                return None
            put_be(&buffer, 0, 2)  # no sharding key
            properties.size = 0
            for name, value in (<dict>props).items():
                if type(name) is not str or type(value) is not str:
                    return None
                raw = PyUnicode_AsUTF8AndSize(name, &length)
                put(&properties, raw, length)
                put(&properties, b"\x01", 1)
                raw = PyUnicode_AsUTF8AndSize(value, &length)
                put(&properties, raw, length)
                put(&properties, b"\x02", 1)
            if properties.size > 0xFFFFFFFF or len(<bytes>body) > 0xFFFFFFFF:
                return None
            put_be(&buffer, properties.size, 4)
            if properties.size:
                put(&buffer, properties.data, properties.size)
            put_be(&buffer, len(<bytes>body), 4)
            put(&buffer, PyBytes_AS_STRING(body), len(<bytes>body))
        return take(&buffer)
    finally:
        free(buffer.data)
        free(properties.data)
