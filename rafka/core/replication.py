"""Replication bookkeeping of one partition: what the leader knows of its followers.

Invariants:
  leader:   HW = max(HW, min(LEO of every ISR member)); the HW never decreases
  follower: HW = min(leader HW, own LEO)
  the leader is always in its own ISR
  a follower is caught up (Kafka's lastCaughtUpTimeMs) at a fetch whose offset
  reached the leader's LEO as of that fetch, or as of the previous fetch
  a follower rejoins the ISR only on evidence from its own fetches: it fetched
  under this leader, reached the HW, and was caught up within the lag time (a
  paused follower whose old LEO happens to equal the HW must not rejoin)
  ISR changes are proposals: the controller accepts them with the current leader
  epoch; the leader applies them only when accepted (`apply_isr`)

Pure logic, no I/O: the replica actor feeds it fetches and the clock's time, and
reads back HW moves, ISR proposals and completed produce waits.
Caller: the partition replica actor, from one thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from rafka.core.log import PartitionLog


@dataclasses.dataclass
class FollowerProgress:
    log_end_offset: int = 0
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_end_offset_at_last_fetch: int = 0
    fetched: bool = False         # has fetched from this leader


def follower_high_watermark(leader_high_watermark: int, own_log_end_offset: int) -> int:
    return min(leader_high_watermark, own_log_end_offset)


class LeaderState:
    def __init__(self, *, replica_id: int, replicas: Iterable[int], isr: Iterable[int],
                 leader_epoch: int, log: PartitionLog, now_ms: int,
                 replica_lag_time_max_ms: int) -> None:
        self.replica_id = replica_id
        self.replicas = list(replicas)
        self.isr = set(isr) | {replica_id}
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

    def on_follower_fetch(self, follower_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower fetched from `fetch_offset` (its LEO). Returns True if the HW moved."""
        progress = self.followers[follower_id]
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
        """HW = max(HW, min LEO of the ISR). True if it moved."""
        isr_end_offsets = [self.log.log_end_offset] + [
            self.followers[r].log_end_offset for r in self.isr if r != self.replica_id]
        candidate = min(isr_end_offsets)
        if candidate <= self.log.high_watermark:
            return False
        return self.log.update_high_watermark(candidate)

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

    def apply_isr(self, isr: Iterable[int]) -> bool:
        """The controller accepted a new ISR. Returns True if the HW moved (a
        shrink can let it advance)."""
        self.isr = set(isr) | {self.replica_id}
        return self.maybe_advance_high_watermark()
