"""The writes of one `__consumer_offsets` partition's coordinator, in the order
they were decided: one append in flight at a time, carrying every write queued
while the one before it was in flight.

Why one append at a time, batched (Kafka's CoordinatorRuntime accumulates a
shard's records the same way): the log order is then the order writes were
queued, and an append that failed can be retried (nothing was sent after it)
without ever landing behind a later write of the same offsets. A commit's caller
therefore only has to queue its records in order; it does not hold its group's
lock while they replicate, and the commits of one member that arrive while an
append is in flight go out together in the next. Pipelined appends would need a
rule for each failure (fail every later write, or reorder the log); this needs
none, and costs at most one round trip of queueing.

Invariants:
  writes are appended, and their records replayed, in the order `submit` was
  called; a write is replayed exactly when its append was acknowledged, and a
  failed append replays nothing and fails every write it carried
  at most `max_queued_writes` writes are queued or in flight (more are refused
  COORDINATOR_NOT_AVAILABLE, retriable); an append carries at most
  `max_batch_records` records, unless one write alone has more (a write is never
  split: its records are acked together)
  `settled()` returns once every write queued before it was answered, whether or
  not its caller still waits
  an append carries writes of one kind only: plain records, or one producer's
  transactional records (a TxnOffsetCommit: the batch carries the producer's id
  and epoch), or one transaction marker (alone: it is a control batch)
  `marker_unanswered(producer_id)` holds from a marker's `submit` until its
  append is answered

Pure asyncio over an injected append (the actor's acks=all Produce, with its own
retries until offsets.commit.timeout.ms). Caller: core.coordinator_shard only.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Awaitable, Callable

from rafka.core.errors import CoordinatorNotAvailable
from rafka.core.offset_store import Record


@dataclasses.dataclass(frozen=True)
class TransactionalBatch:
    """Records written for a producer's transaction (TxnOffsetCommit): a batch
    of their own, transactional, with the producer's id and epoch, so the
    transaction's marker closes them (verified before they are queued:
    core.coordinator_shard, KIP-890)."""
    producer_id: int
    producer_epoch: int


@dataclasses.dataclass(frozen=True)
class TxnMarkerWrite:
    """A transaction's COMMIT or ABORT marker, written to the partition
    (WriteTxnMarkers for __consumer_offsets goes through its coordinator)."""
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


# What an append writes: None for plain records.
WriteKind = TransactionalBatch | TxnMarkerWrite | None
# acks=all append to the partition, `append(records)` or, for another kind,
# `append(records, kind)` (a marker: no records); returns once they are below the
# HW, raises (a KafkaError) if they could not be written
Append = Callable[..., Awaitable[None]]


class WriteQueue:
    def __init__(self, append: Append, replay: Callable[[list[Record], WriteKind], None], *,
                 max_queued_writes: int = 10_000, max_batch_records: int = 128) -> None:
        self._append = append
        self._replay = replay
        self.max_queued_writes = max_queued_writes
        self.max_batch_records = max_batch_records
        self._queued: collections.deque[tuple[list[Record], WriteKind, asyncio.Future]] = collections.deque()
        self._in_flight = 0          # writes carried by the append in flight
        self._last: asyncio.Future | None = None
        self._appender: asyncio.Task | None = None
        # producer id -> its markers queued or in flight (`marker_unanswered`)
        self._markers_unanswered: collections.Counter[int] = collections.Counter()

    def submit(self, records: list[Record], kind: WriteKind = None) -> asyncio.Future:
        """Queues `records` behind every write submitted before; the future is done
        once they are acknowledged and replayed (`replay(records, kind)`; or
        failed, with the append's error). Synchronous, so callers decide and queue
        under one lock."""
        loop = asyncio.get_running_loop()
        if len(self._queued) + self._in_flight >= self.max_queued_writes:
            raise CoordinatorNotAvailable(f"{len(self._queued) + self._in_flight} writes are queued for "
                                          f"__consumer_offsets, the most the coordinator keeps: retry")
        written = self._last = loop.create_future()
        self._queued.append((records, kind, written))
        if isinstance(kind, TxnMarkerWrite):
            self._markers_unanswered[kind.producer_id] += 1
        if self._appender is None:
            self._appender = loop.create_task(self._append_queued())
        # Shielded: a caller cancelled while waiting (its client went away) must not
        # cancel the write's own future, which `settled()` waits on until the write
        # is really answered.
        return asyncio.shield(written)

    def marker_unanswered(self, producer_id: int) -> bool:
        """Whether a marker of the producer is queued or in flight: its transaction
        may be ending, though its offsets are still pending."""
        return producer_id in self._markers_unanswered

    async def settled(self) -> None:
        """Returns once every write submitted so far was answered (acked or failed)."""
        last = self._last
        if last is not None and not last.done():
            await asyncio.wait([last])

    async def _append_queued(self) -> None:
        try:
            while self._queued:
                batch = [self._queued.popleft()]
                records, kind = list(batch[0][0]), batch[0][1]
                while (self._queued and not isinstance(kind, TxnMarkerWrite) and self._queued[0][1] == kind
                       and len(records) + len(self._queued[0][0]) <= self.max_batch_records):
                    write = self._queued.popleft()
                    batch.append(write)
                    records += write[0]
                self._in_flight = len(batch)
                try:
                    await (self._append(records) if kind is None else self._append(records, kind))
                except Exception as error:   # every write it carried fails; nothing replays
                    for _, _, written in batch:
                        if not written.done():
                            written.set_exception(error)
                    continue
                finally:
                    self._in_flight = 0
                    if isinstance(kind, TxnMarkerWrite):
                        self._markers_unanswered[kind.producer_id] -= 1
                        if not self._markers_unanswered[kind.producer_id]:
                            del self._markers_unanswered[kind.producer_id]
                for write_records, _, written in batch:
                    self._replay(write_records, kind)
                    if not written.done():
                        written.set_result(None)
        finally:
            self._appender = None
