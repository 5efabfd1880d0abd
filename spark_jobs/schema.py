"""The rows a Wharf read yields, and how executors turn stored records into Arrow record batches."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from app.store.errors import CorruptRecordError
from app.store.kernel import compiled
from app.store.record_format import (
    FIXED_SIZE,
    MESSAGE_MAGIC,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    layout_at,
    message_id,
)

COLUMNS: dict[str, DataType] = {
    "topic": StringType(),
    "broker": StringType(),  # the broker's name when the route named it, else null
    "queue_id": IntegerType(),
    "queue_offset": LongType(),
    "msg_id": StringType(),
    "unique_id": StringType(),
    "tags": StringType(),
    "keys": ArrayType(StringType()),
    "properties": MapType(StringType(), StringType()),  # user properties; tags, keys, id have columns
    "body": BinaryType(),
    "born_timestamp": TimestampType(),
    "store_timestamp": TimestampType(),
    "reconsume_times": IntegerType(),
}

SCHEMA = StructType([StructField(name, data_type) for name, data_type in COLUMNS.items()])


class SchemaError(ValueError):
    """A user-given read schema asks for a column the source does not have."""


def check_schema(schema: StructType) -> None:
    """A read may ask for any subset of the columns, in any order, with their types."""
    for field in schema.fields:
        expected = COLUMNS.get(field.name)
        if expected is None:
            raise SchemaError(f"the wharf source has no column {field.name!r}; it has {', '.join(COLUMNS)}")
        if field.dataType != expected:
            raise SchemaError(
                f"column {field.name!r} is {expected.simpleString()}, not {field.dataType.simpleString()}"
            )


def _timestamps(milliseconds: Iterable[int]) -> pa.Array:
    return pa.array([value * 1000 for value in milliseconds], type=pa.timestamp("us", tz="UTC"))


class Record(NamedTuple):
    """The fields of one stored record a row needs, decoded once."""

    queue_id: int
    queue_offset: int
    physical_offset: int
    born_timestamp: int
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    body: bytes
    topic: str
    properties: dict[str, str]

    @property
    def tags(self) -> str:
        return self.properties.get(PROPERTY_TAGS, "")


def decode_records(data: bytes) -> list[Record]:
    """Every record of a binary pull answer (the CommitLog layout of app.store.record).

    A lean cousin of :func:`app.store.record.decode_record` for the read path: one header unpack
    and the properties split per record, nothing else; sizes are checked so a torn answer fails."""
    records = []
    position, end = 0, len(data)
    while position < end:
        if end - position < FIXED_SIZE:
            raise CorruptRecordError(f"the pull answer ends inside a record header at {position}")
        layout = layout_at(data, position)  # where an IPv6 host moves the fields after it
        if end - position < layout.fixed_size:
            raise CorruptRecordError(f"the pull answer ends inside a record header at {position}")
        (total, magic, _crc, queue_id, _flag, queue_offset, physical_offset, _sysflag, born, _born_host,
         stored, store_host, reconsume, _prepared, body_length) = layout.header.unpack_from(data, position)  # fmt: skip
        if magic != MESSAGE_MAGIC or total < layout.fixed_size or position + total > end:
            raise CorruptRecordError(f"no whole message record at {position} of the pull answer")
        body_end = position + layout.body + body_length
        topic_end = body_end + 1 + data[body_end]
        properties_start = topic_end + 2
        raw = data[properties_start : position + total].decode()
        properties = dict(
            item.split(NAME_VALUE_SEPARATOR, 1) for item in raw.split(PROPERTY_SEPARATOR) if item
        )
        records.append(
            Record(
                queue_id,
                queue_offset,
                physical_offset,
                born,
                stored,
                store_host,
                reconsume,
                data[position + layout.body : body_end],
                data[body_end + 1 : topic_end].decode("ascii"),
                properties,
            )
        )
        position += total
    return records


def _lists(values: list[list[str]]) -> pa.Array:
    offsets = [0]
    flat: list[str] = []
    for items in values:
        flat.extend(items)
        offsets.append(len(flat))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(flat, pa.string()))


def _maps(values: list[dict[str, str]], map_type: pa.DataType) -> pa.Array:
    offsets = [0]
    names: list[str] = []
    texts: list[str] = []
    for properties in values:
        for name, value in properties.items():
            if name not in _SYSTEM:
                names.append(name)
                texts.append(value)
        offsets.append(len(names))
    array = pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(names, pa.string()), pa.array(texts, pa.string())
    )
    return array.cast(map_type)


class BatchBuilder:
    """Collects decoded records and hands them out, column by column, as one Arrow record batch."""

    def __init__(self, schema: StructType, broker: str) -> None:
        self.names = schema.fieldNames()
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.broker = broker or None
        self._records: list[Record] = []

    def __len__(self) -> int:
        return len(self._records)

    def add(self, record: Record) -> None:
        self._records.append(record)

    def from_page(self, data: bytes, until: int) -> tuple[pa.RecordBatch, int] | None:
        """The record batch of a pull answer's records before queue offset ``until``, with the
        columns built by the compiled kernel: the batch :meth:`build` makes of the same records,
        and their first queue offset (-1 when one is not the one before it plus one). None
        without the kernel, or for an answer it leaves to the Python path (a damaged record, odd
        text)."""
        if compiled is None:
            return None
        made = compiled.record_columns(data, until)
        if made is None:
            return None
        rows, buffers, first = made
        arrays = [self._kernel_column(name, rows, buffers) for name in self.names]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema), first

    def _kernel_column(self, name: str, rows: int, buffers: list[bytes]) -> pa.Array:
        field_type = self.arrow_schema.field(name).type
        if name == "broker":
            return pa.array([self.broker] * rows, field_type)
        if name in _KERNEL_VALUES:
            return pa.Array.from_buffers(
                field_type, rows, [None, pa.py_buffer(buffers[_KERNEL_VALUES[name]])]
            )
        if name in _KERNEL_TEXTS:
            at = _KERNEL_TEXTS[name]
            return _texts(field_type, rows, buffers[at], buffers[at + 1])
        if name == "keys":
            keys = _texts(pa.string(), len(buffers[16]) // 4 - 1, buffers[16], buffers[17])
            return pa.ListArray.from_arrays(_int32s(buffers[15], rows + 1), keys)
        if name == "properties":
            entries = len(buffers[19]) // 4 - 1
            array = pa.MapArray.from_arrays(
                _int32s(buffers[18], rows + 1),
                _texts(pa.string(), entries, buffers[19], buffers[20]),
                _texts(pa.string(), entries, buffers[21], buffers[22]),
            )
            return array.cast(field_type)
        raise SchemaError(f"no column {name!r}")

    def build(self) -> pa.RecordBatch:
        records, self._records = self._records, []
        arrays = [self._column(name, records) for name in self.names]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)

    def _column(self, name: str, records: list[Record]) -> pa.Array:
        field_type = self.arrow_schema.field(name).type
        if name == "topic":
            return pa.array([r.topic for r in records], field_type)
        if name == "broker":
            return pa.array([self.broker] * len(records), field_type)
        if name in ("queue_id", "queue_offset", "reconsume_times", "body"):
            return pa.array([getattr(r, name) for r in records], field_type)
        if name == "msg_id":
            return pa.array([message_id(r.store_host, r.physical_offset) for r in records], field_type)
        if name == "unique_id":
            return pa.array([r.properties.get(PROPERTY_UNIQ_KEY, "") for r in records], field_type)
        if name == "tags":
            return pa.array([r.properties.get(PROPERTY_TAGS, "") for r in records], field_type)
        if name == "keys":
            return _lists([r.properties.get(PROPERTY_KEYS, "").split() for r in records])
        if name == "properties":
            return _maps([r.properties for r in records], field_type)
        if name == "born_timestamp":
            return _timestamps(r.born_timestamp for r in records)
        if name == "store_timestamp":
            return _timestamps(r.store_timestamp for r in records)
        raise SchemaError(f"no column {name!r}")


_SYSTEM = frozenset({PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY})

# Where the kernel's record_columns puts each column: one buffer of values, or offsets then bytes.
_KERNEL_VALUES = {
    "queue_id": 0,
    "queue_offset": 1,
    "born_timestamp": 2,
    "store_timestamp": 3,
    "reconsume_times": 4,
}
_KERNEL_TEXTS = {"body": 5, "topic": 7, "msg_id": 9, "unique_id": 11, "tags": 13}


def _int32s(data: bytes, length: int) -> pa.Array:
    return pa.Array.from_buffers(pa.int32(), length, [None, pa.py_buffer(data)])


def _texts(data_type: pa.DataType, length: int, offsets: bytes, data: bytes) -> pa.Array:
    return pa.Array.from_buffers(data_type, length, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
