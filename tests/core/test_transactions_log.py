"""The replica side of transactions (KIP-98), without Ray: control batches and
their markers, the last stable offset, the aborted-transaction index, read_committed
fetches and ListOffsets, producer snapshots and expiry, and the cleaner."""

from __future__ import annotations

import time

import pytest
from kio.schema.list_offsets.v7 import request as list_v7
from kio.static.primitive import i8, i32, i64

from rafka.core.clock import FakeClock
from rafka.core.config import TopicConfig
from rafka.core.errors import (CorruptRecord, InvalidProducerEpoch, InvalidRecord, InvalidTxnState,
                               TransactionCoordinatorFenced)
from rafka.core.log import PartitionLog
from rafka.core.producer_state import snapshot_offsets
from rafka.core.records import (ATTR_CONTROL, ATTR_TRANSACTIONAL, EndTxnMarker, RecordInput, decode_batches,
                                encode_batch, encode_end_txn_marker, end_txn_marker, read_header)
from rafka.core.replica import (LATEST_TIMESTAMP, READ_COMMITTED, READ_UNCOMMITTED, PartitionReplica)
from rafka.core.txn_index import ENTRY, AbortedTxn
from rafka.protocol import fetching
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.core

NOW_MS = 1_700_000_000_000


def txn_batch(producer_id, *values, epoch=0, sequence=0, key=b"k", timestamp_ms=NOW_MS):
    return encode_batch([RecordInput(v, key, timestamp_ms) for v in values], producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence, attributes=ATTR_TRANSACTIONAL)


def plain_batch(*values, producer_id=-1, epoch=-1, sequence=-1, key=b"k", timestamp_ms=NOW_MS):
    return encode_batch([RecordInput(v, key, timestamp_ms) for v in values], producer_id=producer_id,
                        producer_epoch=epoch, base_sequence=sequence)


def marker(producer_id, *, commit, epoch=0, coordinator_epoch=0, timestamp_ms=NOW_MS):
    return encode_end_txn_marker(producer_id=producer_id, producer_epoch=epoch, coordinator_epoch=coordinator_epoch,
                                 commit=commit, timestamp_ms=timestamp_ms)


def new_log(path, clock=None, **config):
    return PartitionLog(path, TopicConfig.from_dict(config), clock or FakeClock(NOW_MS))


def leader(tmp_path, clock=None, **config):
    """A replica leading alone (ISR of itself): its HW follows its LEO."""
    replica = PartitionReplica(topic="orders", partition=0, replica_id=0, directory=tmp_path / "r0",
                               config=TopicConfig.from_dict(config), clock=clock or FakeClock(NOW_MS),
                               replica_lag_time_max_ms=30_000)
    replica.become_leader(leader_epoch=1, replicas=[0], isr=[0], partition_epoch=1)
    return replica


def all_batches(log):
    """(header, records) of every batch of the log, segment by segment (a read
    stops at its segment's end)."""
    return [batch for base in log.segment_base_offsets() for batch in decode_batches(log.read(base, 1 << 20))]


def append_all(log, *batches):
    for data in batches:
        log.append_as_leader(data, leader_epoch=0)


def offsets_of(data):
    return [record.offset for _, records in decode_batches(data) for record in records]


# --- control batches -------------------------------------------------------------------

def test_marker_batch__control_and_transactional_bits__commit_abort_and_epoch_read_back():
    commit, abort = marker(7, commit=True, coordinator_epoch=5), marker(7, commit=False, coordinator_epoch=6)
    header = read_header(commit)
    assert header.is_control and header.is_transactional and header.record_count == 1
    assert (header.producer_id, header.attributes & (ATTR_CONTROL | ATTR_TRANSACTIONAL)) == (7, 0x30)
    assert end_txn_marker(commit, 0, header) == EndTxnMarker(commit=True, coordinator_epoch=5)
    assert end_txn_marker(abort, 0, read_header(abort)) == EndTxnMarker(commit=False, coordinator_epoch=6)
    assert not read_header(txn_batch(7, b"a")).is_control and read_header(txn_batch(7, b"a")).is_transactional


def test_control_record__key_shorter_than_version_and_type__corrupt_record():
    data = encode_batch([RecordInput(b"\x00\x00\x00\x00\x00\x05", b"\x00")], producer_id=7, producer_epoch=0,
                        attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL)
    with pytest.raises(CorruptRecord):
        end_txn_marker(data, 0, read_header(data))


# --- transactions and the LSO ------------------------------------------------------------

def test_transactional_append__lso_held_at_its_first_offset_until_the_hw_passes_the_marker(tmp_path):
    log = new_log(tmp_path)
    append_all(log, plain_batch(b"a", b"b"), txn_batch(7, b"c", b"d"))
    log.update_high_watermark(log.log_end_offset)
    assert (log.high_watermark, log.last_stable_offset) == (4, 2)
    append_all(log, marker(7, commit=True))
    log.update_high_watermark(4)             # the marker (offset 4) is not below the HW yet
    assert log.last_stable_offset == 2
    log.update_high_watermark(5)
    assert log.last_stable_offset == 5 and log.producers.open_transactions() == []


def test_abort__index_entry_with_the_lso_of_the_other_open_transaction__in_the_segments_txnindex(tmp_path):
    log = new_log(tmp_path)
    append_all(log, txn_batch(7, b"a"), txn_batch(8, b"b"), marker(7, commit=False))
    assert log.aborted_transactions(0, 3) == [AbortedTxn(7, 0, 2, 1)]   # producer 8's transaction opened at 1
    data = (tmp_path / "00000000000000000000.txnindex").read_bytes()
    assert len(data) == ENTRY.size and ENTRY.unpack(data) == (0, 7, 0, 2, 1)
    append_all(log, marker(8, commit=False))
    assert log.aborted_transactions(0, 4) == [AbortedTxn(7, 0, 2, 1), AbortedTxn(8, 1, 3, 4)]
    assert log.aborted_transactions(3, 4) == [AbortedTxn(7, 0, 2, 1), AbortedTxn(8, 1, 3, 4)][1:]


def test_marker__older_coordinator_epoch__transaction_coordinator_fenced_and_nothing_written(tmp_path):
    replica = leader(tmp_path)
    replica.append(txn_batch(7, b"a"), acks=-1)
    replica.append_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=3, commit=False)
    replica.append(txn_batch(7, b"b", sequence=1), acks=-1)
    with pytest.raises(TransactionCoordinatorFenced):
        replica.append_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=2, commit=True)
    assert replica.log.log_end_offset == 3 and replica.producers.open_transactions() == [(7, 2)]


def test_fencing_marker_at_a_bumped_epoch__the_old_epochs_data_and_markers_refused(tmp_path):
    replica = leader(tmp_path)
    replica.append(txn_batch(7, b"a"), acks=-1)
    replica.append_txn_marker(producer_id=7, producer_epoch=1, coordinator_epoch=0, commit=False)   # the zombie fenced
    with pytest.raises(InvalidProducerEpoch):
        replica.append(txn_batch(7, b"late", sequence=1), acks=-1)
    with pytest.raises(InvalidProducerEpoch):
        replica.append_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=True)
    assert replica.log.log_end_offset == 2
    assert replica.fetch_for_consumer(fetch_offset=0, max_bytes=1 << 20,
                                      isolation_level=READ_COMMITTED).aborted_transactions == ((7, 0),)


def test_non_transactional_batch_while_the_producers_transaction_is_open__invalid_txn_state(tmp_path):
    replica = leader(tmp_path)
    replica.append(txn_batch(7, b"a"), acks=-1)
    with pytest.raises(InvalidTxnState):
        replica.append(plain_batch(b"b", producer_id=7, epoch=0, sequence=1), acks=-1)
    assert replica.log.log_end_offset == 1


def test_control_batch_from_a_client__invalid_record_and_nothing_written(tmp_path):
    replica = leader(tmp_path)
    with pytest.raises(InvalidRecord, match="Clients are not allowed to write control records"):
        replica.append(marker(7, commit=True), acks=-1)
    assert replica.log.log_end_offset == 0


# --- read_committed fetch and ListOffsets -------------------------------------------------

def scenario(replica):
    """Committed by 7 (0-1, marker 2), aborted by 8 (3-4, marker 5), open by 9 (6),
    a plain record (7). LSO 6, HW 8."""
    replica.append(txn_batch(7, b"c1", b"c2"), acks=-1)
    replica.append_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=True)
    replica.append(txn_batch(8, b"x1", b"x2"), acks=-1)
    replica.append_txn_marker(producer_id=8, producer_epoch=0, coordinator_epoch=0, commit=False)
    replica.append(txn_batch(9, b"open"), acks=-1)
    replica.append(plain_batch(b"plain"), acks=-1)


def test_read_committed_fetch__up_to_the_lso_with_the_aborted_transactions_read_uncommitted_to_the_hw(tmp_path):
    replica = leader(tmp_path)
    scenario(replica)
    committed = replica.fetch_for_consumer(fetch_offset=0, max_bytes=1 << 20, isolation_level=READ_COMMITTED)
    assert offsets_of(committed.records) == [0, 1, 2, 3, 4, 5]
    assert committed.aborted_transactions == ((8, 3),)
    assert (committed.high_watermark, committed.last_stable_offset) == (8, 6)
    uncommitted = replica.fetch_for_consumer(fetch_offset=0, max_bytes=1 << 20, isolation_level=READ_UNCOMMITTED)
    assert offsets_of(uncommitted.records) == list(range(8))
    assert uncommitted.aborted_transactions is None and uncommitted.last_stable_offset == 6
    at_the_lso = replica.fetch_for_consumer(fetch_offset=6, max_bytes=1 << 20, isolation_level=READ_COMMITTED)
    assert at_the_lso.records == b"" and at_the_lso.aborted_transactions == ()


def test_read_committed_fetch__only_the_aborted_transactions_overlapping_what_is_returned(tmp_path):
    replica = leader(tmp_path)
    scenario(replica)
    first = replica.fetch_for_consumer(fetch_offset=0, max_bytes=1, isolation_level=READ_COMMITTED)
    assert offsets_of(first.records) == [0, 1] and first.aborted_transactions == ()
    later = replica.fetch_for_consumer(fetch_offset=3, max_bytes=1, isolation_level=READ_COMMITTED)
    assert offsets_of(later.records) == [3, 4] and later.aborted_transactions == ((8, 3),)


def test_list_offsets_latest__read_committed_the_lso_read_uncommitted_the_hw(tmp_path):
    replica = leader(tmp_path)
    scenario(replica)
    assert replica.list_offset(timestamp_ms=LATEST_TIMESTAMP, isolation_level=READ_COMMITTED) == (6, -1, 1)
    assert replica.list_offset(timestamp_ms=LATEST_TIMESTAMP) == (8, -1, 1)
    # by time: the first record at or after it, below the bound
    assert replica.list_offset(timestamp_ms=NOW_MS, isolation_level=READ_COMMITTED) == (0, NOW_MS, 1)


def test_follower__replays_the_markers__the_same_lso_and_aborted_transactions_as_its_leader(tmp_path):
    clock = FakeClock(NOW_MS)
    config = TopicConfig.from_dict({})
    first, second = (PartitionReplica(topic="orders", partition=0, replica_id=i, directory=tmp_path / f"r{i}",
                                      config=config, clock=clock, replica_lag_time_max_ms=30_000) for i in (0, 1))
    first.become_leader(leader_epoch=1, replicas=[0, 1], isr=[0, 1], partition_epoch=1)
    second.become_follower(leader_id=0, leader_epoch=1)
    scenario(first)
    for _ in range(2):   # the second round carries the leader's HW
        second.apply_fetched(first.fetch_for_follower(follower_id=1, fetch_offset=second.log.log_end_offset,
                                                      leader_epoch=1, max_bytes=1 << 20))
    assert second.producers.unreplicated_count() == 0   # both markers below its HW: forgotten, nobody asked its LSO
    assert first.log.high_watermark == second.log.high_watermark == 8
    assert second.log.last_stable_offset == first.log.last_stable_offset == 6
    assert second.log.aborted_transactions(0, 8) == first.log.aborted_transactions(0, 8) == [AbortedTxn(8, 3, 5, 6)]


def test_truncation_below_a_marker__its_transaction_is_open_again_and_its_index_entry_gone(tmp_path):
    log = new_log(tmp_path)
    append_all(log, txn_batch(7, b"a", b"b"), marker(7, commit=False))
    log.update_high_watermark(3)
    assert log.last_stable_offset == 3 and log.aborted_transactions(0, 3) == [AbortedTxn(7, 0, 2, 3)]
    log.truncate_to(2)   # a follower cutting a divergent tail (the marker was never committed)
    assert log.producers.open_transactions() == [(7, 0)] and log.last_stable_offset == 0
    assert log.aborted_transactions(0, 3) == []
    assert (tmp_path / "00000000000000000000.txnindex").read_bytes() == b""


# --- producer snapshots ----------------------------------------------------------------------

def test_snapshots_at_roll_and_close__a_reopen_replays_no_batch_and_knows_the_open_transaction(tmp_path):
    log = new_log(tmp_path, **{"segment.bytes": "300"})
    append_all(log, plain_batch(b"a" * 100, producer_id=5, epoch=0, sequence=0), txn_batch(7, b"b" * 100),
               txn_batch(8, b"c"))
    assert len(log.segment_base_offsets()) > 1
    assert snapshot_offsets(tmp_path) == log.segment_base_offsets()[1:]   # one per roll, at the new base
    log.close()
    assert snapshot_offsets(tmp_path)[-1] == 3                              # and one at the LEO
    reopened = new_log(tmp_path, **{"segment.bytes": "300"})
    assert reopened.producer_batches_replayed == 0
    assert reopened.producers.open_transactions() == [(7, 1), (8, 2)]
    assert reopened.producers.entry(5).batches[-1].last_offset == 0


def test_crash_after_a_roll__reopen_replays_only_the_batches_after_the_last_snapshot(tmp_path):
    log = new_log(tmp_path, **{"segment.bytes": "300"})
    append_all(log, txn_batch(7, b"a" * 150), txn_batch(8, b"b" * 150), marker(7, commit=False), txn_batch(9, b"c"))
    after_last_snapshot = log.log_end_offset - snapshot_offsets(tmp_path)[-1]
    log._unlock()   # a crash: no close, no snapshot at the LEO (appends are in the page cache)
    reopened = new_log(tmp_path, **{"segment.bytes": "300"})
    assert 0 < reopened.producer_batches_replayed == after_last_snapshot < 4
    assert reopened.producers.open_transactions() == [(8, 1), (9, 3)]
    assert reopened.aborted_transactions(0, 4) == [AbortedTxn(7, 0, 2, 1)]


def test_missing_txnindex__rebuilt_by_replaying_from_before_its_segment(tmp_path):
    log = new_log(tmp_path, **{"segment.bytes": "300"})
    append_all(log, txn_batch(7, b"a" * 150), marker(7, commit=False), plain_batch(b"b" * 150), plain_batch(b"c"))
    log.close()
    index = tmp_path / "00000000000000000000.txnindex"
    assert index.exists()
    index.unlink()
    reopened = new_log(tmp_path, **{"segment.bytes": "300"})
    assert reopened.producer_batches_replayed == 4   # from the log's first batch: no snapshot before that segment
    assert reopened.aborted_transactions(0, 4) == [AbortedTxn(7, 0, 1, 2)]
    assert ENTRY.unpack(index.read_bytes()) == (0, 7, 0, 1, 2)


def test_corrupt_snapshot__deleted_and_the_log_replayed_to_the_same_state(tmp_path):
    log = new_log(tmp_path)
    append_all(log, txn_batch(7, b"a"), marker(7, commit=True), txn_batch(8, b"b"))
    log.close()
    (snapshot,) = tmp_path.glob("*.snapshot")
    snapshot.write_bytes(snapshot.read_bytes()[:-1] + b"\xff")
    reopened = new_log(tmp_path)
    assert not snapshot.exists() and reopened.producer_batches_replayed == 3
    assert reopened.producers.open_transactions() == [(8, 2)] and reopened.producers.entry(7) is not None


def test_retention__deletes_segments_txnindex_and_their_snapshots(tmp_path):
    clock = FakeClock(NOW_MS)
    log = new_log(tmp_path, clock, **{"segment.bytes": "300", "retention.ms": "1000"})
    append_all(log, txn_batch(7, b"a" * 150), marker(7, commit=False), plain_batch(b"b" * 150),
               plain_batch(b"c" * 150))
    log.update_high_watermark(log.log_end_offset)
    first_bases = log.segment_base_offsets()
    assert (tmp_path / "00000000000000000000.txnindex").exists()
    clock.advance(10_000)
    assert log.enforce_retention() >= 1
    assert not (tmp_path / "00000000000000000000.txnindex").exists()
    assert all(offset >= log.segment_base_offsets()[0] for offset in snapshot_offsets(tmp_path))
    assert log.segment_base_offsets() != first_bases


# --- producer.id.expiration.ms ---------------------------------------------------------------

def test_producer_expiration__an_idle_producer_goes_one_with_an_open_transaction_stays(tmp_path):
    clock = FakeClock(NOW_MS)
    log = PartitionLog(tmp_path, TopicConfig.from_dict({}), clock, producer_id_expiration_ms=60_000,
                       producer_id_expiration_check_interval_ms=10_000)
    append_all(log, plain_batch(b"a", producer_id=5, epoch=0, sequence=0), txn_batch(7, b"b"))
    clock.advance(59_000)
    append_all(log, plain_batch(b"c"))
    assert log.producers.entry(5) is not None                 # idle 59 s < 60 s
    clock.advance(11_000)   # past the expiry and the check interval since the last check
    append_all(log, plain_batch(b"d"))
    assert log.producers.entry(5) is None and log.producers.entry(7) is not None
    log.close()
    clock.advance(1_000_000)
    reopened = PartitionLog(tmp_path, TopicConfig.from_dict({}), clock, producer_id_expiration_ms=60_000)
    assert reopened.producers.open_transactions() == [(7, 1)] and reopened.producers.producer_count() == 1


# --- the cleaner -----------------------------------------------------------------------------

def test_compaction__markers_kept_aborted_records_dropped_and_never_shadowing_a_committed_one(tmp_path):
    log = new_log(tmp_path, **{"cleanup.policy": "compact", "segment.bytes": "400"})
    append_all(log, plain_batch(b"kept", key=b"k"),                         # 0
               txn_batch(7, b"aborted", key=b"k"), marker(7, commit=False),  # 1, 2
               txn_batch(8, b"other", key=b"j"), marker(8, commit=True))     # 3, 4
    log.roll()
    append_all(log, plain_batch(b"tail", key=b"t"))
    log.update_high_watermark(log.log_end_offset)
    result = log.compact()
    assert result.records_removed == 1
    values = {record.key: record.value for header, records in all_batches(log) if not header.is_control
              for record in records}
    assert values == {b"k": b"kept", b"j": b"other", b"t": b"tail"}
    controls = [h.base_offset for h, _ in all_batches(log) if h.is_control]
    assert controls == [2, 4]
    assert log.aborted_transactions(0, 6) == [AbortedTxn(7, 1, 2, 3)]


def test_compaction__an_open_transaction_bounds_the_cleanable_segments(tmp_path):
    log = new_log(tmp_path, **{"cleanup.policy": "compact", "segment.bytes": "300"})
    append_all(log, plain_batch(b"old" * 40, key=b"k"))
    log.roll()
    append_all(log, txn_batch(7, b"open" * 30, key=b"k"))
    log.roll()
    append_all(log, plain_batch(b"new" * 40, key=b"k"))
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    plan = log.plan_compaction(force=True)
    assert [s.base_offset for s in plan.segments] == [0]   # the LSO is 1: the open transaction's segment waits


# --- on the wire -----------------------------------------------------------------------------

@pytest.fixture()
def node(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        yield node


def test_wire__fetch_read_committed_and_list_offsets_answer_the_lso_and_the_aborted_transactions(node):
    from tests.core.test_protocol_partitions import exchange, fetch_request_of, fetched
    endpoint = node.endpoints[("orders", 0)]

    async def end(producer_id, commit):
        appended = endpoint.append_txn_marker(producer_id=producer_id, producer_epoch=0, coordinator_epoch=0,
                                              commit=commit)
        return (await endpoint.acknowledged(appended, 5_000)).base_offset

    now_ms = int(time.time() * 1000)   # the node's clock is the system's: its segments roll by record time
    # transactional batches no coordinator knows of (a Produce would be verified with one)
    node.append_unverified("orders", 0, txn_batch(8, b"x", timestamp_ms=now_ms))
    assert node.call(end(8, False)) == 1
    node.append_unverified("orders", 0, txn_batch(9, b"open", timestamp_ms=now_ms))
    for version in (4, 11, 12):
        committed, uncommitted = exchange(node, fetch_request_of(version, 0, isolation_level=1),
                                          fetch_request_of(version, 0))
        part = fetched(committed)
        assert (part.high_watermark, part.last_stable_offset) == (3, 2)
        assert [(int(t.producer_id), int(t.first_offset)) for t in part.aborted_transactions] == [(8, 0)]
        assert offsets_of(bytes(part.records)) == [0, 1]
        assert fetched(uncommitted).last_stable_offset == 2 and fetched(uncommitted).aborted_transactions is None
    (answer,) = exchange(node, fetching.fetch_request(
        topic="orders", partition=0, replica_id=-1, fetch_offset=0, leader_epoch=-1, last_fetched_epoch=-1,
        log_start_offset=-1, max_bytes=1 << 20, max_wait_ms=0, isolation_level=1))
    read = fetching.leader_answer(answer, topic="orders", partition=0)   # what rafka's clients will read
    assert (read.last_stable_offset, read.aborted_transactions, offsets_of(read.records)) == (2, ((8, 0),), [0, 1])
    latest = [list_v7.ListOffsetsRequest(replica_id=i32(-1), isolation_level=i8(level), topics=(
        list_v7.ListOffsetsTopic(name="orders", partitions=(list_v7.ListOffsetsPartition(
            partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(-1)),)),)) for level in (1, 0)]
    committed, uncommitted = exchange(node, *latest)
    assert [int(p.offset) for t in committed.topics for p in t.partitions] == [2]
    assert [int(p.offset) for t in uncommitted.topics for p in t.partitions] == [3]
