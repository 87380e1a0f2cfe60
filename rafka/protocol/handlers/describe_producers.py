"""DescribeProducers v0: the producers a partition's replica knows, each with its
epoch, last sequence, last timestamp, coordinator epoch and open transaction's
first offset (KafkaApis.handleDescribeProducersRequest, ReplicaManager
.activeProducerState, Partition.activeProducerState). kafka-transactions.sh
reads it to find hanging transactions and the producer of one to abort.

What Kafka answers, and what this handler does the same way, per topic in the
request's order, each partition as it was listed:
  * a topic name that is not a legal one: INVALID_TOPIC_EXCEPTION, with why;
  * READ on the topic refused: TOPIC_AUTHORIZATION_FAILED (Kafka authorizes
    before it looks the topic up: a refused client learns nothing of it);
  * a partition hosted here: its replica's producer state, leader or follower
    (Kafka reads the local log in either role; clients ask the leader unless told
    a broker); not hosted here: NOT_LEADER_OR_FOLLOWER for a partition the image
    knows, UNKNOWN_TOPIC_OR_PARTITION for one it does not (handlers.partitions);
    a replica that cannot serve: its typed error (KAFKA_STORAGE_ERROR for an
    offline log dir).
An admin call: the producer table is read once per partition, nothing per record.
Caller: node_table, through `route(partitions)`.
"""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta, i64

from rafka.core.errors import InvalidTopic
from rafka.core.metadata import validate_topic_name
from rafka.protocol.authorization import decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.partitions import PartitionHost, serve_each

API_KEY = 61
MIN_VERSION, MAX_VERSION = 0, 0
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def _invalid_name(topic: str) -> str | None:
    """Why `topic` is not a legal topic name, or None."""
    try:
        validate_topic_name(topic)
    except InvalidTopic as error:
        return error.message
    return None


def route(host: PartitionHost) -> Route:
    async def handle_describe_producers(request, context: RequestContext):
        response_type = load_response_schema(API_KEY, context.api_version)
        module = module_of(response_type)
        invalid = {t.name: why for t in request.topics if (why := _invalid_name(t.name)) is not None}

        async def describe(endpoint, _partition):
            return await endpoint.describe_producers()
        served = iter(await serve_each(
            host, [(t.name, int(p)) for t in request.topics if t.name not in invalid for p in t.partition_indexes],
            lambda partition: partition, describe, decide(context, request)))

        def answer(partition: int, code: ErrorCode, producers=(), message: str | None = None):
            return make(module.PartitionResponse, partition_index=i32(partition), error_code=code,
                        error_message=message, active_producers=tuple(
                            make(module.ProducerState, producer_id=i64(p.producer_id),
                                 producer_epoch=i32(p.producer_epoch), last_sequence=i32(p.last_sequence),
                                 last_timestamp=i64(p.last_timestamp_ms), coordinator_epoch=i32(p.coordinator_epoch),
                                 current_txn_start_offset=i64(p.current_txn_start_offset))
                            for p in producers))
        topics = []
        for topic in request.topics:
            if topic.name in invalid:
                partitions = [answer(int(p), ErrorCode.invalid_topic_exception, message=invalid[topic.name])
                              for p in topic.partition_indexes]
            else:
                partitions = [answer(partition, code, found or ())
                              for _, partition, code, found in (next(served) for _ in topic.partition_indexes)]
            topics.append(make(module.TopicResponse, name=topic.name, partitions=tuple(partitions)))
        return make(response_type, throttle_time=_NO_THROTTLE, topics=tuple(topics))
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_describe_producers)
