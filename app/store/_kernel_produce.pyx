# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The produce path's batches, compiled. Twins: the broker's general produce path
(``app.broker.core.Broker.produce_general``: ``app.codec.parse_batch``, ``Broker.to_message``,
``encode_record``) for ``PlainEncoder``, ``encode_batch`` and ``encode_messages`` (app.broker.plain
calls them); ``app.broker.plain.python_answers`` for ``plain_answers``;
``app.broker.idempotency.BucketTable`` for ``DigestTable``; ``app.codec.encode_batch`` for
``encode_outgoing`` (a client's binary batch, app.client.aio_producer).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Calloc, PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeASCII, PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free
from libc.string cimport memchr, memcmp, memcpy

from app.store._kernel_base cimport (
    FIXED_SIZE,
    MAX_QUEUE_ID,
    PROPERTIES_END,
    Buffer,
    java_hash,
    put,
    read_i32,
    read_i64,
    read_u16,
    read_u32,
    reserve,
    take,
    utf8_of,
)
from app.store._kernel_records cimport _EncodedRecord, put_record_head


# ---------------------------------------------------------------------------------------------
# A binary produce batch of plain messages straight into records (app.broker.core.Broker.produce_batch,
# whose twin is the general path: app.codec.parse_batch, Broker.to_message, encode_record).

cdef enum:
    PRODUCER_UNIQ_KEY = 0x10000
    UNIQUE_ID_COUNTER_DIGITS = 12


# A message id's hex digits (each module that writes ids has this table).
cdef const char* HEX_UPPER = b"0123456789ABCDEF"


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
