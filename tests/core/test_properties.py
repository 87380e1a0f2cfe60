"""Property-based tests: record batches round-trip, and the partition log behaves as
a simple in-memory list of batches under append / read / truncate / reopen."""

import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rafka.core.clock import FakeClock
from rafka.core.config import TopicConfig
from rafka.core.errors import RecordListTooLarge
from rafka.core.log import PartitionLog
from rafka.core.records import Record, RecordInput, decode_records, encode_batch

pytestmark = pytest.mark.core

optional_bytes = st.none() | st.binary(max_size=300)
record_inputs = st.builds(
    RecordInput,
    value=optional_bytes,
    key=optional_bytes,
    timestamp_ms=st.integers(min_value=0, max_value=2**41),
    headers=st.lists(st.tuples(st.text(max_size=10), optional_bytes), max_size=3).map(tuple),
)


@given(inputs=st.lists(record_inputs, min_size=1, max_size=20),
       base_offset=st.integers(min_value=0, max_value=2**62),
       epoch=st.integers(min_value=-1, max_value=2**31 - 1))
def test_encode_decode__round_trips_every_field(inputs, base_offset, epoch):
    data = encode_batch(inputs, base_offset=base_offset, partition_leader_epoch=epoch)
    assert decode_records(data) == [
        Record(base_offset + i, r.timestamp_ms, r.key, r.value, r.headers) for i, r in enumerate(inputs)]


operations = st.lists(st.one_of(
    st.tuples(st.just("append"), st.lists(st.binary(min_size=0, max_size=120), min_size=1, max_size=6)),
    st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=80)),
    st.tuples(st.just("reopen"), st.none()),
    st.tuples(st.just("read"), st.integers(min_value=0, max_value=80)),
), max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations, segment_bytes=st.sampled_from([200, 700, 1 << 20]))
def test_log__append_read_truncate_reopen__matches_an_in_memory_model(ops, segment_bytes):
    directory = tempfile.mkdtemp()
    config = TopicConfig.from_dict({"segment.bytes": segment_bytes, "index.interval.bytes": 64})
    log = PartitionLog(directory, config, FakeClock())
    model: list[list[tuple[int, bytes]]] = []   # batches of (offset, value)
    epoch = 0
    try:
        for op, arg in ops:
            if op == "append":
                base = model[-1][-1][0] + 1 if model else 0
                data = encode_batch([RecordInput(v, b"k", 5) for v in arg])
                if len(data) > segment_bytes:   # never fits a segment: refused, nothing written
                    with pytest.raises(RecordListTooLarge):
                        log.append_as_leader(data, leader_epoch=epoch)
                    continue
                result = log.append_as_leader(data, leader_epoch=epoch)
                assert result.base_offset == base
                model.append([(base + i, v) for i, v in enumerate(arg)])
            elif op == "truncate":
                log.truncate_to(arg)
                model = [b for b in model if b[-1][0] < arg]
                epoch += 1
            elif op == "reopen":
                log.close()
                log = PartitionLog(directory, config, FakeClock())
            elif op == "read":
                flat = [r for b in model for r in b]
                if arg > len(flat):
                    continue
                data = log.read(arg, 1 << 20)
                got = [(r.offset, r.value) for r in decode_records(data)]
                holding = next((b for b in model if b[-1][0] >= arg), None)
                if holding is None:
                    assert got == []
                else:
                    assert got[0] == holding[0] and got == flat[flat.index(holding[0]):][:len(got)]
            flat = [r for b in model for r in b]
            assert log.log_end_offset == len(flat)
        flat = [r for b in model for r in b]
        log.close()
        log = PartitionLog(directory, config, FakeClock())
        offset = 0
        records = []
        while offset < log.log_end_offset:
            chunk = decode_records(log.read(offset, 1 << 30))
            records.extend(chunk)
            offset = chunk[-1].offset + 1
        assert [(r.offset, r.value) for r in records] == flat
    finally:
        log.close()
        shutil.rmtree(directory)
