"""The CommitLog record (SPEC 1.2): codec round trips, validation, limits, tag hash and message ids."""

from __future__ import annotations

import random
import struct
import zlib
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.store import (
    CorruptRecordError,
    EmptyBodyError,
    InvalidTopicError,
    Message,
    MessageRejectedError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    decode_record,
    message_id,
    parse_message_id,
    record_format,
)
from app.store import record as record_module
from app.store.record import BLANK, check_record
from app.store.record_format import (
    BLANK_MAGIC,
    FIXED_SIZE,
    MESSAGE_MAGIC,
    OFFSETS,
    POS_BODY,
    POS_PHYSICALOFFSET,
    POS_QUEUEOFFSET,
    POS_STORETIMESTAMP,
    SIZE_MAGIC,
    SYSFLAG_PROPERTIES_END,
    TIMESTAMP,
    Limits,
    decode_host,
    encode_host,
    encode_record,
    tags_hash,
)
from tests.store.rocketmq_records import BORN_V4, BORN_V6, NOW_MS, STORE_V4, STORE_V6, Host, rocketmq_record

STORE_HOST = encode_host("10.1.2.3", 10911)
BORN_HOST = encode_host("192.168.0.7", 50123)
LIMITS = Limits()

TOPIC_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789%|_-"


def big_body(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


# Small bodies shrink well; large ones (up to 64 KiB) come from a seeded generator.
bodies = st.one_of(
    st.binary(min_size=1, max_size=256),
    st.builds(big_body, st.integers(1, 64 * 1024), st.integers(0, 2**32)),
)
topics = st.text(alphabet=TOPIC_ALPHABET, min_size=1, max_size=127)
property_text = st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]), max_size=40)
# What a message may carry: names and values not empty (RocketMQ's decoder drops a pair without a
# value, and so does the store).
property_maps = st.dictionaries(property_text.filter(bool), property_text.filter(bool), max_size=6)


def stored(
    record_data: bytes, queue_offset: int, physical_offset: int, store_timestamp: int = NOW_MS
) -> bytes:
    """The record as the CommitLog leaves it: placeholders patched under the append lock."""
    buf = bytearray(record_data)
    OFFSETS.pack_into(buf, POS_QUEUEOFFSET, queue_offset, physical_offset)
    TIMESTAMP.pack_into(buf, POS_STORETIMESTAMP, store_timestamp)
    return bytes(buf)


def sample_record(properties: dict[str, str] | None = None, body: bytes = b"hello, wharf") -> bytes:
    props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "u-1"} if properties is None else properties
    message = Message("orders", body, queue_id=3, properties=props)
    return stored(encode_record(message, STORE_HOST, NOW_MS, LIMITS).data, 7, 4096)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode, written out independently: s[0]*31^(n-1) + ... + s[n-1] over UTF-16."""
    units = struct.unpack(f">{len(text.encode('utf-16-be')) // 2}H", text.encode("utf-16-be"))
    h = 0
    for unit in units:
        h = (h * 31 + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


# -- codec round trips -----------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    body=bodies,
    topic=topics,
    properties=property_maps,
    queue_id=st.integers(0, 2**16 - 1),
    queue_offset=st.integers(0, 2**63 - 1),
    physical_offset=st.integers(0, 2**63 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    reconsume_times=st.integers(0, 16),
    born_timestamp=st.integers(1, 2**62),
)
def test_encode_patch_decode_gives_the_same_fields(
    body: bytes,
    topic: str,
    properties: dict[str, str],
    queue_id: int,
    queue_offset: int,
    physical_offset: int,
    flag: int,
    reconsume_times: int,
    born_timestamp: int,
) -> None:
    message = Message(
        topic,
        body,
        queue_id=queue_id,
        properties=properties,
        flag=flag,
        born_timestamp=born_timestamp,
        born_host=BORN_HOST,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=12345,
    )
    encoded = encode_record(message, STORE_HOST, NOW_MS, LIMITS)
    data = stored(encoded.data, queue_offset, physical_offset)

    decoded = decode_record(data, check_crc=True)

    assert decoded.topic == topic
    assert decoded.body == body
    assert decoded.properties == properties
    assert decoded.queue_id == queue_id
    assert decoded.queue_offset == queue_offset
    assert decoded.physical_offset == physical_offset
    properties_size = sum(len(f"{name}\x01{value}\x02".encode()) for name, value in properties.items())
    assert decoded.size == len(data) == FIXED_SIZE + len(body) + len(topic) + properties_size
    assert decoded.flag == flag
    assert decoded.born_timestamp == born_timestamp
    assert decoded.born_host == BORN_HOST
    assert decoded.store_timestamp == NOW_MS
    assert decoded.store_host == STORE_HOST
    assert decoded.reconsume_times == reconsume_times
    assert decoded.prepared_transaction_offset == 12345
    assert decoded.msg_id == message_id(STORE_HOST, physical_offset)
    assert encoded.tags_code == (tags_hash(properties["TAGS"]) if properties.get("TAGS") else 0)


@settings(max_examples=100, deadline=None)
@given(body=bodies, topic=topics, properties=property_maps)
def test_check_record_accepts_every_valid_record(body: bytes, topic: str, properties: dict[str, str]) -> None:
    data = stored(
        encode_record(Message(topic, body, properties=properties), STORE_HOST, NOW_MS, LIMITS).data, 5, 8192
    )
    # The record sits in a segment: other bytes before it, zeros after it.
    segment = b"\xaa" * 100 + data + bytes(64)

    checked = check_record(segment, 100, 8192)

    assert checked is not None
    assert checked.size == len(data)
    assert (checked.topic, checked.queue_id, checked.queue_offset) == (topic, 0, 5)
    assert checked.store_timestamp == NOW_MS
    assert checked.tags_code == (tags_hash(properties["TAGS"]) if properties.get("TAGS") else 0)


def test_the_record_layout_matches_the_spec_table() -> None:
    data = sample_record(properties={"TAGS": "TagA"}, body=b"xyz")
    total, magic, _crc, queue_id, _flag, queue_offset, physical_offset = struct.unpack_from(">iIiiiqq", data)
    assert (total, magic, queue_id, queue_offset, physical_offset) == (len(data), 0xDAA320A7, 3, 7, 4096)
    assert struct.unpack_from(">i", data, 84)[0] == 3 and data[88:91] == b"xyz"
    assert data[91] == len("orders") and data[92:98] == b"orders"
    assert struct.unpack_from(">h", data, 98)[0] == len(b"TAGS\x01TagA\x02")
    # RocketMQ 4.9.1+ leaves the last separator out; Wharf keeps it, and says so in the sysflag.
    assert data[100:] == b"TAGS\x01TagA\x02"
    assert struct.unpack_from(">i", data, 36)[0] == SYSFLAG_PROPERTIES_END
    assert len(data) == FIXED_SIZE + 3 + 6 + 10


def test_a_message_without_born_timestamp_is_born_now() -> None:
    encoded = encode_record(Message("t", b"x"), STORE_HOST, NOW_MS, LIMITS)
    assert decode_record(stored(encoded.data, 0, 0)).born_timestamp == NOW_MS


def test_decode_reads_a_record_in_the_middle_of_a_buffer() -> None:
    data = sample_record()
    buf = memoryview(b"\x00" * 17 + data + b"\xff" * 9)
    assert decode_record(buf, 17).body == b"hello, wharf"


# -- check_record rejects corruption ----------------------------------------------------------------


# CRC-32's published check value: crc32("123456789") is 0xCBF43926. RocketMQ's UtilAll.crc32 clears
# the top bit (0x4BF43926); Wharf wrote the full value, as a signed int, before it did the same.
CHECK_BODY, ROCKETMQ_CRC, OLD_WHARF_CRC = b"123456789", 0x4BF43926, 0xCBF43926 - (1 << 32)


@pytest.mark.parametrize("encode", [record_format.encode_record, record_format.python_encode_record])
def test_the_body_crc_is_rocketmqs_masked_crc32(encode: Any) -> None:
    data = encode(Message("t", CHECK_BODY), STORE_HOST, NOW_MS, LIMITS).data
    assert struct.unpack_from(">i", data, 8)[0] == ROCKETMQ_CRC
    short = encode(Message("t", b"hello"), STORE_HOST, NOW_MS, LIMITS).data  # top bit clear already
    assert struct.unpack_from(">i", short, 8)[0] == zlib.crc32(b"hello") == 0x3610A686


@pytest.mark.parametrize("check", [record_module.check_record, record_module.python_check_record])
def test_a_record_holding_the_full_crc_of_an_older_store_still_checks(check: Any) -> None:
    data = bytearray(stored(encode_record(Message("t", CHECK_BODY), STORE_HOST, NOW_MS, LIMITS).data, 0, 0))
    assert check(bytes(data), 0, 0) is not None
    struct.pack_into(">i", data, 8, OLD_WHARF_CRC)
    assert check(bytes(data), 0, 0) is not None
    assert decode_record(data, check_crc=True).body == CHECK_BODY
    struct.pack_into(">i", data, 8, ROCKETMQ_CRC + 1)
    assert check(bytes(data), 0, 0) is None


@pytest.mark.parametrize(
    "properties",
    [
        b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x017F000001",  # RocketMQ 4.9.1 and later
        b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x017F000001\x02",  # before, and older Wharf stores
    ],
    ids=["no-trailing-separator", "trailing-separator"],
)
@pytest.mark.parametrize("check", [record_module.check_record, record_module.python_check_record])
def test_a_record_as_rocketmq_encodes_it_checks_and_decodes(properties: bytes, check: Any) -> None:
    data = rocketmq_record(properties)
    checked = check(data, 0, 4096)
    assert checked is not None
    assert (checked.topic, checked.queue_id, checked.queue_offset) == ("orders", 3, 11)
    assert (checked.keys, checked.uniq_key, checked.tags_code) == ("k1 k2", "7F000001", tags_hash("TagA"))
    decoded = decode_record(data, check_crc=True)
    assert decoded.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "7F000001"}
    assert (decoded.body, decoded.born_host, decoded.store_host) == (b'{"id": 7}', BORN_HOST, STORE_HOST)


@pytest.mark.parametrize("check", [record_module.check_record, record_module.python_check_record])
def test_a_record_wharf_wrote_must_end_its_properties_with_the_separator(check: Any) -> None:
    # Wharf's records carry the bit and the separator; a tail that lost it (zeros, stale bytes) is
    # torn. RocketMQ's records (no bit) need no separator, and so cannot be told torn this way.
    properties = b"TAGS\x01TagA\x02UNIQ_KEY\x01U1\x02"
    flagged = bytearray(rocketmq_record(properties))
    struct.pack_into(">i", flagged, 36, SYSFLAG_PROPERTIES_END)
    assert check(bytes(flagged), 0, 4096) is not None
    for last in (0, ord("1"), 0xFF):
        flagged[-1] = last
        assert check(bytes(flagged), 0, 4096) is None, last
    unflagged = rocketmq_record(properties[:-1] + b"7")
    assert check(unflagged, 0, 4096) is not None


def test_every_single_flipped_body_byte_fails_the_crc() -> None:
    body = bytes(range(256)) * 2
    data = sample_record(body=body)
    assert check_record(data, 0, 4096) is not None
    for index in range(len(body)):
        corrupt = bytearray(data)
        corrupt[POS_BODY + index] ^= 0xFF
        assert check_record(bytes(corrupt), 0, 4096) is None, f"flipped body byte {index} was accepted"


@settings(max_examples=100, deadline=None)
@given(body=bodies, index=st.integers(min_value=0), mask=st.integers(1, 255))
def test_any_corrupted_body_byte_fails_the_crc(body: bytes, index: int, mask: int) -> None:
    data = bytearray(stored(encode_record(Message("t", body), STORE_HOST, NOW_MS, LIMITS).data, 0, 0))
    data[POS_BODY + index % len(body)] ^= mask
    assert check_record(bytes(data), 0, 0) is None
    with pytest.raises(CorruptRecordError):
        decode_record(data, check_crc=True)


@pytest.mark.parametrize("byte", range(4))
def test_a_bad_magic_code_is_rejected(byte: int) -> None:
    corrupt = bytearray(sample_record())
    corrupt[4 + byte] ^= 0x10
    assert check_record(bytes(corrupt), 0, 4096) is None
    with pytest.raises(CorruptRecordError):
        decode_record(corrupt)


@pytest.mark.parametrize(
    ("position", "delta"),
    [(0, +1), (0, -1), (0, -(10**6)), (POS_BODY - 4, +1), (POS_BODY - 4, -1), (POS_BODY - 4, -(10**6))],
    ids=["total+1", "total-1", "total-negative", "body+1", "body-1", "body-negative"],
)
def test_sizes_that_do_not_add_up_are_rejected(position: int, delta: int) -> None:
    """TOTALSIZE or the BODY length changed: the fields no longer add up to the record."""
    corrupt = bytearray(sample_record() + bytes(64))
    (value,) = struct.unpack_from(">i", corrupt, position)
    struct.pack_into(">i", corrupt, position, value + delta)
    assert check_record(bytes(corrupt), 0, 4096) is None


def test_a_wrong_topic_or_properties_length_is_rejected() -> None:
    data = sample_record()
    topic_len_at = POS_BODY + len(b"hello, wharf")
    for position in (topic_len_at, topic_len_at + 1 + len("orders"), topic_len_at + 2 + len("orders")):
        for delta in (1, -1):
            corrupt = bytearray(data + bytes(64))
            corrupt[position] = (corrupt[position] + delta) % 256
            assert check_record(bytes(corrupt), 0, 4096) is None, f"length byte at {position} {delta:+}"


def test_a_length_that_points_past_the_end_of_the_buffer_is_rejected() -> None:
    """A record at the very end of a segment whose topic length was corrupted."""
    data = sample_record()
    corrupt = bytearray(data)
    corrupt[POS_BODY + len(b"hello, wharf")] = 255
    assert check_record(bytes(corrupt), 0, 4096) is None
    with pytest.raises(CorruptRecordError):
        decode_record(corrupt)


def test_a_record_found_at_another_offset_than_it_names_is_rejected() -> None:
    data = sample_record()  # says PHYSICALOFFSET 4096
    assert check_record(data, 0, 4096) is not None
    assert check_record(data, 0, 4097) is None
    assert check_record(data, 0, 0) is None


def test_unpatched_placeholders_are_rejected() -> None:
    """The offsets are written last: a record whose offsets are still -1 was never completed."""
    raw = encode_record(Message("t", b"x"), STORE_HOST, NOW_MS, LIMITS).data
    assert struct.unpack_from(">q", raw, POS_PHYSICALOFFSET)[0] == -1
    assert check_record(raw, 0, -1) is None


def test_only_a_blank_that_fills_the_rest_of_the_segment_is_end_of_file() -> None:
    segment = bytearray(64)
    SIZE_MAGIC.pack_into(segment, 16, 48, BLANK_MAGIC)
    assert check_record(bytes(segment), 16, 16) == BLANK
    SIZE_MAGIC.pack_into(segment, 16, 40, BLANK_MAGIC)
    assert check_record(bytes(segment), 16, 16) is None


def test_zeros_and_too_few_bytes_are_not_a_record() -> None:
    assert check_record(bytes(4096), 0, 0) is None
    assert check_record(sample_record()[:7], 0, 4096) is None
    with pytest.raises(CorruptRecordError):
        decode_record(sample_record()[: FIXED_SIZE - 1])


@pytest.mark.parametrize(
    "properties",
    [
        {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "u-1"},
        {"a": "b"},
        {"a": "b\x00", "c": "\x00d"},
        {},
    ],
    ids=["properties", "one-short-property", "values-with-nul", "no-properties"],
)
def test_a_record_cut_short_with_zero_fill_is_rejected(properties: dict[str, str]) -> None:
    """A crash can tear a record anywhere; the bytes past the tear are zero.

    A cut inside trailing bytes that are zero anyway leaves the very same bytes, which are a valid
    record; every other cut must be rejected.
    """
    data = sample_record(properties=properties, body=b"\x01" * 40)
    for cut in range(len(data)):
        torn = data[:cut] + bytes(len(data) - cut) + bytes(64)
        if torn[: len(data)] == data:
            continue
        assert check_record(torn, 0, 4096) is None, f"record cut at byte {cut} of {len(data)} was accepted"


# -- limits ---------------------------------------------------------------------------------------


def encode(message: Message, limits: Limits = LIMITS) -> bytes:
    return encode_record(message, STORE_HOST, NOW_MS, limits).data


def test_an_empty_body_is_rejected() -> None:
    with pytest.raises(EmptyBodyError):
        encode(Message("t", b""))


def test_a_body_over_the_maximum_message_size_is_rejected() -> None:
    limits = Limits(max_message_size=1024)
    assert decode_record(stored(encode(Message("t", b"x" * 1024), limits), 0, 0)).body == b"x" * 1024
    with pytest.raises(MessageTooLargeError):
        encode(Message("t", b"x" * 1025), limits)


@pytest.mark.parametrize(
    "topic",
    ["", "a" * 128, "a b", "a/b", "a.b", "tópico", "a\x00", "new\nline", "orders\n", ".."],
    ids=[
        "empty",
        "128-chars",
        "space",
        "slash",
        "dot",
        "non-ascii",
        "nul",
        "newline",
        "trailing-newline",
        "dotdot",
    ],
)
def test_invalid_topics_are_rejected(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        encode(Message(topic, b"x"))


def test_the_longest_topic_and_every_allowed_character_are_accepted() -> None:
    for topic in ("a" * 127, TOPIC_ALPHABET, "%RETRY%group|x", "-", "_"):
        assert decode_record(stored(encode(Message(topic, b"x")), 0, 0)).topic == topic


def test_properties_over_32767_bytes_are_rejected() -> None:
    # "k" \x01 value \x02: 3 bytes of framing.
    at_limit = {"k": "v" * (32_767 - 3)}
    assert decode_record(stored(encode(Message("t", b"x", properties=at_limit)), 0, 0)).properties == at_limit
    with pytest.raises(PropertiesTooLargeError):
        encode(Message("t", b"x", properties={"k": "v" * (32_767 - 2)}))


def test_properties_are_limited_in_encoded_bytes_not_characters() -> None:
    with pytest.raises(PropertiesTooLargeError):
        encode(Message("t", b"x", properties={"k": "é" * 16_383}))  # 32,766 bytes of value


@pytest.mark.parametrize("properties", [{"a\x01b": "v"}, {"a": "v\x02"}, {"": "v"}])
def test_property_names_and_values_may_not_hold_separators(properties: dict[str, str]) -> None:
    with pytest.raises(MessageRejectedError):
        encode(Message("t", b"x", properties=properties))


def test_a_property_with_an_empty_value_is_left_out_as_rocketmqs_decoder_leaves_it_out() -> None:
    # The broker refuses one from a producer; a message stored before that is moved without it.
    data = encode(Message("t", b"x", properties={"a": "", "b": "c", "d": ""}))
    assert data.endswith(b"\x00\x04b\x01c\x02")
    assert decode_record(stored(data, 0, 0)).properties == {"b": "c"}
    assert decode_record(stored(encode(Message("t", b"x", properties={"a": ""})), 0, 0)).properties == {}


def test_a_property_that_is_not_valid_unicode_is_rejected() -> None:
    with pytest.raises(MessageRejectedError):
        encode(Message("t", b"x", properties={"k": "\ud800"}))


def test_each_limit_has_its_own_error() -> None:
    errors = [EmptyBodyError, MessageTooLargeError, InvalidTopicError, PropertiesTooLargeError]
    for error in errors:
        assert issubclass(error, MessageRejectedError)
        assert [other for other in errors if issubclass(error, other)] == [error]


# -- tag hash: Java's String.hashCode ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        # 'T'=84 'a'=97 'g'=103 'A'=65: ((84*31 + 97)*31 + 103)*31 + 65
        ("TagA", ((84 * 31 + 97) * 31 + 103) * 31 + 65),
        ("TagA", 2_598_919),
        ("a", 97),
        ("hello", 99_162_322),
        ("hello world", 1_794_106_052),
        ("polygenelubricants", -(2**31)),  # wraps to Integer.MIN_VALUE
        ("é", 0xE9),
        ("日本", 0x65E5 * 31 + 0x672C),  # two UTF-16 units
        ("😀", 0xD83D * 31 + 0xDE00),  # one code point, a surrogate pair in UTF-16
    ],
)
def test_tags_hash_is_java_string_hash_code(tags: str, expected: int) -> None:
    assert tags_hash(tags) == expected


def test_no_tags_hash_to_zero() -> None:
    assert tags_hash("") == 0


def test_aa_and_bb_collide_as_in_java() -> None:
    assert tags_hash("Aa") == tags_hash("BB") == 65 * 31 + 97


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=64))
def test_tags_hash_matches_java_for_any_text(tags: str) -> None:
    code = tags_hash(tags)
    assert code == java_string_hash(tags)
    assert -(2**31) <= code < 2**31


# -- message ids ----------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    address=st.tuples(*[st.integers(0, 255)] * 4),
    port=st.integers(0, 65_535),
    physical_offset=st.integers(0, 2**63 - 1),
)
@example(address=(0, 0, 0, 0), port=0, physical_offset=0)
def test_message_id_round_trips(address: tuple[int, int, int, int], port: int, physical_offset: int) -> None:
    host = ".".join(map(str, address))
    msg_id = message_id(encode_host(host, port), physical_offset)
    assert len(msg_id) == 32
    assert msg_id == msg_id.upper() and int(msg_id, 16) >= 0
    assert parse_message_id(msg_id) == (host, port, physical_offset)
    assert parse_message_id(msg_id.lower()) == (host, port, physical_offset)


def test_message_id_is_store_host_then_physical_offset_in_hex() -> None:
    assert message_id(encode_host("10.1.2.3", 10911), 0x1234) == "0A010203" + "00002A9F" + "0000000000001234"


@pytest.mark.parametrize("bad", ["", "0A01", "0A010203" * 5, "Z" * 32, "0A010203 0002A9F0000000000001234"])
def test_a_malformed_message_id_raises_value_error(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_message_id(bad)


def test_magic_constants_are_the_spec_values() -> None:
    assert MESSAGE_MAGIC & 0xFFFFFFFF == 0xDAA320A7
    assert BLANK_MAGIC & 0xFFFFFFFF == 0xCBD43194


HOST_FORMS = [(BORN_V4, STORE_V4), (BORN_V6, STORE_V4), (BORN_V4, STORE_V6), (BORN_V6, STORE_V6)]
HOST_FORM_IDS = ["ipv4", "ipv6-born", "ipv6-store", "ipv6-both"]


@pytest.mark.parametrize(("born", "store"), HOST_FORMS, ids=HOST_FORM_IDS)
@pytest.mark.parametrize("check", [record_module.check_record, record_module.python_check_record])
def test_a_rocketmq_record_with_ipv6_hosts_checks_and_decodes(born: Host, store: Host, check: Any) -> None:
    # RocketMQ stores an IPv6 host in 20 bytes and says so in SYSFLAG (0x10 born, 0x20 store):
    # every field after it moves on 12 bytes.
    properties = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U7\x02region\x01eu"
    data = rocketmq_record(properties, b"\x00\xffbody", 8192, born=born, store=store, reconsume_times=2)
    assert len(data) == 91 + 6 + 6 + len(properties) + 12 * (born.v6 + store.v6)
    checked = check(data, 0, 8192)
    assert checked is not None
    assert (checked.size, checked.topic, checked.queue_id, checked.queue_offset) == (
        len(data),
        "orders",
        3,
        11,
    )
    assert (checked.keys, checked.uniq_key, checked.tags_code) == ("k1 k2", "U7", tags_hash("TagA"))
    assert checked.store_timestamp == NOW_MS
    decoded = decode_record(data, check_crc=True)
    assert (decoded.body, decoded.reconsume_times, decoded.size) == (b"\x00\xffbody", 2, len(data))
    assert (decoded.born_timestamp, decoded.store_timestamp) == (NOW_MS - 5, NOW_MS)
    assert (decoded.born_host, decoded.store_host) == (born.packed(), store.packed())
    assert decode_host(decoded.born_host) == (born.address, born.port)
    assert decoded.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U7", "region": "eu"}
    # The message id is the store host and the offset: 56 hex digits for an IPv6 host, as RocketMQ's
    # MessageDecoder.createMessageId makes it.
    assert decoded.msg_id == (store.packed() + (8192).to_bytes(8, "big")).hex().upper()
    assert len(decoded.msg_id) == (56 if store.v6 else 32)
    assert parse_message_id(decoded.msg_id) == (store.address, store.port, 8192)
    # The fields read on their own, as reads, filters, pops and the timer read them.
    assert record_module.store_timestamp(data[: record_module.TIMESTAMP_END]) == NOW_MS
    assert record_module.record_properties(data) == decoded.properties
    assert record_module.record_tags(data) == "TagA"
    assert record_module.record_reconsume_times(data) == 2
    for record_is in (record_module.record_is, record_module.python_record_is):
        assert record_is(data, b"orders", 3, 11, 8192)
        assert not record_is(data, b"orderz", 3, 11, 8192)
        assert not record_is(data[:-1], b"orders", 3, 11, 8192)
    # A damaged body still fails the CRC; a record cut short is no record.
    damaged = bytearray(data)
    body_at = len(data) - len(properties) - 2 - len(b"orders") - 1 - len(b"\x00\xffbody")
    damaged[body_at + 3] ^= 0x01
    assert check(bytes(damaged), 0, 8192) is None
    assert check(data[: len(data) - 1], 0, 8192) is None


@pytest.mark.parametrize("encode", [record_format.encode_record, record_format.python_encode_record])
def test_wharf_writes_ipv4_hosts_whatever_sysflag_a_producer_sends(encode: Any) -> None:
    message = Message("t", b"body", sysflag=0x10 | 0x20 | 0x4)
    encoded = encode(message, STORE_HOST, NOW_MS, LIMITS)
    assert encoded.sysflag & 0x30 == 0 and encoded.sysflag & 0x4
    assert struct.unpack_from(">i", encoded.data, 36)[0] == encoded.sysflag
    assert decode_record(stored(encoded.data, 0, 0)).store_host == STORE_HOST


def test_a_message_id_of_an_ipv6_store_host_is_56_hex_digits() -> None:
    msg_id = "FE800000000000000001000200030000" + "00002A9F" + "0000000000001234"
    assert parse_message_id(msg_id) == ("fe80::1:2:3:0", 10911, 0x1234)
    assert message_id(bytes.fromhex(msg_id[:40]), 0x1234) == msg_id
