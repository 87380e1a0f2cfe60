"""DeleteRecords v0-2: move partitions' log start offsets up (records below are gone).

What Kafka answers (KafkaApis.handleDeleteRecordsRequest, ReplicaManager
.deleteRecords, Partition.deleteRecordsOnLeader, DelayedDeleteRecords), and what
this handler does the same way:
  * DELETE on each topic; a refused topic's partitions answer
    TOPIC_AUTHORIZATION_FAILED with low watermark -1.
  * an internal topic (`__consumer_offsets`, `__transaction_state`):
    INVALID_TOPIC_EXCEPTION; a partition not led here: NOT_LEADER_OR_FOLLOWER
    (UNKNOWN_TOPIC_OR_PARTITION if it does not exist).
  * offset -1: the HW; above the HW (or another negative): OFFSET_OUT_OF_RANGE;
    a topic whose cleanup.policy has no delete: POLICY_VIOLATION.
  * the answer for a partition waits, up to timeout_ms, until every ISR member's
    log start offset reached the offset (the low watermark, answered); at the
    timeout REQUEST_TIMED_OUT with the low watermark as it stood
    (protocol.hosted_partition).
Caller: dispatch, through `route(host)`.
"""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta, i64

from rafka.core.actor_names import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from rafka.core.acl import ResourceType
from rafka.protocol.authorization import ALLOWED, Decision, decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.partitions import PartitionHost, by_topic, serve_each

API_KEY = 21
MIN_VERSION, MAX_VERSION = 0, 2
INVALID_LOW_WATERMARK = -1   # Kafka's DeleteRecordsResponse.INVALID_LOW_WATERMARK
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})   # Kafka's Topic.isInternal
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def route(host: PartitionHost) -> Route:
    async def handle_delete_records(request, context: RequestContext):
        return await delete_records(host, request, context.api_version, decide(context, request))
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_delete_records)


async def delete_records(host: PartitionHost, request, version: int, decision: Decision = ALLOWED):
    response_type = load_response_schema(API_KEY, version)
    module = module_of(response_type)
    timeout_ms = max(0, int(request.timeout.total_seconds() * 1000))

    async def delete(endpoint, wanted):
        return await endpoint.delete_records(int(wanted.offset), timeout_ms)

    work = [(t.name, p) for t in request.topics for p in t.partitions]
    internal = [_internal(host, decision, topic, wanted) for topic, wanted in work]
    served = iter(await serve_each(host, [w for w, skip in zip(work, internal) if not skip],
                                   lambda wanted: int(wanted.partition_index), delete, decision))
    rows = [(topic, wanted, ErrorCode.invalid_topic_exception, None) if skip else next(served)
            for (topic, wanted), skip in zip(work, internal)]
    grouped = by_topic((topic, make(
        module.DeleteRecordsPartitionResult, partition_index=i32(wanted.partition_index),
        low_watermark=i64(outcome.low_watermark if outcome is not None else INVALID_LOW_WATERMARK),
        error_code=ErrorCode.request_timed_out if outcome is not None and outcome.timed_out else code))
        for topic, wanted, code, outcome in rows)
    return make(response_type, throttle_time=_NO_THROTTLE, topics=tuple(
        make(module.DeleteRecordsTopicResult, name=topic, partitions=tuple(partitions))
        for topic, partitions in grouped.items()))


def _internal(host: PartitionHost, decision: Decision, topic: str, wanted) -> bool:
    """An existing partition of an internal topic the caller may delete from:
    INVALID_TOPIC_EXCEPTION wherever it is led (Kafka refuses it before it looks
    for the partition)."""
    if topic not in INTERNAL_TOPICS or decision.refusal_of(ResourceType.TOPIC, topic) is not None:
        return False
    known = host.image().topics.get(topic)
    return known is not None and 0 <= int(wanted.partition_index) < len(known.partitions)
