"""Metadata v0-12, answered from the node's newest ClusterImage.

Every version is served (Kafka 4 still serves 0-12): librdkafka picks the highest
version it knows, and Debian's librdkafka 2.0 knows none above 9.

What Kafka answers (KafkaApis.handleTopicMetadataRequest, KRaftMetadataCache
.getTopicMetadata), and what this handler does the same way:
  * topics null (v1+), or empty in v0: every topic, internal ones included
    (clients filter them); topics empty (v1+): none.
  * a name that is not a legal topic name: INVALID_TOPIC_EXCEPTION; a legal one
    that does not exist: UNKNOWN_TOPIC_OR_PARTITION. Topics are never created by a
    Metadata request here (Kafka's auto.create.topics.enable=false, what production
    clusters run with): allow_auto_topic_creation is ignored.
  * v12 may name a topic by id instead: an unknown id gets UNKNOWN_TOPIC_ID and a
    null name (KafkaApis: "unknownTopicIds"). Before v12 an id is refused with
    INVALID_REQUEST on that topic (MetadataRequest's constructor check).
  * a partition with no leader: leader -1 and LEADER_NOT_AVAILABLE; a replica with
    no endpoint yet is left out of the replica and ISR lists (it has no node id).
  * authorization: a topic the caller may not DESCRIBE is left out of an
    all-topics answer; named (or given by an id that exists), it answers
    TOPIC_AUTHORIZATION_FAILED with no partitions and the zero id, whether or not
    it exists (its existence is not told).
  * authorized operations (v8+), Kafka's bitfields, only when asked (else INT32_MIN,
    "not requested"): the cluster's (v8-10; librdkafka's describe_cluster reads
    them here) if the caller may DESCRIBE the cluster, else 0; each topic
    answered without error, its own.
Caller: dispatch, through `route(current_image)`.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Callable

from rafka.protocol.entities import load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from rafka.core.cluster_image import ClusterImage, TopicImage
from rafka.core.errors import InvalidTopic
from rafka.core.metadata import validate_topic_name
from rafka.core.acl import AclOperation, ResourceType
from rafka.protocol.authorization import Gate, check_of, gate
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import make, module_of

API_KEY = 3
MIN_VERSION, MAX_VERSION = 0, 12
AUTHORIZED_OPERATIONS_NOT_REQUESTED = i32(-2**31)
ZERO_UUID = uuid.UUID(int=0)
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def route(current_image: Callable[[], ClusterImage]) -> Route:
    async def handle_metadata(request, context: RequestContext):
        return metadata_response(current_image(), request, context.api_version, gate(context))
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_metadata)


_DESCRIBE = check_of(API_KEY, AclOperation.DESCRIBE, ResourceType.TOPIC)
# Kafka checks DESCRIBE on the cluster for the cluster's authorized operations
# (as DescribeCluster's, whose table row names it)
_DESCRIBE_CLUSTER = check_of(60, AclOperation.DESCRIBE, ResourceType.CLUSTER)


def metadata_response(image: ClusterImage, request, version: int, request_gate: Gate | None = None):
    types = _Types(version)
    request_gate = request_gate or Gate(None, "", "")
    if request.topics is None or (version == 0 and not request.topics):
        topics = [types.topic(t) for t in sorted(image.topics.values(), key=lambda t: t.name)
                  if request_gate.allows(_DESCRIBE, t.name)]
    else:
        topics = [_requested_topic(image, wanted, version, types, request_gate) for wanted in request.topics]
    # rack is left null: librdkafka sizes the scratch buffer it parses Metadata
    # into at 4x the response's bytes (rd_kafka_parse_Metadata0), and every broker
    # entry costs it 64 bytes of structs plus its strings rounded up to 8; with a
    # 9-character host and a 1-character rack that passes the budget, and from
    # about 37 nodes on, every Metadata answer fails as "Bad message format".
    # rafka has a node per actor, so clusters reach that. Racks are only for
    # follower fetching (KIP-392), which rafka does not offer.
    brokers = tuple(make(types.module.MetadataResponseBroker, node_id=i32(n.node_id), host=n.host,
                         port=i32(n.port), rack=None)
                    for n in image.nodes.values())
    cluster_operations = AUTHORIZED_OPERATIONS_NOT_REQUESTED
    if 8 <= version <= 10 and getattr(request, "include_cluster_authorized_operations", False):
        cluster_operations = i32(request_gate.authorized_operations(ResourceType.CLUSTER)
                                 if request_gate.allows(_DESCRIBE_CLUSTER) else 0)
    if version >= 8 and getattr(request, "include_topic_authorized_operations", False):
        topics = [dataclasses.replace(t, topic_authorized_operations=i32(
            request_gate.authorized_operations(ResourceType.TOPIC, t.name))) if t.error_code == ErrorCode.none else t
            for t in topics]
    return make(types.response, throttle_time=_NO_THROTTLE, brokers=brokers, cluster_id=image.cluster_id,
                controller_id=i32(image.controller_node), topics=tuple(topics),
                cluster_authorized_operations=cluster_operations)


def _requested_topic(image: ClusterImage, wanted, version: int, types: _Types, request_gate: Gate):
    topic_id = getattr(wanted, "topic_id", None)
    topic_id = topic_id if topic_id not in (None, ZERO_UUID) else None
    if topic_id is not None and wanted.name is None:
        if version < 12:
            return types.error(ErrorCode.invalid_request, None, topic_id)
        found = image.topic_by_id(topic_id)
        if found is not None and not request_gate.allows(_DESCRIBE, found.name):
            return types.error(ErrorCode.topic_authorization_failed, None, topic_id)
        return types.topic(found) if found else types.error(ErrorCode.unknown_topic_id, None, topic_id)
    if not request_gate.allows(_DESCRIBE, wanted.name):
        return types.error(ErrorCode.topic_authorization_failed, wanted.name, ZERO_UUID)
    try:
        validate_topic_name(wanted.name)
    except InvalidTopic:
        return types.error(ErrorCode.invalid_topic_exception, wanted.name, ZERO_UUID)
    found = image.topics.get(wanted.name)
    return types.topic(found) if found else types.error(ErrorCode.unknown_topic_or_partition, wanted.name,
                                                        ZERO_UUID)


class _Types:
    """The kio types of one Metadata version, and how to fill them."""

    def __init__(self, version: int) -> None:
        self.response = load_response_schema(API_KEY, version)
        self.module = module_of(self.response)

    def topic(self, topic: TopicImage):
        partitions = tuple(make(
            self.module.MetadataResponsePartition, error_code=ErrorCode.none if p.leader_node >= 0 else ErrorCode.leader_not_available,
            partition_index=i32(p.partition), leader_id=i32(p.leader_node), leader_epoch=i32(p.leader_epoch),
            replica_nodes=tuple(i32(n) for n in p.replica_nodes), isr_nodes=tuple(i32(n) for n in p.isr_nodes),
            offline_replicas=tuple(i32(n) for n in p.offline_nodes)) for p in topic.partitions)
        return make(
            self.module.MetadataResponseTopic, error_code=ErrorCode.none, name=topic.name, topic_id=topic.topic_id, is_internal=topic.is_internal,
            partitions=partitions, topic_authorized_operations=AUTHORIZED_OPERATIONS_NOT_REQUESTED)

    def error(self, code: ErrorCode, name: str | None, topic_id: uuid.UUID):
        return make(
            self.module.MetadataResponseTopic, error_code=code, name=name, topic_id=topic_id, is_internal=False, partitions=(),
            topic_authorized_operations=AUTHORIZED_OPERATIONS_NOT_REQUESTED)
