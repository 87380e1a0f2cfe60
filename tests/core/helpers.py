"""Builders shared by the core tests."""

from __future__ import annotations

from rafka.core.records import RecordInput, encode_batch


def batch(*values: bytes, key: bytes | None = b"k", timestamp_ms: int = 1_000) -> bytes:
    return encode_batch([RecordInput(v, key, timestamp_ms) for v in values])


def keyed_batch(pairs, timestamp_ms: int = 1_000) -> bytes:
    return encode_batch([RecordInput(v, k, timestamp_ms) for k, v in pairs])
