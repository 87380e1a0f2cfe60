"""A coordinator's load of its internal partition (a group coordinator's
`__consumer_offsets`, a transaction coordinator's `__transaction_state`): read
from the partition's leader, from the log start to the end that leader answered,
and replay every record, decoded by the topic's schema (`decode(key, value)`).
Control batches (transaction markers: a transaction's offsets in
`__consumer_offsets` end with one) are not records of the schema: with
`replay_marker` (the group coordinator's) each COMMIT or ABORT marker is
replayed as `replay_marker(producer_id, commit=)`, and each record as
`replay(key, value, producer_id=)` (of its batch if transactional, else
NO_PRODUCER_ID), in log order, so a transaction's pending offsets come back and
end as they did live; without it (the transaction coordinator's topic holds no
transactions) markers are skipped and records replayed as `replay(key, value)`. No Ray import: the actor hands in how to find the leader and
what else a retry may clear (Ray's errors), so tests drive a load on a fake leader.

Rules (Kafka's CoordinatorLoaderImpl and CoordinatorRuntime):
  * every attempt reads from one leader at one epoch (the end it answered and the
    records it serves come from the same log);
  * an attempt that fails for a reason another attempt may clear (a leader gone,
    fenced or paused, an answer not in time, any error the leader answered, even
    one final elsewhere such as OFFSET_OUT_OF_RANGE when the log start moved, and
    the caller's `may_retry_also`) starts again from a leader looked up afresh
    (`on_retry`), for as long as it fails;
  * a record that does not decode (CorruptRecord: a batch that fails its CRC, a
    key or value that breaks its schema) or that replay refuses fails the load for
    good: the bytes are what the leader's log holds, and reading them again gives
    them again. It is logged at error level and kept (`failure`, `error`); Kafka's
    runtime moves such a partition to FAILED, and its requests get NOT_COORDINATOR,
    until the partition is loaded again at its next leader election:
    `load_again_for(leader_epoch)` says when that is due here.
`leader_epoch`: the epoch of the leader the completed load read from.
Caller: actors.internal_partition (for both coordinator actors), which answers
COORDINATOR_LOAD_IN_PROGRESS while `loaded` is False and `failure` None, and
NOT_COORDINATOR once `failure` is set.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable

from rafka.core.errors import CorruptRecord, KafkaError
from rafka.core.records import NO_PRODUCER_ID, control_record_marker
from rafka.core.replica import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from rafka.protocol import fetching
from rafka.protocol.range_reads import RangeRead, read_range_async
from rafka.protocol.retry import PinnedLeader, ask_leader_once_async, kafka_cause, retry_until_async

LOAD_FETCH_MAX_BYTES = 1 << 20

logger = logging.getLogger(__name__)

# ((host, port) of the partition's leader, its leader epoch)
LeaderLookup = Callable[[], Awaitable[tuple[tuple[str, int], int]]]
# a record's (key, value) bytes -> its decoded (key, value); CorruptRecord if it breaks the schema
Decode = Callable[[bytes | None, bytes | None], tuple]


class PartitionLoad:
    def __init__(self, *, topic: str, partition: int, leader: LeaderLookup, nodes, decode: Decode,
                 replay: Callable, ask_timeout_s: float, retry_backoff_s: float,
                 replay_marker: Callable[..., None] | None = None,
                 may_retry_also: Callable[[BaseException], bool] = lambda error: False,
                 on_retry: Callable[[BaseException], None] = lambda error: None, sleep=asyncio.sleep) -> None:
        self.topic, self.partition = topic, partition
        self._leader, self._nodes, self._decode, self._replay = leader, nodes, decode, replay
        self._replay_marker = replay_marker
        self.ask_timeout_s = ask_timeout_s   # a paused leader must not stall the load past its replacement
        self.retry_backoff_s = retry_backoff_s
        self._may_retry_also, self._on_retry, self._sleep = may_retry_also, on_retry, sleep
        self.loaded = False
        self.position = -1                  # how far the load got, and why it last failed (ping shows both)
        self.error: str | None = None
        self.failure: BaseException | None = None   # set when the load stopped for good
        self._leader_epoch = -1             # of the attempt in progress, or the one that failed or completed

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    def may_retry(self, error: BaseException) -> bool:
        cause = kafka_cause(error)
        if isinstance(cause, CorruptRecord):
            return False
        return isinstance(cause, KafkaError) or isinstance(error, TimeoutError) or self._may_retry_also(error)

    async def run(self) -> None:
        """Loads, retrying by `may_retry`; a final error is kept and logged, not
        raised (nobody awaits the task that runs this)."""
        try:
            await retry_until_async(lambda _remaining_s: self._once(), timeout_s=math.inf,
                                    retry_backoff_s=self.retry_backoff_s, what=f"loading {self.topic}-{self.partition}",
                                    retriable=self.may_retry, on_retry=self._retrying, sleep=self._sleep)
        except Exception as error:
            self.failure = error
            self.error = f"{type(error).__name__}: {error}"
            logger.error("coordinator %d: loading %s-%d failed at offset %d and is not retried until the partition's "
                         "leader epoch moves past %d: %s", self.partition, self.topic, self.partition, self.position,
                         self._leader_epoch, self.error, exc_info=error)

    def load_again_for(self, leader_epoch: int) -> bool:
        """True (and the failure forgotten) if the load failed and the partition now
        has a newer leader epoch: a new leader may serve a log that reads (Kafka
        loads a FAILED partition again at its next election). The caller then runs
        the load again."""
        if self.failure is None or leader_epoch <= self._leader_epoch:
            return False
        self.failure = None
        return True

    def _retrying(self, error: BaseException) -> None:
        self.error = f"{type(error).__name__}: {error}"
        logger.info("coordinator %d: loading failed, retrying: %s", self.partition, error)
        self._on_retry(error)

    async def _once(self) -> None:
        topic, partition = self.topic, self.partition
        address, self._leader_epoch = await self._leader()
        leader = PinnedLeader(address, self._leader_epoch)

        def ask(request_for, read):
            return ask_leader_once_async(leader, self._nodes, topic, partition, request_for, read,
                                         timeout_s=self.ask_timeout_s)

        def offset_at(timestamp_ms: int):
            return ask(lambda leader_epoch: fetching.list_offset_request(
                topic=topic, partition=partition, replica_id=fetching.CONSUMER_REPLICA_ID, leader_epoch=leader_epoch,
                timestamp_ms=timestamp_ms), lambda response: fetching.list_offset_answer(
                    response, topic=topic, partition=partition))
        end, _ = await offset_at(LATEST_TIMESTAMP)
        start, _ = await offset_at(EARLIEST_TIMESTAMP)
        cursor = RangeRead(topic=topic, partition=partition, start_offset=start, end_offset=end,
                           max_bytes=LOAD_FETCH_MAX_BYTES)
        self.position = cursor.position
        async for chunk in read_range_async(ask, cursor):
            for header, records in chunk.batches_in_range():
                if header.is_control:
                    if self._replay_marker is not None:
                        self._replay_markers(header, records)
                    continue
                producer_id = header.producer_id if header.is_transactional else NO_PRODUCER_ID
                for record in records:
                    self._replay_record(record, producer_id)
            self.position = cursor.position
        self.loaded = True
        logger.info("coordinator %d loaded %s-%d up to offset %d", self.partition, topic, partition, end)

    def _replay_record(self, record, producer_id: int) -> None:
        topic, partition = self.topic, self.partition
        try:
            key, value = self._decode(record.key, record.value)
        except CorruptRecord as error:
            raise type(error)(f"{topic}-{partition} at offset {record.offset}: {error.message}") from error
        try:
            if self._replay_marker is None:
                self._replay(key, value)
            else:
                self._replay(key, value, producer_id=producer_id)
        except Exception as error:   # final, whatever it is (Kafka wraps it the same way)
            raise RuntimeError(f"replaying {topic}-{partition} at offset {record.offset} ({key}) failed: "
                               f"{type(error).__name__}: {error}") from error

    def _replay_markers(self, header, records) -> None:
        for record in records:
            marker = control_record_marker(record.key, record.value, offset=record.offset)
            if marker is not None:
                self._replay_marker(header.producer_id, commit=marker.commit)
