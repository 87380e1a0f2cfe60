"""ElectLeaders v0-2, AlterPartitionReassignments v0-1 and
ListPartitionReassignments v0, on the controller's node (a broker's edge
forwards them there, as Kafka's brokers forward them to the controller, KIP-590;
any other node answers NOT_CONTROLLER).

What Kafka answers (ControllerApis, ReplicationControlManager), and what these
handlers do the same way:
  * authorization: ALTER on the cluster for ElectLeaders and
    AlterPartitionReassignments, DESCRIBE on the cluster for
    ListPartitionReassignments; refused: CLUSTER_AUTHORIZATION_FAILED at the top
    level, and for ElectLeaders on every partition named too
    (ElectLeadersRequest.getErrorResponse); nothing is asked of the controller.
  * ElectLeaders: per partition, none (elected), ELECTION_NOT_NEEDED,
    PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
    UNKNOWN_TOPIC_OR_PARTITION, each with its message (core.metadata
    .elect_on_request decides); v0 has no election type (preferred); null
    topic_partitions: every partition, those needing no election left out. An
    unknown election type fails the whole request (INVALID_REQUEST at the top and
    on every partition named).
  * AlterPartitionReassignments: per partition its error, the others go on;
    null replicas cancels (NO_REASSIGNMENT_IN_PROGRESS when nothing moves); a bad
    target INVALID_REPLICA_ASSIGNMENT; v1's allow_replication_factor_change false
    refuses a change of size (INVALID_REPLICATION_FACTOR). Answered once the
    controller has committed the change (the new replicas catch up afterwards).
  * ListPartitionReassignments: the partitions moving, their replicas, adding
    and removing replicas as broker ids; unknown topics and partitions, and those
    not moving, left out; null topics: every topic.
  * a request not done within its timeout: REQUEST_TIMED_OUT (the work goes on).
Caller: protocol.node_table, through `routes(admin)`.
"""

from __future__ import annotations

import datetime
from typing import Protocol

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from rafka.core.errors import KafkaError
from rafka.core.metadata import PREFERRED_ELECTION, ElectionResult
from rafka.protocol.authorization import decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.partitions import by_topic, error_code_of, error_message_of
from rafka.protocol.handlers.topic_admin import within

ELECT_LEADERS_KEY, ALTER_REASSIGNMENTS_KEY, LIST_REASSIGNMENTS_KEY = 43, 45, 46
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))

# (topic, partition, replicas, adding replicas, removing replicas), as broker ids
OngoingReassignment = tuple[str, int, list[int], list[int], list[int]]


class PartitionAdmin(Protocol):
    """The controller's calls."""

    async def elect_leaders(self, election_type: int,
                            partitions: list[tuple[str, int]] | None) -> list[ElectionResult]: ...

    async def alter_partition_reassignments(self, moves: list[tuple[str, int, list[int] | None]],
                                            allow_replication_factor_change: bool = ...
                                            ) -> list[KafkaError | None]:
        """Per move, in order, None (started, or cancelled) or why not."""

    async def list_partition_reassignments(self, partitions: list[tuple[str, list[int]]] | None
                                           ) -> list[OngoingReassignment]: ...



def routes(admin: PartitionAdmin) -> list[Route]:
    async def elect_leaders(request, context: RequestContext):
        response_type = load_response_schema(ELECT_LEADERS_KEY, context.api_version)
        module = module_of(response_type)
        election_type = int(request.election_type) if context.api_version >= 1 else PREFERRED_ELECTION
        named = None if request.topic_partitions is None else [
            (t.topic, int(p)) for t in request.topic_partitions for p in t.partitions]
        failure = decide(context, request).refusal
        results: list[ElectionResult] = []
        if failure is None:
            try:
                results = await within(admin.elect_leaders(election_type, named),
                                       int(request.timeout.total_seconds() * 1000))
            except KafkaError as error:
                failure = error
        if failure is not None:
            results = [(topic, partition, failure) for topic, partition in named or ()]
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=error_code_of(failure),
                    replica_election_results=tuple(
                        make(module.ReplicaElectionResult, topic=topic, partition_result=tuple(
                            make(module.PartitionResult, partition_id=i32(partition), error_code=error_code_of(error),
                                 error_message=error_message_of(error))
                            for _, partition, error in items))
                        for topic, items in by_topic((item[0], item) for item in results).items()))

    async def alter_reassignments(request, context: RequestContext):
        response_type = load_response_schema(ALTER_REASSIGNMENTS_KEY, context.api_version)
        module = module_of(response_type)
        allow_change = bool(getattr(request, "allow_replication_factor_change", True))
        answer = dict(throttle_time=_NO_THROTTLE, allow_replication_factor_change=allow_change)
        refusal = decide(context, request).refusal
        if refusal is not None:
            return make(response_type, **answer, error_code=error_code_of(refusal),
                        error_message=error_message_of(refusal),
                        responses=())
        moves = [(t.name, int(p.partition_index), None if p.replicas is None else [int(b) for b in p.replicas])
                 for t in request.topics for p in t.partitions]
        try:
            errors = await within(admin.alter_partition_reassignments(moves, allow_change),
                                  int(request.timeout.total_seconds() * 1000))
        except KafkaError as error:
            errors = [error] * len(moves)
        return make(response_type, **answer, error_code=ErrorCode.none, error_message=None, responses=tuple(
            make(module.ReassignableTopicResponse, name=topic, partitions=tuple(
                make(module.ReassignablePartitionResponse, partition_index=i32(partition),
                     error_code=error_code_of(error), error_message=error_message_of(error))
                for _, partition, _, error in items))
            for topic, items in by_topic((move[0], (*move[:2], move[2], error))
                                         for move, error in zip(moves, errors)).items()))

    async def list_reassignments(request, context: RequestContext):
        response_type = load_response_schema(LIST_REASSIGNMENTS_KEY, context.api_version)
        module = module_of(response_type)
        refusal = decide(context, request).refusal
        if refusal is not None:
            return make(response_type, throttle_time=_NO_THROTTLE, error_code=error_code_of(refusal),
                        error_message=error_message_of(refusal), topics=())
        named = None if request.topics is None else [(t.name, [int(p) for p in t.partition_indexes])
                                                      for t in request.topics]
        try:
            ongoing = await within(admin.list_partition_reassignments(named),
                                   int(request.timeout.total_seconds() * 1000))
        except KafkaError as error:
            return make(response_type, throttle_time=_NO_THROTTLE, error_code=error_code_of(error),
                        error_message=error_message_of(error), topics=())
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                    topics=tuple(make(module.OngoingTopicReassignment, name=topic, partitions=tuple(
                        make(module.OngoingPartitionReassignment, partition_index=i32(partition),
                             replicas=tuple(i32(b) for b in replicas), adding_replicas=tuple(i32(b) for b in adding),
                             removing_replicas=tuple(i32(b) for b in removing))
                        for _, partition, replicas, adding, removing in items))
                        for topic, items in by_topic((item[0], item) for item in ongoing).items()))

    return [Route(ELECT_LEADERS_KEY, 0, 2, elect_leaders), Route(ALTER_REASSIGNMENTS_KEY, 0, 1, alter_reassignments),
            Route(LIST_REASSIGNMENTS_KEY, 0, 0, list_reassignments)]
