"""What the partition APIs (Produce, Fetch, ListOffsets) share: finding the
partition this node serves, and turning its typed errors into Kafka's codes.

A node serves the partitions it hosts: a replica actor serves its one partition
(answering as leader; a follower's endpoint raises NOT_LEADER_OR_FOLLOWER itself),
the controller and coordinators host none. For a partition not hosted here the
answer is UNKNOWN_TOPIC_OR_PARTITION when the node's image does not know the topic
or partition (Kafka's ReplicaManager.getPartitionOrError: the metadata cache does
not have it) and NOT_LEADER_OR_FOLLOWER when it does, so the client refreshes its
metadata and goes to the leader.

A partition of a topic the caller may not use (protocol.authorization) is
answered TOPIC_AUTHORIZATION_FAILED (or the request's refusal) before any of this.

Callers: handlers.produce, handlers.fetch, handlers.list_offsets,
handlers.offset_for_leader_epoch, handlers.describe_producers.
"""

from __future__ import annotations

import logging
import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from rafka.core.acl import ResourceType
from rafka.core.cluster_image import ClusterImage
from rafka.core.errors import KafkaError
from rafka.protocol.authorization import ALLOWED, Decision

logger = logging.getLogger(__name__)


class PartitionEndpoint(Protocol):
    """The async calls a hosted partition answers (the replica actor has them)."""

    def append(self, records: bytes, acks: int, verification_guard: Any = ...) -> Any: ...

    def start_verification(self, producer_id: int, sequence: int, epoch: int) -> Any: ...

    async def acknowledged(self, appended: Any, request_timeout_ms: int) -> Any: ...

    async def consumer_fetch(self, fetch_offset: int, max_bytes: int, max_wait_ms: int,
                             leader_epoch: int | None = ..., isolation_level: int = ...,
                             min_bytes: int = ...) -> Any: ...

    async def fetch(self, follower_id: int, fetch_offset: int, leader_epoch: int, max_bytes: int,
                    max_wait_ms: int, last_fetched_epoch: int = ..., log_start_offset: int = ...,
                    min_bytes: int = ...) -> Any: ...

    async def list_offset(self, timestamp_ms: int, leader_epoch: int | None = ...,
                          isolation_level: int = ...) -> Any: ...

    async def describe_producers(self) -> Any: ...


class PartitionHost(Protocol):
    def image(self) -> ClusterImage: ...

    def endpoint(self, topic: str, partition: int) -> PartitionEndpoint | None: ...

    async def verify_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 partitions: list[tuple[str, int]]) -> dict:
        """{partition: None (in the producer's open transaction) or the error}
        (protocol.txn_verification.TransactionVerifier.verify)."""


def error_message_of(error: BaseException | None) -> str | None:
    """The message an answer carries beside `error_code_of`'s code (None for None)."""
    return None if error is None else str(getattr(error, "message", error))


def error_code_of(error: BaseException | None) -> ErrorCode:
    """Kafka's code for a typed error (NONE for None); anything else is a bug here,
    logged, and UNKNOWN_SERVER_ERROR to the client (Kafka's Errors.forException)."""
    if error is None:
        return ErrorCode.none
    if isinstance(error, KafkaError):
        return ErrorCode(error.code)
    logger.error("unexpected error serving a partition request", exc_info=error)
    return ErrorCode.unknown_server_error


def locate(host: PartitionHost, topic: str, partition: int) -> tuple[ErrorCode, PartitionEndpoint | None]:
    """(ErrorCode.none, the endpoint) for a partition hosted here, else the code
    that sends the client elsewhere and None."""
    endpoint = host.endpoint(topic, partition)
    if endpoint is not None:
        return ErrorCode.none, endpoint
    known = host.image().topics.get(topic)
    if known is None or not 0 <= partition < len(known.partitions):
        return ErrorCode.unknown_topic_or_partition, None
    return ErrorCode.not_leader_or_follower, None


async def on_partition(host: PartitionHost, topic: str, partition: int,
                       call: Callable[[PartitionEndpoint], Awaitable[Any]]) -> tuple[ErrorCode, Any]:
    """(ErrorCode.none, what `call` returned) or (the error's code, None)."""
    code, endpoint = locate(host, topic, partition)
    if endpoint is None:
        return code, None
    try:
        return ErrorCode.none, await call(endpoint)
    except Exception as error:
        return error_code_of(error), None


def leader_epoch_or_none(current_leader_epoch: int) -> int | None:
    """-1 on the wire: the client does not know the epoch (no fencing)."""
    return None if current_leader_epoch < 0 else current_leader_epoch


async def serve_each(host: PartitionHost, work: list[tuple[str, Any]], partition_of: Callable[[Any], int],
                     call: Callable[[PartitionEndpoint, Any], Awaitable[Any]],
                     decision: Decision = ALLOWED) -> list[tuple[str, Any, ErrorCode, Any]]:
    """Every (topic, requested partition) of a request at once: (topic, the request's
    partition entry, error code, result), in the request's order. A partition the
    request's authorization `decision` refuses is answered its error, never called."""
    if not decision.allows_all:
        refused = [(topic, wanted, error_code_of(decision.refusal_of(ResourceType.TOPIC, topic)))
                   for topic, wanted in work]
        served = iter(await serve_each(host, [(topic, wanted) for (topic, wanted, code) in refused
                                              if code is ErrorCode.none], partition_of, call))
        return [next(served) if code is ErrorCode.none else (topic, wanted, code, None)
                for topic, wanted, code in refused]
    if len(work) == 1:   # what rafka's followers and consumers send: no task for the gather
        (topic, wanted), = work
        code, result = await on_partition(host, topic, partition_of(wanted), lambda endpoint: call(endpoint, wanted))
        return [(topic, wanted, code, result)]
    results = await asyncio.gather(*(
        on_partition(host, topic, partition_of(wanted), lambda endpoint, wanted=wanted: call(endpoint, wanted))
        for topic, wanted in work))
    return [(topic, wanted, code, result) for (topic, wanted), (code, result) in zip(work, results)]


def by_topic(rows: Iterable[tuple[str, Any]]) -> dict[str, list]:
    """Answer entries grouped under their topic, topics in first-seen order."""
    grouped: dict[str, list] = {}
    for topic, entry in rows:
        grouped.setdefault(topic, []).append(entry)
    return grouped
