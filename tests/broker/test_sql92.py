"""SQL92 filter expressions: the grammar, RocketMQ's semantics (three-valued logic, numbers as
numbers, a missing property is NULL), parse errors with their position, the tag-hash prefilter
and the compile cache; then reads of a real store through the filter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.broker import sql92
from app.broker.errors import InvalidFilterExpressionError, InvalidParameterError
from app.broker.filters import SQL92, FilterExpression, filter_of
from app.broker.sql92 import Sql92Error, compile_sql92
from app.store import GetMessageStatus, MessageStore, decode_record
from app.store.record_format import Limits, Message, decode_properties, encode_host, encode_record, tags_hash
from tests.store.conftest import tiny_config

HOST = encode_host("127.0.0.1", 8080)
P = {"a": "5", "b": "x", "f": "1.5", "t": "TRUE", "n": "abc", "q": "it's", "TAGS": "TagA"}

# (expression, whether a message with the properties P matches)
TABLE = [
    # = and <> on strings, numbers, booleans
    ("b = 'x'", True),
    ("b = 'y'", False),
    ("b <> 'y'", True),
    ("b <> 'x'", False),
    ("'x' = b", True),
    ("q = 'it''s'", True),
    ("a = 5", True),
    ("a = 5.0", True),
    ("a <> 6", True),
    ("a = '5'", True),
    ("a = '5.0'", False),  # strings compare as text
    ("t = TRUE", True),
    ("t = FALSE", False),
    ("t <> FALSE", True),
    ("b = TRUE", False),  # neither true nor false: unknown
    ("NOT (b = TRUE)", False),
    ("TRUE", True),
    ("FALSE", False),
    ("true = TRUE", True),
    # < <= > >= compare numbers
    ("a > 4", True),
    ("a > 5", False),
    ("a >= 5", True),
    ("a < 10", True),  # as numbers: as text '5' < '10' would be false
    ("a <= 4", False),
    ("f > 1.25", True),
    ("f < 2", True),
    ("a > -1", True),
    ("a > 1e0", True),
    ("a > .5", True),
    ("f > a", False),  # two properties, both numbers
    ("a > f", True),
    ("n > 1", False),  # not a number: unknown
    ("NOT (n > 1)", False),
    ("n <= 1", False),
    ("b > a", False),  # a property that is no number against one that is
    # BETWEEN
    ("a BETWEEN 5 AND 6", True),
    ("a BETWEEN 1 AND 4", False),
    ("a NOT BETWEEN 1 AND 4", True),
    ("a NOT BETWEEN 5 AND 6", False),
    ("f BETWEEN 1 AND 2", True),
    ("n BETWEEN 1 AND 2", False),
    ("n NOT BETWEEN 1 AND 2", False),
    ("missing BETWEEN 1 AND 2", False),
    ("missing NOT BETWEEN 1 AND 2", False),
    ("a between 1 and 9 and b = 'x'", True),
    # IN
    ("b IN ('x', 'y')", True),
    ("b IN ('y')", False),
    ("b NOT IN ('y', 'z')", True),
    ("b NOT IN ('x')", False),
    ("missing IN ('x')", False),
    ("missing NOT IN ('x')", False),
    ("a IN ('5')", True),
    ("TAGS IN ('TagA', 'TagB')", True),
    ("TAGS = 'TagB'", False),
    # IS [NOT] NULL
    ("missing IS NULL", True),
    ("missing IS NOT NULL", False),
    ("a IS NULL", False),
    ("a IS NOT NULL", True),
    # a missing property makes a comparison unknown, and unknown never matches
    ("missing = 'x'", False),
    ("missing <> 'x'", False),
    ("NOT (missing = 'x')", False),
    ("missing > 1", False),
    ("missing = TRUE", False),
    # AND, OR, NOT with three-valued logic
    ("b = 'x' AND a = 5", True),
    ("b = 'x' AND a = 6", False),
    ("b = 'y' OR a = 5", True),
    ("b = 'y' OR a = 6", False),
    ("missing = 1 OR b = 'x'", True),  # unknown OR true
    ("missing = 1 AND b = 'x'", False),  # unknown AND true is unknown
    ("NOT (missing = 1 AND b = 'y')", True),  # unknown AND false is false
    ("NOT (missing = 1 OR b = 'y')", False),  # unknown OR false is unknown
    ("NOT b = 'y'", True),
    ("NOT NOT b = 'x'", True),
    ("(b = 'y' OR a = 5) AND NOT (f > 2)", True),
    ("b = 'y' OR a = 5 AND f > 2", False),  # AND binds tighter than OR
    ("b = 'x' OR a = 5 AND f > 2", True),
    # keywords in any case; names are case-sensitive and may hold . $ _
    ("b = 'x' and A is null Or FALSE", True),
    ("android = 'x' OR b = 'x'", True),  # a name that starts with a keyword
    ("TAGS is not null", True),
    ("tags IS NULL", True),
]


@pytest.mark.parametrize(("expression", "expected"), TABLE)
def test_the_grammar_table(expression: str, expected: bool) -> None:
    assert compile_sql92(expression).matches(P) is expected


def test_property_names_may_hold_dots_dollars_and_underscores() -> None:
    assert compile_sql92("a.b_c$ = 'v'").matches({"a.b_c$": "v"})


# (expression, line, column, words the message holds)
ERRORS = [
    ("", 1, 1, "ends too early"),
    ("a = ", 1, 5, "ends too early"),
    ("a", 1, 2, "ends too early"),
    ("a >> 1", 1, 4, "unexpected '>'"),
    ("a = 1 AND", 1, 10, "ends too early"),
    ("a # 1", 1, 3, "unexpected character '#'"),
    ("(a = 1", 1, 7, "ends too early"),
    ("a = 1)", 1, 6, "unexpected ')'"),
    ("a = 'open", 1, 5, "unexpected character"),
    ("a = 1\n  AND b", 2, 8, "ends too early"),
    ("a > 'x'", 1, 5, "compares numbers"),
    ("a BETWEEN 'x' AND 2", 1, 11, "compares numbers"),
    ("a < TRUE", 1, 5, "compares numbers"),
    ("a IN (1, 2)", 1, 7, "expected a string"),
    ("a IN ()", 1, 7, "unexpected ')'"),
    ("a = NULL", 1, 5, "unexpected 'NULL'"),
    ("a IS 1", 1, 6, "unexpected '1'"),
    ("a AND b", 1, 3, "unexpected 'AND'"),
    ("NOT a", 1, 6, "ends too early"),
    ("a = 1 b = 2", 1, 7, "unexpected 'b'"),
    ("(" * 70 + "a = 1" + ")" * 70, 1, 1, "nests deeper"),
    ("NOT " * 70 + "a = 1", 1, 1, "nests deeper"),
    ("a = 1 OR " * 500 + "a = 2", 1, 1, "longer than"),
]


@pytest.mark.parametrize(("expression", "line", "column", "words"), ERRORS)
def test_a_bad_expression_says_what_and_where(expression: str, line: int, column: int, words: str) -> None:
    with pytest.raises(Sql92Error) as caught:
        compile_sql92(expression)
    error = caught.value
    assert words in error.reason
    if "nests deeper" not in words:
        assert (error.line, error.column) == (line, column)
    assert str(error).startswith(f"line {error.line}, column {error.column}: ")


def test_long_chains_of_and_and_or_are_not_nesting() -> None:
    expression = " AND ".join(f"p{i} IS NULL" for i in range(200))
    assert compile_sql92(expression).matches({})
    assert not compile_sql92(expression).matches({"p199": "1"})


@pytest.mark.parametrize(
    "value",
    ["", " 5", "5 ", "1_000", "nan", "inf", "0x10", "1e", "--1", "\x00", "５"],
)
def test_odd_values_never_raise_and_are_no_number(value: str) -> None:
    for expression in ("p > 0", "p <= 0", "p BETWEEN -1 AND 1e9", "p = 5", "p <> 5", "p = TRUE", "p > q"):
        assert compile_sql92(expression).matches({"p": value, "q": "1"}) is False


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b", "TAGS", "n"]), st.text(max_size=12)))
def test_evaluation_never_raises_whatever_the_properties_hold(properties: dict[str, str]) -> None:
    for expression, _ in TABLE:
        assert compile_sql92(expression).matches(properties) in (True, False)


SQL_ALPHABET = st.sampled_from(
    list("ab ()'=<>-.,1e0") + ["AND ", "OR ", "NOT ", "IN ", "IS ", "NULL ", "BETWEEN ", "TRUE "]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(SQL_ALPHABET, max_size=20).map("".join) | st.text(max_size=40))
def test_any_text_compiles_or_is_a_parse_error(expression: str) -> None:
    try:
        compiled = compile_sql92(expression)
    except Sql92Error as error:
        assert error.line >= 1 and error.column >= 1
    else:
        assert compiled.matches({"a": "1", "b": "x"}) in (True, False)


PREFILTERED = [
    "region = 'eu' AND amount > 1",
    "TAGS = 'a' AND region = 'eu'",
    "TAGS IN ('a', 'b') OR (TAGS = 'c' AND region = 'us')",
    "(region = 'eu' AND TAGS = 'a') OR TAGS = 'b'",
    "region = 'e' AND NOT amount = 2",
]


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["region", "xregion", "amount", "TAGS"]),
        st.sampled_from(["eu", "us", "e", "a", "b", "c", "1", "2", "eu\u00e9"]),
    )
)
def test_the_prefilters_never_drop_a_match(properties: dict[str, str]) -> None:
    record = memoryview(encode_record(Message("t", b"x", properties=properties), HOST, 0, Limits()).data)
    for expression in PREFILTERED:
        compiled = compile_sql92(expression)
        matches = compiled.matches(properties)
        assert compiled.matches_record(record) is matches
        if matches and compiled.codes is not None:
            tags = properties.get("TAGS", "")
            assert tags and tags_hash(tags) in compiled.codes


def test_a_number_property_compares_as_a_number_of_any_size() -> None:
    big = "123456789012345678901234567890"
    assert compile_sql92(f"p = {big}").matches({"p": big})
    assert compile_sql92("p > 1e300").matches({"p": "1e301"})
    assert compile_sql92("p < -1").matches({"p": "-1.5"})


def test_tags_name_the_tag_hashes_a_match_may_have() -> None:
    def codes(expression: str) -> frozenset[int] | None:
        return compile_sql92(expression).codes

    a, b = tags_hash("a"), tags_hash("b")
    assert codes("TAGS = 'a'") == {a}
    assert codes("'a' = TAGS") == {a}
    assert codes("TAGS IN ('a', 'b')") == {a, b}
    assert codes("TAGS = 'a' AND x > 1") == {a}
    assert codes("x > 1 AND TAGS IN ('a', 'b') AND TAGS IN ('b')") == {b}
    assert codes("TAGS = 'a' OR TAGS = 'b'") == {a, b}
    assert codes("(TAGS = 'a' AND x = 1) OR TAGS = 'b'") == {a, b}
    # Anything that may match a message with another tag (or none) prefilters nothing.
    assert codes("TAGS = 'a' OR x = 1") is None
    assert codes("TAGS <> 'a'") is None
    assert codes("TAGS NOT IN ('a')") is None
    assert codes("NOT TAGS = 'a'") is None
    assert codes("TAGS IS NULL") is None
    assert codes("x = 1") is None


def test_equalities_a_match_needs_name_the_encoded_pairs_it_must_hold() -> None:
    def needles(expression: str) -> tuple[bytes, ...]:
        return compile_sql92(expression).needles

    assert needles("region = 'eu' AND amount > 1") == (b"region\x01eu\x02",)
    assert needles("'eu' = region AND (TAGS = 'a')") == (b"TAGS\x01a\x02", b"region\x01eu\x02")
    assert needles("region = 'eu' OR amount > 1") == ()
    assert needles("NOT region = 'eu'") == ()
    assert needles("region <> 'eu'") == ()
    assert needles("region = 5") == ()  # '5.0' matches too


def test_an_expression_is_compiled_once() -> None:
    sql92._compile.cache_clear()
    first = compile_sql92("cached = 'yes'")
    assert compile_sql92("cached = 'yes'") is first
    assert sql92._compile.cache_info().hits == 1
    assert sql92._compile.cache_info().maxsize == sql92.CACHE_SIZE


def test_the_filter_types() -> None:
    assert filter_of(None, None) == FilterExpression.tags("*")
    assert filter_of(None, None, "TagA") == FilterExpression.tags("TagA")
    assert filter_of("tag", "TagA") == FilterExpression.tags("TagA")
    assert filter_of("SQL92", "a = 1") == FilterExpression(SQL92, "a = 1")
    for bad in [
        ("sql92", None, None),
        ("sql92", "  ", None),
        ("sql92", "a = 1", "TagA"),
        ("xpath", "a", None),
    ]:
        with pytest.raises(InvalidParameterError):
            filter_of(*bad)
    with pytest.raises(InvalidParameterError):
        filter_of("tag", "TagA", "TagB")
    with pytest.raises(InvalidFilterExpressionError) as caught:
        FilterExpression(SQL92, "a >").compile()
    assert caught.value.fields == {"line": 1, "column": 4}


# -- reading a store through the filter -----------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    store = MessageStore(tiny_config(tmp_path / "store")).open()
    yield store
    store.close()


def put(store: MessageStore, *properties: dict[str, str]) -> None:
    store.append(
        [
            Message("orders", f"m{i}".encode(), queue_id=0, properties=dict(p))
            for i, p in enumerate(properties)
        ]
    )


def test_a_read_hands_out_only_what_the_expression_matches(store: MessageStore) -> None:
    put(
        store,
        {"region": "eu", "amount": "150"},
        {"region": "us", "amount": "150"},
        {"region": "eu", "amount": "50"},
        {"amount": "500"},
        {"region": "eu", "amount": "lots"},
        {"region": "eu", "amount": "101", "TAGS": "vip"},
    )
    result = store.get_message("orders", 0, 0, 32, compile_sql92("region = 'eu' AND amount > 100"))
    assert result.status is GetMessageStatus.FOUND
    assert result.queue_offsets == [0, 5]
    assert [decode_record(r).body for r in result.records] == [b"m0", b"m5"]
    assert result.next_offset == 6


def test_the_tag_prefilter_never_reads_other_records(store: MessageStore) -> None:
    put(store, {"TAGS": "a", "x": "1"}, {"TAGS": "b", "x": "1"}, {"TAGS": "a", "x": "2"})
    seen: list[int] = []
    expression = compile_sql92("TAGS = 'a' AND x = 1")

    class Counting:
        codes = expression.codes

        def matches_record(self, record: memoryview) -> bool:
            seen.append(decode_record(record).queue_offset)
            return expression.matches_record(record)

    result = store.get_message("orders", 0, 0, 32, Counting())
    assert result.queue_offsets == [0]
    assert seen == [0, 2]  # the entry tagged b was passed over on its hash


def test_the_pair_prefilter_is_only_a_first_cut(store: MessageStore) -> None:
    # The encoded pair region=eu sits inside xregion=eu: the expression still decides.
    put(store, {"xregion": "eu"}, {"region": "eu"}, {"region": "eu", "amount": "3"}, {"region": "us"})
    result = store.get_message("orders", 0, 0, 32, compile_sql92("region = 'eu'"))
    assert result.queue_offsets == [1, 2]
    result = store.get_message("orders", 0, 0, 32, compile_sql92("region = 'eu' AND amount = 3"))
    assert result.queue_offsets == [2]


def test_records_without_a_needed_pair_are_never_decoded(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(store, {"region": "us"}, {"region": "eu"}, {"region": "apac"}, {"region": "eu", "n": "1"})
    decoded: list[bytes] = []

    def counting(raw: bytes) -> dict[str, str]:
        decoded.append(raw)
        return decode_properties(raw)

    monkeypatch.setattr(sql92, "decode_properties", counting)
    result = store.get_message("orders", 0, 0, 32, compile_sql92("region = 'eu' AND n IS NULL"))
    assert result.queue_offsets == [1]
    assert len(decoded) == 2


def test_nothing_matched_moves_the_offset_on(store: MessageStore) -> None:
    put(store, {"x": "1"}, {"x": "2"})
    result = store.get_message("orders", 0, 0, 32, compile_sql92("x = 3"))
    assert result.status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert result.next_offset == 2
