"""protocol.retry's one rule and "ask a partition's leader", blocking and asyncio,
protocol.range_reads over them, and their callers the lag sampler and a
coordinator's load (actors.coordinator_load): scenarios on a fake leader that reads the
Fetch it is sent and answers whole batches of its log, a fake metadata cache
that moves the leader when it is dropped, and a fake clock whose sleep only
moves time (nothing here waits)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import math
import types
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_request
from kio.schema.fetch.v12 import response as fetch_response
from kio.schema.list_offsets.v7 import request as list_offsets_request
from kio.schema.list_offsets.v7 import response as list_offsets_response
from kio.serial import entity_reader
from kio.static.primitive import i32, i32Timedelta, i64

from rafka.actors.consumer_lag import ConsumerLag
from rafka.actors.coordinator_load import PartitionLoad
from rafka.core.clock import FakeClock as FakeWallClock
from rafka.core.cluster_image import ClusterImage, PartitionImage, TopicImage
from rafka.core.errors import (CorruptCoordinatorRecord, NetworkException, NotLeaderOrFollower, OffsetNotAvailable,
                               OffsetOutOfRange, RequestTimedOut)
from rafka.core.metadata import NodeEndpoint
from rafka.core.offsets_schema import OffsetKey, OffsetValue, decode_record, encode_key, encode_value
from rafka.core.offset_store import OffsetStore
from rafka.core.records import ATTR_TRANSACTIONAL, RecordInput, encode_batch, encode_end_txn_marker
from rafka.core.replica import LATEST_TIMESTAMP
from rafka.protocol.range_reads import RangeRead, read_range, read_range_async
from rafka.protocol.retry import (PinnedLeader, ask_leader, ask_leader_once_async, is_retriable, retry_until,
                                  retry_until_async)

pytestmark = pytest.mark.core

TOPIC = "orders"
A, B = ("10.0.0.1", 9092), ("10.0.0.2", 9092)


class FakeClock:
    """Monotonic seconds; `sleep` moves them and says so in `events`."""

    def __init__(self, events: list, on_sleep=None) -> None:
        self.now_s = 100.0
        self.events = events
        self.on_sleep = on_sleep

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.events.append(("sleep", seconds))
        self.now_s += seconds
        if self.on_sleep is not None:
            self.on_sleep()

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


class FakeLeaders:
    """A metadata cache: the leader it knows until dropped, then the next one."""

    def __init__(self, events: list, leaders=((A, 1), (B, 2))) -> None:
        self.events = events
        self._leaders = list(leaders)

    def leader_address(self, topic: str, partition: int):
        return self._leaders[0]

    def invalidate(self, topic: str) -> None:
        self.events.append(("invalidate", topic))
        if len(self._leaders) > 1:
            self._leaders.pop(0)


class FakeLeader:
    """A partition's log on the leaders at `addresses`: a Fetch is read as the
    broker reads it and answered with whole batches from the fetch offset on
    (at least one, then more while they fit max_bytes); `failures` are raised
    first, one an ask."""

    def __init__(self, events: list, batches: list[bytes], *, high_watermark: int, addresses=(B,),
                 failures=()) -> None:
        self.events = events
        self.batches = batches
        self.high_watermark = high_watermark
        self.addresses = addresses
        self.failures = list(failures)

    def answer(self, address, request):
        if isinstance(request, list_offsets_request.ListOffsetsRequest):
            (asked,) = [p for t in request.topics for p in t.partitions]
            self.events.append(("list_offsets", address, int(asked.timestamp)))
            return list_offsets_answer(self.high_watermark if int(asked.timestamp) == LATEST_TIMESTAMP else 0)
        (fetch,) = [p for t in _read_fetch(request).topics for p in t.partitions]
        self.events.append(("fetch", address, int(fetch.current_leader_epoch), int(fetch.fetch_offset)))
        if self.failures:
            raise self.failures.pop(0)
        if address not in self.addresses:
            raise NotLeaderOrFollower(f"{address} does not lead {TOPIC}-0")
        records = b""
        for batch in self.batches:
            header_base, next_offset = _offsets(batch)
            if next_offset <= int(fetch.fetch_offset) or header_base >= self.high_watermark:
                continue
            if records and len(records) + len(batch) > int(fetch.partition_max_bytes):
                break
            records += batch
        return fetch_answer(records, self.high_watermark)

    # the two networks a caller hands in
    def submit(self, address, request) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(self.answer(address, request))
        except Exception as error:
            future.set_exception(error)
        return future

    async def request(self, address, request):
        return self.answer(address, request)


def _read_fetch(request) -> fetch_request.FetchRequest:
    entity, _ = entity_reader(fetch_request.FetchRequest)(memoryview(b"".join(request.pieces)), 0)
    return entity


def _offsets(batch: bytes) -> tuple[int, int]:
    from rafka.core.records import read_header
    header = read_header(batch)
    return header.base_offset, header.next_offset


def fetch_answer(records: bytes, high_watermark: int, code: ErrorCode = ErrorCode.none):
    return fetch_response.FetchResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none, session_id=i32(0),
        responses=(fetch_response.FetchableTopicResponse(topic=TOPIC, partitions=(fetch_response.PartitionData(
            partition_index=i32(0), error_code=code, high_watermark=i64(high_watermark),
            last_stable_offset=i64(high_watermark), log_start_offset=i64(0), aborted_transactions=(),
            records=records),)),))


def list_offsets_answer(offset: int):
    return list_offsets_response.ListOffsetsResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), topics=(list_offsets_response.ListOffsetsTopicResponse(
            name=TOPIC, partitions=(list_offsets_response.ListOffsetsPartitionResponse(
                partition_index=i32(0), error_code=ErrorCode.none, offset=i64(offset), timestamp=i64(-1)),)),))


def batch(base_offset: int, offsets: list[int], *, last_offset: int | None = None) -> bytes:
    """Records at `offsets` (a compacted batch keeps only some, and its last offset)."""
    return encode_batch([RecordInput(f"v{o}".encode(), f"k{o}".encode(), 1_000 + o) for o in offsets],
                        base_offset=base_offset, offset_deltas=[o - base_offset for o in offsets],
                        last_offset_delta=None if last_offset is None else last_offset - base_offset)


# 0 1 2 | 3 . . 6 . (compacted: last offset 7 kept) | 8 9 10 11
LOG = [batch(0, [0, 1, 2]), batch(3, [3, 6], last_offset=7), batch(8, [8, 9, 10, 11])]


def ask_retried(leaders, network, clock, *, timeout_s=5.0):
    def ask(request_for, read):
        return ask_leader(leaders, network, TOPIC, 0, request_for, read, timeout_s=timeout_s, retry_backoff_s=0.25,
                          clock=clock, sleep=clock.sleep)
    return ask


def range_read(start: int, end: int | None, max_bytes: int = 1) -> RangeRead:
    return RangeRead(topic=TOPIC, partition=0, start_offset=start, end_offset=end, max_bytes=max_bytes)


# --- the rule ---------------------------------------------------------------------

def test_ask_leader__not_leader__metadata_dropped_before_the_retry_at_the_new_leader_and_epoch():
    events: list = []
    clock, leader = FakeClock(events), FakeLeader(events, LOG, high_watermark=12, addresses=(B,))
    (chunk,) = list(read_range(ask_retried(FakeLeaders(events), leader, clock), range_read(0, 3, max_bytes=1)))
    assert events == [("fetch", A, 1, 0), ("invalidate", TOPIC), ("sleep", 0.25), ("fetch", B, 2, 0)]
    assert [r.offset for r in chunk.in_range()] == [0, 1, 2]


def test_ask_leader__a_final_error__raised_as_it_is_no_retry_nothing_dropped():
    events: list = []
    clock = FakeClock(events)
    leader = FakeLeader(events, LOG, high_watermark=12, addresses=(A,), failures=[OffsetOutOfRange("below")])
    with pytest.raises(OffsetOutOfRange, match="^OFFSET_OUT_OF_RANGE: below$"):
        list(read_range(ask_retried(FakeLeaders(events), leader, clock), range_read(0, 3)))
    assert events == [("fetch", A, 1, 0)]


def test_ask_leader__retriable_until_the_deadline__request_timed_out_naming_the_last_error():
    events: list = []
    clock = FakeClock(events)
    leader = FakeLeader(events, LOG, high_watermark=12, addresses=(A,),
                        failures=[NetworkException(f"lost {n}") for n in range(10)])
    with pytest.raises(RequestTimedOut) as raised:
        list(read_range(ask_retried(FakeLeaders(events, [(A, 1)]), leader, clock, timeout_s=1.0), range_read(0, 3)))
    assert str(raised.value) == ("REQUEST_TIMED_OUT: a request to the leader of orders-0 did not succeed "
                                 "in 1.0s; last error: NETWORK_EXCEPTION: lost 3")
    assert isinstance(raised.value.__cause__, NetworkException)
    assert [e for e in events if e[0] == "fetch"] == [("fetch", A, 1, 0)] * 4   # at 0, .25, .5, .75 s
    assert clock.now_s == 100.75


def test_retry_until__a_ray_style_error_behind_its_cause__the_kafka_error_raised():
    class TaskError(Exception):
        cause = OffsetOutOfRange("gone")
    with pytest.raises(OffsetOutOfRange, match="^OFFSET_OUT_OF_RANGE: gone$"):
        retry_until(lambda _: (_ for _ in ()).throw(TaskError()), timeout_s=1.0, retry_backoff_s=0.1, what="x",
                    sleep=pytest.fail)


def test_retry_until_async__the_same_rule_widened__retried_without_deadline_each_error_told():
    events: list = []
    clock = FakeClock(events)
    failures = [OffsetOutOfRange("final elsewhere, retried here"), RuntimeError("Ray: controller restarting")]

    async def call(remaining_s: float):
        assert remaining_s == math.inf
        if failures:
            raise failures.pop(0)
        return "loaded"
    answer = asyncio.run(retry_until_async(
        call, timeout_s=math.inf, retry_backoff_s=0.1, what="loading", clock=clock, sleep=clock.async_sleep,
        retriable=lambda error: isinstance(error, (OffsetOutOfRange, RuntimeError)),
        on_retry=lambda error: events.append(("failed", str(error)))))
    assert answer == "loaded"
    assert events == [("failed", "OFFSET_OUT_OF_RANGE: final elsewhere, retried here"), ("sleep", 0.1),
                      ("failed", "Ray: controller restarting"), ("sleep", 0.1)]


def test_retry_until_async__an_error_outside_the_rule__reaches_the_caller_at_once():
    async def call(_):
        raise KeyError("a bug")
    with pytest.raises(KeyError):
        asyncio.run(retry_until_async(call, timeout_s=5.0, retry_backoff_s=0.1, what="x", sleep=pytest.fail))


def test_rule__a_corrupt_coordinator_record_or_a_value_error__final_no_retry():
    """Neither is cleared by asking again: the record is what the log holds; a
    ValueError is a bug (Ray's "no such actor" is turned into NETWORK_EXCEPTION
    where an actor is looked up)."""
    assert not is_retriable(CorruptCoordinatorRecord("bad key")) and not is_retriable(ValueError("bug"))
    assert is_retriable(NetworkException("the controller is not registered")) and is_retriable(TimeoutError())
    for error in (CorruptCoordinatorRecord("bad key"), ValueError("bug")):
        async def call(_, error=error):
            raise error
        with pytest.raises(type(error)):
            asyncio.run(retry_until_async(call, timeout_s=5.0, retry_backoff_s=0.1, what="x", sleep=pytest.fail))


def test_ask_leader_once_async__an_answer_not_in_time__timeout_error():
    class SilentNodes:
        async def request(self, address, request):
            await asyncio.Event().wait()
    with pytest.raises(TimeoutError):
        asyncio.run(ask_leader_once_async(PinnedLeader(A, 1), SilentNodes(), TOPIC, 0, range_read(0, 3).request_for,
                                          lambda response: response, timeout_s=0))


# --- reading a range --------------------------------------------------------------

def test_read_range__stops_at_the_end_and_steps_over_a_compaction_gap():
    events: list = []
    leader = FakeLeader(events, LOG, high_watermark=12, addresses=(A,))
    chunks = list(read_range(ask_retried(FakeLeaders(events), leader, FakeClock(events)), range_read(1, 10)))
    assert [r.offset for c in chunks for r in c.in_range()] == [1, 2, 3, 6, 8, 9]
    assert [e[3] for e in events] == [1, 3, 8]   # the gap 7 stepped over; nothing asked at or past 10
    assert [c.from_offset for c in chunks] == [1, 3, 8]


def test_read_range__one_answer_of_several_batches__the_position_past_the_last():
    events: list = []
    leader = FakeLeader(events, LOG, high_watermark=12, addresses=(A,))
    cursor = range_read(2, 12, max_bytes=1 << 20)
    (chunk,) = list(read_range(ask_retried(FakeLeaders(events), leader, FakeClock(events)), cursor))
    assert [r.offset for r in chunk.in_range()] == [2, 3, 6, 8, 9, 10, 11]
    assert cursor.position == 12 and cursor.done


def test_read_range__nothing_left_below_the_end__done_without_asking_again():
    events: list = []
    # 3..7 compacted away entirely: an answer at 3 holds no records, the HW is past the end
    leader = FakeLeader(events, [LOG[0]], high_watermark=12, addresses=(A,))
    chunks = list(read_range(ask_retried(FakeLeaders(events), leader, FakeClock(events)), range_read(3, 8)))
    assert chunks == [] and [e[3] for e in events] == [3]


def test_read_range__a_new_leader_behind_the_end__offset_not_available_retried_until_it_caught_up():
    events: list = []
    leader = FakeLeader(events, LOG, high_watermark=3, addresses=(A,))
    cursor = range_read(3, 12, max_bytes=1 << 20)
    behind = "^OFFSET_NOT_AVAILABLE: orders-0: the leader's HW 3 is below the end 12 read at offset 3$"
    with pytest.raises(OffsetNotAvailable, match=behind):
        cursor.read(leader.answer(A, cursor.request_for(1)))
    events.clear()

    def caught_up() -> None:
        leader.high_watermark = 12
    clock = FakeClock(events, on_sleep=caught_up)
    (chunk,) = list(read_range(ask_retried(FakeLeaders(events, [(A, 1)]), leader, clock), cursor))
    assert events == [("fetch", A, 1, 3), ("invalidate", TOPIC), ("sleep", 0.25), ("fetch", A, 1, 3)]
    assert [r.offset for r in chunk.in_range()] == [3, 6, 8, 9, 10, 11]


def test_read_range__no_end__up_to_the_hw_the_leader_answers():
    events: list = []
    leader = FakeLeader(events, LOG, high_watermark=12, addresses=(A,))
    chunks = list(read_range(ask_retried(FakeLeaders(events), leader, FakeClock(events)), range_read(7, None)))
    assert [r.offset for c in chunks for r in c.in_range()] == [8, 9, 10, 11]
    # 7: a compacted batch with no record left at or after it; at the HW: no records, done
    assert [e[3] for e in events] == [7, 8, 12]


def test_read_range_async__pinned_leader__the_same_chunks_as_blocking():
    events: list = []
    leader = FakeLeader(events, LOG, high_watermark=12, addresses=(A,))

    def ask(request_for, read):
        return ask_leader_once_async(PinnedLeader(A, 7), leader, TOPIC, 0, request_for, read, timeout_s=1.0)

    async def offsets():
        return [r.offset async for c in read_range_async(ask, range_read(1, 10)) for r in c.in_range()]
    assert asyncio.run(offsets()) == [1, 2, 3, 6, 8, 9]
    assert events == [("fetch", A, 7, 1), ("fetch", A, 7, 3), ("fetch", A, 7, 8)]


# --- a caller: the coordinator's lag sampler ----------------------------------------

def test_lag_sample__a_committed_offset_in_a_compaction_gap__the_time_of_the_next_record():
    events: list = []
    node = NodeEndpoint(1, "replica-1", "127.0.0.1", 9001)
    image = ClusterImage(version=1, cluster_id="c", controller_node=1, nodes={1: node}, coordinator_nodes=(),
                         topics={TOPIC: TopicImage(TOPIC, uuid.uuid4(), False, (PartitionImage(
                             partition=0, leader_node=1, leader_epoch=3, replica_nodes=(1,), isr_nodes=(1,),
                             offline_nodes=(), leader_replica=0),))})
    leader = FakeLeader(events, LOG, high_watermark=12, addresses=(("127.0.0.1", 9001),))
    committed = {"billing": {(TOPIC, 0): types.SimpleNamespace(offset=7)},
                 "audit": {(TOPIC, 0): types.SimpleNamespace(offset=12)}}
    lag = ConsumerLag(leader, image=lambda: image, committed=lambda: committed, loaded=lambda: True,
                      clock=FakeWallClock())
    asyncio.run(lag.refresh())
    oldest = {s.group: [(p.log_end_offset, p.oldest_unconsumed_timestamp_ms) for p in s.positions]
              for s in lag.samples()}
    # 7: its batch (3..7) kept no record at or after it, so the read goes on to 8's
    assert oldest == {"billing": [(12, 1_008)], "audit": [(12, None)]}
    assert events == [("list_offsets", ("127.0.0.1", 9001), LATEST_TIMESTAMP),
                      ("fetch", ("127.0.0.1", 9001), -1, 7), ("fetch", ("127.0.0.1", 9001), -1, 8)]


# --- a caller: the coordinator's load ------------------------------------------------

def offsets_batch(base_offset: int, records: list[tuple[bytes | None, bytes | None]]) -> bytes:
    return encode_batch([RecordInput(value, key, 1_000 + base_offset + i) for i, (key, value) in enumerate(records)],
                        base_offset=base_offset)


def commit(group: str, partition: int, offset: int) -> tuple[bytes, bytes]:
    return encode_key(OffsetKey(group, "orders", partition)), encode_value(OffsetValue(offset, -1, "", 1_000))


def partition_load(events: list, leader: FakeLeader, replayed: list, *, epochs=(1,), may_retry_also=lambda e: False):
    """A coordinator's load of `orders-0` on `leader`, at A; each lookup of the leader
    answers the next of `epochs` (the last one repeats)."""
    epochs = list(epochs)
    clock = FakeClock(events)

    async def lookup():
        epoch = epochs.pop(0) if len(epochs) > 1 else epochs[0]
        events.append(("leader", epoch))
        return A, epoch
    return PartitionLoad(topic=TOPIC, partition=0, leader=lookup, nodes=leader, decode=decode_record,
                         replay=lambda key, value: replayed.append((key, value)), ask_timeout_s=1.0,
                         retry_backoff_s=0.25, may_retry_also=may_retry_also,
                         on_retry=lambda error: events.append(("forget leader", type(error).__name__)),
                         sleep=clock.async_sleep)


def test_coordinator_load__a_leader_gone_then_back__retried_from_a_leader_looked_up_again():
    events: list = []
    log = [offsets_batch(0, [commit("billing", 0, 5), commit("billing", 1, 9)])]
    leader = FakeLeader(events, log, high_watermark=2, addresses=(A,), failures=[NotLeaderOrFollower("moved")])
    replayed: list = []
    load = partition_load(events, leader, replayed, epochs=(1, 2))
    asyncio.run(load.run())
    assert load.loaded and load.failure is None and load.position == 2
    assert [(key.partition, value.offset) for key, value in replayed] == [(0, 5), (1, 9)]
    assert [e for e in events if e[0] in ("leader", "forget leader", "sleep")] == [
        ("leader", 1), ("forget leader", "NotLeaderOrFollower"), ("sleep", 0.25), ("leader", 2)]


def test_coordinator_load__a_transaction_marker_in_the_log__skipped_not_a_corrupt_record():
    """A transaction's offsets in __consumer_offsets end with a COMMIT or ABORT
    control batch (WriteTxnMarkers): not a record of the offsets schema."""
    events: list = []
    marker = encode_end_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=1, commit=False,
                                   timestamp_ms=1_001, base_offset=1)
    log = [offsets_batch(0, [commit("billing", 0, 5)]), marker, offsets_batch(2, [commit("billing", 1, 9)])]
    leader = FakeLeader(events, log, high_watermark=3, addresses=(A,))
    replayed: list = []
    load = partition_load(events, leader, replayed, epochs=(3,))
    asyncio.run(load.run())
    assert load.loaded and load.failure is None and load.leader_epoch == 3
    assert [(key.partition, value.offset) for key, value in replayed] == [(0, 5), (1, 9)]


def test_coordinator_load__transactional_offsets_and_markers__replayed_as_live_into_the_offsets():
    """The group coordinator's load (with `replay_marker`): a transaction's
    offsets come back pending, its COMMIT applies them unless a plain commit
    came later in the log, its ABORT drops them, an open one stays pending."""
    events: list = []

    def txn_batch(base_offset, producer_id, records):
        return encode_batch([RecordInput(value, key, 1_000 + base_offset + i) for i, (key, value) in
                             enumerate(records)], base_offset=base_offset, producer_id=producer_id, producer_epoch=0,
                            attributes=ATTR_TRANSACTIONAL)

    def marker(base_offset, producer_id, commit):
        return encode_end_txn_marker(producer_id=producer_id, producer_epoch=0, coordinator_epoch=1, commit=commit,
                                     timestamp_ms=1_000 + base_offset, base_offset=base_offset)
    log = [offsets_batch(0, [commit("billing", 0, 5)]),
           txn_batch(1, 7, [commit("billing", 0, 8), commit("billing", 1, 9)]),
           offsets_batch(3, [commit("billing", 1, 4)]),     # later than the transaction's 9: it stays
           marker(4, 7, True),
           txn_batch(5, 8, [commit("billing", 0, 20)]), marker(6, 8, False),
           txn_batch(7, 9, [commit("billing", 1, 30)])]     # no marker yet
    leader = FakeLeader(events, log, high_watermark=8, addresses=(A,))
    store = OffsetStore()
    load = PartitionLoad(topic=TOPIC, partition=0, leader=lambda: _answer((A, 1)), nodes=leader,
                         decode=decode_record, replay=store.replay, replay_marker=store.replay_marker,
                         ask_timeout_s=1.0, retry_backoff_s=0.25)
    asyncio.run(load.run())
    assert load.loaded and load.failure is None
    assert {tp: v.offset for tp, v in store.fetch("billing").items()} == {("orders", 0): 8, ("orders", 1): 4}
    assert store.pending_partitions("billing") == {("orders", 1)}
    assert set(store.pending_by_producer) == {9}


def test_coordinator_load__a_record_that_does_not_decode__fails_once_loudly_no_retry(caplog):
    """Kafka's loader fails the partition's load on a record it cannot deserialize,
    and its runtime answers NOT_COORDINATOR for it: here the load stops at its first
    attempt (no retry, no sleep), keeps the error naming the record's offset, logs it
    at error level, and is due again only for a newer leader epoch."""
    events: list = []
    bad_key = b"\x00\x09junk"   # key version 9
    log = [offsets_batch(0, [commit("billing", 0, 5)]), offsets_batch(1, [(bad_key, b"v"), commit("billing", 1, 9)])]
    leader = FakeLeader(events, log, high_watermark=3, addresses=(A,))
    replayed: list = []
    load = partition_load(events, leader, replayed, epochs=(4,))
    with caplog.at_level("ERROR", logger="rafka.actors.coordinator_load"):
        asyncio.run(load.run())
    assert not load.loaded and isinstance(load.failure, CorruptCoordinatorRecord)
    assert load.error == ("CorruptCoordinatorRecord: CORRUPT_MESSAGE: orders-0 at offset 1: "
                          "unknown __consumer_offsets key version 9")
    assert [(key.partition, value.offset) for key, value in replayed] == [(0, 5)]
    assert [e[0] for e in events] == ["leader", "list_offsets", "list_offsets", "fetch"]   # one attempt
    assert [r.levelname for r in caplog.records] == ["ERROR"] and "orders-0 at offset 1" in caplog.text
    assert not load.load_again_for(4)                 # the same leader serves the same log
    assert load.load_again_for(5) and load.failure is None


async def _answer(value):
    return value


def test_coordinator_load__replay_refuses_a_record_or_a_value_error__final_not_retried():
    """What replay refuses fails the load (Kafka: "Replaying record ... failed"); a
    ValueError is final too, only the caller's `may_retry_also` (Ray's errors, for
    the actor) widens the rule."""
    events: list = []
    leader = FakeLeader(events, [offsets_batch(0, [commit("billing", 0, 5)])], high_watermark=1, addresses=(A,))

    def refuse(key, value):
        raise KeyError("topics")
    load = PartitionLoad(topic=TOPIC, partition=0, leader=lambda: _answer((A, 1)), nodes=leader, decode=decode_record,
                         replay=refuse,
                         ask_timeout_s=1.0, retry_backoff_s=0.25, sleep=pytest.fail)
    asyncio.run(load.run())
    assert isinstance(load.failure, RuntimeError) and "orders-0 at offset 0" in load.error and "KeyError" in load.error

    class RayStyleError(Exception):
        pass
    lookups = [RayStyleError("controller restarting"), ValueError("a bug")]

    async def lookup():
        raise lookups.pop(0)
    clock = FakeClock(events)
    widened = PartitionLoad(topic=TOPIC, partition=0, leader=lookup, nodes=leader, decode=decode_record,
                            replay=lambda k, v: None,
                            ask_timeout_s=1.0, retry_backoff_s=0.25, sleep=clock.async_sleep,
                            may_retry_also=lambda error: isinstance(error, RayStyleError))
    asyncio.run(widened.run())
    assert lookups == [] and events[-1] == ("sleep", 0.25)    # the Ray error retried once, the ValueError final
    assert isinstance(widened.failure, ValueError) and widened.error == "ValueError: a bug"
