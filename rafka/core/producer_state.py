"""Idempotent producers: per producer id, its epoch and its last appended batches.

The leader checks each batch of an idempotent producer (producer id >= 0) before
appending it:
  - epoch older than the known one: INVALID_PRODUCER_EPOCH
  - a batch equal (first and last sequence) to one of the last
    BATCHES_KEPT_PER_PRODUCER appended: a duplicate (a retry of a batch whose ack
    was lost); the leader answers with the original offsets and appends nothing
  - a new epoch must start at sequence 0; otherwise the first sequence must
    follow the last one (mod 2^31), else OUT_OF_ORDER_SEQUENCE
Every replica applies `on_append` for the batches in its log (followers too), so
a new leader already knows the producers. Works on batch headers only.
Caller: the partition replica actor, from one thread.
"""

from __future__ import annotations

import collections
import dataclasses

from rafka.core.errors import InvalidProducerEpoch, OutOfOrderSequence
from rafka.core.records import NO_PRODUCER_ID, BatchHeader

BATCHES_KEPT_PER_PRODUCER = 5  # Kafka's max.in.flight.requests.per.connection bound for idempotence
SEQUENCE_MODULUS = 2**31


@dataclasses.dataclass(frozen=True)
class AppendedBatch:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclasses.dataclass
class ProducerEntry:
    epoch: int
    batches: collections.deque  # of AppendedBatch, newest last


class ProducerStateTable:
    def __init__(self) -> None:
        self._entries: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader) -> AppendedBatch | None:
        """Validate a produced batch. Returns the earlier append if it is a
        duplicate, None if it is new and in order; raises otherwise."""
        if header.producer_id == NO_PRODUCER_ID:
            return None
        entry = self._entries.get(header.producer_id)
        last_sequence = header.last_sequence
        if entry is None:
            if header.base_sequence != 0:
                raise OutOfOrderSequence(f"producer {header.producer_id} is unknown here and its "
                                         f"batch starts at sequence {header.base_sequence}, not 0")
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpoch(f"producer {header.producer_id} epoch {header.producer_epoch} "
                                       f"is older than {entry.epoch}")
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequence(f"producer {header.producer_id} new epoch "
                                         f"{header.producer_epoch} must start at sequence 0")
            return None
        for appended in entry.batches:
            if (appended.first_sequence, appended.last_sequence) == (header.base_sequence, last_sequence):
                return appended
        expected = (entry.batches[-1].last_sequence + 1) % SEQUENCE_MODULUS if entry.batches else 0
        if header.base_sequence != expected:
            raise OutOfOrderSequence(f"producer {header.producer_id} sent sequence "
                                     f"{header.base_sequence}, expected {expected}")
        return None

    def on_append(self, header: BatchHeader) -> None:
        """The batch (with its final offsets) is in the log."""
        if header.producer_id == NO_PRODUCER_ID:
            return
        entry = self._entries.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = ProducerEntry(header.producer_epoch, collections.deque(maxlen=BATCHES_KEPT_PER_PRODUCER))
            self._entries[header.producer_id] = entry
        entry.batches.append(AppendedBatch(header.base_sequence, header.last_sequence,
                                           header.base_offset, header.last_offset))

    def truncate_to(self, log_end_offset: int) -> None:
        """The log was cut at `log_end_offset`: forget batches at or above it."""
        for producer_id in list(self._entries):
            entry = self._entries[producer_id]
            kept = [b for b in entry.batches if b.last_offset < log_end_offset]
            if kept:
                entry.batches = collections.deque(kept, maxlen=BATCHES_KEPT_PER_PRODUCER)
            else:
                del self._entries[producer_id]

    @classmethod
    def rebuilt_from(cls, headers) -> ProducerStateTable:
        """The table for a log whose batch headers are `headers`, oldest first (a
        replica opening its log)."""
        table = cls()
        for header in headers:
            table.on_append(header)
        return table

    def producer_count(self) -> int:
        return len(self._entries)
