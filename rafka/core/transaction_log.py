"""The records of `__transaction_state`, byte for byte as Kafka writes them, which
partition of it holds a transactional id, and how its records load into a cache.

Kafka's schemas (transaction-coordinator TransactionLogKey.json and
TransactionLogValue.json), each record prefixed by its int16 version:
  key v0:    transactional id (string: int16 length, UTF-8)
  value v0:  producer id int64, producer epoch int16, transaction timeout int32,
             state int8 (TxnState.id), partitions (nullable array: int32 count,
             each topic string and int32 partition ids), last update timestamp
             int64, start timestamp int64
  value v1:  the same fields in the flexible encoding (compact strings and
             arrays: unsigned varint length + 1, 0 for null; a tagged-field
             section after each struct), and as tagged fields: 0 previous
             producer id int64 (default -1), 1 next producer id int64 (default
             -1), 2 client transaction version int16 (default 0). A field at its
             default is not written; an unknown tag is skipped.
An Empty transaction's partitions are written null and ignored when read (as
Kafka's TransactionLog does). A null value is a tombstone: the id expired.

Invariants: decode(encode(x)) == x for every value of both versions; a record
that breaks its schema (short buffer, trailing bytes, text that is not UTF-8,
a null topic, a tagged field of the wrong size, an unknown state, an unknown
value version, no key) is CorruptCoordinatorRecord (not retriable), never a
wrong value; a key of an unknown version is UnknownTxnKey, which loading skips
(Kafka's loader ignores it: "a left over from an aborted upgrade"). The
last producer epoch is not in the record (nor in Kafka's): a loaded id has none.
Pure logic, no I/O. Callers: core.transaction_shard (writes and replays these
records), the transaction coordinator actor (encodes and loads them).
"""

from __future__ import annotations

import dataclasses
import struct

from rafka.core.errors import CorruptCoordinatorRecord
from rafka.core.offsets_schema import coordinator_partition_for
from rafka.core.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from rafka.core.schema_primitives import (NO_TAGGED_FIELDS, NULL_COMPACT, SchemaReader, compact_length,
                                          compact_string, string, tagged_fields)
from rafka.core.transaction_state import (STATES_BY_ID, TopicPartition, TransactionMetadata, TxnState,
                                          TxnTransit)

KEY_VERSION = 0
VALUE_VERSION_V0, VALUE_VERSION_V1 = 0, 1
# Tagged fields of value v1 (TransactionLogValue.json "tag").
_TAG_PREVIOUS_PRODUCER_ID, _TAG_NEXT_PRODUCER_ID, _TAG_CLIENT_TRANSACTION_VERSION = 0, 1, 2


def partition_for(transactional_id: str, transaction_state_partition_count: int) -> int:
    """Kafka's TransactionStateManager.partitionFor: abs(hashCode) % partitions,
    the same rule (and function) that places a group in `__consumer_offsets`."""
    return coordinator_partition_for(transactional_id, transaction_state_partition_count)


@dataclasses.dataclass(frozen=True)
class TxnKey:
    transactional_id: str


@dataclasses.dataclass(frozen=True)
class UnknownTxnKey:
    """A key whose version this coordinator does not know: skipped when loading."""
    version: int


@dataclasses.dataclass(frozen=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    topic_partitions: frozenset[TopicPartition]
    txn_last_update_timestamp_ms: int
    txn_start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID      # v1 only (tag 0)
    next_producer_id: int = NO_PRODUCER_ID          # v1 only (tag 1)
    client_transaction_version: int = 0             # v1 only (tag 2)


Record = tuple[TxnKey, TxnLogValue | None]   # (key, value or None for a tombstone)


def value_of(transit: TxnTransit) -> TxnLogValue:
    """What a prepared move writes (Kafka's TransactionLog.valueToBytes)."""
    if transit.state is TxnState.EMPTY and transit.topic_partitions:
        raise ValueError(f"an Empty transaction has no partitions, not {sorted(transit.topic_partitions)}")
    return TxnLogValue(producer_id=transit.producer_id, producer_epoch=transit.producer_epoch,
                       txn_timeout_ms=transit.txn_timeout_ms, state=transit.state,
                       topic_partitions=transit.topic_partitions,
                       txn_last_update_timestamp_ms=transit.txn_last_update_timestamp_ms,
                       txn_start_timestamp_ms=transit.txn_start_timestamp_ms,
                       previous_producer_id=transit.previous_producer_id,
                       next_producer_id=transit.next_producer_id,
                       client_transaction_version=transit.transaction_version)


def metadata_of(transactional_id: str, value: TxnLogValue) -> TransactionMetadata:
    """A loaded id (Kafka's TransactionLog.readTxnRecordValue): no move pending, no
    last epoch."""
    return TransactionMetadata(
        transactional_id=transactional_id, producer_id=value.producer_id,
        previous_producer_id=value.previous_producer_id, next_producer_id=value.next_producer_id,
        producer_epoch=value.producer_epoch, last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=value.txn_timeout_ms, state=value.state,
        topic_partitions=frozenset() if value.state is TxnState.EMPTY else value.topic_partitions,
        txn_start_timestamp_ms=value.txn_start_timestamp_ms,
        txn_last_update_timestamp_ms=value.txn_last_update_timestamp_ms,
        transaction_version=value.client_transaction_version)


def replay_into(cache: dict[str, TransactionMetadata], key: TxnKey | UnknownTxnKey,
                value: TxnLogValue | None) -> None:
    """Loading: the latest record of an id wins; a tombstone removes it. Dead and
    PrepareEpochFence are never written (an expiring id gets a tombstone, a fence
    becomes PrepareAbort): a record in either is CorruptCoordinatorRecord."""
    if isinstance(key, UnknownTxnKey):
        return
    if value is None:
        cache.pop(key.transactional_id, None)
        return
    if value.state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
        raise CorruptCoordinatorRecord(f"__transaction_state record of {key.transactional_id!r} is in "
                                       f"{value.state.value}, a state never written")
    cache[key.transactional_id] = metadata_of(key.transactional_id, value)


# --- encode -----------------------------------------------------------------------

def _partitions_by_topic(partitions: frozenset[TopicPartition]) -> list[tuple[str, list[int]]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return list(by_topic.items())


def encode_key(key: TxnKey) -> bytes:
    return struct.pack(">h", KEY_VERSION) + string(key.transactional_id)


def encode_value(value: TxnLogValue | None, *, version: int = VALUE_VERSION_V1) -> bytes | None:
    """None (a tombstone) stays None. Version 0 cannot carry the tagged fields:
    they must be at their defaults."""
    if value is None:
        return None
    empty = value.state is TxnState.EMPTY
    if empty and value.topic_partitions:
        raise ValueError("an Empty transaction is written with no partitions")
    head = struct.pack(">qhib", value.producer_id, value.producer_epoch, value.txn_timeout_ms, value.state.id)
    tail = struct.pack(">qq", value.txn_last_update_timestamp_ms, value.txn_start_timestamp_ms)
    topics = _partitions_by_topic(value.topic_partitions)
    if version == VALUE_VERSION_V0:
        if (value.previous_producer_id, value.next_producer_id, value.client_transaction_version) != (
                NO_PRODUCER_ID, NO_PRODUCER_ID, 0):
            raise ValueError("value v0 has no previous or next producer id or client transaction version")
        parts = [struct.pack(">h", version), head]
        if empty:
            parts.append(struct.pack(">i", -1))
        else:
            parts.append(struct.pack(">i", len(topics)))
            for topic, ids in topics:
                parts += [string(topic), struct.pack(f">i{len(ids)}i", len(ids), *ids)]
        parts.append(tail)
        return b"".join(parts)
    if version != VALUE_VERSION_V1:
        raise ValueError(f"no __transaction_state value version {version}")
    parts = [struct.pack(">h", version), head]
    if empty:
        parts.append(NULL_COMPACT)
    else:
        parts.append(compact_length(len(topics)))
        for topic, ids in topics:
            parts += [compact_string(topic), compact_length(len(ids)), struct.pack(f">{len(ids)}i", *ids),
                      NO_TAGGED_FIELDS]   # the partition entry's
    parts.append(tail)
    tagged = []
    if value.previous_producer_id != NO_PRODUCER_ID:
        tagged.append((_TAG_PREVIOUS_PRODUCER_ID, struct.pack(">q", value.previous_producer_id)))
    if value.next_producer_id != NO_PRODUCER_ID:
        tagged.append((_TAG_NEXT_PRODUCER_ID, struct.pack(">q", value.next_producer_id)))
    if value.client_transaction_version != 0:
        tagged.append((_TAG_CLIENT_TRANSACTION_VERSION, struct.pack(">h", value.client_transaction_version)))
    parts.append(tagged_fields(tagged))
    return b"".join(parts)


# --- decode -----------------------------------------------------------------------

def decode_key(data: bytes | None) -> TxnKey | UnknownTxnKey:
    if data is None:
        raise CorruptCoordinatorRecord("__transaction_state record has no key")
    reader = SchemaReader(data, error=CorruptCoordinatorRecord, record="__transaction_state record")
    version = reader.take(">h")
    if version != KEY_VERSION:
        return UnknownTxnKey(version)
    key = TxnKey(reader.string())
    reader.done()
    return key


def decode_record(key: bytes | None, value: bytes | None) -> tuple[TxnKey | UnknownTxnKey, TxnLogValue | None]:
    """A record of the partition as its coordinator replays it (actors.coordinator_load);
    a key of an unknown version comes with no value (loading skips it)."""
    decoded = decode_key(key)
    return decoded, None if isinstance(decoded, UnknownTxnKey) else decode_value(value)


def _state(state_id: int) -> TxnState:
    state = STATES_BY_ID.get(state_id)
    if state is None:
        raise CorruptCoordinatorRecord(f"__transaction_state record has unknown state id {state_id}")
    return state


def decode_value(data: bytes | None) -> TxnLogValue | None:
    """None for a tombstone."""
    if data is None:
        return None
    reader = SchemaReader(data, error=CorruptCoordinatorRecord, record="__transaction_state record")
    version = reader.take(">h")
    if version not in (VALUE_VERSION_V0, VALUE_VERSION_V1):
        raise CorruptCoordinatorRecord(f"unknown __transaction_state value version {version}")
    flexible = version == VALUE_VERSION_V1
    producer_id, producer_epoch, timeout_ms, state_id = reader.take(">qhib")
    state = _state(state_id)
    partitions: set[TopicPartition] = set()
    topic_count = reader.compact_length() if flexible else reader.take(">i")
    if topic_count < 0 and state is not TxnState.EMPTY:   # Kafka's loader fails on it (a null list)
        raise CorruptCoordinatorRecord(f"__transaction_state record in {state.value} has null partitions")
    for _ in range(reader.count(max(topic_count, 0), 3)):   # an entry takes 3 bytes at least
        topic = reader.compact_string() if flexible else reader.string()
        id_count = reader.compact_length() if flexible else reader.take(">i")
        if id_count < 0:
            raise CorruptCoordinatorRecord("__transaction_state record has null partition ids")
        for _ in range(reader.count(id_count, 4)):
            partitions.add((topic, reader.take(">i")))
        if flexible:
            reader.skip_tagged_fields()
    last_update_ms, start_ms = reader.take(">qq")
    tagged = {_TAG_PREVIOUS_PRODUCER_ID: NO_PRODUCER_ID, _TAG_NEXT_PRODUCER_ID: NO_PRODUCER_ID,
              _TAG_CLIENT_TRANSACTION_VERSION: 0}
    if flexible:
        for _ in range(reader.uvarint()):
            tag, size = reader.uvarint(), reader.uvarint()
            fmt = {_TAG_PREVIOUS_PRODUCER_ID: ">q", _TAG_NEXT_PRODUCER_ID: ">q",
                   _TAG_CLIENT_TRANSACTION_VERSION: ">h"}.get(tag)
            if fmt is None:
                reader.skip(size)
            elif size != struct.calcsize(fmt):
                raise CorruptCoordinatorRecord(f"__transaction_state record has tagged field {tag} of "
                                               f"{size} bytes, not {struct.calcsize(fmt)}")
            else:
                tagged[tag] = reader.take(fmt)
    reader.done()
    return TxnLogValue(producer_id=producer_id, producer_epoch=producer_epoch, txn_timeout_ms=timeout_ms,
                       state=state, topic_partitions=frozenset() if state is TxnState.EMPTY else frozenset(partitions),
                       txn_last_update_timestamp_ms=last_update_ms, txn_start_timestamp_ms=start_ms,
                       previous_producer_id=tagged[_TAG_PREVIOUS_PRODUCER_ID],
                       next_producer_id=tagged[_TAG_NEXT_PRODUCER_ID],
                       client_transaction_version=tagged[_TAG_CLIENT_TRANSACTION_VERSION])

