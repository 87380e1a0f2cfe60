"""WriteTxnMarkers v1-2: a transaction coordinator asks a partition's leader to
write the COMMIT or ABORT marker (a control batch) of a producer's transaction
(KafkaApis.handleWriteTxnMarkersRequest).

Each (marker, partition) is written by the hosted partition's
`append_marker(producer_id=, producer_epoch=, coordinator_epoch=, commit=)`,
awaited until the marker is replicated; the replica side (control batches, the
LSO, the aborted-transaction index) owns that call. Answers per partition:
NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION for a partition not led
here, the replica's typed error (e.g. INVALID_PRODUCER_EPOCH for a marker older
than the producer's epoch, TRANSACTION_COORDINATOR_FENCED for an older
coordinator epoch), else none. Results are grouped by producer id, as Kafka's.

A `__consumer_offsets` partition's marker goes to that partition's group
coordinator, where it runs on this node (Kafka 4's KafkaApis delegates it to
`groupCoordinator.completeTransaction`): the coordinator writes it to the
partition's leader behind its own writes, and applies it to the transaction's
pending offsets once written. Its COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS and NOT_COORDINATOR answer NOT_LEADER_OR_FOLLOWER,
which the transaction coordinator retries (as Kafka translates them). The
coordinator's own WriteTxnMarkers then reach the leader's node, which hosts no
coordinator of the partition, and append there.
Caller: node_table, through `route(partitions, groups)`.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from rafka.core.actor_names import OFFSETS_TOPIC
from rafka.protocol.authorization import decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import load_response_schema, make, module_of
from rafka.protocol.handlers.group_offsets import GroupHost
from rafka.protocol.handlers.partitions import PartitionHost, error_code_of, on_partition

API_KEY = 27
MIN_VERSION, MAX_VERSION = 1, 2
_NOT_READY = frozenset({ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress,
                        ErrorCode.not_coordinator})


async def _through_coordinator(coordinator, marker) -> ErrorCode:
    try:
        await coordinator.complete_transaction(
            producer_id=int(marker.producer_id), producer_epoch=int(marker.producer_epoch),
            coordinator_epoch=int(marker.coordinator_epoch), commit=bool(marker.transaction_result))
    except Exception as error:
        code = error_code_of(error)
        return ErrorCode.not_leader_or_follower if code in _NOT_READY else code
    return ErrorCode.none


def route(partitions: PartitionHost, groups: GroupHost) -> Route:
    async def handle_write_txn_markers(request, context: RequestContext):
        response_type = load_response_schema(API_KEY, context.api_version)
        module = module_of(response_type)
        refusal = decide(context, request).refusal   # CLUSTER_ACTION: every partition answers it, none written
        by_producer: dict[int, dict[str, list]] = {}
        for marker in request.markers:
            topics = by_producer.setdefault(int(marker.producer_id), {})
            for topic in marker.topics:
                for partition in topic.partition_indexes:
                    coordinator = groups.offsets_partition_coordinator(int(partition)) \
                        if topic.name == OFFSETS_TOPIC else None
                    if refusal is not None:
                        code = error_code_of(refusal)
                    elif coordinator is not None:
                        code = await _through_coordinator(coordinator, marker)
                    else:
                        code, _ = await on_partition(
                            partitions, topic.name, int(partition), lambda endpoint, m=marker: endpoint.append_marker(
                                producer_id=int(m.producer_id), producer_epoch=int(m.producer_epoch),
                                coordinator_epoch=int(m.coordinator_epoch), commit=bool(m.transaction_result)))
                    topics.setdefault(topic.name, []).append(make(
                        module.WritableTxnMarkerPartitionResult, partition_index=i32(partition), error_code=code))
        return make(response_type, markers=tuple(
            make(module.WritableTxnMarkerResult, producer_id=i64(producer_id), topics=tuple(
                make(module.WritableTxnMarkerTopicResult, name=name, partitions=tuple(results))
                for name, results in topics.items()))
            for producer_id, topics in by_producer.items()))
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_write_txn_markers)
