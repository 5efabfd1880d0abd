"""The msgspec structs that decode produced messages check what the OpenAPI document's pydantic
models declare: the same fields, required the same way, with the same types and limits, and bad
input is refused with the field named."""

from __future__ import annotations

import base64 as stdlib_base64
import binascii
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.api.errors import ApiError, ErrorCode
from app.api.schemas import MessageIn, ProduceRequest
from app.api.wire import WireBatch, WireMessage, batch_of, body_of, message_of, messages_of, ndjson_line
from app.codec import BodyEncodingError, IncomingMessage, decode_body, encode_body

LIMITS = ("maxLength", "minLength", "minimum", "maximum", "exclusiveMinimum", "maxItems", "minItems")


def _shape(schema: dict[str, Any], definitions: dict[str, Any]) -> Any:
    """A JSON schema reduced to what validation depends on: types, enums and limits."""
    if "$ref" in schema:
        return _shape(definitions[schema["$ref"].rsplit("/", 1)[-1]], definitions)
    if "anyOf" in schema:
        return sorted((_shape(part, definitions) for part in schema["anyOf"]), key=repr)
    shape: dict[str, Any] = {name: schema[name] for name in LIMITS if name in schema}
    if "enum" in schema or "const" in schema:
        shape["enum"] = sorted(schema.get("enum", [schema.get("const")]))
    else:  # an enum's values say its type; one generator names it too, the other does not
        shape["type"] = schema.get("type")
    if schema.get("type") == "array":
        shape["items"] = _shape(schema["items"], definitions)
    if schema.get("type") == "object":
        if "properties" in schema:
            shape["properties"] = {
                name: _shape(part, definitions) for name, part in sorted(schema["properties"].items())
            }
            shape["required"] = sorted(schema.get("required", []))
        if isinstance(schema.get("additionalProperties"), dict):
            shape["values"] = _shape(schema["additionalProperties"], definitions)
    return shape


def _pydantic(model: type) -> Any:
    schema = model.model_json_schema(mode="validation")  # type: ignore[attr-defined]
    # Documented ranges that the broker checks itself (a 400 naming the limit) are not validation.
    for name in ("delay_level", "delay_ms", "deliver_at_ms"):
        for where in (
            schema.get("properties", {}),
            schema.get("$defs", {}).get("MessageIn", {}).get("properties", {}),
        ):
            if name in where:
                for part in where[name].get("anyOf", []):
                    part.pop("minimum", None)
                    part.pop("maximum", None)
    return _shape(schema, schema.get("$defs", {}))


def _msgspec(struct: type) -> Any:
    (schema,), components = msgspec.json.schema_components([struct])
    return _shape(schema, components)


@pytest.mark.parametrize(("struct", "model"), [(WireMessage, MessageIn), (WireBatch, ProduceRequest)])
def test_the_struct_checks_what_the_document_declares(struct: type, model: type) -> None:
    assert _msgspec(struct) == _pydantic(model)


def _refused_by_pydantic(document: dict[str, Any]) -> bool:
    try:
        MessageIn.model_validate(document, strict=True)
    except ValidationError:
        return True
    return False


def _refused_by_struct(document: dict[str, Any]) -> bool:
    try:
        message_of(document)
    except ApiError as error:
        return error.code is ErrorCode.VALIDATION_FAILED
    return False


values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.text(max_size=3),
    st.lists(st.text(max_size=2), max_size=2),
    st.dictionaries(st.text(max_size=2), st.one_of(st.text(max_size=2), st.integers()), max_size=2),
)
fields = st.sampled_from([*MessageIn.model_fields, "bdy", "id2"])


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(fields, values, max_size=5))
def test_the_struct_refuses_what_the_model_refuses(document: dict[str, Any]) -> None:
    document.setdefault("body", "x")
    if document.get("encoding") == "base64":
        document["body"] = "eA=="
    assert _refused_by_struct(document) == _refused_by_pydantic(document), document


def test_a_refusal_names_the_field() -> None:
    with pytest.raises(ApiError) as unknown:
        messages_of({"messages": [{"body": "a"}, {"bdy": "typo"}]})
    assert unknown.value.code is ErrorCode.VALIDATION_FAILED
    assert unknown.value.message == "messages[1]: Object contains unknown field `bdy`"
    with pytest.raises(ApiError) as wrong:
        messages_of({"body": 5})
    assert wrong.value.message == "body: Expected `str`, got `int`"
    with pytest.raises(ApiError) as empty:
        messages_of({"messages": []})
    assert empty.value.message == "messages: Expected `array` of length >= 1"
    with pytest.raises(ApiError) as line:
        ndjson_line(b'{"body": "x", "queue_id": -1}', 3)
    assert line.value.message == "line 3: queue_id: Expected `int` >= 0"
    with pytest.raises(ApiError) as broken:
        ndjson_line(b'{"body": ', 4)
    assert (broken.value.code, broken.value.message) == (ErrorCode.MALFORMED_BODY, "line 4 is not valid JSON")
    with pytest.raises(ApiError) as not_utf8:
        ndjson_line(b'{"body": "\xff"}', 5)
    assert (not_utf8.value.code, not_utf8.value.message) == (
        ErrorCode.MALFORMED_BODY,
        "line 5 is not valid JSON",
    )
    with pytest.raises(ApiError) as base64:
        message_of({"body": "%%%", "encoding": "base64"})
    assert base64.value.code is ErrorCode.INVALID_BODY_ENCODING


def test_a_message_keeps_every_field() -> None:
    (message,) = messages_of(
        {
            "body": "aGk=",
            "encoding": "base64",
            "tags": "T",
            "keys": "a b",
            "properties": {"p": "v"},
            "queue_id": 2,
            "sharding_key": "s",
            "unique_id": "u",
            "delay_level": 3,
        }
    )
    assert (message.body, message.tags, message.keys, message.properties) == (
        b"hi",
        "T",
        ["a", "b"],
        {"p": "v"},
    )
    assert (message.queue_id, message.sharding_key, message.unique_id, message.delay_level) == (
        2,
        "s",
        "u",
        3,
    )
    assert (message.delay_ms, message.deliver_at_ms) == (None, None)


def test_every_field_lands_in_its_own_attribute() -> None:
    """Each field of a message object set to a value of its own, through both decoders: no two
    fields swapped on the way into IncomingMessage."""
    document = {
        "body": "aGk=",
        "encoding": "base64",
        "tags": "T",
        "keys": ["k"],
        "properties": {"p": "v"},
        "queue_id": 2,
        "sharding_key": "s",
        "unique_id": "u",
        "delay_level": 3,
        "delay_ms": 4,
        "deliver_at_ms": 5,
    }
    expected = IncomingMessage(
        body=b"hi",
        tags="T",
        keys=["k"],
        properties={"p": "v"},
        queue_id=2,
        sharding_key="s",
        unique_id="u",
        delay_level=3,
        delay_ms=4,
        deliver_at_ms=5,
    )
    assert messages_of(document) == [expected]
    assert batch_of(msgspec.json.encode({"messages": [document]})) == [expected]


batch_documents = st.one_of(
    st.fixed_dictionaries({"messages": st.lists(st.dictionaries(fields, values, max_size=4), max_size=3)}),
    st.dictionaries(st.sampled_from(["messages", "body", "x"]), values, max_size=2),
    st.lists(values, max_size=2),
)


def _decoded(decode: Any, *args: Any) -> Any:
    try:
        return decode(*args)
    except ApiError as error:
        return error.code, error.message


@settings(max_examples=400, deadline=None)
@given(batch_documents)
def test_a_batch_decoded_straight_from_its_bytes_is_the_batch_messages_of_gives(document: Any) -> None:
    """What batch_of takes, messages_of gives alike (messages, or the same refusal); what it leaves
    (None) is any body that is not a valid batch."""
    raw = msgspec.json.encode(document)
    straight = _decoded(batch_of, raw)
    if straight is None:
        if isinstance(document, dict) and isinstance(document.get("messages"), list) and document["messages"]:
            assert isinstance(_decoded(messages_of, document), tuple)  # refused there too
        return
    assert straight == _decoded(messages_of, document)


body_documents = st.one_of(batch_documents, st.dictionaries(fields, values, max_size=4))


@settings(max_examples=400, deadline=None)
@given(body_documents)
def test_a_body_decoded_straight_from_its_bytes_is_what_messages_of_gives(document: Any) -> None:
    """What body_of takes - a batch or one message object - messages_of gives alike; what it
    leaves (None) the dict path answers."""
    raw = msgspec.json.encode(document)
    straight = _decoded(body_of, raw)
    if straight is None:
        return
    assert isinstance(document, dict)
    assert straight == _decoded(messages_of, document)


def test_one_message_object_is_decoded_straight_and_a_body_naming_messages_as_a_batch() -> None:
    assert body_of(b'{"body": "hi", "tags": "T"}') == [IncomingMessage(body=b"hi", tags="T")]
    assert body_of(b'{"body": "messages"}') is None  # tried as a batch: the dict path takes it
    assert body_of(b'{"messages": [{"body": "a"}]}') == [IncomingMessage(body=b"a")]
    assert body_of(b'{"body": "a", "queue_id": 18446744073709551616}') is None
    assert body_of(b'{"body": "a", "x": 1}') is None  # refused there, with what is wrong
    assert body_of(b'[{"body": "a"}]') is None


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [{"body": "\xff"}]}',  # not UTF-8
        b'{"messages": [{"body": "a", "queue_id": 18446744073709551616}]}',  # past 64 bits
        b'{"messages": [{"body": "a", "delay_ms": -9223372036854775809}]}',
        b'{"messages": [{"body": "a\x00"}]}',
        b"[" * 5000,
    ],
)
def test_what_the_dict_path_must_refuse_is_left_to_it(raw: bytes) -> None:
    assert batch_of(raw) is None


# Base64 as clients send it, and as they get it wrong: the alphabet, padding anywhere, the URL-safe
# alphabet, whitespace, other ASCII and characters beyond ASCII.
base64_texts = st.one_of(
    st.binary(max_size=64).map(lambda raw: stdlib_base64.b64encode(raw).decode()),
    st.text(
        alphabet=st.sampled_from(list("AZaz09+/=") + ["-", "_", " ", "\n", "!", "é", "\x00"]), max_size=24
    ),
)


@settings(max_examples=3000, deadline=None)
@given(base64_texts)
def test_a_base64_body_decodes_as_the_standard_library_decodes_it(text: str) -> None:
    """The broker's base64 decoder (pybase64) accepts exactly what the standard library's strict
    decoder accepts, with the same bytes, and refuses the rest as a body encoding error."""
    try:
        expected: bytes | None = stdlib_base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        expected = None
    if expected is None:
        with pytest.raises(BodyEncodingError):
            decode_body(text, "base64")
    else:
        assert decode_body(text, "base64") == expected


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_a_body_that_is_not_utf8_encodes_as_the_standard_library_encodes_it(raw: bytes) -> None:
    text, encoding = encode_body(raw)
    if encoding == "base64":
        assert text == stdlib_base64.b64encode(raw).decode()
    else:
        assert text.encode() == raw
