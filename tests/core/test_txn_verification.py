"""KIP-890 part 1: a leader appends a producer's first transactional batch of a
transaction only once the transaction coordinator has said the partition is in
it, and only with the guard its verification started with (core.producer_state,
protocol.handlers.produce, protocol.txn_verification). What this closes: a
Produce that arrives after its transaction ended (its client gave up on it, the
coordinator aborted) opened a transaction no coordinator knew of, and every
read_committed consumer of the partition stopped at it."""

import dataclasses
import time

import pytest
from kio.schema.errors import ErrorCode

from rafka.client.producer import Producer
from rafka.core import producer_state
from rafka.core.errors import (ConcurrentTransactions, CoordinatorLoadInProgress, InvalidProducerEpoch,
                               InvalidProducerIdMapping, InvalidTxnState, NetworkException, NotEnoughReplicas,
                               OutOfOrderSequence, ProducerFenced, TransactionAbortable)
from rafka.core.producer_state import ProducerStateTable
from rafka.core.records import (ATTR_TRANSACTIONAL, EndTxnMarker, RecordInput, encode_batch, encode_end_txn_marker,
                                read_header)
from rafka.protocol.txn_verification import produce_error
from tests.core.protocol_node import ProtocolNode
from tests.core.test_protocol_partitions import exchange, produce_request, produced

pytestmark = pytest.mark.core


def header(producer_id, *, epoch=0, sequence=0, base_offset=0, transactional=True):
    return read_header(encode_batch([RecordInput(b"v", b"k", 1_000)], base_offset=base_offset,
                                    producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                                    attributes=ATTR_TRANSACTIONAL if transactional else 0))


def marker(producer_id, *, base_offset, commit=False):
    """(header, marker) of a COMMIT or ABORT control batch, as on_append takes them."""
    return (read_header(encode_end_txn_marker(producer_id=producer_id, producer_epoch=0, coordinator_epoch=0,
                                              commit=commit, timestamp_ms=1_000, base_offset=base_offset)),
            EndTxnMarker(commit, 0))


def test_guard__one_per_producer__its_batch_needs_it__then_none_while_the_transaction_is_open():
    table = ProducerStateTable()
    guard = table.start_verification(7, 0, 0)
    assert table.start_verification(7, 0, 0) is guard   # a retry of the same batch: the same verification
    for wrong in (None, object()):
        with pytest.raises(InvalidTxnState):
            table.check_verified(header(7), wrong)
    table.check_verified(header(7), guard)
    table.check_verified(header(8, transactional=False), None)   # not transactional: nothing to verify
    table.on_append(header(7))
    assert table.start_verification(7, 0, 0) is None   # open here: no question to ask
    table.check_verified(header(7, sequence=1, base_offset=1), None)


def test_guard__a_marker_between_the_verification_and_the_append__the_batch_refused():
    """The ABA: verified, then the coordinator's ABORT marker lands, then the batch
    comes with the guard its verification gave: refused, as the transaction it
    was verified for is over."""
    table = ProducerStateTable()
    table.on_append(header(7))
    table.on_append(*marker(7, base_offset=1))
    guard = table.start_verification(7, 0, 0)
    assert guard is not None
    table.on_append(*marker(7, base_offset=2))   # a marker again (the abort retried): the guard goes
    with pytest.raises(InvalidTxnState):
        table.check_verified(header(7, sequence=1, base_offset=3), guard)


def test_guard__kept_while_not_verified__bounded_oldest_first(monkeypatch):
    """A verification that failed leaves the guard (another of the same producer may
    be in flight with it, as Kafka's VerificationStateEntry stays); the table holds
    at most MAX_VERIFICATION_GUARDS, the oldest going first."""
    table = ProducerStateTable()
    guard = table.start_verification(7, 0, 0)
    assert table.start_verification(7, 0, 0) is guard
    monkeypatch.setattr(producer_state, "MAX_VERIFICATION_GUARDS", 3)
    small = ProducerStateTable()
    guards = {pid: small.start_verification(pid, 0, 0) for pid in (1, 2, 3, 4)}
    with pytest.raises(InvalidTxnState):
        small.check_verified(header(1), guards[1])   # the oldest went to make room
    small.check_verified(header(4), guards[4])


def test_lowest_sequence__a_later_batch_waits_for_the_one_whose_verification_failed():
    """Kafka's VerificationStateEntry: the producer's first batches here, sequences
    0-4 and 5-9, are verified in turn; 0-4's verification fails (retriable) and
    5-9's passes. 5-9 may not land first (0-4's retry would then be out of order
    for good): OUT_OF_ORDER_SEQUENCE until 0-4 is in. A newer epoch starts over."""
    table = ProducerStateTable()
    guard = table.start_verification(7, 0, 0)
    assert table.start_verification(7, 5, 0) is guard
    with pytest.raises(OutOfOrderSequence):
        table.check(header(7, sequence=5))
    assert table.check(header(7, sequence=0)) is None
    table.check_verified(header(7, sequence=0), guard)
    table.on_append(header(7, sequence=0))   # in: the transaction is open, the verification done
    assert table.check(header(7, sequence=1, base_offset=1)) is None
    other = ProducerStateTable()
    other.start_verification(8, 3, 0)
    other.start_verification(8, 0, 1)   # bumped: the old epoch's sequences no longer count
    assert other.check(header(8, epoch=1, sequence=0)) is None


@pytest.mark.parametrize("error, answered", [
    (TransactionAbortable("t-0 not in the transaction"), InvalidTxnState),
    (ProducerFenced("epoch 0 is not 1"), InvalidProducerEpoch),
    (ConcurrentTransactions("completing"), NotEnoughReplicas),
    (CoordinatorLoadInProgress("loading"), NotEnoughReplicas),
    (NetworkException("gone"), NotEnoughReplicas),
    (InvalidProducerIdMapping("unknown"), InvalidProducerIdMapping),
])
def test_produce_error__what_a_produce_answers_for_a_partition_not_verified(error, answered):
    assert type(produce_error(error)) is answered


def transactional_produce(producer_id, epoch, sequence, transactional_id, *, partition=0):
    return dataclasses.replace(produce_request(encode_batch(
        [RecordInput(b"late", b"k", int(time.time() * 1000))], producer_id=producer_id, producer_epoch=epoch,
        base_sequence=sequence, attributes=ATTR_TRANSACTIONAL), partition=partition),
        transactional_id=transactional_id)


def test_produce__partition_never_added__invalid_txn_state__nothing_written(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 2}) as node:
        producer = Producer(node.bootstrap, transactional_id="careless", linger_ms=0)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send("orders", value=b"added", partition=0).result(timeout=10)   # orders-0 added
            (answer,) = exchange(node, transactional_produce(producer.producer_id, producer.producer_epoch, 0,
                                                             "careless", partition=1))
            assert produced(answer) == (ErrorCode.invalid_txn_state, -1)
            assert node.endpoints[("orders", 1)].replica.log.log_end_offset == 0
            producer.commit_transaction()
        finally:
            producer.close(timeout=10)


def test_produce__after_its_transaction_was_aborted__refused__no_transaction_left_open(tmp_path):
    """A Produce a client gave up on arrives after the abort's marker, with the
    same producer epoch and the next sequence: the coordinator no longer has the
    partition in a transaction, so the leader refuses it, and the LSO stays at
    the HW (before, the batch opened a transaction nobody would end)."""
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        producer = Producer(node.bootstrap, transactional_id="retrier", linger_ms=0)
        try:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send("orders", value=b"first", partition=0).result(timeout=10)
            producer.abort_transaction()
            (answer,) = exchange(node, transactional_produce(producer.producer_id, producer.producer_epoch, 1,
                                                             "retrier"))
            assert produced(answer) == (ErrorCode.invalid_txn_state, -1)
            log = node.endpoints[("orders", 0)].replica.log
            assert log.last_stable_offset == log.high_watermark == log.log_end_offset == 2   # record, marker
            producer.begin_transaction()   # the producer goes on: a new transaction, verified afresh
            producer.send("orders", value=b"second", partition=0).result(timeout=10)
            producer.commit_transaction()
            assert log.last_stable_offset == log.log_end_offset == 4
        finally:
            producer.close(timeout=10)


def test_produce__transactional_records_without_a_transactional_id__refused_unless_a_super_user(tmp_path):
    """KafkaApis: transactional records need a transactional id (they would skip the
    verification): TRANSACTIONAL_ID_AUTHORIZATION_FAILED, nothing written. rafka's
    own writers (a super user: the coordinators' TxnOffsetCommit batches) may."""
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        (answer,) = exchange(node, transactional_produce(4242, 0, 0, None))
        assert produced(answer) == (ErrorCode.transactional_id_authorization_failed, -1)
        assert node.endpoints[("orders", 0)].replica.log.log_end_offset == 0


def test_verify_failing_at_the_coordinator__retriable_for_the_producer__cluster_refusal_not_shown(tmp_path):
    """protocol.txn_verification: a coordinator that cannot be reached (or whose
    answer cannot be read) is NETWORK_EXCEPTION, which a Produce answers
    NOT_ENOUGH_REPLICAS; the coordinator refusing the leader itself
    (CLUSTER_AUTHORIZATION_FAILED) is INVALID_TXN_STATE, as Kafka hides it."""
    import asyncio

    from rafka.protocol.txn_verification import TransactionVerifier, verify_answer
    from tests.core.helpers import orders_image

    class Unreachable:
        request_timeout_ms = 1_000

        async def request(self, address, request):
            raise OSError("connection refused")
    image = orders_image()
    verifier = TransactionVerifier(lambda: image, Unreachable())
    verifier._coordinator = lambda transactional_id: ("127.0.0.1", 9)
    answers = asyncio.run(verifier.verify("t", 1, 0, [("orders", 0)]))
    assert type(answers[("orders", 0)]) is NetworkException
    assert type(produce_error(answers[("orders", 0)])) is NotEnoughReplicas

    @dataclasses.dataclass
    class Refused:
        error_code: ErrorCode = ErrorCode.cluster_authorization_failed
        results_by_transaction: tuple = ()
    assert type(verify_answer(Refused(), [("orders", 0)])[("orders", 0)]) is InvalidTxnState


def test_produce__transaction_open_here__no_question_asked__first_batch_of_each_transaction_asks(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        asked = []
        verify = node.verify_transaction

        async def counting(transactional_id, producer_id, producer_epoch, partitions):
            asked.append(tuple(partitions))
            return await verify(transactional_id, producer_id, producer_epoch, partitions)
        node.verify_transaction = counting
        producer = Producer(node.bootstrap, transactional_id="steady", linger_ms=0)
        try:
            producer.init_transactions()
            for _ in range(2):
                producer.begin_transaction()
                for i in range(3):
                    producer.send("orders", value=b"%d" % i, partition=0).result(timeout=10)
                producer.commit_transaction()
            assert asked == [(("orders", 0),)] * 2
        finally:
            producer.close(timeout=10)
