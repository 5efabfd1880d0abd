# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# The kernel's shared low-level layer, declared for the other kernel modules to cimport; defined in
# app/store/_kernel_base.pyx. Its own twin: none; each piece is what its callers' twins do in
# Python (struct's big-endian fields, the strict UTF-8 decoder, orjson's JSON strings, base64,
# Java's String.hashCode as app.store.record_format and app.store.index_file take it).
#
# The small helpers the per-record loops call are ``cdef inline`` here, so each module that cimports
# them compiles its own copy (no call crosses modules); the larger ones are defined once in the .pyx
# and reached through a C function pointer: a C call, never a Python one.

from cpython.unicode cimport PyUnicode_READ_CHAR
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy


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
    # Wharf's sysflag bit: the properties end with their separator (app.store.record_format).
    PROPERTIES_END = 0x20000
    BLANK_MAGIC_CODE = <int32_t>0xCBD43194
    MESSAGE_MAGIC_CODE = <int32_t>0xDAA320A7
    # The sysflag's transaction kind (app.store.record_format): prepared and rolled-back messages
    # take no ConsumeQueue entry.
    TRANSACTION_MASK = 0x0C
    TRANSACTION_PREPARED = 0x04
    TRANSACTION_ROLLBACK = 0x0C
    # A ConsumeQueue entry: the record's physical offset, size and tags code (app.store.consume_queue).
    CQ_UNIT_SIZE = 20
    # Queue ids a message may name (app.store.writer.MAX_QUEUE_ID).
    MAX_QUEUE_ID = 1 << 16


# ---------------------------------------------------------------------------------------------
# A growable byte buffer.

cdef struct Buffer:
    char* data
    Py_ssize_t size
    Py_ssize_t capacity


cdef int reserve(Buffer* buffer, Py_ssize_t extra) except -1


cdef inline int put(Buffer* buffer, const char* text, Py_ssize_t length) except -1:
    if buffer.size + length > buffer.capacity:
        reserve(buffer, length)
    memcpy(buffer.data + buffer.size, text, length)
    buffer.size += length
    return 0


cdef inline int put_bytes(Buffer* buffer, bytes text) except -1:
    return put(buffer, text, len(text))


cdef int put_int(Buffer* buffer, int64_t value) except -1
cdef bytes take(Buffer* buffer)


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


cdef inline uint16_t read_u16(const uint8_t* at) noexcept nogil:
    return <uint16_t>((at[0] << 8) | at[1])


cdef inline uint32_t read_u32(const uint8_t* at) noexcept nogil:
    return (<uint32_t>at[0] << 24) | (<uint32_t>at[1] << 16) | (<uint32_t>at[2] << 8) | at[3]


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


# ---------------------------------------------------------------------------------------------
# Text: UTF-8 validation as strict as Python's decoder, JSON strings as orjson writes them.

cdef bint valid_utf8(const uint8_t* text, Py_ssize_t length) noexcept nogil


cdef inline bint is_ascii(const uint8_t* text, Py_ssize_t length) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(length):
        if text[i] >= 0x80:
            return False
    return True


cdef int put_json_string(Buffer* buffer, const uint8_t* text, Py_ssize_t length) except -1
cdef int put_base64_string(Buffer* buffer, const uint8_t* data, Py_ssize_t length) except -1
cdef const char* utf8_of(object text, Py_ssize_t* length)


# ---------------------------------------------------------------------------------------------
# Java's String.hashCode, as RocketMQ files tag codes and index keys under it.

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


cdef int32_t java_hash(str text)
