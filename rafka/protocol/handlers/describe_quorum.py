"""DescribeQuorum v0-2: the metadata log's quorum, as kafka-metadata-quorum.sh
describe --status / --replication and the AdminClients' describeMetadataQuorum
show it.

rafka's metadata log is the controller's (actors.controller): one writer, fsynced
before any change is answered, no Raft election. Its quorum as Kafka describes one:
  * the topic-partition `__cluster_metadata`-0;
  * told in the ids clients know, as a Kafka cluster in combined mode (a node
    both broker and controller): the one voter, and so the leader, is the broker
    that Metadata and DescribeCluster name as the controller; its epoch is the
    controller epoch (one more at every controller start, as a Raft leader's
    epoch moves at every election);
  * the high watermark is the log's end: records written (a record is committed
    once written, the only voter being the writer); the voter's log end is that
    offset, its fetch and caught-up times now (Kafka's RaftUtil.toReplicaState
    for the leader);
  * the observers are the other brokers, each at the image version (metadata
    log offset) its network processes last reported holding, seen then (the
    controller's pings are Kafka's observers' fetches), caught up when one last
    reported the newest; -1 where unknown;
  * v2 lists the voter's node with its controller listener ("CONTROLLER": the
    controller actor's node) and a zero directory id (rafka's controller has no
    log directory id); v0 and v1 have no node list.
Rules (Kafka's ControllerApis.handleDescribeQuorum, KafkaRaftClient
.handleDescribeQuorumRequest, DescribeQuorumRequest):
  * DESCRIBE on the cluster; refused: the top-level CLUSTER_AUTHORIZATION_FAILED
    and no topics (getErrorResponse);
  * anything but exactly one topic `__cluster_metadata` with exactly partition 0:
    every partition named answers UNKNOWN_TOPIC_OR_PARTITION;
  * a node that is not the controller's (an actor's internal node) answers as a
    Raft node that is not the leader: NOT_LEADER_OR_FOLLOWER on
    `__cluster_metadata`-0. Brokers relay the request to the controller
    (protocol.edge: Kafka's brokers forward it, KafkaApis.forwardToControllerOrFail);
    one that cannot reach it answers the top-level REQUEST_TIMED_OUT, as Kafka's
    forwarding does (`CONTROLLER_UNREACHABLE`, a broker's quorum).
Caller: dispatch, through `route(quorum)`.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64, u16

from rafka.protocol.authorization import decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of

API_KEY = 55
MIN_VERSION, MAX_VERSION = 0, 2
METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
CONTROLLER_LISTENER = "CONTROLLER"
NO_DIRECTORY_ID = uuid.UUID(int=0)
# Kafka's Errors messages, which v2 answers carry
_MESSAGES = {ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
             ErrorCode.request_timed_out: "The request timed out.",
             ErrorCode.not_leader_or_follower: (
                 "For requests intended only for the leader, this error indicates that the broker is not the "
                 "current leader. For requests intended for any replica, this error indicates that the broker is "
                 "not a replica of the topic partition."),
             ErrorCode.cluster_authorization_failed: "Cluster authorization failed."}


@dataclasses.dataclass(frozen=True)
class ReplicaState:
    replica_id: int
    log_end_offset: int
    last_fetch_timestamp_ms: int = -1
    last_caught_up_timestamp_ms: int = -1


@dataclasses.dataclass(frozen=True)
class QuorumState:
    """The metadata log's quorum, from the controller (wall-clock ms)."""
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...]
    leader_endpoint: tuple[str, int] | None   # the voter's listener (v2 nodes)


CONTROLLER_UNREACHABLE = object()   # a broker's quorum: only what it could not relay is answered here


def route(quorum: Callable[[], QuorumState] | object | None) -> Route:
    async def handle_describe_quorum(request, context: RequestContext):
        return describe_quorum(quorum, request, context)
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_describe_quorum)


def describe_quorum(quorum: Callable[[], QuorumState] | object | None, request, context: RequestContext):
    response_type = load_response_schema(API_KEY, context.api_version)
    module = module_of(response_type)
    refusal = decide(context, request).refusal
    code = ErrorCode(refusal.code) if refusal is not None else (
        ErrorCode.request_timed_out if quorum is CONTROLLER_UNREACHABLE else None)
    if code is not None:
        return make(response_type, error_code=code, error_message=_MESSAGES.get(code), topics=(), nodes=())
    named = [(topic.topic_name, int(p.partition_index)) for topic in request.topics for p in topic.partitions]
    if named != [(METADATA_TOPIC, METADATA_PARTITION)] or len(request.topics) != 1:
        return _answer(response_type, [
            (topic.topic_name, [_partition(module, int(p.partition_index), ErrorCode.unknown_topic_or_partition)
                                for p in topic.partitions]) for topic in request.topics])
    if quorum is None:
        return _answer(response_type, [(METADATA_TOPIC, [_partition(module, METADATA_PARTITION,
                                                                    ErrorCode.not_leader_or_follower)])])
    state = quorum()
    answered = _partition(module, METADATA_PARTITION, ErrorCode.none, leader_id=i32(state.leader_id),
                          leader_epoch=i32(state.leader_epoch), high_watermark=i64(state.high_watermark),
                          current_voters=tuple(_replica(module, r) for r in state.voters),
                          observers=tuple(_replica(module, r) for r in state.observers))
    nodes = () if state.leader_endpoint is None or context.api_version < 2 else (make(
        module.Node, node_id=i32(state.leader_id), listeners=(make(
            module.Listener, name=CONTROLLER_LISTENER, host=state.leader_endpoint[0],
            port=u16(state.leader_endpoint[1])),)),)
    return _answer(response_type, [(METADATA_TOPIC, [answered])], nodes=nodes)


def _partition(module, partition: int, error: ErrorCode, **values):
    # Kafka's generated defaults where its code sets nothing: 0, and "" for a message
    defaults = dict(leader_id=i32(0), leader_epoch=i32(0), high_watermark=i64(0), current_voters=(),
                    observers=())
    return make(module.PartitionData, partition_index=i32(partition), error_code=error,
                error_message=_MESSAGES.get(error, ""), **{**defaults, **values})


def _replica(module, replica: ReplicaState):
    return make(module.ReplicaState, replica_id=i32(replica.replica_id), replica_directory_id=NO_DIRECTORY_ID,
                log_end_offset=i64(replica.log_end_offset),
                last_fetch_timestamp=i64(replica.last_fetch_timestamp_ms),
                last_caught_up_timestamp=i64(replica.last_caught_up_timestamp_ms))


def _answer(response_type, topics, *, nodes=()):
    module = module_of(response_type)
    return make(response_type, error_code=ErrorCode.none, error_message="", nodes=nodes, topics=tuple(
        make(module.TopicData, topic_name=name, partitions=tuple(partitions)) for name, partitions in topics))
