import struct

import pytest

from rafka.core.errors import CorruptRecord
from rafka.core.records import (HEADER_SIZE, Record, RecordInput, decode_records, encode_batch,
                                read_header, restamped_batch, zigzag_varint, read_zigzag_varint)

pytestmark = pytest.mark.core


def test_batch__header_fields_follow_kafka_v2_layout():
    data = encode_batch([RecordInput(b"a", b"k", 1_000), RecordInput(b"bb", None, 1_007)],
                        base_offset=42, partition_leader_epoch=3, producer_id=9,
                        producer_epoch=1, base_sequence=5)
    header = read_header(data)
    assert header.size_bytes == len(data)
    assert struct.unpack_from(">q", data, 0)[0] == 42
    assert struct.unpack_from(">i", data, 8)[0] == len(data) - 12
    assert data[16] == 2  # magic
    assert (header.partition_leader_epoch, header.last_offset_delta, header.record_count) == (3, 1, 2)
    assert (header.base_timestamp, header.max_timestamp) == (1_000, 1_007)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 1, 5)


def test_batch__a_known_record_encodes_to_kafkas_bytes():
    # One record, key b"k", value b"v", no headers, timestamp delta 0, offset delta 0:
    # length 8, attrs 0, ts 0, off 0, key len 1 (zigzag 2), 'k', value len 1, 'v', 0 headers.
    data = encode_batch([RecordInput(b"v", b"k", 5)])
    assert data[HEADER_SIZE:] == bytes([16, 0, 0, 0, 2]) + b"k" + bytes([2]) + b"v" + bytes([0])


def test_batch__round_trip_with_nulls_headers_and_large_values():
    inputs = [RecordInput(None, b"tomb", 10), RecordInput(b"x" * 70_000, None, 9,
                                                          (("h1", b"v"), ("h2", None)))]
    records = decode_records(encode_batch(inputs, base_offset=100))
    assert records == [Record(100, 10, b"tomb", None), Record(101, 9, None, b"x" * 70_000,
                                                              (("h1", b"v"), ("h2", None)))]


def test_restamp__sets_base_offset_and_epoch_without_touching_records_or_crc():
    original = encode_batch([RecordInput(b"a", b"k", 1), RecordInput(b"b", b"k", 2)])
    moved = restamped_batch(original, 1_000, 7)
    assert moved[16:] == original[16:]  # records and CRC unchanged
    header = read_header(moved)
    assert (header.base_offset, header.partition_leader_epoch) == (1_000, 7)
    assert [r.offset for r in decode_records(moved)] == [1_000, 1_001]


def test_varint__zigzag_values_round_trip_at_the_edges():
    for value in (0, -1, 1, 63, -64, 64, 8191, 8192, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)):
        encoded = zigzag_varint(value)
        assert read_zigzag_varint(encoded, 0, len(encoded)) == (value, len(encoded))


def test_flipped_byte__every_checked_byte__corrupt_record_never_data():
    data = encode_batch([RecordInput(b"value-%d" % i, b"key", 1_000 + i) for i in range(5)])
    # bytes 0-7 (base offset) and 12-15 (leader epoch) are outside the CRC by design
    checked = [i for i in range(8, len(data)) if not 12 <= i < 16]
    for position in checked:
        damaged = bytearray(data)
        damaged[position] ^= 0x01
        with pytest.raises(CorruptRecord):
            decode_records(bytes(damaged))


@pytest.mark.parametrize("value_bytes", [0, 63, 64, 8_191, 8_192, 70_000])
def test_batch__every_varint_width_the_decoder_reads_inline_or_not__round_trip(value_bytes):
    """Deltas of one and two bytes (a batch past 64 records and 64 ms), keys and
    values whose lengths take one, two and three bytes, null keys and values."""
    inputs = [RecordInput(None if i % 97 == 5 else bytes([i % 251]) * value_bytes,
                          None if i % 3 else b"k" * (i % 200), 1_000_000 + 7 * i, (("h", b"v"),) if i % 50 == 1 else ())
              for i in range(300)]
    records = decode_records(encode_batch(inputs, base_offset=40))
    assert [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in records] == [
        (40 + i, r.timestamp_ms, r.key, r.value, r.headers) for i, r in enumerate(inputs)]
