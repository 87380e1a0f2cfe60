"""Writers for the messages on the data path: Produce v9, Fetch v12 and
OffsetCommit v8, requests and responses (framing packs their headers). Each writes exactly the
bytes kio's generic writer writes for the same entity (tests/core/
test_hot_writers.py compares them over many entities); every other message type
is written by kio.

Why: kio's writer walks each entity's fields through generic per-type writers
and builds every varint as a checked phantom int. For the messages every record
crosses (a producer's Produce and its answer, a follower's or consumer's Fetch
and its answer) that was a third of a leader's time per request and most of the
time a client took to put a request on the wire; an OffsetCommit of ten
partitions cost a coordinator and its member about 40-50 us each way. These
writers read the same kio entities and pack them with `struct`.

Invariants: a writer takes the kio entity of exactly its type (`WRITERS` is keyed
by type) and returns the body's bytes as a list of pieces (joined by the
caller once, with the size prefix and header), without the prefix or header.
Callers: dispatch.encode_response and connection.Connection, through `write_body`.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from typing import Any

from kio.schema.fetch.v12 import request as fetch_request_v12
from kio.schema.fetch.v12 import response as fetch_response_v12
from kio.schema.offset_commit.v8 import request as offset_commit_request_v8
from kio.schema.offset_commit.v8 import response as offset_commit_response_v8
from kio.schema.produce.v9 import request as produce_request_v9
from kio.schema.produce.v9 import response as produce_response_v9
from kio.serial import entity_writer

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PARTITION_ANSWER_FIXED = struct.Struct(">ihqqq")       # index/partition, error, three int64s
_FETCH_PARTITION = struct.Struct(">iiqiqi")
_FETCH_REQUEST_FIXED = struct.Struct(">iiiibii")
_EPOCH_END_OFFSET = struct.Struct(">iqB")                # epoch, end offset, no tags
_COMMIT_PARTITION = struct.Struct(">iqi")                # index, offset, leader epoch
_COMMIT_ANSWER_PARTITION = struct.Struct(">ihB")         # index, error, no tags
_NO_TAGS = b"\x00"
_NULL = b"\x00"          # a null compact string, bytes or array


def _uvarint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compact_string(value: str) -> bytes:
    data = value.encode()
    return _uvarint(len(data) + 1) + data


def _nullable_compact_string(value: str | None) -> bytes:
    return _NULL if value is None else _compact_string(value)


def _milliseconds(delta) -> int:
    return round(delta.total_seconds() * 1000)


# --- Produce v9 ------------------------------------------------------------------------

def _produce_request_v9(request) -> list:
    out = [_nullable_compact_string(request.transactional_id),
           _I16.pack(request.acks), _I32.pack(_milliseconds(request.timeout)),
           _uvarint(len(request.topic_data) + 1)]
    for topic in request.topic_data:
        out.append(_compact_string(topic.name))
        out.append(_uvarint(len(topic.partition_data) + 1))
        for partition in topic.partition_data:
            records = partition.records
            out.append(_I32.pack(partition.index))
            out.append(_NULL if records is None else _uvarint(len(records) + 1))
            if records is not None:
                out.append(records)
            out.append(_NO_TAGS)
        out.append(_NO_TAGS)
    out.append(_NO_TAGS)
    return out


def _produce_response_v9(response) -> list:
    out = [_uvarint(len(response.responses) + 1)]
    for topic in response.responses:
        out.append(_compact_string(topic.name))
        out.append(_uvarint(len(topic.partition_responses) + 1))
        for partition in topic.partition_responses:
            append_time = partition.log_append_time
            out.append(_PARTITION_ANSWER_FIXED.pack(
                partition.index, partition.error_code.value, partition.base_offset,
                -1 if append_time is None else round(append_time.timestamp() * 1000),
                partition.log_start_offset))
            out.append(_uvarint(len(partition.record_errors) + 1))
            for error in partition.record_errors:
                out.append(_I32.pack(error.batch_index))
                out.append(_nullable_compact_string(error.batch_index_error_message))
                out.append(_NO_TAGS)
            out.append(_nullable_compact_string(partition.error_message))
            out.append(_NO_TAGS)
        out.append(_NO_TAGS)
    out.append(_I32.pack(_milliseconds(response.throttle_time)))
    out.append(_NO_TAGS)
    return out


# --- Fetch v12 -------------------------------------------------------------------------

def _fetch_request_v12(request) -> list:
    out = [_FETCH_REQUEST_FIXED.pack(request.replica_id, _milliseconds(request.max_wait), request.min_bytes,
                                     request.max_bytes, request.isolation_level, request.session_id,
                                     request.session_epoch),
           _uvarint(len(request.topics) + 1)]
    for topic in request.topics:
        out.append(_compact_string(topic.topic))
        out.append(_uvarint(len(topic.partitions) + 1))
        for p in topic.partitions:
            out.append(_FETCH_PARTITION.pack(p.partition, p.current_leader_epoch, p.fetch_offset,
                                             p.last_fetched_epoch, p.log_start_offset, p.partition_max_bytes))
            out.append(_NO_TAGS)
        out.append(_NO_TAGS)
    out.append(_uvarint(len(request.forgotten_topics_data) + 1))
    for forgotten in request.forgotten_topics_data:
        out.append(_compact_string(forgotten.topic))
        out.append(_uvarint(len(forgotten.partitions) + 1))
        out.extend(_I32.pack(p) for p in forgotten.partitions)
        out.append(_NO_TAGS)
    out.append(_compact_string(request.rack_id))
    if request.cluster_id is None:       # tag 0, written only when set
        out.append(_NO_TAGS)
    else:
        cluster_id = _nullable_compact_string(request.cluster_id)
        out += [b"\x01\x00", _uvarint(len(cluster_id)), cluster_id]
    return out


_DEFAULT_DIVERGING = fetch_response_v12.EpochEndOffset()
_DEFAULT_LEADER = fetch_response_v12.LeaderIdAndEpoch()
_DEFAULT_SNAPSHOT = fetch_response_v12.SnapshotId()
_write_leader = entity_writer(fetch_response_v12.LeaderIdAndEpoch)
_write_snapshot = entity_writer(fetch_response_v12.SnapshotId)


def _fetch_partition_tags(partition) -> bytes:
    """Tagged fields 0 (diverging epoch), 1 (current leader), 2 (snapshot id),
    each only when not its default; the rare ones through kio."""
    tags = []
    if partition.diverging_epoch != _DEFAULT_DIVERGING:
        tags.append(b"\x00" + _uvarint(_EPOCH_END_OFFSET.size) + _EPOCH_END_OFFSET.pack(
            partition.diverging_epoch.epoch, partition.diverging_epoch.end_offset, 0))
    for tag, value, default, write in ((1, partition.current_leader, _DEFAULT_LEADER, _write_leader),
                                       (2, partition.snapshot_id, _DEFAULT_SNAPSHOT, _write_snapshot)):
        if value != default:
            buffer = io.BytesIO()
            write(buffer, value)
            tags.append(_uvarint(tag) + _uvarint(len(buffer.getvalue())) + buffer.getvalue())
    return _uvarint(len(tags)) + b"".join(tags)


def _fetch_response_v12(response) -> list:
    out = [_I32.pack(_milliseconds(response.throttle_time)), _I16.pack(response.error_code.value),
           _I32.pack(response.session_id), _uvarint(len(response.responses) + 1)]
    for topic in response.responses:
        out.append(_compact_string(topic.topic))
        out.append(_uvarint(len(topic.partitions) + 1))
        for p in topic.partitions:
            out.append(_PARTITION_ANSWER_FIXED.pack(p.partition_index, p.error_code.value, p.high_watermark,
                                                    p.last_stable_offset, p.log_start_offset))
            aborted = p.aborted_transactions
            if aborted is None:
                out.append(_NULL)
            else:
                out.append(_uvarint(len(aborted) + 1))
                for transaction in aborted:
                    out.append(_I64.pack(transaction.producer_id) + _I64.pack(transaction.first_offset) + _NO_TAGS)
            out.append(_I32.pack(p.preferred_read_replica))
            records = p.records
            if records is None:
                out.append(_NULL)
            else:
                out.append(_uvarint(len(records) + 1))
                out.append(records)
            out.append(_fetch_partition_tags(p))
        out.append(_NO_TAGS)
    out.append(_NO_TAGS)
    return out


# --- OffsetCommit v8 --------------------------------------------------------------------

def _offset_commit_request_v8(request) -> list:
    out = [_compact_string(request.group_id), _I32.pack(request.generation_id_or_member_epoch),
           _compact_string(request.member_id), _nullable_compact_string(request.group_instance_id),
           _uvarint(len(request.topics) + 1)]
    for topic in request.topics:
        out.append(_compact_string(topic.name))
        out.append(_uvarint(len(topic.partitions) + 1))
        for p in topic.partitions:
            out.append(_COMMIT_PARTITION.pack(p.partition_index, p.committed_offset, p.committed_leader_epoch))
            out.append(_nullable_compact_string(p.committed_metadata))
            out.append(_NO_TAGS)
        out.append(_NO_TAGS)
    out.append(_NO_TAGS)
    return out


def _offset_commit_response_v8(response) -> list:
    out = [_I32.pack(_milliseconds(response.throttle_time)), _uvarint(len(response.topics) + 1)]
    for topic in response.topics:
        out.append(_compact_string(topic.name))
        out.append(_uvarint(len(topic.partitions) + 1))
        for p in topic.partitions:
            out.append(_COMMIT_ANSWER_PARTITION.pack(p.partition_index, p.error_code.value, 0))
        out.append(_NO_TAGS)
    out.append(_NO_TAGS)
    return out


WRITERS: dict[type, Callable[[Any], list]] = {
    produce_request_v9.ProduceRequest: _produce_request_v9,
    produce_response_v9.ProduceResponse: _produce_response_v9,
    fetch_request_v12.FetchRequest: _fetch_request_v12,
    fetch_response_v12.FetchResponse: _fetch_response_v12,
    offset_commit_request_v8.OffsetCommitRequest: _offset_commit_request_v8,
    offset_commit_response_v8.OffsetCommitResponse: _offset_commit_response_v8,
}


def body_pieces(entity) -> list:
    """The entity's bytes, as pieces to be joined once with the frame's prefix and
    header (a fetch answer's records are a megabyte: copied once, not twice): by
    the writer above for its type, else by kio's, in one piece."""
    writer = WRITERS.get(type(entity))
    if writer is not None:
        return writer(entity)
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return [buffer.getvalue()]


def write_body(entity) -> bytes:
    """The entity's bytes (see body_pieces)."""
    return b"".join(body_pieces(entity))
