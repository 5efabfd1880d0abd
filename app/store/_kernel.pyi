from collections.abc import Callable, Iterable, Sequence
from typing import Any

_Record = bytes | memoryview
_Fallback = Callable[[_Record, bool], bytes]

def message_json(record: _Record, consumed: bool, fallback: _Fallback) -> bytes: ...
def messages_json(records: Iterable[_Record], consumed: bool, fallback: _Fallback) -> bytes: ...
def bind(encoded_record: type, validate_topic: Callable[[str, int], bytes]) -> None: ...
def encode_record(
    message: object, store_host: bytes, now_ms: int, limits: object
) -> tuple[object, ...] | None: ...
def encode_records(
    messages: Sequence[object], store_host: bytes, now_ms: int, limits: object, max_record_size: int
) -> tuple[list[Any], int, dict[tuple[str, int], int]] | None: ...
def bind_checker(checked_record: type, blank: tuple[object, ...]) -> None: ...
def check_record(
    buf: bytes | bytearray | memoryview, pos: int, physical_offset: int, with_properties: bool
) -> object: ...
def bind_reader(python_record_is: Callable[[bytes | memoryview, bytes, int, int, int], bool]) -> None: ...
def record_is(
    buf: bytes | memoryview, topic: bytes, queue_id: int, queue_offset: int, physical_offset: int
) -> bool: ...
def bind_decoder(stored_message: type) -> None: ...
def decode_records(
    data: bytes | memoryview, fallback: Callable[[bytes | memoryview], list[object]]
) -> list[object]: ...
def index_messages(
    mm: object,
    records: object,
    placements: object,
    start: int,
    prefixes: dict[str, int],
    slots: int,
    entries_at: int,
    begin: int,
    number: int,
    limit: int,
    end_offset: int,
    end_timestamp: int,
) -> tuple[int, int, int, int, int]: ...
def bind_writer(append_result: type, put_ok: object) -> None: ...
def bind_schedule(topic: str, delays_ms: tuple[int, ...]) -> None: ...
def index_key_hash(key: str) -> int: ...
def write_records(
    mm: object,
    position: int,
    limit: int,
    base: int,
    records: object,
    start: int,
    now: int,
    queue_offsets: dict[tuple[str, int], int],
    store_host: bytes,
    results: list[object],
    runs: dict[tuple[str, int], tuple[int, bytearray]],
) -> tuple[int, int]: ...
def write_single(
    mm: object,
    position: int,
    base: int,
    data: bytes,
    now: int,
    queue_offset: int,
    cq: object,
    cq_position: int,
    tags_code: int,
    topic: str,
    queue_id: int,
    store_host: bytes,
) -> Any: ...
def plain_answers(records: object, appended: object, status: str) -> list[dict[str, object]]: ...

class DigestTable:
    count: int
    def find(self, d: int) -> int | None: ...
    def insert(self, d: int, physical_offset: int, expires: float, max_entries: int) -> None: ...
    def put_many(
        self, topic: str, entries: Iterable[tuple[str, int]], expires: float, max_entries: int
    ) -> None: ...
    def first_known(self, topic: str, ids: Sequence[str], start: int) -> int: ...
    def put_records(
        self, topic: str, records: Sequence[Any], appended: Sequence[Any], expires: float, max_entries: int
    ) -> None: ...
    def expire(self, now: float) -> None: ...

_Encoded = tuple[list[tuple[object, ...]], list[str], dict[tuple[str, int], int], int, int, int, int]

class PlainEncoder:
    def __init__(
        self,
        topic: str,
        topic_bytes: bytes,
        store_host: bytes,
        now_ms: int,
        max_body: int,
        max_properties: int,
        max_record: int,
        queues: int,
        round_robin: int,
        id_prefix: str,
        id_counter: int,
    ) -> None: ...
    def result(self) -> _Encoded: ...

def encode_batch(data: bytes | bytearray | memoryview, encoder: PlainEncoder) -> bool: ...
def encode_messages(messages: object, encoder: PlainEncoder) -> bool: ...
def collect_records(
    entries: bytes | memoryview,
    at: int,
    segment: memoryview,
    segment_from: int,
    readable: int,
    commitlog_min: int,
    topic: bytes,
    queue_id: int,
    base_offset: int,
    max_messages: int,
    max_bytes: int,
    records: list[memoryview],
    queue_offsets: list[int],
    total: int,
) -> tuple[int, int]: ...
def record_columns(data: bytes | memoryview, until: int) -> tuple[int, list[bytes], int] | None: ...
def populate(mm: object, start: int, length: int) -> int: ...
def encode_outgoing(messages: object, queue_id: int) -> bytes | None: ...
