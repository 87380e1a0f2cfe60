"""Kafka's consumer protocol payloads: the subscription and assignment bytes a
consumer group carries (ConsumerProtocolSubscription / ConsumerProtocolAssignment,
each an int16 version, then the struct), as Kafka's ConsumerProtocol writes them.
Callers: handlers.group_admin (DescribeGroups' member metadata and assignment).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment, TopicPartition
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.serial import entity_writer
from kio.static.primitive import i32

_VERSION = struct.Struct(">h")


def _encode(entity) -> bytes:
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(type(entity).__version__))
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def encode_subscription(topics: Iterable[str]) -> bytes:
    return _encode(ConsumerProtocolSubscription(topics=tuple(sorted(topics)), user_data=None))


def encode_assignment(partitions: Iterable[tuple[str, int]]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return _encode(ConsumerProtocolAssignment(assigned_partitions=tuple(
        TopicPartition(topic=t, partitions=tuple(i32(p) for p in ps)) for t, ps in by_topic.items()),
        user_data=None))
