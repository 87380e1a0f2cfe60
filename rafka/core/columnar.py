"""Record batches decoded into columns with numpy: the bulk read path (Spark, Ray Data).

`decode_columns(buf)` turns whole v2 batches (records.py) into one array per field,
with the same checks as `records.decode_batches`: CRC, framing, every record
ending where its length says, every batch ending after its last record. The only
per-record Python is the walk over the records' length prefixes (each record's
start depends on the one before); every other field is decoded for all records of
a batch at once, and keys and values are gathered into Arrow's binary layout
without a Python object per record. A batch with any record header is decoded by
`records.decode_batches` instead (headers are rare in bulk data, and their nesting
gains nothing from this).

Invariants:
  decode_columns(buf) holds the same records, in the same order, as
  records.decode_batches(buf): offset, timestamp (ms), key, value (None for
  null), headers, and the batch's timestamp type
  a buffer decode_batches rejects raises CorruptRecord here too
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from rafka.core.errors import CorruptRecord
from rafka.core.records import (
    HEADER_SIZE,
    TIMESTAMP_TYPE_LOG_APPEND,
    _decode_records,
    iter_batches,
    read_zigzag_varint,
)

_VARINT_MAX_BYTES = 10
_PAD = np.zeros(_VARINT_MAX_BYTES, dtype=np.uint8)
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@dataclasses.dataclass
class Columns:
    offsets: np.ndarray            # int64
    timestamps_ms: np.ndarray      # int64
    timestamp_types: np.ndarray    # int32, the batch's timestamp type per record
    keys: pa.Array                 # binary, null for a null key
    values: pa.Array               # binary, null for a tombstone
    headers: pa.Array              # list<struct<key string, value binary>>
    next_offset: int = -1          # after the last batch decoded (its records may end sooner, after compaction)

    def __len__(self) -> int:
        return len(self.offsets)


def _varints_at(data: np.ndarray, positions: np.ndarray, limits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints starting at `positions`, each of which must end before its
    limit: (values int64, positions after them). Byte k of every varint is read in
    one step, and the steps stop when all have ended (most fields take 1 or 2).
    `data` ends with _VARINT_MAX_BYTES zero bytes, so no read leaves it."""
    positions = np.minimum(positions, len(data) - _VARINT_MAX_BYTES)   # overruns are caught below
    raw = np.zeros(len(positions), dtype=np.uint64)
    sizes = np.zeros(len(positions), dtype=np.int64)
    active = np.ones(len(positions), dtype=bool)
    for k in range(_VARINT_MAX_BYTES):
        byte = data[positions + k]
        raw |= np.where(active, (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k), np.uint64(0))
        sizes += active
        active &= byte >= 0x80
        if not active.any():
            break
    else:
        raise CorruptRecord("varint longer than 10 bytes")
    if (positions + sizes > limits).any():
        raise CorruptRecord("varint runs past the end of the record")
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return values, positions + sizes


def _gather_binary(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """A binary array of data[start:start+length] per element; length -1 is null.
    The elements ascend and do not overlap, so one mask over the bytes they span
    (gaps False, elements True) selects them all, in order."""
    valid = lengths >= 0
    sizes = np.where(valid, lengths, 0)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError("more than 2 GiB of keys or values in one batch")
    low, high = (int(starts[0]), int(starts[-1] + sizes[-1])) if len(starts) else (0, 0)
    segments = np.empty(2 * len(starts), dtype=np.int64)     # gap before element i, then element i
    segments[0::2] = starts - np.concatenate(([low], (starts + sizes)[:-1]))
    segments[1::2] = sizes
    selected = np.repeat(np.tile(np.array([False, True]), len(starts)), segments)
    payload = data[low:high][selected]
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), len(sizes),
                                 [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(payload)],
                                 null_count=int((~valid).sum()))


def _record_starts(buf, pos: int, count: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """(start of each record's body, end of each record): the sequential walk over
    the length prefixes, kept to a few operations per record (one- and two-byte
    lengths inline)."""
    starts, lengths = [], []
    cursor = pos + HEADER_SIZE
    try:
        for _ in range(count):
            if cursor >= end:
                raise CorruptRecord(f"the batch at {pos} ends before its record count")
            first = buf[cursor]
            if first < 0x80:
                z = first
                cursor += 1
            else:
                second = buf[cursor + 1]
                if second < 0x80:
                    z = (first & 0x7F) | (second << 7)
                    cursor += 2
                else:
                    length, cursor = read_zigzag_varint(buf, cursor, end)
                    z = (length << 1) ^ (length >> 63)
            length = (z >> 1) ^ -(z & 1)
            if length < 1 or cursor + length > end:   # at once: a corrupt count must not make the walk long
                raise CorruptRecord(f"a record of the batch at {pos} has length {length}, outside its batch")
            starts.append(cursor)
            lengths.append(length)
            cursor += length
    except IndexError:
        raise CorruptRecord(f"a record of the batch at {pos} overruns the buffer") from None
    starts_array = np.array(starts, dtype=np.int64)
    ends = starts_array + np.array(lengths, dtype=np.int64)
    if cursor != end:
        raise CorruptRecord(f"the batch at {pos} has bytes after its last record")
    return starts_array, ends


def _check_lengths(lengths: np.ndarray, starts: np.ndarray, ends: np.ndarray, pos: int) -> None:
    """Before any position is moved by them (a huge length would wrap int64)."""
    if (lengths < -1).any() or (lengths > ends - starts).any():
        raise CorruptRecord(f"a field length overruns its record in the batch at {pos}")


def _decode_batch(buf, data: np.ndarray, pos: int, header) -> Columns:
    count = header.record_count
    starts, ends = _record_starts(buf, pos, count, pos + header.size_bytes)
    cursor = starts + 1                                        # record attributes: unused in v2
    timestamp_deltas, cursor = _varints_at(data, cursor, ends)
    offset_deltas, cursor = _varints_at(data, cursor, ends)
    key_lengths, cursor = _varints_at(data, cursor, ends)
    _check_lengths(key_lengths, cursor, ends, pos)
    key_starts = cursor
    cursor = cursor + np.maximum(key_lengths, 0)
    value_lengths, cursor = _varints_at(data, cursor, ends)
    _check_lengths(value_lengths, cursor, ends, pos)
    value_starts = cursor
    cursor = cursor + np.maximum(value_lengths, 0)
    header_counts, cursor = _varints_at(data, cursor, ends)
    if header_counts.any():
        return _decode_batch_with_headers(buf, pos, header)
    if (cursor != ends).any():
        raise CorruptRecord(f"a record in the batch at {pos} has trailing bytes")
    if header.timestamp_type == TIMESTAMP_TYPE_LOG_APPEND:
        timestamps = np.full(count, header.max_timestamp, dtype=np.int64)
    else:
        timestamps = header.base_timestamp + timestamp_deltas
    return Columns(header.base_offset + offset_deltas, timestamps,
                   np.full(count, header.timestamp_type, dtype=np.int32),
                   _gather_binary(data, key_starts, key_lengths), _gather_binary(data, value_starts, value_lengths),
                   _no_headers(count), header.next_offset)


def _no_headers(count: int) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.zeros(count + 1, dtype=np.int32)),
                                    pa.array([], HEADER_TYPE.value_type))


def _decode_batch_with_headers(buf, pos: int, header) -> Columns:
    records = _decode_records(buf, pos, header)
    offsets = [r.offset for r in records]
    timestamps = [r.timestamp_ms for r in records]
    keys = [r.key for r in records]
    values = [r.value for r in records]
    headers = [[{"key": k, "value": v} for k, v in r.headers] for r in records]
    return Columns(np.array(offsets, dtype=np.int64), np.array(timestamps, dtype=np.int64),
                   np.full(len(offsets), header.timestamp_type, dtype=np.int32),
                   pa.array(keys, pa.binary()), pa.array(values, pa.binary()), pa.array(headers, HEADER_TYPE),
                   header.next_offset)


def decode_columns(buf) -> Columns:
    """Every record of the whole batches in `buf`, as columns."""
    data = np.concatenate([np.frombuffer(buf, dtype=np.uint8), _PAD])
    parts = [_decode_batch(buf, data, pos, header) for pos, header in iter_batches(buf, verify_crc=True)]
    return concat_columns(parts)


def concat_columns(parts: list[Columns]) -> Columns:
    if not parts:
        return Columns(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int32),
                       pa.array([], pa.binary()), pa.array([], pa.binary()), pa.array([], HEADER_TYPE))
    if len(parts) == 1:
        return parts[0]
    return Columns(np.concatenate([p.offsets for p in parts]), np.concatenate([p.timestamps_ms for p in parts]),
                   np.concatenate([p.timestamp_types for p in parts]),
                   pa.concat_arrays([p.keys for p in parts]), pa.concat_arrays([p.values for p in parts]),
                   pa.concat_arrays([p.headers for p in parts]), parts[-1].next_offset)
