"""The transaction APIs' wire handlers over a real TransactionShard (its appends
acked at once, its markers recorded), through dispatch as a client's bytes
arrive: versions, Kafka's per-version error codes, partitions the metadata does
not know, and WriteTxnMarkers reaching a partition's `append_marker`."""

from __future__ import annotations

import asyncio
import datetime

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from rafka.core.clock import FakeClock
from rafka.core.errors import InvalidProducerEpoch
from rafka.core.producer_ids import ProducerIdAllocator, ProducerIdBlock
from rafka.core.transaction_shard import TransactionShard
from rafka.protocol.dispatch import Dispatcher
from rafka.protocol.entities import load_request_schema, module_of
from rafka.protocol.node_table import node_table
from tests.core.helpers import orders_image
from tests.core.test_protocol_dispatch import read_response, request_frame

pytestmark = pytest.mark.core
INIT, ADD_PARTITIONS, ADD_OFFSETS, END, WRITE_MARKERS, DESCRIBE, LIST = 22, 24, 25, 26, 27, 65, 66
DESCRIBE_PRODUCERS = 61


class Host:
    """A node hosting one transaction coordinator (for every id) and the
    partitions of `hosted` (each an endpoint recording its markers)."""

    def __init__(self, shard, hosted=()):
        self.shard = shard
        self.markers: list[tuple] = []
        self.hosted = set(hosted)
        self.marker_error: Exception | None = None
        self._image = orders_image()

    def image(self):
        return self._image

    def transaction_coordinator_for(self, transactional_id):
        return self.shard

    def transaction_coordinators(self):
        return [self.shard]

    def endpoint(self, topic, partition):
        if (topic, partition) not in self.hosted:
            return None
        host = self

        class Endpoint:
            async def append_marker(self, **marker):
                if host.marker_error is not None:
                    raise host.marker_error
                host.markers.append(((topic, partition), marker))
        return Endpoint()


def run(scenario, *, hosted=(), loading=False):
    async def main():
        async def append(records):
            return None

        async def allocate_block():
            return ProducerIdBlock(5000, 100)

        async def send_markers(markers):
            return {(m.topic, m.partition): None for m in markers}
        shard = TransactionShard(partition=0, partition_count=1, coordinator_epoch=0, clock=FakeClock(),
                                 append=append, send_markers=send_markers,
                                 producer_ids=ProducerIdAllocator(allocate_block), offsets_partition_count=50)
        if not loading:
            shard.finish_loading()
        host = Host(shard, hosted)

        async def allocate_producer_id():
            return 77
        dispatcher = Dispatcher(node_table(image=host.image, allocate_producer_id=allocate_producer_id,
                                           partitions=host, transactions=host))

        async def ask(api_key, version, **fields):
            request_type = load_request_schema(api_key, version)
            frame = await dispatcher.dispatch(request_frame(api_key, version, request_type(**fields)))
            return read_response(frame, api_key, version)[1]
        try:
            await scenario(ask, host)
        finally:
            await shard.drain_markers()
            shard.close()
    asyncio.run(main())


def timeout(ms):
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def topics(version, *partitions):
    module = module_of(load_request_schema(ADD_PARTITIONS, version))
    by_topic = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(i32(partition))
    return tuple(module.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())


def partition_codes(response_topics):
    return {(t.name, r.partition_index): r.partition_error_code for t in response_topics for r in t.results_by_partition}


def test_init_producer_id__transactional_id__the_coordinators_id_and_epoch():
    async def scenario(ask, host):
        answer = await ask(INIT, 4, transactional_id="t", transaction_timeout=timeout(60_000))
        assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (ErrorCode.none, 5000, 0)
        plain = await ask(INIT, 4, transactional_id=None, transaction_timeout=timeout(60_000))
        assert (plain.error_code, plain.producer_id, plain.producer_epoch) == (ErrorCode.none, 77, 0)
        bad = await ask(INIT, 4, transactional_id="t", transaction_timeout=timeout(60_000), producer_id=i64(5000),
                        producer_epoch=i16(-1))
        assert (bad.error_code, bad.producer_id, bad.producer_epoch) == (ErrorCode.invalid_request, -1, -1)
        too_long = await ask(INIT, 2, transactional_id="t", transaction_timeout=timeout(15 * 60_000 + 1))
        assert too_long.error_code == ErrorCode.invalid_transaction_timeout
        empty = await ask(INIT, 2, transactional_id="", transaction_timeout=timeout(1000))
        assert empty.error_code == ErrorCode.invalid_request
    run(scenario)


def test_init_producer_id__stale_producer__fenced_or_invalid_epoch_before_v4():
    async def scenario(ask, host):
        await ask(INIT, 4, transactional_id="t", transaction_timeout=timeout(60_000))
        await ask(INIT, 4, transactional_id="t", transaction_timeout=timeout(60_000))   # epoch 1
        for version, code in ((4, ErrorCode.producer_fenced), (3, ErrorCode.invalid_producer_epoch)):
            answer = await ask(INIT, version, transactional_id="t", transaction_timeout=timeout(60_000),
                               producer_id=i64(5000), producer_epoch=i16(7))
            assert answer.error_code == code
    run(scenario)


def test_init_producer_id__no_coordinator_on_this_node__not_coordinator():
    async def scenario(ask, host):
        host.shard = None
        answer = await ask(INIT, 4, transactional_id="t", transaction_timeout=timeout(60_000))
        assert (answer.error_code, answer.producer_id) == (ErrorCode.not_coordinator, -1)
    run(scenario)


def test_add_partitions_v3__unknown_partition__none_added_others_not_attempted():
    async def scenario(ask, host):
        await ask(INIT, 4, transactional_id="t", transaction_timeout=timeout(60_000))
        answer = await ask(ADD_PARTITIONS, 3, v3_and_below_transactional_id="t", v3_and_below_producer_id=i64(5000),
                           v3_and_below_producer_epoch=i16(0),
                           v3_and_below_topics=topics(3, ("orders", 0), ("orders", 5), ("nope", 0)))
        assert partition_codes(answer.results_by_topic_v3_and_below) == {
            ("orders", 0): ErrorCode.operation_not_attempted, ("orders", 5): ErrorCode.unknown_topic_or_partition,
            ("nope", 0): ErrorCode.unknown_topic_or_partition}
        assert host.shard.metadata["t"].state.value == "Empty"
        answer = await ask(ADD_PARTITIONS, 3, v3_and_below_transactional_id="t", v3_and_below_producer_id=i64(5000),
                           v3_and_below_producer_epoch=i16(0), v3_and_below_topics=topics(3, ("orders", 0)))
        assert partition_codes(answer.results_by_topic_v3_and_below) == {("orders", 0): ErrorCode.none}
        assert host.shard.metadata["t"].topic_partitions == {("orders", 0)}
    run(scenario)


def test_add_partitions__fenced__invalid_producer_epoch_before_v2():
    async def scenario(ask, host):
        await ask(INIT, 4, transactional_id="t", transaction_timeout=timeout(60_000))
        for version, code in ((1, ErrorCode.invalid_producer_epoch), (2, ErrorCode.producer_fenced)):
            answer = await ask(ADD_PARTITIONS, version, v3_and_below_transactional_id="t",
                               v3_and_below_producer_id=i64(5000), v3_and_below_producer_epoch=i16(3),
                               v3_and_below_topics=topics(version, ("orders", 1)))
            assert partition_codes(answer.results_by_topic_v3_and_below) == {("orders", 1): code}
    run(scenario)


def test_add_partitions_v4__verify_only__per_partition_and_per_transaction():
    async def scenario(ask, host):
        await ask(INIT, 4, transactional_id="t", transaction_timeout=timeout(60_000))
        await host.shard.add_partitions("t", producer_id=5000, producer_epoch=0, partitions=[("orders", 0)])
        module = module_of(load_request_schema(ADD_PARTITIONS, 4))
        answer = await ask(ADD_PARTITIONS, 4, transactions=(
            module.AddPartitionsToTxnTransaction(transactional_id="t", producer_id=i64(5000), producer_epoch=i16(0),
                                                 verify_only=True, topics=topics(4, ("orders", 0), ("orders", 1))),
            module.AddPartitionsToTxnTransaction(transactional_id="u", producer_id=i64(1), producer_epoch=i16(0),
                                                 verify_only=True, topics=topics(4, ("orders", 1)))))
        assert answer.error_code == ErrorCode.none
        t, u = answer.results_by_transaction
        assert (t.transactional_id, partition_codes(t.topic_results)) == (
            "t", {("orders", 0): ErrorCode.none, ("orders", 1): ErrorCode.transaction_abortable})
        assert partition_codes(u.topic_results) == {("orders", 1): ErrorCode.invalid_producer_id_mapping}
    run(scenario)


def test_verify_request_and_answer__a_leaders_question_through_the_handler__each_partition_its_answer():
    """protocol.txn_verification's request (v5, verify only), as a partition leader
    sends it, answered by the handler and read back: the partition in the
    transaction verified, the other TRANSACTION_ABORTABLE; an unknown id every
    partition's INVALID_PRODUCER_ID_MAPPING."""
    from rafka.core.errors import InvalidProducerIdMapping, TransactionAbortable
    from rafka.protocol.txn_verification import verify_answer, verify_request

    async def scenario(ask, host):
        await ask(INIT, 4, transactional_id="t", transaction_timeout=timeout(60_000))
        await host.shard.add_partitions("t", producer_id=5000, producer_epoch=0, partitions=[("orders", 0)])
        asked = [("orders", 0), ("orders", 1)]
        answer = verify_answer(await ask(ADD_PARTITIONS, 5, transactions=verify_request(
            "t", 5000, 0, asked).transactions), asked)
        assert answer[("orders", 0)] is None and isinstance(answer[("orders", 1)], TransactionAbortable)
        unknown = verify_answer(await ask(ADD_PARTITIONS, 5, transactions=verify_request(
            "nobody", 1, 0, asked[:1]).transactions), asked[:1])
        assert isinstance(unknown[("orders", 0)], InvalidProducerIdMapping)
    run(scenario)


def test_add_offsets_and_end_txn__commit_and_fenced_codes_by_version():
    async def scenario(ask, host):
        await ask(INIT, 4, transactional_id="t", transaction_timeout=timeout(60_000))
        answer = await ask(ADD_OFFSETS, 3, transactional_id="t", producer_id=i64(5000), producer_epoch=i16(0),
                           group_id="billing")
        assert answer.error_code == ErrorCode.none
        from rafka.core.offsets_schema import partition_for_group
        assert host.shard.metadata["t"].topic_partitions == {("__consumer_offsets", partition_for_group("billing", 50))}
        assert (await ask(END, 1, transactional_id="t", producer_id=i64(5000), producer_epoch=i16(9),
                          committed=True)).error_code == ErrorCode.invalid_producer_epoch
        assert (await ask(END, 3, transactional_id="t", producer_id=i64(5000), producer_epoch=i16(9),
                          committed=True)).error_code == ErrorCode.producer_fenced
        assert (await ask(END, 4, transactional_id="t", producer_id=i64(5000), producer_epoch=i16(0),
                          committed=True)).error_code == ErrorCode.none
        assert host.shard.metadata["t"].state.value in ("PrepareCommit", "CompleteCommit")
        assert (await ask(END, 0, transactional_id="never", producer_id=i64(1), producer_epoch=i16(0),
                          committed=False)).error_code == ErrorCode.invalid_producer_id_mapping
    run(scenario)


def test_list_transactions__loading__coordinator_load_in_progress():
    async def scenario(ask, host):
        answer = await ask(LIST, 1, state_filters=(), producer_id_filters=(), duration_filter=i64(-1))
        assert (answer.error_code, answer.transaction_states) == (ErrorCode.coordinator_load_in_progress, ())
        described = await ask(DESCRIBE, 0, transactional_ids=("t",))
        assert described.transaction_states[0].error_code == ErrorCode.coordinator_load_in_progress
    run(scenario, loading=True)


def test_write_txn_markers__reach_append_marker_or_the_partitions_error():
    async def scenario(ask, host):
        module = module_of(load_request_schema(WRITE_MARKERS, 1))
        marker = module.WritableTxnMarker(producer_id=i64(5000), producer_epoch=i16(2), transaction_result=True,
                                          coordinator_epoch=i32(4), topics=(
                                              module.WritableTxnMarkerTopic(name="orders",
                                                                            partition_indexes=(i32(0), i32(1))),
                                              module.WritableTxnMarkerTopic(name="nope", partition_indexes=(i32(0),))))
        answer = await ask(WRITE_MARKERS, 1, markers=(marker,))
        (result,) = answer.markers
        assert result.producer_id == 5000
        assert {(t.name, p.partition_index): p.error_code for t in result.topics for p in t.partitions} == {
            ("orders", 0): ErrorCode.none, ("orders", 1): ErrorCode.not_leader_or_follower,
            ("nope", 0): ErrorCode.unknown_topic_or_partition}
        assert host.markers == [(("orders", 0), dict(producer_id=5000, producer_epoch=2, coordinator_epoch=4,
                                                     commit=True))]
        host.marker_error = InvalidProducerEpoch("the producer moved on")
        v2 = module_of(load_request_schema(WRITE_MARKERS, 2))
        answer = await ask(WRITE_MARKERS, 2, markers=(v2.WritableTxnMarker(
            producer_id=i64(5000), producer_epoch=i16(1), transaction_result=False, coordinator_epoch=i32(4),
            transaction_version=i8(0),
            topics=(v2.WritableTxnMarkerTopic(name="orders", partition_indexes=(i32(0),)),)),))
        assert answer.markers[0].topics[0].partitions[0].error_code == ErrorCode.invalid_producer_epoch
    run(scenario, hosted=[("orders", 0)])


def test_api_versions__advertises_the_transaction_apis():
    async def scenario(ask, host):
        answer = await ask(18, 3, client_software_name="t", client_software_version="1")
        ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
        assert {key: ranges[key] for key in (INIT, ADD_PARTITIONS, ADD_OFFSETS, END, WRITE_MARKERS, DESCRIBE, LIST,
                                             DESCRIBE_PRODUCERS)} == {
            INIT: (0, 4), ADD_PARTITIONS: (0, 5), ADD_OFFSETS: (0, 4), END: (0, 4), WRITE_MARKERS: (1, 2),
            DESCRIBE: (0, 0), LIST: (0, 1), DESCRIBE_PRODUCERS: (0, 0)}
    run(scenario)


def test_describe_transactions__an_empty_ids_start_time_minus_1__read_back__bytes_as_kios_schema():
    """rafka's own answer schema (protocol.describe_transactions_schema) writes what
    kio's does, and reads the -1 an Empty transaction answers, which kio's refuses
    (rafka's Admin reading one: test_cli_transactions)."""
    from kio.schema.describe_transactions.v0 import response as kio_v0
    from kio.serial import entity_reader

    from rafka.protocol import describe_transactions_schema as own
    from rafka.protocol.entities import load_response_schema
    from rafka.protocol.hot_writers import body_pieces

    def answer(module, start_time):
        return module.DescribeTransactionsResponse(throttle_time=timeout(0), transaction_states=(
            module.TransactionState(error_code=ErrorCode.none, transactional_id="t", transaction_state="Empty",
                                    transaction_timeout=timeout(60_000), transaction_start_time=start_time,
                                    producer_id=i64(5000), producer_epoch=i16(0),
                                    topics=(module.TopicData(topic="orders", partitions=(i32(1),)),)),))
    assert load_response_schema(DESCRIBE, 0) is own.DescribeTransactionsResponse
    five_s = datetime.datetime(1970, 1, 1, 0, 0, 5, tzinfo=datetime.UTC)
    assert b"".join(body_pieces(answer(own, i64(5_000)))) == b"".join(body_pieces(answer(kio_v0, five_s)))
    empty = b"".join(body_pieces(answer(own, i64(-1))))
    assert entity_reader(own.DescribeTransactionsResponse)(empty, 0)[0].transaction_states[0].transaction_start_time == -1
