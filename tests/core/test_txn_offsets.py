"""The group coordinator's side of transactions (KIP-98, KIP-447), without Ray:
the offsets store's pending transactional offsets (a table of replayed logs),
the shard's TxnOffsetCommit and markers over a fake __consumer_offsets partition
that keeps each write's kind (a reload from it must give the same state), and
the wire: TxnOffsetCommit's codes by version, OffsetFetch's require_stable, and
WriteTxnMarkers for __consumer_offsets reaching the group coordinator."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64

from rafka.core.clock import FakeClock
from rafka.core.coordinator_shard import CoordinatorShard
from rafka.core.errors import (ConcurrentTransactions, CoordinatorLoadInProgress, IllegalGeneration,
                               InvalidProducerEpoch, InvalidTxnState, NetworkException, ProducerFenced,
                               RequestTimedOut, TransactionAbortable, UnstableOffsetCommit)
from rafka.core.group_manager import GroupManager
from rafka.core.offset_store import OffsetStore
from rafka.core.offsets_schema import OffsetKey, OffsetValue
from rafka.core.records import NO_PRODUCER_ID
from rafka.core.write_queue import TransactionalBatch, TxnMarkerWrite
from rafka.protocol.dispatch import Dispatcher
from rafka.protocol.entities import load_request_schema, module_of
from rafka.protocol.node_table import node_table
from tests.core.helpers import orders_image
from tests.core.test_protocol_dispatch import read_response, request_frame

pytestmark = pytest.mark.core
G = "eos"
T0, T1 = ("orders", 0), ("orders", 1)


# --- the offsets store: pending until the marker -------------------------------------

def commit(tp, offset, producer_id=NO_PRODUCER_ID):
    return ("commit", tp, offset, producer_id)


def tombstone(tp):
    return ("tombstone", tp)


def marker(producer_id, commit_):
    return ("marker", producer_id, commit_)


def replayed(log):
    store = OffsetStore()
    for entry in log:
        if entry[0] == "commit":
            _, (topic, partition), offset, producer_id = entry
            store.replay(OffsetKey(G, topic, partition), OffsetValue(offset, -1, "", 1_000), producer_id=producer_id)
        elif entry[0] == "tombstone":
            store.replay(OffsetKey(G, *entry[1]), None)
        else:
            store.replay_marker(entry[1], commit=entry[2])
    return store


# (scenario, log, committed offsets, pending partitions)
PENDING_TABLE = [
    ("open transaction: pending, not visible", [commit(T0, 5, 7)], {}, {T0}),
    ("commit marker: visible", [commit(T0, 5, 7), marker(7, True)], {T0: 5}, set()),
    ("abort marker: dropped", [commit(T0, 5, 7), marker(7, False)], {}, set()),
    ("abort keeps the earlier plain commit", [commit(T0, 3), commit(T0, 5, 7), marker(7, False)], {T0: 3}, set()),
    ("commit over an earlier plain commit", [commit(T0, 3), commit(T0, 5, 7), marker(7, True)], {T0: 5}, set()),
    ("a plain commit after the transaction's wins", [commit(T0, 5, 7), commit(T0, 9), marker(7, True)],
     {T0: 9}, set()),
    ("a marker of another producer: nothing", [commit(T0, 5, 7), marker(8, True)], {}, {T0}),
    ("two producers, each its own marker", [commit(T0, 5, 7), commit(T1, 6, 8), marker(8, True)],
     {T1: 6}, {T0}),
    ("the last of a producer's commits of a partition", [commit(T0, 5, 7), commit(T0, 6, 7), marker(7, True)],
     {T0: 6}, set()),
    ("a tombstone drops the pending offset", [commit(T0, 5, 7), tombstone(T0), marker(7, True)], {}, set()),
    ("a marker without pending offsets: nothing", [commit(T0, 4), marker(7, True)], {T0: 4}, set()),
]


@pytest.mark.parametrize("log, committed, pending", [row[1:] for row in PENDING_TABLE],
                         ids=[row[0] for row in PENDING_TABLE])
def test_offset_store__transactional_offsets__by_replayed_log(log, committed, pending):
    store = replayed(log)
    assert {tp: v.offset for tp, v in store.fetch(G).items()} == committed
    assert store.pending_partitions(G) == pending
    assert store.has_open_transactions(G) == bool(pending)


def test_offset_store__expiry__a_partition_with_a_pending_offset_is_kept():
    store = replayed([commit(T0, 5), commit(T1, 6), commit(T0, 8, 7)])
    result = store.handle_expire(10 * 24 * 3600 * 1000, {})
    assert [(key.topic, key.partition) for key, _ in result.records] == [T1]


# --- the shard over a partition that keeps each write's kind ----------------------------

class TxnOffsetsPartition:
    """The shard's appends as the leader would log them: (kind, records)."""

    def __init__(self) -> None:
        self.log: list = []
        self.fail_next: Exception | None = None

    async def append(self, records, kind=None) -> None:
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        self.log.append((kind, list(records)))


async def partitions_per_topic(topics):
    return {t: 2 for t in topics if t == "orders"}


def shard_on(partition, clock, verify_transaction=None):
    return CoordinatorShard(offsets=OffsetStore(), groups=GroupManager(group_initial_rebalance_delay_ms=0),
                            clock=clock, append=partition.append, partitions_per_topic=partitions_per_topic,
                            join_poll_interval_ms=5, verify_transaction=verify_transaction)


class TransactionCoordinator:
    """The shard's KIP-890 question: `answer` for every transaction (None: it holds
    the partition), each question kept; while `hold` is set a question waits."""

    def __init__(self, answer=None) -> None:
        self.answer = answer
        self.asked: list[tuple[str, int, int]] = []
        self.hold: asyncio.Event | None = None

    async def verify(self, transactional_id, producer_id, producer_epoch):
        self.asked.append((transactional_id, producer_id, producer_epoch))
        if self.hold is not None:
            await self.hold.wait()
        return self.answer


def reloaded(partition, clock):
    """A restarted coordinator: the load's replay of what the partition holds."""
    shard = shard_on(TxnOffsetsPartition(), clock)
    for kind, records in partition.log:
        if isinstance(kind, TxnMarkerWrite):
            shard.replay_marker(kind.producer_id, commit=kind.commit)
        for key, value in records:
            shard.replay(key, value, producer_id=kind.producer_id if isinstance(kind, TransactionalBatch)
                         else NO_PRODUCER_ID)
    return shard


def state_of(shard):
    return (shard.fetch_offsets(G), shard.fetch_offsets(G, [T0, T1], require_stable=True).keys(),
            shard.offsets.pending_partitions(G))


def test_shard__txn_commit__pending_unstable_then_committed_by_its_marker__reload_agrees():
    async def scenario():
        clock, partition = FakeClock(), TxnOffsetsPartition()
        shard = shard_on(partition, clock)
        answer = await shard.commit_transactional_offsets(G, {T0: (5, -1, ""), ("nope", 0): (1, -1, "")},
                                                          transactional_id="t-7", producer_id=7, producer_epoch=2)
        assert answer[T0] is None and answer[("nope", 0)].kafka_name == "UNKNOWN_TOPIC_OR_PARTITION"
        written = OffsetValue(5, -1, "", clock.now_ms())
        assert partition.log == [(TransactionalBatch(7, 2), [(OffsetKey(G, *T0), written)])]
        assert shard.fetch_offsets(G, [T0]) == {T0: None}
        unstable = shard.fetch_offsets(G, [T0, T1], require_stable=True)
        assert isinstance(unstable[T0], UnstableOffsetCommit) and unstable[T1] is None
        assert state_of(reloaded(partition, clock))[2] == {T0}

        await shard.complete_transaction(producer_id=7, producer_epoch=2, coordinator_epoch=3, commit=True)
        assert partition.log[-1] == (TxnMarkerWrite(7, 2, 3, True), [])
        assert shard.fetch_offsets(G, [T0], require_stable=True) == {T0: (5, -1, "")}
        assert reloaded(partition, clock).fetch_offsets(G) == shard.fetch_offsets(G) == {T0: (5, -1, "")}
    asyncio.run(scenario())


def test_shard__txn_commit__aborted__dropped_the_earlier_commit_stays__reload_agrees():
    async def scenario():
        clock, partition = FakeClock(), TxnOffsetsPartition()
        shard = shard_on(partition, clock)
        await shard.commit_offsets(G, {T0: (3, -1, "")})
        await shard.commit_transactional_offsets(G, {T0: (9, -1, "")}, transactional_id="t-7", producer_id=7,
                                                 producer_epoch=0)
        await shard.complete_transaction(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False)
        assert shard.fetch_offsets(G, require_stable=True) == {T0: (3, -1, "")}
        assert state_of(reloaded(partition, clock)) == state_of(shard)
    asyncio.run(scenario())


def test_shard__a_failed_marker_write__nothing_replayed_the_offsets_stay_pending():
    async def scenario():
        clock, partition = FakeClock(), TxnOffsetsPartition()
        shard = shard_on(partition, clock)
        await shard.commit_transactional_offsets(G, {T0: (5, -1, "")}, transactional_id="t-7", producer_id=7,
                                                 producer_epoch=0)
        partition.fail_next = InvalidProducerEpoch("a newer epoch's marker is in the log")
        with pytest.raises(InvalidProducerEpoch):
            await shard.complete_transaction(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=True)
        assert shard.offsets.pending_partitions(G) == {T0}
    asyncio.run(scenario())


def test_shard__txn_commit_membership__as_kafkas_transactional_commit():
    async def scenario():
        shard = shard_on(TxnOffsetsPartition(), FakeClock())
        with pytest.raises(IllegalGeneration):   # a group unknown here, a generation named
            await shard.commit_transactional_offsets(G, {T0: (5, -1, "")}, transactional_id="t-7", producer_id=7,
                                                     producer_epoch=0, member_id="m-1", generation=3)
        joined = await shard.join_group(G, "", client_id="c", client_host="h", protocol_type="consumer",
                                        protocols=[("range", b"")], session_timeout_ms=10_000,
                                        rebalance_timeout_ms=10_000)
        member_id = joined["member_id"]
        if joined["generation"] < 1:
            joined = await shard.join_group(G, member_id, client_id="c", client_host="h", protocol_type="consumer",
                                            protocols=[("range", b"")], session_timeout_ms=10_000,
                                            rebalance_timeout_ms=10_000)
        # the group completes its rebalance (no sync yet): a member's transactional commit is taken
        answer = await shard.commit_transactional_offsets(G, {T0: (5, -1, "")}, transactional_id="t-7", producer_id=7,
                                                          producer_epoch=0, member_id=member_id,
                                                          generation=joined["generation"])
        assert answer == {T0: None}
        # naming no member (TxnOffsetCommit below v3) while the group has members: taken too
        assert await shard.commit_transactional_offsets(G, {T1: (1, -1, "")}, transactional_id="t-8", producer_id=8,
                                                        producer_epoch=0) == {T1: None}
        with pytest.raises(IllegalGeneration):
            await shard.commit_transactional_offsets(G, {T0: (6, -1, "")}, transactional_id="t-7", producer_id=7,
                                                     producer_epoch=0, member_id=member_id,
                                                     generation=joined["generation"] + 1)
    asyncio.run(scenario())


# --- KIP-890: the shard verifies a transaction before it decides its commit ---------------

def verifying_shard():
    """(partition, transaction coordinator, shard) of a shard that verifies."""
    partition, coordinator = TxnOffsetsPartition(), TransactionCoordinator()
    return partition, coordinator, shard_on(partition, FakeClock(), coordinator.verify)


async def held_at_its_question(shard, coordinator):
    """Producer 7's commit of T0, started and waiting for its question's answer
    (until `coordinator.hold` is set): its task."""
    coordinator.hold = asyncio.Event()
    commit = asyncio.create_task(shard.commit_transactional_offsets(
        G, {T0: (5, -1, "")}, transactional_id="t-7", producer_id=7, producer_epoch=0))
    for _ in range(100):
        if coordinator.asked:
            return commit
        await asyncio.sleep(0)
    raise AssertionError("the commit never asked the transaction coordinator")


def test_shard__verification__refused__nothing_written_nothing_pending__then_verified_once_per_transaction():
    """A TxnOffsetCommit whose transaction does not hold the partition (its
    AddOffsetsToTxn never came, or it ended) is refused with the coordinator's
    answer, and writes nothing; once it does, the first commit of the transaction
    asks and the next ones do not (the transaction is open here), until its marker."""
    async def scenario():
        partition, coordinator, shard = verifying_shard()
        coordinator.answer = TransactionAbortable("__consumer_offsets-0 is not in the transaction")
        with pytest.raises(TransactionAbortable):
            await shard.commit_transactional_offsets(G, {T0: (5, -1, "")}, transactional_id="t-7", producer_id=7,
                                                     producer_epoch=0)
        assert partition.log == [] and shard.offsets.pending_partitions(G) == set()
        assert shard.fetch_offsets(G, [T0], require_stable=True) == {T0: None}

        coordinator.answer = None
        for offset in (5, 6):
            await shard.commit_transactional_offsets(G, {T0: (offset, -1, "")}, transactional_id="t-7",
                                                     producer_id=7, producer_epoch=0)
        assert coordinator.asked == [("t-7", 7, 0)] * 2   # the refused one, then the first of the two
        await shard.complete_transaction(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=True)
        await shard.commit_transactional_offsets(G, {T0: (9, -1, "")}, transactional_id="t-7", producer_id=7,
                                                 producer_epoch=1)
        assert coordinator.asked[-1] == ("t-7", 7, 1) and len(coordinator.asked) == 3   # a new transaction asks
    asyncio.run(scenario())


def test_shard__verification__its_transaction_ends_meanwhile__refused_behind_no_marker():
    """The ABA: a commit's verification is answered for a transaction, whose marker
    is queued before the commit is: the commit must not land after that marker (it
    would open a transaction no coordinator knows of, its offsets pending for
    good). Refused INVALID_TXN_STATE, nothing pending. The same for a producer
    whose transaction is open here: a marker queued while its commit waits for the
    group's lock ends it."""
    async def scenario():
        partition, coordinator, shard = verifying_shard()
        late = await held_at_its_question(shard, coordinator)
        await shard.complete_transaction(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False)
        coordinator.hold.set()
        with pytest.raises(InvalidTxnState):
            await asyncio.wait_for(late, 5)
        assert [kind for kind, _ in partition.log] == [TxnMarkerWrite(7, 0, 0, False)]
        assert shard.offsets.pending_partitions(G) == set()

        coordinator.hold = None
        await shard.commit_transactional_offsets(G, {T1: (3, -1, "")}, transactional_id="t-8", producer_id=8,
                                                 producer_epoch=0)
        asked = len(coordinator.asked)
        async with shard.locks.hold(G):   # the group busy: the open transaction's next commit waits for it
            waiting = asyncio.create_task(shard.commit_transactional_offsets(
                G, {T1: (4, -1, "")}, transactional_id="t-8", producer_id=8, producer_epoch=0))
            await asyncio.sleep(0)
            await shard.complete_transaction(producer_id=8, producer_epoch=0, coordinator_epoch=0, commit=True)
        with pytest.raises(InvalidTxnState):
            await waiting
        assert len(coordinator.asked) == asked   # open here: no question was asked
        assert shard.fetch_offsets(G, [T1], require_stable=True) == {T1: (3, -1, "")}
    asyncio.run(scenario())


def test_shard__verification__a_marker_unanswered__the_open_transaction_asks_again():
    """Offsets of the producer pending but its marker still in the queue: the
    transaction may be ending, so its next commit asks the coordinator (which
    answers for the transaction it holds now)."""
    async def scenario():
        partition, coordinator, shard = verifying_shard()
        await shard.commit_transactional_offsets(G, {T0: (5, -1, "")}, transactional_id="t-7", producer_id=7,
                                                 producer_epoch=0)
        partition_append, gate = partition.append, asyncio.Event()

        async def slow_append(records, kind=None):
            await gate.wait()
            await partition_append(records, kind)
        partition.append = slow_append
        shard._writes._append = slow_append
        marker = asyncio.create_task(shard.complete_transaction(producer_id=7, producer_epoch=0,
                                                                coordinator_epoch=0, commit=True))
        await asyncio.sleep(0)
        coordinator.answer = ConcurrentTransactions("the transaction is in PrepareCommit")
        with pytest.raises(ConcurrentTransactions):   # (queued behind the marker, it would wait for it)
            await asyncio.wait_for(shard.commit_transactional_offsets(
                G, {T0: (6, -1, "")}, transactional_id="t-7", producer_id=7, producer_epoch=0), 5)
        assert len(coordinator.asked) == 2
        gate.set()
        await marker
        assert shard.fetch_offsets(G, [T0], require_stable=True) == {T0: (5, -1, "")}
    asyncio.run(scenario())


def test_shard__verification_waiting__holds_no_other_groups_write():
    """The question is asked outside the group's lock and the write queue (Kafka's
    runtime verifies before it enqueues): a plain commit of another group goes
    through while a TxnOffsetCommit waits for its coordinator."""
    async def scenario():
        _, coordinator, shard = verifying_shard()
        waiting = await held_at_its_question(shard, coordinator)
        assert await asyncio.wait_for(shard.commit_offsets("other", {T1: (2, -1, "")}), 5) == {T1: None}
        assert await asyncio.wait_for(shard.commit_offsets(G, {T1: (2, -1, "")}), 5) == {T1: None}
        coordinator.hold.set()
        assert await waiting == {T0: None}
    asyncio.run(scenario())


# --- the wire ---------------------------------------------------------------------------

TXN_COMMIT, OFFSET_FETCH, WRITE_MARKERS = 28, 9, 27


class Coordinator:
    """A group host whose one coordinator is a real shard, appends acked at once
    unless `fail_with`; `loading` answers COORDINATOR_LOAD_IN_PROGRESS."""

    def __init__(self) -> None:
        self.partition = TxnOffsetsPartition()
        self.transactions = TransactionCoordinator()
        self.shard = shard_on(self.partition, FakeClock(), self.transactions.verify)
        self.loading = False
        self._image = orders_image()

    def image(self):
        return self._image

    def coordinator_for(self, group_id):
        return self

    def offsets_partition_coordinator(self, partition):
        return self if partition == 0 else None

    def _check(self):
        if self.loading:
            raise CoordinatorLoadInProgress("loading")

    async def commit_transactional_offsets(self, group, offsets, **txn):
        self._check()
        return await self.shard.commit_transactional_offsets(group, offsets, **txn)

    async def fetch_offsets(self, group, partitions=None, *, require_stable=False):
        self._check()
        return self.shard.fetch_offsets(group, partitions, require_stable=require_stable)

    async def complete_transaction(self, **marker):
        self._check()
        await self.shard.complete_transaction(**marker)


def run(scenario):
    async def main():
        host = Coordinator()

        async def allocate_producer_id():
            return 77
        dispatcher = Dispatcher(node_table(image=host.image, allocate_producer_id=allocate_producer_id, groups=host))

        async def ask(api_key, version, **fields):
            request_type = load_request_schema(api_key, version)
            frame = await dispatcher.dispatch(request_frame(api_key, version, request_type(**fields)))
            return read_response(frame, api_key, version)[1]
        await scenario(ask, host)
    asyncio.run(main())


def txn_commit_fields(version, offsets, **extra):
    module = module_of(load_request_schema(TXN_COMMIT, version))
    partition_fields = {"committed_leader_epoch": i32(-1)} if version >= 2 else {}
    topics = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(module.TxnOffsetCommitRequestPartition(
            partition_index=i32(partition), committed_offset=i64(offset), committed_metadata="", **partition_fields))
    return dict(transactional_id="t", group_id=G, producer_id=i64(7), producer_epoch=i16(0), topics=tuple(
        module.TxnOffsetCommitRequestTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()), **extra)


def codes(answer):
    return {(t.name, int(p.partition_index)): p.error_code for t in answer.topics for p in t.partitions}


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_txn_offset_commit__every_version__pending_then_committed_by_the_marker(version):
    async def scenario(ask, host):
        answer = await ask(TXN_COMMIT, version, **txn_commit_fields(version, {T0: 5, ("orders", 9): 1}))
        assert codes(answer) == {T0: ErrorCode.none, ("orders", 9): ErrorCode.unknown_topic_or_partition}
        assert host.shard.offsets.pending_partitions(G) == {T0}
        module = module_of(load_request_schema(WRITE_MARKERS, 1))
        answer = await ask(WRITE_MARKERS, 1, markers=(module.WritableTxnMarker(
            producer_id=i64(7), producer_epoch=i16(0), transaction_result=True, coordinator_epoch=i32(1),
            topics=(module.WritableTxnMarkerTopic(name="__consumer_offsets", partition_indexes=(i32(0), i32(1))),)),))
        assert {(t.name, int(p.partition_index)): p.error_code for t in answer.markers[0].topics
                for p in t.partitions} == {("__consumer_offsets", 0): ErrorCode.none,   # through the coordinator
                                           ("__consumer_offsets", 1): ErrorCode.unknown_topic_or_partition}
        assert host.shard.fetch_offsets(G) == {T0: (5, -1, "")}
    run(scenario)


@pytest.mark.parametrize("version, error, expected", [
    (1, CoordinatorLoadInProgress, ErrorCode.coordinator_not_available),   # clients before KAFKA-7296
    (2, CoordinatorLoadInProgress, ErrorCode.coordinator_load_in_progress),
    (3, RequestTimedOut, ErrorCode.coordinator_not_available),             # a failed append, as Kafka's runtime
    (3, InvalidProducerEpoch, ErrorCode.invalid_producer_epoch),           # the leader fenced a zombie
])
def test_txn_offset_commit__errors__every_partition_kafkas_code_by_version(version, error, expected):
    async def scenario(ask, host):
        if error is CoordinatorLoadInProgress:
            host.loading = True
        else:
            host.partition.fail_next = error("refused")
        answer = await ask(TXN_COMMIT, version, **txn_commit_fields(version, {T0: 5, T1: 6}))
        assert codes(answer) == {T0: expected, T1: expected}
        assert host.shard.offsets.pending_partitions(G) == set()
    run(scenario)


def test_write_txn_markers__offsets_partition_coordinator_loading__not_leader_or_follower_retried():
    async def scenario(ask, host):
        host.loading = True
        module = module_of(load_request_schema(WRITE_MARKERS, 1))
        answer = await ask(WRITE_MARKERS, 1, markers=(module.WritableTxnMarker(
            producer_id=i64(7), producer_epoch=i16(0), transaction_result=False, coordinator_epoch=i32(1),
            topics=(module.WritableTxnMarkerTopic(name="__consumer_offsets", partition_indexes=(i32(0),)),)),))
        assert answer.markers[0].topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
    run(scenario)


VERIFICATION_ANSWERS = [   # (the coordinator's answer, TxnOffsetCommit's code below v4, from v4)
    (TransactionAbortable("not in the transaction"), ErrorCode.invalid_txn_state, ErrorCode.transaction_abortable),
    (ProducerFenced("epoch 0 is not the current 1"), ErrorCode.invalid_producer_epoch,
     ErrorCode.invalid_producer_epoch),
    (ConcurrentTransactions("PrepareCommit"), ErrorCode.concurrent_transactions, ErrorCode.concurrent_transactions),
    (NetworkException("not reachable"), ErrorCode.coordinator_load_in_progress,
     ErrorCode.coordinator_load_in_progress),
]


@pytest.mark.parametrize("answer, before_v4, from_v4", VERIFICATION_ANSWERS,
                         ids=[type(row[0]).__name__ for row in VERIFICATION_ANSWERS])
@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_txn_offset_commit__not_verified__kafkas_code_by_version__nothing_pending(version, answer, before_v4,
                                                                                  from_v4):
    """Kafka's CoordinatorPartitionWriter and AddPartitionsToTxnManager: a partition
    the transaction does not hold is TRANSACTION_ABORTABLE only for clients that
    abort on it (v4+), a fenced producer INVALID_PRODUCER_EPOCH, a coordinator not
    reached COORDINATOR_LOAD_IN_PROGRESS (COORDINATOR_NOT_AVAILABLE below v2)."""
    async def scenario(ask, host):
        host.transactions.answer = answer
        answer_ = await ask(TXN_COMMIT, version, **txn_commit_fields(version, {T0: 5}))
        expected = from_v4 if version >= 4 else before_v4
        if version < 2 and expected == ErrorCode.coordinator_load_in_progress:
            expected = ErrorCode.coordinator_not_available
        assert codes(answer_) == {T0: expected}
        assert host.partition.log == [] and host.shard.offsets.pending_partitions(G) == set()
        assert host.transactions.asked == [("t", 7, 0)]
    run(scenario)


@pytest.mark.parametrize("version", [7, 8])
def test_offset_fetch__require_stable__unstable_offset_commit_per_partition_while_pending(version):
    async def scenario(ask, host):
        await host.shard.commit_offsets(G, {T1: (2, -1, "")})
        await host.shard.commit_transactional_offsets(G, {T0: (5, -1, ""), T1: (6, -1, "")}, transactional_id="t-7",
                                                      producer_id=7, producer_epoch=0)
        await host.shard.commit_transactional_offsets(G, {T1: (6, -1, "")}, transactional_id="t-8", producer_id=8,
                                                      producer_epoch=0)
        await host.shard.complete_transaction(producer_id=8, producer_epoch=0, coordinator_epoch=0, commit=True)
        module = module_of(load_request_schema(OFFSET_FETCH, version))

        async def fetch(require_stable):
            if version >= 8:
                answer = await ask(OFFSET_FETCH, version, require_stable=require_stable, groups=(
                    module.OffsetFetchRequestGroup(group_id=G, topics=(module.OffsetFetchRequestTopics(
                        name="orders", partition_indexes=(i32(0), i32(1))),)),))
                assert answer.groups[0].error_code == ErrorCode.none
                topics = answer.groups[0].topics
            else:
                answer = await ask(OFFSET_FETCH, version, group_id=G, require_stable=require_stable, topics=(
                    module.OffsetFetchRequestTopic(name="orders", partition_indexes=(i32(0), i32(1))),))
                assert answer.error_code == ErrorCode.none
                topics = answer.topics
            return {int(p.partition_index): (int(p.committed_offset), p.error_code)
                    for t in topics for p in t.partitions}
        # producer 7's offsets of both partitions are pending; 8's commit of 1 is visible
        assert await fetch(True) == {0: (-1, ErrorCode.unstable_offset_commit),
                                     1: (-1, ErrorCode.unstable_offset_commit)}
        assert await fetch(False) == {0: (-1, ErrorCode.none), 1: (6, ErrorCode.none)}
    run(scenario)


def test_api_versions__txn_offset_commit_0_to_4():
    async def scenario(ask, host):
        answer = await ask(18, 3, client_software_name="t", client_software_version="1")
        ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
        assert ranges[TXN_COMMIT] == (0, 4)
    run(scenario)
