"""Kafka's consumer protocol payloads: the subscription and assignment bytes a
consumer group carries (ConsumerProtocolSubscription / ConsumerProtocolAssignment,
each an int16 version, then the struct), as Kafka's ConsumerProtocol writes them.
A version newer than the newest known is read as the newest (Kafka's rule: new
versions only add fields at the end). Garbage is InvalidRequest, checked by
bounds.check_entity before kio allocates anything.
Callers: handlers.group_admin (DescribeGroups), handlers.group_membership
(JoinGroup's subscriptions, SyncGroup's assignment), protocol.group_requests
(rafka's own group members).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment, TopicPartition
from kio.schema.consumer_protocol_assignment.v1.data import ConsumerProtocolAssignment as AssignmentV1
from kio.schema.consumer_protocol_assignment.v2.data import ConsumerProtocolAssignment as AssignmentV2
from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment as AssignmentV3
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as SubscriptionV1
from kio.schema.consumer_protocol_subscription.v1.data import TopicPartition as OwnedPartition
from kio.schema.consumer_protocol_subscription.v2.data import ConsumerProtocolSubscription as SubscriptionV2
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as SubscriptionV3
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from rafka.core.errors import InvalidRequest
from rafka.protocol.bounds import KIO_DECODE_ERRORS, DeclaredSizeTooLarge, check_entity

_SUBSCRIPTIONS = (ConsumerProtocolSubscription, SubscriptionV1, SubscriptionV2, SubscriptionV3)
_ASSIGNMENTS = (ConsumerProtocolAssignment, AssignmentV1, AssignmentV2, AssignmentV3)

_VERSION = struct.Struct(">h")


def _encode(entity) -> bytes:
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(type(entity).__version__))
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def encode_subscription(topics: Iterable[str], owned: Iterable[tuple[str, int]] = ()) -> bytes:
    """Version 0 (the topics), or version 1 when the member names partitions it owns."""
    topics, owned = tuple(sorted(set(topics))), tuple(owned)
    if not owned:
        return _encode(ConsumerProtocolSubscription(topics=topics, user_data=None))
    return _encode(SubscriptionV1(topics=topics, user_data=None,
                                  owned_partitions=_topic_partitions(owned, OwnedPartition)))


def _topic_partitions(partitions: Iterable[tuple[str, int]], entity) -> tuple:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return tuple(entity(topic=t, partitions=tuple(i32(p) for p in ps)) for t, ps in by_topic.items())


def encode_assignment(partitions: Iterable[tuple[str, int]]) -> bytes:
    return _encode(ConsumerProtocolAssignment(assigned_partitions=_topic_partitions(partitions, TopicPartition),
                                              user_data=None))


def decode_assignment(data: bytes | None) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of a member's assignment bytes, sorted; no bytes:
    nothing assigned."""
    if not data:
        return []
    assignment = _decode(data, _ASSIGNMENTS, "assignment")
    return sorted((t.topic, int(p)) for t in assignment.assigned_partitions for p in t.partitions)


def decode_subscription(data: bytes | None) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
    """(subscribed topics, owned partitions) of a member's subscription bytes."""
    subscription = _decode(data, _SUBSCRIPTIONS, "subscription")
    owned = tuple((t.topic, int(p)) for t in getattr(subscription, "owned_partitions", ()) for p in t.partitions)
    return tuple(subscription.topics), owned


def _decode(data: bytes | None, schemas: tuple, what: str):
    """The payload's struct, read with the schema of its version (a newer version
    than the newest known as the newest)."""
    if not data or len(data) < _VERSION.size:
        raise InvalidRequest(f"empty consumer protocol {what}")
    (version,) = _VERSION.unpack_from(data, 0)
    if version < 0:
        raise InvalidRequest(f"consumer protocol {what} version {version}")
    schema = schemas[min(version, len(schemas) - 1)]
    try:
        check_entity(schema, data, _VERSION.size, len(data))
        return entity_reader(schema)(data, _VERSION.size)[0]
    except (DeclaredSizeTooLarge, *KIO_DECODE_ERRORS) as error:
        raise InvalidRequest(f"unreadable consumer protocol {what}: {error}") from None
