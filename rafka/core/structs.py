"""Small value types the clients share with Kafka users' code (kafka-python's names)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """A committed offset: the next offset to read, with the caller's metadata."""
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's place in its group (Kafka's ConsumerGroupMetadata), what
    `Producer.send_offsets_to_transaction` takes so that the group coordinator
    refuses offsets of a generation the group has moved past (KIP-447).
    generation_id -1 and member_id "": not a member (assign mode)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class ProducerRecord(NamedTuple):
    """A record to send (Kafka's ProducerRecord): what a member actor's handler
    returns for the member to write (actors.member), the arguments of
    `Producer.send`. partition None: by key, else sticky."""

    topic: str
    value: bytes | None = None
    key: bytes | None = None
    partition: int | None = None
    timestamp_ms: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] | None = None


class ConsumerRecord(NamedTuple):
    """One record as `Consumer.poll` returns it. `value is None` is a tombstone.
    Field order puts the per-batch fields first so a decoder can bind them once.
    A NamedTuple, as kafka-python's: one is made per record consumed, and a frozen
    dataclass's init cost three times as much."""

    topic: str
    partition: int
    timestamp_type: int
    leader_epoch: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclasses.dataclass(frozen=True)
class RecordMetadata:
    """What a producer's send future resolves to."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
