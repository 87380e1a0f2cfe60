"""TxnOffsetCommit v0-4: a transactional producer commits a consumer group's
offsets inside its transaction (send_offsets_to_transaction), on the group's
coordinator node, as OffsetCommit is (KafkaApis.handleTxnOffsetCommitRequest,
GroupCoordinatorService.commitTransactionalOffsets).

What Kafka answers, and these handlers the same way:
  * authorization: WRITE on the transactional id (refused:
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition), READ on the group
    (GROUP_AUTHORIZATION_FAILED on every partition), READ on each topic (a
    refused topic's partitions: TOPIC_AUTHORIZATION_FAILED, the rest go on);
  * a group this node does not coordinate: NOT_COORDINATOR; one still loading:
    COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE below v2 (clients
    before KAFKA-7296 do not expect it); every error is per partition;
  * the coordinator decides (core.coordinator_shard.commit_transactional_offsets):
    membership (v3+ carries generation, member id and instance id, KIP-447),
    metadata size, unknown partitions; its write fails as Kafka's runtime maps a
    failed append: REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS and
    UNKNOWN_TOPIC_OR_PARTITION as COORDINATOR_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER
    as NOT_COORDINATOR, NETWORK_EXCEPTION as COORDINATOR_LOAD_IN_PROGRESS
    (CoordinatorOperationExceptionHelper); the leader's INVALID_PRODUCER_EPOCH (a
    fenced producer) as it is;
  * a producer's first commit of a transaction on this partition is verified with
    the transaction coordinator (KIP-890; core.coordinator_shard): a transaction
    that does not hold the partition (its AddOffsetsToTxn never came, or it ended)
    answers TRANSACTION_ABORTABLE from v4, INVALID_TXN_STATE below it, a fenced
    producer INVALID_PRODUCER_EPOCH, the coordinator's other answers as they are
    (CONCURRENT_TRANSACTIONS, retried by clients) and one that could not be asked
    COORDINATOR_LOAD_IN_PROGRESS (Kafka's CoordinatorPartitionWriter with
    AddPartitionsToTxnManager).
Caller: node_table, through `route(groups)`.
"""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from rafka.core.acl import ResourceType
from rafka.core.errors import coordinator_append_error
from rafka.protocol.authorization import decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.group_offsets import GroupHost
from rafka.protocol.handlers.partitions import error_code_of
from rafka.protocol.txn_verification import verification_error

API_KEY = 28
MIN_VERSION, MAX_VERSION = 0, 4
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def route(host: GroupHost) -> Route:
    async def handle_txn_offset_commit(request, context: RequestContext):
        return await commit(host, request, context)
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_txn_offset_commit)


async def commit(host: GroupHost, request, context: RequestContext):
    version = context.api_version
    decision = decide(context, request)
    refused = decision.refused_names(ResourceType.TOPIC)
    offsets = {(t.name, int(p.partition_index)): (int(p.committed_offset),
                                                  int(getattr(p, "committed_leader_epoch", -1)),
                                                  p.committed_metadata or "")
               for t in request.topics if t.name not in refused for p in t.partitions}
    per_partition: dict = {}
    if decision.refusal is not None:
        code = error_code_of(decision.refusal)
    elif not offsets:   # nothing left to commit: the coordinator is not asked
        code = ErrorCode.none
    else:
        code = ErrorCode.none
        coordinator = host.coordinator_for(request.group_id)
        if coordinator is None:
            code = ErrorCode.not_coordinator
        else:
            try:
                per_partition = await coordinator.commit_transactional_offsets(
                    request.group_id, offsets, transactional_id=request.transactional_id,
                    producer_id=int(request.producer_id),
                    producer_epoch=int(request.producer_epoch), member_id=getattr(request, "member_id", ""),
                    generation=int(getattr(request, "generation_id", -1)),
                    group_instance_id=getattr(request, "group_instance_id", None))
            except Exception as error:   # a failed verification or append, as Kafka's runtime answers it
                code = error_code_of(coordinator_append_error(verification_error(error, version)))
    if version < 2 and code == ErrorCode.coordinator_load_in_progress:
        code = ErrorCode.coordinator_not_available
    response_type = load_response_schema(API_KEY, version)
    module = module_of(response_type)
    topics = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            if code != ErrorCode.none:
                partition_code = code
            elif t.name in refused:
                partition_code = error_code_of(decision.refused[ResourceType.TOPIC][t.name])
            else:
                partition_code = error_code_of(per_partition.get((t.name, int(p.partition_index))))
            partitions.append(make(module.TxnOffsetCommitResponsePartition, partition_index=p.partition_index,
                                   error_code=partition_code))
        topics.append(make(module.TxnOffsetCommitResponseTopic, name=t.name, partitions=tuple(partitions)))
    return make(response_type, throttle_time=_NO_THROTTLE, topics=tuple(topics))
