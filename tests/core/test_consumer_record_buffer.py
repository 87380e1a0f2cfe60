"""The consumer's per-partition buffer: records taken by slices, in offset order,
those below the position dropped, the limit kept across chunks."""

import pytest

from rafka.client.consumer import _RecordBuffer
from rafka.core.records import Record

pytestmark = pytest.mark.core


def records(first: int, count: int) -> list[Record]:
    return [Record(offset, 0, None, b"v%d" % offset) for offset in range(first, first + count)]


def test_take__limits_across_chunks_and_counts_what_is_left():
    buffer = _RecordBuffer()
    buffer.extend(records(0, 3))
    buffer.extend([])
    buffer.extend(records(3, 4))
    assert len(buffer) == 7
    assert [r.offset for r in buffer.take(5, 0)] == [0, 1, 2, 3, 4]
    assert len(buffer) == 2
    assert [r.offset for r in buffer.take(10, 5)] == [5, 6]
    assert len(buffer) == 0 and not buffer and buffer.take(10, 7) == []


def test_take__drops_records_below_the_position_and_clear_empties():
    buffer = _RecordBuffer()
    buffer.extend(records(10, 5))
    assert [r.offset for r in buffer.take(2, 12)] == [12, 13]
    assert len(buffer) == 1
    buffer.extend(records(15, 2))
    buffer.clear()
    assert len(buffer) == 0 and buffer.take(5, 0) == []
