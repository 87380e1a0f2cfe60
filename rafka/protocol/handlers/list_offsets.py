"""ListOffsets v0-7: the offset for a timestamp, the log start (-2), the end (-1).

What Kafka answers (KafkaApis.handleListOffsetRequest, Partition
.fetchOffsetForTimestamp), and what this handler does the same way:
  * -2 (EARLIEST): the log start offset; -1 (LATEST): the HW, since consumers
    read below it, or with isolation_level 1 (read_committed, v2+) the last
    stable offset; -3 (MAX_TIMESTAMP, v7): the first record of the largest
    timestamp; a timestamp: the first offset below that bound whose record
    timestamp is at or after it, with that timestamp; offset -1 and timestamp -1
    when none is below the bound (Kafka's "no such offset" answer, error NONE).
  * the leader epoch (v4+, core.replica.list_offset): LATEST the leader's, a
    found record its batch's, EARLIEST the first epoch's when it starts at or
    below the log start; -1 otherwise.
  * a negative timestamp the version does not have (-3 below v7, -4 and -5,
    which need v8 and v9, any other): UNSUPPORTED_VERSION, whatever the partition
    (ReplicaManager.isListOffsetsTimestampUnsupported; v0: below -2).
  * current_leader_epoch as in Fetch (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH);
    a new leader whose HW is still below its epoch's start: OFFSET_NOT_AVAILABLE
    from v5, LEADER_NOT_AVAILABLE below (both retriable; older clients know only
    the second).
  * a replica's request (replica_id >= 0, debug tools) is answered as a
    consumer's.
  * v0 (Kafka before 4.0; Sarama before 1.27 and so Debian's Burrow send it):
    the answer is a list of at most max_num_offsets offsets (OldStyleOffsets),
    here the one offset v1 would give (Kafka's legacyFetchOffsetsForTimestamp
    gives the HW or the log start first, then, when asked for more, older
    segments' base offsets, which no client here asks for); none when the
    timestamp finds nothing or max_num_offsets is 0.
  * DESCRIBE on each topic (KafkaApis); a refused topic's partitions answer
    TOPIC_AUTHORIZATION_FAILED.
Caller: dispatch, through `route(host)`.
"""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta, i64

from rafka.protocol.entities import load_response_schema

from rafka.protocol.authorization import ALLOWED, Decision, decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import make, module_of
from rafka.protocol.handlers.partitions import PartitionHost, by_topic, leader_epoch_or_none, serve_each
from rafka.protocol.legacy_schemas import (ListOffsetsPartitionResponseV0, ListOffsetsResponseV0,
                                           ListOffsetsTopicResponseV0)

API_KEY = 2
MIN_VERSION, MAX_VERSION = 0, 7
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def route(host: PartitionHost) -> Route:
    async def handle_list_offsets(request, context: RequestContext):
        return await list_offsets(host, request, context.api_version, decide(context, request))
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_list_offsets)


async def list_offsets(host: PartitionHost, request, version: int, decision: Decision = ALLOWED):
    response_type = load_response_schema(API_KEY, version)
    module = module_of(response_type)

    isolation_level = int(getattr(request, "isolation_level", 0))   # v0 and v1 have none: read_uncommitted

    async def look_up(endpoint, wanted):
        epoch = leader_epoch_or_none(int(getattr(wanted, "current_leader_epoch", -1)))
        return await endpoint.list_offset(int(wanted.timestamp), epoch, isolation_level)

    rows = [_as_kafka_answers(row, version) for row in await serve_each(
        host, [(t.name, p) for t in request.topics for p in t.partitions],
        lambda wanted: int(wanted.partition_index), _supported_only(look_up, version), decision)]
    if version == 0:
        return _old_style_answer(rows)
    grouped = by_topic((topic, make(
        module.ListOffsetsPartitionResponse, partition_index=i32(wanted.partition_index), error_code=code,
        timestamp=i64(found[1] if found else -1), offset=i64(found[0] if found else -1),
        leader_epoch=i32(found[2] if found and version >= 4 else -1)))
        for topic, wanted, code, found in rows)
    return make(response_type, throttle_time=_NO_THROTTLE, topics=tuple(
        make(module.ListOffsetsTopicResponse, name=topic, partitions=tuple(partitions))
        for topic, partitions in grouped.items()))


# The first version that has each special timestamp (Kafka's
# ListOffsetsRequest.timestampMinSupportedVersion; -4 and -5 are past MAX_VERSION).
_SPECIAL_TIMESTAMP_MIN_VERSION = {-1: 0, -2: 0, -3: 7, -4: 8, -5: 9}


def _unsupported(timestamp_ms: int, version: int) -> bool:
    return timestamp_ms < 0 and version < _SPECIAL_TIMESTAMP_MIN_VERSION.get(timestamp_ms, MAX_VERSION + 1)


def _supported_only(look_up, version: int):
    """`look_up`, not called for a timestamp the version does not have (answered
    UNSUPPORTED_VERSION by `list_offsets` whatever the partition's state)."""
    async def call(endpoint, wanted):
        if _unsupported(int(wanted.timestamp), version):
            return None
        return await look_up(endpoint, wanted)
    return call


def _as_kafka_answers(row, version: int):
    """A served (topic, wanted, code, found) row with the version's codes: an
    unsupported timestamp UNSUPPORTED_VERSION (after authorization, before the
    partition is looked at), OFFSET_NOT_AVAILABLE LEADER_NOT_AVAILABLE below v5."""
    topic, wanted, code, found = row
    if code != ErrorCode.topic_authorization_failed and _unsupported(int(wanted.timestamp), version):
        return topic, wanted, ErrorCode.unsupported_version, None
    if code == ErrorCode.offset_not_available and version < 5:
        return topic, wanted, ErrorCode.leader_not_available, None
    return row


def _old_style_answer(rows) -> ListOffsetsResponseV0:
    grouped = by_topic((topic, ListOffsetsPartitionResponseV0(
        partition_index=i32(wanted.partition_index), error_code=code,
        old_style_offsets=(i64(found[0]),) if found and found[0] >= 0 and wanted.max_num_offsets > 0 else ()))
        for topic, wanted, code, found in rows)
    return ListOffsetsResponseV0(topics=tuple(ListOffsetsTopicResponseV0(name=topic, partitions=tuple(partitions))
                                              for topic, partitions in grouped.items()))
