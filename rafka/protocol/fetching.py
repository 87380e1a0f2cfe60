"""Fetch as rafka's clients send it: a follower's replica Fetch to its leader (the
side of replication on the wire), and a consumer's Fetch; what each answer says.

A consumer's fetch is the same request with replica_id -1 and no last fetched
epoch: records below the HW (isolation_level 1, read_committed: below the last
stable offset, with the aborted transactions overlapping them), the leader's HW,
LSO and log start, or the partition's error (FENCED_LEADER_EPOCH for a stale
epoch: refresh metadata and retry).

For followers:

Kafka's ReplicaFetcherThread is the model (AbstractFetcherThread.processFetchRequest,
truncateOnFetchResponse, handleOutOfRangeError):
  * one Fetch v12 per round, naming the follower (replica_id >= 0) and carrying the
    follower's LEO as fetch_offset, the epoch of its last batch as
    last_fetched_epoch and the leader epoch it follows as current_leader_epoch;
  * the leader answers records up to its LEO, its HW and log start; or, when the
    follower's log has diverged from its own (KIP-320: the leader's end of
    last_fetched_epoch is below fetch_offset, or it has no such epoch), no records
    and a diverging_epoch (epoch, end offset) the follower truncates to, then
    fetches again: no separate OffsetForLeaderEpoch round trip (KIP-101's way);
  * OFFSET_OUT_OF_RANGE: the follower asks the leader's log start (ListOffsets
    EARLIEST as a replica) and, if its own LEO is below it, restarts empty there;
  * FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER: the
    controller is changing roles; the follower waits to be told.

In rafka a Fetch's replica_id is the follower's replica id within its partition
(0, 1, 2, ...), not a node id: each replica actor is a node of its own.

Pure: builds requests and reads answers; the callers own the connections and
loops, and ask leaders through protocol.retry. Callers: actors.replica (the
follower's fetch loop), client.consumer (its pipelined fetches, offset lookups),
protocol.range_reads (every one-shot read of a range: the coordinator's load, the
lag sampler's and the admin's record lookups, Spark read tasks), ListOffsets in
actors.coordinator, actors.consumer_lag and client.admin; tests.
"""

from __future__ import annotations

import dataclasses

from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from kio.static.primitive import i8, i32, i64

from rafka.core.errors import error_for_code
from rafka.protocol.hot_writers import WrittenBody, fetch_request_v12

NO_EPOCH = -1
CONSUMER_REPLICA_ID = -1     # Kafka's: a fetch from a client, not a replica


@dataclasses.dataclass(frozen=True)
class LeaderAnswer:
    """One partition's answer to a replica Fetch."""
    records: bytes
    high_watermark: int
    log_start_offset: int
    diverging_epoch: tuple[int, int] | None    # (epoch, end offset): truncate there, fetch again
    last_stable_offset: int = -1
    aborted_transactions: tuple[tuple[int, int], ...] = ()   # (producer id, first offset), read_committed


def fetch_request(*, topic: str, partition: int, replica_id: int, fetch_offset: int, leader_epoch: int,
                  last_fetched_epoch: int, log_start_offset: int, max_bytes: int, max_wait_ms: int,
                  isolation_level: int = 0, min_bytes: int = 1) -> WrittenBody:
    """A Fetch v12 of one partition, written from these values (every fetch round
    builds one: no kio entity for it). isolation_level 1: read_committed;
    `min_bytes`: the leader parks it up to max_wait_ms until it can answer that much."""
    return fetch_request_v12(
        replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=0, session_epoch=-1, topics=[(topic, [(partition, leader_epoch, fetch_offset, last_fetched_epoch,
                                                          log_start_offset, max_bytes)])])


def leader_answer(response, *, topic: str, partition: int) -> LeaderAnswer:
    """The partition's answer, or its error raised as the typed KafkaError."""
    if response.error_code != ErrorCode.none:
        raise error_for_code(response.error_code, f"replica fetch of {topic}-{partition}")
    (answered,) = [p for t in response.responses if t.topic == topic for p in t.partitions
                   if int(p.partition_index) == partition]
    if answered.error_code != ErrorCode.none:
        raise error_for_code(answered.error_code, f"replica fetch of {topic}-{partition}")
    diverging = answered.diverging_epoch
    diverged = diverging is not None and int(diverging.epoch) >= 0 and int(diverging.end_offset) >= 0
    return LeaderAnswer(records=bytes(answered.records or b""), high_watermark=int(answered.high_watermark),
                        log_start_offset=int(answered.log_start_offset),
                        diverging_epoch=(int(diverging.epoch), int(diverging.end_offset)) if diverged else None,
                        last_stable_offset=int(answered.last_stable_offset),
                        aborted_transactions=tuple((int(t.producer_id), int(t.first_offset))
                                                   for t in answered.aborted_transactions or ()))


def list_offset_request(*, topic: str, partition: int, replica_id: int, leader_epoch: int,
                        timestamp_ms: int, isolation_level: int = 0) -> list_offsets_v7.ListOffsetsRequest:
    """ListOffsets for one partition: `timestamp_ms` is a time or Kafka's
    EARLIEST (-2) / LATEST (-1); LATEST gets the HW, or with isolation_level 1
    (read_committed) the LSO."""
    return list_offsets_v7.ListOffsetsRequest(
        replica_id=i32(replica_id), isolation_level=i8(isolation_level), topics=(list_offsets_v7.ListOffsetsTopic(
            name=topic, partitions=(list_offsets_v7.ListOffsetsPartition(
                partition_index=i32(partition), current_leader_epoch=i32(leader_epoch),
                timestamp=i64(timestamp_ms)),)),))


def list_offset_answer(response, *, topic: str, partition: int) -> tuple[int, int] | None:
    """(offset, timestamp ms) the leader answered, None when no record is at or
    after the asked time; its error raised as the typed KafkaError."""
    (answered,) = [p for t in response.topics if t.name == topic for p in t.partitions
                   if int(p.partition_index) == partition]
    if answered.error_code != ErrorCode.none:
        raise error_for_code(answered.error_code, f"list offsets of {topic}-{partition}")
    return None if int(answered.offset) < 0 else (int(answered.offset), int(answered.timestamp))
