"""Reading a partition's records from offset A up to B from its leader: the one
way rafka's one-shot readers read a range (a coordinator's load of its
`__consumer_offsets` partition, the lag sampler's and the admin's record-time
lookups, a Spark read task). The pipelined readers (a follower's fetch loop, a
consumer's fetcher) keep loops of their own; all build and read their Fetches
with protocol.fetching.

A `RangeRead` is the position of one read, pure: `request_for(leader_epoch)` is a
consumer's Fetch at the position (max_wait 0), `read(response)` takes the answer
and moves the position past its last batch. `read_range` / `read_range_async`
drive it with an `ask(request_for, read)` the caller binds: protocol.retry's
`ask_leader` (retried, for a Spark task), `ask_leader_once` /
`ask_leader_once_async` (one attempt: the caller retries or does not).

Invariants:
  * a chunk's `in_range()` records have offsets in [its from_offset, end): the
    leader answers whole batches, the first may begin below the position and the
    last may end at or past `end`; the read never asks at or past `end`;
  * the position only moves forward, to a batch's next offset: a compacted batch
    keeps its last offset, not its last record, so gaps are stepped over;
  * an answer without records ends the read when the leader's HW is at or past
    `end` (compaction removed all that was left below it), and is
    OFFSET_NOT_AVAILABLE (retriable) when its HW is below `end`: a new leader
    whose HW has not caught up with the end read from the one before.
  * read_committed (`isolation_level`): the leader answers below its last stable
    offset (LSO) and names the aborted transactions; the LSO stands for the HW in
    the rule above, and `handed_out()` leaves out what a read_committed consumer
    does not hand out (core.isolation), markers at both levels.
`end_offset=None` reads up to the HW each answer reports: done at the first
answer without records (a lookup that stops at its first record).
Callers: actors.coordinator, actors.consumer_lag, client.admin, spark_bridge.source.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator

from rafka.core.errors import OffsetNotAvailable
from rafka.core.isolation import IsolationLevel, batches_to_skip
from rafka.core.records import BatchHeader, Record, decode_batches, iter_batches
from rafka.protocol import fetching
from rafka.protocol.hot_writers import WrittenBody


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One answer's records: whole batches, as the leader sent them."""
    records: bytes
    from_offset: int             # the position it was asked at
    end_offset: int | None
    high_watermark: int
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    aborted_transactions: tuple[tuple[int, int], ...] = ()   # (producer id, first offset), read_committed

    def handed_out(self) -> bytes:
        """The whole batches a consumer at the read's isolation level hands out:
        without control batches, and read_committed without aborted
        transactions' batches. The answer's bytes themselves when none is left out."""
        skipped = batches_to_skip(self.records, isolation_level=self.isolation_level,
                                  aborted_transactions=self.aborted_transactions)
        if not skipped:
            return self.records
        view = memoryview(self.records)
        return b"".join(view[pos:pos + header.size_bytes]
                        for pos, header in iter_batches(self.records, verify_crc=False)
                        if header.base_offset not in skipped)

    def batches_in_range(self) -> Iterator[tuple[BatchHeader, list[Record]]]:
        """Each batch's header with its decoded records at from_offset .. end - 1
        (batches with none left out)."""
        for header, records in decode_batches(self.records):
            kept = [r for r in records
                    if r.offset >= self.from_offset and (self.end_offset is None or r.offset < self.end_offset)]
            if kept:
                yield header, kept

    def in_range(self, *, skip_control: bool = False) -> Iterator[Record]:
        """The decoded records at from_offset .. end - 1; `skip_control`: without
        the records of control batches (transaction markers)."""
        for header, records in decode_batches(self.records):
            if skip_control and header.is_control:
                continue
            for record in records:
                if record.offset >= self.from_offset and (self.end_offset is None or record.offset < self.end_offset):
                    yield record


class RangeRead:
    def __init__(self, *, topic: str, partition: int, start_offset: int, end_offset: int | None,
                 max_bytes: int, isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> None:
        self.topic, self.partition = topic, partition
        self.isolation_level = isolation_level
        self.position = start_offset
        self.end_offset = end_offset
        self.max_bytes = max_bytes
        self._ended = False   # an answer without records, its HW at or past the end

    @property
    def done(self) -> bool:
        return self._ended or (self.end_offset is not None and self.position >= self.end_offset)

    def request_for(self, leader_epoch: int) -> WrittenBody:
        return fetching.fetch_request(
            topic=self.topic, partition=self.partition, replica_id=fetching.CONSUMER_REPLICA_ID,
            fetch_offset=self.position, leader_epoch=leader_epoch, last_fetched_epoch=fetching.NO_EPOCH,
            log_start_offset=-1, max_bytes=self.max_bytes, max_wait_ms=0, isolation_level=self.isolation_level)

    def read(self, response) -> Chunk | None:
        """The answer's chunk, the position past its last batch; None once nothing
        is left below the end; its error raised as the typed KafkaError."""
        answer = fetching.leader_answer(response, topic=self.topic, partition=self.partition)
        if not answer.records:
            readable_end, what = ((answer.last_stable_offset, "LSO")
                                  if self.isolation_level is IsolationLevel.READ_COMMITTED
                                  else (answer.high_watermark, "HW"))
            if self.end_offset is not None and readable_end < self.end_offset:
                raise OffsetNotAvailable(f"{self.topic}-{self.partition}: the leader's {what} {readable_end} "
                                         f"is below the end {self.end_offset} read at offset {self.position}")
            self._ended = True
            return None
        *_, (_, last) = iter_batches(answer.records, verify_crc=False)
        if last.next_offset <= self.position:   # must not happen: a leader answers from the fetch offset on
            raise AssertionError(f"{self.topic}-{self.partition}: asked at {self.position}, the leader answered "
                                 f"batches ending at {last.next_offset}")
        chunk = Chunk(answer.records, self.position, self.end_offset, answer.high_watermark, self.isolation_level,
                      answer.aborted_transactions)
        next_offset = last.next_offset if self.end_offset is None else min(last.next_offset, self.end_offset)
        self.position = max(self.position, next_offset)
        return chunk


def read_range(ask, cursor: RangeRead) -> Iterator[Chunk]:
    """The chunks of `cursor`'s range, each asked with `ask(request_for, read)`."""
    while not cursor.done:
        chunk = ask(cursor.request_for, cursor.read)
        if chunk is not None:
            yield chunk


async def read_range_async(ask, cursor: RangeRead) -> AsyncIterator[Chunk]:
    """The same, with `await ask(request_for, read)`."""
    while not cursor.done:
        chunk = await ask(cursor.request_for, cursor.read)
        if chunk is not None:
            yield chunk
