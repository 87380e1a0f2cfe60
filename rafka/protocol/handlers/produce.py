"""Produce v3-9: each partition's batch goes to the partition's leader replica as
bytes (no record is decoded here), answered once acks are met.

What Kafka answers (KafkaApis.handleProduceRequest, ReplicaManager.appendRecords,
ProduceRequest.validateRecords), and what this handler does the same way:
  * acks other than -1, 0, 1: INVALID_REQUIRED_ACKS on every partition, nothing
    written.
  * records that are not exactly one batch of magic 2: INVALID_RECORD for that
    partition (v3+ carries one v2 batch per partition); a bad CRC or framing:
    CORRUPT_MESSAGE (the log's own check). Nothing is written for either.
  * records a per-record check refuses (a keyless record on a compacted topic):
    INVALID_RECORD with record_errors [(index in the batch, why)] and the error
    message (v8+; KIP-467, ReplicaManager's RecordValidationException case); the
    batch is not written. Every other error has no record errors and a null
    message (LogAppendResult: only that case has a custom message).
  * a partition not led here: NOT_LEADER_OR_FOLLOWER (or UNKNOWN_TOPIC_OR_PARTITION,
    see handlers.partitions); the other partitions of the request go on.
  * acks=0: no response at all; if any partition failed, the connection is
    closed instead, the only signal such a producer gets (KafkaApis: "closing
    connection due to error during produce request with acks=0").
  * a duplicate of an idempotent producer's last batches: its first offsets, no
    error (core.producer_state decides).
  * log_append_time is -1 (None on the wire) unless the topic stamps
    LogAppendTime.
  * transactional records in a request without a transactional id:
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition, nothing written
    (KafkaApis; decided with the rest of authorization, protocol.authorization,
    so a broker's edge refuses it too), unless the caller is a super user
    (rafka's group coordinators write their TxnOffsetCommit batches so, verified
    by the coordinator before it queued them; protocol.authorization.decide);
  * transaction verification (KIP-890 part 1, ReplicaManager.handleProduceAppend):
    a request with a transactional id whose batch is a producer's first
    transactional one here since its last marker asks the transaction
    coordinator (`host.verify_transaction`, protocol.txn_verification) whether
    the partition is in that producer's open transaction, and appends with the
    guard core.producer_state gave it; a partition the coordinator did not verify
    answers protocol.txn_verification's error and writes nothing. So a Produce
    that arrives after its transaction ended (a client gave up on it, the
    coordinator aborted) can no longer open a transaction no coordinator knows
    of, which held back every read_committed consumer of the partition. The
    connection's next request waits for the verification (request order).
  * authorization (KafkaApis): a transactional id needs WRITE on it, refused:
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition; each topic needs
    WRITE, a refused one's partitions answer TOPIC_AUTHORIZATION_FAILED. Nothing
    refused is written; the rest of the request goes on.
The partitions of a request are appended one after another, at once; then the
request releases its connection (pipelining.admit_next: the connection's next
request may start while this one waits for its acks) and waits for every
partition's acks together. The answer lists them in the request's order.
Caller: dispatch, through `route(host)`.
"""

from __future__ import annotations

import asyncio
import datetime

from rafka.protocol.entities import load_response_schema
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from rafka.core.acl import ResourceType
from rafka.core.errors import InvalidRecord, InvalidRequiredAcks, KafkaError
from rafka.core.producer_state import UNVERIFIED
from rafka.core.records import MAGIC, read_header
from rafka.protocol.authorization import ALLOWED, Decision, decide
from rafka.protocol.dispatch import RequestContext, Route
from rafka.protocol.entities import make, module_of
from rafka.protocol.errors import ClosedAfterFailedAcksZeroProduce
from rafka.protocol.handlers.partitions import PartitionHost, by_topic, error_code_of, locate
from rafka.protocol.hot_writers import produce_answer_v9
from rafka.protocol.pipelining import admit_next
from rafka.protocol.txn_verification import produce_error

API_KEY = 0
MIN_VERSION, MAX_VERSION = 3, 9
HOT_VERSION = 9   # answered through hot_writers
VALID_ACKS = (-1, 0, 1)
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def route(host: PartitionHost) -> Route:
    async def handle_produce(request, context: RequestContext):
        return await produce(host, request, context.api_version, decide(context, request))
    return Route(API_KEY, MIN_VERSION, MAX_VERSION, handle_produce)


def check_single_v2_batch(records: bytes | None) -> None:
    """Kafka's ProduceRequest.validateRecords for v3+: one batch, magic 2."""
    if not records:
        raise InvalidRecord("Produce requests with version 3+ must contain exactly one record batch")
    header = _header_or_invalid(records)
    if header.size_bytes != len(records):
        raise InvalidRecord("Produce requests with version 3+ are only allowed to contain exactly one "
                            "record batch")


def _header_or_invalid(records: bytes):
    if len(records) >= 17 and records[16] != MAGIC:
        raise InvalidRecord(f"Produce requests with version 3+ are only allowed to contain record batches "
                            f"with magic version {MAGIC}, not {records[16]}")
    return read_header(records, 0)   # framing errors: CORRUPT_MESSAGE


async def produce(host: PartitionHost, request, version: int, decision: Decision = ALLOWED):
    acks = int(request.acks)
    timeout_ms = int(request.timeout.total_seconds() * 1000)

    work = [(t.name, p) for t in request.topic_data for p in t.partition_data]
    if decision.refusal is not None:   # the transactional id: every partition, nothing written
        rows = [(topic, p, decision.refusal, None) for topic, p in work]
    elif acks not in VALID_ACKS:   # before anything else, for every partition (ReplicaManager.appendRecords)
        rows = [(topic, p, InvalidRequiredAcks(), None) for topic, p in work]
    else:
        guards = await _verified(host, request.transactional_id, work, decision) \
            if request.transactional_id is not None else {}
        appended = [(topic, p, *_append(host, topic, p, acks, decision, guards.get((topic, int(p.index)), UNVERIFIED)))
                    for topic, p in work]
        admit_next()
        if len(appended) == 1:   # what every client here sends: no task for the gather
            rows = [await _acknowledged(*appended[0], timeout_ms)]
        else:
            rows = await asyncio.gather(*(_acknowledged(topic, p, error, endpoint, pending, timeout_ms)
                                          for topic, p, error, endpoint, pending in appended))
    if acks == 0:
        if any(outcome is not None for _, _, outcome, _ in rows):
            raise ClosedAfterFailedAcksZeroProduce("a partition of an acks=0 produce failed")
        return None
    if version == HOT_VERSION:   # what rafka's producers, coordinators and librdkafka send
        return produce_answer_v9(list(by_topic(
            (topic, _values(partition_data, error, result)) for topic, partition_data, error, result in rows).items()))
    response_type = load_response_schema(API_KEY, version)
    module = module_of(response_type)
    grouped = by_topic((topic, make(   # plain ints for i32/i64: see handlers.fetch
        module.PartitionProduceResponse, index=partition_data.index, error_code=_code(error),
        base_offset=result.base_offset if result else -1, log_append_time=_append_time(result),
        log_start_offset=-1, record_errors=tuple(
            make(module.BatchIndexAndErrorMessage, batch_index=index, batch_index_error_message=why)
            for index, why in _record_errors(error)) if hasattr(module, "BatchIndexAndErrorMessage") else (),
        error_message=_error_message(error)))
        for topic, partition_data, error, result in rows)
    return make(response_type, throttle_time=_NO_THROTTLE, responses=tuple(
        make(module.TopicProduceResponse, name=topic, partition_responses=tuple(partitions))
        for topic, partitions in grouped.items()))


def _values(partition_data, error, result) -> tuple:
    """One partition of a v9 answer as hot_writers.produce_answer_v9 takes it (the
    same values as the entity above)."""
    if result is None:
        return (int(partition_data.index), _code(error).value, -1, -1, -1, _record_errors(error),
                _error_message(error))
    return int(partition_data.index), 0, result.base_offset, result.log_append_time_ms, -1, (), None


def _code(error) -> ErrorCode:
    """A partition's outcome is None (written) or its error: a KafkaError, or the
    ErrorCode partitions.locate sends the client elsewhere with."""
    if error is None:
        return ErrorCode.none
    return error if isinstance(error, ErrorCode) else error_code_of(error)


def _record_errors(error) -> tuple:
    return error.record_errors if isinstance(error, InvalidRecord) else ()


def _error_message(error) -> str | None:
    """Kafka's message only for records a per-record check refused (see above)."""
    return error.message if isinstance(error, InvalidRecord) and error.record_errors else None


async def _verified(host: PartitionHost, transactional_id: str, work, decision: Decision) -> dict:
    """{(topic, partition): the guard to append with, or the error to answer} for
    the partitions whose batch needs the coordinator's verification first (and
    None, no guard needed, for those whose producer's transaction is open there);
    a partition that will fail anyway (refused, not led here, a bad batch) is
    left to `_append`, which says why."""
    guards: dict = {}
    asking: dict[tuple[int, int], dict] = {}   # (producer id, epoch) -> {partition: its guard}
    for topic, partition_data in work:
        if decision.refusal_of(ResourceType.TOPIC, topic) is not None:
            continue
        tp = (topic, int(partition_data.index))
        _, endpoint = locate(host, *tp)
        if endpoint is None:
            continue
        try:
            check_single_v2_batch(partition_data.records)
            header = read_header(partition_data.records, 0)
        except Exception:
            continue
        if not header.is_transactional or header.producer_id < 0:
            continue
        try:
            guard = endpoint.start_verification(header.producer_id, header.base_sequence, header.producer_epoch)
        except KafkaError:   # not the leader (any more): appended with no guard, `_append` refuses it
            guards[tp] = None
            continue
        if guard is None:
            guards[tp] = None
        else:
            asking.setdefault((header.producer_id, header.producer_epoch), {})[tp] = guard
    for (producer_id, producer_epoch), partitions in asking.items():
        answers = await host.verify_transaction(transactional_id, producer_id, producer_epoch, list(partitions))
        for tp, guard in partitions.items():
            error = answers.get(tp)
            guards[tp] = guard if error is None else produce_error(error)
    return guards


def _append(host: PartitionHost, topic: str, partition_data, acks: int, decision: Decision,
            guard: object | None = UNVERIFIED):
    """(None, endpoint, Appended) of one partition's append, or (its error, None, None).
    `guard`: its verification's (`_verified`), or the error that ended it."""
    refused = decision.refusal_of(ResourceType.TOPIC, topic)
    if refused is not None:
        return refused, None, None
    code, endpoint = locate(host, topic, int(partition_data.index))
    if endpoint is None:
        return code, None, None
    if isinstance(guard, KafkaError):
        return guard, None, None
    try:
        check_single_v2_batch(partition_data.records)
        return None, endpoint, endpoint.append(bytes(partition_data.records), acks, guard)
    except Exception as error:
        return error, None, None


async def _acknowledged(topic: str, partition_data, error, endpoint, pending, timeout_ms: int):
    if endpoint is None:
        return topic, partition_data, error, None
    try:
        return topic, partition_data, None, await endpoint.acknowledged(pending, timeout_ms)
    except Exception as error:
        return topic, partition_data, error, None


def _append_time(result):
    if result is None or result.log_append_time_ms < 0:
        return None
    return datetime.datetime.fromtimestamp(result.log_append_time_ms / 1000, tz=datetime.timezone.utc)
