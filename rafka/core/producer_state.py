"""Producers as a partition knows them: per producer id, its epoch, its last
appended batches, its open transaction; and the partition's open and completed
transactions, from which the last stable offset (LSO) follows.

The leader checks each batch of an idempotent or transactional producer
(producer id >= 0) before appending it (Kafka's ProducerAppendInfo):
  - epoch older than the known one: INVALID_PRODUCER_EPOCH (what Kafka's
    partitions answer since 2.7; PRODUCER_FENCED is the coordinator's answer)
  - a batch equal (first and last sequence) to one of the last
    BATCHES_KEPT_PER_PRODUCER appended: a duplicate (a retry of a batch whose ack
    was lost); the leader answers with the original offsets and appends nothing
  - a new epoch must start at sequence 0; otherwise the first sequence must
    follow the last one (mod 2^31), else OUT_OF_ORDER_SEQUENCE; a producer this
    partition does not know (new, or expired) may start anywhere (Kafka: its
    records may have gone by retention)
  - a non-transactional batch while the producer's transaction is open:
    INVALID_TXN_STATE
  - a batch without a sequence (NO_SEQUENCE) is a group coordinator's
    TxnOffsetCommit write to `__consumer_offsets` (Kafka appends those with
    AppendOrigin.COORDINATOR, which skips the sequence checks): its epoch is
    checked, its sequence not
and each transaction marker the coordinator has it write (`check_marker`): an
older producer epoch is INVALID_PRODUCER_EPOCH, an older coordinator epoch than
the producer's last marker TRANSACTION_COORDINATOR_FENCED.

Transaction verification (KIP-890 part 1, Kafka's VerificationGuard): before a
producer's first transactional batch of a transaction is appended here, the
leader asks the transaction coordinator whether this partition is in the
producer's open transaction. `start_verification` hands out the producer's
guard (None while its transaction is open here: nothing to ask); `check_verified`
refuses (INVALID_TXN_STATE) a transactional batch of a producer with no open
transaction here unless it comes with the producer's current guard. Any
transactional batch or marker of the producer drops its guard, so a verification
answered before an ABORT marker cannot let a batch in after it (the ABA of
Kafka's ReplicaManager comment). Guards are the leader's alone, kept in memory,
at most one per producer id and MAX_VERIFICATION_GUARDS in all (the oldest goes).
One whose verification failed stays, as Kafka's VerificationStateEntry does: a
verification of the same producer may be in flight with it.

Transactions: a producer's first transactional batch opens its transaction at
that batch's base offset; its COMMIT or ABORT marker closes it. A closed
transaction stays "unreplicated" until the HW passes its marker. The first
unstable offset is the least first offset of the open and unreplicated ones; the
LSO is min(HW, first unstable offset). New transactions start at the LEO, so
`_open_txns` (first offset -> producer id) is in offset order by insertion, and
closed ones join `_unreplicated` in marker order.

Every replica applies `on_append` for the batches in its log (followers too), so
a new leader already knows the producers and transactions. Works on batch
headers, and the one record of a control batch.

Snapshots (`<offset:020d>.snapshot`, Kafka's ProducerSnapshot v1: version int16,
CRC32C uint32 of what follows, entry count int32, entries of producer id int64,
epoch int16, last sequence int32, last offset int64, offset delta int32,
timestamp int64, coordinator epoch int32, current transaction first offset int64):
one entry per kept batch, oldest first (a producer with none: one entry with last
offset -1), so Kafka reads each producer's last batch and rafka all of them.

`active_producers` is DescribeProducers' view of the table (Kafka's
UnifiedLog.activeProducers): per producer its epoch, last sequence, last
timestamp, coordinator epoch and open transaction's first offset, -1 where it
has none; an admin call, read once per request, never on a record's path.
Callers: core.log (which owns the table), from the replica's one thread;
protocol.hosted_partition reads `active_producers` (DescribeProducers).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import struct
from pathlib import Path

from crc32c import crc32c

from rafka.core.errors import (CorruptRecord, InvalidProducerEpoch, InvalidTxnState, OutOfOrderSequence,
                               TransactionCoordinatorFenced)
from rafka.core.records import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader, EndTxnMarker

BATCHES_KEPT_PER_PRODUCER = 5  # Kafka's max.in.flight.requests.per.connection bound for idempotence
MAX_VERIFICATION_GUARDS = 10_000   # producers with a verification started and no batch since, per partition
UNVERIFIED = object()   # an append whose request named no transactional id (a coordinator's own): not checked
SEQUENCE_MODULUS = 2**31
NO_OFFSET = -1
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hIi")           # version, crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_FROM = 6                                    # the CRC covers the bytes after version and crc


@dataclasses.dataclass(frozen=True)
class AppendedBatch:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclasses.dataclass
class ProducerEntry:
    epoch: int
    batches: collections.deque             # of AppendedBatch, newest last
    coordinator_epoch: int = -1            # of the last marker written for this producer
    current_txn_first_offset: int = NO_OFFSET   # the open transaction's first offset; -1: none
    last_timestamp_ms: int = -1            # max timestamp of its last batch (what expiry measures)


@dataclasses.dataclass(frozen=True)
class ActiveProducer:
    """One producer as DescribeProducers answers it (Kafka's ProducerState)."""
    producer_id: int
    producer_epoch: int
    last_sequence: int               # NO_SEQUENCE (-1): no batch kept (only markers, or none yet)
    last_timestamp_ms: int           # of its last batch, control batches too; -1: none
    coordinator_epoch: int           # of its last marker; -1: none written yet
    current_txn_start_offset: int    # its open transaction's first offset; -1: none open


@dataclasses.dataclass(frozen=True)
class CompletedTxn:
    """A transaction closed by a marker (Kafka's CompletedTxn, with the LSO its
    aborted-transaction index entry records)."""
    producer_id: int
    first_offset: int
    last_offset: int          # the marker's offset
    aborted: bool
    last_stable_offset: int   # first offset of the earliest other open transaction, else last_offset + 1


@dataclasses.dataclass(slots=True)
class _Verification:
    """A producer's verification in progress (Kafka's VerificationStateEntry)."""
    guard: object
    lowest_sequence: int
    epoch: int


def _new_batches() -> collections.deque:
    return collections.deque(maxlen=BATCHES_KEPT_PER_PRODUCER)


class ProducerStateTable:
    def __init__(self, map_end_offset: int = 0) -> None:
        self._entries: dict[int, ProducerEntry] = {}
        self._open_txns: dict[int, int] = {}                  # first offset -> producer id, in offset order
        self._unreplicated: collections.deque[CompletedTxn] = collections.deque()   # marker order
        self.map_end_offset = map_end_offset                  # the offset after the last batch applied
        self._verifications: dict[int, _Verification] = {}    # producer id -> its pending one (the leader's)

    # --- checks before an append (the leader) --------------------------------------

    def check(self, header: BatchHeader) -> AppendedBatch | None:
        """Validate a produced data batch. Returns the earlier append if it is a
        duplicate, None if it is new and in order; raises otherwise. While the
        producer's verification is pending, a sequence above the lowest one a
        verification started with is OUT_OF_ORDER_SEQUENCE (Kafka's
        VerificationStateEntry): the batch before it, whose verification failed
        retriable, must land first."""
        duplicate = self._check(header)
        if duplicate is None and self._verifications and header.base_sequence != NO_SEQUENCE:
            verification = self._verifications.get(header.producer_id)
            if verification is not None and header.base_sequence > verification.lowest_sequence:
                raise OutOfOrderSequence(f"producer {header.producer_id} sent sequence {header.base_sequence} "
                                         f"before {verification.lowest_sequence}, whose verification is pending")
        return duplicate

    def _check(self, header: BatchHeader) -> AppendedBatch | None:
        if header.producer_id == NO_PRODUCER_ID:
            return None
        entry = self._entries.get(header.producer_id)
        if entry is None:
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpoch(f"producer {header.producer_id} epoch {header.producer_epoch} "
                                       f"is older than {entry.epoch}")
        if entry.current_txn_first_offset != NO_OFFSET and not header.is_transactional:
            raise InvalidTxnState(f"producer {header.producer_id} sent a non-transactional batch while its "
                                  f"transaction from offset {entry.current_txn_first_offset} is open")
        if header.base_sequence == NO_SEQUENCE:
            return None
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequence(f"producer {header.producer_id} new epoch "
                                         f"{header.producer_epoch} must start at sequence 0")
            return None
        last_sequence = header.last_sequence
        for appended in entry.batches:
            if (appended.first_sequence, appended.last_sequence) == (header.base_sequence, last_sequence):
                return appended
        expected = (entry.batches[-1].last_sequence + 1) % SEQUENCE_MODULUS if entry.batches else 0
        if header.base_sequence != expected:
            kept = ", ".join(f"{b.first_sequence}-{b.last_sequence}@{b.first_offset}" for b in entry.batches)
            raise OutOfOrderSequence(f"producer {header.producer_id} epoch {header.producer_epoch} sent sequence "
                                     f"{header.base_sequence}-{last_sequence}, expected {expected} "
                                     f"(batches kept: {kept or 'none'})")
        return None

    def start_verification(self, producer_id: int, sequence: int, epoch: int) -> object | None:
        """Kafka's maybeStartTransactionVerification: None while the producer's
        transaction is open here (its batches need no verification), else its
        guard, made once and kept until its next transactional batch or marker;
        the verification keeps the lowest sequence it was started with (of the
        newest epoch), which `check` holds later sequences behind."""
        entry = self._entries.get(producer_id)
        if entry is not None and entry.current_txn_first_offset != NO_OFFSET:
            return None
        verifications = self._verifications
        verification = verifications.get(producer_id)
        if verification is None:
            if len(verifications) >= MAX_VERIFICATION_GUARDS:
                del verifications[next(iter(verifications))]   # the oldest: its append, if it comes, is refused
            verification = verifications[producer_id] = _Verification(object(), sequence, epoch)
        elif epoch > verification.epoch:
            verification.epoch, verification.lowest_sequence = epoch, sequence
        elif epoch == verification.epoch:
            verification.lowest_sequence = min(verification.lowest_sequence, sequence)
        return verification.guard

    def check_verified(self, header: BatchHeader, guard: object | None) -> None:
        """A transactional batch appended with verification (its request named a
        transactional id): refused unless the producer's transaction is open here
        or `guard` is the producer's current one."""
        if not header.is_transactional:
            return
        entry = self._entries.get(header.producer_id)
        if entry is not None and entry.current_txn_first_offset != NO_OFFSET:
            return
        verification = self._verifications.get(header.producer_id)
        if guard is None or verification is None or verification.guard is not guard:
            raise InvalidTxnState(f"producer {header.producer_id}: the record was not part of an ongoing "
                                  f"transaction")

    def check_marker(self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Validate a marker the coordinator asks to write (WriteTxnMarkers)."""
        entry = self._entries.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpoch(f"marker for producer {producer_id} at epoch {producer_epoch}, "
                                       f"older than {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFenced(f"marker for producer {producer_id} from coordinator epoch "
                                               f"{coordinator_epoch}, older than {entry.coordinator_epoch}")

    # --- applying what is in the log (every replica) -------------------------------

    def on_append(self, header: BatchHeader, marker: EndTxnMarker | None = None) -> CompletedTxn | None:
        """The batch (with its final offsets) is in the log; `marker` is a control
        batch's (None for an empty one). Returns the transaction it closed, if any."""
        self.map_end_offset = max(self.map_end_offset, header.next_offset)
        producer_id = header.producer_id
        if producer_id == NO_PRODUCER_ID:
            return None
        if header.is_transactional and self._verifications:   # data or marker: the transaction moved
            self._verifications.pop(producer_id, None)
        entry = self._entries.get(producer_id)
        if entry is None:
            entry = self._entries[producer_id] = ProducerEntry(header.producer_epoch, _new_batches())
        elif header.producer_epoch != entry.epoch:   # Kafka's maybeUpdateProducerEpoch
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        entry.last_timestamp_ms = header.max_timestamp
        if header.is_control:
            return self._close_txn(producer_id, entry, header, marker) if marker is not None else None
        entry.batches.append(AppendedBatch(header.base_sequence, header.last_sequence,
                                           header.base_offset, header.last_offset))
        if header.is_transactional and entry.current_txn_first_offset == NO_OFFSET:
            entry.current_txn_first_offset = header.base_offset
            self._open_txns[header.base_offset] = producer_id
        return None

    def _close_txn(self, producer_id: int, entry: ProducerEntry, header: BatchHeader,
                   marker: EndTxnMarker) -> CompletedTxn | None:
        entry.coordinator_epoch = marker.coordinator_epoch
        first_offset = entry.current_txn_first_offset
        if first_offset == NO_OFFSET:   # nothing of it here: no effect on the LSO or the index
            return None
        stable = next((first for first, owner in self._open_txns.items() if owner != producer_id),
                      header.base_offset + 1)
        completed = CompletedTxn(producer_id, first_offset, header.base_offset, not marker.commit, stable)
        del self._open_txns[first_offset]
        entry.current_txn_first_offset = NO_OFFSET
        self._unreplicated.append(completed)
        return completed

    # --- the last stable offset -------------------------------------------------------

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget the completed transactions whose marker the HW passed (Kafka's
        onHighWatermarkUpdated): a follower, whose LSO nobody asks, stays bounded."""
        unreplicated = self._unreplicated
        while unreplicated and unreplicated[0].last_offset < high_watermark:
            unreplicated.popleft()

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction that is open or whose marker
        is not below `high_watermark` yet; None if there is none."""
        self.on_high_watermark(high_watermark)
        unreplicated = self._unreplicated
        first = next(iter(self._open_txns), None)
        if unreplicated:
            earliest = min(txn.first_offset for txn in unreplicated)
            first = earliest if first is None else min(first, earliest)
        return first

    def last_stable_offset(self, high_watermark: int) -> int:
        if not self._open_txns and not self._unreplicated:
            return high_watermark
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None else min(first, high_watermark)

    def open_transactions(self) -> list[tuple[int, int]]:
        """(producer id, first offset) of every open transaction, oldest first."""
        return [(producer_id, first) for first, producer_id in self._open_txns.items()]

    # --- bounds and truncation ----------------------------------------------------------

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Drop producers idle `expiration_ms` or more (by their last batch's
        timestamp) with no open transaction (producer.id.expiration.ms); returns
        how many went."""
        expired = [producer_id for producer_id, entry in self._entries.items()
                   if entry.current_txn_first_offset == NO_OFFSET
                   and now_ms - entry.last_timestamp_ms >= expiration_ms]
        for producer_id in expired:
            del self._entries[producer_id]
        return len(expired)

    def producer_count(self) -> int:
        return len(self._entries)

    def active_producers(self) -> list[ActiveProducer]:
        """Every producer the table holds, by producer id (DescribeProducers)."""
        return [ActiveProducer(producer_id, entry.epoch,
                               entry.batches[-1].last_sequence if entry.batches else NO_SEQUENCE,
                               entry.last_timestamp_ms, entry.coordinator_epoch, entry.current_txn_first_offset)
                for producer_id, entry in sorted(self._entries.items())]

    def unreplicated_count(self) -> int:
        """Completed transactions whose marker the HW has not passed yet."""
        return len(self._unreplicated)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    @classmethod
    def rebuilt_from(cls, headers) -> ProducerStateTable:
        """The table for batches `headers`, oldest first, with no control batch
        (markers need their record: core.log replays those)."""
        table = cls()
        for header in headers:
            table.on_append(header)
        return table

    # --- snapshots ---------------------------------------------------------------------

    def snapshot_bytes(self) -> bytes:
        entries = []
        for producer_id, entry in self._entries.items():
            common = (entry.last_timestamp_ms, entry.coordinator_epoch, entry.current_txn_first_offset)
            if not entry.batches:
                entries.append(_SNAPSHOT_ENTRY.pack(producer_id, entry.epoch, NO_SEQUENCE, NO_OFFSET, 0, *common))
            for batch in entry.batches:
                entries.append(_SNAPSHOT_ENTRY.pack(producer_id, entry.epoch, batch.last_sequence, batch.last_offset,
                                                    batch.last_offset - batch.first_offset, *common))
        body = struct.pack(">i", len(entries)) + b"".join(entries)
        return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body

    @classmethod
    def from_snapshot_bytes(cls, data: bytes, *, map_end_offset: int) -> ProducerStateTable:
        """The table a snapshot holds; CorruptRecord if it does not parse or its
        CRC fails."""
        if len(data) < _SNAPSHOT_HEAD.size:
            raise CorruptRecord(f"producer snapshot of {len(data)} bytes is cut short")
        version, crc, count = _SNAPSHOT_HEAD.unpack_from(data, 0)
        if version != SNAPSHOT_VERSION:
            raise CorruptRecord(f"producer snapshot has version {version}, expected {SNAPSHOT_VERSION}")
        if crc32c(memoryview(data)[_CRC_FROM:]) != crc:
            raise CorruptRecord("producer snapshot failed its CRC")
        if count < 0 or len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
            raise CorruptRecord(f"producer snapshot says {count} entries in {len(data)} bytes")
        table = cls(map_end_offset)
        for (producer_id, epoch, last_sequence, last_offset, offset_delta, timestamp_ms, coordinator_epoch,
             txn_first_offset) in _SNAPSHOT_ENTRY.iter_unpack(memoryview(data)[_SNAPSHOT_HEAD.size:]):
            entry = table._entries.get(producer_id)
            if entry is None:
                entry = table._entries[producer_id] = ProducerEntry(epoch, _new_batches())
            entry.epoch, entry.coordinator_epoch = epoch, coordinator_epoch
            entry.current_txn_first_offset, entry.last_timestamp_ms = txn_first_offset, timestamp_ms
            if last_offset >= 0:
                first_sequence = (NO_SEQUENCE if last_sequence == NO_SEQUENCE
                                  else (last_sequence - offset_delta) % SEQUENCE_MODULUS)
                entry.batches.append(AppendedBatch(first_sequence, last_sequence,
                                                   last_offset - offset_delta, last_offset))
        opened = sorted((entry.current_txn_first_offset, producer_id) for producer_id, entry in table._entries.items()
                        if entry.current_txn_first_offset != NO_OFFSET)
        table._open_txns = {first: producer_id for first, producer_id in opened}
        return table


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(directory: Path) -> list[int]:
    """The offsets of the snapshot files in `directory`, ascending."""
    return sorted(int(p.name[:20]) for p in directory.glob(f"*{SNAPSHOT_SUFFIX}")
                  if len(p.name) == 20 + len(SNAPSHOT_SUFFIX) and p.name[:20].isdigit())


def write_snapshot(directory: Path, table: ProducerStateTable, offset: int) -> Path:
    """The table's snapshot as of `offset` (the log end offset it has applied),
    written whole (tmp, fsync, rename)."""
    if offset != table.map_end_offset:
        raise RuntimeError(f"invariant broken: producer snapshot at {offset}, but the table has applied the "
                           f"log up to {table.map_end_offset}")
    path = snapshot_path(directory, offset)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(table.snapshot_bytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path
