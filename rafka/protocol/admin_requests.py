"""DescribeCluster (v2), DescribeLogDirs (v4), DeleteRecords (v2), ElectLeaders
(v2), AlterPartitionReassignments (v0) and ListPartitionReassignments (v0) as
rafka's Admin sends them, and their answers read back into plain values and
typed errors (Kafka's AdminClient describeCluster, describeLogDirs,
deleteRecords, electLeaders, alterPartitionReassignments,
listPartitionReassignments).

A refusal of the whole request (a top-level error) raises it; a partition's own
error (DeleteRecords) raises it too, since each request here names one partition
(the Admin asks each leader on its own, with the retry rule). ElectLeaders and
AlterPartitionReassignments name many: each partition's error is its value.
Callers: rafka.client.admin (`rafka delete-records`, `rafka log-dirs`, `rafka
leader-election`, `rafka reassign-partitions`).
"""

from __future__ import annotations

import datetime

from kio.schema.alter_partition_reassignments.v0 import request as alter_reassignments_v0
from kio.schema.delete_records.v2 import request as delete_records_v2
from kio.schema.describe_cluster.v2 import request as describe_cluster_v2
from kio.schema.describe_log_dirs.v4 import request as describe_log_dirs_v4
from kio.schema.elect_leaders.v2 import request as elect_leaders_v2
from kio.schema.list_partition_reassignments.v0 import request as list_reassignments_v0
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta, i64

from rafka.core.errors import KafkaError, error_for_code
from rafka.core.structs import TopicPartition

BROKER_ENDPOINTS = 1


def describe_cluster_request(*, include_authorized_operations: bool = False):
    return describe_cluster_v2.DescribeClusterRequest(
        include_cluster_authorized_operations=include_authorized_operations, endpoint_type=i8(BROKER_ENDPOINTS),
        include_fenced_brokers=False)


def describe_cluster_answer(response) -> dict:
    if response.error_code != ErrorCode.none:
        raise error_for_code(int(response.error_code), response.error_message or "")
    return {"cluster_id": response.cluster_id, "controller_id": int(response.controller_id),
            "brokers": [{"node_id": int(b.broker_id), "host": b.host, "port": int(b.port), "rack": b.rack}
                        for b in response.brokers],
            "authorized_operations": int(response.cluster_authorized_operations)}


def describe_log_dirs_request(partitions: dict[str, list[int]] | None = None):
    """`partitions`: {topic: [partition]}, or None for every partition."""
    return describe_log_dirs_v4.DescribeLogDirsRequest(topics=None if partitions is None else tuple(
        describe_log_dirs_v4.DescribableLogDirTopic(topic=topic, partitions=tuple(i32(p) for p in parts))
        for topic, parts in partitions.items()))


def describe_log_dirs_answer(response) -> list[dict]:
    """[{log_dir, error, total_bytes, usable_bytes, partitions: [{topic,
    partition, size, offset_lag}]}]"""
    if response.error_code != ErrorCode.none:
        raise error_for_code(int(response.error_code))
    return [{"log_dir": r.log_dir,
             "error": None if r.error_code == ErrorCode.none else error_for_code(int(r.error_code)),
             "total_bytes": int(r.total_bytes), "usable_bytes": int(r.usable_bytes),
             "partitions": [{"topic": t.name, "partition": int(p.partition_index), "size": int(p.partition_size),
                             "offset_lag": int(p.offset_lag), "is_future": p.is_future_key}
                            for t in r.topics for p in t.partitions]}
            for r in response.results]


def delete_records_request(*, topic: str, partition: int, offset: int, timeout_ms: int):
    return delete_records_v2.DeleteRecordsRequest(
        topics=(delete_records_v2.DeleteRecordsTopic(name=topic, partitions=(
            delete_records_v2.DeleteRecordsPartition(partition_index=i32(partition), offset=i64(offset)),)),),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)))


def delete_records_answer(response, *, topic: str, partition: int) -> int:
    """The partition's low watermark, or its error raised."""
    for t in response.topics:
        for p in t.partitions:
            if t.name == topic and int(p.partition_index) == partition:
                if p.error_code != ErrorCode.none:
                    raise error_for_code(int(p.error_code), f"DeleteRecords {topic}-{partition}")
                return int(p.low_watermark)
    raise error_for_code(int(ErrorCode.unknown_server_error), f"no answer for {topic}-{partition}")


def _timeout(timeout_ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms))


def _by_topic(partitions) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        grouped.setdefault(topic, []).append(partition)
    return grouped


def _raise_top_level(response) -> None:
    if response.error_code != ErrorCode.none:
        raise error_for_code(int(response.error_code), getattr(response, "error_message", None) or "")


def elect_leaders_request(election_type: int, partitions: list[tuple[str, int]] | None, *, timeout_ms: int):
    """`partitions` None: every partition (the answer then leaves out those that
    needed no election)."""
    return elect_leaders_v2.ElectLeadersRequest(
        election_type=i8(election_type), timeout=_timeout(timeout_ms),
        topic_partitions=None if partitions is None else tuple(
            elect_leaders_v2.TopicPartitions(topic=topic, partitions=tuple(i32(p) for p in indexes))
            for topic, indexes in _by_topic(partitions).items()))


def elect_leaders_answer(response) -> dict[TopicPartition, KafkaError | None]:
    """Per partition None (elected) or its error; a top-level error raised."""
    _raise_top_level(response)
    return {TopicPartition(result.topic, int(p.partition_id)):
            None if p.error_code == ErrorCode.none else error_for_code(int(p.error_code), p.error_message or "")
            for result in response.replica_election_results for p in result.partition_result}


def alter_reassignments_request(moves: dict[tuple[str, int], list[int] | None], *, timeout_ms: int):
    """{(topic, partition): broker ids, or None to cancel}."""
    by_topic: dict[str, list] = {}
    for (topic, partition), brokers in moves.items():
        by_topic.setdefault(topic, []).append(alter_reassignments_v0.ReassignablePartition(
            partition_index=i32(partition), replicas=None if brokers is None else tuple(i32(b) for b in brokers)))
    return alter_reassignments_v0.AlterPartitionReassignmentsRequest(
        timeout=_timeout(timeout_ms), topics=tuple(
            alter_reassignments_v0.ReassignableTopic(name=topic, partitions=tuple(parts))
            for topic, parts in by_topic.items()))


def alter_reassignments_answer(response) -> dict[TopicPartition, KafkaError | None]:
    """Per partition None (started or cancelled) or its error; a top-level error raised."""
    _raise_top_level(response)
    return {TopicPartition(t.name, int(p.partition_index)):
            None if p.error_code == ErrorCode.none else error_for_code(int(p.error_code), p.error_message or "")
            for t in response.responses for p in t.partitions}


def list_reassignments_request(partitions: list[tuple[str, int]] | None = None, *, timeout_ms: int):
    return list_reassignments_v0.ListPartitionReassignmentsRequest(
        timeout=_timeout(timeout_ms), topics=None if partitions is None else tuple(
            list_reassignments_v0.ListPartitionReassignmentsTopics(
                name=topic, partition_indexes=tuple(i32(p) for p in indexes))
            for topic, indexes in _by_topic(partitions).items()))


def list_reassignments_answer(response) -> dict[TopicPartition, dict[str, list[int]]]:
    """{tp: {"replicas", "adding", "removing"}} (broker ids) of each partition moving."""
    _raise_top_level(response)
    return {TopicPartition(t.name, int(p.partition_index)): {
        "replicas": [int(b) for b in p.replicas], "adding": [int(b) for b in p.adding_replicas],
        "removing": [int(b) for b in p.removing_replicas]}
        for t in response.topics for p in t.partitions}
