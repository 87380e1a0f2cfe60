"""Replication bookkeeping of one partition: what the leader knows of its followers.

Invariants:
  leader:   HW = max(HW, min(LEO of every ISR member)); the HW never decreases
  follower: HW = min(leader HW, own LEO)
  the leader is always in its own ISR
  a follower is caught up (Kafka's lastCaughtUpTimeMs) at a fetch whose offset
  reached the leader's LEO as of that fetch, or as of the previous fetch; so an
  idle follower's long poll is never parked longer than half of
  replica.lag.time.max.ms (`follower_fetch_wait_ms`), or a follower in sync
  would look lagging when records come after a long idle poll
  a follower rejoins the ISR only on evidence from its own fetches: it fetched
  under this leader, reached the HW, and was caught up within the lag time (a
  paused follower whose old LEO happens to equal the HW must not rejoin)
  ISR changes are proposals: the controller accepts them with the current leader
  and partition epochs; the committed ISR changes only to a record of the
  controller's (`isr_change_answered`, `apply_isr`)
  at most one ISR change is in flight, as an immutable value (`PendingIsrChange`)
  the HW is computed over the maximal ISR (KIP-497) = committed ISR | followers
  being added: an added follower holds the HW back from the moment it is proposed
  (the controller may accept it and then elect it before the leader hears back); a
  removed one keeps holding it back until the controller's answer (if the change
  is refused, the HW must not already have passed it). So every record below the
  HW is on every replica the controller may elect.

Pure logic, no I/O: the replica actor feeds it fetches and the clock's time, and
reads back HW moves, ISR proposals and completed produce waits.
Caller: the partition replica actor (through core.replica.PartitionReplica), from
one thread.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import ClassVar

from rafka.core.log import PartitionLog


@dataclasses.dataclass
class FollowerProgress:
    log_end_offset: int = 0
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_end_offset_at_last_fetch: int = 0
    fetched: bool = False         # has fetched from this leader
    log_start_offset: int = -1    # as its last fetch said; -1 unknown (Kafka's UnknownOffset)


def follower_high_watermark(leader_high_watermark: int, own_log_end_offset: int) -> int:
    return min(leader_high_watermark, own_log_end_offset)


def follower_fetch_wait_ms(previous_wait_ms: int, *, answered_records: bool, fetch_max_wait_ms: int,
                           idle_fetch_max_wait_ms: int, replica_lag_time_max_ms: int) -> int:
    """How long the follower's next long poll may be parked at the leader, after
    one that waited `previous_wait_ms` (a fetch loop starts at fetch_max_wait_ms).

    Kafka's replica.fetch.wait.max.ms (`fetch_max_wait_ms`) while records come;
    each answer that brought nothing doubles it, up to `idle_fetch_max_wait_ms`
    (issue 27: a replica is a process of its own, so an idle follower's poll every
    fetch_max_wait_ms woke both ends twice a second; Kafka pays that once per
    broker pair). Records still flow at once (the leader answers a parked fetch as
    soon as it appends) and the next poll after them is back at fetch_max_wait_ms,
    so the HW moves as fast as before; what an idle follower learns later is only
    a HW that moved without new records, and its leader's silence (see the actor's
    LEADER_SILENCE_MS, measured from the wait it asked for). Never above half of
    replica.lag.time.max.ms (the module's invariants)."""
    if answered_records:
        return fetch_max_wait_ms
    longest_ms = min(idle_fetch_max_wait_ms, replica_lag_time_max_ms // 2)
    return max(fetch_max_wait_ms, min(longest_ms, 2 * previous_wait_ms))


@dataclasses.dataclass(frozen=True)
class CommittedIsr:
    """The controller's ISR at `partition_epoch`, no change in flight (Kafka's
    CommittedPartitionState)."""
    isr: frozenset[int]
    partition_epoch: int
    in_flight: ClassVar[bool] = False

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr


@dataclasses.dataclass(frozen=True)
class PendingIsrChange:
    """An ISR change sent to the controller and not answered yet. Kafka keeps an
    expansion (PendingExpandIsr) and a shrink (PendingShrinkIsr) apart because it
    proposes them from different code paths; one value serves both here, since the
    ISR keeper proposes removals and additions together and the rule for the HW is
    the same: added followers count at once, removed ones still count."""
    proposed_isr: frozenset[int]
    leader_epoch: int
    last_committed: CommittedIsr
    in_flight: ClassVar[bool] = True

    @property
    def isr(self) -> frozenset[int]:
        """The committed ISR: what min.insync.replicas is checked against on append."""
        return self.last_committed.isr

    @property
    def partition_epoch(self) -> int:
        """The partition epoch the change was proposed at (the controller refuses it
        if its record moved on meanwhile)."""
        return self.last_committed.partition_epoch

    @property
    def added(self) -> frozenset[int]:
        return self.proposed_isr - self.isr

    @property
    def removed(self) -> frozenset[int]:
        return self.isr - self.proposed_isr

    @functools.cached_property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr | self.added


IsrState = CommittedIsr | PendingIsrChange


class IsrChangeInFlight(RuntimeError):
    """A second ISR change was proposed while one is in flight: a bug in the caller
    (`maybe_propose_isr_change` never does it)."""


class LeaderState:
    def __init__(self, *, replica_id: int, replicas: Iterable[int], isr: Iterable[int],
                 leader_epoch: int, partition_epoch: int, log: PartitionLog, now_ms: int,
                 replica_lag_time_max_ms: int) -> None:
        self.replica_id = replica_id
        self.replicas = list(replicas)
        self.isr_state: IsrState = CommittedIsr(frozenset(isr) | {replica_id}, partition_epoch)
        self.leader_epoch = leader_epoch
        self.log = log
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        # Kafka resets remote state at election: followers get a fresh lag window.
        self.followers = {r: FollowerProgress(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)
                          for r in self.replicas if r != replica_id}
        self.leader_epoch_start_offset = log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def update_replicas(self, replicas: Iterable[int], now_ms: int) -> None:
        """The assignment told again at this leader epoch (at one epoch only its order
        can change: core.metadata bumps the epoch when replicas come or go); a
        replica not known yet starts with a fresh lag window, the rest keep theirs."""
        self.replicas = list(replicas)
        for r in self.replicas:
            if r != self.replica_id and r not in self.followers:
                self.followers[r] = FollowerProgress(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)

    @property
    def isr(self) -> frozenset[int]:
        """The committed ISR (the controller's record)."""
        return self.isr_state.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The committed ISR plus the followers an in-flight change adds (KIP-497)."""
        return self.isr_state.maximal_isr

    @property
    def partition_epoch(self) -> int:
        return self.isr_state.partition_epoch

    def on_follower_fetch(self, follower_id: int, fetch_offset: int, now_ms: int,
                          log_start_offset: int = -1) -> bool:
        """A follower fetched from `fetch_offset` (its LEO), its log starting at
        `log_start_offset` (-1: not said). Returns True if the HW moved."""
        progress = self.followers[follower_id]
        if log_start_offset >= 0:
            progress.log_start_offset = log_start_offset
        leader_end_offset = self.log.log_end_offset
        if fetch_offset >= leader_end_offset:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)
        elif fetch_offset >= progress.leader_end_offset_at_last_fetch:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = fetch_offset
        progress.leader_end_offset_at_last_fetch = leader_end_offset
        progress.last_fetch_ms = now_ms
        progress.fetched = True
        return self.maybe_advance_high_watermark()

    def maybe_advance_high_watermark(self) -> bool:
        """HW = max(HW, min LEO of the maximal ISR). True if it moved."""
        candidate = self.log.log_end_offset
        for r in self.maximal_isr:
            if r != self.replica_id:
                candidate = min(candidate, self.followers[r].log_end_offset)
        if candidate <= self.log.high_watermark:
            return False
        return self.log.update_high_watermark(candidate)

    @property
    def low_watermark(self) -> int:
        """The lowest log start offset of the ISR (a follower not heard from since
        this leadership began counts as -1): a DeleteRecords is complete once it
        reaches the requested offset (Kafka's Partition.lowWatermarkIfLeader, over
        the replicas of live brokers there; the ISR here, since the leader knows
        no broker liveness, and a follower outside the ISR takes the log start
        with its next fetch anyway)."""
        low = self.log.log_start_offset
        for r in self.isr:
            if r != self.replica_id:
                low = min(low, self.followers[r].log_start_offset)
        return low

    def lagging_isr_members(self, now_ms: int) -> set[int]:
        """ISR followers not caught up for longer than replica.lag.time.max.ms."""
        return {r for r in self.isr if r != self.replica_id
                and now_ms - self.followers[r].last_caught_up_ms > self.replica_lag_time_max_ms}

    def caught_up_outside_isr(self, now_ms: int) -> set[int]:
        """Followers outside the ISR that may rejoin: fetching from this leader, at
        or past the HW and the start of this leader's epoch (Kafka's
        isFollowerInSync), and caught up within replica.lag.time.max.ms."""
        return {r for r, p in self.followers.items() if r not in self.isr and p.fetched
                and p.log_end_offset >= max(self.log.high_watermark, self.leader_epoch_start_offset)
                and now_ms - p.last_caught_up_ms <= self.replica_lag_time_max_ms}

    # --- ISR changes: propose, then the controller's answer -----------------------

    def maybe_propose_isr_change(self, now_ms: int) -> PendingIsrChange | None:
        """The ISR change to send to the controller, recorded as in flight: lagging
        members out, caught-up followers in. None while a change is in flight (one
        at a time, as Kafka's isInflight) or when nothing would change."""
        if self.isr_state.in_flight:
            return None
        isr = self.isr_state.isr
        proposed = (isr - self.lagging_isr_members(now_ms)) | self.caught_up_outside_isr(now_ms)
        if proposed == isr:
            return None
        return self.propose_isr(proposed)

    def propose_isr(self, proposed_isr: Iterable[int]) -> PendingIsrChange:
        """Record `proposed_isr` as in flight, before it is sent: from now on the
        followers it adds hold the HW back."""
        if self.isr_state.in_flight:
            raise IsrChangeInFlight(f"ISR change to {sorted(proposed_isr)} proposed while "
                                    f"{self.isr_state} is in flight")
        proposed = frozenset(proposed_isr)
        if self.replica_id not in proposed or not proposed <= set(self.replicas):
            raise ValueError(f"ISR {sorted(proposed)} must hold the leader {self.replica_id} "
                             f"and only replicas {self.replicas}")
        change = PendingIsrChange(proposed, self.leader_epoch, self.isr_state)
        self.isr_state = change
        return change

    def isr_change_answered(self, change: PendingIsrChange, *, isr: Iterable[int],
                            partition_epoch: int) -> bool:
        """The controller's record after it handled `change` (its answer, or its
        record read back when the answer was lost): it becomes the committed ISR,
        unless a newer one is already held (Kafka's handleAlterPartitionUpdate).
        True if the HW moved (a shrink can let it advance)."""
        if change.leader_epoch != self.leader_epoch or partition_epoch < self.isr_state.partition_epoch:
            return False
        self.isr_state = CommittedIsr(frozenset(isr) | {self.replica_id}, partition_epoch)
        return self.maybe_advance_high_watermark()

    def isr_change_refused(self, change: PendingIsrChange) -> bool:
        """The controller refused `change` (so it was not applied): drop it. True if
        the HW moved (dropping an expansion can let it advance)."""
        if self.isr_state is not change:   # superseded by a newer record already
            return False
        self.isr_state = change.last_committed
        return self.maybe_advance_high_watermark()

    def apply_isr(self, isr: Iterable[int], partition_epoch: int) -> bool:
        """A change the controller made on its own (e.g. a restarted replica fenced
        out of the ISR). Only a newer partition epoch counts; it replaces any change
        in flight, which the controller then refuses as proposed at an old epoch (or
        already applied, and this record includes it). True if the HW moved."""
        if partition_epoch <= self.isr_state.partition_epoch:
            return False
        fenced = self.isr_state.maximal_isr - frozenset(isr)
        for replica_id in fenced - {self.replica_id}:
            # The controller fences a replica that restarted: its log may be shorter
            # than what it fetched before. Its old progress must not bring it back
            # into the ISR: only fetches from now on count (Kafka: the broker epoch
            # in AlterPartition, KIP-903).
            if replica_id in self.followers:
                self.followers[replica_id] = FollowerProgress(last_caught_up_ms=0, last_fetch_ms=0)
        self.isr_state = CommittedIsr(frozenset(isr) | {self.replica_id}, partition_epoch)
        return self.maybe_advance_high_watermark()
