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

from rafka.core.errors import CorruptCoordinatorRecord

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

def _string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode("utf-8")
    if len(data) > 32_767:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    return struct.pack(">h", len(data)) + data


def _bytes(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def encode_key(key: OffsetKey | GroupKey) -> bytes:
    if isinstance(key, OffsetKey):
        return (struct.pack(">h", OFFSET_KEY_VERSION) + _string(key.group) + _string(key.topic)
                + struct.pack(">i", key.partition))
    return struct.pack(">h", GROUP_KEY_VERSION) + _string(key.group)


def encode_value(value: OffsetValue | GroupValue | None) -> bytes | None:
    """None (a tombstone) stays None."""
    if value is None:
        return None
    if isinstance(value, OffsetValue):
        return (struct.pack(">hqi", OFFSET_VALUE_VERSION, value.offset, value.leader_epoch)
                + _string(value.metadata) + struct.pack(">q", value.commit_timestamp_ms))
    parts = [struct.pack(">h", GROUP_VALUE_VERSION), _string(value.protocol_type),
             struct.pack(">i", value.generation), _string(value.protocol), _string(value.leader),
             struct.pack(">qi", value.current_state_timestamp_ms, len(value.members))]
    for m in value.members:
        parts += [_string(m.member_id), _string(m.group_instance_id), _string(m.client_id),
                  _string(m.client_host), struct.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms),
                  _bytes(m.subscription), _bytes(m.assignment)]
    return b"".join(parts)


# --- decode -----------------------------------------------------------------------

class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise CorruptCoordinatorRecord("__consumer_offsets record is shorter than its schema")
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values if len(values) > 1 else values[0]

    def string(self) -> str | None:
        length = self.take(">h")
        if length < 0:
            return None
        if self.pos + length > len(self.data):
            raise CorruptCoordinatorRecord("__consumer_offsets string runs past the record")
        try:
            text = self.data[self.pos:self.pos + length].decode("utf-8")
        except UnicodeDecodeError as error:
            raise CorruptCoordinatorRecord(f"__consumer_offsets string is not UTF-8: {error}") from None
        self.pos += length
        return text

    def bytes(self) -> bytes:
        length = self.take(">i")
        if length < 0 or self.pos + length > len(self.data):
            raise CorruptCoordinatorRecord("__consumer_offsets bytes run past the record")
        data = self.data[self.pos:self.pos + length]
        self.pos += length
        return data

    def varint(self) -> int:
        """Unsigned varint (the flexible versions' lengths and counts)."""
        value = shift = 0
        while True:
            byte = self.take(">B")
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise CorruptCoordinatorRecord("__consumer_offsets varint is longer than 5 bytes")

    def _compact(self) -> bytes | None:
        length = self.varint() - 1
        if length < 0:
            return None
        if self.pos + length > len(self.data):
            raise CorruptCoordinatorRecord("__consumer_offsets bytes run past the record")
        data = self.data[self.pos:self.pos + length]
        self.pos += length
        return data

    def compact_string(self) -> str | None:
        data = self._compact()
        try:
            return None if data is None else data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise CorruptCoordinatorRecord(f"__consumer_offsets string is not UTF-8: {error}") from None

    def compact_bytes(self) -> bytes:
        data = self._compact()
        if data is None:
            raise CorruptCoordinatorRecord("__consumer_offsets bytes are null where the schema allows none")
        return data

    def skip_tagged_fields(self) -> None:
        for _ in range(self.varint()):
            self.varint()                     # tag
            size = self.varint()
            if self.pos + size > len(self.data):
                raise CorruptCoordinatorRecord("__consumer_offsets tagged field runs past the record")
            self.pos += size

    def done(self):
        if self.pos != len(self.data):
            raise CorruptCoordinatorRecord("__consumer_offsets record has trailing bytes")


def decode_key(data: bytes | None) -> OffsetKey | GroupKey:
    if data is None:
        raise CorruptCoordinatorRecord("__consumer_offsets record has no key")
    reader = _Reader(data)
    version = reader.take(">h")
    if version in (0, 1):
        key = OffsetKey(reader.string(), reader.string(), reader.take(">i"))
    elif version == GROUP_KEY_VERSION:
        key = GroupKey(reader.string())
    else:
        raise CorruptCoordinatorRecord(f"unknown __consumer_offsets key version {version}")
    reader.done()
    return key


def decode_value(key: OffsetKey | GroupKey, data: bytes | None) -> OffsetValue | GroupValue | None:
    """The value for `key`'s kind; None for a tombstone."""
    if data is None:
        return None
    reader = _Reader(data)
    version = reader.take(">h")
    if isinstance(key, OffsetKey):
        if version != OFFSET_VALUE_VERSION:
            raise CorruptCoordinatorRecord(f"offset commit value version {version} is not {OFFSET_VALUE_VERSION}")
        offset, leader_epoch = reader.take(">qi")
        value = OffsetValue(offset, leader_epoch, reader.string(), reader.take(">q"))
    else:
        value = _group_value(reader, version)
    reader.done()
    return value


def _group_value(reader: _Reader, version: int) -> GroupValue:
    if not 0 <= version <= GROUP_VALUE_VERSION_MAX:
        raise CorruptCoordinatorRecord(f"group metadata value version {version} is not one of "
                                       f"0..{GROUP_VALUE_VERSION_MAX}")
    flexible = version >= 4
    string = reader.compact_string if flexible else reader.string
    data = reader.compact_bytes if flexible else reader.bytes
    protocol_type, generation = string(), reader.take(">i")
    protocol, leader = string(), string()
    timestamp_ms = reader.take(">q") if version >= 2 else -1
    count = reader.varint() - 1 if flexible else reader.take(">i")
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
