"""core/columnar.py against records.decode_batches: same records, same rejections."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.core.columnar import decode_columns
from rafka.core.errors import CorruptRecord
from rafka.core.records import (ATTR_TIMESTAMP_LOG_APPEND, HEADER_SIZE, RecordInput, decode_batches,
                                encode_batch, restamped_batch)

pytestmark = pytest.mark.core

payloads = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=120, max_size=300))
records = st.builds(RecordInput, payloads, payloads, st.integers(0, 2**41),
                    st.one_of(st.just(()), st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(
                        max_size=8))), max_size=2).map(tuple)))
batches = st.lists(st.tuples(st.lists(records, min_size=1, max_size=30), st.booleans()), min_size=1, max_size=4)


def _buffer(spec) -> bytes:
    out, base = [], 0
    for inputs, log_append in spec:
        batch = encode_batch(inputs, attributes=ATTR_TIMESTAMP_LOG_APPEND if log_append else 0)
        out.append(restamped_batch(batch, base, 0))
        base += len(inputs) + 3          # gaps between batches, as after compaction
    return b"".join(out)


def _as_rows(columns):
    return list(zip(columns.offsets.tolist(), columns.timestamps_ms.tolist(), columns.keys.to_pylist(),
                    columns.values.to_pylist(),
                    [tuple((h["key"], h["value"]) for h in hs) for hs in columns.headers.to_pylist()],
                    columns.timestamp_types.tolist()))


def _expected_rows(buf):
    return [(r.offset, r.timestamp_ms, r.key, r.value, r.headers, header.timestamp_type)
            for header, rs in decode_batches(buf) for r in rs]


@settings(max_examples=150, deadline=None)
@given(batches)
def test_decode_columns__same_records_as_decode_batches(spec):
    buf = _buffer(spec)
    columns = decode_columns(buf)
    assert _as_rows(columns) == _expected_rows(buf)
    assert columns.next_offset == list(decode_batches(buf))[-1][0].next_offset


def test_decode_columns__long_values_and_null_keys_without_headers():
    inputs = [RecordInput(b"v" * n, None if n % 2 else b"k%d" % n, 1_000 + n) for n in (0, 1, 127, 128, 20_000)]
    buf = encode_batch(inputs)
    columns = decode_columns(buf)
    assert _as_rows(columns) == _expected_rows(buf)
    assert columns.keys.null_count == 2 and columns.values.to_pylist()[1:3] == [b"v", b"v" * 127]


def test_decode_columns__empty_buffer_gives_empty_columns():
    assert len(decode_columns(b"")) == 0


def _with_crc_fixed(buf: bytearray) -> bytes:
    from crc32c import crc32c
    buf[17:21] = crc32c(bytes(buf[21:])).to_bytes(4, "big")
    return bytes(buf)


@pytest.mark.parametrize("corrupt", [
    lambda b: b[:-1] + b"\xff",                                              # CRC mismatch
    lambda b: _with_crc_fixed(bytearray(b[:HEADER_SIZE]) + bytes([0xFE]) + b[HEADER_SIZE + 1:]),  # length overruns
    lambda b: _with_crc_fixed(bytearray(b) + b"\x00"),                        # trailing bytes after last record
])
def test_decode_columns__rejects_what_decode_batches_rejects(corrupt):
    good = encode_batch([RecordInput(b"value", b"key", 5), RecordInput(b"v2", None, 6)])
    bad = corrupt(good)
    with pytest.raises(CorruptRecord):
        list(decode_batches(bad))
    with pytest.raises(CorruptRecord):
        decode_columns(bad)


def test_decode_columns__a_compacted_batch_reports_its_own_next_offset():
    batch = encode_batch([RecordInput(b"a", b"k1", 5), RecordInput(b"c", b"k3", 7)],
                         offset_deltas=[0, 2], last_offset_delta=5)
    columns = decode_columns(restamped_batch(batch, 10, 0))
    assert columns.offsets.tolist() == [10, 12] and columns.next_offset == 16


def _batch_of_raw_records(raw: bytes, record_count: int) -> bytes:
    """A batch header (valid CRC) over hand-made record bytes."""
    body = bytearray(encode_batch([RecordInput(b"v")])[:HEADER_SIZE]) + raw
    body[8:12] = (len(body) - 12).to_bytes(4, "big")
    body[57:61] = record_count.to_bytes(4, "big")
    return _with_crc_fixed(body)


def test_decode_columns__a_negative_record_length_fails_at_once_whatever_the_record_count():
    bad = _batch_of_raw_records(bytes([0x01]) + b"\x00" * 20, record_count=2**31 - 1)   # length -1
    with pytest.raises(CorruptRecord):
        list(decode_batches(bad))
    with pytest.raises(CorruptRecord):   # before the walk ran 2^31 times
        decode_columns(bad)


def test_decode_columns__a_huge_key_length_is_corrupt_not_an_index_error():
    from rafka.core.records import zigzag_varint
    fields = b"\x00" + zigzag_varint(0) + zigzag_varint(0) + zigzag_varint(2**63 - 1) + b"xy"
    bad = _batch_of_raw_records(zigzag_varint(len(fields)) + fields, record_count=1)
    with pytest.raises(CorruptRecord):
        list(decode_batches(bad))
    with pytest.raises(CorruptRecord):
        decode_columns(bad)
