"""Controller metadata as a replayed record log."""

import pytest

from rafka.core.errors import (FencedLeaderEpoch, InvalidConfig, InvalidPartitions,
                               InvalidReplicationFactor, InvalidTopic, InvalidUpdateVersion, NotLeaderOrFollower,
                               TopicAlreadyExists, UnknownTopicOrPartition)
from rafka.core.metadata import NO_LEADER, ClusterMetadata

pytestmark = pytest.mark.core


def apply(metadata, records):
    for record in records:
        metadata.replay(record)
    return records


def started(live_nodes=3):
    metadata = ClusterMetadata()
    log = apply(metadata, metadata.handle_start())
    return metadata, log


def test_start__cluster_id_is_22_url_safe_chars_and_epoch_grows_per_restart():
    metadata, log = started()
    assert len(metadata.cluster_id) == 22 and set(metadata.cluster_id) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    cluster_id = metadata.cluster_id
    restarted = ClusterMetadata()
    apply(restarted, log)
    log += apply(restarted, restarted.handle_start())
    assert (restarted.cluster_id, restarted.controller_epoch) == (cluster_id, 2)


def test_create_topic__replicas_spread_leaders_and_replay_rebuilds_the_same_state():
    metadata, log = started()
    records, topic = metadata.handle_create_topic("orders", 3, 3, {"min.insync.replicas": "2"}, [0, 1, 2])
    assert "orders" not in metadata.topics  # handlers change nothing
    log += apply(metadata, records)
    assert [p.leader for p in metadata.topics["orders"].partitions] == [0, 1, 2]
    assert all(p.isr == p.replicas and p.leader_epoch == 0 for p in metadata.topics["orders"].partitions)
    replayed = ClusterMetadata()
    apply(replayed, log)
    assert replayed.topics == metadata.topics


@pytest.mark.parametrize("name, partitions, rf, config, error, message", [
    ("bad name!", 1, 1, None, InvalidTopic, None),
    ("..", 1, 1, None, InvalidTopic, None),
    ("x" * 250, 1, 1, None, InvalidTopic, None),
    ("orders", 1, 1, None, TopicAlreadyExists, "Topic 'orders' already exists."),
    ("t", 0, 1, None, InvalidPartitions, None),
    ("t", 1, 4, None, InvalidReplicationFactor, "Replication factor: 4 larger than available brokers: 3."),
    ("t", 1, 1, {"retention.ms": "x"}, InvalidConfig, None),
])
def test_create_topic__bad_input__typed_error_and_nothing_changes(name, partitions, rf, config, error, message):
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("orders", 1, 1, None, [0, 1, 2])[0])
    before = dict(metadata.topics)
    with pytest.raises(error) as raised:
        metadata.handle_create_topic(name, partitions, rf, config, [0, 1, 2])
    if message:
        assert raised.value.message == message
    assert metadata.topics == before


def test_elect_leader__first_available_isr_member_and_epoch_plus_one():
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("orders", 1, 3, None, [0, 1, 2])[0])
    records, state = metadata.handle_elect_leader("orders", 0, unavailable_replicas={0})
    apply(metadata, records)
    assert (state.leader, state.leader_epoch, state.isr) == (1, 1, (1, 2))


def test_elect_leader__no_live_isr_member__offline_not_unclean():
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("orders", 1, 3, None, [0, 1, 2])[0])
    state = metadata.partition("orders", 0)
    apply(metadata, metadata.handle_alter_isr("orders", 0, 0, 0, state.partition_epoch, [0])[0])
    records, state = metadata.handle_elect_leader("orders", 0, unavailable_replicas={0})
    apply(metadata, records)
    assert (state.leader, state.isr) == (NO_LEADER, (0,))  # replicas 1, 2 are out of sync: never leaders
    records, state = metadata.handle_elect_leader("orders", 0, unavailable_replicas=set())
    assert (state.leader, state.leader_epoch) == (0, 2)


def test_leaders_moved_by__only_a_change_to_another_serving_leader_counts():
    """What the controller holds back from brokers until the new leader is told:
    an election to another replica; not an ISR change, the same leader at a new
    epoch, an offline partition, nor a new topic (its endpoints come once it leads)."""
    metadata, _ = started()
    created, _ = metadata.handle_create_topic("orders", 2, 3, None, [0, 1, 2])
    assert metadata.leaders_moved_by(created) == []
    apply(metadata, created)
    elected, _ = metadata.handle_elect_leader("orders", 1, unavailable_replicas={0, 1})
    assert metadata.leaders_moved_by(elected) == [("orders", 1)]
    apply(metadata, elected)
    state = metadata.partition("orders", 0)
    shrunk, _ = metadata.handle_alter_isr("orders", 0, state.leader, state.leader_epoch, state.partition_epoch,
                                          [state.leader])
    assert metadata.leaders_moved_by(shrunk) == []
    apply(metadata, shrunk)
    offline, state = metadata.handle_elect_leader("orders", 0, unavailable_replicas={state.leader})
    assert state.leader == NO_LEADER and metadata.leaders_moved_by(offline) == []
    apply(metadata, offline)
    back, state = metadata.handle_elect_leader("orders", 0, unavailable_replicas=set())
    assert state.leader != NO_LEADER and metadata.leaders_moved_by(back) == [("orders", 0)]
    same = dict(back[0], leader_epoch=back[0]["leader_epoch"] + 1)
    apply(metadata, back)
    assert metadata.leaders_moved_by([same]) == []   # the same leader at a new epoch keeps serving


def test_alter_isr__stale_leader_epoch_is_fenced():
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("orders", 1, 3, None, [0, 1, 2])[0])
    apply(metadata, metadata.handle_elect_leader("orders", 0, {0})[0])
    state = metadata.partition("orders", 0)
    with pytest.raises(FencedLeaderEpoch):
        metadata.handle_alter_isr("orders", 0, 0, 0, state.partition_epoch, [0, 1])
    with pytest.raises(NotLeaderOrFollower):
        metadata.handle_alter_isr("orders", 0, 2, 1, state.partition_epoch, [2])
    with pytest.raises(InvalidUpdateVersion):   # the leader missed a change: Kafka's code for it
        metadata.handle_alter_isr("orders", 0, 1, 1, state.partition_epoch - 1, [1, 2, 0])
    records, new = metadata.handle_alter_isr("orders", 0, 1, 1, state.partition_epoch, [1, 2, 0])
    assert new.isr == (0, 1, 2) and new.partition_epoch == state.partition_epoch + 1


def test_unknown_topic_or_partition():
    metadata, _ = started()
    with pytest.raises(UnknownTopicOrPartition):
        metadata.partition("nope", 0)
    apply(metadata, metadata.handle_create_topic("orders", 1, 1, None, [0])[0])
    with pytest.raises(UnknownTopicOrPartition):
        metadata.partition("orders", 1)
    apply(metadata, metadata.handle_delete_topic("orders"))
    assert metadata.topics == {}


def test_producer_ids__never_handed_out_twice_across_restarts():
    metadata, log = started()
    ids = []
    for _ in range(3):
        records, producer_id = metadata.handle_allocate_producer_id()
        log += apply(metadata, records)
        ids.append(producer_id)
    restarted = ClusterMetadata()
    apply(restarted, log)
    assert restarted.handle_allocate_producer_id()[1] not in ids and len(set(ids)) == 3


def test_transaction_coordinator_epoch__rises_on_every_load__at_least_the_leader_epoch__across_restarts():
    """Two loads at leader epoch 3 (a coordinator restarted without an election)
    take 3 then 4; a load at leader epoch 9 takes 9; another partition its own; a
    restarted controller goes on from the log. A negative leader epoch is refused
    and records nothing."""
    metadata, log = started()
    epochs = []
    for partition, leader_epoch in [(0, 3), (0, 3), (0, 2), (0, 9), (1, 0)]:
        records, epoch = metadata.handle_next_transaction_coordinator_epoch(partition, leader_epoch)
        log += apply(metadata, records)
        epochs.append(epoch)
    assert epochs == [3, 4, 5, 9, 0]
    restarted = ClusterMetadata()
    apply(restarted, log)
    assert restarted.handle_next_transaction_coordinator_epoch(0, 9)[1] == 10
    with pytest.raises(ValueError):
        restarted.handle_next_transaction_coordinator_epoch(1, -1)
    assert restarted.transaction_coordinator_epochs == {0: 9, 1: 0}


def test_image_free_records__the_image_reads_nothing_of_them():
    """The controller makes no new image for a commit of only IMAGE_FREE_RECORD_TYPES
    (a transaction coordinator's epoch at every load would otherwise push one to
    every actor): build_image must then give the same image with or without them."""
    from rafka.core.cluster_image import IMAGE_FREE_RECORD_TYPES, build_image
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("orders", 2, 3, None, [0, 1, 2])[0])
    before = build_image(metadata, 7)
    records, _ = metadata.handle_next_transaction_coordinator_epoch(0, 3)
    assert {record["type"] for record in records} <= IMAGE_FREE_RECORD_TYPES
    apply(metadata, records)
    assert build_image(metadata, 7) == before


def test_broker_port__kept_across_restarts__a_record_only_when_it_changes__bad_input_changes_nothing():
    metadata, log = started()
    log += apply(metadata, metadata.handle_broker_port(1, 40_001))
    assert metadata.handle_broker_port(1, 40_001) == []
    log += apply(metadata, metadata.handle_node_down("broker:1:0"))   # a process down keeps its broker's port
    log += apply(metadata, metadata.handle_broker_port(2, 40_002))
    log += apply(metadata, metadata.handle_broker_port(2, 40_003))
    restarted = ClusterMetadata()
    apply(restarted, log)
    assert restarted.broker_ports == {1: 40_001, 2: 40_003}
    for broker_id, port in ((1, 0), (1, 65_536), (-1, 9092), ("1", 9092), (1, None)):
        with pytest.raises(ValueError, match="port must be 1-65535"):
            restarted.handle_broker_port(broker_id, port)
    assert restarted.broker_ports == {1: 40_001, 2: 40_003}


def test_remove_from_isr__restarted_follower_leaves_isr_leader_stays_and_epoch_bumps():
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("t", 1, 3, None, [0, 1, 2])[0])
    before = metadata.partition("t", 0)
    follower = [r for r in before.replicas if r != before.leader][0]
    records, after = metadata.handle_remove_from_isr("t", 0, [follower, before.leader])
    apply(metadata, records)
    assert after.isr == tuple(r for r in before.isr if r != follower)
    assert after.leader == before.leader and after.leader_epoch == before.leader_epoch
    assert after.partition_epoch == before.partition_epoch + 1
    assert metadata.handle_remove_from_isr("t", 0, [follower]) == ([], after)


# --- broker assignment (DESIGN section 4) --------------------------------------------

def test_assignment__kafka_rack_unaware__leaders_even_followers_spread_replicas_distinct():
    from rafka.core.metadata import assign_replicas_to_brokers
    assignment = assign_replicas_to_brokers([10, 11, 12, 13], 8, 3, start_index=0, replica_shift=0)
    assert assignment[:4] == [[10, 11, 12], [11, 12, 13], [12, 13, 10], [13, 10, 11]]
    assert all(len(set(replicas)) == 3 for replicas in assignment)
    leaders = [replicas[0] for replicas in assignment]
    assert sorted(leaders) == [10, 10, 11, 11, 12, 12, 13, 13]
    # the second round shifts the followers: broker 10's leaders get different followers
    assert assignment[4] == [10, 12, 13] and assignment[0] != assignment[4]


def test_create_topic__replicas_on_distinct_brokers_preferred_leader_on_the_first_assigned():
    import random
    metadata, log = started()
    records, topic = metadata.handle_create_topic("orders", 6, 3, None, [5, 7, 9, 11], random.Random(1))
    log += apply(metadata, records)
    for state in metadata.topics["orders"].partitions:
        assert len(set(state.brokers)) == 3 and set(state.brokers) <= {5, 7, 9, 11}
        assert state.broker_of(state.leader) == state.brokers[0]
    replayed = ClusterMetadata()
    apply(replayed, log)
    assert replayed.topics == metadata.topics   # the assignment is in the metadata log


@pytest.mark.parametrize("partitions", [True, False, 1.0, "3", 10_000])
def test_create_topic__partition_count_not_a_placeable_int__invalid_partitions_nothing_changes(partitions):
    metadata, _ = started()
    with pytest.raises(InvalidPartitions):
        metadata.handle_create_topic("t", partitions, 1, None, [0, 1, 2])
    assert metadata.topics == {}


# --- elections after restarts (DESIGN invariant 13) ----------------------------------

def test_elect_leader__rf1_replica_restarted__it_leads_again_with_a_new_epoch():
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("solo", 1, 1, None, [4])[0])
    records, state = metadata.handle_elect_leader("solo", 0, unavailable_replicas=[], restarted_replicas=[0])
    apply(metadata, records)
    assert (state.leader, state.leader_epoch, state.isr) == (0, 1, (0,))


def test_elect_leader__a_running_isr_member_is_preferred_to_a_restarted_one():
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("t", 1, 3, None, [0, 1, 2])[0])
    records, state = metadata.handle_elect_leader("t", 0, unavailable_replicas=[0], restarted_replicas=[1])
    assert (state.leader, state.isr) == (2, (2,))   # restarted 1 rejoins once caught up


def test_elect_leader__whole_cluster_restarted__a_restarted_isr_member_leads_alone_in_the_isr():
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("t", 1, 3, None, [0, 1, 2])[0])
    records, state = metadata.handle_elect_leader("t", 0, unavailable_replicas=[0], restarted_replicas=[1, 2])
    assert (state.leader, state.isr, state.leader_epoch) == (1, (1,), 1)


def test_elect_leader__restarted_replica_outside_the_isr_never_leads():
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("t", 1, 3, None, [0, 1, 2])[0])
    state = metadata.partition("t", 0)
    apply(metadata, metadata.handle_alter_isr("t", 0, 0, 0, state.partition_epoch, [0])[0])
    records, state = metadata.handle_elect_leader("t", 0, unavailable_replicas=[0], restarted_replicas=[1, 2])
    assert (state.leader, state.isr) == (NO_LEADER, (0,))


# --- reassignment and added partitions ----------------------------------------------

def test_reassign__new_replica_added_first__old_one_dropped_only_once_the_new_is_in_the_isr():
    from rafka.core.errors import ReassignmentInProgress
    metadata, log = started()
    apply(metadata, metadata.handle_create_topic("t", 1, 3, None, [0, 1, 2])[0])
    before = metadata.partition("t", 0)
    lost = before.broker_of(2)
    target = [b if b != lost else 3 for b in before.brokers]
    records, moving = metadata.handle_reassign_partition("t", 0, target, [0, 1, 2, 3])
    log += apply(metadata, records)
    assert moving.replicas == (0, 1, 3, 2) and moving.broker_of(3) == 3   # the target's order, then the removed
    assert (moving.adding, moving.removing, moving.isr) == ((3,), (2,), before.isr)
    assert moving.leader_epoch == before.leader_epoch + 1     # the leader learns its new follower
    with pytest.raises(ReassignmentInProgress):
        metadata.handle_reassign_partition("t", 0, [0, 1, 2], [0, 1, 2, 3])
    assert metadata.handle_complete_reassignment("t", 0) == ([], moving)   # 3 still catching up
    isr_records, _ = metadata.handle_alter_isr("t", 0, moving.leader, moving.leader_epoch,
                                               moving.partition_epoch, list(moving.isr) + [3])
    apply(metadata, isr_records)
    records, done = metadata.handle_complete_reassignment("t", 0)
    apply(metadata, records)
    assert done.replicas == (0, 1, 3) and sorted(done.brokers) == sorted(target)
    assert 2 not in done.isr and (done.adding, done.removing) == ((), ())
    assert done.leader_epoch == moving.leader_epoch + 1


@pytest.mark.parametrize("target, live, error", [
    ([0, 0, 1], [0, 1, 2, 3], "InvalidReplicaAssignment"),     # a broker twice
    ([0, 1, 9], [0, 1, 2, 3], "InvalidReplicaAssignment"),     # not live
    ([], [0, 1, 2], "InvalidReplicaAssignment"),
])
def test_reassign__bad_target__typed_error_and_nothing_changes(target, live, error):
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("t", 1, 3, None, [0, 1, 2])[0])
    before = dict(metadata.topics)
    with pytest.raises(Exception) as raised:
        metadata.handle_reassign_partition("t", 0, target, live)
    assert type(raised.value).__name__ == error and metadata.topics == before


def test_reassign__removed_leader_hands_over_to_a_remaining_isr_member():
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("t", 1, 2, None, [0, 1, 2])[0])
    state = metadata.partition("t", 0)
    leader_broker = state.broker_of(state.leader)
    others = [b for b in state.brokers if b != leader_broker]
    apply(metadata, metadata.handle_reassign_partition("t", 0, others, [0, 1, 2])[0])   # only a removal
    records, done = metadata.handle_complete_reassignment("t", 0)    # the one staying is in the ISR
    assert state.leader not in done.replicas and done.leader in done.isr and done.brokers == tuple(others)


def test_reassign__removal_only_with_the_kept_replica_out_of_sync__waits_never_drops_the_in_sync_copy():
    """ISR shrunk to the leader; a plan keeps only the lagging follower: completing
    now would delete the only in-sync log and leave the partition offline."""
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("t", 1, 2, None, [0, 1, 2])[0])
    state = metadata.partition("t", 0)
    apply(metadata, metadata.handle_alter_isr("t", 0, state.leader, 0, state.partition_epoch, [state.leader])[0])
    follower = [r for r in state.replicas if r != state.leader][0]
    records, moving = metadata.handle_reassign_partition("t", 0, [state.broker_of(follower)], [0, 1, 2])
    apply(metadata, records)
    assert moving.removing == (state.leader,) and moving.leader == state.leader and moving.isr == (state.leader,)
    assert metadata.handle_complete_reassignment("t", 0) == ([], moving)
    apply(metadata, metadata.handle_alter_isr("t", 0, state.leader, moving.leader_epoch, moving.partition_epoch,
                                              [state.leader, follower])[0])
    records, done = metadata.handle_complete_reassignment("t", 0)
    assert (done.replicas, done.isr, done.leader) == ((follower,), (follower,), follower)


def test_add_partitions__grows_never_shrinks_and_new_partitions_are_assigned():
    metadata, log = started()
    log += apply(metadata, metadata.handle_create_topic("t", 2, 2, None, [0, 1, 2])[0])
    with pytest.raises(InvalidPartitions, match="Topic currently has 2 partitions, which is higher than "
                                                 "the requested 1."):
        metadata.handle_add_partitions("t", 1, [0, 1, 2])
    with pytest.raises(InvalidPartitions):
        metadata.handle_add_partitions("t", True, [0, 1, 2])
    records, topic = metadata.handle_add_partitions("t", 5, [0, 1, 2])
    assert len(metadata.topics["t"].partitions) == 2        # handlers change nothing
    log += apply(metadata, records)
    partitions = metadata.topics["t"].partitions
    assert len(partitions) == 5 and partitions[:2] == topic.partitions[:2]
    assert all(len(set(p.brokers)) == 2 and p.leader_epoch == 0 for p in partitions[2:])
    replayed = ClusterMetadata()
    apply(replayed, log)
    assert replayed.topics == metadata.topics


def test_create_topic__more_replicas_than_the_brokers_can_place__invalid_partitions_nothing_written(monkeypatch):
    from rafka.core import metadata as metadata_module
    monkeypatch.setattr(metadata_module, "MAX_REPLICAS_PER_BROKER", 4)
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("a", 3, 3, None, [0, 1, 2])[0])    # 3 replicas per broker
    with pytest.raises(InvalidPartitions, match="cannot be placed"):
        metadata.handle_create_topic("b", 2, 3, None, [0, 1, 2])
    with pytest.raises(InvalidPartitions, match="cannot be placed"):
        metadata.handle_add_partitions("a", 5, [0, 1, 2])
    assert list(metadata.topics) == ["a"] and len(metadata.topics["a"].partitions) == 3
    assert metadata.handle_create_topic("b", 1, 3, None, [0, 1, 2])[1].name == "b"   # what fits still does


def test_reassign__the_targets_order_is_the_replicas_order__its_first_broker_holds_the_preferred_leader():
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("t", 1, 2, None, [0, 1, 2])[0])
    before = metadata.partition("t", 0)
    spare = next(b for b in (0, 1, 2) if b not in before.brokers)
    records, moving = metadata.handle_reassign_partition("t", 0, [spare, before.brokers[1]], [0, 1, 2])
    apply(metadata, records)
    assert moving.brokers == (spare, before.brokers[1], before.brokers[0]) and moving.replicas[0] == 2
    apply(metadata, metadata.handle_alter_isr("t", 0, moving.leader, moving.leader_epoch, moving.partition_epoch,
                                              list(moving.isr) + [2])[0])
    records, done = metadata.handle_complete_reassignment("t", 0)
    apply(metadata, records)
    assert (done.replicas, done.brokers) == ((2, before.replicas[1]), (spare, before.brokers[1]))
    # the same brokers in another order: only the order changes (no epoch), and the preferred leader with it
    records, reordered = metadata.handle_reassign_partition("t", 0, [before.brokers[1], spare], [0, 1, 2])
    assert reordered.brokers == (before.brokers[1], spare) and reordered.replicas == (before.replicas[1], 2)
    assert (reordered.leader, reordered.isr, reordered.leader_epoch, reordered.partition_epoch) == (
        done.leader, done.isr, done.leader_epoch, done.partition_epoch)
    apply(metadata, records)
    assert metadata.handle_reassign_partition("t", 0, [before.brokers[1], spare], [0, 1, 2]) == ([], reordered)


def test_reassign_cancelled__added_replica_dropped_the_old_ones_kept():
    metadata, _ = started()
    apply(metadata, metadata.handle_create_topic("t", 1, 3, None, [0, 1, 2])[0])
    before = metadata.partition("t", 0)
    target = [b if b != before.broker_of(2) else 3 for b in before.brokers]
    apply(metadata, metadata.handle_reassign_partition("t", 0, target, [0, 1, 2, 3])[0])
    records, cancelled = metadata.handle_cancel_reassignment("t", 0)
    apply(metadata, records)
    assert (cancelled.replicas, cancelled.brokers, cancelled.isr) == (before.replicas, before.brokers, before.isr)
    assert (cancelled.adding, cancelled.removing) == ((), ())
    assert metadata.handle_cancel_reassignment("t", 0) == ([], cancelled)


def _upsertion(user: str, mechanism: str, password: str):
    from rafka.core.scram import new_salt, salted_password
    from rafka.core.scram_admin import Upsertion
    salt = new_salt()
    return Upsertion(user, mechanism, 4096, salt, salted_password(mechanism, password, salt, 4096))


def test_users__credentials_upserted_per_mechanism_replayed_deleted_and_no_password_kept():
    from rafka.core.cluster_image import build_image
    from rafka.core.errors import ResourceNotFound
    from rafka.core.scram import matches
    from rafka.core.scram_admin import Deletion
    metadata, log = started()
    records, results = metadata.handle_alter_user_scram_credentials([], [_upsertion("alice", "SCRAM-SHA-256",
                                                                                    "first-password")])
    assert results == [("alice", None)]
    assert not metadata.scram_credentials   # handlers change nothing
    log += apply(metadata, records)
    log += apply(metadata, metadata.handle_alter_user_scram_credentials(
        [], [_upsertion("alice", "SCRAM-SHA-512", "pw")])[0])
    log += apply(metadata, metadata.handle_alter_user_scram_credentials(
        [], [_upsertion("alice", "SCRAM-SHA-256", "second-password")])[0])
    assert sorted(metadata.scram_credentials) == [("alice", "SCRAM-SHA-256"), ("alice", "SCRAM-SHA-512")]
    assert "password" not in repr(log)
    restarted = ClusterMetadata()
    apply(restarted, log)
    image = build_image(restarted, version=1)
    assert matches(image.scram_credential("alice", "SCRAM-SHA-256"), "second-password")
    assert image.scram_credential("bob", "SCRAM-SHA-256") is None
    records, results = restarted.handle_alter_user_scram_credentials([Deletion("alice", "SCRAM-SHA-512")], [])
    assert results == [("alice", None)]
    apply(restarted, records)
    assert list(restarted.scram_credentials) == [("alice", "SCRAM-SHA-256")]
    records, results = restarted.handle_alter_user_scram_credentials([Deletion("alice", "SCRAM-SHA-512")], [])
    assert records == [] and isinstance(results[0][1], ResourceNotFound)


def test_cluster_credential__made_once_per_password_reserved_unlisted_and_sasl_required_for_good():
    from rafka.core.cluster_image import build_image
    from rafka.core.errors import UnacceptableCredential
    from rafka.core.scram import CLUSTER_MECHANISM, CLUSTER_USER, matches
    from rafka.core.scram_admin import Deletion, describe
    metadata, log = started()
    log += apply(metadata, metadata.handle_cluster_credential("cluster-pw", require_sasl=False))
    assert matches(metadata.scram_credentials[CLUSTER_USER, CLUSTER_MECHANISM], "cluster-pw")
    assert "cluster-pw" not in repr(log)
    assert metadata.handle_cluster_credential("cluster-pw", require_sasl=False) == []   # a restart: nothing new
    assert not metadata.sasl_required and not build_image(metadata, 1).sasl_required
    log += apply(metadata, metadata.handle_cluster_credential("cluster-pw", require_sasl=True))
    assert metadata.handle_cluster_credential("cluster-pw", require_sasl=True) == []
    restarted = ClusterMetadata()
    apply(restarted, log)
    assert restarted.sasl_required and build_image(restarted, 2).sasl_required
    assert describe(restarted.scram_credentials, None) == []   # rafka's own user is not listed
    renewed = restarted.handle_cluster_credential("new-pw", require_sasl=False)   # the secret file replaced
    assert [r["type"] for r in renewed] == ["user_scram_credential"]
    records, results = restarted.handle_alter_user_scram_credentials(
        [Deletion(CLUSTER_USER, CLUSTER_MECHANISM)], [_upsertion("__mine", CLUSTER_MECHANISM, "x")])
    assert records == []
    assert [(user, type(error), error.message) for user, error in results] == [
        (user, UnacceptableCredential, "user names beginning with '__' are rafka's own")
        for user in (CLUSTER_USER, "__mine")]
    assert (CLUSTER_USER, CLUSTER_MECHANISM) in restarted.scram_credentials
