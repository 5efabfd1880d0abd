# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""A binary pull answer straight into Arrow column buffers, compiled. Twin: the record-by-record
path of ``spark_jobs.schema.BatchBuilder.from_page`` (``record_columns``).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport free
from libc.string cimport memcmp, memset

from app.store._kernel_base cimport (
    FIXED_SIZE,
    HOSTS_V6,
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
    Buffer,
    is_ascii,
    put,
    read_i32,
    read_i64,
    take,
    valid_utf8,
)


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
