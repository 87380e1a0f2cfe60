"""A member actor's batch rules (core.member_batch): the handler's output, the
offsets a batch commits, where the member reads again after a batch that did not
commit, and what each failure of an exactly-once batch makes it do."""

import pytest

from rafka.core.errors import (FencedInstanceId, IllegalGeneration, InvalidProducerEpoch, KafkaError,
                               ProducerFenced, RebalanceInProgress, RecordTooLarge, RequestTimedOut,
                               TopicAuthorizationFailed, TransactionAbortable, TransactionalIdAuthorizationFailed,
                               UnknownMemberId)
from rafka.core.member_batch import (BatchSpan, OwedCommits, Recovery, batch_span, output_records, recovery_for,
                                     rewind_positions)
from rafka.core.structs import ConsumerRecord, ProducerRecord

pytestmark = pytest.mark.core
A0, A1 = ("in", 0), ("in", 1)


def record(partition, offset, topic="in"):
    return ConsumerRecord(topic, partition, 0, 0, offset, 0, None, b"v%d" % offset)


def test_output__none_is_no_output__records_and_generators_are_listed():
    assert output_records(None) == []
    out = [ProducerRecord("out", b"a"), ProducerRecord("out", b"b", key=b"k", partition=1)]
    assert output_records(out) == out
    assert output_records(r for r in out) == out
    assert output_records(()) == []


@pytest.mark.parametrize("returned, message", [
    (b"bytes", "a member's handler returns None or an iterable of ProducerRecord, got bytes"),
    ("text", "a member's handler returns None or an iterable of ProducerRecord, got str"),
    (ProducerRecord("out", b"x"), "a member's handler returns None or an iterable of ProducerRecord, "
                                  "got ProducerRecord"),
    (3, "a member's handler returns None or an iterable of ProducerRecord, got int"),
    ([ProducerRecord("out", b"x"), ("out", b"y")], "a member's handler returns ProducerRecords, got a tuple "
                                                   "among them"),
])
def test_output__not_records__type_error_naming_what_came_back(returned, message):
    with pytest.raises(TypeError) as raised:
        output_records(returned)
    assert str(raised.value) == message


def test_output__over_the_limit__value_error_without_reading_the_rest():
    def endless():
        while True:
            yield ProducerRecord("out", b"x")
    with pytest.raises(ValueError, match="^a member's handler returned more than 3 records for one batch$"):
        output_records(endless(), limit=3)
    assert len(output_records([ProducerRecord("out")] * 3, limit=3)) == 3


def test_span__first_and_next_offset_per_partition():
    span = batch_span([record(0, 5), record(1, 9), record(0, 6), record(0, 8), record(1, 10),
                       record(0, 2, topic="other")])
    assert span.first_offsets == {("in", 0): 5, ("in", 1): 9, ("other", 0): 2}
    assert span.end_offsets == {("in", 0): 9, ("in", 1): 11, ("other", 0): 3}


def test_span__a_partition_out_of_order__refused():
    with pytest.raises(ValueError, match="^records of in-0 out of order: 4 after 5$"):
        batch_span([record(0, 5), record(0, 4)])


def test_rewind__committed_offset_wins__else_the_batch_start__partitions_lost_are_left():
    span = BatchSpan({("in", 0): 5, ("in", 1): 9, ("in", 2): 0}, {("in", 0): 8, ("in", 1): 12, ("in", 2): 4})
    # in-0: committed at the batch start (the usual case); in-1: nothing committed yet;
    # in-2: revoked by a rebalance, its next owner starts from the committed offset
    assert rewind_positions(span, {("in", 0): 5, ("in", 1): None}, [("in", 0), ("in", 1)]) == {
        ("in", 0): 5, ("in", 1): 9}


def test_rewind__a_commit_that_seemed_to_fail_but_landed__read_from_after_it():
    span = BatchSpan({("in", 0): 5}, {("in", 0): 8})
    assert rewind_positions(span, {("in", 0): 8}, {("in", 0)}) == {("in", 0): 8}


@pytest.mark.parametrize("error, expected", [
    # the group moved on while the batch was handled (TxnOffsetCommit refused): abort, rejoin in poll
    (IllegalGeneration("gen"), Recovery.ABORT),
    (UnknownMemberId("member"), Recovery.ABORT),
    (RebalanceInProgress("rebalance"), Recovery.ABORT),
    (TransactionAbortable("abortable"), Recovery.ABORT),
    (RequestTimedOut("slow"), Recovery.ABORT),
    (KafkaError("anything else Kafka"), Recovery.ABORT),
    # fenced (a newer producer, or the coordinator's timeout bumped the epoch): a new producer
    (ProducerFenced("fenced"), Recovery.NEW_PRODUCER),
    (InvalidProducerEpoch("epoch"), Recovery.NEW_PRODUCER),
    # a new producer would fail the same: stop
    (TransactionalIdAuthorizationFailed("denied"), Recovery.STOP),
    (TopicAuthorizationFailed("denied"), Recovery.STOP),
    (FencedInstanceId("another member has this one's group.instance.id"), Recovery.STOP),
    (RecordTooLarge("the handler's record"), Recovery.STOP),
    # the handler's own bug
    (ZeroDivisionError("handler"), Recovery.STOP),
    (TypeError("handler returned bytes"), Recovery.STOP),
])
def test_recovery__by_error(error, expected):
    assert recovery_for(error) is expected


def test_owed_commits__refused_for_a_stale_epoch__due_after_the_next_poll_for_owned_partitions_only():
    owed = OwedCommits()
    assert not owed and owed.due({A0}) == {}
    owed.refused({A0: 10, A1: 7})
    owed.refused({A0: 12})                        # a later refused batch of the same partition: its end
    assert owed and owed.due({A0}) == {A0: 12}    # A1 moved to another member: its next owner reads it again
    assert not owed and owed.due({A0, A1}) == {}  # paid once


def test_owed_commits__a_later_commit_that_succeeded_settles_the_partition__never_sent_after_it():
    owed = OwedCommits()
    owed.refused({A0: 10, A1: 7})
    owed.settled({A0: 15})                        # the next batch of A0 committed: 10 would move it back
    assert owed.due({A0, A1}) == {A1: 7}
