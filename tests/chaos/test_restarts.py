"""Restarts lose nothing (DESIGN invariant 13): a replica actor, a broker node, and
every node at once, each on the same disks, bring every partition back online with
every acked record and committed offset, each replica reopening its own log.

The whole-cluster scenario starts its own clusters on one data dir; the others
share the module's cluster. `rafka down` + `rafka up` runs last: it replaces the
controller with one started by the CLI (default options).
"""

import os
import subprocess
import sys
import time
from contextlib import ExitStack

import pytest
import ray

import rafka
from rafka.actors.controller import CONTROLLER_NAME
from rafka.actors.replica import NAMESPACE
from rafka.core.records import RecordInput, encode_batch
from rafka.core.replica import ACKS_ALL, ACKS_LEADER
from rafka.core.structs import TopicPartition
from tests.harness import (produce_to, TEST_CLUSTER_OPTIONS, TEST_COORDINATOR_OPTIONS, StreamingProducer,
                           assert_acked_once_in_order, assert_replicas_identical_below_high_watermark,
                           describe_replica, partition_state, paused, read_back, replica, wait_for_leader,
                           wait_until, wait_until_serving)

pytestmark = pytest.mark.chaos

TOPICS = {"solo": (2, 1), "trio": (2, 3)}    # name: (partitions, replication factor)


def now_ms() -> int:
    """Hand-built batches carry real timestamps: a record stamped 1970 is past any
    retention, and the test cluster enforces retention every 200 ms."""
    return int(time.time() * 1000)


def create_and_fill(cluster, records_per_partition=40) -> dict:
    """The TOPICS, acks=all records in each partition, and a group's offsets:
    returns what was acknowledged {(topic, partition): [(offset, value)]}."""
    admin = cluster.admin()
    for name, (partitions, rf) in TOPICS.items():
        admin.create_topic(name, partitions=partitions, replication_factor=rf,
                           config={"min.insync.replicas": str(min(rf, 2))})
    acked = {}
    with cluster.producer(acks="all", linger_ms=2) as producer:
        sent = {(name, p): [(v, producer.send(name, value=v, partition=p)) for v in
                            (b"%s-%d-%03d" % (name.encode(), p, i) for i in range(records_per_partition))]
                for name, (partitions, _) in TOPICS.items() for p in range(partitions)}
        for key, futures in sent.items():
            acked[key] = [(f.result(timeout=60).offset, v) for v, f in futures]
    admin.alter_consumer_group_offsets("billing", {("trio", 0): 17, ("trio", 1): 23, ("solo", 1): 5})
    return acked


def replica_leos(cluster) -> dict:
    return {(name, p, r): describe_replica(name, p, r)["log_end_offset"]
            for name, (partitions, rf) in TOPICS.items() for p in range(partitions)
            for r in partition_state(cluster, name, p)["replicas"]}


def assert_everything_back(cluster, acked, leos_before):
    """Each replica reopened its own log (its LEO as opened equals its LEO before),
    every acked record reads back once at its offset, offsets unchanged."""
    for (name, p, r), leo in leos_before.items():
        opened = describe_replica(name, p, r)["opened_log_end_offset"]
        assert opened == leo, f"replica {r} of {name}-{p} opened at {opened}, had {leo}"
    for (name, p), records in acked.items():
        assert read_back(cluster, name, p) == records, f"{name}-{p} does not read back as acked"
    assert cluster.admin().list_consumer_group_offsets("billing") == {
        TopicPartition("trio", 0): 17, TopicPartition("trio", 1): 23, TopicPartition("solo", 1): 5}


def open_cluster(data_dir):
    return rafka.local_cluster(nodes=3, data_dir=str(data_dir), coordinator_options=TEST_COORDINATOR_OPTIONS,
                               offsets_topic_segment_bytes=16_384, **TEST_CLUSTER_OPTIONS)


def test_whole_cluster_restart__every_acked_record_and_offset_back_each_replica_reopened(tmp_path):
    with open_cluster(tmp_path) as cluster:
        acked = create_and_fill(cluster)
        leos = replica_leos(cluster)
        cluster_id = ray.get(cluster.controller.metadata_snapshot.remote())["cluster_id"]
    with open_cluster(tmp_path) as cluster:          # every node new; the same brokers and disks
        print(f"whole-cluster restart: serving in {wait_until_serving(cluster):.1f} s after the cluster was up")
        assert ray.get(cluster.controller.metadata_snapshot.remote())["cluster_id"] == cluster_id
        assert_everything_back(cluster, acked, leos)
        assert all(describe_replica(*key)["opened_after_clean_shutdown"] for key in leos)
        with cluster.producer(acks="all") as producer:   # and it takes writes again
            assert producer.send("solo", value=b"after", partition=0).result(timeout=60).offset == 40


def test_broker_restarted_while_producing__replica_reopens_catches_up_the_tail_and_rejoins(cluster):
    cluster.admin().create_topic("stream", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    before = wait_for_leader(cluster, "stream", 0)
    leader_broker = before["brokers"][before["replicas"].index(before["leader"])]
    stream = StreamingProducer(cluster, "stream", count=400, fault_after=150)
    acked = stream.run(lambda: cluster.restart_node(leader_broker))
    assert_acked_once_in_order(cluster, "stream", acked)
    wait_until(lambda: set(partition_state(cluster, "stream", 0)["isr"]) == {0, 1, 2}, timeout_s=90,
               what="the restarted broker's replica back in the ISR")
    rejoined = describe_replica("stream", 0, before["leader"])
    assert rejoined["broker_id"] == leader_broker and rejoined["role"] == "follower"
    assert rejoined["opened_log_end_offset"] > 150 - 1          # reopened its log, did not start empty
    log_bytes = len(assert_replicas_identical_below_high_watermark(cluster, "stream", 0))
    assert 0 < rejoined["fetched_bytes"] < log_bytes, "the rejoining follower fetched the log from offset 0"


def test_leader_broker_restarted_with_an_unreplicated_tail__its_replica_truncates_it_by_leader_epoch(cluster):
    """The followers are paused; the leader takes an acks=1 write they never see;
    its broker goes down, the followers resume and one is elected; the broker comes
    back with its disk. Its replica reopens its log, tail included, then truncates
    the tail by leader epoch (KIP-101) before catching up: it never serves it."""
    cluster.admin().create_topic("tail-cut", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    before = wait_for_leader(cluster, "tail-cut", 0)
    old = before["leader"]
    leader_broker = before["brokers"][before["replicas"].index(old)]
    leader = replica("tail-cut", 0, old)
    for i in range(10):
        produce_to(leader, encode_batch([RecordInput(b"acked-%d" % i)], now_ms=now_ms()), ACKS_ALL, 10_000).result(timeout=60)
    follower_pids = [describe_replica("tail-cut", 0, r)["pid"] for r in before["replicas"] if r != old]
    with ExitStack() as stack:
        for pid in follower_pids:
            stack.enter_context(paused(pid))
        # a fetch parked at the leader when its follower stopped would carry the next
        # write to it (the answer waits in its socket): let those expire first
        wait_until(lambda: describe_replica("tail-cut", 0, old)["parked_follower_fetches"] == 0,
                   what="no follower fetch parked at the leader")
        produce_to(leader, encode_batch([RecordInput(b"unreplicated")], now_ms=now_ms()), ACKS_LEADER,
                                      10_000).result(timeout=60)
        cluster.remove_node(cluster.node_of_broker(leader_broker))
    new = wait_for_leader(cluster, "tail-cut", 0, newer_than_epoch=before["leader_epoch"])
    assert new["leader"] != old
    with cluster.producer(acks="all") as producer:
        producer.send("tail-cut", value=b"after", partition=0).result(timeout=60)
    cluster.add_node(leader_broker)
    wait_until(lambda: set(partition_state(cluster, "tail-cut", 0)["isr"]) == {0, 1, 2}, timeout_s=90,
               what="the restarted replica back in the ISR")
    rejoined = describe_replica("tail-cut", 0, old)
    assert rejoined["opened_log_end_offset"] == 11          # reopened with the unreplicated tail
    log = assert_replicas_identical_below_high_watermark(cluster, "tail-cut", 0)
    assert b"unreplicated" not in log
    assert b"unreplicated" not in ray.get(replica("tail-cut", 0, old).read_below_high_watermark.remote())
    assert [v for _, v in read_back(cluster, "tail-cut")] == [b"acked-%d" % i for i in range(10)] + [b"after"]


def test_rf1_partition__replica_killed_then_its_broker_restarted__online_with_every_record(cluster):
    cluster.admin().create_topic("single", partitions=1, replication_factor=1)
    with cluster.producer(acks="all") as producer:
        acked = [(producer.send("single", value=b"s-%03d" % i).result(timeout=60).offset, b"s-%03d" % i)
                 for i in range(30)]
    state = wait_for_leader(cluster, "single", 0)
    ray.kill(replica("single", 0, 0), no_restart=False)
    state = wait_for_leader(cluster, "single", 0, newer_than_epoch=state["leader_epoch"])
    assert read_back(cluster, "single") == acked
    cluster.restart_node(state["brokers"][0])
    wait_for_leader(cluster, "single", 0, newer_than_epoch=state["leader_epoch"], timeout_s=120)
    assert read_back(cluster, "single") == acked
    assert describe_replica("single", 0, 0)["opened_log_end_offset"] == 30


def test_replicas_shut_down_but_rafka_down_unfinished__rafka_up_brings_every_partition_back(cluster):
    """`rafka down` shut the replicas down (logs closed) but died before killing
    them; `rafka up` finds the stopped controller and the stopped replicas."""
    from rafka.cluster import start_controller
    cluster.admin().create_topic("halted", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    with cluster.producer(acks="all") as producer:
        acked = [(producer.send("halted", value=b"h-%d" % i).result(timeout=60).offset, b"h-%d" % i)
                 for i in range(20)]
    closed = ray.get(cluster.controller.shutdown_replicas.remote())
    assert closed["closed"] == closed["replicas"] > 0
    assert ray.get(replica("halted", 0, 0).ping.remote())["role"] == "stopped"
    start_controller(cluster.data_dir)
    wait_until_serving(cluster)
    assert read_back(cluster, "halted") == acked
    assert all(describe_replica("halted", 0, r)["opened_after_clean_shutdown"] for r in range(3))


def test_rafka_down_then_up__every_acked_record_and_offset_back_each_replica_reopened(cluster):
    acked = create_and_fill(cluster)
    leos = replica_leos(cluster)
    env = dict(os.environ, RAY_ADDRESS=cluster.ray_cluster.address)

    def rafka_cli(*args):
        done = subprocess.run([sys.executable, "-m", "rafka.cli", *args], env=env, capture_output=True,
                              text=True, timeout=180)
        assert done.returncode == 0, done.stderr
        return done.stdout

    replicas = sum(len(p["replicas"]) for t in ray.get(cluster.controller.metadata_snapshot.remote())["topics"].values()
                   for p in t["partitions"])
    out = rafka_cli("down")
    assert f"replicas shut down cleanly: {replicas} of {replicas}" in out
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == NAMESPACE]
    rafka_cli("up", "--data-dir", cluster.data_dir, "--listener-port", "0")   # its brokers share this host
    cluster.controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    wait_until_serving(cluster)
    assert_everything_back(cluster, acked, leos)
