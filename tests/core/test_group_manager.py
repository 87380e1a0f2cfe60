"""Group membership on a fake clock: join, sync, heartbeat, leave, expiry, fencing."""

import pytest

from rafka.core.clock import FakeClock
from rafka.core.errors import (GroupMaxSizeReached, IllegalGeneration, InvalidSessionTimeout,
                               RebalanceInProgress, UnknownMemberId)
from rafka.core.group_manager import GroupManager
from rafka.core.group_state import GroupState, validate_offset_commit
from rafka.core.offsets_schema import decode_key, decode_value, encode_key, encode_value

pytestmark = pytest.mark.core
TOPICS = {"orders": 4}
SESSION_MS, REBALANCE_MS, DELAY_MS = 10_000, 60_000, 3_000


def join(manager, clock, member_id="", client="c"):
    return manager.join("billing", member_id, client_id=client, client_host="/127.0.0.1", topics=["orders"],
                        session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
                        assignor_name="range", now_ms=clock.now_ms())


def written(manager, clock, records):
    """What the coordinator does once the records are acked: replay them."""
    for key, value in records:
        manager.replay(key, value, clock.now_ms())
    return records


def stable_group_of_two():
    manager, clock = GroupManager(group_initial_rebalance_delay_ms=DELAY_MS), FakeClock()
    a, b = join(manager, clock, client="a"), join(manager, clock, client="b")
    assert not manager.maybe_complete_join("billing", TOPICS, clock.now_ms())  # the initial delay holds it
    clock.advance(DELAY_MS)
    assert manager.maybe_complete_join("billing", TOPICS, clock.now_ms())
    return manager, clock, a, b


def test_join_sync__two_members_one_generation_range_assignment_and_a_record():
    manager, clock, a, b = stable_group_of_two()
    group = manager.groups["billing"]
    assert (group.state, group.generation) == (GroupState.COMPLETING_REBALANCE, 1)
    records, assignment_a = manager.sync("billing", a, 1, clock.now_ms())
    assert group.state is GroupState.COMPLETING_REBALANCE and len(records) == 1  # until written
    written(manager, clock, records)
    assert manager.groups["billing"].state is GroupState.STABLE
    records_b, assignment_b = manager.sync("billing", b, 1, clock.now_ms())
    assert records_b == []
    assert sorted(assignment_a + assignment_b) == [("orders", p) for p in range(4)]
    assert len(assignment_a) == len(assignment_b) == 2


def test_new_member__rebalance__old_generation_fenced_then_everyone_rejoins():
    manager, clock, a, b = stable_group_of_two()
    written(manager, clock, manager.sync("billing", a, 1, clock.now_ms())[0])
    c = join(manager, clock, client="c")
    assert manager.groups["billing"].state is GroupState.PREPARING_REBALANCE
    with pytest.raises(RebalanceInProgress):
        manager.heartbeat("billing", a, 1, clock.now_ms())   # tells a to rejoin
    join(manager, clock, a)
    join(manager, clock, b)
    assert manager.maybe_complete_join("billing", TOPICS, clock.now_ms())
    assert manager.groups["billing"].generation == 2
    with pytest.raises(IllegalGeneration):
        manager.sync("billing", c, 1, clock.now_ms())
    assert sum(len(manager.sync("billing", m, 2, clock.now_ms())[1]) for m in (a, b, c)) == 4


def test_member_silent_past_session_timeout__evicted_and_its_commit_refused():
    manager, clock, a, b = stable_group_of_two()
    written(manager, clock, manager.sync("billing", a, 1, clock.now_ms())[0])
    clock.advance(SESSION_MS // 2)
    manager.heartbeat("billing", b, 1, clock.now_ms())
    clock.advance(SESSION_MS // 2 + 1)
    assert manager.expire_members(clock.now_ms()) == []     # a is gone, b remains: no Empty record
    group = manager.groups["billing"]
    assert set(group.members) == {b} and group.state is GroupState.PREPARING_REBALANCE
    join(manager, clock, b)
    manager.maybe_complete_join("billing", TOPICS, clock.now_ms())
    with pytest.raises(UnknownMemberId):                       # the paused member wakes up
        validate_offset_commit(state=group.state, generation=group.generation, members=set(group.members),
                               member_id=a, commit_generation=1)
    with pytest.raises(IllegalGeneration):                     # b at the generation it had before
        validate_offset_commit(state=group.state, generation=group.generation, members=set(group.members),
                               member_id=b, commit_generation=1)


def test_member_that_does_not_rejoin_in_time__dropped_at_the_rebalance_deadline():
    manager, clock, a, b = stable_group_of_two()
    written(manager, clock, manager.sync("billing", a, 1, clock.now_ms())[0])
    join(manager, clock, a)                                    # a rejoins; b never does
    assert not manager.maybe_complete_join("billing", TOPICS, clock.now_ms())
    clock.advance(REBALANCE_MS)
    assert manager.maybe_complete_join("billing", TOPICS, clock.now_ms())
    assert list(manager.groups["billing"].members) == [a]
    assert len(manager.sync("billing", a, 2, clock.now_ms())[1]) == 4


def test_last_member_leaves__group_empty_with_a_record_and_replay_restores_it():
    manager, clock, a, b = stable_group_of_two()
    records = written(manager, clock, manager.sync("billing", a, 1, clock.now_ms())[0])
    loaded = GroupManager()
    for key, value in records:
        key = decode_key(encode_key(key))
        loaded.replay(key, decode_value(key, encode_value(value)), clock.now_ms())
    restored = loaded.groups["billing"]
    assert (restored.state, restored.generation, set(restored.members)) == (GroupState.STABLE, 1, {a, b})
    assert manager.leave("billing", a, clock.now_ms()) == []
    (key, value), = manager.leave("billing", b, clock.now_ms())
    assert value.members == () and set(manager.groups["billing"].members) == {b}   # until written
    written(manager, clock, [(key, value)])
    assert manager.groups["billing"].state is GroupState.EMPTY
    loaded.replay(key, value, clock.now_ms())
    assert loaded.groups["billing"].state is GroupState.EMPTY


def test_bad_join__typed_error_and_nothing_changes():
    manager = GroupManager(max_group_size=1)
    with pytest.raises(InvalidSessionTimeout):
        manager.join("g", "", client_id="c", client_host="h", topics=["t"], session_timeout_ms=1,
                     rebalance_timeout_ms=1, assignor_name="range", now_ms=0)
    with pytest.raises(UnknownMemberId):
        manager.join("g", "ghost", client_id="c", client_host="h", topics=["t"], session_timeout_ms=SESSION_MS,
                     rebalance_timeout_ms=1, assignor_name="range", now_ms=0)
    assert manager.groups == {}
    manager.join("g", "", client_id="c", client_host="h", topics=["t"], session_timeout_ms=SESSION_MS,
                 rebalance_timeout_ms=1, assignor_name="range", now_ms=0)
    with pytest.raises(GroupMaxSizeReached):
        manager.join("g", "", client_id="d", client_host="h", topics=["t"], session_timeout_ms=SESSION_MS,
                     rebalance_timeout_ms=1, assignor_name="range", now_ms=0)
    assert len(manager.groups["g"].members) == 1
