"""The records of a consumer group of the new protocol (KIP-848) in
`__consumer_offsets`, byte for byte as Kafka's group coordinator writes them.

Keys are Kafka's non-flexible schemas (an int16 version, then int16-length
strings); the key's version says which record it is:
  3  group metadata            (group)            value: group epoch int32
  4  partition metadata        (group)            value: per subscribed topic its
                                                  id (uuid), name, partition count,
                                                  and a rack list rafka leaves empty
  5  member metadata           (group, member)    value: instance id, rack id, client
                                                  id, client host, subscribed topic
                                                  names, regex, rebalance timeout,
                                                  server assignor
  6  target assignment epoch   (group)            value: assignment epoch int32
  7  target assignment member  (group, member)    value: per topic id its partitions
  8  current member assignment (group, member)    value: member epoch, previous member
                                                  epoch, member state int8, assigned
                                                  partitions, partitions pending
                                                  revocation
Values are version 0 of Kafka's flexible schemas (an int16 version, then compact
strings and arrays, a uuid as 16 bytes, an empty tagged-field section after every
struct); tagged fields read are skipped (ClassicMemberMetadata, tag 0 of the member
value, is for classic members of a consumer group, which rafka does not have).
A null value is a tombstone.

Invariants: decode(encode(x)) == x for every record; partitions are written sorted,
topics sorted by id, so one state always gives the same bytes; a short buffer, an
unknown version, trailing bytes are CorruptCoordinatorRecord, never a wrong value.
Pure logic, no I/O. Caller: core.offsets_schema, which dispatches on the key's
version (0-2 are the offset and classic group records).
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Iterable, Mapping

from rafka.core.errors import CorruptCoordinatorRecord
from rafka.core.schema_primitives import (NO_TAGGED_FIELDS, SchemaReader, compact_length, compact_string,
                                          nullable_compact_string, string)

VALUE_VERSION = 0
# A member's assignment: {topic id: partitions}. In records, sorted tuples.
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


def sorted_partitions(assignment: Mapping[uuid.UUID, Iterable[int]]) -> TopicPartitions:
    """The record form of an assignment: topics by id, partitions ascending, empty topics left out."""
    return tuple((topic_id, tuple(sorted(parts))) for topic_id, parts in sorted(assignment.items()) if parts)


@dataclasses.dataclass(frozen=True)
class ConsumerGroupMetadataKey:
    group: str


@dataclasses.dataclass(frozen=True)
class ConsumerGroupMetadataValue:
    epoch: int


@dataclasses.dataclass(frozen=True)
class PartitionMetadataKey:
    group: str


@dataclasses.dataclass(frozen=True)
class SubscribedTopic:
    topic_id: uuid.UUID
    name: str
    partitions: int


@dataclasses.dataclass(frozen=True)
class PartitionMetadataValue:
    topics: tuple[SubscribedTopic, ...]


@dataclasses.dataclass(frozen=True)
class MemberMetadataKey:
    group: str
    member_id: str


@dataclasses.dataclass(frozen=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclasses.dataclass(frozen=True)
class TargetAssignmentMetadataKey:
    group: str


@dataclasses.dataclass(frozen=True)
class TargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclasses.dataclass(frozen=True)
class TargetAssignmentMemberKey:
    group: str
    member_id: str


@dataclasses.dataclass(frozen=True)
class TargetAssignmentMemberValue:
    partitions: TopicPartitions


@dataclasses.dataclass(frozen=True)
class CurrentAssignmentKey:
    group: str
    member_id: str


@dataclasses.dataclass(frozen=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: TopicPartitions
    pending_revocation: TopicPartitions


KEY_VERSIONS = {ConsumerGroupMetadataKey: 3, PartitionMetadataKey: 4, MemberMetadataKey: 5,
                TargetAssignmentMetadataKey: 6, TargetAssignmentMemberKey: 7, CurrentAssignmentKey: 8}
_KEY_BY_VERSION = {version: cls for cls, version in KEY_VERSIONS.items()}
_INT32 = struct.Struct(">i")


# --- keys -----------------------------------------------------------------------------

def encode_key(key) -> bytes:
    parts = [struct.pack(">h", KEY_VERSIONS[type(key)]), string(key.group)]
    if hasattr(key, "member_id"):
        parts.append(string(key.member_id))
    return b"".join(parts)


def decode_key(version: int, reader: SchemaReader):
    """The key after its version (which the caller read and found in KEY_VERSIONS)."""
    cls = _KEY_BY_VERSION[version]
    group = reader.string()
    return cls(group, reader.string()) if "member_id" in cls.__dataclass_fields__ else cls(group)


# --- values ---------------------------------------------------------------------------

def _compact_array(items: list[bytes]) -> bytes:
    return compact_length(len(items)) + b"".join(items)


def _topic_partitions(partitions: TopicPartitions) -> bytes:
    return _compact_array([topic_id.bytes + _compact_array([_INT32.pack(p) for p in parts]) + NO_TAGGED_FIELDS
                           for topic_id, parts in partitions])


def encode_value(value) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, ConsumerGroupMetadataValue):
        body = _INT32.pack(value.epoch)
    elif isinstance(value, TargetAssignmentMetadataValue):
        body = _INT32.pack(value.assignment_epoch)
    elif isinstance(value, PartitionMetadataValue):
        body = _compact_array([t.topic_id.bytes + compact_string(t.name) + _INT32.pack(t.partitions)
                               + compact_length(0) + NO_TAGGED_FIELDS for t in value.topics])
    elif isinstance(value, MemberMetadataValue):
        body = b"".join((nullable_compact_string(value.instance_id), nullable_compact_string(value.rack_id),
                         compact_string(value.client_id), compact_string(value.client_host),
                         _compact_array([compact_string(t) for t in value.subscribed_topic_names]),
                         nullable_compact_string(value.subscribed_topic_regex),
                         _INT32.pack(value.rebalance_timeout_ms), nullable_compact_string(value.server_assignor)))
    elif isinstance(value, TargetAssignmentMemberValue):
        body = _topic_partitions(value.partitions)
    elif isinstance(value, CurrentAssignmentValue):
        body = (struct.pack(">iib", value.member_epoch, value.previous_member_epoch, value.state)
                + _topic_partitions(value.assigned) + _topic_partitions(value.pending_revocation))
    else:
        raise TypeError(f"not a consumer group record value: {value!r}")
    return struct.pack(">h", VALUE_VERSION) + body + NO_TAGGED_FIELDS


def _array(reader: SchemaReader, read_one, item_size_min: int) -> list:
    count = reader.compact_length()
    if count < 0:
        raise CorruptCoordinatorRecord("consumer group record has a null array where its schema allows none")
    return [read_one() for _ in range(reader.count(count, item_size_min))]


def _read_topic_partitions(reader: SchemaReader) -> TopicPartitions:
    def one():
        topic_id = uuid.UUID(bytes=reader.take(">16s"))
        partitions = tuple(_array(reader, lambda: reader.take(">i"), 4))
        reader.skip_tagged_fields()
        return topic_id, partitions
    return tuple(_array(reader, one, 18))


def _read_subscribed_topic(reader: SchemaReader) -> SubscribedTopic:
    topic_id = uuid.UUID(bytes=reader.take(">16s"))
    name, partitions = reader.compact_string(), reader.take(">i")

    def rack_partition():   # deprecated by Kafka, kept empty by rafka: read past
        reader.take(">i")
        _array(reader, reader.compact_string, 1)
        reader.skip_tagged_fields()
    _array(reader, rack_partition, 6)
    reader.skip_tagged_fields()
    return SubscribedTopic(topic_id, name, partitions)


def decode_value(key, reader: SchemaReader):
    """The value for `key`'s kind, after the reader took its version."""
    if isinstance(key, ConsumerGroupMetadataKey):
        value = ConsumerGroupMetadataValue(reader.take(">i"))
    elif isinstance(key, TargetAssignmentMetadataKey):
        value = TargetAssignmentMetadataValue(reader.take(">i"))
    elif isinstance(key, PartitionMetadataKey):
        value = PartitionMetadataValue(tuple(_array(reader, lambda: _read_subscribed_topic(reader), 23)))
    elif isinstance(key, MemberMetadataKey):
        value = MemberMetadataValue(reader.nullable_compact_string(), reader.nullable_compact_string(),
                                    reader.compact_string(), reader.compact_string(),
                                    tuple(_array(reader, reader.compact_string, 1)), reader.nullable_compact_string(),
                                    reader.take(">i"), reader.nullable_compact_string())
    elif isinstance(key, TargetAssignmentMemberKey):
        value = TargetAssignmentMemberValue(_read_topic_partitions(reader))
    else:
        member_epoch, previous_member_epoch, state = reader.take(">iib")
        value = CurrentAssignmentValue(member_epoch, previous_member_epoch, state, _read_topic_partitions(reader),
                                       _read_topic_partitions(reader))
    reader.skip_tagged_fields()
    return value
