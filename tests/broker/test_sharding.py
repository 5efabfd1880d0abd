"""The sharding key's queue is RocketMQ's SelectMessageQueueByHash: Java clients must agree with it.
The expected values were printed by OpenJDK 17 (``s.hashCode()``, and ``h % 8`` made positive
with ``Math.abs`` as SelectMessageQueueByHash does)."""

from __future__ import annotations

import pytest
from wharf_client.sharding import java_string_hash, queue_for_key

JAVA = [
    ("hello", 99162322, 2),
    ("polygenelubricants", -2147483648, 0),  # Integer.MIN_VALUE: Math.abs of it stays negative
    ("", 0, 0),
    ("Aa", 2112, 0),
    ("BB", 2112, 0),
    ("order-1", -1207111310, 6),
    ("😀", 1772899, 3),  # outside the BMP: two UTF-16 code units
    ("Zürich-42", -1458734355, 3),
    ("customer:9f3c2a", 1382693096, 0),
    ("a fairly long sharding key that overflows many times", 740968932, 4),
]


@pytest.mark.parametrize(("key", "hash_code", "queue_of_8"), JAVA)
def test_java_string_hash_code_and_queue(key: str, hash_code: int, queue_of_8: int) -> None:
    assert java_string_hash(key) == hash_code
    assert queue_for_key(key, 8) == queue_of_8


def test_the_readme_example() -> None:
    assert queue_for_key("hello", 4) == 2
    assert all(0 <= queue_for_key(key, 3) < 3 for key, _, _ in JAVA)
