# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# What the record codec (app/store/_kernel_records.pyx) gives the other kernel modules: the record
# type ``bind`` binds and the writer of a record's head (PlainEncoder builds records with them), and
# the check that a read is the record a ConsumeQueue entry names (record_is's, and collect_records
# runs it on every record of a pull: inline, so each module has its own copy).

from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memcmp

from app.store._kernel_base cimport (
    FIXED_SIZE,
    MESSAGE_MAGIC_CODE,
    POS_BODY,
    POS_BODYLENGTH,
    POS_PHYSICALOFFSET,
    POS_QUEUEID,
    POS_QUEUEOFFSET,
    host_bytes_extra,
    read_i32,
    read_i64,
)

# The EncodedRecord tuple type records are returned as (``bind`` gives it).
cdef object _EncodedRecord


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
) noexcept nogil


cdef inline bint is_record(
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
