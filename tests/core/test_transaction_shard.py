"""The transaction coordinator of one __transaction_state partition, without Ray:
a fake partition that keeps the records encoded as replicas would (and can fail
or hold an append), a fake marker sender that records every marker and answers
as a test tells it, a fake clock. Scenarios end by loading a fresh shard from
the records written (a coordinator failover) and comparing."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import itertools

import pytest

from rafka.core.clock import FakeClock
from rafka.core.errors import (ConcurrentTransactions, CoordinatorLoadInProgress, CoordinatorNotAvailable,
                               InvalidProducerEpoch, InvalidProducerIdMapping, InvalidRequest,
                               InvalidTransactionTimeout, InvalidTxnState, NotCoordinator, NotEnoughReplicas,
                               NotLeaderOrFollower, ProducerFenced, RecordTooLarge, TransactionAbortable,
                               TransactionalIdNotFound, UnknownServerError)
from rafka.core.offsets_schema import partition_for_group
from rafka.core.producer_ids import NonMonotonicProducerIdBlock, ProducerIdAllocator, ProducerIdBlock
from rafka.core.transaction_log import decode_key, decode_value, encode_key, encode_value, partition_for
from rafka.core.transaction_shard import PARTITION_DELETED, TransactionShard, TxnMarker
from rafka.core.transaction_state import TxnState

pytestmark = pytest.mark.core
S = TxnState
PARTITIONS = 1           # one __transaction_state partition: every id is ours
TIMEOUT_MS = 60_000
TP0, TP1 = ("out", 0), ("out", 1)
GROUP = "billing"
OFFSETS_TP = ("__consumer_offsets", partition_for_group(GROUP, 50))


class FakeTxnPartition:
    """The acks=all append, records kept encoded. `fail_next(error)` fails the
    next append; `hold_next()` parks it until `release()`."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self._failures: list[Exception] = []
        self._hold: asyncio.Event | None = None
        self.appends_started = 0

    def fail_next(self, *errors: Exception) -> None:
        self._failures.extend(errors)

    def hold_next(self) -> asyncio.Event:
        self._hold = asyncio.Event()
        return self._hold

    async def append(self, records) -> None:
        self.appends_started += 1
        hold, self._hold = self._hold, None
        if hold is not None:
            await hold.wait()
        if self._failures:
            raise self._failures.pop(0)
        self.records += [(encode_key(key), encode_value(value)) for key, value in records]

    def states(self, transactional_id: str) -> list[str | None]:
        return [None if value is None else decode_value(value).state.value
                for key, value in self.records if decode_key(key).transactional_id == transactional_id]


class FakeMarkers:
    """Records every marker sent; answers None (written) unless `answers` holds a
    list of outcomes for the partition (used up one per send). `hold()` parks
    the sends until `release()`."""

    def __init__(self) -> None:
        self.sent: list[TxnMarker] = []
        self.answers: dict[tuple[str, int], list] = {}
        self.gate = asyncio.Event()
        self.gate.set()

    async def send(self, markers: list[TxnMarker]) -> dict:
        await self.gate.wait()
        self.sent += markers
        return {(m.topic, m.partition): (self.answers[(m.topic, m.partition)].pop(0)
                                         if self.answers.get((m.topic, m.partition)) else None)
                for m in markers}


async def no_wait(seconds: float) -> None:
    await asyncio.sleep(0)


def block_source(size: int = 10):
    starts = itertools.count(1000, size)

    async def allocate_block() -> ProducerIdBlock:
        return ProducerIdBlock(next(starts), size)
    return allocate_block


@dataclasses.dataclass
class Harness:
    clock: FakeClock
    log: FakeTxnPartition
    markers: FakeMarkers
    shard: TransactionShard
    producer_ids: ProducerIdAllocator

    def new_shard(self, *, coordinator_epoch: int) -> TransactionShard:
        return TransactionShard(partition=0, partition_count=PARTITIONS, coordinator_epoch=coordinator_epoch,
                                clock=self.clock, append=self.log.append, send_markers=self.markers.send,
                                producer_ids=self.producer_ids, offsets_partition_count=50,
                                transactional_id_expiration_ms=7 * 86_400_000, sleep=no_wait)

    def reload(self, *, coordinator_epoch: int = 1) -> TransactionShard:
        """A coordinator failover: a fresh shard loads every record written."""
        shard = self.new_shard(coordinator_epoch=coordinator_epoch)
        for key, value in self.log.records:
            shard.replay(decode_key(key), decode_value(value))
        shard.finish_loading()
        return shard

    async def begin(self, tid="txn-a", *partitions):
        pid, epoch = await self.shard.init_producer_id(tid, txn_timeout_ms=TIMEOUT_MS)
        if partitions:
            await self.shard.add_partitions(tid, producer_id=pid, producer_epoch=epoch, partitions=partitions)
        return pid, epoch


def settled(metadata):
    """What a reload can know: the last epoch is in no record (nor in Kafka's)."""
    return dataclasses.replace(metadata, last_producer_epoch=-1)


def assert_reload_equals(h: Harness, shard: TransactionShard) -> None:
    reloaded = h.reload(coordinator_epoch=shard.coordinator_epoch + 1)
    assert {tid: settled(m) for tid, m in reloaded.metadata.items()} == {
        tid: settled(m) for tid, m in shard.metadata.items()}


def make_harness() -> Harness:
    clock, log, markers = FakeClock(), FakeTxnPartition(), FakeMarkers()
    harness = Harness(clock, log, markers, None, ProducerIdAllocator(block_source()))
    harness.shard = harness.new_shard(coordinator_epoch=0)
    harness.shard.finish_loading()
    return harness


def scenario(test):
    """Runs `test(h, ...)` on a fresh event loop with a fresh harness (no async
    pytest plugin here); the other parameters stay visible to pytest."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        async def main():
            h = make_harness()
            try:
                await test(h, *args, **kwargs)
            finally:
                h.shard.close()
        asyncio.run(main())
    signature = inspect.signature(test)
    run.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])
    return run


# --- the happy paths ------------------------------------------------------------------

@scenario
async def test_commit__prepare_written_answered_then_markers_then_complete_commit(h):
    pid, epoch = await h.begin("txn-a", TP0, TP1)
    assert (pid, epoch) == (1000, 0)
    await h.shard.add_offsets("txn-a", producer_id=pid, producer_epoch=epoch, group_id=GROUP)
    assert await h.shard.end_transaction("txn-a", producer_id=pid, producer_epoch=epoch, commit=True) == (pid, 0)
    await h.shard.drain_markers()
    assert sorted(h.markers.sent, key=lambda m: (m.topic, m.partition)) == [
        TxnMarker(*OFFSETS_TP, pid, 0, 0, True), TxnMarker(*TP0, pid, 0, 0, True), TxnMarker(*TP1, pid, 0, 0, True)]
    assert h.log.states("txn-a") == ["Empty", "Ongoing", "Ongoing", "PrepareCommit", "CompleteCommit"]
    assert h.shard.metadata["txn-a"].state is S.COMPLETE_COMMIT
    assert h.shard.metadata["txn-a"].topic_partitions == frozenset()
    assert_reload_equals(h, h.shard)


@scenario
async def test_abort__markers_say_abort_and_the_next_transaction_starts(h):
    pid, epoch = await h.begin("txn-a", TP0)
    await h.shard.end_transaction("txn-a", producer_id=pid, producer_epoch=epoch, commit=False)
    await h.shard.drain_markers()
    assert h.markers.sent == [TxnMarker(*TP0, pid, 0, 0, False)]
    assert h.shard.metadata["txn-a"].state is S.COMPLETE_ABORT
    await h.shard.add_partitions("txn-a", producer_id=pid, producer_epoch=epoch, partitions=[TP1])
    assert h.shard.metadata["txn-a"].state is S.ONGOING
    assert_reload_equals(h, h.shard)


@scenario
async def test_end_txn__answered_before_markers__other_moves_wait_until_complete(h):
    pid, epoch = await h.begin("txn-a", TP0)
    h.markers.gate.clear()
    await h.shard.end_transaction("txn-a", producer_id=pid, producer_epoch=epoch, commit=True)
    assert h.shard.describe_transaction("txn-a").state == "PrepareCommit"
    with pytest.raises(ConcurrentTransactions):
        await h.shard.add_partitions("txn-a", producer_id=pid, producer_epoch=epoch, partitions=[TP1])
    with pytest.raises(ConcurrentTransactions):
        await h.shard.end_transaction("txn-a", producer_id=pid, producer_epoch=epoch, commit=True)
    with pytest.raises(ConcurrentTransactions):
        await h.shard.init_producer_id("txn-a", txn_timeout_ms=TIMEOUT_MS)
    h.markers.gate.set()
    await h.shard.drain_markers()
    assert h.shard.describe_transaction("txn-a").state == "CompleteCommit"
    # a retried commit after completion: success with the current id and epoch
    assert await h.shard.end_transaction("txn-a", producer_id=pid, producer_epoch=epoch, commit=True) == (pid, 0)
    with pytest.raises(InvalidTxnState):
        await h.shard.end_transaction("txn-a", producer_id=pid, producer_epoch=epoch, commit=False)


@scenario
async def test_add_partitions__known_partitions__nothing_written(h):
    pid, epoch = await h.begin("txn-a", TP0, TP1)
    written = len(h.log.records)
    await h.shard.add_partitions("txn-a", producer_id=pid, producer_epoch=epoch, partitions=[TP1])
    assert len(h.log.records) == written


@scenario
async def test_verify_partitions__in_the_transaction_or_transaction_abortable(h):
    pid, epoch = await h.begin("txn-a", TP0)
    answer = h.shard.verify_partitions("txn-a", producer_id=pid, producer_epoch=epoch, partitions=[TP0, TP1])
    assert answer[TP0] is None and isinstance(answer[TP1], TransactionAbortable)
    with pytest.raises(ProducerFenced):
        h.shard.verify_partitions("txn-a", producer_id=pid, producer_epoch=epoch + 1, partitions=[TP0])
    with pytest.raises(InvalidProducerIdMapping):
        h.shard.verify_partitions("unknown", producer_id=pid, producer_epoch=epoch, partitions=[TP0])


# --- fencing, timeouts, expiry ----------------------------------------------------------

@scenario
async def test_second_producer__fences_the_zombie_and_aborts_its_transaction(h):
    pid, zombie_epoch = await h.begin("txn-a", TP0)
    with pytest.raises(ConcurrentTransactions):        # its open transaction is aborted first
        await h.shard.init_producer_id("txn-a", txn_timeout_ms=TIMEOUT_MS)
    await h.shard.drain_markers()
    assert h.markers.sent == [TxnMarker(*TP0, pid, 1, 0, False)]    # abort at the fenced epoch
    assert h.log.states("txn-a") == ["Empty", "Ongoing", "PrepareAbort", "CompleteAbort"]
    assert await h.shard.init_producer_id("txn-a", txn_timeout_ms=TIMEOUT_MS) == (pid, 2)    # the retry
    with pytest.raises(ProducerFenced):
        await h.shard.end_transaction("txn-a", producer_id=pid, producer_epoch=zombie_epoch, commit=True)
    with pytest.raises(ProducerFenced):
        await h.shard.add_partitions("txn-a", producer_id=pid, producer_epoch=zombie_epoch, partitions=[TP1])
    assert_reload_equals(h, h.shard)


@scenario
async def test_timeout__expired_transaction_aborted_epoch_bumped_producer_fenced(h):
    pid, epoch = await h.begin("txn-a", TP0)
    await h.begin("txn-b", TP1)
    h.clock.advance(TIMEOUT_MS)
    assert await h.shard.abort_timed_out_transactions() == []      # not past it yet
    h.clock.advance(1)
    # txn-b started at the same time: both time out
    assert await h.shard.abort_timed_out_transactions() == ["txn-a", "txn-b"]
    await h.shard.drain_markers()
    assert TxnMarker(*TP0, pid, epoch + 1, 0, False) in h.markers.sent
    assert h.shard.metadata["txn-a"].state is S.COMPLETE_ABORT
    with pytest.raises(ProducerFenced):
        await h.shard.end_transaction("txn-a", producer_id=pid, producer_epoch=epoch, commit=True)
    assert_reload_equals(h, h.shard)


@scenario
async def test_timeout__an_id_that_committed_and_began_anew_while_the_sweep_wrote_another__left_alone(h):
    """The sweep writes one abort at a time, each waiting for its acks: while
    txn-a's is held, txn-b (timed out too when scanned) commits and begins a
    new transaction. Its turn must leave it alone, not abort a transaction 0 ms
    old and fence a healthy producer."""
    await h.begin("txn-a", TP0)
    pid, epoch = await h.begin("txn-b", TP1)
    h.clock.advance(TIMEOUT_MS + 1)
    held, appends = h.log.hold_next(), h.log.appends_started   # txn-a's fence write is held
    sweep = asyncio.get_running_loop().create_task(h.shard.abort_timed_out_transactions())
    while h.log.appends_started == appends:
        await asyncio.sleep(0)
    await h.shard.end_transaction("txn-b", producer_id=pid, producer_epoch=epoch, commit=True)
    await h.shard.drain_markers()
    await h.shard.add_partitions("txn-b", producer_id=pid, producer_epoch=epoch, partitions=[TP0])
    held.set()
    assert await sweep == ["txn-a"]
    assert (h.shard.metadata["txn-b"].state, h.shard.metadata["txn-b"].producer_epoch) == (S.ONGOING, epoch)
    await h.shard.end_transaction("txn-b", producer_id=pid, producer_epoch=epoch, commit=True)   # not fenced


@scenario
async def test_timeout__fence_write_failed__next_sweep_aborts_without_a_second_bump(h):
    pid, epoch = await h.begin("txn-a", TP0)
    h.clock.advance(TIMEOUT_MS + 1)
    h.log.fail_next(NotEnoughReplicas("isr too small"))
    assert await h.shard.abort_timed_out_transactions() == []
    assert h.shard.metadata["txn-a"].state is S.ONGOING and h.shard.metadata["txn-a"].pending_state is None
    assert await h.shard.abort_timed_out_transactions() == ["txn-a"]
    await h.shard.drain_markers()
    assert h.markers.sent == [TxnMarker(*TP0, pid, epoch + 1, 0, False)]


@scenario
async def test_tick__sweeps_on_their_intervals(h):
    pid, epoch = await h.shard.init_producer_id("txn-a", txn_timeout_ms=1_000)
    await h.shard.add_partitions("txn-a", producer_id=pid, producer_epoch=epoch, partitions=[TP0])
    await h.shard.tick()                                  # due at once: nothing timed out yet
    h.clock.advance(5_000)
    await h.shard.tick()                                  # timed out, but the sweep is due only 10 s on
    assert h.shard.metadata["txn-a"].state is S.ONGOING
    h.clock.advance(5_000)
    await h.shard.tick()
    await h.shard.drain_markers()
    assert h.shard.metadata["txn-a"].state is S.COMPLETE_ABORT


@scenario
async def test_expiration__idle_ids_get_tombstones_and_are_gone_after_reload(h):
    await h.begin("idle")
    pid, epoch = await h.begin("busy", TP0)
    h.clock.advance(7 * 86_400_000)
    assert await h.shard.expire_transactional_ids() == ["idle"]     # an open transaction stays
    assert h.log.states("idle")[-1] is None
    with pytest.raises(TransactionalIdNotFound):
        h.shard.describe_transaction("idle")
    assert set(h.reload().metadata) == {"busy"}
    assert await h.shard.init_producer_id("idle", txn_timeout_ms=TIMEOUT_MS) == (1002, 0)   # a new id


@scenario
async def test_expiration__tombstone_write_failed__id_kept_and_movable(h):
    await h.begin("idle")
    h.clock.advance(7 * 86_400_000)
    h.log.fail_next(NotEnoughReplicas("isr too small"))
    assert await h.shard.expire_transactional_ids() == []
    assert h.shard.metadata["idle"].pending_state is None
    assert await h.shard.init_producer_id("idle", txn_timeout_ms=TIMEOUT_MS) == (1000, 1)


# --- markers ---------------------------------------------------------------------------

@scenario
async def test_markers__retriable_errors_resent_to_those_partitions_only(h):
    pid, epoch = await h.begin("txn-a", TP0, TP1)
    h.markers.answers[TP1] = [NotLeaderOrFollower("moved"), NotEnoughReplicas("isr")]
    await h.shard.end_transaction("txn-a", producer_id=pid, producer_epoch=epoch, commit=True)
    await h.shard.drain_markers()
    assert [(m.topic, m.partition) for m in h.markers.sent] == [TP0, TP1, TP1, TP1]
    assert h.shard.metadata["txn-a"].state is S.COMPLETE_COMMIT


@scenario
async def test_markers__deleted_partition_dropped__newer_epoch_cancels_completion(h):
    pid, epoch = await h.begin("txn-a", TP0, TP1)
    h.markers.answers[TP1] = [PARTITION_DELETED]
    await h.shard.end_transaction("txn-a", producer_id=pid, producer_epoch=epoch, commit=True)
    await h.shard.drain_markers()
    assert h.shard.metadata["txn-a"].state is S.COMPLETE_COMMIT

    pid, epoch = await h.begin("txn-b", TP0)
    h.markers.answers[TP0] = [InvalidProducerEpoch("a newer epoch wrote there")]
    await h.shard.end_transaction("txn-b", producer_id=pid, producer_epoch=epoch, commit=True)
    await h.shard.drain_markers()
    # Kafka's completion handler gives up: the id stays in PrepareCommit until a coordinator reloads
    assert h.log.states("txn-b")[-1] == "PrepareCommit"


@scenario
async def test_markers__complete_record_not_available__retried(h):
    pid, epoch = await h.begin("txn-a", TP0)
    h.markers.gate.clear()
    await h.shard.end_transaction("txn-a", producer_id=pid, producer_epoch=epoch, commit=False)
    h.log.fail_next(NotEnoughReplicas("isr"), NotEnoughReplicas("isr"))
    h.markers.gate.set()
    await h.shard.drain_markers()
    assert h.log.states("txn-a")[-1] == "CompleteAbort"
    assert h.shard.metadata["txn-a"].state is S.COMPLETE_ABORT


@scenario
async def test_failover__coordinator_killed_after_prepare_commit__new_one_sends_markers_and_completes(h):
    pid, epoch = await h.begin("txn-a", TP0, TP1)
    h.markers.gate.clear()
    await h.shard.end_transaction("txn-a", producer_id=pid, producer_epoch=epoch, commit=True)
    h.shard.close()                                        # killed before any marker went out
    h.markers.gate.set()
    await asyncio.sleep(0)
    assert h.markers.sent == [] and h.log.states("txn-a")[-1] == "PrepareCommit"
    successor = h.reload(coordinator_epoch=1)
    await successor.drain_markers()
    assert sorted(h.markers.sent, key=lambda m: m.partition) == [TxnMarker(*TP0, pid, 0, 1, True),
                                                                 TxnMarker(*TP1, pid, 0, 1, True)]
    assert h.log.states("txn-a")[-1] == "CompleteCommit"
    assert successor.metadata["txn-a"].state is S.COMPLETE_COMMIT
    with pytest.raises(NotCoordinator):
        await h.shard.add_partitions("txn-a", producer_id=pid, producer_epoch=epoch, partitions=[TP0])


# --- the write path's failures ------------------------------------------------------------

@pytest.mark.parametrize("append_error, answered", [
    (NotEnoughReplicas("isr"), CoordinatorNotAvailable), (NotLeaderOrFollower("moved"), NotCoordinator),
    (RecordTooLarge("big"), UnknownServerError)])
@scenario
async def test_append_failed__kafkas_coordinator_error__move_abandoned(h, append_error, answered):
    pid, epoch = await h.begin("txn-a")
    h.log.fail_next(append_error)
    with pytest.raises(answered):
        await h.shard.add_partitions("txn-a", producer_id=pid, producer_epoch=epoch, partitions=[TP0])
    assert h.shard.metadata["txn-a"].state is S.EMPTY and h.shard.metadata["txn-a"].pending_state is None
    await h.shard.add_partitions("txn-a", producer_id=pid, producer_epoch=epoch, partitions=[TP0])
    assert h.shard.metadata["txn-a"].state is S.ONGOING
    assert_reload_equals(h, h.shard)


@scenario
async def test_append_in_flight__client_gone__the_move_still_completes(h):
    pid, epoch = await h.begin("txn-a")
    released = h.log.hold_next()
    request = asyncio.ensure_future(
        h.shard.add_partitions("txn-a", producer_id=pid, producer_epoch=epoch, partitions=[TP0]))
    await asyncio.sleep(0)
    request.cancel()
    released.set()
    with pytest.raises(asyncio.CancelledError):
        await request
    await asyncio.sleep(0)
    assert h.shard.metadata["txn-a"].state is S.ONGOING and h.log.states("txn-a")[-1] == "Ongoing"


# --- requests' checks ----------------------------------------------------------------------

@scenario
async def test_requests__loading_wrong_partition_empty_id_bad_timeout(h):
    loading = h.new_shard(coordinator_epoch=1)
    with pytest.raises(CoordinatorLoadInProgress):
        await loading.init_producer_id("txn-a", txn_timeout_ms=TIMEOUT_MS)
    with pytest.raises(CoordinatorLoadInProgress):
        loading.list_transactions()
    other = TransactionShard(partition=1, partition_count=50, coordinator_epoch=0, clock=h.clock,
                             append=h.log.append, send_markers=h.markers.send, producer_ids=h.producer_ids,
                             offsets_partition_count=50)
    other.finish_loading()
    tid = next(t for t in (f"t{i}" for i in range(100)) if partition_for(t, 50) != 1)
    with pytest.raises(NotCoordinator):
        await other.init_producer_id(tid, txn_timeout_ms=TIMEOUT_MS)
    with pytest.raises(InvalidRequest):
        await h.shard.init_producer_id("", txn_timeout_ms=TIMEOUT_MS)
    with pytest.raises(InvalidTransactionTimeout):
        await h.shard.init_producer_id("txn-a", txn_timeout_ms=15 * 60_000 + 1)
    with pytest.raises(InvalidProducerIdMapping):
        await h.shard.end_transaction("never-seen", producer_id=1, producer_epoch=0, commit=True)


@scenario
async def test_init_producer_id__kip360_expected_epoch(h):
    pid, epoch = await h.begin("txn-a")
    assert await h.shard.init_producer_id("txn-a", txn_timeout_ms=TIMEOUT_MS, expected=(pid, epoch)) == (pid, 1)
    # a retry of that bump (the answer was lost): the same epoch again
    assert await h.shard.init_producer_id("txn-a", txn_timeout_ms=TIMEOUT_MS, expected=(pid, epoch)) == (pid, 1)
    with pytest.raises(ProducerFenced):
        await h.shard.init_producer_id("txn-a", txn_timeout_ms=TIMEOUT_MS, expected=(pid + 7, 1))


@scenario
async def test_describe_and_list__filters_by_state_producer_id_and_duration(h):
    pid_a, epoch = await h.begin("txn-a", TP0)
    h.clock.advance(5_000)
    pid_b, _ = await h.begin("txn-b")
    described = h.shard.describe_transaction("txn-a")
    assert (described.state, described.producer_id, described.producer_epoch, described.txn_timeout_ms,
            described.topic_partitions) == ("Ongoing", pid_a, 0, TIMEOUT_MS, frozenset({TP0}))
    with pytest.raises(TransactionalIdNotFound):
        h.shard.describe_transaction("nobody")
    listed, unknown = h.shard.list_transactions()
    assert [(t.transactional_id, t.producer_id, t.state) for t in listed] == [
        ("txn-a", pid_a, "Ongoing"), ("txn-b", pid_b, "Empty")]
    listed, unknown = h.shard.list_transactions(states=["Ongoing", "Bogus"])
    assert [t.transactional_id for t in listed] == ["txn-a"] and unknown == ["Bogus"]
    assert [t.transactional_id for t in h.shard.list_transactions(producer_ids=[pid_b])[0]] == ["txn-b"]
    # txn-a started 5 s ago: older than 4 s, not than 5 s; txn-b has no start (-1): the oldest
    assert [t.transactional_id for t in h.shard.list_transactions(duration_ms=4_000)[0]] == ["txn-a", "txn-b"]
    assert [t.transactional_id for t in h.shard.list_transactions(duration_ms=5_000)[0]] == ["txn-b"]


# --- producer id blocks ---------------------------------------------------------------------

def test_producer_ids__blocks_prefetched_at_90_percent_never_reused():
    asyncio.run(_blocks_prefetched())


async def _blocks_prefetched():
    asked = []

    async def allocate_block():
        asked.append(len(asked))
        return ProducerIdBlock(100 * len(asked), 10)
    allocator = ProducerIdAllocator(allocate_block)
    with pytest.raises(CoordinatorLoadInProgress):        # none at hand: Kafka's retriable answer
        allocator.claim()
    await allocator.ready()
    ids = [allocator.claim() for _ in range(9)]
    assert ids == list(range(100, 109)) and len(asked) == 1
    await asyncio.sleep(0)                                  # the 9th id started the prefetch
    assert len(asked) == 2
    assert [allocator.claim() for _ in range(3)] == [109, 200, 201]


def test_producer_ids__a_block_below_the_ids_handed_out__refused():
    asyncio.run(_non_monotonic_block())


async def _non_monotonic_block():
    blocks = iter([ProducerIdBlock(100, 2), ProducerIdBlock(50, 2)])

    async def allocate_block():
        return next(blocks)
    allocator = ProducerIdAllocator(allocate_block, prefetch_threshold=1.0)
    await allocator.ready()
    assert [allocator.claim(), allocator.claim()] == [100, 101]
    with pytest.raises(NonMonotonicProducerIdBlock):
        await allocator.ready()
