"""What a transactional producer asks its transaction coordinator and the group
coordinator, and how the answers read: AddPartitionsToTxn v3, AddOffsetsToTxn
v3, EndTxn v3 (to the transaction coordinator) and TxnOffsetCommit v3 (to the
group's coordinator, KIP-447: with the consumer's generation and member id).
InitProducerId is protocol.cluster_requests' (the idempotent producer's too).

Pure: a builder per request (a kio entity) and a reader per answer, which
returns None or raises the typed KafkaError. A request about several partitions
is answered per partition: the reader raises the error that decides (any but
OPERATION_NOT_ATTEMPTED, which only says another partition failed). No I/O;
client.producer sends them, to the coordinator client.metadata finds, and
retries by core.producer_transaction's rule.

Versions: v3 of each, the last of AddPartitionsToTxn a client sends (v4+ are
for brokers, KIP-890), and the first flexible ones; each answers
PRODUCER_FENCED (below v2: INVALID_PRODUCER_EPOCH, which the client reads the
same way). Callers: client.producer, tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kio.schema.add_offsets_to_txn.v3 import request as add_offsets_v3
from kio.schema.add_partitions_to_txn.v3 import request as add_partitions_v3
from kio.schema.end_txn.v3 import request as end_txn_v3
from kio.schema.errors import ErrorCode
from kio.schema.txn_offset_commit.v3 import request as txn_offset_commit_v3
from kio.static.primitive import i16, i32, i64

from rafka.core.errors import KafkaError, OperationNotAttempted, error_for_code


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(set(partitions)):
        topics.setdefault(topic, []).append(partition)
    return topics


def _raise_deciding(errors: Mapping[tuple[str, int], KafkaError | None]) -> None:
    """The error that decides a per-partition answer: the first that is not
    OPERATION_NOT_ATTEMPTED (each partition of a refused request says one or the
    other), else that one."""
    failed = [error for error in errors.values() if error is not None]
    deciding = [error for error in failed if not isinstance(error, OperationNotAttempted)]
    if deciding or failed:
        raise (deciding or failed)[0]


def add_partitions_request(transactional_id: str, producer_id: int, producer_epoch: int,
                           partitions: Iterable[tuple[str, int]]) -> add_partitions_v3.AddPartitionsToTxnRequest:
    return add_partitions_v3.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=i64(producer_id),
        v3_and_below_producer_epoch=i16(producer_epoch),
        v3_and_below_topics=tuple(add_partitions_v3.AddPartitionsToTxnTopic(name=topic, partitions=tuple(
            i32(p) for p in indexes)) for topic, indexes in _by_topic(partitions).items()))


def add_partitions_answer(response, partitions: Iterable[tuple[str, int]]) -> None:
    """None once every partition asked for is in the transaction; else the
    deciding error raised. A partition the answer leaves out: UNKNOWN_SERVER_ERROR."""
    errors: dict[tuple[str, int], KafkaError | None] = {}
    for topic in response.results_by_topic_v3_and_below:
        for result in topic.results_by_partition:
            code = result.partition_error_code
            errors[(topic.name, int(result.partition_index))] = (
                None if code == ErrorCode.none
                else error_for_code(code, f"AddPartitionsToTxn of {topic.name}-{int(result.partition_index)}"))
    missing = set(partitions) - set(errors)
    if missing:
        raise error_for_code(-1, f"AddPartitionsToTxn answered nothing about {sorted(missing)}")
    _raise_deciding(errors)


def add_offsets_request(transactional_id: str, producer_id: int, producer_epoch: int,
                        group_id: str) -> add_offsets_v3.AddOffsetsToTxnRequest:
    return add_offsets_v3.AddOffsetsToTxnRequest(transactional_id=transactional_id, producer_id=i64(producer_id),
                                                 producer_epoch=i16(producer_epoch), group_id=group_id)


def end_txn_request(transactional_id: str, producer_id: int, producer_epoch: int, *,
                    commit: bool) -> end_txn_v3.EndTxnRequest:
    return end_txn_v3.EndTxnRequest(transactional_id=transactional_id, producer_id=i64(producer_id),
                                    producer_epoch=i16(producer_epoch), committed=commit)


def error_code_answer(response, what: str) -> None:
    """AddOffsetsToTxn's and EndTxn's answer: one error code for the request."""
    if response.error_code != ErrorCode.none:
        raise error_for_code(response.error_code, what)


def txn_offset_commit_request(transactional_id: str, producer_id: int, producer_epoch: int, *, group_id: str,
                              generation_id: int, member_id: str, group_instance_id: str | None,
                              offsets: Mapping[tuple[str, int], tuple[int, int, str | None]]
                              ) -> txn_offset_commit_v3.TxnOffsetCommitRequest:
    """`offsets`: {(topic, partition): (next offset to read, leader epoch, metadata)}."""
    module = txn_offset_commit_v3
    topics = {}
    for (topic, partition), (offset, leader_epoch, metadata) in sorted(offsets.items()):
        topics.setdefault(topic, []).append(module.TxnOffsetCommitRequestPartition(
            partition_index=i32(partition), committed_offset=i64(offset), committed_leader_epoch=i32(leader_epoch),
            committed_metadata=metadata))
    return module.TxnOffsetCommitRequest(
        transactional_id=transactional_id, group_id=group_id, producer_id=i64(producer_id),
        producer_epoch=i16(producer_epoch), generation_id=i32(generation_id), member_id=member_id,
        group_instance_id=group_instance_id,
        topics=tuple(module.TxnOffsetCommitRequestTopic(name=topic, partitions=tuple(partitions))
                     for topic, partitions in topics.items()))


def txn_offset_commit_answer(response, offsets: Iterable[tuple[str, int]]) -> None:
    """None once every partition's offset is written (pending until the marker);
    else the deciding error raised."""
    errors: dict[tuple[str, int], KafkaError | None] = {}
    for topic in response.topics:
        for result in topic.partitions:
            errors[(topic.name, int(result.partition_index))] = (
                None if result.error_code == ErrorCode.none
                else error_for_code(result.error_code,
                                    f"TxnOffsetCommit of {topic.name}-{int(result.partition_index)}"))
    missing = set(offsets) - set(errors)
    if missing:
        raise error_for_code(-1, f"TxnOffsetCommit answered nothing about {sorted(missing)}")
    _raise_deciding(errors)
