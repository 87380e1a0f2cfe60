"""An operator's leader elections (ElectLeaders) and reassignments
(AlterPartitionReassignments, ListPartitionReassignments) on the controller's
metadata: the election as a table against Kafka's rules
(ReplicationControlManager.electLeader, PartitionChangeBuilder), then the
handlers that run it over many partitions."""

import pytest

from rafka.core.errors import (ElectionNotNeeded, EligibleLeadersNotAvailable, InvalidReplicaAssignment,
                               InvalidReplicationFactor, InvalidRequest, NoReassignmentInProgress,
                               PreferredLeaderNotAvailable, ReassignmentInProgress, UnknownTopicOrPartition)
from rafka.core.metadata import (NO_LEADER, PREFERRED_ELECTION, UNCLEAN_ELECTION, ClusterMetadata, PartitionState,
                                 elect_on_request)

pytestmark = pytest.mark.core
P, U = PREFERRED_ELECTION, UNCLEAN_ELECTION


def state(replicas, isr, leader):
    return PartitionState(replicas=tuple(replicas), isr=tuple(isr), leader=leader, leader_epoch=4,
                          partition_epoch=9, brokers=tuple(10 + r for r in replicas))


# (replicas, isr, leader, election, live) -> (new leader, new isr) or the error
ELECTIONS = [
    # preferred: the first replica, alive and in sync, takes over from the current leader
    ("preferred back from a follower", (0, 1, 2), (0, 1, 2), 1, P, {0, 1, 2}, (0, (0, 1, 2))),
    ("preferred already leads", (0, 1, 2), (0, 1, 2), 0, P, {0, 1, 2}, ElectionNotNeeded),
    ("preferred already leads, others dead", (0, 1, 2), (0,), 0, P, {0}, ElectionNotNeeded),
    ("preferred out of the ISR", (0, 1, 2), (1, 2), 1, P, {0, 1, 2}, PreferredLeaderNotAvailable),
    ("preferred in the ISR but dead", (0, 1, 2), (0, 1, 2), 1, P, {1, 2}, PreferredLeaderNotAvailable),
    # the leader is gone: Kafka's preferred election takes the first replica that may lead
    ("leader dead, preferred dead", (0, 1, 2), (0, 1, 2), 1, P, {2}, (2, (0, 1, 2))),
    ("offline, preferred in the ISR and back", (0, 1, 2), (0,), NO_LEADER, P, {0, 1, 2}, (0, (0,))),
    ("offline, nobody in the ISR alive", (0, 1, 2), (0,), NO_LEADER, P, {1, 2}, PreferredLeaderNotAvailable),
    # unclean: only for a partition without a leader
    ("unclean with a leader", (0, 1, 2), (1,), 1, U, {0, 1, 2}, ElectionNotNeeded),
    ("unclean, an ISR member is back: clean", (0, 1, 2), (1, 2), NO_LEADER, U, {0, 2}, (2, (1, 2))),
    ("unclean, only out-of-ISR replicas live", (0, 1, 2), (0,), NO_LEADER, U, {1, 2}, (1, (1,))),
    ("unclean, nobody live", (0, 1, 2), (0,), NO_LEADER, U, set(), EligibleLeadersNotAvailable),
    ("unknown election type", (0, 1, 2), (0, 1, 2), 1, 7, {0, 1, 2}, InvalidRequest),
]


@pytest.mark.parametrize("replicas, isr, leader, election, live, expected",
                         [case[1:] for case in ELECTIONS], ids=[case[0] for case in ELECTIONS])
def test_elect_on_request__as_kafkas_partition_change_builder(replicas, isr, leader, election, live, expected):
    before = state(replicas, isr, leader)
    if isinstance(expected, type):
        with pytest.raises(expected):
            elect_on_request(before, election, live)
        return
    after = elect_on_request(before, election, live)
    assert (after.leader, after.isr) == expected
    assert (after.leader_epoch, after.partition_epoch) == (5, 10)
    assert (after.replicas, after.brokers) == (before.replicas, before.brokers)   # an election moves nothing


def started_with(topics: dict[str, int], rf=3, brokers=(0, 1, 2)):
    metadata = ClusterMetadata()
    for record in metadata.handle_start():
        metadata.replay(record)
    for name, count in topics.items():
        for record in metadata.handle_create_topic(name, count, rf, None, list(brokers))[0]:
            metadata.replay(record)
    return metadata


def moved_leader(metadata, topic, partition):
    """The leader handed to the second replica (as after a failover the first came back from)."""
    old = metadata.partition(topic, partition)
    records, _ = metadata.handle_elect_leader(topic, partition, [old.replicas[0]])
    for record in records:
        metadata.replay(record)
    records, _ = metadata.handle_alter_isr(topic, partition, *(lambda s: (s.leader, s.leader_epoch,
                                                                          s.partition_epoch))(
        metadata.partition(topic, partition)), old.replicas)
    for record in records:
        metadata.replay(record)
    return metadata.partition(topic, partition)


def every_replica_live(topic, partition):
    return {0, 1, 2}


def test_elect_leaders__named_partitions__each_answered_in_order_and_only_elections_written():
    metadata = started_with({"t": 2})
    moved = moved_leader(metadata, "t", 1)
    assert moved.leader != moved.replicas[0]
    records, results = metadata.handle_elect_leaders(P, [("t", 0), ("t", 1), ("t", 5), ("nope", 0)],
                                                     every_replica_live)
    assert [(t, p, type(e).__name__ if e else None) for t, p, e in results] == [
        ("t", 0, "ElectionNotNeeded"), ("t", 1, None), ("t", 5, "UnknownTopicOrPartition"),
        ("nope", 0, "UnknownTopicOrPartition")]
    assert metadata.partition("t", 1) == moved   # handlers change nothing
    assert [(r["partition"], r["leader"], r["leader_epoch"]) for r in records] == [
        (1, moved.replicas[0], moved.leader_epoch + 1)]


def test_elect_leaders__every_partition__those_needing_none_left_out():
    metadata = started_with({"a": 2, "b": 1})
    moved_leader(metadata, "b", 0)
    records, results = metadata.handle_elect_leaders(P, None, lambda t, p: {0, 1, 2})
    assert [(t, p, e) for t, p, e in results] == [("b", 0, None)] and len(records) == 1


def test_elect_leaders__a_partition_named_twice__the_second_sees_the_first_election():
    metadata = started_with({"t": 1})
    moved_leader(metadata, "t", 0)
    records, results = metadata.handle_elect_leaders(P, [("t", 0), ("t", 0)], every_replica_live)
    assert [type(e).__name__ if e else None for _, _, e in results] == [None, "ElectionNotNeeded"]
    assert len(records) == 1


def test_elect_leaders__unknown_election_type__the_whole_request_refused():
    metadata = started_with({"t": 1})
    with pytest.raises(InvalidRequest, match="Unknown election type 2"):
        metadata.handle_elect_leaders(2, [("t", 0)], every_replica_live)


def test_elect_leaders__liveness_is_asked_per_partition():
    metadata = started_with({"t": 1})
    moved = moved_leader(metadata, "t", 0)
    asked = []

    def live(topic, partition):
        asked.append((topic, partition))
        return set(moved.replicas) - {moved.replicas[0]}
    _, results = metadata.handle_elect_leaders(P, [("t", 0)], live)
    assert asked == [("t", 0)] and isinstance(results[0][2], PreferredLeaderNotAvailable)


# --- AlterPartitionReassignments and ListPartitionReassignments --------------------------

def test_alter_reassignment__start_list_cancel_then_no_reassignment_in_progress():
    metadata = started_with({"t": 2}, brokers=(0, 1, 2, 3))
    before = metadata.partition("t", 0)
    target = [b for b in before.brokers[:2]] + [next(b for b in (0, 1, 2, 3) if b not in before.brokers)]
    records, moving = metadata.handle_alter_reassignment("t", 0, target, [0, 1, 2, 3])
    for record in records:
        metadata.replay(record)
    listed = ("t", 0, target + [before.brokers[2]], [target[2]], [before.brokers[2]])
    assert metadata.reassignments() == [listed]
    assert metadata.reassignments([("t", [1, 0, 7]), ("nope", [0])]) == [listed]
    assert moving.brokers == tuple(target) + (before.brokers[2],)
    with pytest.raises(ReassignmentInProgress):
        metadata.handle_alter_reassignment("t", 0, list(before.brokers), [0, 1, 2, 3])
    records, cancelled = metadata.handle_alter_reassignment("t", 0, None, [0, 1, 2, 3])
    for record in records:
        metadata.replay(record)
    assert (cancelled.brokers, metadata.reassignments()) == (before.brokers, [])
    with pytest.raises(NoReassignmentInProgress, match="No partition reassignment is in progress."):
        metadata.handle_alter_reassignment("t", 0, None, [0, 1, 2, 3])


@pytest.mark.parametrize("partition, target, allow_rf_change, error, message", [
    (0, [], True, InvalidReplicaAssignment, "The manual partition assignment includes an empty replica list."),
    (0, [0, 1, 1], True, InvalidReplicaAssignment,
     "The manual partition assignment includes the broker 1 more than once."),
    (0, [0, 1, 9], True, InvalidReplicaAssignment,
     "The manual partition assignment includes broker 9, but no such broker is live."),
    (0, [0, 1], False, InvalidReplicationFactor, None),
    (3, [0, 1, 2], True, UnknownTopicOrPartition, None),
])
def test_alter_reassignment__refused_as_kafka__nothing_changes(partition, target, allow_rf_change, error, message):
    metadata = started_with({"t": 1})
    before = dict(metadata.topics)
    with pytest.raises(error, match=message):
        metadata.handle_alter_reassignment("t", partition, target, [0, 1, 2],
                                           allow_replication_factor_change=allow_rf_change)
    assert metadata.topics == before
