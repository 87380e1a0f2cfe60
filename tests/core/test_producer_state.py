"""Idempotent producer checks on batch headers, against a real log."""

import time

import pytest

from rafka.core.errors import InvalidProducerEpoch, OutOfOrderSequence
from rafka.core.log import PartitionLog
from rafka.core.producer_state import ProducerStateTable
from rafka.core.records import RecordInput, encode_batch, read_header

pytestmark = pytest.mark.core


def produced(sequence, count=2, producer_id=7, epoch=0):
    # timestamped now, as a producer's records are: producer.id.expiration.ms measures from them
    return encode_batch([RecordInput(b"v%d" % (sequence + i)) for i in range(count)],
                        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                        now_ms=int(time.time() * 1000))


def append(log, table, data):
    """The leader's path: check, then append or answer with the earlier offsets."""
    duplicate = table.check(read_header(data))
    if duplicate is not None:
        return duplicate.first_offset, duplicate.last_offset
    result = log.append_as_leader(data, leader_epoch=0)
    if table is not log.producers:   # the log applies its own appends
        table.on_append(read_header(data)._replace(base_offset=result.base_offset))
    return result.base_offset, result.last_offset


def test_retried_batch_after_a_lost_ack__answered_with_original_offsets_and_written_once(tmp_path):
    log, table = PartitionLog(tmp_path), ProducerStateTable()
    assert append(log, table, produced(0)) == (0, 1)
    assert append(log, table, produced(2)) == (2, 3)
    assert append(log, table, produced(0)) == (0, 1)    # the retry of the first batch
    assert log.log_end_offset == 4


def test_sequence_gap__out_of_order_sequence_and_nothing_written(tmp_path):
    log, table = PartitionLog(tmp_path), ProducerStateTable()
    append(log, table, produced(0))
    with pytest.raises(OutOfOrderSequence, match=r"sent sequence 5-6, expected 2 \(batches kept: 0-1@0\)"):
        append(log, table, produced(5))   # the message says what the leader held (logged by the leader)
    assert log.log_end_offset == 2


def test_unknown_producer__may_start_at_any_sequence_as_kafka(tmp_path):
    """Kafka's ProducerAppendInfo.checkSequence: a producer the partition does not
    know (new, or expired by producer.id.expiration.ms) is taken at any sequence."""
    log, table = PartitionLog(tmp_path), ProducerStateTable()
    assert append(log, table, produced(3, producer_id=8)) == (0, 1)
    with pytest.raises(OutOfOrderSequence):
        append(log, table, produced(9, producer_id=8))   # once known, gaps are refused


def test_producer_epoch__older_fenced_newer_restarts_at_zero(tmp_path):
    log, table = PartitionLog(tmp_path), ProducerStateTable()
    append(log, table, produced(0, epoch=1))
    with pytest.raises(InvalidProducerEpoch):
        append(log, table, produced(2, epoch=0))
    with pytest.raises(OutOfOrderSequence):
        append(log, table, produced(2, epoch=2))
    assert append(log, table, produced(0, epoch=2)) == (2, 3)


def test_rebuilt_from_the_log__a_new_leader_still_detects_the_duplicate(tmp_path):
    log, table = PartitionLog(tmp_path), ProducerStateTable()
    append(log, table, produced(0))
    append(log, table, produced(2))
    log.close()
    reopened = PartitionLog(tmp_path)
    rebuilt = reopened.producers   # loaded at open: the close's snapshot
    assert append(reopened, rebuilt, produced(2)) == (2, 3)
    assert reopened.log_end_offset == 4
    reopened.truncate_to(2)        # reloads the producer state as of offset 2
    assert reopened.producers.entry(7).batches[-1].last_offset == 1
    assert append(reopened, reopened.producers, produced(2)) == (2, 3)  # re-appended after the cut
    assert reopened.log_end_offset == 4
