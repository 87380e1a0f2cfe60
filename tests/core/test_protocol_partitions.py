"""Produce, Fetch, ListOffsets and InitProducerId on the wire, against the
in-process node: Kafka's answer for each case, and the log unchanged by every
refused request."""

import asyncio
import dataclasses
import datetime
import importlib
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7 import request as list_v7
from kio.schema.produce.v9 import request as produce_v9
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from rafka.core.errors import NetworkException
from rafka.core.records import RecordInput, decode_records, encode_batch
from rafka.core.replica import EARLIEST_TIMESTAMP
from rafka.protocol.connection import Connection
from rafka.protocol.entities import load_request_schema, make, module_of
from tests.core.protocol_node import ProtocolNode
from tests.core.test_protocol_dispatch import request_frame

pytestmark = pytest.mark.core


@pytest.fixture()
def node(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 2}) as node:
        yield node


def batch(*values, **options):
    return encode_batch([RecordInput(v, b"k", 1_000 + i) for i, v in enumerate(values)], **options)


def produce_request(records, *, topic="orders", partition=0, acks=-1):
    return produce_v9.ProduceRequest(
        transactional_id=None, acks=i16(acks), timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(produce_v9.TopicProduceData(name=topic, partition_data=(
            produce_v9.PartitionProduceData(index=i32(partition), records=records),)),))


def fetch_request(offset, *, partition=0, epoch=-1, session_id=0, max_wait_ms=0):
    return fetch_v12.FetchRequest(
        cluster_id=None, replica_id=i32(-1), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(session_id),
        session_epoch=i32(-1), topics=(fetch_v12.FetchTopic(topic="orders", partitions=(fetch_v12.FetchPartition(
            partition=i32(partition), current_leader_epoch=i32(epoch), fetch_offset=i64(offset),
            last_fetched_epoch=i32(-1), log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),)),),
        forgotten_topics_data=(), rack_id="")


def list_request(timestamp, *, epoch=-1):
    return list_v7.ListOffsetsRequest(replica_id=i32(-1), isolation_level=i8(0), topics=(list_v7.ListOffsetsTopic(
        name="orders", partitions=(list_v7.ListOffsetsPartition(partition_index=i32(0),
                                                                current_leader_epoch=i32(epoch),
                                                                timestamp=i64(timestamp)),)),))


def exchange(node, *requests, expect_response=True):
    async def go():
        connection = await Connection.open("127.0.0.1", node.port)
        try:
            return [await connection.request(r, expect_response=expect_response) for r in requests]
        finally:
            await connection.close()
    return asyncio.run(go())


def produced(response):
    (topic,) = response.responses
    (partition,) = topic.partition_responses
    return partition.error_code, partition.base_offset


def fetched(response):
    (topic,) = response.responses
    (partition,) = topic.partitions
    return partition


def log_end(node, partition=0):
    return node.endpoints[("orders", partition)].replica.log.log_end_offset


def test_produce_then_fetch__offsets_assigned_and_the_batch_read_back_as_sent(node):
    first, second = exchange(node, produce_request(batch(b"a", b"b")), produce_request(batch(b"c")))
    assert produced(first) == (ErrorCode.none, 0) and produced(second) == (ErrorCode.none, 2)
    (answer,) = exchange(node, fetch_request(0))
    data = fetched(answer)
    assert (data.error_code, data.high_watermark, data.last_stable_offset, data.log_start_offset) == (
        ErrorCode.none, 3, 3, 0)
    assert answer.session_id == 0 and bytes(data.records)[:8] == (0).to_bytes(8, "big")


def test_fetch__max_bytes_zero__the_first_batch_as_kafkas_min_one_message(node):
    """The Java consumer allows fetch.max.bytes and max.partition.fetch.bytes of 0;
    Kafka then returns the first batch (minOneMessage), so the consumer progresses."""
    exchange(node, produce_request(batch(b"a", b"b")), produce_request(batch(b"c")))
    zero = dataclasses.replace(fetch_request(0), max_bytes=i32(0))
    zero = dataclasses.replace(zero, topics=(dataclasses.replace(zero.topics[0], partitions=(dataclasses.replace(
        zero.topics[0].partitions[0], partition_max_bytes=i32(0)),)),))
    (answer,) = exchange(node, zero)
    data = fetched(answer)
    assert data.error_code == ErrorCode.none
    assert [r.offset for r in decode_records(bytes(data.records))] == [0, 1]   # the first batch, whole


@pytest.mark.parametrize("records, code", [
    (batch(b"a")[:-1] + bytes([batch(b"a")[-1] ^ 0xFF]), ErrorCode.corrupt_message),   # CRC no longer matches
    (batch(b"a") + batch(b"b"), ErrorCode.invalid_record),                             # two batches in v3+
    (b"", ErrorCode.invalid_record),
    (batch(b"a")[:16] + b"\x01" + batch(b"a")[17:], ErrorCode.invalid_record),        # magic 1
    (batch(b"a")[:30], ErrorCode.corrupt_message),                                     # cut short
])
def test_produce__bad_batches_get_kafkas_code_and_nothing_is_written(node, records, code):
    (answer,) = exchange(node, produce_request(records))
    assert produced(answer) == (code, -1)
    assert log_end(node) == 0


def test_produce__bad_acks_unknown_topic_and_partition_each_get_their_code(node):
    bad_acks, unknown_topic, unknown_partition = exchange(
        node, produce_request(batch(b"a"), acks=2), produce_request(batch(b"a"), topic="nope"),
        produce_request(batch(b"a"), partition=7))
    assert produced(bad_acks)[0] == ErrorCode.invalid_required_acks
    assert produced(unknown_topic)[0] == ErrorCode.unknown_topic_or_partition
    assert produced(unknown_partition)[0] == ErrorCode.unknown_topic_or_partition
    assert log_end(node) == 0


def test_produce_to_a_follower__not_leader_or_follower(node):
    node.endpoints[("orders", 1)].replica.become_follower(leader_id=5, leader_epoch=1)
    (answer,) = exchange(node, produce_request(batch(b"a"), partition=1))
    assert produced(answer)[0] == ErrorCode.not_leader_or_follower and log_end(node, 1) == 0


def test_produce__a_partition_hosted_elsewhere_is_not_leader_or_follower(node):
    del node.endpoints[("orders", 1)]   # the image still lists it: the client must go to its leader
    (answer,) = exchange(node, produce_request(batch(b"a"), partition=1))
    assert produced(answer)[0] == ErrorCode.not_leader_or_follower


def test_produce__a_duplicate_idempotent_batch_gets_its_first_offsets_and_no_error(node):
    (allocated,) = exchange(node, InitProducerIdRequest(transactional_id=None, transaction_timeout=i32Timedelta.parse(
        datetime.timedelta(seconds=60)), producer_id=i64(-1), producer_epoch=i16(-1)))
    assert allocated.error_code == ErrorCode.none and allocated.producer_id >= 0 and allocated.producer_epoch == 0
    idempotent = batch(b"x", b"y", producer_id=allocated.producer_id, producer_epoch=0, base_sequence=0)
    first, again = exchange(node, produce_request(idempotent), produce_request(idempotent))
    assert produced(first) == produced(again) == (ErrorCode.none, 0)
    assert log_end(node) == 2


def test_init_producer_id__ids_are_never_reused_idempotent_or_transactional(node):
    timeout = i32Timedelta.parse(datetime.timedelta(seconds=60))
    one, two, transactional = exchange(
        node, InitProducerIdRequest(transactional_id=None, transaction_timeout=timeout, producer_id=i64(-1),
                                    producer_epoch=i16(-1)),
        InitProducerIdRequest(transactional_id=None, transaction_timeout=timeout, producer_id=i64(-1),
                              producer_epoch=i16(-1)),
        InitProducerIdRequest(transactional_id="tx", transaction_timeout=timeout, producer_id=i64(-1),
                              producer_epoch=i16(-1)))
    assert one.producer_id != two.producer_id
    # the transaction coordinator's id comes from a block the same controller allocated
    assert (transactional.error_code, transactional.producer_epoch) == (ErrorCode.none, 0)
    assert transactional.producer_id not in (one.producer_id, two.producer_id)
    (three,) = exchange(node, InitProducerIdRequest(transactional_id=None, transaction_timeout=timeout,
                                                    producer_id=i64(-1), producer_epoch=i16(-1)))
    assert three.producer_id > transactional.producer_id


def test_acks_zero__no_answer_and_a_failed_one_closes_the_connection(node):
    async def go():
        connection = await Connection.open("127.0.0.1", node.port)
        assert await connection.request(produce_request(batch(b"a"), acks=0), expect_response=False) is None
        await connection.request(produce_request(b"", acks=0), expect_response=False)   # refused: closed
        with pytest.raises(NetworkException):
            await connection.request(fetch_request(0))
    asyncio.run(go())
    assert log_end(node) == 1


def test_fetch__past_the_leo_is_offset_out_of_range_and_epochs_are_fenced(node):
    exchange(node, produce_request(batch(b"a")))
    (past,) = exchange(node, fetch_request(5))
    assert fetched(past).error_code == ErrorCode.offset_out_of_range and fetched(past).records == b""
    node.endpoints[("orders", 0)].replica.become_leader(leader_epoch=3, replicas=[0], isr=[0], partition_epoch=1)
    stale, future, current = exchange(node, fetch_request(0, epoch=0), fetch_request(0, epoch=9),
                                      fetch_request(0, epoch=3))
    assert fetched(stale).error_code == ErrorCode.fenced_leader_epoch
    assert fetched(future).error_code == ErrorCode.unknown_leader_epoch
    assert fetched(current).error_code == ErrorCode.none


def test_fetch__at_the_end_waits_for_data_up_to_max_wait(node):
    async def go():
        reader = await Connection.open("127.0.0.1", node.port)
        writer = await Connection.open("127.0.0.1", node.port)
        waiting = asyncio.ensure_future(reader.request(fetch_request(0, max_wait_ms=10_000)))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await writer.request(produce_request(batch(b"late")))
        answer = await asyncio.wait_for(waiting, 5)
        empties = [await reader.request(fetch_request(1, max_wait_ms=20)) for _ in range(5)]
        empty = empties[-1]
        await reader.close()
        await writer.close()
        return answer, empty
    answer, empty = asyncio.run(go())
    assert fetched(answer).high_watermark == 1 and fetched(answer).records
    assert fetched(empty).error_code == ErrorCode.none and not fetched(empty).records
    endpoint = node.endpoint("orders", 0)
    assert not endpoint._waiters and not endpoint._follower_waiters   # a timed-out wait leaves nothing parked


def test_fetch__an_incremental_session_is_not_found(node):
    (answer,) = exchange(node, fetch_request(0, session_id=42))
    assert answer.error_code == ErrorCode.fetch_session_id_not_found and answer.responses == ()


def test_list_offsets__earliest_latest_and_by_timestamp(node):
    exchange(node, produce_request(batch(b"a", b"b", b"c")))   # timestamps 1000, 1001, 1002
    earliest, latest, at, after, max_timestamp = exchange(
        node, list_request(-2), list_request(-1), list_request(1_001), list_request(5_000), list_request(-3))

    def answer(response):
        (topic,) = response.topics
        (partition,) = topic.partitions
        return partition.error_code, partition.offset, partition.timestamp, partition.leader_epoch
    # with the leader epoch as Kafka's (v4+): the leader's for LATEST, the record's batch's, the first epoch's
    assert answer(earliest) == (ErrorCode.none, 0, -1, 0)
    assert answer(latest) == (ErrorCode.none, 3, -1, 0)
    assert answer(at) == (ErrorCode.none, 1, 1_001, 0)
    assert answer(after) == (ErrorCode.none, -1, -1, -1)
    assert answer(max_timestamp) == (ErrorCode.none, 2, 1_002, 0)   # MAX_TIMESTAMP (v7): the newest record

    node.endpoints[("orders", 0)].replica.become_leader(leader_epoch=2, replicas=[0], isr=[0], partition_epoch=1)
    exchange(node, produce_request(encode_batch([RecordInput(b"d", b"k", 5_000)])))   # epoch 2, offset 3
    at, latest, max_timestamp, before = exchange(node, list_request(4_000), list_request(-1), list_request(-3),
                                                 list_request(1_002))
    assert answer(at) == (ErrorCode.none, 3, 5_000, 2)
    assert answer(latest) == (ErrorCode.none, 4, -1, 2)
    assert answer(max_timestamp) == (ErrorCode.none, 3, 5_000, 2)
    assert answer(before) == (ErrorCode.none, 2, 1_002, 0)


def list_request_at(version, timestamp, partition=0):
    module = importlib.import_module(f"kio.schema.list_offsets.v{version}.request")
    epoch = {"current_leader_epoch": i32(-1)} if version >= 4 else {}
    isolation = {"isolation_level": i8(0)} if version >= 2 else {}
    return module.ListOffsetsRequest(replica_id=i32(-1), **isolation, topics=(module.ListOffsetsTopic(
        name="orders", partitions=(module.ListOffsetsPartition(partition_index=i32(partition),
                                                              timestamp=i64(timestamp), **epoch),)),))


@pytest.mark.parametrize("version, timestamp, partition", [
    (6, -3, 0), (1, -3, 0), (7, -4, 0), (7, -5, 0), (7, -7, 0), (7, -4, 9)])
def test_list_offsets__a_timestamp_the_version_does_not_have__unsupported_version(node, version, timestamp,
                                                                                   partition):
    """Kafka's isListOffsetsTimestampUnsupported: MAX_TIMESTAMP needs v7, -4 and -5
    need v8 and v9 (past rafka's v7), any other negative is none; whatever the
    partition (one that does not exist included)."""
    (answer,) = exchange(node, list_request_at(version, timestamp, partition))
    assert [p.error_code for t in answer.topics for p in t.partitions] == [ErrorCode.unsupported_version]
    assert [int(p.leader_epoch) for t in answer.topics for p in t.partitions if version >= 4] in ([-1], [])


@pytest.mark.parametrize("version, expected", [(4, ErrorCode.leader_not_available),
                                               (5, ErrorCode.offset_not_available)])
def test_list_offsets__a_new_leaders_lagging_hw__offset_not_available_from_v5_only(version, expected):
    """ReplicaManager.fetchOffset: only v5 and newer get OFFSET_NOT_AVAILABLE; older
    clients get LEADER_NOT_AVAILABLE (both retriable)."""
    from rafka.protocol.handlers.list_offsets import _as_kafka_answers
    wanted = SimpleNamespace(timestamp=-1)
    assert _as_kafka_answers(("orders", wanted, ErrorCode.offset_not_available, None), version)[2] == expected


def test_list_offsets_v0__old_style_offsets_as_sarama_1_22_asks(node):
    """Kafka 4 dropped v0 (kio has no classes for it); Debian's Burrow (Sarama 1.22)
    asks every leader for its log end this way, max_num_offsets=1."""
    from rafka.protocol.legacy_schemas import ListOffsetsPartitionV0, ListOffsetsRequestV0, ListOffsetsTopicV0
    exchange(node, produce_request(batch(b"a", b"b", b"c")))   # timestamps 1000, 1001, 1002

    def v0(*partitions):
        return ListOffsetsRequestV0(replica_id=i32(-1), topics=(ListOffsetsTopicV0(name="orders", partitions=tuple(
            ListOffsetsPartitionV0(partition_index=i32(p), timestamp=i64(t), max_num_offsets=i32(n))
            for p, t, n in partitions)),))
    (answer,) = exchange(node, v0((0, -1, 1), (1, -1, 1), (0, -2, 1), (0, 1_001, 1), (0, 5_000, 1), (0, -1, 0),
                                  (7, -1, 1)))
    (topic,) = answer.topics
    assert topic.name == "orders"
    assert [(int(p.partition_index), p.error_code, tuple(p.old_style_offsets)) for p in topic.partitions] == [
        (0, ErrorCode.none, (3,)), (1, ErrorCode.none, (0,)), (0, ErrorCode.none, (0,)), (0, ErrorCode.none, (1,)),
        (0, ErrorCode.none, ()), (0, ErrorCode.none, ()), (7, ErrorCode.unknown_topic_or_partition, ())]


def test_offset_for_leader_epoch__end_of_each_epoch_and_fencing(node):
    from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4
    replica = node.endpoints[("orders", 0)].replica
    exchange(node, produce_request(batch(b"a", b"b")))                  # epoch 0: offsets 0-1
    replica.become_leader(leader_epoch=2, replicas=[0], isr=[0], partition_epoch=1)
    exchange(node, produce_request(batch(b"c")))                        # epoch 2: offset 2

    def ask(requested, current=-1):
        (answer,) = exchange(node, epoch_v4.OffsetForLeaderEpochRequest(replica_id=i32(-1), topics=(
            epoch_v4.OffsetForLeaderTopic(topic="orders", partitions=(epoch_v4.OffsetForLeaderPartition(
                partition=i32(0), current_leader_epoch=i32(current), leader_epoch=i32(requested)),)),)))
        (result,) = answer.topics[0].partitions
        return result.error_code, result.leader_epoch, result.end_offset
    assert ask(0) == (ErrorCode.none, 0, 2)
    assert ask(1) == (ErrorCode.none, 0, 2)      # no epoch 1: the largest below it, ended where 2 began
    assert ask(2, current=2) == (ErrorCode.none, 2, 3)
    assert ask(2, current=0)[0] == ErrorCode.fenced_leader_epoch


def test_a_null_array_where_the_schema_forbids_one__the_connection_is_closed_and_nothing_written(node):
    """Found by the fuzz test: kio reads a null compact array as None even where the
    schema says non-nullable (Produce's topic_data); Kafka refuses such a body."""
    from rafka.protocol.errors import MalformedRequestBody
    empty = produce_v9.ProduceRequest(transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(
        datetime.timedelta(seconds=5)), topic_data=())
    frame = request_frame(0, 9, empty)
    assert frame.endswith(b"\x01\x00")             # topic_data: compact length 0 + 1, then no tags
    null_topic_data = frame[:-2] + b"\x00\x00"
    with pytest.raises(MalformedRequestBody, match="non-nullable field topic_data"):
        node.call(node.servers[0].dispatcher.dispatch(null_topic_data, connection_id="test"))
    assert log_end(node) == 0


def test_replica_fetch__records_to_the_leo_progress_counted_a_diverging_log_told_where_to_cut(node):
    """The follower's side (protocol.fetching) against the leader's handler:
    Kafka's replica Fetch and ListOffsets, as rafka's followers send them."""
    from rafka.core.errors import FencedLeaderEpoch
    from rafka.protocol import fetching
    exchange(node, produce_request(batch(b"a")), produce_request(batch(b"b")))
    leader = node.endpoints[("orders", 0)].replica
    leader.become_leader(leader_epoch=1, replicas=[0, 1], isr=[0], partition_epoch=1)   # epoch 1 starts at 2

    def ask(offset, *, epoch=1, last_fetched_epoch=-1):
        return fetching.fetch_request(topic="orders", partition=0, replica_id=1, fetch_offset=offset,
                                           leader_epoch=epoch, last_fetched_epoch=last_fetched_epoch,
                                           log_start_offset=0, max_bytes=1 << 20, max_wait_ms=0)
    first, at_end, diverged, stale, start = exchange(
        node, ask(0), ask(2, last_fetched_epoch=0), ask(5, last_fetched_epoch=0), ask(2, epoch=0),
        fetching.list_offset_request(topic="orders", partition=0, replica_id=1, leader_epoch=1,
                                     timestamp_ms=EARLIEST_TIMESTAMP))
    read = fetching.leader_answer(first, topic="orders", partition=0)
    assert read.records == leader.log.read(0, 1 << 20) and read.diverging_epoch is None
    assert fetching.leader_answer(at_end, topic="orders", partition=0).records == b""
    assert leader.caught_up_outside_isr() == {1}          # the fetch at the LEO counted as progress
    cut = fetching.leader_answer(diverged, topic="orders", partition=0)
    assert cut.diverging_epoch == (0, 2) and cut.records == b""
    with pytest.raises(FencedLeaderEpoch):
        fetching.leader_answer(stale, topic="orders", partition=0)
    assert fetching.list_offset_answer(start, topic="orders", partition=0)[0] == 0
    assert log_end(node) == 2


def fetch_request_of(version, offset, *, topic="orders", partition=0, isolation_level=0):
    """A consumer's Fetch of one partition in any version rafka serves (kio's types)."""
    request_type = load_request_schema(1, version)
    module = module_of(request_type)
    wanted = make(module.FetchPartition, partition=i32(partition), current_leader_epoch=i32(-1),
                  fetch_offset=i64(offset), last_fetched_epoch=i32(-1), log_start_offset=i64(-1),
                  partition_max_bytes=i32(1 << 20))
    return make(request_type, cluster_id=None, replica_id=i32(-1),
                max_wait=i32Timedelta.parse(datetime.timedelta(0)), min_bytes=i32(1), max_bytes=i32(1 << 20),
                isolation_level=i8(isolation_level), session_id=i32(0), session_epoch=i32(-1),
                topics=(make(module.FetchTopic, topic=topic, partitions=(wanted,)),), forgotten_topics_data=(),
                rack_id="")


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch__offset_out_of_range__empty_record_set(node, version):
    """ReplicaManager answers a read's error with MemoryRecords.EMPTY: a null set is
    unparseable to librdkafka, whose consumer then never resets its offset."""
    exchange(node, produce_request(batch(b"a")))
    (past,) = exchange(node, fetch_request_of(version, 5))
    data = fetched(past)
    assert data.error_code == ErrorCode.offset_out_of_range
    assert data.records == b"" and data.high_watermark == -1
    assert data.aborted_transactions is None


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch__a_partition_the_image_does_not_know__null_record_set(node, version):
    """KafkaApis turns such a partition away before ReplicaManager reads:
    FetchResponse.partitionResponse, whose records are null."""
    (answer,) = exchange(node, fetch_request_of(version, 0, partition=7))
    assert fetched(answer).error_code == ErrorCode.unknown_topic_or_partition and fetched(answer).records is None


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetch__read_committed__empty_aborted_transactions_read_uncommitted_null(node, version):
    """LocalLog.read collects aborted transactions only for TXN_COMMITTED reads."""
    exchange(node, produce_request(batch(b"a")))
    committed, uncommitted, past = exchange(node, fetch_request_of(version, 0, isolation_level=1),
                                            fetch_request_of(version, 0),
                                            fetch_request_of(version, 5, isolation_level=1))
    assert fetched(committed).aborted_transactions == () and fetched(committed).records
    assert fetched(uncommitted).aborted_transactions is None
    assert fetched(past).aborted_transactions is None   # an error: no read, nothing collected


def produce_request_of(version, records, *, topic="orders"):
    request_type = load_request_schema(0, version)
    module = module_of(request_type)
    return make(request_type, transactional_id=None, acks=i16(-1),
                timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)), topic_data=(make(
                    module.TopicProduceData, name=topic, partition_data=(
                        make(module.PartitionProduceData, index=i32(0), records=records),)),))


@pytest.mark.parametrize("version", [8, 9])
def test_produce__keyless_records_to_a_compacted_topic__record_errors_and_kafkas_message(tmp_path, version):
    with ProtocolNode(tmp_path, {"facts": 1}, configs={"facts": {"cleanup.policy": "compact"}}) as node:
        records = encode_batch([RecordInput(b"v", key, 1_000) for key in (b"a", None, None)])
        (answer,) = exchange(node, produce_request_of(version, records, topic="facts"))
        (partition,) = answer.responses[0].partition_responses
        why = "Compacted topic cannot accept message without key in topic partition facts-0"
        assert (partition.error_code, partition.base_offset) == (ErrorCode.invalid_record, -1)
        assert [(e.batch_index, e.batch_index_error_message) for e in partition.record_errors] == [
            (1, why), (2, why)]
        assert partition.error_message == (
            "One or more records have been rejected due to 2 record errors in total, and only showing the first "
            f"three errors at most: [RecordError(batchIndex=1, message='{why}'), RecordError(batchIndex=2, "
            f"message='{why}')]")
        assert node.endpoints[("facts", 0)].replica.log.log_end_offset == 0


@pytest.mark.parametrize("version", [8, 9])
def test_produce__other_errors__no_record_errors_and_a_null_message(node, version):
    """Only a per-record refusal has a custom message (ReplicaManager's LogAppendResult)."""
    two_batches, unknown = exchange(node, produce_request_of(version, batch(b"a") + batch(b"b")),
                                    produce_request_of(version, batch(b"a"), topic="nope"))
    for answer, code in ((two_batches, ErrorCode.invalid_record), (unknown, ErrorCode.unknown_topic_or_partition)):
        (partition,) = answer.responses[0].partition_responses
        assert (partition.error_code, partition.record_errors, partition.error_message) == (code, (), None)
