"""AlterReplicaLogDirs v1-2: move replicas between a broker's log dirs
(kafka-reassign-partitions.sh with log_dirs in its plan; the AdminClients'
alterReplicaLogDirs, sent to each broker named).

A rafka broker has one log dir, so a replica is always in the dir it would be
moved to: nothing ever moves. What Kafka answers (KafkaApis
.handleAlterReplicaLogDirsRequest, ReplicaManager.alterReplicaLogDirs,
LogManager.isLogDirOnline), and what this handler does the same way, per
partition, in this order:
  * ALTER on the cluster; refused: every partition named answers
    CLUSTER_AUTHORIZATION_FAILED, dir by dir (AlterReplicaLogDirsRequest
    .getErrorResponse);
  * a partition named twice is answered once, for the last dir naming it (Kafka
    reads the request into a map);
  * a topic whose future log dir name would pass 255 characters:
    INVALID_TOPIC_EXCEPTION (KAFKA-4893);
  * a path that is not this broker's log dir, exactly as DescribeLogDirs names
    it: LOG_DIR_NOT_FOUND (a node with no log dir, an actor's internal node,
    has none to find); a log dir that cannot be read: KAFKA_STORAGE_ERROR;
  * a partition of a topic the image does not have: UNKNOWN_TOPIC_OR_PARTITION;
    one this broker does not host: REPLICA_NOT_AVAILABLE (Kafka's
    NotLeaderOrFollower, kept as REPLICA_NOT_AVAILABLE for this API);
  * else NONE: the replica is already there.
Caller: dispatch, through `route(image, log_dirs)`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from rafka.core.cluster_image import ClusterImage
from rafka.protocol.authorization import decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.describe_log_dirs import LogDirs, read_log_dirs

API_KEY = 34
MIN_VERSION, MAX_VERSION = 1, 2
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
# Kafka's future log dir: "<topic>-<partition>.<32 hex digits>-future", at most 255 characters
_FUTURE_DIR_EXTRA_CHARS = 1 + 1 + 32 + len("-future")
_MAX_DIR_NAME_CHARS = 255


def route(image: Callable[[], ClusterImage], log_dirs: LogDirs | None) -> Route:
    async def handle_alter_replica_log_dirs(request, context: RequestContext):
        return await alter_replica_log_dirs(image, log_dirs, request, context)
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_alter_replica_log_dirs)


async def alter_replica_log_dirs(image: Callable[[], ClusterImage], log_dirs: LogDirs | None, request,
                                 context: RequestContext):
    response_type = load_response_schema(API_KEY, context.api_version)
    refusal = decide(context, request).refusal
    if refusal is not None:
        return _answer(response_type, [(topic.name, [(int(p), ErrorCode(refusal.code)) for p in topic.partitions])
                                       for alteration in request.dirs for topic in alteration.topics])
    destination: dict[tuple[str, int], str] = {}
    for alteration in request.dirs:
        for topic in alteration.topics:
            for partition in topic.partitions:
                destination[(topic.name, int(partition))] = alteration.path   # the last dir naming it wins
    hosted_in = await _hosted_by_dir(log_dirs, set(destination.values()))
    current = image()
    errors: dict[str, list[tuple[int, ErrorCode]]] = {}
    for (topic, partition), path in destination.items():
        errors.setdefault(topic, []).append((partition, _error(current, hosted_in, topic, partition, path)))
    return _answer(response_type, list(errors.items()))


async def _hosted_by_dir(log_dirs: LogDirs | None, paths: set[str]) -> dict[str, set[tuple[str, int]] | None]:
    """For each of `paths` that is one of this node's log dirs: the partitions it
    hosts (None: it cannot be read)."""
    hosted: dict[str, set[tuple[str, int]] | None] = {}
    for path, described in await read_log_dirs(log_dirs):
        if described is None:
            hosted[path] = None
        elif described.path in paths:   # its absolute path, as DescribeLogDirs names it
            hosted[described.path] = {(p.topic, p.partition) for p in described.partitions}
    return hosted


def _error(image: ClusterImage, hosted_in: dict, topic: str, partition: int, path: str) -> ErrorCode:
    if len(topic) + len(str(partition)) + _FUTURE_DIR_EXTRA_CHARS > _MAX_DIR_NAME_CHARS:
        return ErrorCode.invalid_topic_exception
    if path not in hosted_in:
        return ErrorCode.log_dir_not_found
    hosted = hosted_in[path]
    if hosted is None:
        return ErrorCode.kafka_storage_error
    if (topic, partition) in hosted:
        return ErrorCode.none
    known = image.topics.get(topic)
    if known is None or not 0 <= partition < len(known.partitions):
        return ErrorCode.unknown_topic_or_partition
    return ErrorCode.replica_not_available


def _answer(response_type, results: list[tuple[str, list[tuple[int, ErrorCode]]]]):
    module = module_of(response_type)
    return make(response_type, throttle_time=_NO_THROTTLE, results=tuple(
        make(module.AlterReplicaLogDirTopicResult, topic_name=topic, partitions=tuple(
            make(module.AlterReplicaLogDirPartitionResult, partition_index=i32(partition), error_code=error)
            for partition, error in partitions))
        for topic, partitions in results))
