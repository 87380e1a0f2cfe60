"""Partition log scenarios: offsets, recovery, timestamps, retention, compaction,
truncation and leader epochs, each on a real directory and a fake clock."""

import os
import pickle
import shutil

import pytest

from rafka.core.clock import FakeClock
from rafka.core.config import TopicConfig
from rafka.core.errors import (CorruptRecord, InvalidRecord, KafkaStorageError, OffsetOutOfRange,
                               RecordTooLarge)
from rafka.core.log import PartitionLog
from rafka.core.records import RecordInput, decode_records, encode_batch, read_header

from tests.core.helpers import batch, keyed_batch

pytestmark = pytest.mark.core


def open_log(path, clock=None, **config):
    return PartitionLog(path, TopicConfig.from_dict(config), clock or FakeClock())


def read_all(log, start=None, max_offset=None):
    """Every record from `start` (default: log start) to the end, following reads."""
    offset = log.log_start_offset if start is None else start
    records = []
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, max_offset)
        if not data:
            break
        got = [r for r in decode_records(data) if r.offset >= offset]
        records.extend(got)
        offset = read_last_offset(data) + 1
    return records


def read_last_offset(data):
    position, last = 0, None
    while position < len(data):
        last = read_header(data, position)
        position += last.size_bytes
    return last.last_offset


def test_offsets__dense_across_segment_rolls_and_reopen(tmp_path):
    log = open_log(tmp_path, **{"segment.bytes": 400})
    for i in range(40):
        result = log.append_as_leader(batch(b"a%d" % i, b"b%d" % i, b"c%d" % i), leader_epoch=0)
        assert (result.base_offset, result.last_offset) == (3 * i, 3 * i + 2)
    assert len(log.segment_base_offsets()) > 5
    log.close()
    log = open_log(tmp_path, **{"segment.bytes": 400})
    assert log.log_end_offset == 120
    assert [r.offset for r in read_all(log)] == list(range(120))
    result = log.append_as_leader(batch(b"after"), leader_epoch=0)
    assert result.base_offset == 120
    assert [r.value for r in read_all(log, 119)] == [b"c39", b"after"]


def test_read__starting_inside_a_batch_returns_that_whole_batch(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"0", b"1", b"2", b"3"), leader_epoch=0)
    log.append_as_leader(batch(b"4"), leader_epoch=0)
    assert [r.offset for r in decode_records(log.read(2, 1 << 20))] == [0, 1, 2, 3, 4]
    assert log.read(5, 1 << 20) == b""
    with pytest.raises(OffsetOutOfRange):
        log.read(6, 1 << 20)


def test_read__max_offset_holds_back_batches_at_or_above_it(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"0", b"1"), leader_epoch=0)
    log.append_as_leader(batch(b"2", b"3"), leader_epoch=0)
    assert [r.offset for r in decode_records(log.read(0, 1 << 20, max_offset=2))] == [0, 1]
    assert log.read(2, 1 << 20, max_offset=2) == b""
    assert log.read(0, 1 << 20, max_offset=1) == b""  # batch 0-1 straddles offset 1


def test_read__byte_limit_returns_whole_batches_and_at_least_one(tmp_path):
    log = open_log(tmp_path)
    big = batch(b"x" * 5_000)
    for _ in range(3):
        log.append_as_leader(big, leader_epoch=0)
    assert len(log.read(0, 10)) == len(big)           # one batch even over the limit
    assert len(log.read(0, 2 * len(big) + 10)) == 2 * len(big)


def test_append__bad_input_raises_and_changes_nothing(tmp_path):
    log = open_log(tmp_path, **{"max.message.bytes": 1_000})
    log.append_as_leader(batch(b"ok"), leader_epoch=0)
    good, damaged = batch(b"fine"), bytearray(batch(b"broken"))
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptRecord):
        log.append_as_leader(good + bytes(damaged), leader_epoch=0)
    with pytest.raises(RecordTooLarge):
        log.append_as_leader(batch(b"y" * 2_000), leader_epoch=0)
    with pytest.raises(InvalidRecord):
        log.append_as_leader(b"", leader_epoch=0)
    assert log.log_end_offset == 1 and [r.value for r in read_all(log)] == [b"ok"]


def test_recovery__batch_torn_at_every_byte_of_its_tail__cut_and_earlier_batches_intact(tmp_path):
    source = tmp_path / "source"
    log = open_log(source, **{"segment.bytes": 600})
    for i in range(12):
        log.append_as_leader(batch(b"record-%d" % i, b"more-%d" % i), leader_epoch=i // 5)
    log.close()
    active = sorted(source.glob("*.log"))[-1]
    data = active.read_bytes()
    last_batch_start = len(data) - read_header(batch(b"record-11", b"more-11")).size_bytes
    expected = [(r.offset, r.value) for r in read_all(open_log(source, **{"segment.bytes": 600}))][:-2]
    for cut_at in range(last_batch_start, len(data)):
        trial = tmp_path / f"cut-{cut_at}"
        shutil.copytree(source, trial)
        os.truncate(trial / active.name, cut_at)
        recovered = open_log(trial, **{"segment.bytes": 600})
        assert recovered.log_end_offset == 22
        assert recovered.bytes_cut_at_recovery == cut_at - last_batch_start
        assert [(r.offset, r.value) for r in read_all(recovered)] == expected
        assert recovered.append_as_leader(batch(b"next"), leader_epoch=2).base_offset == 22
        recovered.close()
        shutil.rmtree(trial)


def test_recovery__flipped_byte_in_tail__cut_not_returned(tmp_path):
    log = open_log(tmp_path)
    for i in range(5):
        log.append_as_leader(batch(b"v%d" % i), leader_epoch=0)
    log.close()
    path = next(tmp_path.glob("*.log"))
    data = bytearray(path.read_bytes())
    third_batch_start = 2 * len(batch(b"v0"))
    data[third_batch_start + 70] ^= 0x40  # inside the third batch's record
    path.write_bytes(bytes(data))
    log = open_log(tmp_path)
    assert log.log_end_offset == 2
    assert [r.value for r in read_all(log)] == [b"v0", b"v1"]


def test_corruption__flipped_byte_in_a_flushed_segment__read_reports_corrupt_record(tmp_path):
    log = open_log(tmp_path, **{"segment.bytes": 300})
    for i in range(10):
        log.append_as_leader(batch(b"value-%d" % i), leader_epoch=0)
    log.close()
    first = sorted(tmp_path.glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[-3] ^= 0x01
    first.write_bytes(bytes(data))
    log = open_log(tmp_path, **{"segment.bytes": 300})
    with pytest.raises(CorruptRecord):
        decode_records(log.read(0, 1 << 20))


def test_recovery__missing_indexes_are_rebuilt_and_lookups_still_work(tmp_path):
    log = open_log(tmp_path, **{"segment.bytes": 2_000, "index.interval.bytes": 100})
    for i in range(60):
        log.append_as_leader(batch(b"v%d" % i, timestamp_ms=10_000 + i), leader_epoch=0)
    log.close()
    for index_file in list(tmp_path.glob("*.index")) + list(tmp_path.glob("*.timeindex")):
        index_file.unlink()
    log = open_log(tmp_path, **{"segment.bytes": 2_000, "index.interval.bytes": 100})
    assert all((tmp_path / p.name.replace(".log", ".index")).exists() for p in tmp_path.glob("*.log"))
    assert [r.offset for r in read_all(log, 37)] == list(range(37, 60))
    assert log.offset_for_timestamp(10_041) == (41, 10_041, 0)


def test_offset_of_max_timestamp__first_record_of_the_largest__its_epoch__none_past_the_bound(tmp_path):
    """Kafka's MAX_TIMESTAMP (UnifiedLog.fetchOffsetByTimestamp): the first segment
    holding the largest timestamp, the first batch there with it, and in that batch
    the first record with it; the batch's leader epoch beside it."""
    log = open_log(tmp_path, **{"segment.bytes": 250, "index.interval.bytes": 1})
    assert log.offset_of_max_timestamp(max_offset=10) is None   # empty
    for epoch, ts in enumerate([100, 900, 200, 900, 50]):
        log.append_as_leader(batch(b"t%d" % ts, timestamp_ms=ts), leader_epoch=epoch)
    assert log.segment_base_offsets() == [0, 3]   # a 900 in each: the first segment's
    assert log.offset_of_max_timestamp(max_offset=5) == (1, 900, 1)
    assert log.offset_of_max_timestamp(max_offset=1) is None   # at or past the bound (the HW)
    log.append_as_leader(encode_batch([RecordInput(b"a", None, 10), RecordInput(b"b", None, 950),
                                       RecordInput(b"c", None, 20)]), leader_epoch=5)
    assert log.offset_of_max_timestamp(max_offset=8) == (6, 950, 5)   # the middle record of its batch


def test_offset_of_max_timestamp__log_append_time__the_batchs_first_record(tmp_path):
    clock = FakeClock(70_000)
    log = open_log(tmp_path, clock, **{"message.timestamp.type": "LogAppendTime"})
    log.append_as_leader(encode_batch([RecordInput(b"a", None, 10), RecordInput(b"b", None, 20)]), leader_epoch=3)
    assert log.offset_of_max_timestamp(max_offset=2) == (0, 70_000, 3)


def test_offset_for_timestamp__first_offset_at_or_after_target_and_none_past_end(tmp_path):
    timestamps = [100, 300, 200, 400, 400, 150, 500, 700, 600, 800]
    log = open_log(tmp_path, **{"segment.bytes": 250, "index.interval.bytes": 1})
    for ts in timestamps:
        log.append_as_leader(batch(b"t%d" % ts, timestamp_ms=ts), leader_epoch=0)
    assert len(log.segment_base_offsets()) > 2
    for target in range(0, 900, 25):
        expected = next(((o, ts, 0) for o, ts in enumerate(timestamps) if ts >= target), None)
        assert log.offset_for_timestamp(target) == expected, target
    assert log.offset_for_timestamp(801) is None
    assert log.offset_for_timestamp(750, max_offset=9) is None  # 800 is at offset 9


def test_retention_by_time__deletes_whole_expired_segments_below_hw_and_moves_log_start(tmp_path):
    clock = FakeClock(now_ms=1_000_000)
    config = {"segment.bytes": 200, "retention.ms": 10_000}
    log = open_log(tmp_path, clock, **config)
    for i in range(12):
        log.append_as_leader(batch(b"v%d" % i, timestamp_ms=1_000_000 + i * 1_000), leader_epoch=0)
    bases = log.segment_base_offsets()
    assert len(bases) >= 4
    log.update_high_watermark(log.log_end_offset)
    assert log.enforce_retention() == 0  # nothing older than 10 s yet
    clock.advance(15_500)  # now 1_015_500: records with ts < 1_005_500 are past retention
    deleted = log.enforce_retention()
    assert deleted > 0
    assert log.log_start_offset == log.segment_base_offsets()[0] == bases[deleted]
    for record in read_all(log)[:1]:
        assert record.offset == log.log_start_offset
    # every deleted segment was wholly expired, and the first kept one is not
    kept_first_segment_max_ts = max(r.timestamp_ms for r in read_all(log)
                                    if r.offset < (log.segment_base_offsets() + [10**9])[1])
    assert clock.now_ms() - kept_first_segment_max_ts <= 10_000
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    log.close()
    assert open_log(tmp_path, clock, **config).log_start_offset == bases[deleted]


def test_retention__never_deletes_segments_at_or_above_the_hw(tmp_path):
    clock = FakeClock(now_ms=1_000_000)
    log = open_log(tmp_path, clock, **{"segment.bytes": 200, "retention.ms": 1})
    for i in range(12):
        log.append_as_leader(batch(b"v%d" % i, timestamp_ms=1_000), leader_epoch=0)
    bases = log.segment_base_offsets()
    log.update_high_watermark(bases[2])  # segments 0 and 1 lie wholly below the HW
    clock.advance(10_000)
    assert log.enforce_retention() == 2
    assert log.log_start_offset == bases[2]


def test_retention_by_size__keeps_newest_segments_within_retention_bytes(tmp_path):
    log = open_log(tmp_path, **{"segment.bytes": 200, "retention.bytes": 450, "retention.ms": -1})
    for i in range(20):
        log.append_as_leader(batch(b"value-%02d" % i), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    before = log.size_bytes
    deleted = log.enforce_retention()
    assert deleted > 0 and log.size_bytes <= 450 + 200
    assert log.size_bytes < before
    assert log.log_start_offset == log.segment_base_offsets()[0]
    assert [r.offset for r in read_all(log)] == list(range(log.log_start_offset, 20))


def test_compaction__keeps_newest_value_per_key_at_its_original_offset(tmp_path):
    clock = FakeClock(now_ms=10_000)
    config = {"cleanup.policy": "compact", "segment.bytes": 300}
    log = open_log(tmp_path, clock, **config)
    writes = []
    for i in range(30):
        key = b"key-%d" % (i % 4)
        log.append_as_leader(keyed_batch([(key, b"value-%d" % i)], timestamp_ms=10_000), leader_epoch=0)
        writes.append((i, key, b"value-%d" % i))
    log.update_high_watermark(log.log_end_offset)
    active_base = log.segment_base_offsets()[-1]
    result = log.compact()
    assert result.records_removed > 0
    after = [(r.offset, r.key, r.value) for r in read_all(log)]
    cleaned = [w for w in writes if w[0] < active_base]
    latest_offset = {key: offset for offset, key, _ in cleaned}
    expected = [w for w in cleaned if latest_offset[w[1]] == w[0]] + [w for w in writes if w[0] >= active_base]
    assert after == expected
    log.close()
    assert [(r.offset, r.key, r.value) for r in read_all(open_log(tmp_path, clock, **config))] == expected


def test_compaction__tombstones_go_only_after_delete_retention_ms(tmp_path):
    clock = FakeClock(now_ms=10_000)
    config = {"cleanup.policy": "compact", "segment.bytes": 200, "delete.retention.ms": 5_000}
    log = open_log(tmp_path, clock, **config)
    log.append_as_leader(keyed_batch([(b"a", b"1"), (b"b", b"1")], timestamp_ms=10_000), leader_epoch=0)
    log.append_as_leader(keyed_batch([(b"a", None)], timestamp_ms=10_000), leader_epoch=0)
    for i in range(6):
        log.append_as_leader(keyed_batch([(b"c", b"%d" % i)], timestamp_ms=10_000), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    log.compact()
    keys = [(r.key, r.value) for r in read_all(log)]
    assert (b"a", None) in keys and (b"a", b"1") not in keys and (b"b", b"1") in keys
    clock.advance(5_001)
    log.compact()
    keys = [(r.key, r.value) for r in read_all(log)]
    assert all(k != b"a" for k, _ in keys) and (b"b", b"1") in keys


def test_compaction_plan__only_when_a_segment_became_cleanable_or_a_tombstone_is_due(tmp_path):
    clock = FakeClock(now_ms=10_000)
    log = open_log(tmp_path, clock, **{"cleanup.policy": "compact", "segment.bytes": 200,
                                       "delete.retention.ms": 5_000})
    for i in range(6):
        log.append_as_leader(keyed_batch([(b"k", b"%d" % i)], timestamp_ms=10_000), leader_epoch=0)
    assert log.plan_compaction() is None                  # nothing below the HW yet
    log.update_high_watermark(log.log_end_offset)
    plan = log.plan_compaction()
    assert plan is not None and len(plan.segments) == len(log.segment_base_offsets()) - 1
    assert log.apply_compaction(plan, log.clean(plan)).records_removed > 0
    assert log.plan_compaction() is None                  # cleaned, and nothing new
    tombstone_offset = log.log_end_offset
    log.append_as_leader(keyed_batch([(b"k", None)], timestamp_ms=10_000), leader_epoch=0)
    while log.segment_base_offsets()[-1] <= tombstone_offset:
        log.append_as_leader(keyed_batch([(b"other", b"x")], timestamp_ms=10_000), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    plan = log.plan_compaction()                          # the tombstone's segment rolled
    assert plan is not None
    log.apply_compaction(plan, log.clean(plan))
    assert (b"k", None) in [(r.key, r.value) for r in read_all(log)]
    assert log.plan_compaction() is None                  # the tombstone is not due yet
    clock.advance(5_001)
    plan = log.plan_compaction()
    assert plan is not None
    log.apply_compaction(plan, log.clean(plan))
    assert all(r.key != b"k" for r in read_all(log))


def _truncate_inside_the_plan(log):
    log.truncate_to(log.segment_base_offsets()[1] + 1)   # inside the second planned segment
    log.append_as_leader(keyed_batch([(b"k", b"divergent")]), leader_epoch=1)


@pytest.mark.parametrize("truncate", [
    _truncate_inside_the_plan,
    lambda log: log.truncate_fully_and_start_at(50),     # a follower reset below the leader's log start
], ids=["truncate_to", "truncate_fully"])
def test_compaction_apply__a_truncation_since_the_plan_voids_it(tmp_path, truncate):
    log = open_log(tmp_path, **{"cleanup.policy": "compact", "segment.bytes": 200})
    for i in range(10):
        log.append_as_leader(keyed_batch([(b"k", b"%d" % i)]), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    plan = log.plan_compaction()
    cleaned = log.clean(plan)
    truncate(log)
    expected = [(r.offset, r.value) for r in read_all(log)]
    assert log.apply_compaction(plan, cleaned).records_removed == 0
    assert [(r.offset, r.value) for r in read_all(log)] == expected


def test_compaction_plan__a_shorter_pass_keeps_the_later_tombstone_deadline(tmp_path):
    clock = FakeClock(now_ms=10_000)
    log = open_log(tmp_path, clock, **{"cleanup.policy": "compact", "segment.bytes": 200,
                                       "delete.retention.ms": 5_000})
    log.append_as_leader(keyed_batch([(b"a", b"1")], timestamp_ms=10_000), leader_epoch=0)
    while len(log.segment_base_offsets()) < 2:
        log.append_as_leader(keyed_batch([(b"b", b"1")], timestamp_ms=10_000), leader_epoch=0)
    log.append_as_leader(keyed_batch([(b"a", None)], timestamp_ms=10_000), leader_epoch=0)   # tombstone, segment 2
    while len(log.segment_base_offsets()) < 4:
        log.append_as_leader(keyed_batch([(b"c", b"1")], timestamp_ms=10_000), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    log.compact()                                          # the tombstone is kept until 15_000
    log.high_watermark = log.segment_base_offsets()[1]     # a follower's HW went down with a lagging leader's
    clock.advance(6_000)
    plan = log.plan_compaction()                           # due: plans only the first segment
    log.apply_compaction(plan, log.clean(plan))
    log.update_high_watermark(log.log_end_offset)
    plan = log.plan_compaction()
    assert plan is not None                                # the tombstone's deadline was not forgotten
    log.apply_compaction(plan, log.clean(plan))
    assert all(r.key != b"a" for r in read_all(log))


def test_compaction__keyless_record_on_compacted_topic__invalid_record(tmp_path):
    log = open_log(tmp_path, **{"cleanup.policy": "compact"})
    with pytest.raises(InvalidRecord):
        log.append_as_leader(batch(b"no key", key=None), leader_epoch=0)
    assert log.log_end_offset == 0


def test_compaction__keyless_records_in_a_batch__each_named_with_kafkas_message(tmp_path):
    log = open_log(tmp_path / "facts-3", **{"cleanup.policy": "compact"})
    records = [RecordInput(b"v", key, 1_000) for key in (b"a", None, b"c", None)]
    with pytest.raises(InvalidRecord) as refused:
        log.append_as_leader(encode_batch(records), leader_epoch=0)
    why = "Compacted topic cannot accept message without key in topic partition facts-3"
    assert refused.value.record_errors == ((1, why), (3, why))
    assert refused.value.message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the first "
        f"three errors at most: [RecordError(batchIndex=1, message='{why}'), RecordError(batchIndex=3, "
        f"message='{why}')]")
    assert pickle.loads(pickle.dumps(refused.value)).record_errors == refused.value.record_errors
    assert log.log_end_offset == 0


def test_compaction__interrupted_swap_is_completed_at_open(tmp_path):
    config = {"cleanup.policy": "compact", "segment.bytes": 200}
    log = open_log(tmp_path, **config)
    for i in range(10):
        log.append_as_leader(keyed_batch([(b"k", b"%d" % i)]), leader_epoch=0)
    log.close()
    first = sorted(tmp_path.glob("*.log"))[0]
    stray = first.with_name(first.name + ".cleaned")
    stray.write_bytes(b"half written")
    log = open_log(tmp_path, **config)
    assert not stray.exists()
    assert [r.offset for r in read_all(log)] == list(range(10))


def test_truncation_then_append__reuses_the_cut_offsets(tmp_path):
    log = open_log(tmp_path, **{"segment.bytes": 250})
    for i in range(10):
        log.append_as_leader(batch(b"old-%d" % i), leader_epoch=0)
    log.update_high_watermark(6)
    log.truncate_to(6)
    assert (log.log_end_offset, log.high_watermark) == (6, 6)
    assert log.append_as_leader(batch(b"new-6", b"new-7"), leader_epoch=1).base_offset == 6
    values = [r.value for r in read_all(log)]
    assert values == [b"old-%d" % i for i in range(6)] + [b"new-6", b"new-7"]
    log.close()
    log = open_log(tmp_path, **{"segment.bytes": 250})
    assert [r.value for r in read_all(log)] == values
    assert log.epochs.entries() == [(0, 0), (1, 6)]


def test_truncation__inside_a_batch_cuts_the_whole_batch(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"0", b"1"), leader_epoch=0)
    log.append_as_leader(batch(b"2", b"3", b"4"), leader_epoch=0)
    log.truncate_to(3)
    assert log.log_end_offset == 2


def test_end_offset_for_epoch__follows_kip_101_on_a_log_with_several_epochs(tmp_path):
    log = open_log(tmp_path)
    epoch_of_batch = [1, 1, 2, 4, 4, 4, 7]   # epochs 0, 3, 5, 6 never led
    for i, epoch in enumerate(epoch_of_batch):
        log.append_as_leader(batch(b"a%d" % i, b"b%d" % i), leader_epoch=epoch)
    assert log.epochs.entries() == [(1, 0), (2, 4), (4, 6), (7, 12)]
    assert log.end_offset_for_epoch(7) == (7, 14)      # latest: the LEO
    assert log.end_offset_for_epoch(4) == (4, 12)      # ends where epoch 7 starts
    assert log.end_offset_for_epoch(5) == (4, 12)      # unknown: largest epoch below it
    assert log.end_offset_for_epoch(2) == (2, 6)
    assert log.end_offset_for_epoch(0) == (0, 0)       # before the first: its start
    assert log.end_offset_for_epoch(9) == (-1, -1)     # newer than any known
    # A follower that led epoch 3 on top of epoch 2 finds where it diverged:
    follower = open_log(tmp_path / "follower")
    follower.append_as_follower(log.read(0, 1 << 20, max_offset=6))
    follower.append_as_leader(batch(b"divergent"), leader_epoch=3)
    assert follower.epochs.entries() == [(1, 0), (2, 4), (3, 6)]
    _, truncate_at = log.end_offset_for_epoch(follower.latest_epoch)
    follower.truncate_to(truncate_at)
    offset = follower.log_end_offset
    while offset < log.log_end_offset:
        follower.append_as_follower(log.read(offset, 1 << 20))
        offset = follower.log_end_offset
    assert follower.epochs.entries() == log.epochs.entries()
    assert follower.read(0, 1 << 20) == log.read(0, 1 << 20)


def test_roll__by_segment_ms_uses_the_first_batch_timestamp(tmp_path):
    log = open_log(tmp_path, **{"segment.ms": 60_000})
    log.append_as_leader(batch(b"a", timestamp_ms=1_000), leader_epoch=0)
    log.append_as_leader(batch(b"b", timestamp_ms=61_000), leader_epoch=0)
    assert log.segment_base_offsets() == [0]
    log.append_as_leader(batch(b"c", timestamp_ms=61_001), leader_epoch=0)
    assert log.segment_base_offsets() == [0, 2]


def test_checkpoint__hw_and_log_start_survive_reopen(tmp_path):
    log = open_log(tmp_path)
    for i in range(5):
        log.append_as_leader(batch(b"v"), leader_epoch=0)
    log.update_high_watermark(3)
    log.checkpoint()
    log.close()
    log = open_log(tmp_path)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (0, 3, 5)


def test_follower_fetch_below_leader_log_start__truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"old"), leader_epoch=0)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    leader_batch = encode_batch([RecordInput(b"x", b"k", 5)], base_offset=100, partition_leader_epoch=3)
    log.append_as_follower(leader_batch)
    assert log.log_end_offset == 101 and log.epochs.entries() == [(3, 100)]
    log.close()
    assert open_log(tmp_path).log_start_offset == 100


def test_log_directory__a_second_opener_is_refused_until_the_first_closes(tmp_path):
    first = open_log(tmp_path)
    with pytest.raises(KafkaStorageError):
        open_log(tmp_path)
    first.close()
    open_log(tmp_path).close()


def test_clean_shutdown__next_open_skips_recovery__a_crash_does_not(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(b"a", b"b"), leader_epoch=0)
    log.update_high_watermark(2)
    log.close(clean_shutdown=True)
    reopened = open_log(tmp_path)
    assert reopened.opened_after_clean_shutdown
    assert (reopened.log_end_offset, reopened.high_watermark) == (2, 2)
    reopened.append_as_leader(batch(b"c"), leader_epoch=0)
    reopened._unlock()   # a crash: no close, no marker
    crashed = open_log(tmp_path)
    assert not crashed.opened_after_clean_shutdown and crashed.log_end_offset == 3


def _found_by_reading_the_file(segment, offset):
    return next(((p, h.base_offset, h.last_offset) for p, h in segment._scan(0) if h.last_offset >= offset), None)


def _lookups_agree_with_the_file(log):
    for segment in log._segments:
        for offset in range(segment.base_offset - 1, segment.next_offset + 2):
            found = segment.find_batch(offset)
            assert (None if found is None else (found[0], found[1].base_offset, found[1].last_offset)) \
                == _found_by_reading_the_file(segment, offset), offset


def test_lookup_at_the_tail__the_batch_the_file_holds__across_index_entries_truncation_and_reopen(tmp_path):
    config = {"segment.bytes": 3_000, "index.interval.bytes": 200}
    log = open_log(tmp_path, **config)
    for i in range(60):
        log.append_as_leader(batch(*[b"v%d-%d" % (i, j) * (1 + i % 7) for j in range(1 + i % 4)]), leader_epoch=0)
    assert len(log._segments) > 2 and log.active_segment.index_entry_count > 2
    _lookups_agree_with_the_file(log)
    log.update_high_watermark(log.log_end_offset - 9)
    log.truncate_to(log.log_end_offset - 9)
    _lookups_agree_with_the_file(log)
    log.append_as_leader(batch(b"after truncation", b"x"), leader_epoch=1)
    _lookups_agree_with_the_file(log)
    log.close()
    log = open_log(tmp_path, **config)
    _lookups_agree_with_the_file(log)
    log.append_as_leader(batch(b"after reopen"), leader_epoch=1)
    _lookups_agree_with_the_file(log)


@pytest.mark.parametrize("reopened", [False, True])
def test_lookup_at_the_tail__reads_no_file(tmp_path, monkeypatch, reopened):
    """A follower or caught-up consumer reads at the log end: the batch it asks for
    is found in memory (one pread of the batch bytes, none for headers); so is the
    last batch of an older segment, also after the log is opened again (older
    segments open trusted, the active one is recovered)."""
    log = open_log(tmp_path, **{"segment.bytes": 8_000})
    for i in range(200):
        log.append_as_leader(batch(b"x" * 100), leader_epoch=0)
    if reopened:
        log.close()
        log = open_log(tmp_path, **{"segment.bytes": 8_000})
    first_segment_last = log._segments[0].next_offset - 1
    assert len(log._segments) > 2
    real_pread = os.pread
    for offset in (first_segment_last, 199):
        preads = []
        monkeypatch.setattr(os, "pread", lambda *args: preads.append(args) or real_pread(*args))
        data = log.read(offset, 1 << 20, None)
        assert read_header(data, 0).base_offset == offset and len(preads) == 1
