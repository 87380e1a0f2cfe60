"""OffsetForLeaderEpoch v2-4: the end offset of a leader epoch, from the leader
(KIP-101 for followers, KIP-320 for consumers validating their position after a
leader change).

What Kafka answers (KafkaApis.handleOffsetForLeaderEpochRequest, Partition
.lastOffsetForLeaderEpoch), and what this handler does the same way:
  * (the largest epoch <= the requested one, the start offset of the next epoch
    or the LEO); an epoch below every epoch in the log: (the requested epoch, the
    first epoch's start offset); an undefined or unknown newer epoch, or no epoch
    in the log: (-1, -1) (LeaderEpochFileCache.endOffsetFor).
  * current_leader_epoch as in Fetch: FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH,
    -1 skips the check; a partition not led here: NOT_LEADER_OR_FOLLOWER.
  * replica_id (v3+) changes nothing here. rafka's followers do not ask: their
    replica Fetch carries last_fetched_epoch and the leader answers a diverging
    log in the Fetch itself (KIP-320; protocol.fetching).
  * DESCRIBE on each topic, or CLUSTER_ACTION on the cluster (KafkaApis); a
    refused topic's partitions answer TOPIC_AUTHORIZATION_FAILED.
Caller: the replica actor's table, through `route(host)`.
"""

from __future__ import annotations

import datetime

from rafka.protocol.entities import load_response_schema
from kio.static.primitive import i32, i32Timedelta, i64

from rafka.protocol.authorization import decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import make, module_of
from rafka.protocol.handlers.partitions import PartitionHost, by_topic, leader_epoch_or_none, serve_each

API_KEY = 23
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def route(host: PartitionHost) -> Route:
    async def handle(request, context: RequestContext):
        response_type = load_response_schema(API_KEY, context.api_version)
        module = module_of(response_type)

        async def end_of_epoch(endpoint, wanted):
            return await endpoint.end_offset_for_epoch(int(wanted.leader_epoch),
                                                       leader_epoch_or_none(int(wanted.current_leader_epoch)))
        rows = await serve_each(host, [(t.topic, p) for t in request.topics for p in t.partitions],
                                lambda wanted: int(wanted.partition), end_of_epoch, decide(context, request))
        grouped = by_topic((topic, make(
            module.EpochEndOffset, error_code=code, partition=i32(wanted.partition),
            leader_epoch=i32(found[0] if found else -1), end_offset=i64(found[1] if found else -1)))
            for topic, wanted, code, found in rows)
        return make(response_type, throttle_time=_NO_THROTTLE, topics=tuple(
            make(module.OffsetForLeaderTopicResult, topic=topic, partitions=tuple(partitions))
            for topic, partitions in grouped.items()))
    return Route(API_KEY, 2, 4, handle)
