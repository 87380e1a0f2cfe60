"""One partition replica's logic: roles, produce, fetch, truncation. No I/O waits.

The replica actor owns one PartitionReplica and adds only what needs Ray or
asyncio: parking fetches and acks=all produces until the LEO or HW moves, the
follower's fetch loop, and calls to the controller.

Invariants:
  only the leader appends produced batches, and only at its current epoch
  a request naming an older leader epoch is fenced (FENCED_LEADER_EPOCH), a newer
  one is not known yet (UNKNOWN_LEADER_EPOCH)
  consumers never get a batch at or above the HW; a consumer fetch in [HW, LEO] is
  answered with no records (it waits), never OFFSET_OUT_OF_RANGE: a consumer at the
  tail of an old leader may be ahead of a new leader's HW, but not of its LEO
  a follower truncates to the leader's end offset for its latest epoch (KIP-101)
  before it appends anything fetched in a new epoch
  acks=all needs at least min.insync.replicas in the committed ISR when the batch
  arrives, and in the maximal ISR when the HW passes it (Kafka's Partition)
  the leader's ISR changes go through `maybe_propose_isr_change` and then the
  controller's answer (core.replication: at most one in flight, HW over the
  maximal ISR)
  `isr_shrinks` / `isr_expands` count the changes of the committed ISR while leading
  (Kafka's IsrShrinksPerSec / IsrExpandsPerSec): they only grow
  a read_committed consumer never gets a batch at or above the LSO, and gets with
  its batches the aborted transactions overlapping them; clients never write
  control batches: markers come only through `append_txn_marker` (WriteTxnMarkers)
Caller: the partition replica actor, from one thread.
"""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path

from rafka.core.config import TopicConfig
from rafka.core.errors import (DuplicateSequence, FencedLeaderEpoch, InvalidRecord, InvalidRequest, InvalidRequiredAcks,
                               NotEnoughReplicas,
                               NotEnoughReplicasAfterAppend,
                               NotLeaderOrFollower, OffsetNotAvailable, OffsetOutOfRange, PolicyViolation,
                               UnknownLeaderEpoch)
from rafka.core.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from rafka.core.log import PartitionLog
from rafka.core.producer_state import UNVERIFIED, ProducerStateTable
from rafka.core.records import encode_end_txn_marker, iter_batches, next_offset_after
from rafka.core.replication import LeaderState, PendingIsrChange, follower_high_watermark

ACKS_NONE, ACKS_LEADER, ACKS_ALL = 0, 1, -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1   # Fetch's and ListOffsets' isolation_level
DELETE_TO_HIGH_WATERMARK = -1   # DeleteRecords' offset -1 (Kafka's DeleteRecordsRequest.HIGH_WATERMARK)
# ListOffsets' special timestamps (Kafka's ListOffsetsRequest.EARLIEST/LATEST/MAX_TIMESTAMP).
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP = -2, -1, -3


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclasses.dataclass(frozen=True)
class ProduceResult:
    base_offset: int
    last_offset: int
    log_append_time_ms: int
    duplicate: bool


@dataclasses.dataclass(frozen=True)
class FetchResult:
    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    leader_epoch: int
    # to a follower whose log diverged from the leader's (KIP-320): the leader's
    # (epoch, end offset) of the follower's last fetched epoch, and no records
    diverging_epoch: tuple[int, int] | None = None
    last_stable_offset: int = -1
    # to a read_committed consumer: (producer id, first offset) of each aborted
    # transaction overlapping the records; None to anyone else
    aborted_transactions: tuple[tuple[int, int], ...] | None = None


def parse_acks(acks) -> int:
    if acks in ("all", -1, "-1"):
        return ACKS_ALL
    if acks in (0, "0"):
        return ACKS_NONE
    if acks in (1, "1"):
        return ACKS_LEADER
    raise InvalidRequiredAcks(f"acks must be 0, 1 or all, got {acks!r}")


class PartitionReplica:
    def __init__(self, *, topic: str, partition: int, replica_id: int, directory: str | Path,
                 config: TopicConfig, clock, replica_lag_time_max_ms: int, **log_options) -> None:
        self.topic = topic
        self.partition = partition
        self.replica_id = replica_id
        self.clock = clock
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.log = PartitionLog(directory, config, clock, **log_options)
        self.role = Role.FOLLOWER
        self.leader_epoch = -1
        self.leader_id = -1
        self.leader: LeaderState | None = None
        self.isr_shrinks = 0
        self.isr_expands = 0

    @property
    def producers(self) -> ProducerStateTable:
        """The log's producer state (the log keeps it with its snapshots)."""
        return self.log.producers

    @property
    def config(self) -> TopicConfig:
        """The topic's config, held by the log alone (one place to change it)."""
        return self.log.config

    def reconfigure(self, config: TopicConfig) -> None:
        """The topic was altered: min.insync.replicas holds from the next acks=all
        append and the next HW check of a parked one; the log takes the rest
        (PartitionLog.reconfigure)."""
        self.log.reconfigure(config)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition} replica {self.replica_id}"

    @property
    def partition_epoch(self) -> int:
        """The partition epoch of the leader's committed ISR; -1 when not leading."""
        return self.leader.partition_epoch if self.leader is not None else -1

    # --- role changes (from the controller) ---------------------------------------

    def become_leader(self, *, leader_epoch: int, replicas: list[int], isr: list[int],
                      partition_epoch: int) -> None:
        """Lead at `leader_epoch`. Told again at the epoch it already leads at (the
        controller's watch loop, or an announcement that read the partition before a
        later ISR change was committed), it keeps its followers' progress and takes
        the ISR only from a newer partition epoch, as Kafka's Partition.makeLeader:
        an older ISR put back would leave out a follower the controller counts as in
        sync (and may elect) while the HW passes records it does not have."""
        self.check_new_epoch(leader_epoch)
        if self.role is Role.LEADER and leader_epoch == self.leader_epoch:
            self.leader.update_replicas(replicas, now_ms=self.clock.monotonic_ms())
            self.apply_isr(isr, partition_epoch)
            return
        self.role = Role.LEADER
        self.leader_epoch, self.leader_id = leader_epoch, self.replica_id
        self.leader = LeaderState(replica_id=self.replica_id, replicas=replicas, isr=isr,
                                  leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                                  log=self.log, now_ms=self.clock.monotonic_ms(),
                                  replica_lag_time_max_ms=self.replica_lag_time_max_ms)
        self.log.epochs.assign(leader_epoch, self.log.log_end_offset)
        self.leader.maybe_advance_high_watermark()

    def become_follower(self, *, leader_id: int, leader_epoch: int) -> None:
        self.check_new_epoch(leader_epoch)
        self.role = Role.FOLLOWER
        self.leader_epoch, self.leader_id = leader_epoch, leader_id
        self.leader = None

    def check_new_epoch(self, leader_epoch: int) -> None:
        if leader_epoch < self.leader_epoch:
            raise FencedLeaderEpoch(f"{self.name}: epoch {leader_epoch} is older than {self.leader_epoch}")

    def apply_isr(self, isr: list[int], partition_epoch: int) -> bool:
        """An ISR change the controller made on its own and pushed here (ignored
        unless its partition epoch is newer); True if the HW moved."""
        self._require_leader(self.leader_epoch)
        before = self.leader.isr
        moved = self.leader.apply_isr(isr, partition_epoch)
        self._count_isr_change(before)
        return moved

    def maybe_propose_isr_change(self) -> PendingIsrChange | None:
        """The ISR change to send to the controller now, already counted in the
        maximal ISR; None while one is in flight or when nothing would change."""
        self._require_leader(self.leader_epoch)
        return self.leader.maybe_propose_isr_change(self.clock.monotonic_ms())

    def isr_change_answered(self, change: PendingIsrChange, *, isr: list[int], partition_epoch: int) -> bool:
        """The controller's record after it handled `change` becomes the committed
        ISR (unless older than the one held); True if the HW moved."""
        self._require_leader(change.leader_epoch)
        before = self.leader.isr
        moved = self.leader.isr_change_answered(change, isr=isr, partition_epoch=partition_epoch)
        self._count_isr_change(before)
        return moved

    def _count_isr_change(self, before: frozenset[int]) -> None:
        after = self.leader.isr
        if before - after:
            self.isr_shrinks += 1
        if after - before:
            self.isr_expands += 1

    def isr_change_refused(self, change: PendingIsrChange) -> bool:
        """The controller refused `change`: dropped; True if the HW moved."""
        self._require_leader(change.leader_epoch)
        return self.leader.isr_change_refused(change)

    # --- produce (leader) ---------------------------------------------------------

    def append(self, records: bytes, *, acks: int, leader_epoch: int | None = None,
               verification_guard: object | None = UNVERIFIED) -> ProduceResult:
        """Append a producer's batches. acks=all fails NOT_ENOUGH_REPLICAS before
        writing when the ISR is below min.insync.replicas; the caller then waits for
        `is_committed(last_offset)`. Duplicate batches of an idempotent producer are
        answered with their original offsets. With `verification_guard` (what
        `start_verification` gave, once the coordinator verified the partition), a
        transactional batch of a producer with no transaction open here is refused
        INVALID_TXN_STATE unless the guard is still the producer's (KIP-890)."""
        self._require_leader(self.leader_epoch if leader_epoch is None else leader_epoch)
        # The committed ISR, not the maximal one, as Kafka's Partition.appendRecordsToLeader
        # (partitionState.isr): a follower whose addition is still in flight may be
        # refused, and must not let a write in that the ISR cannot yet hold.
        if acks == ACKS_ALL and len(self.leader.isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicas(f"{self.name}: ISR {sorted(self.leader.isr)} is smaller than "
                                    f"min.insync.replicas {self.config.min_insync_replicas}")
        headers = [header for _, header in iter_batches(records, verify_crc=False)] if records else []
        if any(header.is_control for header in headers):
            raise InvalidRecord(f"Clients are not allowed to write control records in topic partition "
                                f"{self.topic}-{self.partition}")
        if len(headers) == 1:
            duplicate = self.producers.check(headers[0])
            if duplicate is not None:
                return ProduceResult(duplicate.first_offset, duplicate.last_offset, -1, True)
            if verification_guard is not UNVERIFIED:
                self.producers.check_verified(headers[0], verification_guard)
        else:
            for header in headers:
                if self.producers.check(header) is not None:
                    raise DuplicateSequence(f"{self.name}: a multi-batch request holds a batch "
                                            f"that was already written")
                if verification_guard is not UNVERIFIED:
                    self.producers.check_verified(header, verification_guard)
        result = self.log.append_as_leader(records, self.leader_epoch)
        self.leader.maybe_advance_high_watermark()
        return ProduceResult(result.base_offset, result.last_offset, result.log_append_time_ms, False)

    def start_verification(self, producer_id: int, sequence: int, epoch: int) -> object | None:
        """The leader's: the guard a transactional Produce of `producer_id` (its
        batch's first sequence and epoch) appends with once the coordinator
        verified it; None while the producer's transaction is open here
        (core.producer_state)."""
        self._require_leader(self.leader_epoch)
        return self.producers.start_verification(producer_id, sequence, epoch)

    def append_txn_marker(self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                          leader_epoch: int | None = None) -> ProduceResult:
        """Write a COMMIT or ABORT marker for `producer_id` (one WriteTxnMarkers
        entry for this partition), as Kafka's leader does with AppendOrigin
        COORDINATOR: an older producer epoch is INVALID_PRODUCER_EPOCH, an older
        coordinator epoch than the producer's last marker
        TRANSACTION_COORDINATOR_FENCED; nothing is written then. The caller
        waits for the HW to pass it (the coordinator writes with acks=all)."""
        self._require_leader(self.leader_epoch if leader_epoch is None else leader_epoch)
        self.producers.check_marker(producer_id=producer_id, producer_epoch=producer_epoch,
                                    coordinator_epoch=coordinator_epoch)
        marker = encode_end_txn_marker(producer_id=producer_id, producer_epoch=producer_epoch,
                                       coordinator_epoch=coordinator_epoch, commit=commit,
                                       timestamp_ms=self.clock.now_ms())
        result = self.log.append_as_leader(marker, self.leader_epoch)
        self.leader.maybe_advance_high_watermark()
        return ProduceResult(result.base_offset, result.last_offset, -1, False)

    def is_committed(self, last_offset: int) -> bool:
        """The HW passed `last_offset`. For acks=all the caller must then check
        `check_enough_replicas_after_append`: the ISR may have shrunk meanwhile."""
        return self.log.high_watermark > last_offset

    def check_enough_replicas_after_append(self) -> None:
        """Kafka's rule when the HW reaches an acks=all batch: if the ISR shrank below
        min.insync.replicas while it waited, the write is below the HW but was not
        replicated as promised: NOT_ENOUGH_REPLICAS_AFTER_APPEND (retriable; an
        idempotent resend is answered with the same offsets).
        Counted over the maximal ISR, as Kafka's Partition.checkEnoughReplicasReachOffset
        (partitionState.maximalIsr): the HW is computed over it, so a batch below
        the HW is on every one of its members, committed or being added."""
        if self.leader is not None and len(self.leader.maximal_isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicasAfterAppend(
                f"{self.name}: ISR {sorted(self.leader.maximal_isr)} shrank below min.insync.replicas "
                f"{self.config.min_insync_replicas} before the batch was replicated")

    # --- fetch (leader) -----------------------------------------------------------

    def fetch_for_follower(self, *, follower_id: int, fetch_offset: int, leader_epoch: int,
                           max_bytes: int, last_fetched_epoch: int = UNDEFINED_EPOCH,
                           log_start_offset: int = -1) -> FetchResult:
        """A follower's fetch. With `last_fetched_epoch` (the epoch of the follower's
        last batch; -1: none, an empty log), the leader first checks that the
        follower's log matches its own up to fetch_offset (KIP-320, Kafka's
        Partition.readRecords): if the leader's end of that epoch is below
        fetch_offset, or the leader's largest epoch up to it is an older one, the
        answer is that (epoch, end offset) as `diverging_epoch`, no records, and
        the fetch does not count as the follower's progress. An epoch the leader
        has no end for (its log starts later) is OFFSET_OUT_OF_RANGE.
        `log_start_offset`: the follower's (-1 not said), which the low watermark
        of DeleteRecords waits for."""
        self._require_leader(leader_epoch)
        if last_fetched_epoch != UNDEFINED_EPOCH:
            epoch, end_offset = self.log.end_offset_for_epoch(last_fetched_epoch)
            if epoch == UNDEFINED_EPOCH or end_offset == UNDEFINED_OFFSET:
                raise OffsetOutOfRange(f"{self.name}: no end offset for the follower's last fetched epoch "
                                       f"{last_fetched_epoch}")
            if epoch < last_fetched_epoch or end_offset < fetch_offset:
                return dataclasses.replace(self._fetch_result(b""), diverging_epoch=(epoch, end_offset))
        if fetch_offset > self.log.log_end_offset or fetch_offset < self.log.log_start_offset:
            raise OffsetOutOfRange(f"{self.name}: follower fetch at {fetch_offset} outside "
                                   f"[{self.log.log_start_offset}, {self.log.log_end_offset}]")
        self.leader.on_follower_fetch(follower_id, fetch_offset, self.clock.monotonic_ms(), log_start_offset)
        return self._fetch_result(self.log.read(fetch_offset, max_bytes))

    def fetch_for_consumer(self, *, fetch_offset: int, max_bytes: int, leader_epoch: int | None = None,
                           isolation_level: int = READ_UNCOMMITTED) -> FetchResult:
        """Batches below the HW (read_uncommitted) or below the LSO (read_committed,
        with the aborted transactions overlapping what is returned, Kafka's
        FetchTxnCommitted). Out of range is below the log start offset or above
        the LEO; at or above the bound (up to the LEO) there is nothing to read
        yet, as Kafka's LocalLog.read: a new leader's HW may trail the old
        leader's for a fetch round, and a consumer at the old tail must wait, not
        be reset."""
        self._require_leader(self.leader_epoch if leader_epoch is None else leader_epoch)
        log = self.log
        if fetch_offset < log.log_start_offset or fetch_offset > log.log_end_offset:
            raise OffsetOutOfRange(f"{self.name}: offset {fetch_offset} is outside "
                                   f"[{log.log_start_offset}, {log.log_end_offset}]")
        read_committed = isolation_level == READ_COMMITTED
        stable = log.last_stable_offset
        max_offset = stable if read_committed else log.high_watermark
        records = b"" if fetch_offset >= max_offset else log.read(fetch_offset, max_bytes, max_offset=max_offset)
        aborted = None
        if read_committed:
            upper_bound = next_offset_after(records)
            aborted = () if upper_bound is None else tuple(
                (txn.producer_id, txn.first_offset) for txn in log.aborted_transactions(fetch_offset, upper_bound))
        return self._fetch_result(records, last_stable_offset=stable, aborted_transactions=aborted)

    def list_offset(self, *, timestamp_ms: int, leader_epoch: int | None = None,
                    isolation_level: int = READ_UNCOMMITTED) -> tuple[int, int, int] | None:
        """ListOffsets as a consumer of `isolation_level` sees it (Kafka's
        Partition.fetchOffsetForTimestamp and UnifiedLog.fetchOffsetByTimestamp):
        (offset, timestamp, leader epoch) or None, the epoch -1 where Kafka has
        none. EARLIEST_TIMESTAMP gives the log start offset (with the first
        epoch's number when that epoch starts at or below it), LATEST_TIMESTAMP
        the HW (read_committed: the LSO) with this leader's epoch,
        MAX_TIMESTAMP the first record of the largest timestamp, a timestamp the
        first record whose timestamp is >= it; each of the last two with its
        batch's epoch, and None at or past that bound (lastFetchableOffset).
        A new leader whose HW has not reached the start of its epoch answers
        OFFSET_NOT_AVAILABLE (retriable) where the HW would matter, as Kafka's:
        its HW may still be below the old leader's, and "latest" must not move a
        consumer (or a coordinator loading its partition) back."""
        self._require_leader(self.leader_epoch if leader_epoch is None else leader_epoch)
        log = self.log
        if timestamp_ms == EARLIEST_TIMESTAMP:
            first = log.epochs.entries()[:1]
            return log.log_start_offset, -1, first[0][0] if first and first[0][1] <= log.log_start_offset else -1
        if timestamp_ms not in (LATEST_TIMESTAMP, MAX_TIMESTAMP) and timestamp_ms < 0:
            raise InvalidRequest(f"{self.name}: timestamp {timestamp_ms} is negative")
        fetchable = log.last_stable_offset if isolation_level == READ_COMMITTED else log.high_watermark
        if timestamp_ms == LATEST_TIMESTAMP:
            found = None
        elif timestamp_ms == MAX_TIMESTAMP:
            found = log.offset_of_max_timestamp(max_offset=fetchable)
        else:
            found = log.offset_for_timestamp(timestamp_ms, max_offset=fetchable)
        if found is None and log.high_watermark < self.leader.leader_epoch_start_offset:
            raise OffsetNotAvailable(f"{self.name}: the HW {log.high_watermark} has not reached the "
                                     f"start offset {self.leader.leader_epoch_start_offset} of leader "
                                     f"epoch {self.leader_epoch} yet")
        if timestamp_ms == LATEST_TIMESTAMP:
            return fetchable, -1, self.leader_epoch
        return found

    def _fetch_result(self, records: bytes, *, last_stable_offset: int | None = None,
                      aborted_transactions: tuple | None = None) -> FetchResult:
        log = self.log
        return FetchResult(records, log.high_watermark, log.log_start_offset, log.log_end_offset, self.leader_epoch,
                           last_stable_offset=(log.last_stable_offset if last_stable_offset is None
                                               else last_stable_offset),
                           aborted_transactions=aborted_transactions)

    # --- delete records (leader) ---------------------------------------------------

    def delete_records(self, offset: int) -> tuple[int, int]:
        """DeleteRecords on the leader (Kafka's Partition.deleteRecordsOnLeader):
        move the log start offset to `offset` (DELETE_TO_HIGH_WATERMARK: the HW).
        (the offset asked for, the low watermark now); the request is complete
        once `low_watermark` reaches that offset, as the followers take the new
        log start from their fetches. POLICY_VIOLATION on a topic whose
        cleanup.policy has no delete; OFFSET_OUT_OF_RANGE below zero or above the HW."""
        self._require_leader(self.leader_epoch)
        if not self.config.deletes_by_retention:
            raise PolicyViolation(f"Records of partition {self.name} can not be deleted due to the "
                                  f"configured policy")
        requested = self.log.high_watermark if offset == DELETE_TO_HIGH_WATERMARK else offset
        if requested < 0:
            raise OffsetOutOfRange(f"The offset {requested} for partition {self.name} is not valid")
        self.log.maybe_increment_log_start_offset(requested)
        return requested, self.leader.low_watermark

    @property
    def low_watermark(self) -> int:
        """The ISR's lowest log start offset (leader only)."""
        self._require_leader(self.leader_epoch)
        return self.leader.low_watermark

    def end_offset_for_epoch(self, *, requested_epoch: int, leader_epoch: int | None) -> tuple[int, int]:
        """OffsetsForLeaderEpoch, answered by the leader (KIP-101); leader_epoch None:
        a client that does not know the current epoch (no fencing)."""
        self._require_leader(self.leader_epoch if leader_epoch is None else leader_epoch)
        return self.log.end_offset_for_epoch(requested_epoch)

    def lagging_isr_members(self) -> set[int]:
        self._require_leader(self.leader_epoch)
        return self.leader.lagging_isr_members(self.clock.monotonic_ms())

    def caught_up_outside_isr(self) -> set[int]:
        self._require_leader(self.leader_epoch)
        return self.leader.caught_up_outside_isr(self.clock.monotonic_ms())

    def _require_leader(self, leader_epoch: int) -> None:
        if leader_epoch < self.leader_epoch:
            raise FencedLeaderEpoch(f"{self.name}: request epoch {leader_epoch} < {self.leader_epoch}")
        if leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpoch(f"{self.name}: request epoch {leader_epoch} > {self.leader_epoch}")
        if self.role is not Role.LEADER:
            raise NotLeaderOrFollower(f"{self.name} is not the leader (leader is replica {self.leader_id})")

    # --- follower -----------------------------------------------------------------

    def truncate_to_leader_epoch_end(self, leader_answer: tuple[int, int]) -> int:
        """KIP-101: cut the log where it stops matching the leader's. `leader_answer`
        is the leader's (epoch, end offset) for this replica's latest epoch.
        Returns the new LEO."""
        epoch, end_offset = leader_answer
        if end_offset != UNDEFINED_OFFSET:
            if epoch < self.log.latest_epoch:
                # The leader does not know our latest epoch: cut at its end of the
                # epoch it knows, then our own end of that epoch (KIP-279).
                own_epoch, own_end = self.log.end_offset_for_epoch(epoch)
                if own_epoch == epoch:
                    end_offset = min(end_offset, own_end)
                elif own_end != UNDEFINED_OFFSET:
                    # We do not know the leader's epoch: cut at our own end of the
                    # epoch below it and ask again (Kafka's getOffsetTruncationState).
                    # Cutting at the leader's end kept records of an epoch the
                    # leader never had, and the same answer came back for good.
                    end_offset = own_end
            self.log.truncate_to(end_offset)   # reloads producer state as of the new LEO
        return self.log.log_end_offset

    def apply_fetched(self, result: FetchResult) -> None:
        """Append what the leader returned; follower HW = min(leader HW, own LEO)."""
        if self.role is not Role.FOLLOWER:
            raise NotLeaderOrFollower(f"{self.name} is not a follower")
        if result.leader_epoch != self.leader_epoch:
            raise FencedLeaderEpoch(f"{self.name}: fetched at epoch {result.leader_epoch}, "
                                    f"follows epoch {self.leader_epoch}")
        if result.records:
            self._start_at_a_straddling_batch(result.records)
            self.log.append_as_follower(result.records)   # producer state and aborted transactions too
        self.log.update_high_watermark(follower_high_watermark(result.high_watermark, self.log.log_end_offset))
        if result.log_start_offset > self.log.log_start_offset:
            # the leader's log start (DeleteRecords, retention), never past our own
            # HW: the leader's is at most its HW, ours just became min(its HW, our LEO)
            self.log.maybe_increment_log_start_offset(min(result.log_start_offset, self.log.high_watermark))

    def _start_at_a_straddling_batch(self, records) -> None:
        """An empty log starting inside the first fetched batch (the leader's log
        start was moved into a batch, by DeleteRecords): start it at the batch, as
        Kafka's Partition.appendRecordsToFollowerOrFutureReplica does, else the
        batch is refused below the LEO on every fetch and the follower never
        catches up. The leader's log start is taken back after the append."""
        if self.log.log_end_offset != self.log.log_start_offset:
            return
        _, first = next(iter_batches(records, verify_crc=False))
        if first.base_offset < self.log.log_end_offset < first.next_offset:
            self.log.truncate_fully_and_start_at(first.base_offset)

    def restart_from(self, leader_log_start_offset: int) -> None:
        """Our fetch offset fell below the leader's log start: start empty there."""
        self.log.truncate_fully_and_start_at(leader_log_start_offset)   # and its producer state

    def close(self) -> None:
        self.log.close()
