"""Offset ranges of bounded reads: specs, clamping below the HW, micro-batch caps, batch ids."""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from rafka.core.errors import InvalidRequest, UnknownTopicOrPartition
from rafka.core.offset_ranges import (OffsetRange, PartitionOffsets, batch_id, plan_micro_batch, plan_ranges,
                                      resolve)

pytestmark = pytest.mark.core

SNAPSHOT = {0: PartitionOffsets(0, 100), 1: PartitionOffsets(20, 50), 2: PartitionOffsets(0, 0)}


def test_resolve__named_dict_timestamp_and_committed_specs():
    assert resolve("earliest", "earliest", SNAPSHOT) == {0: 0, 1: 20, 2: 0}
    assert resolve("latest", "earliest", SNAPSHOT) == {0: 100, 1: 50, 2: 0}
    assert resolve({0: 7, 1: -2}, "latest", SNAPSHOT) == {0: 7, 1: 20, 2: 0}
    found = {(0, 1_000): 42, (1, 1_000): None}
    assert resolve({"timestamp": {0: 1_000, 1: 1_000}}, "earliest", SNAPSHOT,
                   offsets_for_time=lambda p, ms: found[(p, ms)]) == {0: 42, 1: 50, 2: 0}
    assert resolve("committed", "latest", SNAPSHOT, committed={0: 30}) == {0: 30, 1: 50, 2: 0}


def test_resolve__bad_specs_are_refused():
    with pytest.raises(UnknownTopicOrPartition):
        resolve({5: 1}, "earliest", SNAPSHOT)
    with pytest.raises(InvalidRequest):
        resolve({0: -5}, "earliest", SNAPSHOT)
    with pytest.raises(ValueError):
        resolve("committed", "earliest", SNAPSHOT)
    with pytest.raises(ValueError):
        resolve("smallest", "earliest", SNAPSHOT)


def test_plan_ranges__clamped_into_log_start_and_hw():
    ranges = plan_ranges("t", SNAPSHOT, {0: 10, 1: 0, 2: 0}, {0: 500, 1: 30, 2: 0})
    assert ranges == [OffsetRange("t", 0, 10, 100), OffsetRange("t", 1, 20, 30), OffsetRange("t", 2, 0, 0)]
    with pytest.raises(InvalidRequest, match="above the high watermark"):
        plan_ranges("t", SNAPSHOT, {0: 101, 1: 20, 2: 0}, {0: 101, 1: 20, 2: 0})


def test_plan_micro_batch__capped_shared_by_lag_every_lagging_partition_progresses():
    ranges = plan_micro_batch("t", SNAPSHOT, {0: 0, 1: 20, 2: 0}, 26)
    assert sum(r.count for r in ranges) == 26
    by_partition = {r.partition: r for r in ranges}
    assert by_partition[0].count > by_partition[1].count >= 1 and by_partition[2].count == 0
    assert plan_micro_batch("t", SNAPSHOT, {0: 0, 1: 20, 2: 0}, None)[0].end == 100


@given(st.dictionaries(st.integers(0, 5), st.tuples(st.integers(0, 50), st.integers(0, 200)), min_size=1),
       st.integers(1, 300))
@example(parts={0: (0, 1), 1: (0, 1), 2: (0, 4)}, cap=1)   # shares once rounded past the budget
def test_plan_micro_batch__property_within_hw_and_cap(parts, cap):
    snapshot = {p: PartitionOffsets(0, hw) for p, (_, hw) in parts.items()}
    starts = {p: min(start, parts[p][1]) for p, (start, _) in parts.items()}
    ranges = plan_micro_batch("t", snapshot, starts, cap)
    lagging = sum(1 for p in parts if snapshot[p].end_offset > starts[p])
    total_lag = sum(snapshot[p].end_offset - starts[p] for p in parts)
    assert sum(r.count for r in ranges) == min(total_lag, max(cap, lagging))
    for r in ranges:
        assert starts[r.partition] == r.start <= r.end <= snapshot[r.partition].end_offset
        if snapshot[r.partition].end_offset > r.start:
            assert r.count >= 1


def test_batch_id__depends_on_the_ranges_only():
    a = [OffsetRange("t", 1, 5, 9), OffsetRange("t", 0, 0, 3)]
    assert batch_id(a) == batch_id(list(reversed(a)))
    assert batch_id(a) != batch_id([OffsetRange("t", 1, 5, 10), OffsetRange("t", 0, 0, 3)])
