"""DescribeTopicPartitions v0 (KIP-966), answered from the node's newest
ClusterImage, as Metadata is: Kafka's AdminClient describes topics with it
(kafka-topics.sh --describe), a page of partitions at a time.

What Kafka answers (DescribeTopicPartitionsRequestHandler,
KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse), and what this
handler does the same way:
  * no topics named: every topic the caller may DESCRIBE; named: those, once each;
    either way in name order, from the cursor's topic and partition on;
  * at most max(min(2000, response_partition_limit), 1) partitions: where the
    page ends inside a topic, or before the next topic, next_cursor names where
    the next page starts;
  * a cursor whose topic is not among those named, or whose partition is below 0:
    INVALID_REQUEST on every topic named, nothing else;
  * a named topic the caller may not DESCRIBE: TOPIC_AUTHORIZATION_FAILED, zero
    id, no partitions, after the others (its existence is not told); a named one
    that does not exist: UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for a
    name no topic may have), taking no room in the page;
  * each partition as Metadata gives it (leader, epoch, replicas, ISR, offline
    replicas, broker ids); rafka keeps no eligible leader replicas (KIP-966's
    ELR is off, as Kafka's default): both lists empty; each topic answered without
    error carries its authorized operations.
Caller: protocol.node_table, through `route(image)`.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Callable

from kio.schema.describe_topic_partitions.v0 import response as dtp
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from rafka.core.acl import AclOperation, ResourceType
from rafka.core.actor_names import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from rafka.core.cluster_image import ClusterImage, TopicImage
from rafka.core.errors import InvalidTopic
from rafka.core.metadata import validate_topic_name
from rafka.protocol.authorization import check_of, gate
from rafka.protocol.dispatch import RequestContext, Route

API_KEY = 75
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000   # Kafka's max.request.partition.size.limit default
ZERO_UUID = uuid.UUID(int=0)
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
_DESCRIBE = check_of(API_KEY, AclOperation.DESCRIBE, ResourceType.TOPIC)
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})   # Kafka's Topic.isInternal


def route(current_image: Callable[[], ClusterImage]) -> Route:
    async def handle(request, context: RequestContext):
        return describe_topic_partitions(current_image(), request, context)
    return Route(API_KEY, 0, 0, handle)


def describe_topic_partitions(image: ClusterImage, request, context: RequestContext) -> dtp.DescribeTopicPartitionsResponse:
    request_gate = gate(context)
    every_topic = not request.topics
    cursor = request.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    names = sorted({name for name in (image.topics if every_topic else (t.name for t in request.topics))
                    if name >= start_topic})
    if cursor is not None and ((not every_topic and cursor.topic_name not in names) or cursor.partition_index < 0):
        return dtp.DescribeTopicPartitionsResponse(throttle_time=_NO_THROTTLE, topics=tuple(
            _error_topic(ErrorCode.invalid_request, t.name, None) for t in request.topics))
    allowed, refused = [], []
    for name in names:
        if request_gate.allows(_DESCRIBE, name):
            allowed.append(name)
        elif not every_topic:
            refused.append(_error_topic(ErrorCode.topic_authorization_failed, name, ZERO_UUID))
    remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, int(request.response_partition_limit)), 1)
    topics, next_cursor = [], None
    for name in allowed:
        if remaining == 0:   # the page ends before this topic
            next_cursor = dtp.Cursor(topic_name=name, partition_index=i32(0))
            break
        topic = image.topics.get(name)
        if topic is None:
            if not every_topic:   # answered with its authorized operations, as Kafka's handler sets them on all
                topics.append(dataclasses.replace(
                    _error_topic(_unknown_code(name), name, ZERO_UUID), is_internal=name in INTERNAL_TOPICS,
                    topic_authorized_operations=i32(request_gate.authorized_operations(ResourceType.TOPIC, name))))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(len(topic.partitions), first + remaining)
        topics.append(_topic(topic, first, end, request_gate.authorized_operations(ResourceType.TOPIC, name)))
        if end < len(topic.partitions):   # the page ends inside this topic
            next_cursor = dtp.Cursor(topic_name=name, partition_index=i32(end))
            break
        remaining -= max(0, end - first)
    return dtp.DescribeTopicPartitionsResponse(throttle_time=_NO_THROTTLE, topics=tuple(topics + refused),
                                               next_cursor=next_cursor)


def _unknown_code(name: str) -> ErrorCode:
    try:
        validate_topic_name(name)
    except InvalidTopic:
        return ErrorCode.invalid_topic_exception
    return ErrorCode.unknown_topic_or_partition


def _topic(topic: TopicImage, first: int, end: int, authorized_operations: int) -> dtp.DescribeTopicPartitionsResponseTopic:
    return dtp.DescribeTopicPartitionsResponseTopic(
        error_code=ErrorCode.none, name=topic.name, topic_id=topic.topic_id, is_internal=topic.is_internal,
        topic_authorized_operations=i32(authorized_operations), partitions=tuple(
            dtp.DescribeTopicPartitionsResponsePartition(
                error_code=ErrorCode.none, partition_index=i32(p.partition), leader_id=i32(p.leader_node),
                leader_epoch=i32(p.leader_epoch), replica_nodes=tuple(i32(n) for n in p.replica_nodes),
                isr_nodes=tuple(i32(n) for n in p.isr_nodes), eligible_leader_replicas=(), last_known_elr=(),
                offline_replicas=tuple(i32(n) for n in p.offline_nodes))
            for p in topic.partitions[first:end]))


def _error_topic(code: ErrorCode, name: str, topic_id) -> dtp.DescribeTopicPartitionsResponseTopic:
    return dtp.DescribeTopicPartitionsResponseTopic(error_code=code, name=name, topic_id=topic_id, is_internal=False,
                                                    partitions=())
