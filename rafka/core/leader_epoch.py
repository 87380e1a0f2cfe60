"""The leader-epoch cache: for each leader epoch, the first offset written in it.

Invariants: epochs strictly increase and start offsets never decrease along the
list. Persisted in `leader-epoch-checkpoint` on every change (changes come only
with elections and truncation, so they are rare).

`end_offset_for(epoch)` is the answer KIP-101 / KIP-279 need for
OffsetsForLeaderEpoch: a follower truncates to it before fetching, so that
replicas never diverge after a leader change.
Caller: PartitionLog only.
"""

from __future__ import annotations

import bisect
from pathlib import Path

from rafka.core import checkpoint

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self._path = Path(directory) / FILE_NAME
        entries = checkpoint.read_entries(self._path) or []
        self._epochs: list[int] = []
        self._start_offsets: list[int] = []
        for epoch, start_offset in ((int(e), int(o)) for e, o in entries):
            if self._epochs and (epoch <= self._epochs[-1] or start_offset < self._start_offsets[-1]):
                break  # a damaged tail: keep the consistent prefix
            self._epochs.append(epoch)
            self._start_offsets.append(start_offset)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._start_offsets))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (no-op if it is known)."""
        if self._epochs and epoch <= self._epochs[-1]:
            if epoch < self._epochs[-1]:
                raise ValueError(f"epoch {epoch} is older than the latest {self._epochs[-1]}")
            return
        if self._start_offsets and start_offset < self._start_offsets[-1]:
            raise ValueError(f"epoch {epoch} would start at {start_offset}, "
                             f"before epoch {self._epochs[-1]} at {self._start_offsets[-1]}")
        self._epochs.append(epoch)
        self._start_offsets.append(start_offset)
        self._persist()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as KIP-101 / KIP-279 define it, Kafka's cases in order:

        - the requested epoch is the latest: (latest, log end offset);
        - it is newer than every known epoch, or undefined, or the cache is empty:
          (UNDEFINED_EPOCH, UNDEFINED_OFFSET): the follower keeps its log;
        - it is older than the first known epoch: (requested, first start offset);
        - otherwise: the largest known epoch <= requested, ending where the next
          known epoch starts.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        if requested_epoch > self._epochs[-1]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == 0:
            return requested_epoch, self._start_offsets[0]
        return self._epochs[higher - 1], self._start_offsets[higher]

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs that start at or after `end_offset` (the log was cut there)."""
        keep = bisect.bisect_left(self._start_offsets, end_offset)
        if keep < len(self._epochs):
            del self._epochs[keep:], self._start_offsets[keep:]
            self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: epochs wholly below it are dropped and
        the epoch that holds it is moved to start there."""
        holder = bisect.bisect_right(self._start_offsets, start_offset) - 1
        if holder < 0 or (holder == 0 and self._start_offsets[0] == start_offset):
            return
        del self._epochs[:holder], self._start_offsets[:holder]
        self._start_offsets[0] = start_offset
        self._persist()

    def clear(self) -> None:
        self._epochs.clear()
        self._start_offsets.clear()
        self._persist()

    def _persist(self) -> None:
        checkpoint.write_entries(self._path, self.entries())
