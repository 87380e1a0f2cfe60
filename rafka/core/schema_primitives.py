"""Kafka's schema primitives, the one codec for every hand-written encoder and
decoder of them (Kafka's org.apache.kafka.common.protocol.types, big-endian):
  string               int16 length, then UTF-8; nullable: -1 for null
  bytes                int32 length, then the bytes
  unsigned varint      7 bits a byte, low group first, high bit = more follows;
                       Kafka's are 32-bit, so at most 5 bytes
  compact string,      unsigned varint length + 1 (0 for null), then the
  bytes and array      UTF-8, the bytes or the elements
  tagged fields        unsigned varint count, then each: varint tag, varint
                       size, that many bytes (flexible versions, after every struct)
Fixed-width fields are `struct` formats: the writers pack them with their own
precomputed Structs, the reader takes them with `SchemaReader.take(fmt)`.

Invariants: a string is at most 32 767 bytes of UTF-8, as Kafka's generated
writers and readers require, in both the int16 and the compact form: a longer
one is ValueError when written and corrupt when read. The reader never reads
past its buffer and never returns a wrong value: a short buffer, a length that
runs past it, a varint longer than 5 bytes, a null where the schema allows none,
text that is not UTF-8 or trailing bytes raise the error type its caller chose,
with a message naming the caller's record and why, so each record kind keeps its
own typed error; `count` checks a declared element count against the bytes left,
so a corrupt count allocates nothing.
Why here: these lines were written three times (the two coordinator topics'
records, the data path's writers); `core` may not import `protocol`, and the
protocol may import `core`.
Pure logic, no I/O. Callers: core.offsets_schema (`__consumer_offsets`),
core.transaction_log (`__transaction_state`), protocol.hot_writers (Produce,
Fetch and OffsetCommit bodies, per request: `uvarint` keeps a table of the small
values every length and count takes).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

STRING_MAX_BYTES = 32_767
NULL_COMPACT = b"\x00"          # a null compact string, bytes or array
NO_TAGGED_FIELDS = b"\x00"      # an empty tagged-field section
_VARINT_BYTES_MAX = 5
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_NULL_STRING = _INT16.pack(-1)


# --- write ------------------------------------------------------------------------

def _uvarint_uncached(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)   # a negative value fails here: ValueError
    return bytes(out)


class VarintTable(dict):
    """value -> its encoding, for values in [low, high): each written once, at its
    first use, then looked up (a dict subscript: faster than the range check and
    index of a prebuilt table, 42 vs 48 ns). Built eagerly, the two tables
    (this module's and core.records') held 1.4 MB in every process that imports
    them, each replica's included (issue 27), where a process uses a few
    hundred values. Bounded: at most high - low entries."""

    __slots__ = ("_encode", "_low", "_high")

    def __init__(self, encode: Callable[[int], bytes], *, low: int, high: int) -> None:
        super().__init__()
        self._encode, self._low, self._high = encode, low, high

    def __missing__(self, value: int) -> bytes:
        data = self._encode(value)
        if self._low <= value < self._high:
            self[value] = data
        return data


_UVARINT_CACHE = VarintTable(_uvarint_uncached, low=0, high=1 << 14)   # every value of one or two bytes


def uvarint(value: int) -> bytes:
    return _UVARINT_CACHE[value]


def _utf8(text: str) -> bytes:
    data = text.encode("utf-8")
    if len(data) > STRING_MAX_BYTES:
        raise ValueError(f"string of {len(data)} bytes is longer than Kafka's {STRING_MAX_BYTES}")
    return data


def string(text: str) -> bytes:
    data = _utf8(text)
    return _INT16.pack(len(data)) + data


def nullable_string(text: str | None) -> bytes:
    return _NULL_STRING if text is None else string(text)


def bytes_field(data: bytes) -> bytes:
    return _INT32.pack(len(data)) + data


def compact_string(text: str) -> bytes:
    data = _utf8(text)
    return uvarint(len(data) + 1) + data


def nullable_compact_string(text: str | None) -> bytes:
    return NULL_COMPACT if text is None else compact_string(text)


def compact_length(count: int) -> bytes:
    """The prefix of a compact array of `count` elements or compact bytes of
    `count` bytes (the elements or bytes follow it; NULL_COMPACT for null)."""
    return uvarint(count + 1)


def tagged_fields(fields: Iterable[tuple[int, bytes]]) -> bytes:
    """A tagged-field section of (tag, the field's bytes), in ascending tag order."""
    fields = list(fields)
    parts = [uvarint(len(fields))]
    for tag, data in fields:
        parts += [uvarint(tag), uvarint(len(data)), data]
    return b"".join(parts)


# --- read -------------------------------------------------------------------------

class SchemaReader:
    """Reads one record's fields in order. Bytes that break the schema raise
    `error(f"{record} {why}")`: the caller's type, naming its record ("__transaction_state
    record" + " has trailing bytes")."""

    def __init__(self, data: bytes, *, error: Callable[[str], Exception], record: str) -> None:
        self.data, self.pos, self._error, self._record = data, 0, error, record

    def _corrupt(self, why: str) -> Exception:
        return self._error(f"{self._record} {why}")

    def take(self, fmt: str):
        """The fixed-width field(s) of the struct format: one value, or a tuple of several."""
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise self._corrupt("is shorter than its schema")
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values if len(values) > 1 else values[0]

    def uvarint(self) -> int:
        value = shift = 0
        for _ in range(_VARINT_BYTES_MAX):
            if self.pos >= len(self.data):
                raise self._corrupt("ends inside a varint")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise self._corrupt(f"has a varint longer than {_VARINT_BYTES_MAX} bytes")

    def compact_length(self) -> int:
        """A compact string's, bytes' or array's length: -1 for null."""
        return self.uvarint() - 1

    def _text(self, length: int) -> str | None:
        if length < 0:
            return None
        if length > STRING_MAX_BYTES:
            raise self._corrupt(f"has a string of {length} bytes, longer than Kafka's {STRING_MAX_BYTES}")
        if self.pos + length > len(self.data):
            raise self._corrupt("has a string that runs past the record")
        try:
            text = self.data[self.pos:self.pos + length].decode("utf-8")
        except UnicodeDecodeError as error:
            raise self._corrupt(f"has a string that is not UTF-8: {error}") from None
        self.pos += length
        return text

    def _not_null(self, text: str | None) -> str:
        if text is None:
            raise self._corrupt("has a null where a string must be")
        return text

    def _data(self, length: int) -> bytes:
        if length < 0:
            raise self._corrupt("has null bytes where bytes must be")
        if self.pos + length > len(self.data):
            raise self._corrupt("has bytes that run past the record")
        data = self.data[self.pos:self.pos + length]
        self.pos += length
        return data

    def nullable_string(self) -> str | None:
        return self._text(self.take(">h"))

    def string(self) -> str:
        return self._not_null(self.nullable_string())

    def nullable_compact_string(self) -> str | None:
        return self._text(self.compact_length())

    def compact_string(self) -> str:
        return self._not_null(self.nullable_compact_string())

    def bytes(self) -> bytes:
        return self._data(self.take(">i"))

    def compact_bytes(self) -> bytes:
        return self._data(self.compact_length())

    def count(self, n: int, item_size_min: int) -> int:
        """A declared element count, checked against the bytes left (so a corrupt
        count allocates nothing): each element takes `item_size_min` bytes at least."""
        if n * item_size_min > len(self.data) - self.pos:
            raise self._corrupt(f"declares {n} elements, more than its bytes hold")
        return n

    def skip(self, size: int) -> None:
        """Past a tagged field of `size` bytes (one this reader's caller does not know)."""
        if self.pos + size > len(self.data):
            raise self._corrupt("has a tagged field that runs past the record")
        self.pos += size

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()   # the tag
            self.skip(self.uvarint())

    def done(self) -> None:
        if self.pos != len(self.data):
            raise self._corrupt("has trailing bytes")
