"""DescribeLogDirs v1-4: this broker's log dir, and per partition hosted there
its size in bytes and offset lag.

What Kafka answers (KafkaApis.handleDescribeLogDirsRequest, ReplicaManager
.describeLogDirs), and what this handler does the same way:
  * DESCRIBE on the cluster; refused: CLUSTER_AUTHORIZATION_FAILED and no log dir.
  * topics null: every partition in the log dir; else the partitions named (one
    not hosted here is left out, as is a topic left with none).
  * each log dir: its absolute path, total and usable bytes of its volume (v4);
    one that cannot be read answers KAFKA_STORAGE_ERROR with no topics.
  * a node with no log dir of its own (an actor's internal node, the controller)
    answers no log dir, as a broker with none would.
The sizes come from the broker's disk (core.log_dirs), read off the event loop.
Caller: dispatch, through `route(log_dirs)`.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta, i64

from rafka.core.log_dirs import LogDirDescription
from rafka.protocol.authorization import decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of

logger = logging.getLogger(__name__)

API_KEY = 35
MIN_VERSION, MAX_VERSION = 1, 4
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))

# Blocking: reads the broker's disk. (path, the reader of its description) per log dir.
LogDirs = Callable[[], list[tuple[str, Callable[[], LogDirDescription]]]]


async def read_log_dirs(log_dirs: LogDirs | None) -> list[tuple[str, LogDirDescription | None]]:
    """Each of the node's log dirs, read off the event loop: (path, its
    description, None if it cannot be read). Also AlterReplicaLogDirs'."""
    read = []
    for path, describe in (log_dirs() if log_dirs is not None else ()):
        try:
            read.append((path, await asyncio.get_running_loop().run_in_executor(None, describe)))
        except OSError as error:
            logger.warning("cannot read log dir %s: %s", path, error)
            read.append((path, None))
    return read


def route(log_dirs: LogDirs | None) -> Route:
    async def handle_describe_log_dirs(request, context: RequestContext):
        return await describe_log_dirs(log_dirs, request, context)
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_describe_log_dirs)


async def describe_log_dirs(log_dirs: LogDirs | None, request, context: RequestContext):
    response_type = load_response_schema(API_KEY, context.api_version)
    module = module_of(response_type)
    refusal = decide(context, request).refusal
    if refusal is not None:
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=ErrorCode(refusal.code), results=())
    wanted = None if request.topics is None else {
        (t.topic, int(p)) for t in request.topics for p in t.partitions}
    results = []
    for path, described in await read_log_dirs(log_dirs):
        if described is None:
            results.append(make(module.DescribeLogDirsResult, error_code=ErrorCode.kafka_storage_error,
                                log_dir=path, topics=()))
            continue
        topics: dict[str, list] = {}
        for p in described.partitions:
            if wanted is None or (p.topic, p.partition) in wanted:
                topics.setdefault(p.topic, []).append(make(
                    module.DescribeLogDirsPartition, partition_index=i32(p.partition),
                    partition_size=i64(p.size_bytes), offset_lag=i64(p.offset_lag), is_future_key=False))
        results.append(make(module.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir=described.path,
                            topics=tuple(make(module.DescribeLogDirsTopic, name=name, partitions=tuple(parts))
                                         for name, parts in sorted(topics.items())),
                            total_bytes=i64(described.total_bytes), usable_bytes=i64(described.usable_bytes)))
    return make(response_type, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, results=tuple(results))
