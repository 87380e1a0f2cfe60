"""What rafka's clients ask any node about the cluster, and how the answers read:
Metadata v12 (nodes, topics, each partition's leader and leader epoch),
FindCoordinator v4 (the coordinator of a group or a transactional id),
DescribeConfigs v4 (a topic's max.message.bytes) and InitProducerId v4 (an
idempotent or transactional producer's id and epoch).

Pure: a builder per request (a kio request entity) and a reader per answer
(plain values, or the typed KafkaError raised). No I/O; client.metadata owns
the connections, which node is asked and the retries.

Invariants:
  a reader raises an error the node answered for the whole request; an error
  it answered for one topic or partition is a value (the caller decides: an
  unknown topic is final for a send, a partition without a leader is retried);
  one fixed version per API, the newest the handlers route (handlers.metadata,
  find_coordinator, describe_configs, init_producer_id).

Callers: client.metadata (every request here), tests.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Iterable

from kio.schema.describe_configs.v4 import request as describe_configs_v4
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.init_producer_id.v4 import request as init_producer_id_v4
from kio.schema.metadata.v12 import request as metadata_v12
from kio.static.primitive import i8, i16, i32Timedelta, i64

from rafka.core.errors import KafkaError, UnknownServerError, error_for_code

GROUP_KEY_TYPE = 0           # FindCoordinator: a consumer group
TRANSACTION_KEY_TYPE = 1     # FindCoordinator: a transactional id
TOPIC_RESOURCE = 2           # DescribeConfigs: a topic
NO_PRODUCER_ID = -1
MAX_MESSAGE_BYTES = "max.message.bytes"


@dataclasses.dataclass(frozen=True)
class PartitionMetadata:
    partition: int
    leader_node: int          # -1: no leader now (LEADER_NOT_AVAILABLE)
    leader_epoch: int
    replica_nodes: tuple[int, ...] = ()   # from a broker: the replicas' broker ids, preferred first


@dataclasses.dataclass(frozen=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    is_internal: bool
    partitions: tuple[PartitionMetadata, ...]   # by partition index


@dataclasses.dataclass(frozen=True)
class MetadataAnswer:
    nodes: dict[int, tuple[str, int]]            # node id -> (host, port)
    controller_node: int
    topics: dict[str, TopicMetadata]
    topic_errors: dict[str, KafkaError]          # a topic asked for and refused (unknown, invalid name)


def _error(code: ErrorCode, message: str | None, what: str) -> KafkaError:
    return error_for_code(int(code), message or what)


def metadata_request(topics: Iterable[str] | None) -> metadata_v12.MetadataRequest:
    """Metadata for `topics`; None: every topic (internal ones too)."""
    wanted = None if topics is None else tuple(metadata_v12.MetadataRequestTopic(topic_id=None, name=t)
                                               for t in topics)
    return metadata_v12.MetadataRequest(topics=wanted, allow_auto_topic_creation=False,
                                        include_topic_authorized_operations=False)


def metadata_answer(response) -> MetadataAnswer:
    nodes = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
    topics, errors = {}, {}
    for topic in response.topics:
        if topic.error_code != ErrorCode.none:
            errors[topic.name] = _error(topic.error_code, None, f"metadata of topic {topic.name!r}")
            continue
        # Partitions come in any order; a partition the node has no leader for has
        # leader -1 (and LEADER_NOT_AVAILABLE), which the cache treats as retriable.
        partitions = sorted((PartitionMetadata(int(p.partition_index), int(p.leader_id), int(p.leader_epoch),
                                               tuple(int(n) for n in p.replica_nodes))
                             for p in topic.partitions), key=lambda p: p.partition)
        topics[topic.name] = TopicMetadata(topic.name, topic.topic_id, topic.is_internal, tuple(partitions))
    return MetadataAnswer(nodes=nodes, controller_node=int(response.controller_id), topics=topics,
                          topic_errors=errors)


def find_coordinator_request(key: str, *, key_type: int = GROUP_KEY_TYPE) -> find_coordinator_v4.FindCoordinatorRequest:
    """The coordinator of a group (GROUP_KEY_TYPE) or of a transactional id
    (TRANSACTION_KEY_TYPE)."""
    return find_coordinator_v4.FindCoordinatorRequest(key_type=i8(key_type), coordinator_keys=(key,))


def _the_one(entries, name: str, what: str):
    """The one entry of an answer's list that is about `name` (the key asked
    for); its error raised. Anything but exactly one: UNKNOWN_SERVER_ERROR."""
    found = [e for e in entries if e[0] == name]
    if len(found) != 1:
        raise UnknownServerError(f"{len(found)} answers about {what}")
    entry = found[0][1]
    if entry.error_code != ErrorCode.none:
        raise _error(entry.error_code, entry.error_message, what)
    return entry


def find_coordinator_answer(response, key: str) -> tuple[str, int]:
    """(host, port) of the coordinator of the group or transactional id `key`; its
    error raised (COORDINATOR_NOT_AVAILABLE while it has no endpoint: retriable)."""
    coordinator = _the_one([(c.key, c) for c in response.coordinators], key, f"the coordinator of {key!r}")
    return coordinator.host, int(coordinator.port)


def max_message_bytes_request(topic: str) -> describe_configs_v4.DescribeConfigsRequest:
    return describe_configs_v4.DescribeConfigsRequest(
        resources=(describe_configs_v4.DescribeConfigsResource(resource_type=i8(TOPIC_RESOURCE), resource_name=topic,
                                                               configuration_keys=(MAX_MESSAGE_BYTES,)),),
        include_synonyms=False, include_documentation=False)


def max_message_bytes_answer(response, topic: str) -> int:
    """The topic's max.message.bytes; UNKNOWN_TOPIC_OR_PARTITION (or another error) raised."""
    result = _the_one([(r.resource_name, r) for r in response.results], topic, f"the configs of topic {topic!r}")
    values = [c.value for c in result.configs if c.name == MAX_MESSAGE_BYTES]
    if len(values) != 1 or values[0] is None:
        raise UnknownServerError(f"no {MAX_MESSAGE_BYTES} for topic {topic!r}")
    return int(values[0])


def init_producer_id_request(transactional_id: str | None = None, *, transaction_timeout_ms: int = 60_000,
                             producer_id: int = NO_PRODUCER_ID,
                             producer_epoch: int = -1) -> init_producer_id_v4.InitProducerIdRequest:
    """An idempotent producer's id (no transactional id: a fresh id, epoch 0), or
    a transactional producer's from its transaction coordinator; `producer_id`
    and `producer_epoch`: the current ones, to have the epoch bumped (KIP-360)."""
    return init_producer_id_v4.InitProducerIdRequest(
        transactional_id=transactional_id,
        transaction_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=transaction_timeout_ms)),
        producer_id=i64(producer_id), producer_epoch=i16(producer_epoch))


def init_producer_id_answer(response) -> tuple[int, int]:
    """(producer id, epoch); the node's error raised."""
    if response.error_code != ErrorCode.none:
        raise _error(response.error_code, None, "InitProducerId")
    return int(response.producer_id), int(response.producer_epoch)
