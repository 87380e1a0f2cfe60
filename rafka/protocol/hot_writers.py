"""Writers for the messages on the data path: Produce v9, Fetch v12 and
OffsetCommit v8-9 (framing packs their headers). Requests and the commit answer are
written from their kio entities, each exactly as kio's generic writer writes that
entity; the broker's Produce and Fetch answers are written from values
(`produce_answer_v9`, `fetch_answer_v12`) as a WrittenBody, exactly as kio writes
the entity those values make (tests/core/test_hot_writers.py compares both over
many); every other message type is written by kio.

Why: kio's writer walks each entity's fields through generic per-type writers
and builds every varint as a checked phantom int. For the messages every record
crosses (a producer's Produce and its answer, a follower's or consumer's Fetch
and its answer) that was a third of a leader's time per request and most of the
time a client took to put a request on the wire; an OffsetCommit of ten
partitions cost a coordinator and its member about 40-50 us each way. These
writers pack with precomputed `struct`s and take varints, strings and tagged
fields from core.schema_primitives (whose varints of one or two bytes are a
table). A broker's answer skips the entities too: building a Fetch answer's
three kio entities and walking them again took 14 us of its 16.

Invariants: an entity writer takes the kio entity of exactly its type (`WRITERS`
is keyed by type); every writer gives the body's bytes as a list of pieces
(joined once by the caller, with the size prefix and header), without the
prefix or header.
Callers: dispatch.encode_response and connection.Connection through `body_pieces`;
the Produce and Fetch handlers for their answers.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from collections.abc import Callable
from typing import Any

from kio.schema.fetch.v12 import request as kio_fetch_request_v12
from kio.schema.fetch.v12 import response as kio_fetch_response_v12
from kio.schema.offset_commit.v8 import request as kio_offset_commit_request_v8
from kio.schema.offset_commit.v8 import response as kio_offset_commit_response_v8
from kio.schema.offset_commit.v9 import request as kio_offset_commit_request_v9
from kio.schema.offset_commit.v9 import response as kio_offset_commit_response_v9
from kio.schema.produce.v9 import request as kio_produce_request_v9
from kio.schema.produce.v9 import response as kio_produce_response_v9
from kio.serial import entity_writer

from rafka.core.schema_primitives import (NO_TAGGED_FIELDS, NULL_COMPACT, compact_length, compact_string,
                                          nullable_compact_string, tagged_fields)


@dataclasses.dataclass(frozen=True, slots=True)
class WrittenBody:
    """A request or response body written from values by a writer below, not from
    a kio entity: the broker's answers to Produce v9 and Fetch v12 (building kio
    entities for them and walking them again cost 14 us of a fetch answer's 16),
    a follower's or consumer's Fetch and a producer's Produce. Dispatch and
    Connection frame it as the entity of `entity_type` it stands for."""
    entity_type: type
    pieces: list

    @property
    def __header_schema__(self):
        return self.entity_type.__header_schema__

    @property
    def __api_key__(self) -> int:
        return self.entity_type.__api_key__

    @property
    def __version__(self) -> int:
        return self.entity_type.__version__


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
_ABORTED_TRANSACTION = struct.Struct(">qqB")             # producer id, first offset, no tags
_PRODUCE_REQUEST_FIXED = struct.Struct(">hi")           # acks, timeout ms
_FETCH_ANSWER_FIXED = struct.Struct(">ihi")              # throttle ms, error, session id
_NO_RECORD_ERRORS_NO_MESSAGE = b"\x01\x00\x00"          # empty array, null string, no tags
_NO_THROTTLE_NO_TAGS = b"\x00\x00\x00\x00\x00"
_ONE_TAG_DIVERGING = b"\x01\x00" + bytes((_EPOCH_END_OFFSET.size,))   # one tag: 0, its size


def _milliseconds(delta) -> int:
    return round(delta.total_seconds() * 1000)


# --- Produce v9 ------------------------------------------------------------------------

def produce_request_v9(*, transactional_id: str | None, acks: int, timeout_ms: int, topics) -> WrittenBody:
    """A Produce v9 request from values: `topics` is [(name, [(index, records or None)])]."""
    out = [nullable_compact_string(transactional_id), _PRODUCE_REQUEST_FIXED.pack(acks, timeout_ms),
           compact_length(len(topics))]
    for name, partitions in topics:
        out.append(compact_string(name))
        out.append(compact_length(len(partitions)))
        for index, records in partitions:
            out.append(_I32.pack(index))
            if records is None:
                out.append(NULL_COMPACT)
            else:
                out.append(compact_length(len(records)))
                out.append(records)
            out.append(NO_TAGGED_FIELDS)
        out.append(NO_TAGGED_FIELDS)
    out.append(NO_TAGGED_FIELDS)
    return WrittenBody(kio_produce_request_v9.ProduceRequest, out)


def _produce_request_v9(request) -> list:
    return produce_request_v9(
        transactional_id=request.transactional_id, acks=request.acks, timeout_ms=_milliseconds(request.timeout),
        topics=[(t.name, [(p.index, p.records) for p in t.partition_data]) for t in request.topic_data]).pieces


def produce_answer_v9(topics) -> WrittenBody:
    """A Produce v9 answer from values: `topics` is [(name, [(index, error code,
    base offset, log append time ms or -1, log start offset, record errors, error
    message or None)])], record errors being [(batch index, message or None)]
    (KIP-467: the records a per-record check refused)."""
    out = [compact_length(len(topics))]
    for name, partitions in topics:
        out.append(compact_string(name))
        out.append(compact_length(len(partitions)))
        for (index, error_code, base_offset, log_append_time_ms, log_start_offset, record_errors,
             error_message) in partitions:
            out.append(_PARTITION_ANSWER_FIXED.pack(index, error_code, base_offset, log_append_time_ms,
                                                    log_start_offset))
            if not record_errors and error_message is None:   # every answer but a refused record's
                out.append(_NO_RECORD_ERRORS_NO_MESSAGE)
                continue
            out.append(compact_length(len(record_errors)))
            for batch_index, batch_index_error_message in record_errors:
                out.append(_I32.pack(batch_index))
                out.append(nullable_compact_string(batch_index_error_message))
                out.append(NO_TAGGED_FIELDS)
            out.append(nullable_compact_string(error_message))
            out.append(NO_TAGGED_FIELDS)
        out.append(NO_TAGGED_FIELDS)
    out.append(_NO_THROTTLE_NO_TAGS)
    return WrittenBody(kio_produce_response_v9.ProduceResponse, out)


# --- Fetch v12 -------------------------------------------------------------------------

def fetch_request_v12(*, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int, isolation_level: int,
                      session_id: int, session_epoch: int, topics, forgotten_topics=(), rack_id: str = "",
                      cluster_id: str | None = None) -> WrittenBody:
    """A Fetch v12 request from values: `topics` is [(topic, [(partition, current
    leader epoch, fetch offset, last fetched epoch, log start offset, partition
    max bytes)])], `forgotten_topics` [(topic, [partition])]."""
    out = [_FETCH_REQUEST_FIXED.pack(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id,
                                     session_epoch),
           compact_length(len(topics))]
    for topic, partitions in topics:
        out.append(compact_string(topic))
        out.append(compact_length(len(partitions)))
        for partition in partitions:
            out.append(_FETCH_PARTITION.pack(*partition))
            out.append(NO_TAGGED_FIELDS)
        out.append(NO_TAGGED_FIELDS)
    out.append(compact_length(len(forgotten_topics)))
    for topic, partitions in forgotten_topics:
        out.append(compact_string(topic))
        out.append(compact_length(len(partitions)))
        out.extend(_I32.pack(p) for p in partitions)
        out.append(NO_TAGGED_FIELDS)
    out.append(compact_string(rack_id))
    if cluster_id is None:       # tag 0, written only when set
        out.append(NO_TAGGED_FIELDS)
    else:
        out.append(tagged_fields([(0, nullable_compact_string(cluster_id))]))
    return WrittenBody(kio_fetch_request_v12.FetchRequest, out)


def _fetch_request_v12(request) -> list:
    return fetch_request_v12(
        replica_id=request.replica_id, max_wait_ms=_milliseconds(request.max_wait), min_bytes=request.min_bytes,
        max_bytes=request.max_bytes, isolation_level=request.isolation_level, session_id=request.session_id,
        session_epoch=request.session_epoch, topics=[(t.topic, [
            (p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch, p.log_start_offset,
             p.partition_max_bytes) for p in t.partitions]) for t in request.topics],
        forgotten_topics=[(f.topic, f.partitions) for f in request.forgotten_topics_data],
        rack_id=request.rack_id, cluster_id=request.cluster_id).pieces


def fetch_answer_v12(topics, *, error_code: int = 0, session_id: int = 0) -> WrittenBody:
    """A Fetch v12 answer from values: `topics` is [(topic, [(partition index,
    error code, high watermark, last stable offset, log start offset, aborted
    transactions [(producer id, first offset)] or None, preferred read replica,
    records or None, diverging (epoch, end offset) or None)])], each partition
    with no current-leader or snapshot tag (rafka's broker sends neither)."""
    out = [_FETCH_ANSWER_FIXED.pack(0, error_code, session_id), compact_length(len(topics))]
    for topic, partitions in topics:
        out.append(compact_string(topic))
        out.append(compact_length(len(partitions)))
        for (index, error_code, high_watermark, last_stable_offset, log_start_offset, aborted_transactions,
             preferred_read_replica, records, diverging_epoch) in partitions:
            out.append(_PARTITION_ANSWER_FIXED.pack(index, error_code, high_watermark, last_stable_offset,
                                                    log_start_offset))
            if aborted_transactions is None:
                out.append(NULL_COMPACT)
            else:
                out.append(compact_length(len(aborted_transactions)))
                out.extend(_ABORTED_TRANSACTION.pack(producer_id, first_offset, 0)
                           for producer_id, first_offset in aborted_transactions)
            out.append(_I32.pack(preferred_read_replica))
            if records is None:
                out.append(NULL_COMPACT)
            else:
                out.append(compact_length(len(records)))
                out.append(records)
            if diverging_epoch is None:
                out.append(NO_TAGGED_FIELDS)
            else:   # tag 0: the diverging epoch (KIP-320)
                out.append(_ONE_TAG_DIVERGING + _EPOCH_END_OFFSET.pack(*diverging_epoch, 0))
        out.append(NO_TAGGED_FIELDS)
    out.append(NO_TAGGED_FIELDS)
    return WrittenBody(kio_fetch_response_v12.FetchResponse, out)


# --- OffsetCommit v8 --------------------------------------------------------------------

def _offset_commit_request_v8(request) -> list:
    out = [compact_string(request.group_id), _I32.pack(request.generation_id_or_member_epoch),
           compact_string(request.member_id), nullable_compact_string(request.group_instance_id),
           compact_length(len(request.topics))]
    for topic in request.topics:
        out.append(compact_string(topic.name))
        out.append(compact_length(len(topic.partitions)))
        for p in topic.partitions:
            out.append(_COMMIT_PARTITION.pack(p.partition_index, p.committed_offset, p.committed_leader_epoch))
            out.append(nullable_compact_string(p.committed_metadata))
            out.append(NO_TAGGED_FIELDS)
        out.append(NO_TAGGED_FIELDS)
    out.append(NO_TAGGED_FIELDS)
    return out


def _offset_commit_response_v8(response) -> list:
    out = [_I32.pack(_milliseconds(response.throttle_time)), compact_length(len(response.topics))]
    for topic in response.topics:
        out.append(compact_string(topic.name))
        out.append(compact_length(len(topic.partitions)))
        for p in topic.partitions:
            out.append(_COMMIT_ANSWER_PARTITION.pack(p.partition_index, p.error_code.value, 0))
        out.append(NO_TAGGED_FIELDS)
    out.append(NO_TAGGED_FIELDS)
    return out


WRITERS: dict[type, Callable[[Any], list]] = {
    kio_produce_request_v9.ProduceRequest: _produce_request_v9,
    kio_fetch_request_v12.FetchRequest: _fetch_request_v12,
    kio_offset_commit_request_v8.OffsetCommitRequest: _offset_commit_request_v8,
    kio_offset_commit_response_v8.OffsetCommitResponse: _offset_commit_response_v8,
    # v9 has v8's fields (it only says the client knows KIP-848's member epochs)
    kio_offset_commit_request_v9.OffsetCommitRequest: _offset_commit_request_v8,
    kio_offset_commit_response_v9.OffsetCommitResponse: _offset_commit_response_v8,
}


def body_pieces(entity) -> list:
    """The entity's bytes, as pieces to be joined once with the frame's prefix and
    header (a fetch answer's records are a megabyte: copied once, not twice): a
    WrittenBody's own, or by the writer above for its type, else by kio's, in one
    piece."""
    if type(entity) is WrittenBody:
        return entity.pieces
    writer = WRITERS.get(type(entity))
    if writer is not None:
        return writer(entity)
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return [buffer.getvalue()]


def write_body(entity) -> bytes:
    """The entity's bytes (see body_pieces)."""
    return b"".join(body_pieces(entity))
