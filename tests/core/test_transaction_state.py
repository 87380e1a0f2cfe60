"""The transaction coordinator's state machine (core.transaction_state) against
Apache Kafka's rules: the transition table pair by pair, then scenarios on a
fake clock: commit, abort, zombie fencing, epoch exhaustion, timeouts, expiry."""

from __future__ import annotations

import dataclasses
import itertools
import pickle

import pytest

from rafka.core.clock import FakeClock
from rafka.core.errors import (ERRORS_BY_CODE, ConcurrentTransactions, InvalidProducerEpoch, InvalidProducerIdMapping,
                               InvalidTransactionTimeout, InvalidTxnState, ProducerFenced, TransactionAbortable,
                               TransactionalIdNotFound, TransactionCoordinatorFenced)
from rafka.core.transaction_state import (EPOCH_EXHAUSTED_AT, EPOCH_MAX, STATES_BY_ID, VALID_PREVIOUS_STATES,
                                          IllegalTxnTransition, TransactionMetadata, TxnState, add_partitions,
                                          check_transition, complete_end_transaction, end_transaction,
                                          expired_transactional_ids, fenced_error_for, init_producer_id,
                                          new_transaction_metadata, prepare_timeout_abort, timed_out_transactions,
                                          validate_transaction_timeout_ms)

pytestmark = pytest.mark.core

S = TxnState
TIMEOUT_MS = 60_000
TP0, TP1, OFFSETS0 = ("out", 0), ("out", 1), ("__consumer_offsets", 7)

# Kafka's validPreviousStates (TransactionMetadata.scala), written out again here
# so that a change to the module's table shows up as a failure.
KAFKA_VALID_PREVIOUS = {
    "Empty": {"Empty", "CompleteCommit", "CompleteAbort"},
    "Ongoing": {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareCommit": {"Ongoing"},
    "PrepareAbort": {"Ongoing", "PrepareEpochFence"},
    "CompleteCommit": {"PrepareCommit"},
    "CompleteAbort": {"PrepareAbort"},
    "Dead": {"Empty", "CompleteAbort", "CompleteCommit"},
    "PrepareEpochFence": {"Ongoing"},
}


class Harness:
    """A coordinator's view of one partition of __transaction_state, in memory:
    each prepared move is 'written' at once, as after a successful append."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self._producer_ids = itertools.count(1000)

    def new_producer_id(self) -> int:
        return next(self._producer_ids)

    def write(self, prepared):
        return prepared.metadata.complete_transition_to(prepared.transit)

    def init(self, metadata, *, expected=None, txn_timeout_ms=TIMEOUT_MS):
        return self.write(init_producer_id(metadata, txn_timeout_ms=txn_timeout_ms, expected=expected,
                                           now_ms=self.clock.now_ms(), new_producer_id=self.new_producer_id))

    def new_producer(self, transactional_id="txn-a"):
        created = new_transaction_metadata(transactional_id, producer_id=self.new_producer_id(),
                                           txn_timeout_ms=TIMEOUT_MS, now_ms=self.clock.now_ms())
        return self.init(created)

    def add(self, metadata, *partitions, epoch=None):
        prepared = add_partitions(metadata, producer_id=metadata.producer_id,
                                  producer_epoch=metadata.producer_epoch if epoch is None else epoch,
                                  partitions=partitions, now_ms=self.clock.now_ms())
        return metadata if prepared is None else self.write(prepared)

    def end(self, metadata, *, commit, producer_id=None, epoch=None, from_client=True, version=0):
        return end_transaction(metadata, producer_id=metadata.producer_id if producer_id is None else producer_id,
                               producer_epoch=metadata.producer_epoch if epoch is None else epoch, commit=commit,
                               from_client=from_client, transaction_version=version, now_ms=self.clock.now_ms(),
                               new_producer_id=self.new_producer_id)

    def markers_written(self, metadata, *, commit, epoch=None):
        return self.write(complete_end_transaction(
            metadata, producer_id=metadata.producer_id,
            producer_epoch=metadata.producer_epoch if epoch is None else epoch, commit=commit,
            now_ms=self.clock.now_ms()))


@pytest.fixture
def h():
    return Harness()


def metadata_in(state, *, epoch=5, pending=None, **fields):
    """Metadata sitting in `state`, as loaded from the log."""
    defaults = dict(transactional_id="t", producer_id=42, txn_timeout_ms=TIMEOUT_MS,
                    txn_last_update_timestamp_ms=1_000, producer_epoch=epoch, state=state, pending_state=pending)
    if state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT):
        defaults.update(topic_partitions=frozenset({TP0}), txn_start_timestamp_ms=900)
    defaults.update(fields)
    return TransactionMetadata(**defaults)


# -- the table --------------------------------------------------------------


def test_states__names_and_log_ids_are_kafkas():
    assert [(s.id, s.value) for s in sorted(S, key=lambda s: s.id)] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert all(STATES_BY_ID[s.id] is s for s in S)


@pytest.mark.parametrize("from_state,to_state", list(itertools.product(S, S)),
                         ids=lambda s: s.value)
def test_transition_table__every_pair_is_valid_exactly_when_kafka_allows_it(from_state, to_state):
    valid = from_state.value in KAFKA_VALID_PREVIOUS[to_state.value]
    assert (from_state in VALID_PREVIOUS_STATES[to_state]) == valid
    if valid:
        check_transition(from_state, to_state)
    else:
        with pytest.raises(IllegalTxnTransition, match=f"from {from_state.value} to {to_state.value}"):
            check_transition(from_state, to_state)


MOVES = {   # each prepare_* method and the state it enters
    S.ONGOING: lambda m: m.prepare_add_partitions({TP1}, now_ms=2_000),
    S.EMPTY: lambda m: m.prepare_increment_producer_epoch(txn_timeout_ms=TIMEOUT_MS, expected_epoch=None,
                                                          now_ms=2_000),
    S.PREPARE_EPOCH_FENCE: lambda m: m.prepare_fence_producer_epoch(),
    S.PREPARE_COMMIT: lambda m: m.prepare_abort_or_commit(S.PREPARE_COMMIT, transaction_version=0,
                                                          next_producer_id=-1, now_ms=2_000),
    S.DEAD: lambda m: m.prepare_dead(),
}


@pytest.mark.parametrize("from_state,to_state", list(itertools.product(S, MOVES)), ids=lambda s: s.value)
def test_prepare_methods__pass_the_table_from_every_state(from_state, to_state):
    metadata = metadata_in(from_state)
    if from_state.value in KAFKA_VALID_PREVIOUS[to_state.value]:
        prepared = MOVES[to_state](metadata)
        assert prepared.transit.state is to_state and prepared.metadata.pending_state is to_state
        assert metadata.pending_state is None      # immutable: the original is untouched
    else:
        with pytest.raises(IllegalTxnTransition):
            MOVES[to_state](metadata)


def test_prepare_complete__enters_the_complete_state_of_its_prepare_state_only():
    assert metadata_in(S.PREPARE_COMMIT).prepare_complete(now_ms=2_000).transit.state is S.COMPLETE_COMMIT
    assert metadata_in(S.PREPARE_ABORT).prepare_complete(now_ms=2_000).transit.state is S.COMPLETE_ABORT
    for state in (S.EMPTY, S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        with pytest.raises(IllegalTxnTransition, match="to CompleteAbort"):
            metadata_in(state).prepare_complete(now_ms=2_000)


def test_prepare__while_a_move_is_pending__refused():
    pending = metadata_in(S.ONGOING).prepare_add_partitions({TP1}, now_ms=2_000).metadata
    with pytest.raises(IllegalTxnTransition, match="Ongoing is still pending"):
        pending.prepare_add_partitions({TP0}, now_ms=2_001)


def test_complete_transition__refuses_a_record_it_did_not_prepare(h):
    metadata = h.new_producer()
    ongoing = metadata.prepare_add_partitions({TP0}, now_ms=1)
    with pytest.raises(IllegalTxnTransition, match="no move is pending"):
        metadata.complete_transition_to(ongoing.transit)
    dead = metadata.prepare_dead()
    with pytest.raises(IllegalTxnTransition, match="pending move is to Dead"):
        dead.metadata.complete_transition_to(ongoing.transit)
    with pytest.raises(IllegalTxnTransition, match="removed, not moved to Dead"):
        dead.metadata.complete_transition_to(dead.transit)


def test_complete_transition__refuses_an_epoch_jump_of_two(h):
    metadata = h.new_producer()
    prepared = metadata.prepare_increment_producer_epoch(txn_timeout_ms=TIMEOUT_MS, expected_epoch=None, now_ms=5)
    forged = dataclasses.replace(prepared.transit, producer_epoch=metadata.producer_epoch + 2)
    with pytest.raises(IllegalTxnTransition, match="not a valid producer epoch bump"):
        prepared.metadata.complete_transition_to(forged)


def test_append_failed__pending_state_is_cleared_and_the_state_kept(h):
    metadata = h.add(h.new_producer(), TP0)
    prepared = end_transaction(metadata, producer_id=metadata.producer_id, producer_epoch=metadata.producer_epoch,
                               commit=True, from_client=True, transaction_version=0, now_ms=5,
                               new_producer_id=h.new_producer_id)
    with pytest.raises(ConcurrentTransactions):
        h.add(prepared.metadata, TP1)
    restored = prepared.metadata.abandon_pending()
    assert restored == metadata


# -- scenarios: commit and abort -----------------------------------------------


def test_begin_add_commit__partitions_kept_until_the_markers_then_cleared(h):
    metadata = h.new_producer()
    assert (metadata.state, metadata.producer_epoch, metadata.last_producer_epoch) == (S.EMPTY, 0, -1)
    h.clock.advance(100)
    started_ms = h.clock.now_ms()
    metadata = h.add(metadata, TP0)
    assert (metadata.state, metadata.topic_partitions, metadata.txn_start_timestamp_ms) == (
        S.ONGOING, {TP0}, started_ms)
    h.clock.advance(100)
    metadata = h.add(metadata, TP1, OFFSETS0)
    assert metadata.topic_partitions == {TP0, TP1, OFFSETS0}
    assert metadata.txn_start_timestamp_ms == started_ms            # the timeout runs from the first partition
    assert add_partitions(metadata, producer_id=metadata.producer_id, producer_epoch=0, partitions={TP1},
                          now_ms=h.clock.now_ms()) is None         # known partitions: nothing to write

    metadata = h.write(h.end(metadata, commit=True))
    assert (metadata.state, metadata.topic_partitions) == (S.PREPARE_COMMIT, {TP0, TP1, OFFSETS0})
    with pytest.raises(ConcurrentTransactions):
        h.add(metadata, ("out", 2))
    with pytest.raises(ConcurrentTransactions):
        h.end(metadata, commit=True)                                # a retry while markers are written
    with pytest.raises(ConcurrentTransactions):
        h.init(metadata, expected=(metadata.producer_id, 0))
    with pytest.raises(InvalidTxnState):
        h.end(metadata, commit=False)

    metadata = h.markers_written(metadata, commit=True)
    assert (metadata.state, metadata.topic_partitions, metadata.producer_epoch) == (S.COMPLETE_COMMIT, set(), 0)
    assert h.end(metadata, commit=True) is None                     # a retried commit: already done
    with pytest.raises(InvalidTxnState):
        h.end(metadata, commit=False)
    metadata = h.add(metadata, TP1)                                  # the next transaction
    assert (metadata.state, metadata.topic_partitions) == (S.ONGOING, {TP1})


def test_init_producer_id__after_a_transaction__start_time_is_the_records_minus_one(h):
    # The Empty record says -1 (no transaction); the cache must say what a reload
    # of that record says (Kafka's in-memory value kept the last transaction's).
    metadata = h.add(h.new_producer(), TP0)
    assert metadata.txn_start_timestamp_ms >= 0
    metadata = h.markers_written(h.write(h.end(metadata, commit=True)), commit=True)
    prepared = init_producer_id(metadata, txn_timeout_ms=TIMEOUT_MS, expected=None, now_ms=h.clock.now_ms(),
                                new_producer_id=h.new_producer_id)
    assert prepared.transit.txn_start_timestamp_ms == -1
    assert h.write(prepared).txn_start_timestamp_ms == -1


def test_abort__then_commit_is_invalid_txn_state(h):
    metadata = h.add(h.new_producer(), TP0)
    metadata = h.write(h.end(metadata, commit=False))
    assert metadata.state is S.PREPARE_ABORT
    with pytest.raises(InvalidTxnState, match="PrepareAbort: COMMIT"):
        h.end(metadata, commit=True)
    with pytest.raises(InvalidTxnState):
        complete_end_transaction(metadata, producer_id=metadata.producer_id, producer_epoch=0, commit=True, now_ms=1)
    metadata = h.markers_written(metadata, commit=False)
    assert (metadata.state, metadata.topic_partitions) == (S.COMPLETE_ABORT, set())
    assert h.end(metadata, commit=False) is None
    with pytest.raises(InvalidTxnState, match="CompleteAbort: COMMIT"):
        h.end(metadata, commit=True)


def test_end_txn__with_no_transaction_open__invalid_txn_state(h):
    with pytest.raises(InvalidTxnState, match="Empty"):
        h.end(h.new_producer(), commit=True)


def test_requests__another_producer_id__invalid_producer_id_mapping(h):
    metadata = h.add(h.new_producer(), TP0)
    with pytest.raises(InvalidProducerIdMapping):
        add_partitions(metadata, producer_id=7, producer_epoch=0, partitions={TP1}, now_ms=1)
    with pytest.raises(InvalidProducerIdMapping):
        h.end(metadata, commit=True, producer_id=7)


def test_commit__transaction_version_2__every_end_txn_bumps_the_epoch(h):
    metadata = h.add(h.new_producer(), TP0)
    metadata = h.write(h.end(metadata, commit=True, version=2))
    assert (metadata.producer_epoch, metadata.last_producer_epoch, metadata.transaction_version) == (1, 0, 2)
    with pytest.raises(ConcurrentTransactions):
        h.end(metadata, commit=True, epoch=0, version=2)              # the client's retry, at its old epoch
    metadata = h.markers_written(metadata, commit=True, epoch=0)
    assert (metadata.state, metadata.producer_epoch) == (S.COMPLETE_COMMIT, 1)
    assert h.end(metadata, commit=True, epoch=0, version=2) is None   # retry after completion: success
    with pytest.raises(ProducerFenced):
        h.end(metadata, commit=True, epoch=1, version=2)              # same epoch = a new EndTxn, nothing open


# -- scenarios: fencing --------------------------------------------------------


def test_init_producer_id__second_producer_fences_a_zombie_in_a_transaction(h):
    zombie = h.add(h.new_producer(), TP0, TP1)
    zombie_epoch = zombie.producer_epoch

    fence = init_producer_id(zombie, txn_timeout_ms=TIMEOUT_MS, expected=None, now_ms=h.clock.now_ms(),
                             new_producer_id=h.new_producer_id)
    assert fence.metadata.pending_state is S.PREPARE_EPOCH_FENCE
    assert (fence.transit.producer_epoch, fence.transit.last_producer_epoch) == (zombie_epoch + 1, -1)
    # the coordinator aborts the open transaction itself, at the fenced epoch
    abort = h.end(fence.metadata, commit=False, epoch=fence.transit.producer_epoch, from_client=False)
    assert (abort.transit.state, abort.transit.producer_epoch) == (S.PREPARE_ABORT, zombie_epoch + 1)
    metadata = h.write(abort)
    assert (metadata.state, metadata.producer_epoch, metadata.topic_partitions) == (
        S.PREPARE_ABORT, zombie_epoch + 1, {TP0, TP1})

    with pytest.raises(ProducerFenced):                               # the zombie's commit
        h.end(metadata, commit=True, epoch=zombie_epoch)
    with pytest.raises(ConcurrentTransactions):                       # the new producer retries too early
        h.init(metadata)
    metadata = h.markers_written(metadata, commit=False)
    assert metadata.state is S.COMPLETE_ABORT
    metadata = h.init(metadata)                                        # its retry: a fresh epoch
    assert (metadata.state, metadata.producer_epoch) == (S.EMPTY, zombie_epoch + 2)
    with pytest.raises(ProducerFenced):
        h.add(metadata, TP0, epoch=zombie_epoch)
    with pytest.raises(ProducerFenced):
        h.end(metadata, commit=True, epoch=zombie_epoch)


def test_epoch_fence__write_failed__the_next_fence_does_not_bump_again(h):
    metadata = h.add(h.new_producer(), TP0)
    fence = metadata.prepare_fence_producer_epoch()
    abort = h.end(fence.metadata, commit=False, epoch=fence.transit.producer_epoch, from_client=False)
    failed = abort.metadata.abandon_pending(epoch_fence_failed=True)
    assert (failed.state, failed.producer_epoch, failed.has_failed_epoch_fence) == (S.ONGOING, 1, True)
    again = failed.prepare_fence_producer_epoch()
    assert again.transit.producer_epoch == 1                          # never told to a client: reused
    metadata = h.markers_written(h.write(h.end(again.metadata, commit=False, epoch=1, from_client=False)),
                                 commit=False)
    assert (metadata.state, metadata.has_failed_epoch_fence) == (S.COMPLETE_ABORT, False)


def test_init_producer_id__kip360_recovery_retry_and_stale_epoch(h):
    metadata = h.new_producer()
    pid = metadata.producer_id
    bumped = h.init(metadata, expected=(pid, 0))                       # recovering producer: bump, remember
    assert (bumped.producer_epoch, bumped.last_producer_epoch) == (1, 0)
    retried = h.init(bumped, expected=(pid, 0))                       # lost response: same epoch again
    assert (retried.producer_epoch, retried.last_producer_epoch) == (1, 0)
    fresh = h.init(bumped)                                            # a new producer forgets the last epoch
    assert (fresh.producer_epoch, fresh.last_producer_epoch) == (2, -1)
    with pytest.raises(ProducerFenced):
        h.init(fresh, expected=(pid, 0))
    with pytest.raises(ProducerFenced):
        h.init(fresh, expected=(pid + 1, 2))                          # not its producer id


# -- scenarios: epoch exhaustion -------------------------------------------------


def test_init_producer_id__epoch_exhausted__a_new_producer_id_at_epoch_0(h):
    old = metadata_in(S.COMPLETE_COMMIT, epoch=EPOCH_EXHAUSTED_AT, txn_start_timestamp_ms=500)
    assert old.is_producer_epoch_exhausted and not metadata_in(S.EMPTY, epoch=EPOCH_EXHAUSTED_AT - 1) \
        .is_producer_epoch_exhausted
    with pytest.raises(IllegalTxnTransition, match="exhausted"):
        old.prepare_increment_producer_epoch(txn_timeout_ms=TIMEOUT_MS, expected_epoch=None, now_ms=1)

    rotated = h.init(old, expected=(42, EPOCH_EXHAUSTED_AT))
    assert (rotated.producer_id, rotated.producer_epoch) == (1000, 0)
    assert (rotated.previous_producer_id, rotated.last_producer_epoch, rotated.state) == (42, EPOCH_EXHAUSTED_AT,
                                                                                          S.EMPTY)
    # the producer never got the answer and retries with its old id: same id and epoch back
    retried = h.init(rotated, expected=(42, EPOCH_EXHAUSTED_AT))
    assert (retried.producer_id, retried.producer_epoch) == (1000, 0)

    new_producer = h.init(old)                                        # no expected epoch: last epoch forgotten
    assert (new_producer.producer_id, new_producer.producer_epoch, new_producer.last_producer_epoch) == (1001, 0, -1)


def test_end_txn__version_2__exhausted_epoch_moves_to_the_next_producer_id_after_markers(h):
    metadata = metadata_in(S.ONGOING, epoch=EPOCH_EXHAUSTED_AT)
    prepared = h.end(metadata, commit=True, version=2)
    assert (prepared.transit.producer_epoch, prepared.transit.next_producer_id) == (EPOCH_MAX, 1000)
    metadata = h.markers_written(h.write(prepared), commit=True, epoch=EPOCH_EXHAUSTED_AT)
    assert (metadata.producer_id, metadata.producer_epoch, metadata.previous_producer_id) == (1000, 0, 42)
    assert metadata.next_producer_id == -1
    assert h.end(metadata, commit=True, producer_id=42, epoch=EPOCH_EXHAUSTED_AT, version=2) is None


def test_fence__epoch_at_short_max__refused():
    with pytest.raises(IllegalTxnTransition, match="overflow"):
        metadata_in(S.ONGOING, epoch=EPOCH_MAX).prepare_fence_producer_epoch()


# -- scenarios: transaction timeout ------------------------------------------------


def test_timeout__only_ongoing_transactions_older_than_their_timeout(h):
    old = h.add(h.new_producer("old"), TP0)
    empty = h.new_producer("empty")
    h.clock.advance(1_000)
    young = h.add(h.new_producer("young"), TP0)
    writing = h.add(h.new_producer("writing"), TP0).prepare_add_partitions({TP1}, now_ms=0).metadata
    committing = h.write(h.end(h.add(h.new_producer("committing"), TP0), commit=True))
    everyone = [old, empty, young, writing, committing]

    h.clock.advance(TIMEOUT_MS - 1_000)                               # old is exactly at its timeout
    assert timed_out_transactions(everyone, clock=h.clock) == []
    h.clock.advance(1)
    assert timed_out_transactions(everyone, clock=h.clock) == [("old", old.producer_id, 0)]
    h.clock.advance(1_000)
    assert [t.transactional_id for t in timed_out_transactions(everyone, clock=h.clock)] == ["old", "young"]


def test_timeout__abort_fences_the_producer_then_completes(h):
    metadata = h.add(h.new_producer(), TP0)
    h.clock.advance(TIMEOUT_MS + 1)
    (expired,) = timed_out_transactions([metadata], clock=h.clock)
    assert prepare_timeout_abort(metadata, expired._replace(producer_id=expired.producer_id + 1),
                                 clock=h.clock) is None   # id moved on
    fence = prepare_timeout_abort(metadata, expired, clock=h.clock)
    metadata = h.write(h.end(fence.metadata, commit=False, epoch=fence.transit.producer_epoch, from_client=False))
    assert (metadata.state, metadata.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert prepare_timeout_abort(fence.metadata, expired, clock=h.clock) is None  # a move pending
    assert timed_out_transactions([metadata], clock=h.clock) == []
    with pytest.raises(ProducerFenced):                                # the producer comes back to commit
        h.end(metadata, commit=True, epoch=0)
    metadata = h.markers_written(metadata, commit=False)
    assert metadata.state is S.COMPLETE_ABORT


def test_transaction_timeout__bounded_by_transaction_max_timeout_ms():
    validate_transaction_timeout_ms(900_000)
    for bad in (0, -1, 900_001):
        with pytest.raises(InvalidTransactionTimeout):
            validate_transaction_timeout_ms(bad)
    with pytest.raises(InvalidTransactionTimeout):
        validate_transaction_timeout_ms(TIMEOUT_MS, max_timeout_ms=TIMEOUT_MS - 1)


# -- scenarios: transactional id expiration ----------------------------------------


def test_expiration__idle_empty_and_complete_ids_only(h):
    expiration_ms = 3_600_000
    empty = h.new_producer("empty")
    committed = h.markers_written(h.write(h.end(h.add(h.new_producer("committed"), TP0), commit=True)), commit=True)
    aborted = h.markers_written(h.write(h.end(h.add(h.new_producer("aborted"), TP0), commit=False)), commit=False)
    ongoing = h.add(h.new_producer("ongoing"), TP0)
    preparing = h.write(h.end(h.add(h.new_producer("preparing"), TP0), commit=True))
    pending = h.new_producer("pending").prepare_add_partitions({TP0}, now_ms=h.clock.now_ms()).metadata
    everyone = [empty, committed, aborted, ongoing, preparing, pending]

    h.clock.advance(expiration_ms - 1)
    assert expired_transactional_ids(everyone, clock=h.clock, transactional_id_expiration_ms=expiration_ms) == []
    h.clock.advance(1)
    assert expired_transactional_ids(everyone, clock=h.clock, transactional_id_expiration_ms=expiration_ms) == [
        "empty", "committed", "aborted"]

    dead = committed.prepare_dead()
    assert (dead.transit.state, dead.transit.topic_partitions) == (S.DEAD, frozenset())
    assert expired_transactional_ids([dead.metadata], clock=h.clock,
                                     transactional_id_expiration_ms=expiration_ms) == []


def test_expiration__a_new_transaction_resets_the_idle_time(h):
    metadata = h.new_producer()
    h.clock.advance(10_000)
    metadata = h.markers_written(h.write(h.end(h.add(metadata, TP0), commit=True)), commit=True)
    h.clock.advance(5_000)
    assert expired_transactional_ids([metadata], clock=h.clock, transactional_id_expiration_ms=10_000) == []
    h.clock.advance(5_000)
    assert expired_transactional_ids([metadata], clock=h.clock, transactional_id_expiration_ms=10_000) == ["txn-a"]


# -- errors ------------------------------------------------------------------------


def test_errors__transaction_codes_names_and_retriable():
    table = [(ConcurrentTransactions, 51, "CONCURRENT_TRANSACTIONS", True),
             (InvalidTxnState, 48, "INVALID_TXN_STATE", False),
             (InvalidProducerIdMapping, 49, "INVALID_PRODUCER_ID_MAPPING", False),
             (InvalidTransactionTimeout, 50, "INVALID_TRANSACTION_TIMEOUT", False),
             (TransactionCoordinatorFenced, 52, "TRANSACTION_COORDINATOR_FENCED", False),
             (ProducerFenced, 90, "PRODUCER_FENCED", False),
             (TransactionalIdNotFound, 105, "TRANSACTIONAL_ID_NOT_FOUND", False),
             (TransactionAbortable, 120, "TRANSACTION_ABORTABLE", False)]
    for error_type, code, name, retriable in table:
        assert (error_type.code, error_type.kafka_name, error_type.retriable) == (code, name, retriable)
        assert ERRORS_BY_CODE[code] is error_type
        assert type(pickle.loads(pickle.dumps(error_type("x")))) is error_type


def test_producer_fenced__older_request_versions_see_invalid_producer_epoch():
    assert fenced_error_for("InitProducerId", 3) is InvalidProducerEpoch
    assert fenced_error_for("InitProducerId", 4) is ProducerFenced
    for api in ("EndTxn", "AddPartitionsToTxn", "AddOffsetsToTxn"):
        assert fenced_error_for(api, 1) is InvalidProducerEpoch
        assert fenced_error_for(api, 2) is ProducerFenced
