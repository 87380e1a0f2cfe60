"""A transaction coordinator's marker sender over the wire (Kafka's
TransactionMarkerChannelManager): WriteTxnMarkers to each partition's leader,
the markers for one leader node in one request, every leader asked at once.

The answers keep core.transaction_shard's sender contract, per partition: None
(the marker is written and replicated), PARTITION_DELETED (the partition is in
no image any more: its topic was deleted; Kafka drops it from the markers), or
the typed KafkaError (the leader's answer; LEADER_NOT_AVAILABLE when the image
names no leader; the connection's NETWORK_EXCEPTION or REQUEST_TIMED_OUT for
every partition of a leader that did not answer). The shard retries the
retriable ones (protocol.retry's rule: a KafkaError marked retriable); after
any, the image is asked afresh (`refresh()`) before the next send, so a moved
leader is found.

A `__consumer_offsets` partition's marker goes to that partition's group
coordinator instead (its own node), which writes it behind its own writes and
applies it to the transaction's pending offsets (handlers.write_txn_markers);
COORDINATOR_NOT_AVAILABLE while it has no endpoint, retried.

Invariant: one request per leader node per call, at most `max_markers_per_request`
markers in each (Kafka's requests hold every marker queued for a broker; a bound
keeps one from growing past a frame). No Ray import: the actor hands in its image
and how to refresh it. Caller: actors.transaction_coordinator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64

from rafka.core.actor_names import OFFSETS_TOPIC
from rafka.core.cluster_image import ClusterImage
from rafka.core.errors import KafkaError, RequestTimedOut, UnknownTopicOrPartition, error_for_code
from rafka.core.transaction_shard import PARTITION_DELETED, TxnMarker
from rafka.protocol.entities import load_request_schema, make, module_of
from rafka.protocol.retry import kafka_cause

API_KEY = 27
VERSION = 1   # every node serves 1-2; 2 adds the transaction version, which rafka's markers do not use
MAX_MARKERS_PER_REQUEST = 1_000
TopicPartition = tuple[str, int]


def write_txn_markers_request(markers: list[TxnMarker]):
    """One WriteTxnMarkers request: one entry per transaction (producer id, epoch,
    result, coordinator epoch), its partitions by topic."""
    request_type = load_request_schema(API_KEY, VERSION)
    module = module_of(request_type)
    by_transaction: dict[tuple[int, int, int, bool], dict[str, list[int]]] = {}
    for marker in markers:
        key = (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.commit)
        by_transaction.setdefault(key, {}).setdefault(marker.topic, []).append(marker.partition)
    return make(request_type, markers=tuple(
        make(module.WritableTxnMarker, producer_id=i64(producer_id), producer_epoch=i16(producer_epoch),
             transaction_result=commit, coordinator_epoch=i32(coordinator_epoch), topics=tuple(
                 make(module.WritableTxnMarkerTopic, name=topic, partition_indexes=tuple(i32(p) for p in partitions))
                 for topic, partitions in topics.items()))
        for (producer_id, producer_epoch, coordinator_epoch, commit), topics in by_transaction.items()))


def write_txn_markers_answers(response, markers: list[TxnMarker]) -> dict[TopicPartition, KafkaError | None]:
    """Each marker's partition: None or its typed error; a partition the answer
    does not name gets REQUEST_TIMED_OUT (retried)."""
    codes = {(int(result.producer_id), topic.name, int(p.partition_index)): p.error_code
             for result in response.markers for topic in result.topics for p in topic.partitions}
    answers: dict[TopicPartition, KafkaError | None] = {}
    for marker in markers:
        code = codes.get((marker.producer_id, marker.topic, marker.partition))
        tp = (marker.topic, marker.partition)
        if code is None:
            answers[tp] = RequestTimedOut(f"the leader did not answer the marker of {marker.topic}-{marker.partition}")
        else:
            answers[tp] = None if code == ErrorCode.none else error_for_code(
                code, f"writing the marker of producer {marker.producer_id} to {marker.topic}-{marker.partition}")
    return answers


class WireMarkerSender:
    def __init__(self, nodes, *, image: Callable[[], ClusterImage], refresh: Callable[[], Awaitable[None]],
                 request_timeout_ms: int, max_markers_per_request: int = MAX_MARKERS_PER_REQUEST) -> None:
        """`nodes`: protocol.network.NodeConnections on the caller's loop;
        `image()`: the newest cluster image (internal endpoints); `refresh()`:
        asks for a newer one."""
        self._nodes = nodes
        self._image = image
        self._refresh = refresh
        self.request_timeout_ms = request_timeout_ms
        self.max_markers_per_request = max_markers_per_request
        self._stale = False

    async def __call__(self, markers: list[TxnMarker]) -> dict:
        if self._stale:
            self._stale = False
            try:
                await self._refresh()
            except Exception:   # the image held is used; the leaders' answers say what is wrong
                self._stale = True
        image = self._image()
        answers: dict[TopicPartition, object] = {}
        by_leader: dict[tuple[str, int], list[TxnMarker]] = {}
        for marker in markers:
            try:
                address, _ = image.leader_endpoint(marker.topic, marker.partition)
                if marker.topic == OFFSETS_TOPIC:
                    address = image.coordinator_endpoint(marker.partition)
            except UnknownTopicOrPartition:
                answers[(marker.topic, marker.partition)] = PARTITION_DELETED
                continue
            except KafkaError as error:   # no leader yet: retried
                answers[(marker.topic, marker.partition)] = error
                continue
            by_leader.setdefault(address, []).append(marker)
        requests = [(address, group[i:i + self.max_markers_per_request])
                    for address, group in by_leader.items()
                    for i in range(0, len(group), self.max_markers_per_request)]
        results = await asyncio.gather(*(self._send(address, group) for address, group in requests))
        for result in results:
            answers.update(result)
        if any(isinstance(answer, KafkaError) and answer.retriable for answer in answers.values()):
            self._stale = True
        return answers

    async def _send(self, address: tuple[str, int], markers: list[TxnMarker]) -> dict:
        try:
            response = await self._nodes.request(address, write_txn_markers_request(markers),
                                                 timeout_ms=self.request_timeout_ms)
        except Exception as error:
            cause = kafka_cause(error)
            if isinstance(cause, KafkaError):
                failed = cause
            elif isinstance(error, TimeoutError):
                failed = RequestTimedOut(f"{address[0]}:{address[1]} did not answer the markers in time")
            else:
                raise
            return {(m.topic, m.partition): failed for m in markers}
        return write_txn_markers_answers(response, markers)
