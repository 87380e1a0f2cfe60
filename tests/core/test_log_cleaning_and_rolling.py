"""When the log cleaner cleans and when the active segment rolls, by the topic
configs Kafka decides them with: min.cleanable.dirty.ratio (LogCleanerManager's
dirty ratio over the cleanable range), max.compaction.lag.ms (KIP-354),
segment.ms with segment.jitter.ms (checked on append, as UnifiedLog does), and
cleanup.policy=compact,delete. Each on a real directory and a fake clock."""

import random

import pytest

from rafka.core.clock import FakeClock
from rafka.core.config import TopicConfig
from rafka.core.log import PartitionLog

from tests.core.helpers import batch, keyed_batch
from tests.core.test_log import read_all

pytestmark = pytest.mark.core
NOW_MS = 1_700_000_000_000


def open_log(path, clock, rng=None, **config):
    return PartitionLog(path, TopicConfig.from_dict(config), clock, rng=rng)


def one_batch_segments_log(path, clock, **config):
    """A compacted log in which every segment holds exactly one batch of the same
    size, so byte ratios are segment counts."""
    size_bytes = len(keyed_batch([(b"k00", b"v")], timestamp_ms=NOW_MS))
    return open_log(path, clock, **{"cleanup.policy": "compact", "segment.bytes": size_bytes, **config})


def append_distinct_keys(log, first, count):
    for i in range(first, first + count):
        log.append_as_leader(keyed_batch([(b"k%02d" % i, b"v")], timestamp_ms=NOW_MS), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)


def append_updates(log, key, count, timestamp_ms=NOW_MS):
    """`count` batches, each a new value of `key`, all at `timestamp_ms`."""
    for i in range(count):
        log.append_as_leader(keyed_batch([(key, b"%d" % i)], timestamp_ms=timestamp_ms), leader_epoch=0)


def clean_if_due(log):
    plan = log.plan_compaction()
    if plan is None:
        return False
    log.apply_compaction(plan, log.clean(plan))
    return True


def test_cleaner__dirty_ratio_below_or_at_min_cleanable__skipped_above__cleaned(tmp_path):
    clock = FakeClock(NOW_MS)
    log = one_batch_segments_log(tmp_path, clock, **{"min.cleanable.dirty.ratio": "0.5"})
    append_distinct_keys(log, 0, 5)              # 4 sealed segments below the HW, all dirty: ratio 1
    assert clean_if_due(log)
    append_distinct_keys(log, 5, 3)              # 3 dirty sealed segments over 4 clean: 3/7
    assert log.plan_compaction() is None
    append_distinct_keys(log, 8, 1)              # 4/8: at the ratio, which Kafka does not clean (> only)
    assert log.plan_compaction() is None
    append_distinct_keys(log, 9, 1)              # 5/9: above it
    plan = log.plan_compaction()
    assert plan is not None and plan.next_base_offset == log.segment_base_offsets()[-1]


def test_cleaner__min_cleanable_dirty_ratio_zero__any_dirty_segment_is_cleaned(tmp_path):
    clock = FakeClock(NOW_MS)
    log = one_batch_segments_log(tmp_path, clock, **{"min.cleanable.dirty.ratio": "0"})
    append_distinct_keys(log, 0, 9)
    assert clean_if_due(log)
    assert log.plan_compaction() is None         # nothing dirty: nothing to do
    append_distinct_keys(log, 9, 1)              # 1 dirty sealed segment over 8 clean
    assert log.plan_compaction() is not None


def test_cleaner__max_compaction_lag_passed__cleaned_whatever_the_ratio(tmp_path):
    clock = FakeClock(NOW_MS)
    log = open_log(tmp_path, clock, **{"cleanup.policy": "compact", "segment.bytes": 200,
                                       "min.cleanable.dirty.ratio": "1", "max.compaction.lag.ms": "60000"})
    append_updates(log, b"k", 10)
    log.update_high_watermark(log.log_end_offset)
    assert len(log.segment_base_offsets()) > 2
    assert log.plan_compaction() is None         # ratio 1 is never exceeded; the lag has not passed
    clock.advance(60_000)
    assert log.plan_compaction() is None         # the oldest dirty record is exactly max.compaction.lag.ms old
    clock.advance(1)
    plan = log.plan_compaction()
    assert plan is not None
    assert log.apply_compaction(plan, log.clean(plan)).records_removed > 0
    assert log.plan_compaction() is None         # cleaned: nothing dirty is left to force


def test_roll__segment_ms__the_first_record_older_than_it_rolls_on_append(tmp_path):
    log = open_log(tmp_path, FakeClock(NOW_MS), **{"segment.ms": "60000"})
    log.append_as_leader(batch(b"a", timestamp_ms=NOW_MS), leader_epoch=0)
    log.append_as_leader(batch(b"b", timestamp_ms=NOW_MS + 60_000), leader_epoch=0)
    assert log.segment_base_offsets() == [0]
    log.append_as_leader(batch(b"c", timestamp_ms=NOW_MS + 60_001), leader_epoch=0)
    assert log.segment_base_offsets() == [0, 2]


def test_roll__segment_jitter_ms__rolls_earlier_by_kafkas_random_jitter(tmp_path):
    jitter_ms = random.Random(7).randrange(10_000)   # Kafka: random % min(segment.jitter.ms, segment.ms)
    assert jitter_ms > 0
    log = open_log(tmp_path, FakeClock(NOW_MS), random.Random(7),
                   **{"segment.ms": "60000", "segment.jitter.ms": "10000"})
    log.append_as_leader(batch(b"a", timestamp_ms=NOW_MS), leader_epoch=0)
    log.append_as_leader(batch(b"b", timestamp_ms=NOW_MS + 60_000 - jitter_ms), leader_epoch=0)
    assert log.segment_base_offsets() == [0]
    log.append_as_leader(batch(b"c", timestamp_ms=NOW_MS + 60_000 - jitter_ms + 1), leader_epoch=0)
    assert log.segment_base_offsets() == [0, 2]


def test_roll__compacted_topic__rolls_by_max_compaction_lag_so_its_records_become_cleanable(tmp_path):
    clock = FakeClock(NOW_MS)
    config = {"cleanup.policy": "compact", "max.compaction.lag.ms": "5000"}
    log = open_log(tmp_path, clock, **config)
    log.append_as_leader(keyed_batch([(b"k", b"1")], timestamp_ms=NOW_MS), leader_epoch=0)
    log.append_as_leader(keyed_batch([(b"k", b"2")], timestamp_ms=NOW_MS + 5_001), leader_epoch=0)
    assert log.segment_base_offsets() == [0, 1]
    not_compacted = open_log(tmp_path / "delete", clock, **{**config, "cleanup.policy": "delete"})
    not_compacted.append_as_leader(batch(b"1", timestamp_ms=NOW_MS), leader_epoch=0)
    not_compacted.append_as_leader(batch(b"2", timestamp_ms=NOW_MS + 5_001), leader_epoch=0)
    assert not_compacted.segment_base_offsets() == [0]


def test_roll__no_append__no_roll_however_old_the_segment(tmp_path):
    clock = FakeClock(NOW_MS)
    log = open_log(tmp_path, clock, **{"segment.ms": "1000"})
    log.append_as_leader(batch(b"a", timestamp_ms=NOW_MS), leader_epoch=0)
    clock.advance(3_600_000)
    assert log.enforce_retention() == 0 and log.plan_compaction() is None
    assert log.segment_base_offsets() == [0]     # Kafka rolls on append only


def test_cleanup_policy_compact_delete__retention_deletes_and_the_cleaner_compacts(tmp_path):
    clock = FakeClock(NOW_MS)
    log = open_log(tmp_path, clock, **{"cleanup.policy": "compact,delete", "segment.bytes": 200,
                                       "retention.ms": "60000", "min.cleanable.dirty.ratio": "0.5"})
    append_updates(log, b"old", 6)
    clock.advance(120_000)
    append_updates(log, b"new", 6, timestamp_ms=NOW_MS + 120_000)
    log.update_high_watermark(log.log_end_offset)
    assert log.enforce_retention() > 0           # the expired segments go, as with cleanup.policy=delete
    assert all(r.key == b"new" for r in read_all(log))
    plan = log.plan_compaction()
    assert plan is not None
    assert log.apply_compaction(plan, log.clean(plan)).records_removed > 0
    kept = [(r.key, r.value) for r in read_all(log)]
    assert kept.count((b"new", b"5")) == 1 and len(kept) < 6
