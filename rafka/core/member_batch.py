"""One poll batch of a member actor (actors.member): the handler's output as
records to write, the offsets the batch commits, where the member reads again
after a batch that did not commit, and what it does with each failure.

Design: the handler returns its output (ProducerRecords) instead of writing it,
so the member writes it with its own producer, on the one data path, in both
modes. At least once: output sent and acked, then the batch's offsets committed
(a member killed between the two writes the output again). Exactly once (KIP-447,
as Kafka Streams' EOS v2): begin_transaction, output sent, the batch's offsets
sent with the consumer's group metadata, commit_transaction; output and offsets
become visible together or not at all, and the generation in TxnOffsetCommit
fences a member the group has moved past. The cost: one transaction per batch
(a few round trips to the transaction coordinator), and a handler that must not
write elsewhere what it wants exactly once.

A batch that failed is dropped: its transaction aborted (or the producer
replaced), and the member reads again from the group's committed offsets, so the
next batch starts where the last committed one ended.

Pure: no I/O. Caller: actors.member only.
"""

from __future__ import annotations

import enum
import itertools
from typing import NamedTuple

from rafka.core.errors import (ClusterAuthorizationFailed, FencedInstanceId, GroupAuthorizationFailed,
                               InvalidProducerEpoch, InvalidProducerIdMapping, InvalidRecord, InvalidTxnState,
                               KafkaError, ProducerFenced, RecordTooLarge, SerializationError,
                               TopicAuthorizationFailed, TransactionalIdAuthorizationFailed, UnknownProducerId,
                               UnsupportedForMessageFormat, UnsupportedVersion)
from rafka.core.structs import ProducerRecord

# A handler's output per batch, at most: the member holds it all in one
# transaction (and in the producer's buffer) before the commit.
OUTPUT_RECORDS_PER_BATCH_MAX = 100_000


def output_records(returned, *, limit: int = OUTPUT_RECORDS_PER_BATCH_MAX) -> list[ProducerRecord]:
    """What a handler returned, as the records the member writes: None (no
    output) or an iterable of ProducerRecord. Anything else is a bug in the
    handler: TypeError naming what came back; more than `limit`: ValueError."""
    if returned is None:
        return []
    if isinstance(returned, (str, bytes, bytearray, memoryview, ProducerRecord)) or not hasattr(returned, "__iter__"):
        raise TypeError(f"a member's handler returns None or an iterable of ProducerRecord, "
                        f"got {type(returned).__name__}")
    records = list(itertools.islice(returned, limit + 1))
    if len(records) > limit:
        raise ValueError(f"a member's handler returned more than {limit} records for one batch")
    for record in records:
        if not isinstance(record, ProducerRecord):
            raise TypeError(f"a member's handler returns ProducerRecords, got a {type(record).__name__} "
                            f"among them")
    return records


class BatchSpan(NamedTuple):
    """Per partition of a batch: the offset of its first record, and the next
    offset to read after it (what the batch commits)."""

    first_offsets: dict[tuple[str, int], int]
    end_offsets: dict[tuple[str, int], int]


def batch_span(records) -> BatchSpan:
    """The span of a poll's records (in offset order per partition, as poll
    hands them out); raises if they are not, which would commit a wrong offset."""
    first: dict[tuple[str, int], int] = {}
    end: dict[tuple[str, int], int] = {}
    for record in records:
        tp = (record.topic, record.partition)
        if tp in end and record.offset < end[tp]:
            raise ValueError(f"records of {tp[0]}-{tp[1]} out of order: {record.offset} after {end[tp] - 1}")
        first.setdefault(tp, record.offset)
        end[tp] = record.offset + 1
    return BatchSpan(first, end)


def rewind_positions(span: BatchSpan, committed: dict[tuple[str, int], int | None],
                     assignment) -> dict[tuple[str, int], int]:
    """Where to read again after the batch `span` did not commit: for each of its
    partitions still assigned, the group's committed offset (the truth, also when
    a commit that seemed to fail did land), else, nothing committed yet, the
    batch's first offset (where the reset put the member). Partitions no longer
    assigned start from the committed offset with their next owner."""
    assigned = {tuple(tp) for tp in assignment}
    positions = {}
    for tp, first in span.first_offsets.items():
        if tp in assigned:
            offset = committed.get(tp)
            positions[tp] = first if offset is None else offset
    return positions


class OwedCommits:
    """Offsets a member's commit was refused for a stale member epoch (KIP-848
    STALE_MEMBER_EPOCH: the epoch moved on while the commit was sent; Kafka's
    consumer, like rafka's, does not resend it). The member commits them again
    after its next poll (`due`), for the partitions it still owns then: a kept
    partition is committed to its end even if no record follows. A later commit
    that succeeds settles its partitions' debts: sent after it, an owed offset
    would move the committed offset back."""

    def __init__(self) -> None:
        self._owed: dict = {}

    def __bool__(self) -> bool:
        return bool(self._owed)

    def refused(self, offsets: dict) -> None:
        self._owed.update(offsets)

    def settled(self, offsets) -> None:
        for tp in offsets:
            self._owed.pop(tp, None)

    def due(self, owned) -> dict:
        """What to commit now, for the partitions owned; the rest is dropped (their
        next owner reads from the last committed offset)."""
        owed, self._owed = {tp: offset for tp, offset in self._owed.items() if tp in owned}, {}
        return owed


class Recovery(enum.Enum):
    ABORT = "abort the transaction, read the batch again"
    NEW_PRODUCER = "a new producer for the transactional id, read the batch again"
    STOP = "abort if it can, stop the member with the error"


# What a failed exactly-once batch means for the member, by error type (first
# match). The producer is done after a fatal error, and one that was fenced may
# have been fenced by the coordinator (a transaction past its timeout bumps the
# epoch): a new producer's init_transactions bumps it again and goes on. Errors
# that a new producer would get again stop the member; FENCED_INSTANCE_ID means
# another member holds this one's group.instance.id: this one is the zombie. A
# record the handler made that cannot be written would fail the same way again.
RECOVERY_BY_ERROR: tuple[tuple[type, Recovery], ...] = (
    (ProducerFenced, Recovery.NEW_PRODUCER),
    (InvalidProducerEpoch, Recovery.NEW_PRODUCER),
    (InvalidProducerIdMapping, Recovery.NEW_PRODUCER),
    (InvalidTxnState, Recovery.NEW_PRODUCER),
    (UnknownProducerId, Recovery.NEW_PRODUCER),
    (TransactionalIdAuthorizationFailed, Recovery.STOP),
    (ClusterAuthorizationFailed, Recovery.STOP),
    (TopicAuthorizationFailed, Recovery.STOP),
    (GroupAuthorizationFailed, Recovery.STOP),
    (UnsupportedVersion, Recovery.STOP),
    (UnsupportedForMessageFormat, Recovery.STOP),
    (FencedInstanceId, Recovery.STOP),
    (RecordTooLarge, Recovery.STOP),
    (SerializationError, Recovery.STOP),
    (InvalidRecord, Recovery.STOP),
)


def recovery_for(error: BaseException) -> Recovery:
    """What the member does after `error` in a batch's transaction. A Kafka error
    not in the table (a rebalance's ILLEGAL_GENERATION, a timeout, a batch that
    failed for good) is abortable; anything else is the handler's bug: STOP."""
    for error_type, recovery in RECOVERY_BY_ERROR:
        if isinstance(error, error_type):
            return recovery
    return Recovery.ABORT if isinstance(error, KafkaError) else Recovery.STOP
