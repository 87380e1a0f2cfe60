"""A partition as the node hosting it answers requests: the calls of the partition
APIs (Produce, Fetch, ListOffsets, OffsetForLeaderEpoch) over a core
PartitionReplica, with Kafka's waiting, on the hosting process's event loop.

What waits, and until when (Kafka's DelayedProduce and DelayedFetch purgatories):
  * an acks=all produce, until the HW passes its last offset; it fails with
    NOT_LEADER_OR_FOLLOWER if the replica loses leadership (or its epoch changes)
    first, REQUEST_TIMED_OUT at request_timeout_ms, and, once replicated, with
    NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below min.insync.replicas;
  * a follower's fetch with nothing to return, up to max_wait_ms, until the LEO
    moves (a diverging answer returns at once);
  * a consumer's fetch with nothing below the HW (read_committed: the LSO), up
    to max_wait_ms;
  * a transaction marker (WriteTxnMarkers), like an acks=all produce;
  * a DeleteRecords, until the low watermark (the ISR's lowest log start offset)
    reaches the offset asked for (Kafka's DelayedDeleteRecords), at most its
    timeout_ms: then REQUEST_TIMED_OUT; NOT_LEADER_OR_FOLLOWER if leadership is
    lost first. While one waits, every follower fetch wakes it (a follower tells
    its log start with each fetch); a follower fetch whose log start is behind the
    leader's returns at once, so the followers learn of a deletion without
    waiting out their long poll.
DescribeProducers (`describe_producers`) waits for nothing: it reads the replica's
producer state in any role, as Kafka's does.
Every waiter is woken by `notify()`, which the host calls after any change of
role, ISR or log. Here, an append wakes the followers' fetches (the LEO moved)
and, only if it moved the HW too (an ISR of the leader alone), everyone; a
follower's fetch that moves the HW wakes the produces and consumers' fetches,
not the other followers' fetches: they wait for data, which a HW move is not
(Kafka's tryCompleteDelayedFetch after an append, tryCompleteDelayedRequests
after a HW increase).

Invariants: the core replica is touched only on the event loop, between awaits;
`replica()` is asked again on every call and raises the host's typed error when
the replica cannot serve (offline log dir, shut down), so nothing here runs on a
replica that is gone; the parked counts (`parked_produces`,
`parked_follower_fetches`, `parked_consumer_fetches`, `parked_deletes`) are the purgatory sizes a
host reports; the traffic counters (Kafka's BrokerTopicMetrics: `messages_in`,
`bytes_in` at a leader's append, `bytes_out` and `messages_out` of consumers'
fetches, `replication_bytes_out` of followers') only grow, and are counted per
batch from what the call already holds (an append's offsets, a batch header's
record count), never per record.

Callers: actors.replica (its Kafka node's partition), tests.core.protocol_node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from rafka.core.errors import NotLeaderOrFollower, OutOfOrderSequence, RequestTimedOut
from rafka.core.producer_state import UNVERIFIED, ActiveProducer
from rafka.core.records import count_records
from rafka.core.replica import (ACKS_ALL, READ_UNCOMMITTED, FetchResult, PartitionReplica, ProduceResult,
                                Role)

logger = logging.getLogger(__name__)

# How long a marker may wait for the ISR (Kafka's coordinator sends markers with the
# broker's request.timeout.ms, 30 s); the coordinator retries one that timed out.
MARKER_TIMEOUT_MS = 30_000



def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclasses.dataclass(frozen=True)
class Appended:
    """A batch appended by a Produce, waiting for its acks."""
    result: ProduceResult
    acks: int
    leader_epoch: int     # the leadership it was appended under


@dataclasses.dataclass(frozen=True)
class DeletedRecords:
    """A DeleteRecords' outcome on the leader: the low watermark reached, and
    whether the ISR did not reach the offset in time (REQUEST_TIMED_OUT, with the
    low watermark as it stood, as Kafka's DelayedDeleteRecords answers)."""
    low_watermark: int
    timed_out: bool = False


class HostedPartition:
    def __init__(self, replica: Callable[[], PartitionReplica]) -> None:
        self._replica = replica
        self._waiters: set[asyncio.Future] = set()              # produces, consumers' fetches
        self._follower_waiters: set[asyncio.Future] = set()     # followers' fetches
        self.parked_produces = 0
        self.parked_follower_fetches = 0
        self.parked_consumer_fetches = 0
        self.parked_deletes = 0
        self.messages_in = 0
        self.bytes_in = 0
        self.messages_out = 0
        self.bytes_out = 0
        self.replication_bytes_out = 0

    @property
    def replica(self) -> PartitionReplica:
        """The core replica, if it can serve (else the host's typed error)."""
        return self._replica()

    def notify(self) -> None:
        """Wake every waiter: the LEO, HW or role changed."""
        self._wake_all(followers=True, others=True)

    def _wake_all(self, *, followers: bool, others: bool) -> None:
        woken = []
        if followers:
            woken.append(self._follower_waiters)
            self._follower_waiters = set()
        if others:
            woken.append(self._waiters)
            self._waiters = set()
        for waiters in woken:
            for waiter in waiters:
                _wake(waiter)

    async def wait_for_change(self, timeout_s: float, *, follower: bool = False) -> None:
        """Until the next wake-up of its kind (a follower's fetch: the LEO moved or
        notify(); anything else: the HW moved or notify()) or `timeout_s`. A bare
        future and one timer: the waiting of every parked request, so no task per
        wait (asyncio.wait_for made one, and its wake-ups were a large part of the
        leader's time)."""
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        waiters = self._follower_waiters if follower else self._waiters
        waiters.add(waiter)
        timer = loop.call_later(max(0.0, timeout_s), _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            waiters.discard(waiter)

    async def produce(self, records: bytes, acks: int, request_timeout_ms: int = 30_000) -> ProduceResult:
        return await self.acknowledged(self.append(records, acks), request_timeout_ms)

    def start_verification(self, producer_id: int, sequence: int, epoch: int) -> object | None:
        """A transactional Produce's guard (core.replica.start_verification)."""
        return self._replica().start_verification(producer_id, sequence, epoch)

    def append(self, records: bytes, acks: int, verification_guard: object | None = UNVERIFIED) -> Appended:
        """A Produce's first part, done at once and in request order: the append."""
        replica = self._replica()
        high_watermark = replica.log.high_watermark
        try:
            result = replica.append(records, acks=acks, verification_guard=verification_guard)
        except OutOfOrderSequence as error:   # the client fails the batch: say what this leader held
            logger.warning("%s: %s", replica.name, error)
            raise
        if not result.duplicate:   # a produce's batches have dense offsets: one per record
            self.messages_in += result.last_offset - result.base_offset + 1
            self.bytes_in += len(records)
        self._wake_all(followers=True, others=replica.log.high_watermark != high_watermark)
        return Appended(result, acks, replica.leader_epoch)

    def append_txn_marker(self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                          commit: bool) -> Appended:
        """A WriteTxnMarkers entry's append (core.replica.append_txn_marker); its
        acks (all, as Kafka's coordinator writes markers) through `acknowledged`."""
        replica = self._replica()
        high_watermark = replica.log.high_watermark
        result = replica.append_txn_marker(producer_id=producer_id, producer_epoch=producer_epoch,
                                           coordinator_epoch=coordinator_epoch, commit=commit)
        self._wake_all(followers=True, others=replica.log.high_watermark != high_watermark)
        return Appended(result, ACKS_ALL, replica.leader_epoch)

    async def append_marker(self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                            request_timeout_ms: int = MARKER_TIMEOUT_MS) -> ProduceResult:
        """WriteTxnMarkers' call (handlers.write_txn_markers): the marker appended and
        replicated to the ISR, or the typed error that refused it."""
        appended = self.append_txn_marker(producer_id=producer_id, producer_epoch=producer_epoch,
                                          coordinator_epoch=coordinator_epoch, commit=commit)
        return await self.acknowledged(appended, request_timeout_ms)

    async def acknowledged(self, appended: Appended, request_timeout_ms: int) -> ProduceResult:
        """A Produce's second part: its acks (for acks=all, the HW past the batch).
        Leadership is checked before the HW, as Kafka's checkEnoughReplicasReachOffset:
        a deposed leader's HW is a follower's, and may pass an offset its log holds
        another leader's record at."""
        result = appended.result
        if appended.acks != ACKS_ALL:
            return result
        replica = self._replica()
        deadline = asyncio.get_running_loop().time() + request_timeout_ms / 1000
        while True:
            if replica.role is not Role.LEADER or replica.leader_epoch != appended.leader_epoch:
                raise NotLeaderOrFollower(f"{replica.name} lost leadership before offset "
                                          f"{result.last_offset} was replicated")
            if replica.is_committed(result.last_offset):
                break
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise RequestTimedOut(f"{replica.name}: offset {result.last_offset} not replicated "
                                      f"to the ISR within {request_timeout_ms} ms")
            self.parked_produces += 1
            try:
                await self.wait_for_change(remaining)
            finally:
                self.parked_produces -= 1
        replica.check_enough_replicas_after_append()
        return result

    async def fetch(self, follower_id: int, fetch_offset: int, leader_epoch: int, max_bytes: int,
                    max_wait_ms: int, last_fetched_epoch: int = -1, log_start_offset: int = -1,
                    min_bytes: int = 1) -> FetchResult:
        """A follower's fetch (replica Fetch on the wire); `log_start_offset`: the
        follower's (-1 not said). Parked until it can answer `min_bytes` (Kafka's
        replica.fetch.min.bytes; rafka's followers ask 1) or `max_wait_ms` passed."""
        deadline = asyncio.get_running_loop().time() + max_wait_ms / 1000
        while True:
            replica = self._replica()
            high_watermark = replica.log.high_watermark
            result = replica.fetch_for_follower(follower_id=follower_id, fetch_offset=fetch_offset,
                                                leader_epoch=leader_epoch, max_bytes=max_bytes,
                                                last_fetched_epoch=last_fetched_epoch,
                                                log_start_offset=log_start_offset)
            if replica.log.high_watermark != high_watermark or self.parked_deletes:
                self._wake_all(followers=False, others=True)   # acks=all produces, consumers' fetches, deletes
            remaining = deadline - asyncio.get_running_loop().time()
            behind_log_start = 0 <= log_start_offset < result.log_start_offset
            if (len(result.records) >= min_bytes or result.diverging_epoch is not None or behind_log_start
                    or remaining <= 0):
                self.replication_bytes_out += len(result.records)
                return result
            self.parked_follower_fetches += 1
            try:
                await self.wait_for_change(remaining, follower=True)
            finally:
                self.parked_follower_fetches -= 1

    async def consumer_fetch(self, fetch_offset: int, max_bytes: int, max_wait_ms: int,
                             leader_epoch: int | None = None,
                             isolation_level: int = READ_UNCOMMITTED, min_bytes: int = 1) -> FetchResult:
        """A consumer's fetch: only batches below the HW (read_committed: the LSO,
        with the aborted transactions among them). The LSO moves only when the
        HW does or a marker is appended, and both wake the waiters here. Parked
        until it can answer `min_bytes` (the consumer's fetch.min.bytes) or
        `max_wait_ms` passed: then it answers what there is (Kafka's DelayedFetch)."""
        deadline = asyncio.get_running_loop().time() + max_wait_ms / 1000
        while True:
            result = self._replica().fetch_for_consumer(fetch_offset=fetch_offset, max_bytes=max_bytes,
                                                        leader_epoch=leader_epoch, isolation_level=isolation_level)
            remaining = deadline - asyncio.get_running_loop().time()
            if len(result.records) >= min_bytes or remaining <= 0:
                if result.records:
                    self.bytes_out += len(result.records)
                    self.messages_out += count_records(result.records)
                return result
            self.parked_consumer_fetches += 1
            try:
                await self.wait_for_change(remaining)
            finally:
                self.parked_consumer_fetches -= 1

    async def delete_records(self, offset: int, timeout_ms: int) -> DeletedRecords:
        """DeleteRecords for this partition: the log start moved (core.replica
        .delete_records raises what refuses it), then the wait for the ISR."""
        replica = self._replica()
        requested, low_watermark = replica.delete_records(offset)
        leader_epoch = replica.leader_epoch
        self._wake_all(followers=True, others=False)   # parked follower fetches answer the new log start
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        while low_watermark < requested:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return DeletedRecords(low_watermark, timed_out=True)
            self.parked_deletes += 1
            try:
                await self.wait_for_change(remaining)
            finally:
                self.parked_deletes -= 1
            replica = self._replica()
            if replica.role is not Role.LEADER or replica.leader_epoch != leader_epoch:
                raise NotLeaderOrFollower(f"{replica.name} lost leadership before the deletion below "
                                          f"{requested} reached the ISR")
            low_watermark = replica.low_watermark
        return DeletedRecords(low_watermark)

    async def list_offset(self, timestamp_ms: int, leader_epoch: int | None = None,
                          isolation_level: int = READ_UNCOMMITTED) -> tuple[int, int] | None:
        return self._replica().list_offset(timestamp_ms=timestamp_ms, leader_epoch=leader_epoch,
                                           isolation_level=isolation_level)

    async def end_offset_for_epoch(self, requested_epoch: int, leader_epoch: int | None) -> tuple[int, int]:
        return self._replica().end_offset_for_epoch(requested_epoch=requested_epoch, leader_epoch=leader_epoch)

    async def describe_producers(self) -> list[ActiveProducer]:
        """DescribeProducers: this replica's producer state, leader or follower (Kafka's
        Partition.activeProducerState reads the local log in either role)."""
        return self._replica().producers.active_producers()
