"""Kafka's default partitioning, bit for bit as the Java client does it.

A keyed record goes to `toPositive(murmur2(key)) % partitions`, so the same key
lands on the same partition as from a Java producer. A record without a key goes
to the current "sticky" partition (KIP-480), which changes only when a batch for
it is sent, so null-key records fill whole batches instead of spreading thin.
"""

from __future__ import annotations

import random

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2`: a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partition_count: int) -> int:
    """`Utils.toPositive(Utils.murmur2(key)) % partitions`."""
    if partition_count <= 0:
        raise ValueError("partition_count must be positive")
    return (murmur2(key) & 0x7FFFFFFF) % partition_count


class StickyPartitioner:
    """The partition for null-key records of each topic; moves on `on_new_batch`."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._current_by_topic: dict[str, int] = {}

    def partition(self, topic: str, partition_count: int) -> int:
        current = self._current_by_topic.get(topic)
        if current is None or current >= partition_count:
            current = self._rng.randrange(partition_count)
            self._current_by_topic[topic] = current
        return current

    def on_new_batch(self, topic: str, partition_count: int, previous: int) -> None:
        """A batch for `previous` was closed: pick another partition (if there is one)."""
        if self._current_by_topic.get(topic) != previous:
            return
        if partition_count == 1:
            return
        choice = self._rng.randrange(partition_count - 1)
        self._current_by_topic[topic] = choice if choice < previous else choice + 1
