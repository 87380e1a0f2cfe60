"""AddPartitionsToTxn v0-5: partitions join a producer's transaction
(KafkaApis.handleAddPartitionsToTxnRequest).

What Kafka answers, and what this handler does the same way:
  * v0-3 (clients): one transaction. A partition the metadata does not know gets
    UNKNOWN_TOPIC_OR_PARTITION and every other OPERATION_NOT_ATTEMPTED, and none
    is added; else the coordinator's answer (core.transaction_shard
    .add_partitions) is every partition's. PRODUCER_FENCED is
    INVALID_PRODUCER_EPOCH below v2.
  * v4+ (partition leaders, KIP-890): a batch of transactions, each answered on
    its own; with verify_only the coordinator only says, per partition, whether
    it is in the transaction (TRANSACTION_ABORTABLE if not).
  * authorization (KafkaApis): v0-3 WRITE on the transactional id (refused:
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition) and on each
    topic (a refused topic's partitions TOPIC_AUTHORIZATION_FAILED, the others
    OPERATION_NOT_ATTEMPTED); v4+ CLUSTER_ACTION on the cluster (refused: the
    request's CLUSTER_AUTHORIZATION_FAILED). Nothing refused is added.
Caller: node_table, through `route(transactions, image)`.
"""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from rafka.core.acl import ResourceType
from rafka.core.cluster_image import ClusterImage
from rafka.protocol.authorization import decide, decided_host
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.partitions import error_code_of
from rafka.protocol.handlers.txn_coordinator import NO_THROTTLE, TransactionHost, call, code_for

API_KEY = 24
MIN_VERSION, MAX_VERSION = 0, 5
FIRST_BATCHED_VERSION = 4


def route(transactions: TransactionHost, image: Callable[[], ClusterImage]) -> Route:
    async def handle_add_partitions_to_txn(request, context: RequestContext):
        version = context.api_version
        response_type = load_response_schema(API_KEY, version)
        module = module_of(response_type)
        decision = decide(context, request)   # v0-3: WRITE on the id and each topic; v4+ CLUSTER_ACTION
        if version < FIRST_BATCHED_VERSION:
            results = await _one_transaction(decided_host(transactions, context, request), image(), version,
                                             request.v3_and_below_transactional_id,
                                             int(request.v3_and_below_producer_id),
                                             int(request.v3_and_below_producer_epoch),
                                             request.v3_and_below_topics, verify_only=False,
                                             refused=decision.refused_names(ResourceType.TOPIC))
            return make(response_type, throttle_time=NO_THROTTLE,
                        results_by_topic_v3_and_below=_topic_results(module, results))
        if decision.refusal is not None:
            return make(response_type, throttle_time=NO_THROTTLE, error_code=error_code_of(decision.refusal),
                        results_by_transaction=())
        answered = []
        for txn in request.transactions:
            results = await _one_transaction(transactions, image(), version, txn.transactional_id,
                                             int(txn.producer_id), int(txn.producer_epoch), txn.topics,
                                             verify_only=bool(txn.verify_only))
            answered.append(make(module.AddPartitionsToTxnResult, transactional_id=txn.transactional_id,
                                 topic_results=_topic_results(module, results)))
        return make(response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                    results_by_transaction=tuple(answered))
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_add_partitions_to_txn)


async def _one_transaction(transactions: TransactionHost, image: ClusterImage, version: int, transactional_id: str,
                           producer_id: int, producer_epoch: int, topics, *, verify_only: bool,
                           refused: frozenset[str] = frozenset()) -> dict[tuple[str, int], ErrorCode]:
    """`refused`: topics the caller may not WRITE: theirs answer TOPIC_AUTHORIZATION_FAILED,
    the others OPERATION_NOT_ATTEMPTED (KafkaApis), nothing added."""
    partitions = [(t.name, int(p)) for t in topics for p in t.partitions]
    if any(topic in refused for topic, _ in partitions):
        return {tp: ErrorCode.topic_authorization_failed if tp[0] in refused else ErrorCode.operation_not_attempted
                for tp in partitions}

    def known(topic: str, partition: int) -> bool:
        found = image.topics.get(topic)
        return found is not None and 0 <= partition < len(found.partitions)
    unknown = {tp for tp in partitions if not known(*tp)}
    if unknown:
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                for tp in partitions}
    try:
        if verify_only:
            verified = await call(transactions, transactional_id, "verify_partitions", producer_id=producer_id,
                                  producer_epoch=producer_epoch, partitions=partitions)
            return {tp: ErrorCode.none if verified.get(tp) is None else error_code_of(verified[tp])
                    for tp in partitions}
        await call(transactions, transactional_id, "add_partitions", producer_id=producer_id,
                   producer_epoch=producer_epoch, partitions=partitions)
        code = ErrorCode.none
    except Exception as error:
        code = code_for(error, api="AddPartitionsToTxn", version=version)
    return {tp: code for tp in partitions}


def _topic_results(module, results: dict[tuple[str, int], ErrorCode]) -> tuple:
    by_topic: dict[str, list] = {}
    for (topic, partition), code in results.items():
        by_topic.setdefault(topic, []).append(make(module.AddPartitionsToTxnPartitionResult,
                                                   partition_index=i32(partition), partition_error_code=code))
    return tuple(make(module.AddPartitionsToTxnTopicResult, name=topic, results_by_partition=tuple(partitions))
                 for topic, partitions in by_topic.items())
