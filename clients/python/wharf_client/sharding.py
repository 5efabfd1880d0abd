"""Which queue a sharding key goes to: RocketMQ's SelectMessageQueueByHash, so that a Java producer,
this client and the broker put one key on the same queue.

    queue = abs(key.hashCode()) % write queue count

``hashCode`` is Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over the key's UTF-16
code units, in 32-bit signed arithmetic that wraps on overflow. ``"hello".hashCode()`` is 99162322,
so "hello" over 4 queues goes to queue 2; ``"polygenelubricants".hashCode()`` is -2147483648
(Integer.MIN_VALUE), whose absolute value RocketMQ takes from the remainder: queue 0 of 4. The
broker picks a sharding key's queue with this function too.
"""

from __future__ import annotations


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` of ``text`` (a signed 32-bit int)."""
    value = 0
    encoded = text.encode("utf-16-be")
    for index in range(0, len(encoded), 2):
        value = (31 * value + (encoded[index] << 8 | encoded[index + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def queue_for_key(key: str, queue_count: int) -> int:
    """The queue (0..queue_count-1) of ``key``: RocketMQ computes ``hashCode % n`` (Java's remainder
    has the dividend's sign) and takes its absolute value, which equals ``abs(hashCode) % n``."""
    return abs(java_string_hash(key)) % queue_count
