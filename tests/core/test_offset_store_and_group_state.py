"""Committed offsets (handlers return records, replay applies them) and the group
state table with Kafka's commit rule."""

import pytest

from rafka.core.clock import FakeClock
from rafka.core.errors import (CoordinatorNotAvailable, IllegalGeneration, InvalidRequest,
                               OffsetMetadataTooLarge, RebalanceInProgress, UnknownMemberId)
from rafka.core.group_state import (TRANSITIONS, GroupEvent, GroupState, IllegalTransition, next_state,
                                    validate_offset_commit)
from rafka.core.offset_store import OffsetCommit, OffsetStore, Retention
from rafka.core.offsets_schema import OffsetKey, OffsetValue, decode_key, decode_value, encode_key, encode_value

pytestmark = pytest.mark.core
DAY_MS = 24 * 3600 * 1000


def committed(store, result):
    """What the coordinator does once the records are below the HW: replay them."""
    for key, value in result.records:
        store.replay(key, value)
    return result.response


def test_commit__records_then_replay__fetch_returns_the_next_offset_to_read():
    store, clock = OffsetStore(), FakeClock()
    result = store.handle_commit("billing", {("orders", 0): OffsetCommit(42, 3, "m")}, clock.now_ms())
    assert store.fetch("billing") == {}  # nothing changes before the records are written
    assert committed(store, result) == {("orders", 0): None}
    assert store.fetch("billing", [("orders", 0), ("orders", 1)]) == {
        ("orders", 0): OffsetValue(42, 3, "m", clock.now_ms()), ("orders", 1): None}


def test_commit__metadata_too_large_or_negative_offset__that_partition_errs_the_others_commit():
    store, clock = OffsetStore(offset_metadata_max_bytes=4), FakeClock()
    response = committed(store, store.handle_commit("g", {
        ("t", 0): OffsetCommit(1, metadata="12345"), ("t", 1): OffsetCommit(-1), ("t", 2): OffsetCommit(7)},
        clock.now_ms()))
    assert isinstance(response[("t", 0)], OffsetMetadataTooLarge)
    assert isinstance(response[("t", 1)], InvalidRequest) and response[("t", 2)] is None
    assert set(store.fetch("g")) == {("t", 2)}


def test_loading_after_failover__replaying_the_encoded_partition_rebuilds_the_same_cache():
    store, clock = OffsetStore(), FakeClock()
    log = []
    for offset in (5, 9, 12):
        result = store.handle_commit("g", {("t", 0): OffsetCommit(offset), ("u", 1): OffsetCommit(offset * 2)},
                                     clock.now_ms())
        committed(store, result)
        log += [(encode_key(k), encode_value(v)) for k, v in result.records]
        clock.advance(1_000)
    loaded = OffsetStore()
    for key_bytes, value_bytes in log:
        key = decode_key(key_bytes)
        loaded.replay(key, decode_value(key, value_bytes))
    assert loaded.fetch("g") == store.fetch("g") and loaded.fetch("g")[("t", 0)].offset == 12


def test_retention__empty_group_expires_after_retention_active_group_never():
    """"gone" became Empty, "busy" has members whose subscriptions are not known,
    "standalone" commits outside the group protocol."""
    store, clock = OffsetStore(offsets_retention_ms=DAY_MS), FakeClock()
    for group in ("gone", "busy", "standalone"):
        committed(store, store.handle_commit(group, {("t", 0): OffsetCommit(3)}, clock.now_ms()))
    empty_since_ms = clock.now_ms()
    clock.advance(DAY_MS - 1)
    groups = {"gone": Retention(since_ms=empty_since_ms), "busy": None}
    assert store.handle_expire(clock.now_ms(), groups).records == []
    clock.advance(1)
    result = store.handle_expire(clock.now_ms(), groups)
    assert result.records == [(OffsetKey("gone", "t", 0), None), (OffsetKey("standalone", "t", 0), None)]
    committed(store, result)
    assert store.fetch("gone") == {} and store.fetch("standalone") == {}
    assert store.fetch("busy")[("t", 0)].offset == 3
    clock.advance(365 * DAY_MS)
    assert store.handle_expire(clock.now_ms(), groups).records == []  # members: never


def test_group_states__only_the_tables_moves__others_illegal_transition():
    state = GroupState.EMPTY
    for event, expected in [(GroupEvent.MEMBER_JOINS, GroupState.PREPARING_REBALANCE),
                            (GroupEvent.JOIN_COMPLETES, GroupState.COMPLETING_REBALANCE),
                            (GroupEvent.LEADER_SYNCS, GroupState.STABLE),
                            (GroupEvent.MEMBER_LEAVES, GroupState.PREPARING_REBALANCE),
                            (GroupEvent.LAST_MEMBER_LEAVES, GroupState.EMPTY),
                            (GroupEvent.GROUP_DELETED, GroupState.DEAD)]:
        state = next_state(state, event)
        assert state is expected
    with pytest.raises(IllegalTransition, match="a group in state Dead cannot take the event 'member joins'"):
        next_state(GroupState.DEAD, GroupEvent.MEMBER_JOINS)
    assert all(GroupEvent.GROUP_DELETED not in moves for s, moves in TRANSITIONS.items() if s is not GroupState.EMPTY)


@pytest.mark.parametrize("state, member, generation, error", [
    (GroupState.STABLE, "m1", 4, IllegalGeneration),               # an old generation
    (GroupState.STABLE, "m9", 5, UnknownMemberId),                 # evicted or never joined
    (GroupState.COMPLETING_REBALANCE, "m1", 5, RebalanceInProgress),
    (GroupState.DEAD, "m1", 5, CoordinatorNotAvailable),
    (GroupState.STABLE, "", -1, UnknownMemberId),                  # assign-mode commit into a live group
])
def test_commit_rule__refused_with_kafkas_error(state, member, generation, error):
    with pytest.raises(error):
        validate_offset_commit(state=state, generation=5, members={"m1", "m2"}, member_id=member,
                               commit_generation=generation)
    assert error.retriable is (error is CoordinatorNotAvailable)


@pytest.mark.parametrize("state, members, member, generation", [
    (GroupState.STABLE, {"m1"}, "m1", 5),
    (GroupState.PREPARING_REBALANCE, {"m1"}, "m1", 5),  # commits in onPartitionsRevoked are allowed
    (GroupState.EMPTY, set(), "", -1),                  # assign mode, no members
])
def test_commit_rule__accepted(state, members, member, generation):
    validate_offset_commit(state=state, generation=5, members=members, member_id=member,
                           commit_generation=generation)
