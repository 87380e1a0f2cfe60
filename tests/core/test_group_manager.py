"""Group membership on a fake clock, as Kafka's classic protocol runs it: join,
the protocol vote, the leader's assignment relayed, heartbeat, leave, expiry,
fencing, and static membership (KIP-345)."""

import pytest

from rafka.core.clock import FakeClock
from rafka.core.errors import (FencedInstanceId, GroupMaxSizeReached, IllegalGeneration, InconsistentGroupProtocol,
                               InvalidSessionTimeout, RebalanceInProgress, UnknownMemberId)
from rafka.core.group_manager import GroupManager, subscription_topics
from rafka.core.group_state import GroupState, validate_offset_commit
from rafka.core.offsets_schema import decode_key, decode_value, encode_key, encode_value

pytestmark = pytest.mark.core
SESSION_MS, REBALANCE_MS, DELAY_MS = 10_000, 60_000, 3_000
RANGE = [("range", b"range-metadata")]


def join(manager, clock, member_id="", client="c", *, protocols=RANGE, protocol_type="consumer", instance=None,
         group="billing", skip_assignment_supported=False):
    return manager.join(group, member_id, group_instance_id=instance, client_id=client, client_host="/127.0.0.1",
                        protocol_type=protocol_type, protocols=protocols, session_timeout_ms=SESSION_MS,
                        rebalance_timeout_ms=REBALANCE_MS, now_ms=clock.now_ms(),
                        skip_assignment_supported=skip_assignment_supported)


def written(manager, clock, records):
    """What the coordinator does once the records are acked: replay them."""
    for key, value in records:
        manager.replay(key, value, clock.now_ms())
    return records


def complete(manager, clock, group="billing"):
    completed, records = manager.maybe_complete_join(group, clock.now_ms())
    written(manager, clock, records)
    return completed


def stable_group_of_two(*, instances=(None, None)):
    """Two members, a leading, synced with a's assignment of {a: b"A", b: b"B"}."""
    manager, clock = GroupManager(group_initial_rebalance_delay_ms=DELAY_MS), FakeClock()
    a = join(manager, clock, client="a", instance=instances[0]).member_id
    b = join(manager, clock, client="b", instance=instances[1]).member_id
    assert not complete(manager, clock)   # the initial delay holds it
    clock.advance(DELAY_MS)
    assert complete(manager, clock)
    assert manager.groups["billing"].leader == a
    written(manager, clock, manager.sync("billing", a, 1, group_instance_id=instances[0],
                                         assignments={a: b"A", b: b"B"}, now_ms=clock.now_ms())[0])
    return manager, clock, a, b


def test_join_sync__the_leader_gets_every_members_metadata__each_member_its_part_of_the_leaders_assignment():
    manager, clock = GroupManager(group_initial_rebalance_delay_ms=0), FakeClock()
    a = join(manager, clock, client="a", protocols=[("range", b"a-subscription")]).member_id
    b = join(manager, clock, client="b", protocols=[("range", b"b-subscription")]).member_id
    assert complete(manager, clock)
    leader, follower = manager.join_answer("billing", a), manager.join_answer("billing", b)
    assert (leader.generation, leader.leader, leader.protocol_type, leader.protocol_name) == (1, a, "consumer",
                                                                                              "range")
    assert leader.members == ((a, None, b"a-subscription"), (b, None, b"b-subscription"))
    assert follower.members == () and follower.leader == a
    assert manager.sync("billing", b, 1, now_ms=clock.now_ms()) == ([], None)   # waits for the leader's
    records, _ = manager.sync("billing", a, 1, assignments={a: b"for-a", b: b"for-b"}, now_ms=clock.now_ms())
    assert manager.groups["billing"].state is GroupState.COMPLETING_REBALANCE   # until written
    written(manager, clock, records)
    assert manager.groups["billing"].state is GroupState.STABLE
    assert manager.sync_outcome("billing", b, 1) == b"for-b"
    assert manager.sync("billing", a, 1, now_ms=clock.now_ms()) == ([], b"for-a")


def test_protocol_vote__each_member_votes_its_first_common_protocol__the_most_votes_win():
    manager, clock = GroupManager(group_initial_rebalance_delay_ms=0), FakeClock()
    for protocols in ([("sticky", b""), ("range", b"")], [("range", b""), ("sticky", b"")],
                      [("roundrobin", b""), ("range", b""), ("sticky", b"")]):
        join(manager, clock, protocols=protocols)
    complete(manager, clock)
    # candidates {range, sticky}; votes: sticky, range, range
    assert manager.groups["billing"].protocol_name == "range"


def test_any_protocol_type__a_connect_group_runs__another_type_or_no_common_protocol_refused():
    manager, clock = GroupManager(group_initial_rebalance_delay_ms=0), FakeClock()
    leader = join(manager, clock, protocol_type="connect", protocols=[("sessioned", b"s"), ("default", b"d")])
    assert complete(manager, clock)
    assert manager.join_answer("billing", leader.member_id).protocol_name == "sessioned"
    with pytest.raises(InconsistentGroupProtocol):
        join(manager, clock, protocol_type="consumer", protocols=[("sessioned", b"")])
    with pytest.raises(InconsistentGroupProtocol):
        join(manager, clock, protocol_type="connect", protocols=[("compatible", b"")])
    with pytest.raises(InconsistentGroupProtocol):
        join(manager, clock, protocol_type="connect", protocols=[], group="other")
    assert list(manager.groups["billing"].members) == [leader.member_id]   # nothing changed


def test_follower_rejoins_unchanged_in_stable__answered_at_once__the_leader_rejoining_rebalances():
    manager, clock, a, b = stable_group_of_two()
    again = join(manager, clock, b, client="b")
    assert again.answer is not None and again.answer.generation == 1 and again.answer.members == ()
    assert manager.groups["billing"].state is GroupState.STABLE
    assert join(manager, clock, a, client="a").answer is None
    assert manager.groups["billing"].state is GroupState.PREPARING_REBALANCE


def test_new_member__rebalance__old_generation_fenced_then_everyone_rejoins():
    manager, clock, a, b = stable_group_of_two()
    c = join(manager, clock, client="c").member_id
    assert manager.groups["billing"].state is GroupState.PREPARING_REBALANCE
    with pytest.raises(RebalanceInProgress):
        manager.heartbeat("billing", a, 1, now_ms=clock.now_ms())   # tells a to rejoin
    join(manager, clock, a)
    assert not complete(manager, clock)                          # b has not rejoined
    join(manager, clock, b)
    assert complete(manager, clock)
    assert manager.groups["billing"].generation == 2
    with pytest.raises(IllegalGeneration):
        manager.sync("billing", c, 1, now_ms=clock.now_ms())


def test_member_silent_past_session_timeout__evicted_and_its_commit_refused():
    manager, clock, a, b = stable_group_of_two()
    clock.advance(SESSION_MS // 2)
    manager.heartbeat("billing", b, 1, now_ms=clock.now_ms())
    clock.advance(SESSION_MS // 2 + 1)
    assert manager.expire_members(clock.now_ms()) == []     # a is gone, b remains: no Empty record
    group = manager.groups["billing"]
    assert set(group.members) == {b} and group.state is GroupState.PREPARING_REBALANCE and group.leader == b
    join(manager, clock, b)
    complete(manager, clock)
    with pytest.raises(UnknownMemberId):                       # the paused member wakes up
        validate_offset_commit(state=group.state, generation=group.generation, members=set(group.members),
                               member_id=a, commit_generation=1)
    with pytest.raises(IllegalGeneration):                     # b at the generation it had before
        validate_offset_commit(state=group.state, generation=group.generation, members=set(group.members),
                               member_id=b, commit_generation=1)


def test_dynamic_member_that_does_not_rejoin_in_time__dropped_at_the_rebalance_deadline():
    manager, clock, a, b = stable_group_of_two()
    join(manager, clock, a)                                    # a rejoins (and rebalances); b never does
    assert not complete(manager, clock)
    clock.advance(REBALANCE_MS)
    assert complete(manager, clock)
    assert list(manager.groups["billing"].members) == [a]


def test_member_that_does_not_sync_within_the_rebalance_timeout__removed_and_the_group_rebalances():
    manager, clock = GroupManager(group_initial_rebalance_delay_ms=0), FakeClock()
    a, b = join(manager, clock).member_id, join(manager, clock).member_id
    complete(manager, clock)
    written(manager, clock, manager.sync("billing", a, 1, assignments={a: b"A", b: b"B"},
                                         now_ms=clock.now_ms())[0])
    clock.advance(REBALANCE_MS - 1)
    manager.heartbeat("billing", b, 1, now_ms=clock.now_ms())   # alive, but never syncs
    manager.heartbeat("billing", a, 1, now_ms=clock.now_ms())
    assert not manager.has_silent_members("billing", clock.now_ms())
    clock.advance(1)
    assert manager.expire_members(clock.now_ms()) == []
    group = manager.groups["billing"]
    assert list(group.members) == [a] and group.state is GroupState.PREPARING_REBALANCE


def test_last_member_leaves__group_empty_with_a_record_and_replay_restores_it():
    manager, clock = GroupManager(group_initial_rebalance_delay_ms=0), FakeClock()
    a = join(manager, clock, protocol_type="sr", protocols=[("v0", b"a-meta")], instance="host-a").member_id
    b = join(manager, clock, protocol_type="sr", protocols=[("v0", b"b-meta")]).member_id
    complete(manager, clock)
    records = written(manager, clock, manager.sync("billing", a, 1, group_instance_id="host-a",
                                                   assignments={a: b"A"}, now_ms=clock.now_ms())[0])
    loaded = GroupManager()
    for key, value in records:
        key = decode_key(encode_key(key))
        loaded.replay(key, decode_value(key, encode_value(value)), clock.now_ms())
    restored = loaded.groups["billing"]
    assert (restored.state, restored.generation, restored.leader, restored.protocol_type,
            restored.protocol_name) == (GroupState.STABLE, 1, a, "sr", "v0")
    assert {m: (r.group_instance_id, r.protocols, r.assignment) for m, r in restored.members.items()} == {
        a: ("host-a", (("v0", b"a-meta"),), b"A"), b: (None, (("v0", b"b-meta"),), b"")}   # b was left out
    assert manager.leave("billing", [(a, "host-a")], clock.now_ms()) == ([], [None])
    records, errors = manager.leave("billing", [(b, None)], clock.now_ms())
    (key, value), = records
    assert errors == [None] and value.members == () and set(manager.groups["billing"].members) == {b}
    written(manager, clock, records)
    assert manager.groups["billing"].state is GroupState.EMPTY
    loaded.replay(key, value, clock.now_ms())
    assert (loaded.groups["billing"].state, loaded.groups["billing"].generation) == (GroupState.EMPTY, 2)


def test_bad_join__typed_error_and_nothing_changes():
    manager, clock = GroupManager(max_group_size=1), FakeClock()
    with pytest.raises(InvalidSessionTimeout):
        manager.join("g", "", client_id="c", client_host="h", protocol_type="consumer", protocols=RANGE,
                     session_timeout_ms=1, rebalance_timeout_ms=1, now_ms=0)
    with pytest.raises(UnknownMemberId):
        join(manager, clock, "ghost", group="g")
    assert manager.groups == {}
    join(manager, clock, group="g")
    with pytest.raises(GroupMaxSizeReached):
        join(manager, clock, group="g")
    assert len(manager.groups["g"].members) == 1


# --- static membership (KIP-345) -------------------------------------------------------

def test_static_member_rejoins_stable_group_with_a_new_id__takes_the_old_place_and_assignment__no_rebalance():
    manager, clock, a, b = stable_group_of_two(instances=("host-a", "host-b"))
    result = join(manager, clock, client="b", instance="host-b")           # b restarted: no member id
    assert result.member_id != b and result.member_id.startswith("host-b-")
    assert result.answer.generation == 1 and result.answer.leader == a     # answered now, as a follower
    assert manager.groups["billing"].state is GroupState.STABLE and b in manager.groups["billing"].members
    written(manager, clock, result.records)                                # the one record: the new member id
    group = manager.groups["billing"]
    assert (group.state, group.generation, set(group.members)) == (GroupState.STABLE, 1, {a, result.member_id})
    assert manager.sync("billing", result.member_id, 1, group_instance_id="host-b",
                        now_ms=clock.now_ms()) == ([], b"B")
    with pytest.raises(FencedInstanceId):                                   # the old incarnation
        manager.heartbeat("billing", b, 1, group_instance_id="host-b", now_ms=clock.now_ms())
    with pytest.raises(FencedInstanceId):
        validate_offset_commit(state=group.state, generation=1, members=set(group.members), member_id=b,
                               commit_generation=1, group_instance_id="host-b",
                               static_members=group.static_members)
    assert manager.leave("billing", [(b, "host-b")], clock.now_ms())[1][0].__class__ is FencedInstanceId


def test_static_leader_rejoins_stable__the_answer_names_its_old_id_as_leader_so_it_does_not_reassign():
    manager, clock, a, b = stable_group_of_two(instances=("host-a", "host-b"))
    result = join(manager, clock, client="a", instance="host-a")
    assert result.answer.leader == a != result.member_id and result.answer.members == ()
    written(manager, clock, result.records)
    assert manager.groups["billing"].leader == result.member_id
    assert manager.sync("billing", result.member_id, 1, group_instance_id="host-a",
                        now_ms=clock.now_ms()) == ([], b"A")


def test_static_leader_rejoins_stable_with_join_v9__leads_again_with_every_members_metadata__told_to_skip_assigning():
    manager, clock, a, b = stable_group_of_two(instances=("host-a", "host-b"))
    result = join(manager, clock, client="a", instance="host-a", skip_assignment_supported=True)
    answer = result.answer
    assert (answer.leader, answer.skip_assignment, answer.generation) == (result.member_id, True, 1)
    assert [(m, instance) for m, instance, _ in answer.members] == [(result.member_id, "host-a"), (b, "host-b")]
    written(manager, clock, result.records)
    group = manager.groups["billing"]
    assert (group.state, group.leader) == (GroupState.STABLE, result.member_id)
    assert manager.sync("billing", result.member_id, 1, group_instance_id="host-a", assignments={},
                        now_ms=clock.now_ms()) == ([], b"A")   # its empty assignment changes nothing
    assert manager.sync("billing", b, 1, group_instance_id="host-b", now_ms=clock.now_ms()) == ([], b"B")


def test_static_follower_rejoins_stable_with_join_v9__follows__no_skip():
    manager, clock, a, b = stable_group_of_two(instances=("host-a", "host-b"))
    answer = join(manager, clock, client="b", instance="host-b", skip_assignment_supported=True).answer
    assert (answer.leader, answer.skip_assignment, answer.members) == (a, False, ())


def test_static_member_rejoins_with_other_metadata__same_protocol_selected__no_rebalance_the_new_metadata_kept():
    """Kafka's rule (updateStaticMemberThenRebalanceOrCompleteJoin): a restarted
    consumer's subscription differs (it owns no partitions yet), and only a change
    of the protocol the group would select rebalances a Stable group."""
    manager, clock, a, b = stable_group_of_two(instances=("host-a", "host-b"))
    result = join(manager, clock, client="b", instance="host-b", protocols=[("range", b"owns nothing yet")])
    assert result.answer is not None and result.answer.generation == 1
    written(manager, clock, result.records)
    group = manager.groups["billing"]
    assert (group.state, group.generation, set(group.members)) == (GroupState.STABLE, 1, {a, result.member_id})
    join(manager, clock, a, client="a", instance="host-a")          # the leader forces the next rebalance
    clock.advance(REBALANCE_MS)
    assert complete(manager, clock)
    assert dict((m, data) for m, _, data in manager.join_answer("billing", a).members)[result.member_id] \
        == b"owns nothing yet"


def test_static_member_rejoins_offering_only_a_protocol_the_group_does_not_run__refused__its_place_kept():
    manager, clock, a, b = stable_group_of_two(instances=("host-a", "host-b"))
    with pytest.raises(InconsistentGroupProtocol):
        join(manager, clock, client="b", instance="host-b", protocols=[("roundrobin", b"rr")])
    group = manager.groups["billing"]
    assert (group.state, group.generation, set(group.members)) == (GroupState.STABLE, 1, {a, b})


def test_static_member_that_does_not_rejoin__kept_at_the_deadline__removed_only_by_its_session_timeout():
    manager, clock, a, b = stable_group_of_two(instances=(None, "host-b"))
    join(manager, clock, a)                                     # a forces a rebalance; b is away
    clock.advance(REBALANCE_MS)
    assert complete(manager, clock)
    group = manager.groups["billing"]
    assert set(group.members) == {a, b} and group.generation == 2   # static b kept
    assert manager.join_answer("billing", a).members[1][:2] == (b, "host-b")
    manager.heartbeat("billing", a, 2, now_ms=clock.now_ms())
    assert manager.expire_members(clock.now_ms()) == []          # b silent past its session: gone now
    assert set(group.members) == {a} and group.state is GroupState.PREPARING_REBALANCE


def test_leave_group_batch__by_member_id_and_by_instance_id_alone__one_rebalance__unknown_ones_per_member():
    manager, clock = GroupManager(group_initial_rebalance_delay_ms=0), FakeClock()
    a = join(manager, clock, instance="host-a").member_id
    b = join(manager, clock, instance="host-b").member_id
    c = join(manager, clock).member_id
    complete(manager, clock)
    written(manager, clock, manager.sync("billing", a, 1, group_instance_id="host-a", now_ms=clock.now_ms())[0])
    records, errors = manager.leave("billing", [("", "host-b"), (c, None), ("", "host-z"), ("nobody", None)],
                                    clock.now_ms())
    assert records == [] and errors[:2] == [None, None]
    assert [type(e) for e in errors[2:]] == [UnknownMemberId, UnknownMemberId]
    group = manager.groups["billing"]
    assert set(group.members) == {a} and group.state is GroupState.PREPARING_REBALANCE


def test_sync__protocol_type_or_name_other_than_the_groups__inconsistent_group_protocol():
    manager, clock, a, b = stable_group_of_two()
    with pytest.raises(InconsistentGroupProtocol):
        manager.sync("billing", b, 1, protocol_type="connect", now_ms=clock.now_ms())
    with pytest.raises(InconsistentGroupProtocol):
        manager.sync("billing", b, 1, protocol_name="roundrobin", now_ms=clock.now_ms())
    assert manager.sync("billing", b, 1, protocol_type="consumer", protocol_name="range",
                        now_ms=clock.now_ms()) == ([], b"B")


def test_subscription_topics__every_consumer_protocol_version__garbage_is_none():
    from rafka.protocol.consumer_protocol import encode_subscription
    assert subscription_topics(encode_subscription(["b", "a"])) == {"a", "b"}
    assert subscription_topics(encode_subscription(["a"], owned=[("a", 0)])) == {"a"}
    assert subscription_topics(b"\x00\x00\x00\x00\x00\x05") is None
