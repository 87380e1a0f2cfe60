"""Cluster: failover (R=3, min ISR 2) under faults: kills, pauses, node loss.

Each scenario produces with acks=all while a fault strikes, then checks what
Kafka promises: every acknowledged record is read back exactly once, in order,
and every replica's log below the HW is the same bytes as the leader's.
"""

import os
import signal

import pytest
import ray

from rafka.actors.controller import CONTROLLER_NAME
from rafka.actors.replica import NAMESPACE
from rafka.core.errors import NotEnoughReplicas, NotLeaderOrFollower
from rafka.core.records import RecordInput, encode_batch
from rafka.core.replica import ACKS_ALL, ACKS_LEADER
from tests.harness import (produce_to, replica_wire, StreamingProducer, assert_acked_once_in_order,
                           assert_replicas_identical_below_high_watermark, describe_replica,
                           partition_state, paused, read_back, replica, wait_for_controller_epoch_after, wait_for_leader,
                           wait_until)

pytestmark = pytest.mark.chaos

def create(cluster, topic):
    cluster.admin().create_topic(topic, partitions=1, replication_factor=3,
                                 config={"min.insync.replicas": "2"})
    return wait_for_leader(cluster, topic, 0)


def test_leader_actor_killed__acked_writes_survive(cluster):
    before = create(cluster, "kill-leader")
    stream = StreamingProducer(cluster, "kill-leader")
    acked = stream.run(lambda: ray.kill(replica("kill-leader", 0, before["leader"]), no_restart=False))
    after = wait_for_leader(cluster, "kill-leader", 0, newer_than_epoch=before["leader_epoch"])
    assert after["leader"] != before["leader"]
    assert_acked_once_in_order(cluster, "kill-leader", acked)


def test_follower_killed__acked_writes_survive_and_it_rejoins_isr(cluster):
    before = create(cluster, "kill-follower")
    follower = [r for r in before["replicas"] if r != before["leader"]][0]
    pid = describe_replica("kill-follower", 0, follower)["pid"]
    stream = StreamingProducer(cluster, "kill-follower")
    acked = stream.run(lambda: os.kill(pid, signal.SIGKILL))
    assert_acked_once_in_order(cluster, "kill-follower", acked)
    wait_until(lambda: set(partition_state(cluster, "kill-follower", 0)["isr"]) == {0, 1, 2},
               what="the restarted follower back in the ISR")
    assert describe_replica("kill-follower", 0, follower)["pid"] != pid


@pytest.fixture(scope="module")
def cluster():
    """The module's cluster replaces a broker gone for 5 s (Kafka-like clusters wait
    far longer; brokers restarted in other modules must not be replaced)."""
    import rafka
    from tests.harness import TEST_CLUSTER_OPTIONS, TEST_COORDINATOR_OPTIONS
    with rafka.local_cluster(nodes=3, coordinator_options=TEST_COORDINATOR_OPTIONS, offsets_topic_segment_bytes=16_384,
                             broker_replacement_timeout_ms=5_000, **TEST_CLUSTER_OPTIONS) as embedded:
        yield embedded


def test_broker_removed_for_good__its_replicas_move_to_a_new_broker_after_the_timeout(cluster):
    before = create(cluster, "lose-node")
    leader_broker = before["brokers"][before["replicas"].index(before["leader"])]
    leader_node = cluster.node_of_broker(leader_broker)

    def brokers():
        return {b["broker_id"] for b in ray.get(cluster.controller.list_brokers.remote())}
    assert brokers() == {0, 1, 2}
    stream = StreamingProducer(cluster, "lose-node")
    acked = stream.run(lambda: cluster.remove_node(leader_node))
    after = wait_for_leader(cluster, "lose-node", 0, newer_than_epoch=before["leader_epoch"])
    assert before["leader"] not in after["isr"]
    wait_until(lambda: leader_broker not in brokers(), what="the dead broker leaving the registry")
    cluster.add_node()                                   # a new machine: a new broker id
    new_broker = max(brokers())
    assert new_broker not in before["brokers"]
    moved = wait_until(lambda: (lambda s: s if leader_broker not in s["brokers"] and not s["adding"]
                                and len(s["isr"]) == 3 else None)(partition_state(cluster, "lose-node", 0)),
                       timeout_s=90, what="the lost broker's replica replaced and the ISR full again")
    assert sorted(moved["brokers"]) == sorted([b for b in before["brokers"] if b != leader_broker] + [new_broker])
    assert before["leader"] not in moved["replicas"]
    assert_acked_once_in_order(cluster, "lose-node", acked)
    new_replica = [r for r, b in zip(moved["replicas"], moved["brokers"]) if b == new_broker][0]
    rebuilt = describe_replica("lose-node", 0, new_replica)
    assert rebuilt["broker_id"] == new_broker and rebuilt["opened_log_end_offset"] == 0
    assert rebuilt["log_end_offset"] >= len(acked)


def test_leader_paused_until_replaced__cannot_ack_steps_down_and_truncates_its_tail(cluster):
    """Followers stop, the leader takes an acks=1 write they never see, then the
    leader stops and the followers crash and come back: one of them is elected.
    The old leader, resumed, must not acknowledge an acks=all write, must step
    down, and must cut the acks=1 tail, which no other replica holds."""
    before = create(cluster, "zombie")
    old = before["leader"]
    followers = [r for r in before["replicas"] if r != old]
    for i in range(10):
        produce_to(replica("zombie", 0, old), encode_batch([RecordInput(b"acked-%d" % i)]), ACKS_ALL,
                   10_000).result(timeout=60)
    wait_until(lambda: all(describe_replica("zombie", 0, r)["log_end_offset"] == 10 for r in followers))
    follower_pids = [describe_replica("zombie", 0, r)["pid"] for r in followers]
    old_pid = describe_replica("zombie", 0, old)["pid"]
    zombie = replica_wire(replica("zombie", 0, old))   # asked now: it is paused when written to
    for pid in follower_pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        tail = produce_to(zombie, encode_batch([RecordInput(b"unreplicated")]), ACKS_LEADER,
                          10_000).result(timeout=60)
        assert tail == 10
    finally:
        with paused(old_pid):
            # A fetch a follower sent just before it stopped may still be answered,
            # with the tail, into its socket (which would be replication, not the bug
            # this test looks for). No wait on the leader can rule that out, so the
            # stopped followers are killed instead of resumed: an answer in flight
            # dies with them, and Ray restarts them on their brokers' logs.
            for pid in follower_pids:
                os.kill(pid, signal.SIGKILL)
            parked = produce_to(zombie, encode_batch([RecordInput(b"never-acked")]), ACKS_ALL, 10_000)
            new = wait_for_leader(cluster, "zombie", 0, newer_than_epoch=before["leader_epoch"])
            assert new["leader"] in followers and old not in new["isr"]
            # The follower still restarting may have been left out of the new ISR; with
            # min ISR 2 an acks=all write waits until it is back in.
            wait_until(lambda: set(partition_state(cluster, "zombie", 0)["isr"]) == set(followers),
                       what="both restarted followers in the new ISR")
            for i in range(5):
                produce_to(replica("zombie", 0, new["leader"]), encode_batch([RecordInput(b"new-%d" % i)]),
                           ACKS_ALL, 10_000).result(timeout=60)
    with pytest.raises((NotLeaderOrFollower,)):
        parked.result(timeout=30)
    wait_until(lambda: (d := describe_replica("zombie", 0, old))["role"] == "follower"
               and d["leader_epoch"] == new["leader_epoch"], what="the old leader stepping down")
    log = assert_replicas_identical_below_high_watermark(cluster, "zombie", 0)
    values = [v for _, v in read_back(cluster, "zombie")]
    assert values == [b"acked-%d" % i for i in range(10)] + [b"new-%d" % i for i in range(5)]
    assert b"unreplicated" not in ray.get(replica("zombie", 0, old).read_below_high_watermark.remote())
    assert describe_replica("zombie", 0, old)["log_end_offset"] == 15 and log


def test_controller_killed_during_produce__acked_writes_survive_and_metadata_returns(cluster):
    before = create(cluster, "headless")
    controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    epoch = ray.get(controller.ping.remote())
    snapshot = ray.get(controller.metadata_snapshot.remote())
    stream = StreamingProducer(cluster, "headless")
    acked = stream.run(lambda: ray.kill(controller, no_restart=False))
    assert wait_for_controller_epoch_after(controller, epoch) == epoch + 1
    restored = ray.get(controller.metadata_snapshot.remote())
    assert restored["cluster_id"] == snapshot["cluster_id"]
    assert restored["topics"]["headless"]["topic_id"] == snapshot["topics"]["headless"]["topic_id"]
    assert partition_state(cluster, "headless", 0)["leader_epoch"] == before["leader_epoch"]
    assert_acked_once_in_order(cluster, "headless", acked)


def test_follower_paused__leaves_isr_after_lag_time_and_rejoins_after_catching_up(cluster):
    before = create(cluster, "slow")
    leader = replica("slow", 0, before["leader"])
    follower = [r for r in before["replicas"] if r != before["leader"]][0]
    pid = describe_replica("slow", 0, follower)["pid"]

    def check_high_watermark_rule():
        """HW never passes the smallest LEO of the ISR (as the leader sees it, and as
        the ISR members' own logs are: their LEOs only grow here)."""
        state = ray.get(leader.describe.remote())
        isr_leos = [state["log_end_offset"]] + [state["remote_log_end_offsets"][r]
                                                for r in state["isr"] if r != before["leader"]]
        assert state["high_watermark"] <= min(isr_leos)
        for r in state["isr"]:
            if r != follower:
                assert state["high_watermark"] <= describe_replica("slow", 0, r)["log_end_offset"]
        return state

    with cluster.producer(acks="all", linger_ms=1) as producer:
        with paused(pid):
            futures = [producer.send("slow", b"s-%d" % i, partition=0) for i in range(20)]
            wait_until(lambda: follower not in check_high_watermark_rule()["isr"], timeout_s=30,
                       what="the paused follower leaving the ISR")
            assert follower not in partition_state(cluster, "slow", 0)["isr"]
            assert [f.result(timeout=30).offset for f in futures] == list(range(20))
            for i in range(20, 40):
                producer.send("slow", b"s-%d" % i, partition=0).result(timeout=30)
            check_high_watermark_rule()
        wait_until(lambda: follower in check_high_watermark_rule()["isr"], timeout_s=30,
                   what="the resumed follower rejoining the ISR")
    assert follower in partition_state(cluster, "slow", 0)["isr"]
    assert describe_replica("slow", 0, follower)["log_end_offset"] == 40


def test_leader_missed_the_controllers_isr_change__its_refused_shrink_reads_it__the_hw_moves_on(cluster):
    """The controller changed the ISR and its push to the leader (`apply_isr`, a call
    bounded by leader_ping_timeout_ms) was lost: here the test makes the change
    itself, in the leader's name, so the leader never hears of it. The leader's next
    change (a paused follower leaving) names the old partition epoch and is refused
    INVALID_UPDATE_VERSION; it then reads the controller's record and applies it.
    Before, it dropped its change and proposed it again, refused each time, and the
    paused follower held the HW: no acks=all write was acknowledged until it came
    back."""
    before = create(cluster, "unheard")
    leader = before["leader"]
    kept, stopped = [r for r in before["replicas"] if r != leader]
    missed = ray.get(cluster.controller.alter_isr.remote("unheard", 0, leader, before["leader_epoch"],
                                                         before["partition_epoch"], [leader, kept]), timeout=30)
    assert missed["partition_epoch"] == before["partition_epoch"] + 1
    assert stopped in ray.get(replica("unheard", 0, leader).describe.remote())["isr"]   # it did not hear

    with cluster.producer(acks="all", linger_ms=1) as producer:
        with paused(describe_replica("unheard", 0, stopped)["pid"]):
            futures = [producer.send("unheard", b"u-%d" % i, partition=0) for i in range(10)]
            wait_until(lambda: stopped not in ray.get(replica("unheard", 0, leader).describe.remote())["isr"],
                       timeout_s=30, what="the leader applying the ISR it missed")
            assert [f.result(timeout=30).offset for f in futures] == list(range(10))
        wait_until(lambda: stopped in partition_state(cluster, "unheard", 0)["isr"], timeout_s=30,
                   what="the resumed follower back in the controller's ISR")
    assert describe_replica("unheard", 0, stopped)["log_end_offset"] == 10


def test_acks_all__isr_below_min_isr__not_enough_replicas_and_not_visible(cluster):
    before = create(cluster, "thin")
    leader = replica("thin", 0, before["leader"])
    pids = [describe_replica("thin", 0, r)["pid"] for r in before["replicas"] if r != before["leader"]]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: ray.get(leader.describe.remote())["isr"] == [before["leader"]], timeout_s=30,
                   what="ISR shrunk to the leader")
        with pytest.raises(NotEnoughReplicas):
            produce_to(leader, encode_batch([RecordInput(b"x")]), ACKS_ALL, 5_000).result(timeout=60)
        state = ray.get(leader.describe.remote())
        assert state["log_end_offset"] == 0 and state["high_watermark"] == 0
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert read_back(cluster, "thin") == []


def test_idempotence__retry_after_the_leader_appended_before_the_ack__written_once(cluster):
    """The followers pause, so the leader appends the batch but cannot ack it: the
    request times out and the producer resends the same batch (and keeps resending
    through NOT_ENOUGH_REPLICAS once the ISR shrinks). After the followers resume,
    the leader answers the resend with the first append's offset."""
    before = create(cluster, "once")
    leader = replica("once", 0, before["leader"])
    pids = [describe_replica("once", 0, r)["pid"] for r in before["replicas"] if r != before["leader"]]
    producer = cluster.producer(acks="all", request_timeout_ms=1_000, retry_backoff_ms=100)
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            future = producer.send("once", b"exactly-once", partition=0)
            wait_until(lambda: ray.get(leader.describe.remote())["log_end_offset"] == 1,
                       what="the leader appending")
            wait_until(lambda: producer.metrics()["record-retry-total"] >= 1, what="a resend")
            assert not future.done()
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        assert future.result(timeout=60).offset == 0
    finally:
        producer.close()
    assert [v for _, v in read_back(cluster, "once")] == [b"exactly-once"]
    assert ray.get(leader.describe.remote())["log_end_offset"] == 1
