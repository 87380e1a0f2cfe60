"""Kafka's consumer protocol payloads: the subscription and assignment bytes a
consumer group carries (ConsumerProtocolSubscription / ConsumerProtocolAssignment,
each an int16 version, then the struct), as Kafka's ConsumerProtocol writes them.
A version newer than the newest known is read as the newest (Kafka's rule: new
versions only add fields at the end). Garbage is InvalidRequest, checked by
bounds.check_entity before kio allocates anything.
Callers: handlers.group_admin (DescribeGroups), handlers.group_membership
(JoinGroup's subscriptions, SyncGroup's assignment).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment, TopicPartition
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as SubscriptionV1
from kio.schema.consumer_protocol_subscription.v2.data import ConsumerProtocolSubscription as SubscriptionV2
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as SubscriptionV3
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from rafka.core.errors import InvalidRequest
from rafka.protocol.bounds import KIO_DECODE_ERRORS, DeclaredSizeTooLarge, check_entity

_SUBSCRIPTIONS = (ConsumerProtocolSubscription, SubscriptionV1, SubscriptionV2, SubscriptionV3)

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


def decode_subscription(data: bytes | None) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
    """(subscribed topics, owned partitions) of a member's subscription bytes."""
    if not data or len(data) < _VERSION.size:
        raise InvalidRequest("empty consumer protocol subscription")
    (version,) = _VERSION.unpack_from(data, 0)
    if version < 0:
        raise InvalidRequest(f"consumer protocol subscription version {version}")
    schema = _SUBSCRIPTIONS[min(version, len(_SUBSCRIPTIONS) - 1)]
    try:
        check_entity(schema, data, _VERSION.size, len(data))
        subscription, _ = entity_reader(schema)(data, _VERSION.size)
    except (DeclaredSizeTooLarge, *KIO_DECODE_ERRORS) as error:
        raise InvalidRequest(f"unreadable consumer protocol subscription: {error}") from None
    owned = tuple((t.topic, int(p)) for t in getattr(subscription, "owned_partitions", ()) for p in t.partitions)
    return tuple(subscription.topics), owned
