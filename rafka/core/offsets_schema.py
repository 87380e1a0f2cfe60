"""The records of `__consumer_offsets`, byte for byte as Kafka writes them, and
which partition of it holds a group.

Keys and values are Kafka's versioned schemas (big-endian; a string is an int16
length then UTF-8, -1 for null; bytes are an int32 length then the bytes):
  offset commit key v1:     version=1, group, topic, partition int32
  offset commit value v3:   version=3, offset int64, leader epoch int32,
                            metadata string, commit timestamp int64
  group metadata key v2:    version=2, group
  group metadata value v3:  version=3, protocol type, generation int32,
                            protocol (nullable), leader (nullable), current state
                            timestamp int64, then members: int32 count, each
                            member id, group instance id (nullable), client id,
                            client host, rebalance timeout int32, session timeout
                            int32, subscription bytes, assignment bytes
Group metadata values are written as v3 (Kafka's choice since 2.3: the newest
non-flexible version) and read in every version Kafka's GroupMetadataValue has:
v0 lacks the rebalance timeout (read as -1), the state timestamp (-1) and the
instance id (null); v1 adds the rebalance timeout, v2 the timestamp, v3 the
instance id; v4 is v3 in the flexible encoding (compact strings, bytes and arrays,
tagged fields, skipped). The subscription and assignment bytes are the members'
own (the consumer protocol's for "consumer" groups): the coordinator stores them
as they came and never reads the assignment.
A record with a null value is a tombstone: compaction removes its key.
Keys of versions 3-8 are the records of consumer groups of the new protocol
(KIP-848), whose schemas live in core.consumer_group_records.

Invariants: decode(encode(x)) == x for every schema; the key's version tells an
offset key (0 or 1) from a group key (2), as Kafka's GroupMetadataManager does;
an unknown version, a short buffer, trailing bytes, text that is not UTF-8 or a
missing key is CorruptCoordinatorRecord (not retriable), never a wrong value.
Pure logic, no I/O. Callers: the group coordinator (writes and replays these
records) and `rafka dump-offsets`.
"""

from __future__ import annotations

import dataclasses
import struct

from rafka.core import consumer_group_records
from rafka.core.errors import CorruptCoordinatorRecord
from rafka.core.schema_primitives import SchemaReader, bytes_field, nullable_string

OFFSET_KEY_VERSION, OFFSET_VALUE_VERSION = 1, 3
GROUP_KEY_VERSION, GROUP_VALUE_VERSION = 2, 3   # the versions written
GROUP_VALUE_VERSION_MAX = 4                      # the newest read
NO_LEADER_EPOCH = -1


def java_string_hash(text: str) -> int:
    """Java's String.hashCode(): over UTF-16 code units, in int32 arithmetic."""
    h = 0
    utf16 = text.encode("utf-16-be")
    for i in range(0, len(utf16), 2):
        h = (31 * h + ((utf16[i] << 8) | utf16[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition_for(key: str, partition_count: int) -> int:
    """Kafka's `Utils.abs(key.hashCode()) % partitions` (abs(MIN_VALUE) is 0): the
    partition of a coordinator's internal topic that holds a group id
    (`__consumer_offsets`) or a transactional id (`__transaction_state`)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partition_count


def partition_for_group(group_id: str, offsets_partition_count: int) -> int:
    return coordinator_partition_for(group_id, offsets_partition_count)


@dataclasses.dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclasses.dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


@dataclasses.dataclass(frozen=True)
class GroupKey:
    group: str


@dataclasses.dataclass(frozen=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclasses.dataclass(frozen=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberMetadata, ...] = ()


# --- encode -----------------------------------------------------------------------
# Every string is written nullable (None as -1) and read so; a group value with a
# null where Kafka's schema allows none is refused when read (_group_value).

def encode_key(key) -> bytes:
    if type(key) in consumer_group_records.KEY_VERSIONS:
        return consumer_group_records.encode_key(key)
    if isinstance(key, OffsetKey):
        return (struct.pack(">h", OFFSET_KEY_VERSION) + nullable_string(key.group) + nullable_string(key.topic)
                + struct.pack(">i", key.partition))
    return struct.pack(">h", GROUP_KEY_VERSION) + nullable_string(key.group)


def encode_value(value) -> bytes | None:
    """None (a tombstone) stays None."""
    if value is None:
        return None
    if not isinstance(value, (OffsetValue, GroupValue)):
        return consumer_group_records.encode_value(value)
    if isinstance(value, OffsetValue):
        return (struct.pack(">hqi", OFFSET_VALUE_VERSION, value.offset, value.leader_epoch)
                + nullable_string(value.metadata) + struct.pack(">q", value.commit_timestamp_ms))
    parts = [struct.pack(">h", GROUP_VALUE_VERSION), nullable_string(value.protocol_type),
             struct.pack(">i", value.generation), nullable_string(value.protocol), nullable_string(value.leader),
             struct.pack(">qi", value.current_state_timestamp_ms, len(value.members))]
    for m in value.members:
        parts += [nullable_string(m.member_id), nullable_string(m.group_instance_id), nullable_string(m.client_id),
                  nullable_string(m.client_host), struct.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms),
                  bytes_field(m.subscription), bytes_field(m.assignment)]
    return b"".join(parts)


# --- decode -----------------------------------------------------------------------

def decode_key(data: bytes | None) -> OffsetKey | GroupKey:
    if data is None:
        raise CorruptCoordinatorRecord("__consumer_offsets record has no key")
    reader = SchemaReader(data, error=CorruptCoordinatorRecord, record="__consumer_offsets record")
    version = reader.take(">h")
    if version in (0, 1):
        key = OffsetKey(reader.nullable_string(), reader.nullable_string(), reader.take(">i"))
    elif version == GROUP_KEY_VERSION:
        key = GroupKey(reader.nullable_string())
    elif version in consumer_group_records.KEY_VERSIONS.values():
        key = consumer_group_records.decode_key(version, reader)
    else:
        raise CorruptCoordinatorRecord(f"unknown __consumer_offsets key version {version}")
    reader.done()
    return key


def decode_record(key: bytes | None, value: bytes | None) -> tuple[OffsetKey | GroupKey, OffsetValue | GroupValue | None]:
    """A record of the partition as its coordinator replays it (actors.coordinator_load)."""
    decoded = decode_key(key)
    return decoded, decode_value(decoded, value)


def decode_value(key: OffsetKey | GroupKey, data: bytes | None) -> OffsetValue | GroupValue | None:
    """The value for `key`'s kind; None for a tombstone."""
    if data is None:
        return None
    reader = SchemaReader(data, error=CorruptCoordinatorRecord, record="__consumer_offsets record")
    version = reader.take(">h")
    if type(key) in consumer_group_records.KEY_VERSIONS:
        if version != consumer_group_records.VALUE_VERSION:
            raise CorruptCoordinatorRecord(f"{type(key).__name__} value version {version} is not "
                                           f"{consumer_group_records.VALUE_VERSION}")
        value = consumer_group_records.decode_value(key, reader)
    elif isinstance(key, OffsetKey):
        if version != OFFSET_VALUE_VERSION:
            raise CorruptCoordinatorRecord(f"offset commit value version {version} is not {OFFSET_VALUE_VERSION}")
        offset, leader_epoch = reader.take(">qi")
        value = OffsetValue(offset, leader_epoch, reader.nullable_string(), reader.take(">q"))
    else:
        value = _group_value(reader, version)
    reader.done()
    return value


def _group_value(reader: SchemaReader, version: int) -> GroupValue:
    if not 0 <= version <= GROUP_VALUE_VERSION_MAX:
        raise CorruptCoordinatorRecord(f"group metadata value version {version} is not one of "
                                       f"0..{GROUP_VALUE_VERSION_MAX}")
    flexible = version >= 4
    string = reader.nullable_compact_string if flexible else reader.nullable_string
    data = reader.compact_bytes if flexible else reader.bytes
    protocol_type, generation = string(), reader.take(">i")
    protocol, leader = string(), string()
    timestamp_ms = reader.take(">q") if version >= 2 else -1
    count = reader.compact_length() if flexible else reader.take(">i")
    if count < 0:
        raise CorruptCoordinatorRecord("group metadata value has a null member array")
    members = []
    for _ in range(count):
        member_id = string()
        instance_id = string() if version >= 3 else None
        client_id, client_host = string(), string()
        rebalance_timeout_ms = reader.take(">i") if version >= 1 else -1
        session_timeout_ms = reader.take(">i")
        members.append(MemberMetadata(member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                                      session_timeout_ms, data(), data()))
        if flexible:
            reader.skip_tagged_fields()
    if flexible:
        reader.skip_tagged_fields()
    if protocol_type is None or any(m.member_id is None or m.client_id is None or m.client_host is None
                                    for m in members):
        raise CorruptCoordinatorRecord("group metadata value has a null where its schema allows none")
    return GroupValue(protocol_type, generation, protocol, leader, timestamp_ms, tuple(members))
