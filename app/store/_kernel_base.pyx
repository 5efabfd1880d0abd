# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The kernel's shared low-level layer (declared in _kernel_base.pxd, which the other kernel modules
cimport): a growable byte buffer, big-endian fields, UTF-8 checks, JSON strings and base64, Java's
string hash, the record's fixed part. No Python function of its own, so no twin of its own: each
piece gives what its callers' twins get in Python (the strict UTF-8 decoder, orjson's string
escaping, base64, Java's String.hashCode as app.store.record_format takes it).
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy


# ---------------------------------------------------------------------------------------------
# A growable byte buffer.

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



cdef const char* HEX_LOWER = b"0123456789abcdef"


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


# ---------------------------------------------------------------------------------------------
# Java's String.hashCode, as RocketMQ files tag codes and index keys under it (the loop itself,
# java_hash_on, is inline in the .pxd).

cdef int32_t java_hash(str text):
    """Java's String.hashCode: over UTF-16 code units."""
    return <int32_t>java_hash_on(0, text, 0, len(text))
