"""The transactional producer's state machine (core.producer_transaction), by
table: each state's allowed moves, what each error means for each request, and
the scenarios a producer goes through."""

import pytest

from rafka.core.errors import (ConcurrentTransactions, CoordinatorLoadInProgress, GroupAuthorizationFailed,
                               IllegalGeneration, IllegalStateError, InvalidProducerEpoch, InvalidTxnState,
                               NotCoordinator, ProducerFenced, RecordTooLarge, RequestTimedOut,
                               TopicAuthorizationFailed, TransactionalIdAuthorizationFailed, UnknownProducerId)
from rafka.core.producer_transaction import (TRANSITIONS, Outcome, ProducerTransaction, TransactionState, TxnApi,
                                             TxnEvent, outcome_after_retries, outcome_of)

pytestmark = pytest.mark.core
S, E, O, API = TransactionState, TxnEvent, Outcome, TxnApi


@pytest.mark.parametrize("state, event, expected", [
    (S.UNINITIALIZED, E.INIT, S.INITIALIZING),
    (S.INITIALIZING, E.INITIALIZED, S.READY),
    (S.INITIALIZING, E.INIT, S.INITIALIZING),                 # a timed-out init_transactions resumed
    (S.READY, E.BEGIN, S.IN_TRANSACTION),
    (S.IN_TRANSACTION, E.COMMIT, S.COMMITTING_TRANSACTION),
    (S.COMMITTING_TRANSACTION, E.COMMIT, S.COMMITTING_TRANSACTION),   # resumed
    (S.COMMITTING_TRANSACTION, E.ENDED, S.READY),
    (S.IN_TRANSACTION, E.ABORT, S.ABORTING_TRANSACTION),
    (S.ABORTABLE_ERROR, E.ABORT, S.ABORTING_TRANSACTION),
    (S.ABORTING_TRANSACTION, E.ENDED, S.READY),
    (S.ABORTING_TRANSACTION, E.BUMP_EPOCH, S.INITIALIZING),
    (S.IN_TRANSACTION, E.ABORTABLE_ERROR, S.ABORTABLE_ERROR),
    (S.COMMITTING_TRANSACTION, E.ABORTABLE_ERROR, S.ABORTABLE_ERROR),
    *[(state, E.FATAL_ERROR, S.FATAL_ERROR) for state in S],
])
def test_transitions__allowed(state, event, expected):
    txn = ProducerTransaction("t")
    txn.state = state
    txn.move(event)
    assert txn.state is expected


def test_transitions__every_pair_not_in_the_table__illegal_state_naming_both():
    for state in S:
        for event in E:
            if event in TRANSITIONS[state]:
                continue
            txn = ProducerTransaction("t")
            txn.state = state
            with pytest.raises(IllegalStateError) as raised:
                txn.move(event)
            assert state.name in str(raised.value) and event.value in str(raised.value)
            assert txn.state is state


@pytest.mark.parametrize("api, error, outcome", [
    (API.INIT_PRODUCER_ID, ConcurrentTransactions(), O.RETRY),
    (API.INIT_PRODUCER_ID, CoordinatorLoadInProgress(), O.RETRY),
    (API.INIT_PRODUCER_ID, NotCoordinator(), O.RETRY),
    (API.INIT_PRODUCER_ID, TimeoutError(), O.RETRY),
    (API.INIT_PRODUCER_ID, ProducerFenced(), O.FATAL),
    (API.INIT_PRODUCER_ID, TransactionalIdAuthorizationFailed(), O.FATAL),
    (API.ADD_PARTITIONS, ConcurrentTransactions(), O.RETRY),
    (API.ADD_PARTITIONS, TopicAuthorizationFailed(), O.ABORTABLE),
    (API.ADD_PARTITIONS, InvalidProducerEpoch(), O.FATAL),
    (API.ADD_PARTITIONS, InvalidTxnState(), O.FATAL),
    (API.ADD_OFFSETS, GroupAuthorizationFailed(), O.ABORTABLE),
    (API.ADD_OFFSETS, UnknownProducerId(), O.ABORTABLE_BUMP),
    (API.TXN_OFFSET_COMMIT, IllegalGeneration(), O.ABORTABLE),
    (API.TXN_OFFSET_COMMIT, ProducerFenced(), O.FATAL),
    (API.END_TXN, ConcurrentTransactions(), O.RETRY),
    (API.END_TXN, InvalidTxnState(), O.FATAL),
    (API.END_TXN, InvalidProducerEpoch(), O.FATAL),
    (API.PRODUCE, RecordTooLarge(), O.ABORTABLE_BUMP),
    (API.PRODUCE, RequestTimedOut(), O.ABORTABLE_BUMP),          # the producer's own retries gave up
    (API.PRODUCE, TopicAuthorizationFailed(), O.ABORTABLE),
    (API.PRODUCE, ProducerFenced(), O.FATAL),
])
def test_outcome_of__per_request(api, error, outcome):
    assert outcome_of(api, error) is outcome


@pytest.mark.parametrize("api, outcome", [
    (API.INIT_PRODUCER_ID, O.RETRY), (API.END_TXN, O.RETRY),           # the call made again resumes
    (API.ADD_PARTITIONS, O.ABORTABLE), (API.ADD_OFFSETS, O.ABORTABLE), (API.TXN_OFFSET_COMMIT, O.ABORTABLE),
])
def test_outcome_after_retries__out_of_time(api, outcome):
    assert outcome_after_retries(api, RequestTimedOut("out of time")) is outcome


def ready():
    txn = ProducerTransaction("t")
    txn.move(E.INIT)
    txn.move(E.INITIALIZED)
    return txn


def test_scenario__send_before_init__illegal_state():
    with pytest.raises(IllegalStateError, match="before completing a call to init_transactions"):
        ProducerTransaction("t").check_send()


def test_scenario__send_outside_a_transaction__illegal_state():
    with pytest.raises(IllegalStateError, match="Cannot call send in state READY"):
        ready().check_send()


def test_scenario__commit_then_next_transaction__partitions_start_empty():
    txn = ready()
    txn.move(E.BEGIN)
    txn.partitions.add(("t", 0))
    assert txn.started
    txn.begin_commit()
    assert txn.end() is False
    assert txn.state is S.READY and not txn.started


def test_scenario__batch_failed__abortable__commit_raises_its_type__abort_then_epoch_bump():
    """...and the next transaction starts with no partition or group: its first
    batch to a partition of the aborted one asks AddPartitionsToTxn again. Kept
    from the aborted one, its batches went out unadded, the coordinator sent that
    partition no marker at commit, and its records stayed in an open transaction,
    later counted aborted (`rafka verify`: a torn transaction; a consume-transform-
    produce chain whose offsets were never committed read its inputs twice)."""
    txn = ready()
    txn.move(E.BEGIN)
    txn.partitions.add(("t", 0))
    txn.groups.add("g")
    txn.fail(API.PRODUCE, RecordTooLarge("too big"))
    assert txn.state is S.ABORTABLE_ERROR and txn.epoch_bump_required
    with pytest.raises(RecordTooLarge, match="error state"):
        txn.begin_commit()
    with pytest.raises(RecordTooLarge):
        txn.check_send()
    txn.begin_abort()
    assert txn.end() is True and txn.state is S.INITIALIZING
    txn.move(E.INITIALIZED)
    assert txn.state is S.READY and not txn.epoch_bump_required and txn.last_error is None
    txn.move(E.BEGIN)
    assert txn.partitions == set() and txn.groups == set() and not txn.started


def test_scenario__second_error_while_abortable__the_first_is_reported():
    txn = ready()
    txn.move(E.BEGIN)
    first = TopicAuthorizationFailed("first")
    txn.fail(API.ADD_PARTITIONS, first)
    txn.fail(API.PRODUCE, RecordTooLarge("second"))
    assert txn.last_error is first


def test_scenario__error_while_aborting__stays_aborting():
    txn = ready()
    txn.move(E.BEGIN)
    txn.begin_abort()
    txn.fail(API.PRODUCE, RecordTooLarge())
    assert txn.state is S.ABORTING_TRANSACTION


def test_scenario__fenced__fatal__every_call_raises_producer_fenced():
    txn = ready()
    txn.move(E.BEGIN)
    reported = txn.fail(API.END_TXN, InvalidProducerEpoch("old epoch"))
    assert isinstance(reported, ProducerFenced) and txn.state is S.FATAL_ERROR
    for call in (txn.begin_commit, txn.begin_abort, txn.check_send, txn.check_send_offsets, txn.raise_if_failed):
        with pytest.raises(ProducerFenced):
            call()


def test_scenario__end_txn_out_of_time__state_kept__commit_resumes():
    txn = ready()
    txn.move(E.BEGIN)
    txn.begin_commit()
    txn.fail(API.END_TXN, RequestTimedOut())
    assert txn.state is S.COMMITTING_TRANSACTION
    txn.begin_commit()
    assert txn.end() is False


def test_scenario__send_offsets_outside_a_transaction__illegal_state():
    with pytest.raises(IllegalStateError, match="not in progress"):
        ready().check_send_offsets()
