"""Replica actors made ahead of time ("shells"): the controller's pool of idle ones
per broker, the metadata that says which shell holds which replica, and the
assignment file a restarted shell reopens its replica from."""

from __future__ import annotations

import random

import pytest

from rafka.core.actor_names import broker_of_shell, replica_shell_name, shell_key
from rafka.core.cluster_image import build_image
from rafka.core.metadata import ClusterMetadata
from rafka.core.replica_assignment import (ReplicaAssignment, assignment_path, read_assignment, remove_assignment,
                                           write_assignment)
from rafka.core.replica_pool import MAX_POOL_SIZE_PER_BROKER, ReplicaPool
from tests.core.helpers import assign_shells

pytestmark = pytest.mark.core


# --- names ---------------------------------------------------------------------------

def test_shell_names__say_the_broker_and_are_never_made_twice_across_controller_epochs():
    assert replica_shell_name(2, 5, 11) == "replica:b2:5-11"
    assert broker_of_shell("replica:b2:5-11") == 2 and shell_key("replica:b2:5-11") == "5-11"
    assert broker_of_shell("broker:2:0") is None and broker_of_shell("coordinator:0") is None
    first, second = ReplicaPool(size_per_broker=2, controller_epoch=5), ReplicaPool(size_per_broker=2,
                                                                                     controller_epoch=6)
    made = {first.new_name(b) for b in (0, 1, 1)} | {second.new_name(b) for b in (0, 1, 1)}
    assert len(made) == 6


# --- the pool --------------------------------------------------------------------------

def test_pool__fills_each_live_broker_to_its_size__counting_shells_still_starting():
    pool = ReplicaPool(size_per_broker=2, controller_epoch=1)
    assert pool.missing([0, 1]) == {0: 2, 1: 2}
    for broker_id in (0, 0, 1):
        pool.starting(pool.new_name(broker_id))
    assert pool.missing([0, 1, 2]) == {1: 1, 2: 2}


def test_pool__take__a_ready_shell_first__then_one_still_starting__then_none():
    pool = ReplicaPool(size_per_broker=3, controller_epoch=1)
    starting, answered = pool.new_name(0), pool.new_name(0)
    pool.starting(starting)
    pool.starting(answered)
    assert pool.ready(answered)
    assert pool.take(0) == answered
    assert pool.take(0) == starting
    assert pool.take(0) is None and pool.take(1) is None
    assert not pool.ready(starting)   # taken while starting: it is the replica's now, not the pool's
    assert pool.missing([0]) == {0: 3}


def test_pool__a_dropped_shell_is_made_again__an_adopted_one_counts():
    pool = ReplicaPool(size_per_broker=1, controller_epoch=3)
    name = pool.new_name(0)
    pool.starting(name)
    pool.drop(name)
    assert pool.missing([0]) == {0: 1}
    pool.adopt("replica:b0:2-7")   # an earlier controller's idle shell
    pool.adopt("replica:b0:2-7")
    assert pool.idle(0) == ["replica:b0:2-7"] and pool.missing([0]) == {}


@pytest.mark.parametrize("size", [-1, MAX_POOL_SIZE_PER_BROKER + 1, True, 1.5])
def test_pool__size_out_of_bounds__refused(size):
    with pytest.raises(ValueError, match="replica_pool_size"):
        ReplicaPool(size_per_broker=size, controller_epoch=1)


# --- the metadata: which shell holds which replica ---------------------------------------

def _with_topic(name="orders", partitions=2):
    state = ClusterMetadata()
    for record in state.handle_start():
        state.replay(record)
    records, _ = state.handle_create_topic(name, partitions, 3, None, [0, 1, 2], rng=random.Random(1))
    for record in records:
        state.replay(record)
    return state


def replay(state, records):
    for record in records:
        state.replay(record)
    return state


def test_replica_actors__recorded_with_the_topic__replayed_by_a_restarted_controller():
    state = _with_topic()
    records = assign_shells(state, "orders")
    assert len(records) == 6 and {r["type"] for r in records} == {"replica_actor"}
    held = state.replica_actor("orders", 1, 2)
    assert broker_of_shell(held) == state.partition("orders", 1).broker_of(2)
    reloaded = replay(ClusterMetadata(), [*(_with_topic_records()), *records])
    assert reloaded.replica_actors == state.replica_actors
    assert reloaded.actor_replicas[held] == ("orders", 1, 2)


def _with_topic_records():
    state = ClusterMetadata()
    records = state.handle_start()
    replay(state, records)
    topic_records, _ = state.handle_create_topic("orders", 2, 3, None, [0, 1, 2], rng=random.Random(1))
    return records + topic_records


def test_replica_actors__a_shell_holds_one_replica_ever__a_name_is_never_given_twice():
    state = _with_topic()
    assign_shells(state, "orders")
    topic = state.topic("orders")
    held = state.replica_actor("orders", 0, 0)
    with pytest.raises(ValueError, match="held by"):   # the replica has its shell
        state.handle_assign_replica_actors(topic, {(0, 0): "replica:b9:1-99"})
    replay(state, state.handle_delete_topic("orders"))
    assert state.replica_actors == {} and state.actor_replicas == {}
    replay(state, state.handle_create_topic("orders", 2, 3, None, [0, 1, 2], rng=random.Random(1))[0])
    # the deleted replica's shell was killed; its name is not reused once it was a node
    replay(state, state.handle_register_node(held, "h", 1, "0")[0])
    with pytest.raises(ValueError, match="never reused"):
        state.handle_assign_replica_actors(state.topic("orders"), {(0, 0): held})
    with pytest.raises(ValueError, match="two replicas"):
        state.handle_assign_replica_actors(state.topic("orders"), {(0, 0): "replica:b0:1-1", (0, 1): "replica:b0:1-1"})
    with pytest.raises(ValueError, match="has no replica"):
        state.handle_assign_replica_actors(state.topic("orders"), {(5, 0): "replica:b0:1-2"})


def test_replica_actors__a_reassignment_drops_the_removed_replicas_shell():
    state = _with_topic(partitions=1)
    assign_shells(state, "orders")
    p = state.partition("orders", 0)
    replay(state, [{"type": "partition", "topic": "orders", "partition": 0, "replicas": list(p.replicas[:2]),
                    "isr": [r for r in p.isr if r in p.replicas[:2]], "brokers": list(p.brokers[:2]),
                    "leader": p.replicas[0], "leader_epoch": 1, "partition_epoch": 1}])
    assert state.replica_actor("orders", 0, p.replicas[2]) is None
    assert state.replica_actor("orders", 0, p.replicas[0]) is not None


def test_image__names_each_replicas_actor__and_its_node_once_registered():
    state = _with_topic(partitions=1)
    assign_shells(state, "orders")
    leader = state.partition("orders", 0).leader
    actor = state.replica_actor("orders", 0, leader)
    image = build_image(state, 1)
    assert image.replica_actor("orders", 0, leader) == actor and image.topics["orders"].partitions[0].leader_node == -1
    replay(state, state.handle_register_node(actor, "h", 9000, "0")[0])
    image = build_image(state, 2)
    assert image.nodes[image.topics["orders"].partitions[0].leader_node].actor == actor


def test_register_nodes__new_actors_registered_together_get_distinct_new_ids():
    state = _with_topic(partitions=1)
    replay(state, state.handle_register_node("coordinator:0", "h", 1)[0])
    records, nodes = state.handle_register_nodes([("replica:b0:1-1", "h", 2, "0"), ("replica:b1:1-2", "h", 3, "1"),
                                                  ("coordinator:0", "h", 1, None)])
    assert [n.node_id for n in nodes] == [1, 2, 0] and len(records) == 2
    replay(state, records)
    assert state.handle_register_nodes([("replica:b0:1-1", "h", 2, "0")])[0] == []


# --- the assignment file ------------------------------------------------------------------

def test_assignment_file__written_once__read_back__another_replica_refused__removed(tmp_path):
    shell = replica_shell_name(0, 4, 2)
    assignment = ReplicaAssignment(topic="t", partition=1, replica_id=2, topic_id="id-1", config={"a": "1"})
    assert read_assignment(tmp_path, shell) is None
    write_assignment(tmp_path, shell, assignment)
    assert read_assignment(tmp_path, shell) == assignment
    assert assignment_path(tmp_path, shell).name == "4-2.json"
    write_assignment(tmp_path, shell, assignment)   # the same again: unchanged
    with pytest.raises(ValueError, match="cannot take another replica"):
        write_assignment(tmp_path, shell, ReplicaAssignment("t", 2, 2, "id-1", {}))
    with pytest.raises(ValueError, match="cannot take another replica"):   # a re-created topic is another replica
        write_assignment(tmp_path, shell, ReplicaAssignment("t", 1, 2, "id-2", {}))
    assert not list(assignment_path(tmp_path, shell).parent.glob("*.tmp"))
    remove_assignment(tmp_path, shell)
    remove_assignment(tmp_path, shell)
    assert read_assignment(tmp_path, shell) is None


def test_register_nodes__a_node_of_no_actor__refused_before_any_record():
    """A replica's actor read after its topic was deleted is None: registering it
    would write a node of no actor into the metadata log (every image after it
    failed to build)."""
    state = _with_topic(partitions=1)
    with pytest.raises(ValueError, match="must be named"):
        state.handle_register_nodes([("replica:b0:1-1", "h", 2, "0"), (None, "h", 3, "1")])
