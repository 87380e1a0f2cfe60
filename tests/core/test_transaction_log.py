"""__transaction_state records and the transactional id -> partition mapping, as
Kafka's: bytes assembled by hand from TransactionLogKey.json and
TransactionLogValue.json, round trips of both value versions, typed errors for
records that break the schema, and loading a log into a cache."""

import struct

import pytest
from hypothesis import given, strategies as st

from rafka.core.errors import CorruptCoordinatorRecord
from rafka.core.offsets_schema import partition_for_group
from rafka.core.transaction_log import (TxnKey, TxnLogValue, UnknownTxnKey, decode_key, decode_value, encode_key,
                                        encode_value, metadata_of, partition_for, replay_into, value_of)
from rafka.core.transaction_state import TxnState, new_transaction_metadata

pytestmark = pytest.mark.core
S = TxnState
ONGOING = TxnLogValue(producer_id=4001, producer_epoch=3, txn_timeout_ms=60_000, state=S.ONGOING,
                      topic_partitions=frozenset({("out", 0), ("out", 2), ("__consumer_offsets", 7)}),
                      txn_last_update_timestamp_ms=1_700_000_000_500, txn_start_timestamp_ms=1_700_000_000_000)


def test_partition_for__is_the_groups_rule():
    # Same Java vectors as the group mapping (test_offsets_schema): one function serves both.
    for tid in ("billing", "polygenelubricants", "\U0001F600emoji", "txn-1"):
        assert partition_for(tid, 50) == partition_for_group(tid, 50)
    assert partition_for("billing", 50) == 9 and partition_for("polygenelubricants", 50) == 0


def test_key_v0__kafkas_bytes():
    assert encode_key(TxnKey("txn-1")) == struct.pack(">h", 0) + b"\x00\x05txn-1"
    assert decode_key(encode_key(TxnKey("txn-1"))) == TxnKey("txn-1")


def test_value_v0__kafkas_bytes():
    expected = (struct.pack(">h", 0) + struct.pack(">qhib", 4001, 3, 60_000, 1)
                + struct.pack(">i", 2)                                           # two topics, sorted
                + b"\x00\x12__consumer_offsets" + struct.pack(">ii", 1, 7)
                + b"\x00\x03out" + struct.pack(">iii", 2, 0, 2)
                + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000))
    assert encode_value(ONGOING, version=0) == expected
    assert decode_value(expected) == ONGOING


def test_value_v1__kafkas_flexible_bytes_with_tagged_fields():
    value = TxnLogValue(producer_id=4001, producer_epoch=0, txn_timeout_ms=60_000, state=S.COMPLETE_COMMIT,
                        topic_partitions=frozenset({("out", 1)}), txn_last_update_timestamp_ms=9,
                        txn_start_timestamp_ms=5, previous_producer_id=4000, next_producer_id=-1,
                        client_transaction_version=2)
    expected = (struct.pack(">h", 1) + struct.pack(">qhib", 4001, 0, 60_000, 4)
                + b"\x02"                                    # compact array: 1 topic + 1
                + b"\x04out" + b"\x02" + struct.pack(">i", 1) + b"\x00"   # topic, ids [1], no tags
                + struct.pack(">qq", 9, 5)
                + b"\x02"                                    # two tagged fields, ascending
                + b"\x00\x08" + struct.pack(">q", 4000)      # tag 0: previous producer id
                + b"\x02\x02" + struct.pack(">h", 2))        # tag 2: client transaction version
    assert encode_value(value) == expected
    assert decode_value(expected) == value


def test_value_v1__defaults_are_not_written_and_empty_writes_null_partitions():
    empty = TxnLogValue(producer_id=7, producer_epoch=0, txn_timeout_ms=1000, state=S.EMPTY,
                        topic_partitions=frozenset(), txn_last_update_timestamp_ms=1, txn_start_timestamp_ms=-1)
    data = encode_value(empty)
    assert data == struct.pack(">h", 1) + struct.pack(">qhib", 7, 0, 1000, 0) + b"\x00" + struct.pack(">qq", 1, -1) + b"\x00"
    assert decode_value(data) == empty
    assert encode_value(empty, version=0)[17:21] == struct.pack(">i", -1)   # v0's null array


def test_value_v1__unknown_tagged_field_is_skipped():
    data = encode_value(ONGOING)
    assert data.endswith(b"\x00")
    with_unknown = data[:-1] + b"\x01" + b"\x09\x03abc"   # one tagged field, tag 9, 3 bytes
    assert decode_value(with_unknown) == ONGOING


def test_value__empty_state_partitions_are_ignored_when_read():
    # Kafka's readTxnRecordValue adds partitions only when the state is not Empty.
    data = bytearray(encode_value(ONGOING, version=0))
    data[16] = S.EMPTY.id    # state byte after version(2) id(8) epoch(2) timeout(4)
    assert decode_value(bytes(data)).topic_partitions == frozenset()


def test_tombstone__none_both_ways():
    assert encode_value(None) is None and decode_value(None) is None


@pytest.mark.parametrize("version", [0, 1])
@given(producer_id=st.integers(0, 2**63 - 1), epoch=st.integers(0, 32767), timeout_ms=st.integers(1, 2**31 - 1),
       state=st.sampled_from([s for s in S if s is not S.EMPTY]),
       partitions=st.frozensets(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)), max_size=8),
       stamps=st.tuples(st.integers(-1, 2**62), st.integers(-1, 2**62)))
def test_value__round_trip_any_value(version, producer_id, epoch, timeout_ms, state, partitions, stamps):
    value = TxnLogValue(producer_id, epoch, timeout_ms, state, partitions, *stamps)
    assert decode_value(encode_value(value, version=version)) == value


@given(previous=st.integers(-1, 2**63 - 1), following=st.integers(-1, 2**63 - 1), tv=st.integers(0, 32767))
def test_value_v1__round_trip_tagged_fields(previous, following, tv):
    value = TxnLogValue(1, 0, 10, S.PREPARE_COMMIT, frozenset({("t", 0)}), 1, 1, previous, following, tv)
    assert decode_value(encode_value(value)) == value


def test_value_v0__refuses_tagged_fields_it_cannot_carry():
    with pytest.raises(ValueError):
        encode_value(TxnLogValue(1, 0, 10, S.ONGOING, frozenset({("t", 0)}), 1, 1, previous_producer_id=0), version=0)


@pytest.mark.parametrize("why, data", [
    ("short", encode_value(ONGOING)[:-3]),
    ("trailing", encode_value(ONGOING) + b"\x00"),
    ("version", struct.pack(">h", 2) + encode_value(ONGOING)[2:]),
    ("state", encode_value(ONGOING)[:16] + b"\x08" + encode_value(ONGOING)[17:]),
    ("null partitions outside Empty", struct.pack(">h", 0) + struct.pack(">qhib", 1, 0, 10, 1)
     + struct.pack(">i", -1) + struct.pack(">qq", 1, 1)),
    ("not utf-8", struct.pack(">h", 0) + struct.pack(">qhib", 1, 0, 10, 1) + struct.pack(">i", 1)
     + b"\x00\x02\xff\xfe" + struct.pack(">ii", 1, 0) + struct.pack(">qq", 1, 1)),
    ("huge count", struct.pack(">h", 0) + struct.pack(">qhib", 1, 0, 10, 1) + struct.pack(">i", 2**30)),
    ("tag size", encode_value(ONGOING)[:-1] + b"\x01\x00\x04" + b"\x00" * 4),
])
def test_value__breaking_the_schema__corrupt_coordinator_record(why, data):
    with pytest.raises(CorruptCoordinatorRecord) as raised:
        decode_value(data)
    assert raised.value.retriable is False


def test_key__no_key_or_short__corrupt_and_unknown_version__skipped():
    with pytest.raises(CorruptCoordinatorRecord):
        decode_key(None)
    with pytest.raises(CorruptCoordinatorRecord):
        decode_key(struct.pack(">h", 0) + b"\x00\x09txn")
    with pytest.raises(CorruptCoordinatorRecord):
        decode_key(encode_key(TxnKey("t")) + b"x")
    assert decode_key(struct.pack(">h", 1) + b"whatever") == UnknownTxnKey(1)


def test_load__latest_record_wins_tombstone_removes_unknown_key_skipped():
    cache: dict = {}
    later = TxnLogValue(4001, 3, 60_000, S.PREPARE_COMMIT, ONGOING.topic_partitions, 1_700_000_001_000,
                        ONGOING.txn_start_timestamp_ms)
    log = [(TxnKey("a"), ONGOING), (TxnKey("b"), ONGOING), (UnknownTxnKey(5), None), (TxnKey("a"), later),
           (TxnKey("b"), None)]
    for key, value in log:
        replay_into(cache, decode_key(encode_key(key)) if isinstance(key, TxnKey) else key,
                    decode_value(encode_value(value)))
    assert set(cache) == {"a"}
    loaded = cache["a"]
    assert (loaded.state, loaded.producer_id, loaded.producer_epoch, loaded.topic_partitions) == (
        S.PREPARE_COMMIT, 4001, 3, ONGOING.topic_partitions)
    assert loaded.pending_state is None and loaded.last_producer_epoch == -1


@pytest.mark.parametrize("state", [S.DEAD, S.PREPARE_EPOCH_FENCE])
def test_load__a_state_never_written__corrupt(state):
    value = TxnLogValue(1, 0, 10, state, frozenset({("t", 0)}), 1, 1)
    with pytest.raises(CorruptCoordinatorRecord):
        replay_into({}, TxnKey("a"), decode_value(encode_value(value)))


def test_value_of_a_transit__loads_back_as_the_completed_metadata():
    metadata = new_transaction_metadata("t", producer_id=10, txn_timeout_ms=5000, now_ms=100)
    prepared = metadata.prepare_increment_producer_epoch(txn_timeout_ms=5000, expected_epoch=None, now_ms=200)
    completed = prepared.metadata.complete_transition_to(prepared.transit)
    loaded = metadata_of("t", decode_value(encode_value(value_of(prepared.transit))))
    assert loaded == completed
