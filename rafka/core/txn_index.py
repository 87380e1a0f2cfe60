"""A segment's aborted-transaction index: `<base>.txnindex`, Kafka's format.

One entry per transaction aborted by a marker in this segment, 34 bytes
big-endian: version int16 (0), producer id int64, first offset int64 (the
transaction's first batch, possibly in an earlier segment), last offset int64
(the ABORT marker's offset), last stable offset int64 (the partition's LSO once
that marker completed: the first offset of the earliest other transaction still
open, else the marker's offset + 1).

A read_committed fetch of [fetch offset, upper bound) needs every aborted
transaction whose range overlaps it (first offset < upper bound and last offset
>= fetch offset). Such a transaction's marker is at or after the fetch offset, so
the search starts at the segment holding the fetch offset and goes forward; it
stops at the first entry whose last stable offset reaches the upper bound, since
no transaction completed after it can have begun below the bound (Kafka's
TransactionIndex.collectAbortedTxns).

Invariants: entries' last offsets strictly increase (markers are appended in
offset order; `append` raises otherwise); the in-memory list is the truth and
the file follows it once it exists (`loaded_from_file`): an index whose file was
missing is being rebuilt, holds its entries in memory only, and is written whole
by `persist` when the rebuild is done, so a crash mid-rebuild leaves it missing
again, never present and short. Callers: core.segment, core.log.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

ENTRY = struct.Struct(">hqqqq")
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self.loaded_from_file = False

    @classmethod
    def open(cls, path: Path) -> TxnIndex:
        """The index at `path`: read when the file exists (`loaded_from_file`), else
        empty. A file with a torn last entry or entries out of order is read up to
        the last good entry."""
        index = cls(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return index
        index.loaded_from_file = True
        good = len(data) - len(data) % ENTRY.size
        for _, producer_id, first, last, stable in ENTRY.iter_unpack(data[:good]):
            if index.entries and last <= index.entries[-1].last_offset:
                break
            index.entries.append(AbortedTxn(producer_id, first, last, stable))
        if len(index.entries) * ENTRY.size != len(data):
            index._rewrite()
        return index

    @property
    def last_offset(self) -> int:
        """The last entry's marker offset; -1 when empty."""
        return self.entries[-1].last_offset if self.entries else -1

    def append(self, txn: AbortedTxn) -> None:
        if txn.last_offset <= self.last_offset:
            raise RuntimeError(f"invariant broken: aborted transaction marker at {txn.last_offset} is not after "
                               f"the index's last one at {self.last_offset} ({self.path.name})")
        self.entries.append(txn)
        if self.loaded_from_file:
            with open(self.path, "ab") as f:
                f.write(ENTRY.pack(VERSION, *txn))

    def persist(self) -> None:
        """Write the whole index (a new segment's empty one, or a rebuilt one)."""
        self._rewrite()
        self.loaded_from_file = True

    def truncate_to(self, offset: int) -> None:
        """Forget the transactions whose marker is at or above `offset` (the log was
        cut there)."""
        kept = [txn for txn in self.entries if txn.last_offset < offset]
        if len(kept) != len(self.entries):
            self.entries = kept
            if self.loaded_from_file:
                self._rewrite()

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """(aborted transactions overlapping [fetch_offset, upper_bound_offset),
        whether the search is complete: no later segment can hold another)."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def flush(self) -> None:
        if self.loaded_from_file and self.path.exists():
            with open(self.path, "rb+") as f:
                os.fsync(f.fileno())

    def delete(self) -> None:
        self.entries = []
        self.path.unlink(missing_ok=True)

    def _rewrite(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(b"".join(ENTRY.pack(VERSION, *txn) for txn in self.entries))
        os.replace(tmp, self.path)
