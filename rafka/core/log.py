"""A partition replica's log on disk: segments, offsets, HW, recovery, retention,
compaction.

Invariants (checked where they are written):
  log_start_offset <= high_watermark <= log_end_offset
  recovery_point <= log_end_offset; everything below it is fsynced
  segment base offsets increase; only the last segment (the active one) is written
  offsets are dense from log_start_offset for `delete` topics; batches keep their
  offsets forever, compaction only removes records
  the leader-epoch cache never names an offset >= log_end_offset
  log_start_offset <= last_stable_offset <= high_watermark: the LSO is the HW held
  back to the first offset of the earliest transaction that is open, or whose
  marker is not below the HW yet (core.producer_state)
  `producers` has applied every batch below log_end_offset (its map end offset);
  each ABORT marker of a transaction with data here has its entry in the
  .txnindex of the segment that holds the marker

Directory layout: `<base:020d>.log/.index/.timeindex/.txnindex` per segment, the
`leader-epoch-checkpoint`, `recovery-point-checkpoint` holding the HW, the
recovery point and the log start offset, and producer snapshots
`<offset:020d>.snapshot`: one at each roll (the new segment's base) and at close
(the LEO), deleted with the segments below them and by truncation above them.
Opening loads the latest snapshot and replays only the batches after it (a
segment whose .txnindex is missing is replayed from a snapshot at or before it,
or from the log's first batch, and its index rebuilt). Compaction writes `<base>.log.cleaned`,
renames it to `.log.swap` once complete, then over `.log`; recovery at open
finishes or discards those.

Durability comes from replication, as in Kafka: appends are not fsynced; a
segment is fsynced when it rolls and the log when it closes. A crash can lose the
unflushed tail, which recovery at open cuts at the first torn or corrupt batch.

Hot path: appends and reads move whole batches as bytes. The leader rewrites only
each batch's first 16 bytes (base offset, leader epoch); no record is decoded
except on compacted topics, whose records must each carry a key.
Caller: the partition replica actor, from one thread; only `clean` (compaction's
read-only middle step) may run on another.
"""

from __future__ import annotations

import bisect
import dataclasses
import fcntl
import os
import random
from pathlib import Path

from rafka.core import checkpoint
from rafka.core.clock import SystemClock
from rafka.core.config import TopicConfig
from rafka.core.errors import (CorruptRecord, InvalidConfig, InvalidRecord, KafkaStorageError, OffsetOutOfRange,
                               RecordListTooLarge, RecordTooLarge)
from rafka.core.leader_epoch import LeaderEpochCache
from rafka.core.producer_state import (ProducerStateTable, snapshot_offsets, snapshot_path,
                                       write_snapshot)
from rafka.core.records import (RecordInput, BatchHeader, EndTxnMarker, decode_batches,
                                encode_batch, end_txn_marker, iter_batches, read_header, restamp,
                                with_log_append_time)
from rafka.core.segment import Segment, segment_file_name
from rafka.core.txn_index import AbortedTxn

CHECKPOINT_FILE = "recovery-point-checkpoint"
LOCK_FILE = ".lock"
# Written by a clean close after the last flush and checkpoint; an open that finds
# it trusts every segment (no CRC scan of the active one) and removes it, so a
# crash after that open recovers as usual (Kafka's .kafka_cleanshutdown).
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"
# Kafka's broker defaults: producer.id.expiration.ms (1 day) and how often it is applied.
PRODUCER_ID_EXPIRATION_MS = 86_400_000
PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = 600_000


@dataclasses.dataclass(frozen=True)
class AppendResult:
    base_offset: int          # offset of the first record appended
    last_offset: int          # offset of the last record appended
    max_timestamp: int
    batch_count: int
    size_bytes: int
    log_append_time_ms: int = -1


@dataclasses.dataclass(frozen=True)
class CompactionResult:
    segments_cleaned: int
    records_removed: int
    bytes_before: int
    bytes_after: int


@dataclasses.dataclass(frozen=True)
class CompactionPlan:
    segments: tuple[Segment, ...]   # sealed, wholly below the HW, past min.compaction.lag.ms
    next_base_offset: int           # base offset of the first segment after them
    now_ms: int
    truncations: int                # the log's truncation count when planned: a plan outlived by one is void
    aborted: tuple[AbortedTxn, ...] = ()   # aborted transactions overlapping the segments: their data goes


@dataclasses.dataclass(frozen=True)
class CleanedSegment:
    segment: Segment
    cleaned_bytes: bytes
    records_removed: int
    tombstones_kept_until_ms: int | None   # when a kept tombstone may go (delete.retention.ms)


class PartitionLog:
    def __init__(self, directory: str | os.PathLike, config: TopicConfig | None = None,
                 clock=None, *, rng: random.Random | None = None,
                 producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
                 producer_id_expiration_check_interval_ms: int = PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
                 drop_behind_bytes: int = 0) -> None:
        """`drop_behind_bytes` (the controller's log_drop_behind_bytes): each segment asks
        the kernel to drop from the page cache what it wrote more than this many bytes
        ago (core.segment); 0: the kernel keeps what it likes, as Kafka leaves it."""
        if drop_behind_bytes < 0:
            raise InvalidConfig(f"log_drop_behind_bytes must be >= 0, got {drop_behind_bytes}")
        self.drop_behind_bytes = drop_behind_bytes
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = _lock_directory(self.directory)
        self.config = config or TopicConfig.from_dict({})
        self.clock = clock or SystemClock()
        self.rng = rng or random.Random()         # segment.jitter.ms draws
        self._active_roll_jitter_ms = 0           # the active segment's share of segment.jitter.ms
        self.epochs = LeaderEpochCache(self.directory)
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.high_watermark = 0
        self.recovery_point = 0
        self._checkpointed: tuple[int, int, int] | None = None   # (HW, recovery point, log start) last written
        self.bytes_cut_at_recovery = 0
        self._cleaned_through = 0                 # compaction: segments below this were cleaned
        self._tombstones_due_ms: int | None = None  # compaction: the first kept tombstone may go after this
        self._truncations = 0                     # compaction: a plan made before a truncation is void
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self._producers_expired_at_ms = self.clock.now_ms()
        self.producers = ProducerStateTable()
        self.producer_batches_replayed = 0        # batches the last load of producer state read (not in a snapshot)
        self._open()
        self._load_producer_state()

    # --- state --------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def active_segment(self) -> Segment:
        return self._segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    @property
    def latest_epoch(self) -> int:
        return self.epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """KIP-101: (epoch, end offset) for a follower's OffsetsForLeaderEpoch."""
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    def update_high_watermark(self, offset: int) -> bool:
        """Set the HW (clamped into [log start, LEO]); True if it changed. The replica
        decides the value (leader and follower rules live there)."""
        offset = min(max(offset, self.log_start_offset), self.log_end_offset)
        if offset == self.high_watermark:
            return False
        self.high_watermark = offset
        self.producers.on_high_watermark(offset)
        return True

    @property
    def last_stable_offset(self) -> int:
        """What a read_committed consumer may read below (Kafka's LSO), never below
        the log start offset: a transaction open across it (its first records
        deleted by DeleteRecords or retention) holds the LSO at the log start,
        as Kafka's maybeIncrementFirstUnstableOffset does."""
        return max(self.log_start_offset, self.producers.last_stable_offset(self.high_watermark))

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions whose data overlaps [fetch_offset,
        upper_bound_offset), oldest marker first: what a read_committed fetch of
        that range returns (Kafka's LocalLog.collectAbortedTransactions)."""
        found: list[AbortedTxn] = []
        index = max(0, bisect.bisect_right(self._bases, fetch_offset) - 1)
        for segment in self._segments[index:]:
            txns, complete = segment.txn_index.collect(fetch_offset, upper_bound_offset)
            found += txns
            if complete:
                break
        return found

    # --- opening and recovery -----------------------------------------------------

    def _open(self) -> None:
        self._finish_interrupted_compaction()
        marker = self.directory / CLEAN_SHUTDOWN_FILE
        self.opened_after_clean_shutdown = marker.exists()
        if self.opened_after_clean_shutdown:
            marker.unlink()
            checkpoint.fsync_dir(self.directory)
        entries = checkpoint.read_entries(self.directory / CHECKPOINT_FILE) or []
        saved = {name: int(value) for name, value in entries}
        bases = sorted(int(p.name[:20]) for p in self.directory.glob("*.log")
                       if len(p.name) == 24 and p.name[:20].isdigit())
        if not bases:
            start = saved.get("log_start_offset", 0)
            self._add_segment(Segment.create(self.directory, start, **self._segment_args()))
            self.log_start_offset = self.high_watermark = self.recovery_point = start
            self._write_checkpoint()
            return
        recovery_point = saved.get("recovery_point", 0)
        first_to_recover = max(0, bisect.bisect_right(bases, recovery_point) - 1)
        if self.opened_after_clean_shutdown and "recovery_point" in saved:
            first_to_recover = len(bases)   # flushed and closed: nothing to scan
        for i, base in enumerate(bases):
            if i < first_to_recover:
                self._add_segment(Segment.open_trusted(self.directory, base, **self._segment_args()))
                continue
            segment, cut_bytes = Segment.open_recovering(self.directory, base, **self._segment_args())
            self._add_segment(segment)
            self.bytes_cut_at_recovery += cut_bytes
            if cut_bytes:  # everything after a cut is unreachable: drop later segments
                for later in bases[i + 1:]:
                    Segment(self.directory, later, **self._segment_args()).delete()
                break
        self.log_start_offset = min(max(saved.get("log_start_offset", 0), self._bases[0]),
                                    self.log_end_offset)
        self.high_watermark = min(max(saved.get("high_watermark", 0), self.log_start_offset),
                                  self.log_end_offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        self.epochs.truncate_from_start(self.log_start_offset)
        self.active_segment.flush()
        self.recovery_point = self.log_end_offset
        self._write_checkpoint()

    def _load_producer_state(self) -> None:
        """Producer state as of the LEO: the latest usable snapshot, then the batches
        after it. Snapshots above the LEO (a cut tail) or below the first segment
        go; a corrupt one is deleted and an older one tried. A segment whose
        .txnindex is missing caps the snapshot used at its base, so that the replay
        passes its markers and rebuilds its index."""
        first_base, leo = self._bases[0], self.log_end_offset
        offsets = []
        for offset in snapshot_offsets(self.directory):
            if first_base <= offset <= leo:
                offsets.append(offset)
            else:
                snapshot_path(self.directory, offset).unlink(missing_ok=True)
        missing = [s.base_offset for s in self._segments if not s.txn_index.loaded_from_file]
        replay_from = min(missing, default=leo)
        table = None
        for offset in reversed([o for o in offsets if o <= replay_from]):
            path = snapshot_path(self.directory, offset)
            try:
                table = ProducerStateTable.from_snapshot_bytes(path.read_bytes(), map_end_offset=offset)
                break
            except (CorruptRecord, OSError):
                path.unlink(missing_ok=True)
        self.producers = table if table is not None else ProducerStateTable(first_base)
        self.producer_batches_replayed = self._replay_producers(self.producers.map_end_offset)
        for segment in self._segments:
            if not segment.txn_index.loaded_from_file:
                segment.txn_index.persist()
        self.producers.expire(self.clock.now_ms(), self.producer_id_expiration_ms)

    def _replay_producers(self, from_offset: int) -> int:
        """Apply every batch from `from_offset` on to the producer state, adding to
        each segment's .txnindex the aborted transactions it lacks (entries
        already there, from before a restart, are not added twice). Returns the
        number of batches read."""
        replayed = 0
        index = max(0, bisect.bisect_right(self._bases, from_offset) - 1)
        for segment in self._segments[index:]:
            for header, marker in segment.batches_with_markers(from_offset):
                replayed += 1
                completed = self.producers.on_append(header, marker)
                if (completed is not None and completed.aborted
                        and completed.last_offset > segment.txn_index.last_offset):
                    segment.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                                        completed.last_offset, completed.last_stable_offset))
        self.producers.map_end_offset = self.log_end_offset
        return replayed

    def _apply_to_producers(self, headers: list[BatchHeader], markers: dict[int, EndTxnMarker | None]) -> None:
        """Just-appended batches (in the active segment) into the producer state;
        `markers` by base offset for the control batches among them."""
        producers, txn_index = self.producers, self.active_segment.txn_index
        for header in headers:
            completed = producers.on_append(header, markers.get(header.base_offset) if header.is_control else None)
            if completed is not None and completed.aborted:
                txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                            completed.last_offset, completed.last_stable_offset))
        now_ms = self.clock.now_ms()
        if now_ms - self._producers_expired_at_ms >= self.producer_id_expiration_check_interval_ms:
            self._producers_expired_at_ms = now_ms
            producers.expire(now_ms, self.producer_id_expiration_ms)

    def take_producer_snapshot(self) -> None:
        """A producer snapshot at the LEO, unless one is there already."""
        if not snapshot_path(self.directory, self.log_end_offset).exists():
            write_snapshot(self.directory, self.producers, self.log_end_offset)

    def _finish_interrupted_compaction(self) -> None:
        for leftover in self.directory.glob("*.cleaned"):
            leftover.unlink()
        for leftover in self.directory.glob("*.tmp"):
            leftover.unlink()
        for swap in self.directory.glob("*.log.swap"):  # complete: cleaned data replaces the old
            base = int(swap.name[:20])
            for suffix in (".index", ".timeindex"):
                (self.directory / segment_file_name(base, suffix)).unlink(missing_ok=True)
            os.replace(swap, self.directory / segment_file_name(base, ".log"))

    def reconfigure(self, config: TopicConfig) -> None:
        """The topic was altered (IncrementalAlterConfigs / AlterConfigs): every
        check reads `self.config` when it runs, so from the next append, read,
        retention check or cleaner pass on the new values hold: cleanup.policy
        (keyless records refused or taken, retention and cleaning on or off),
        max.message.bytes, message.timestamp.type, segment.bytes, segment.ms,
        segment.index.bytes, max.compaction.lag.ms, retention.*, the cleaner's
        settings. Two values belong to a segment, as Kafka's LogSegment holds
        them, and change with the next segment: its index.interval.bytes and its
        share of segment.jitter.ms (UnifiedLog.updateConfig swaps the config and
        leaves segments alone)."""
        self.config = config

    def _segment_args(self) -> dict:
        return {"index_interval_bytes": self.config.index_interval_bytes,
                "created_ms": self.clock.now_ms(), "drop_behind_bytes": self.drop_behind_bytes}

    def _add_segment(self, segment: Segment) -> None:
        """`segment` becomes the active one; it draws its own roll jitter, as each of
        Kafka's segments does (LocalLog.roll: config.randomSegmentJitter)."""
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._active_roll_jitter_ms = self.config.random_segment_jitter_ms(self.rng)

    def _write_checkpoint(self) -> None:
        if not (self.log_start_offset <= self.high_watermark <= self.log_end_offset):
            raise RuntimeError(f"invariant broken: log start {self.log_start_offset} <= HW "
                               f"{self.high_watermark} <= LEO {self.log_end_offset}")
        written = (self.high_watermark, self.recovery_point, self.log_start_offset)
        checkpoint.write_entries(self.directory / CHECKPOINT_FILE, [
            ("high_watermark", written[0]),
            ("recovery_point", written[1]),
            ("log_start_offset", written[2]),
        ])
        self._checkpointed = written

    def checkpoint(self) -> None:
        """Persist HW, recovery point and log start offset (the replica calls this
        periodically, as Kafka's checkpoint threads do). Unchanged since the last
        write: nothing to do (an idle replica's file and its two fsyncs every
        interval were pure cost)."""
        if self._checkpointed != (self.high_watermark, self.recovery_point, self.log_start_offset):
            self._write_checkpoint()

    # --- appending ----------------------------------------------------------------

    def append_as_leader(self, records, leader_epoch: int) -> AppendResult:
        """Append the batches in `records`, giving them offsets from the LEO and the
        leader's epoch. All batches are validated before any is written: bad input
        raises and changes nothing."""
        view = memoryview(records)
        batches = self._validate(view)
        now_ms = self.clock.now_ms()
        log_append_time = self.config.message_timestamp_type == "LogAppendTime"
        if leader_epoch > self.epochs.latest_epoch:
            self.epochs.assign(leader_epoch, self.log_end_offset)
        total_bytes = sum(h.size_bytes for _, h in batches)
        next_offset = self.log_end_offset
        pieces: list = []
        headers: list[BatchHeader] = []
        markers: dict[int, EndTxnMarker | None] = {}
        for position, header in batches:
            batch = view[position:position + header.size_bytes]
            if log_append_time:
                batch = memoryview(with_log_append_time(batch, now_ms))
                header = read_header(batch)
            if header.is_control:
                markers[next_offset] = end_txn_marker(batch, 0, header)
            pieces.append(restamp(batch, next_offset, leader_epoch))
            pieces.append(batch[16:])
            headers.append(header._replace(base_offset=next_offset, partition_leader_epoch=leader_epoch))
            next_offset += header.last_offset_delta + 1
        self._maybe_roll(total_bytes, headers)
        self.active_segment.append(pieces, headers)
        self._apply_to_producers(headers, markers)
        return AppendResult(headers[0].base_offset, headers[-1].last_offset,
                            max(h.max_timestamp for h in headers), len(headers), total_bytes,
                            now_ms if log_append_time else -1)

    def append_as_follower(self, records) -> AppendResult:
        """Append batches fetched from the leader, offsets and epochs as they are.
        They must start at or after the LEO (compacted logs have gaps) and increase."""
        view = memoryview(records)
        batches = self._validate(view, from_leader=True)
        previous_next = self.log_end_offset
        for _, header in batches:
            if header.base_offset < previous_next:
                raise OffsetOutOfRange(f"fetched batch at {header.base_offset} is below the log "
                                       f"end offset {previous_next}")
            previous_next = header.next_offset
        headers = [h for _, h in batches]
        self._maybe_roll(sum(h.size_bytes for h in headers), headers)
        for header in headers:
            if header.partition_leader_epoch > self.epochs.latest_epoch:
                self.epochs.assign(header.partition_leader_epoch, header.base_offset)
        markers = {header.base_offset: end_txn_marker(view, position, header)
                   for position, header in batches if header.is_control}
        self.active_segment.append([view], headers)
        self._apply_to_producers(headers, markers)
        return AppendResult(headers[0].base_offset, headers[-1].last_offset,
                            max(h.max_timestamp for h in headers), len(headers), len(view))

    def _validate(self, view: memoryview, from_leader: bool = False) -> list[tuple[int, BatchHeader]]:
        if len(view) == 0:
            raise InvalidRecord("no record batch to append")
        if len(view) > self.config.segment_bytes:
            raise RecordListTooLarge(f"{len(view)} bytes is more than segment.bytes "
                                     f"({self.config.segment_bytes})")
        batches = list(iter_batches(view, verify_crc=True))
        for _, header in batches:
            if header.size_bytes > self.config.max_message_bytes and not from_leader:
                raise RecordTooLarge(f"batch of {header.size_bytes} bytes is larger than "
                                     f"max.message.bytes ({self.config.max_message_bytes})")
            if not from_leader and header.record_count != header.last_offset_delta + 1:
                raise InvalidRecord(f"a produced batch must have dense offset deltas "
                                    f"({header.record_count} records, last delta "
                                    f"{header.last_offset_delta})")
        if self.config.compacted and not from_leader:
            # The one per-record check on the append path, as in Kafka: a compacted
            # topic cannot hold a record without a key.
            for header, records in decode_batches(view):
                if header.is_control:
                    continue
                keyless = [index for index, r in enumerate(records) if r.key is None]
                if keyless:   # Kafka's message; the directory is named <topic>-<partition>
                    raise InvalidRecord.rejected_records([(index, f"Compacted topic cannot accept message without "
                                                                  f"key in topic partition {self.directory.name}")
                                                          for index in keyless])
        return batches

    def _maybe_roll(self, incoming_bytes: int, incoming: list[BatchHeader]) -> None:
        """Kafka's LogSegment.shouldRoll, on append only (a segment does not roll by
        time without an append, as in Kafka): full by bytes or index, offsets past
        int32, or its first batch older than max_segment_ms less its jitter, measured
        in record time (the incoming max timestamp minus the first batch's) when the
        records carry timestamps, else by the clock since the segment was created."""
        segment = self.active_segment
        if segment.size_bytes == 0:
            return
        max_timestamp = max(h.max_timestamp for h in incoming)
        rolling_base = segment.first_batch_max_timestamp
        if rolling_base is not None and rolling_base >= 0:
            waited_ms = max_timestamp - rolling_base
        else:
            waited_ms = self.clock.now_ms() - segment.created_ms
        index_full = (segment.index_entry_count + len(incoming)) * 8 > self.config.segment_index_bytes
        if (segment.size_bytes + incoming_bytes > self.config.segment_bytes
                or waited_ms > self.config.max_segment_ms - self._active_roll_jitter_ms
                or index_full
                or not segment.relative_offset_fits(incoming[-1].last_offset)):
            self.roll()

    def roll(self) -> None:
        """Seal the active segment (fsync) and start a new one at the LEO."""
        base = self.log_end_offset
        self.active_segment.seal()
        self._add_segment(Segment.create(self.directory, base, **self._segment_args()))
        self.recovery_point = base
        self._write_checkpoint()
        self.take_producer_snapshot()

    # --- reading ------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Whole batches from the one holding `offset`: up to `max_bytes` (at least
        one batch, however large, so a consumer always progresses: a `max_bytes` of
        0, which the Java consumer allows, reads that one, as Kafka's minOneMessage),
        none whose last offset is >= `max_offset` (the HW, for consumers). b"" at
        the end. OffsetOutOfRange outside [log start offset, LEO]."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRange(f"offset {offset} is outside [{self.log_start_offset}, "
                                   f"{self.log_end_offset}]")
        max_bytes = max(1, max_bytes)
        index = max(0, bisect.bisect_right(self._bases, offset) - 1)
        for segment in self._segments[index:]:
            data = segment.read(offset, max_bytes, max_offset)
            if data is not None:
                return data
        return b""

    def batch_headers(self):
        """Every batch header, oldest first (no record is decoded)."""
        for segment in self._segments:
            yield from segment.batch_headers()

    def offset_for_timestamp(self, target_ms: int, max_offset: int | None = None) -> tuple[int, int, int] | None:
        """(offset, timestamp, its batch's leader epoch) of the first record whose
        timestamp is >= `target_ms`, in offset order; None if no record at or after
        the log start (and below `max_offset`, when given) has one."""
        for segment in self._segments:
            if segment.max_timestamp < target_ms or segment.next_offset <= self.log_start_offset:
                continue
            found = segment.find_offset_for_timestamp(target_ms, self.log_start_offset)
            if found is not None:
                if max_offset is not None and found[0] >= max_offset:
                    return None
                return found
        return None

    def offset_of_max_timestamp(self, max_offset: int) -> tuple[int, int, int] | None:
        """(offset, timestamp, its batch's leader epoch) of the first record with
        the largest timestamp in the log (Kafka's MAX_TIMESTAMP: the first segment
        holding it, its log start not considered), or None when the log is empty
        or that record is at or past `max_offset`."""
        holding = [segment for segment in self._segments if segment.size_bytes]
        if not holding:
            return None
        found = max(holding, key=lambda segment: segment.max_timestamp).find_max_timestamp()
        return found if found is not None and found[0] < max_offset else None

    # --- truncation ---------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove everything from the batch holding `offset` on (a follower cutting a
        divergent tail, KIP-101). The LEO becomes that batch's base offset."""
        if offset >= self.log_end_offset:
            # No record to remove, but an epoch this replica assigned at its LEO when
            # it led without appending (Kafka's UnifiedLog.truncateTo does the same):
            # left in place, it would be sent as the last fetched epoch and diverge
            # from the leader's log on every fetch (KIP-320).
            self.epochs.truncate_from_end(self.log_end_offset)
            return
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        index = max(0, bisect.bisect_right(self._bases, offset) - 1)
        for segment in self._segments[index + 1:]:
            segment.delete()
        del self._segments[index + 1:], self._bases[index + 1:]
        self.active_segment.truncate_to(offset)
        self._after_truncation()
        self._load_producer_state()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start an empty log at `offset` (a follower whose
        fetch offset fell below the leader's log start)."""
        for segment in self._segments:
            segment.delete()
        self._segments, self._bases = [], []
        self._add_segment(Segment.create(self.directory, offset, **self._segment_args()))
        self.log_start_offset = offset
        self.epochs.clear()
        self._after_truncation()
        for snapshot in snapshot_offsets(self.directory):
            snapshot_path(self.directory, snapshot).unlink(missing_ok=True)
        self.producers = ProducerStateTable(offset)

    def _after_truncation(self) -> None:
        self._truncations += 1
        self._cleaned_through = min(self._cleaned_through, self.log_end_offset)
        leo = self.log_end_offset
        self.epochs.truncate_from_end(leo)
        self.high_watermark = min(max(self.high_watermark, self.log_start_offset), leo)
        self.recovery_point = min(self.recovery_point, leo)
        self._write_checkpoint()

    # --- retention ----------------------------------------------------------------

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up to `offset` (Kafka's UnifiedLog
        .maybeIncrementLogStartOffset): DeleteRecords on the leader, and on a
        follower the leader's log start from its Fetch answers. Records below it
        are no longer read, listed or counted; every segment wholly below it goes
        at once (Kafka's deleteLogStartOffsetBreachedSegments, a retention pass
        later there); the active segment always stays. OffsetOutOfRange above the
        HW (records not yet committed cannot be deleted). True if it moved."""
        if offset > self.high_watermark:
            raise OffsetOutOfRange(f"cannot move the log start offset to {offset}: it is above the "
                                   f"high watermark {self.high_watermark}")
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        self.epochs.truncate_from_start(offset)
        holding = bisect.bisect_right(self._bases, offset) - 1   # the segment holding `offset`: kept
        if holding > 0:
            self._delete_first_segments(holding)
        else:
            self._write_checkpoint()
        return True

    def _delete_first_segments(self, count: int) -> None:
        """Delete the `count` oldest segments (never the active one) and the
        producer snapshots below what is left; the checkpoint records the log start."""
        if not 0 < count < len(self._segments):
            raise RuntimeError(f"cannot delete {count} of {len(self._segments)} segments")
        for segment in self._segments[:count]:
            segment.delete()
        del self._segments[:count], self._bases[:count]
        self.log_start_offset = max(self.log_start_offset, self._bases[0])
        self.epochs.truncate_from_start(self.log_start_offset)
        self._write_checkpoint()
        for snapshot in snapshot_offsets(self.directory):   # those of the deleted segments (Kafka's, too)
            if snapshot < self._bases[0]:
                snapshot_path(self.directory, snapshot).unlink(missing_ok=True)

    def enforce_retention(self) -> int:
        """Delete whole non-active segments wholly below the HW that are past
        `retention.ms` (by their max timestamp) or beyond `retention.bytes`; move the
        log start offset. Returns the number of segments deleted. Only when
        cleanup.policy has delete (alone or with compact)."""
        if not self.config.deletes_by_retention:
            return 0
        now_ms = self.clock.now_ms()
        excess_bytes = self.size_bytes - self.config.retention_bytes
        deletable = 0
        for i, segment in enumerate(self._segments[:-1]):
            if self._segments[i + 1].base_offset > self.high_watermark:
                break
            expired = (self.config.retention_ms >= 0
                       and now_ms - segment.max_timestamp > self.config.retention_ms)
            oversized = self.config.retention_bytes >= 0 and excess_bytes - segment.size_bytes >= 0
            if not (expired or oversized):
                break
            excess_bytes -= segment.size_bytes
            deletable += 1
        if deletable == 0:
            return 0
        self._delete_first_segments(deletable)
        return deletable

    # --- compaction ---------------------------------------------------------------

    def compact(self) -> CompactionResult:
        """cleanup.policy=compact: in non-active segments wholly below the HW and older
        than min.compaction.lag.ms, keep only the newest record of each key; drop
        tombstones once their segment is older than delete.retention.ms. Kept records
        keep their offsets; a batch keeps its last offset. The three steps below, at
        once; a replica runs the middle one on a thread (`clean` only reads)."""
        plan = self.plan_compaction(force=True)
        if plan is None:
            return CompactionResult(0, 0, 0, 0)
        return self.apply_compaction(plan, self.clean(plan))

    def plan_compaction(self, *, force: bool = False) -> CompactionPlan | None:
        """The cleanable segments when the cleaner should clean them now, else None.
        Kafka's LogCleanerManager decides, per log: clean when the dirty ratio
        (dirty bytes / (clean + dirty) over the cleanable range) is above
        min.cleanable.dirty.ratio, or when a dirty record is older than
        max.compaction.lag.ms (KIP-354) and there are dirty bytes to clean. rafka
        adds one reason: a kept tombstone whose delete.retention.ms passed (Kafka's
        cleaner re-reads clean segments on each pass; rafka's reads the dirty ones).
        `force` plans anyway. The cleaner checkpoint (`_cleaned_through`, Kafka's
        first dirty offset) is kept in memory: after a restart every cleanable
        segment is dirty again, so the first pass cleans."""
        if not self.config.compacted:
            return None
        now_ms = self.clock.now_ms()
        cleanable: list[Segment] = []
        # Below the LSO, not just the HW (Kafka's firstUncleanableDirtyOffset): an
        # open transaction's records are not known to be kept or aborted yet.
        stable = self.last_stable_offset
        for i, segment in enumerate(self._segments[:-1]):
            if (self._segments[i + 1].base_offset > stable
                    or now_ms - segment.max_timestamp < self.config.min_compaction_lag_ms):
                break
            cleanable.append(segment)
        if not cleanable:
            return None
        next_base_offset = self._segments[len(cleanable)].base_offset
        tombstones_due = self._tombstones_due_ms is not None and now_ms > self._tombstones_due_ms
        if not (force or tombstones_due or self._cleaning_due(cleanable, now_ms)):
            return None
        aborted = tuple(self.aborted_transactions(cleanable[0].base_offset, next_base_offset))
        return CompactionPlan(tuple(cleanable), next_base_offset, now_ms, self._truncations, aborted)

    def _cleaning_due(self, cleanable: list[Segment], now_ms: int) -> bool:
        """LogCleanerManager.grabFilthiestCompactedLog's test for one log."""
        first_dirty_offset = max(self._cleaned_through, self.log_start_offset)
        clean_bytes = sum(s.size_bytes for s in self._segments if s.base_offset < first_dirty_offset)
        dirty_bytes = sum(s.size_bytes for s in cleanable if s.base_offset >= first_dirty_offset)
        if dirty_bytes == 0:
            return False
        dirty_ratio = dirty_bytes / (clean_bytes + dirty_bytes)
        # maxCompactionDelay: the first batch timestamps of every dirty non-active
        # segment (cleanable or not yet), those that carry one.
        first_timestamps_ms = [s.first_batch_max_timestamp for s in self._segments[:-1]
                               if s.base_offset >= first_dirty_offset and s.first_batch_max_timestamp is not None
                               and s.first_batch_max_timestamp > 0]
        must_clean_by_lag = bool(first_timestamps_ms) and (
            min(first_timestamps_ms) < now_ms - self.config.max_compaction_lag_ms)
        return must_clean_by_lag or dirty_ratio > self.config.min_cleanable_dirty_ratio

    def clean(self, plan: CompactionPlan) -> list[CleanedSegment]:
        """The planned segments' cleaned bytes. Only reads sealed segments (pread), so
        it may run on another thread while the log appends; nothing changes on disk.
        Transactions, as Kafka's cleaner: control batches (markers) are kept
        whole and are in no key's map; the batches of aborted transactions go and
        are in no key's map either, so an aborted record never shadows a
        committed one."""
        aborted = plan.aborted

        def drops(header: BatchHeader) -> bool:
            return (header.is_transactional and not header.is_control
                    and any(txn.producer_id == header.producer_id
                            and txn.first_offset <= header.base_offset <= txn.last_offset for txn in aborted))

        latest_offset_by_key: dict[bytes, int] = {}
        for segment in plan.segments:
            for header, _, records in segment.iter_batches_with_records():
                if header.is_control or drops(header):
                    continue
                # A keyless record (written before the topic became compacted) is in no
                # map entry, so it goes: Kafka's cleaner drops records without a key.
                for record in records:
                    if record.key is not None:
                        latest_offset_by_key[record.key] = record.offset
        cleaned = []
        for segment in plan.segments:
            tombstones_go_at_ms = segment.max_timestamp + self.config.delete_retention_ms
            cleaned_bytes, removed, tombstones_kept = self._clean_segment(
                segment, latest_offset_by_key, drop_tombstones=plan.now_ms > tombstones_go_at_ms, drops=drops)
            cleaned.append(CleanedSegment(segment, cleaned_bytes, removed,
                                          tombstones_go_at_ms if tombstones_kept else None))
        return cleaned

    def apply_compaction(self, plan: CompactionPlan, cleaned: list[CleanedSegment]) -> CompactionResult:
        """Swap the cleaned segments in (crash-safe renames). After a truncation since
        the plan nothing is applied: a planned segment may have been cut, or cut and
        written again as the same object, and its cleaned bytes would bring back what
        the truncation removed."""
        if plan.truncations != self._truncations:
            return CompactionResult(0, 0, 0, 0)
        removed = before = after = 0
        for result in cleaned:
            index = next((i for i, s in enumerate(self._segments) if s is result.segment), None)
            if index is None or index == len(self._segments) - 1:
                continue
            before += result.segment.size_bytes
            after += len(result.cleaned_bytes)
            removed += result.records_removed
            if result.records_removed:
                self._swap_in(index, result.cleaned_bytes)
        due = [r.tombstones_kept_until_ms for r in cleaned if r.tombstones_kept_until_ms is not None]
        if plan.next_base_offset < self._cleaned_through and self._tombstones_due_ms is not None:
            due.append(self._tombstones_due_ms)   # a shorter pass (the HW went down): keep the later segments' deadline
        self._tombstones_due_ms = min(due) if due else None
        self._cleaned_through = max(self._cleaned_through, plan.next_base_offset)
        return CompactionResult(len(cleaned), removed, before, after)

    @staticmethod
    def _clean_segment(segment: Segment, latest_offset_by_key: dict[bytes, int],
                       drop_tombstones: bool, drops) -> tuple[bytes, int, bool]:
        """(cleaned bytes, records removed, whether a tombstone was kept)."""
        out: list[bytes] = []
        removed = 0
        tombstones_kept = False
        for header, batch, records in segment.iter_batches_with_records():
            if header.is_control:
                out.append(batch)
                continue
            if drops(header):
                removed += len(records)
                continue
            kept = [r for r in records if latest_offset_by_key.get(r.key) == r.offset
                    and not (drop_tombstones and r.value is None)]
            removed += len(records) - len(kept)
            tombstones_kept = tombstones_kept or any(r.value is None for r in kept)
            if not kept:
                continue
            if len(kept) == len(records):
                out.append(batch)
                continue
            out.append(encode_batch(
                [RecordInput(r.value, r.key, r.timestamp_ms, r.headers) for r in kept],
                base_offset=header.base_offset, partition_leader_epoch=header.partition_leader_epoch,
                producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence, attributes=header.attributes,
                offset_deltas=[r.offset - header.base_offset for r in kept],
                last_offset_delta=header.last_offset_delta))
        return b"".join(out), removed, tombstones_kept

    def _swap_in(self, index: int, cleaned_bytes: bytes) -> None:
        """Replace segment `index` by `cleaned_bytes`, crash-safely (.cleaned -> .swap
        -> .log; an interrupted swap is completed at open)."""
        old = self._segments[index]
        cleaned = old.log_path.with_name(old.log_path.name + ".cleaned")
        with open(cleaned, "wb") as f:
            f.write(cleaned_bytes)
            f.flush()
            os.fsync(f.fileno())
        swap = old.log_path.with_name(old.log_path.name + ".swap")
        os.replace(cleaned, swap)
        checkpoint.fsync_dir(self.directory)
        old.delete(keep_txn_index=True)
        os.replace(swap, old.log_path)
        checkpoint.fsync_dir(self.directory)
        self._segments[index] = Segment.open_recovering(self.directory, old.base_offset,
                                                        **self._segment_args())[0]
        self._segments[index].seal()

    # --- closing ------------------------------------------------------------------

    def flush(self) -> None:
        self.active_segment.flush()
        self.recovery_point = self.log_end_offset
        self._write_checkpoint()

    def close(self, *, clean_shutdown: bool = False) -> None:
        """Flush, checkpoint and close. `clean_shutdown`: also leave the marker that
        lets the next open skip the recovery scan (a planned stop). A producer
        snapshot at the LEO lets the next open skip replaying batches."""
        self.flush()
        self.take_producer_snapshot()
        for segment in self._segments:
            segment.close()
        if clean_shutdown:
            with open(self.directory / CLEAN_SHUTDOWN_FILE, "w") as f:
                f.flush()
                os.fsync(f.fileno())
            checkpoint.fsync_dir(self.directory)
        self._segments, self._bases = [], []
        self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = -1

    def delete(self) -> None:
        """Remove the log's files (the topic was deleted)."""
        for segment in self._segments:
            segment.delete()
        self._segments, self._bases = [], []
        self._unlock()
        for path in self.directory.iterdir():
            path.unlink()
        self.directory.rmdir()


def _lock_directory(directory: Path) -> int:
    """Hold an exclusive lock on the log directory for the life of the log: two
    replicas (or processes) writing one log would corrupt it silently."""
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise KafkaStorageError(f"log directory {directory} is in use by another replica") from None
    return fd
