"""Kafka's schema primitives (core.schema_primitives): the writers give Kafka's
bytes (checked against kio's generic writers, the data path's reference), every
writer round trips through the one reader, and the reader raises its caller's
error, naming why, for bytes that break the schema."""

import io
import struct

import pytest
from hypothesis import given, strategies as st
from kio.serial import writers as kio_writers

from rafka.core.schema_primitives import (NO_TAGGED_FIELDS, NULL_COMPACT, STRING_MAX_BYTES, SchemaReader,
                                          bytes_field, compact_length, compact_string, nullable_compact_string,
                                          nullable_string, string, tagged_fields, uvarint)

pytestmark = pytest.mark.core
uint32s = st.integers(0, 2**32 - 1)
texts = st.text(max_size=40)


class Broken(Exception):
    pass


def _reader(data: bytes) -> SchemaReader:
    return SchemaReader(data, error=Broken, record="test record")


def _kio(write, value) -> bytes:
    buffer = io.BytesIO()
    write(buffer, value)
    return buffer.getvalue()


def test_uvarint__kafkas_bytes():
    assert [uvarint(n) for n in (0, 1, 127, 128, 300, 16_383, 16_384)] == [
        b"\x00", b"\x01", b"\x7f", b"\x80\x01", b"\xac\x02", b"\xff\x7f", b"\x80\x80\x01"]
    assert uvarint(2**32 - 1) == b"\xff\xff\xff\xff\x0f"
    with pytest.raises(ValueError):
        uvarint(-1)


@given(uint32s)
def test_uvarint__as_kio_writes_it__and_reads_back(n):
    data = uvarint(n)
    assert data == _kio(kio_writers.write_unsigned_varint, n)
    reader = _reader(data)
    assert reader.uvarint() == n
    reader.done()


@given(texts, st.none() | texts, st.binary(max_size=40))
def test_strings_and_bytes__round_trip(text, maybe_text, data):
    assert compact_string(text) == _kio(kio_writers.write_compact_string, text)
    assert nullable_compact_string(maybe_text) == _kio(kio_writers.write_nullable_compact_string, maybe_text)
    assert string(text) == _kio(kio_writers.write_legacy_string, text)
    assert nullable_string(maybe_text) == _kio(kio_writers.write_nullable_legacy_string, maybe_text)
    assert bytes_field(data) == _kio(kio_writers.write_legacy_bytes, data)
    assert compact_length(len(data)) == _kio(kio_writers.write_compact_array_length, len(data))
    written = (string(text) + nullable_string(maybe_text) + bytes_field(data) + compact_string(text)
               + nullable_compact_string(maybe_text) + compact_length(len(data)) + data)
    reader = _reader(written)
    assert reader.string() == text and reader.nullable_string() == maybe_text and reader.bytes() == data
    assert reader.compact_string() == text and reader.nullable_compact_string() == maybe_text
    assert reader.compact_bytes() == data
    reader.done()


def test_nulls__kafkas_bytes():
    assert nullable_string(None) == b"\xff\xff" and nullable_compact_string(None) == NULL_COMPACT == b"\x00"
    assert compact_length(0) == b"\x01" and compact_length(2) == b"\x03"   # an empty array is not null


def test_tagged_fields__written__skipped_and_read():
    assert tagged_fields([]) == NO_TAGGED_FIELDS == b"\x00"
    section = tagged_fields([(0, b"\x00\x07"), (300, b"abc")])
    assert section == b"\x02" + b"\x00\x02\x00\x07" + b"\xac\x02\x03abc"
    reader = _reader(section + b"\x00\x2a")
    reader.skip_tagged_fields()
    assert reader.take(">h") == 42
    reader.done()


def test_take__one_value_or_a_tuple():
    reader = _reader(struct.pack(">hqi", 3, -1, 7))
    assert reader.take(">h") == 3 and reader.take(">qi") == (-1, 7)
    reader.done()


def test_string_longer_than_kafkas_limit__refused_when_written_and_when_read():
    longest = "x" * STRING_MAX_BYTES
    assert _reader(compact_string(longest)).compact_string() == longest
    for write in (string, nullable_string, compact_string, nullable_compact_string):
        with pytest.raises(ValueError, match="string of 32768 bytes is longer than Kafka's 32767"):
            write(longest + "x")
    too_long = uvarint(STRING_MAX_BYTES + 2) + b"x" * (STRING_MAX_BYTES + 1)
    with pytest.raises(Broken, match="^test record has a string of 32768 bytes, longer than Kafka's 32767$"):
        _reader(too_long).compact_string()


@pytest.mark.parametrize("data, read, why", [
    (b"\x00", lambda r: r.take(">h"), "is shorter than its schema"),
    (b"\x80\x80", lambda r: r.uvarint(), "ends inside a varint"),
    (b"\x80\x80\x80\x80\x80\x01", lambda r: r.uvarint(), "has a varint longer than 5 bytes"),
    (b"\x00\x05abc", lambda r: r.string(), "has a string that runs past the record"),
    (b"\x05abc", lambda r: r.compact_string(), "has a string that runs past the record"),
    (b"\xff\xff", lambda r: r.string(), "has a null where a string must be"),
    (b"\x00", lambda r: r.compact_string(), "has a null where a string must be"),
    (b"\x00\x00\x00\x09abc", lambda r: r.bytes(), "has bytes that run past the record"),
    (b"\xff\xff\xff\xff", lambda r: r.bytes(), "has null bytes where bytes must be"),
    (b"\x00", lambda r: r.compact_bytes(), "has null bytes where bytes must be"),
    (b"\x01\x00\x09ab", lambda r: r.skip_tagged_fields(), "has a tagged field that runs past the record"),
    (b"\x00\x00", lambda r: r.count(3, 1), "declares 3 elements, more than its bytes hold"),
    (b"\x00\x01xy", lambda r: (r.string(), r.done()), "has trailing bytes"),
])
def test_bytes_that_break_the_schema__the_callers_error_naming_why(data, read, why):
    with pytest.raises(Broken) as raised:
        read(_reader(data))
    assert str(raised.value) == f"test record {why}"


def test_text_not_utf8__the_callers_error():
    with pytest.raises(Broken, match="^test record has a string that is not UTF-8: "):
        _reader(b"\x00\x02\xff\xfe").string()


@given(st.binary(max_size=30))
def test_any_bytes__a_value_or_the_callers_error(data):
    # Never an IndexError or struct.error, whatever the bytes.
    for read in (SchemaReader.nullable_string, SchemaReader.compact_string, SchemaReader.bytes,
                 SchemaReader.compact_bytes, SchemaReader.skip_tagged_fields, SchemaReader.uvarint):
        try:
            read(_reader(data))
        except Broken:
            pass


def test_varint_tables__same_bytes_as_computed__filled_only_in_range():
    from rafka.core import records, schema_primitives
    for n in (-1, 0, 1, 63, 64, 127, 128, 8191, 8192, 16383, 16384, 1 << 31, -(1 << 31)):
        assert records.zigzag_varint(n) == records._zigzag_varint_uncached(n)
        if n >= 0:
            assert schema_primitives.uvarint(n) == schema_primitives._uvarint_uncached(n)
    assert 16384 not in schema_primitives._UVARINT_CACHE and 1 << 31 not in records._VARINT_CACHE
    assert 16383 in schema_primitives._UVARINT_CACHE and -1 in records._VARINT_CACHE
    with pytest.raises(ValueError):
        schema_primitives.uvarint(-1)
