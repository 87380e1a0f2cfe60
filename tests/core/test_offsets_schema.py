"""__consumer_offsets records and the group -> partition mapping, as Kafka's."""

import struct

import pytest
from hypothesis import given, strategies as st

from rafka.core.errors import CorruptCoordinatorRecord, CorruptRecord
from rafka.core.offsets_schema import (GroupKey, GroupValue, MemberMetadata, OffsetKey, OffsetValue,
                                       decode_key, decode_value, encode_key, encode_value,
                                       java_string_hash, partition_for_group)

pytestmark = pytest.mark.core

# (group id, Java's "group".hashCode(), partition of 50, partition of 3): computed with Java 17.
JAVA_VECTORS = [
    ("billing", -109829509, 9, 1),
    ("", 0, 0, 0),
    ("g", 103, 3, 1),
    ("my-group", -1906497762, 12, 0),
    ("consumer-group-42", 277006467, 17, 0),
    ("Aa", 2112, 12, 0),
    ("BB", 2112, 12, 0),
    ("polygenelubricants", -2147483648, 0, 0),   # hashCode is Integer.MIN_VALUE: Utils.abs gives 0
    ("\u00e9t\u00e9", 227742, 42, 0),
    ("\U0001F600emoji", -1233692477, 27, 2),     # a surrogate pair: two UTF-16 units
]


@pytest.mark.parametrize("group, java_hash, of_50, of_3", JAVA_VECTORS)
def test_group_to_partition__equals_kafkas_for_fixed_group_ids(group, java_hash, of_50, of_3):
    assert java_string_hash(group) == java_hash
    assert partition_for_group(group, 50) == of_50 and partition_for_group(group, 3) == of_3


def test_offset_commit_key_v1_and_value_v3__kafkas_bytes():
    key = OffsetKey("billing", "orders", 2)
    assert encode_key(key) == (struct.pack(">h", 1) + b"\x00\x07billing" + b"\x00\x06orders"
                               + struct.pack(">i", 2))
    value = OffsetValue(offset=42, leader_epoch=3, metadata="m", commit_timestamp_ms=1_700_000_000_000)
    assert encode_value(value) == struct.pack(">hqi", 3, 42, 3) + b"\x00\x01m" + struct.pack(">q", 1_700_000_000_000)
    assert decode_key(encode_key(key)) == key
    assert decode_value(key, encode_value(value)) == value
    assert decode_value(key, None) is None and encode_value(None) is None  # tombstones


def test_group_metadata_key_v2_and_value_v3__round_trip_with_nulls():
    key = GroupKey("billing")
    assert encode_key(key) == struct.pack(">h", 2) + b"\x00\x07billing"
    member = MemberMetadata("m-1", None, "client", "/10.0.0.1", 300_000, 45_000, b"sub", b"")
    value = GroupValue("consumer", 7, "range", "m-1", 1_700_000_000_000, (member,))
    assert decode_key(encode_key(key)) == key
    assert decode_value(key, encode_value(value)) == value
    empty = GroupValue("consumer", 8, None, None, 1_700_000_000_001)
    assert decode_value(key, encode_value(empty)) == empty


def test_decode__unknown_version_or_truncated__corrupt_record():
    key = OffsetKey("g", "t", 0)
    with pytest.raises(CorruptRecord, match="unknown __consumer_offsets key version 9"):
        decode_key(struct.pack(">h", 9) + b"\x00\x01g")
    data = encode_value(OffsetValue(1, -1, "", 0))
    for cut in range(len(data)):
        with pytest.raises(CorruptRecord):
            decode_value(key, data[:cut])
    with pytest.raises(CorruptRecord, match="trailing"):
        decode_value(key, data + b"\x00")


def test_decode__a_key_or_value_that_breaks_its_schema__corrupt_message_not_retriable():
    """Every way a record of `__consumer_offsets` fails to decode is one typed error:
    CORRUPT_MESSAGE, which no retry clears (the bytes are what the log holds)."""
    offset_key, group_key = OffsetKey("g", "t", 0), GroupKey("g")
    group_value = encode_value(GroupValue("consumer", 1, "range", None, 0, ()))
    broken = [lambda: decode_key(None),                                            # no key
              lambda: decode_key(b"\x00"),                                          # short version
              lambda: decode_key(struct.pack(">h", 2) + b"\x00\x02\xff\xfe"),      # group id not UTF-8
              lambda: decode_key(struct.pack(">h", 2) + b"\x00\x05g"),              # string past the end
              lambda: decode_value(offset_key, struct.pack(">h", 4) + bytes(20)),   # value version
              lambda: decode_value(group_key, group_value[:-1]),                    # cut short
              lambda: decode_value(group_key, group_value + b"\x00")]               # trailing bytes
    for decode in broken:
        with pytest.raises(CorruptCoordinatorRecord) as raised:
            decode()
        assert raised.value.kafka_name == "CORRUPT_MESSAGE" and raised.value.code == 2
        assert raised.value.retriable is False and isinstance(raised.value, CorruptRecord)


@given(st.text(max_size=40), st.text(max_size=40), st.integers(0, 2**31 - 1),
       st.integers(-1, 2**63 - 1), st.integers(-1, 2**31 - 1), st.text(max_size=100), st.integers(0, 2**62))
def test_offset_records__round_trip_every_field(group, topic, partition, offset, epoch, metadata, ts):
    key = OffsetKey(group, topic, partition)
    value = OffsetValue(offset, epoch, metadata, ts)
    assert decode_key(encode_key(key)) == key
    assert decode_value(key, encode_value(value)) == value


def _string(text, *, compact=False):
    data = text.encode()
    return bytes([len(data) + 1]) + data if compact else struct.pack(">h", len(data)) + data


def _bytes(data, *, compact=False):
    return bytes([len(data) + 1]) + data if compact else struct.pack(">i", len(data)) + data


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_value__every_version_kafka_has_written__read_with_its_defaults(version):
    """Kafka's GroupMetadataValue v0-v4 (v1 adds the rebalance timeout, v2 the state
    timestamp, v3 the instance id, v4 is flexible: compact fields, tagged fields):
    a log written by any Kafka is read; fields a version lacks take Kafka's defaults."""
    flexible = version >= 4
    s = lambda text: _string(text, compact=flexible)   # noqa: E731
    member = s("m-1") + (s("host-1") if version >= 3 else b"") + s("client") + s("/10.0.0.1")
    member += (struct.pack(">i", 300_000) if version >= 1 else b"") + struct.pack(">i", 45_000)
    member += _bytes(b"sub", compact=flexible) + _bytes(b"asg", compact=flexible)
    member += b"\x00" if flexible else b""                                # no tagged fields
    data = struct.pack(">h", version) + s("consumer") + struct.pack(">i", 7) + s("range") + s("m-1")
    data += struct.pack(">q", 1_700_000_000_000) if version >= 2 else b""
    data += bytes([2]) if flexible else struct.pack(">i", 1)
    data += member
    data += b"\x01\x05\x02ab" if flexible else b""                       # one unknown tagged field, skipped
    value = decode_value(GroupKey("billing"), data)
    assert value == GroupValue("consumer", 7, "range", "m-1", 1_700_000_000_000 if version >= 2 else -1, (
        MemberMetadata("m-1", "host-1" if version >= 3 else None, "client", "/10.0.0.1",
                       300_000 if version >= 1 else -1, 45_000, b"sub", b"asg"),))
    with pytest.raises(CorruptRecord, match="group metadata value version 5"):
        decode_value(GroupKey("billing"), struct.pack(">h", 5) + data[2:])
