"""Fetch v4-12 for consumers: batches below the HW, as the bytes the log holds.

What Kafka answers (KafkaApis.handleFetchRequest, ReplicaManager.fetchMessages,
FetchSession), and what this handler does the same way:
  * no fetch sessions (KIP-227): every answer says session_id 0, which tells the
    client that no session was made and the next fetch must be a full one;
    a fetch naming a session (session_id != 0) gets FETCH_SESSION_ID_NOT_FOUND.
  * the answer waits up to max_wait_ms (none with min_bytes <= 0) until it can
    hold min_bytes: Kafka sums the bytes over the request's partitions; here each
    partition waits until it alone can answer min_bytes (a replica actor hosts one
    partition, so a request to one is Kafka's rule exactly; a request spread over
    several partitions of one node may wait longer than Kafka's, never past
    max_wait_ms; protocol.edge answers a split one once a part has data). Each
    partition reads at most min(partition_max_bytes, max_bytes), and at least one
    whole batch (KIP-74, the log's rule).
  * an offset outside [log start, LEO]: OFFSET_OUT_OF_RANGE; an older
    current_leader_epoch: FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH
    (KIP-320; -1 skips the check); a partition not led here:
    NOT_LEADER_OR_FOLLOWER (see handlers.partitions).
  * isolation_level 1 (read_committed, a consumer's): batches below the last
    stable offset only (core.replica); 0, and every replica fetch: below the HW
    (a follower: the LEO).
  * high_watermark, last_stable_offset (the partition's LSO, whatever the
    isolation level, as Kafka's) and log_start_offset come with every partition
    that was read, and -1 with an error; preferred_read_replica is -1 (no
    follower fetching, KIP-392).
  * records: what was read, and an empty record set with any error
    (ReplicaManager's MemoryRecords.EMPTY), except for a partition the node's
    image does not know: null, as KafkaApis answers the partitions it turns away
    before ReplicaManager reads (FetchResponse.partitionResponse). librdkafka
    cannot parse a null set: answering OFFSET_OUT_OF_RANGE with one kept its
    consumers from ever resetting (auto.offset.reset).
  * aborted_transactions: for a read_committed consumer's partition that was
    read, (producer id, first offset) of every aborted transaction overlapping
    the records returned (LocalLog.read's collectAbortedTransactions; empty with
    no records); null for read_uncommitted, followers and errors.
  * a replica's fetch (replica_id >= 0, in rafka the follower's replica id in its
    partition) reads up to the LEO, counts as that follower's progress (ISR and
    HW) and, with last_fetched_epoch >= 0, answers a diverging log with
    diverging_epoch and no records (KIP-320; Partition.fetchRecords); see
    protocol.fetching for the follower's side.
  * authorization (KafkaApis): a consumer needs READ on each topic, a replica
    CLUSTER_ACTION on the cluster; a refused partition answers
    TOPIC_AUTHORIZATION_FAILED with an empty record set and is not read.
Partitions of one request are read concurrently, each parked on its own replica.
Caller: dispatch, through `route(host)`.
"""

from __future__ import annotations

import datetime

from rafka.protocol.entities import load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta, i64

from rafka.protocol.authorization import ALLOWED, Decision, decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import make, module_of
from rafka.protocol.handlers.partitions import PartitionHost, by_topic, leader_epoch_or_none, serve_each
from rafka.protocol.hot_writers import fetch_answer_v12

API_KEY = 1
MIN_VERSION, MAX_VERSION = 4, 12
HOT_VERSION = 12   # answered through hot_writers (rafka's followers and consumers, librdkafka's fetch)
READ_UNCOMMITTED = 0
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def route(host: PartitionHost) -> Route:
    async def handle_fetch(request, context: RequestContext):
        return await fetch(host, request, context.api_version, decide(context, request))
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_fetch)


async def fetch(host: PartitionHost, request, version: int, decision: Decision = ALLOWED):
    response_type = load_response_schema(API_KEY, version)
    module = module_of(response_type)
    session_id = int(getattr(request, "session_id", 0))
    if session_id != 0:
        return make(response_type, throttle_time=_NO_THROTTLE, error_code=ErrorCode.fetch_session_id_not_found,
                    session_id=i32(0), responses=())
    min_bytes = int(request.min_bytes)
    max_wait_ms = int(request.max_wait.total_seconds() * 1000) if min_bytes > 0 else 0
    min_bytes = max(1, min_bytes)
    replica_fetch = int(request.replica_id) >= 0
    isolation_level = READ_UNCOMMITTED if replica_fetch else int(request.isolation_level)

    async def read(endpoint, wanted):
        max_bytes = max(0, min(int(wanted.partition_max_bytes), int(request.max_bytes)))
        epoch = int(getattr(wanted, "current_leader_epoch", -1))
        if replica_fetch:
            return await endpoint.fetch(int(request.replica_id), int(wanted.fetch_offset), epoch, max_bytes,
                                        max_wait_ms, int(getattr(wanted, "last_fetched_epoch", -1)),
                                        int(getattr(wanted, "log_start_offset", -1)), min_bytes)
        return await endpoint.consumer_fetch(int(wanted.fetch_offset), max_bytes, max_wait_ms,
                                             leader_epoch_or_none(epoch), isolation_level, min_bytes)

    rows = await serve_each(host, [(t.topic, p) for t in request.topics for p in t.partitions],
                            lambda wanted: int(wanted.partition), read, decision)
    if version == HOT_VERSION:   # what every client here sends: written from the values
        return fetch_answer_v12(list(by_topic(
            (topic, _values(wanted, code, result)) for topic, wanted, code, result in rows).items()))
    # plain ints where kio's types say i32/i64: they are ints at runtime, and their
    # range checks were a visible part of every fetch (the values are the log's)
    grouped = by_topic((topic, make(
        module.PartitionData, partition_index=wanted.partition, error_code=code,
        high_watermark=result.high_watermark if result else -1,
        last_stable_offset=result.last_stable_offset if result else -1,
        log_start_offset=result.log_start_offset if result else -1,
        aborted_transactions=_aborted_transactions(module, result), preferred_read_replica=-1,
        diverging_epoch=_diverging(module, result),
        records=_records(code, result))) for topic, wanted, code, result in rows)
    return make(response_type, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, session_id=0,
                responses=tuple(make(module.FetchableTopicResponse, topic=topic, partitions=tuple(partitions))
                                for topic, partitions in grouped.items()))


def _values(wanted, code: ErrorCode, result) -> tuple:
    """One partition of a v12 answer as hot_writers.fetch_answer_v12 takes it: the
    same values as the entity above (no preferred read replica)."""
    if result is None:
        return int(wanted.partition), code.value, -1, -1, -1, None, -1, _records(code, None), None
    return (int(wanted.partition), code.value, result.high_watermark, result.last_stable_offset,
            result.log_start_offset, result.aborted_transactions, -1, result.records,
            result.diverging_epoch)


def _records(code: ErrorCode, result) -> bytes | None:
    """The partition's records; with an error, Kafka's empty set, or null for a
    partition the image does not know (the only UNKNOWN_TOPIC_OR_PARTITION here:
    partitions.locate's; a hosted partition never raises it)."""
    if result is not None:
        return result.records
    return None if code is ErrorCode.unknown_topic_or_partition else b""


def _aborted_transactions(module, result) -> tuple | None:
    """The entity form of a result's aborted transactions (None: the field is null)."""
    if result is None or result.aborted_transactions is None:
        return None
    return tuple(make(module.AbortedTransaction, producer_id=i64(producer_id), first_offset=i64(first_offset))
                 for producer_id, first_offset in result.aborted_transactions)


def _diverging(module, result):
    """The EpochEndOffset of a diverging follower (KIP-320); (-1, -1): none; None
    for a version without the field (v12 added it)."""
    if not hasattr(module, "EpochEndOffset"):
        return None
    if result is None or result.diverging_epoch is None:
        return module.EpochEndOffset()   # its defaults: (-1, -1)
    epoch, end_offset = result.diverging_epoch
    return make(module.EpochEndOffset, epoch=i32(epoch), end_offset=i64(end_offset))
