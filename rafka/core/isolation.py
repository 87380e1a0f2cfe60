"""What a consumer hands out of a Fetch answer at its isolation level (Kafka's
consumer, CompletedFetch.nextFetchedRecord).

Control batches (transaction markers) are never handed out, at either level.
read_committed: the leader reads only below the last stable offset and names
the aborted transactions that overlap the answer, (producer id, first offset)
each. Walking the batches in offset order, a producer becomes aborted once a
batch reaches its aborted transaction's first offset; its transactional batches
are skipped until its ABORT marker, which ends that transaction. A transaction
that committed is never in the list, and one aborted before this answer's range
ended at its marker, so the same producer's later transactions are read.

Invariant (DESIGN section 5): no record of an aborted transaction reaches a
read_committed caller; records of committed transactions and of
non-transactional producers all do. Pure: headers and markers only.
Callers: client.consumer, protocol.range_reads (Spark's read tasks).
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterable

from rafka.core.records import NO_PRODUCER_ID, end_txn_marker, iter_batches


class IsolationLevel(enum.IntEnum):
    """Kafka's isolation_level values on the wire (Fetch, ListOffsets)."""
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


def parse_isolation_level(name: str) -> IsolationLevel:
    """"read_uncommitted" (Kafka's default) or "read_committed"; ValueError else."""
    try:
        return IsolationLevel[name.upper()] if isinstance(name, str) else IsolationLevel(int(name))
    except (KeyError, ValueError):
        raise ValueError(f"isolation_level must be 'read_uncommitted' or 'read_committed', got {name!r}") from None


def batches_to_skip(records, *, isolation_level: IsolationLevel,
                    aborted_transactions: Iterable[tuple[int, int]] = ()) -> frozenset[int]:
    """Base offsets of the batches in `records` (one Fetch answer's, whole
    batches) that a consumer at `isolation_level` must not hand out."""
    skipped = set()
    pending = sorted((first_offset, producer_id) for producer_id, first_offset in aborted_transactions)
    heapq.heapify(pending)
    aborted_producers: set[int] = set()
    for pos, header in iter_batches(records, verify_crc=False):
        if isolation_level is IsolationLevel.READ_COMMITTED and header.producer_id != NO_PRODUCER_ID:
            while pending and pending[0][0] <= header.last_offset:
                aborted_producers.add(heapq.heappop(pending)[1])
            if header.is_control:
                marker = end_txn_marker(records, pos, header)
                if marker is not None and not marker.commit:
                    aborted_producers.discard(header.producer_id)
            elif header.is_transactional and header.producer_id in aborted_producers:
                skipped.add(header.base_offset)
        if header.is_control:
            skipped.add(header.base_offset)
    return frozenset(skipped)
