"""Consumer groups under faults: a member actor killed while consuming, and the
node of the `__consumer_offsets` leader removed while groups hold offsets."""

import threading

import pytest
import ray

from rafka.actors.coordinator import OFFSETS_TOPIC, coordinator_actor_name
from rafka.actors.replica import NAMESPACE
from tests.harness import (StreamingProducer, handled_records, partition_state, recording_handler, replica,
                           wait_for_leader, wait_until)

pytestmark = pytest.mark.chaos

FAST_GROUP = dict(session_timeout_ms=2_000, heartbeat_interval_ms=300, fetch_max_wait_ms=100, max_poll_records=50)


def test_member_actor_killed__no_record_skipped_duplicates_only_from_the_uncommitted_window(cluster, tmp_path):
    admin = cluster.admin()
    admin.create_topic("shipments", partitions=3, replication_factor=3, config={"min.insync.replicas": "2"})
    total = 3_000
    with cluster.producer(acks="all", linger_ms=2) as producer:
        for i in range(total):
            producer.send("shipments", value=b"shipment-%05d" % i, partition=i % 3)
        producer.flush()
    group = cluster.run_consumer_group("shipping", ["shipments"], recording_handler(str(tmp_path), pause_s=0.02), members=2,
                                       **FAST_GROUP)

    def committed_total():
        return sum(r["current_offset"] or 0 for r in admin.consumer_group_lag("shipping"))
    wait_until(lambda: committed_total() >= total // 4, timeout_s=60, what="a quarter committed")
    victim = group.describe()[0]
    assert victim["assignment"], "the victim owns partitions when it is killed"
    ray.kill(group.members[0], no_restart=False)          # restarts and rejoins as a new member
    wait_until(lambda: committed_total() == total, timeout_s=120, what="the group committed every record")
    described = group.describe()
    assert described[0] is not None and described[0]["pid"] != victim["pid"], "member 0 restarted"
    assert sorted(tp for d in described for tp in d["assignment"]) == [("shipments", p) for p in range(3)]
    group.stop()

    seen = handled_records(str(tmp_path))
    by_partition = {}
    for _, partition, offset in seen:
        by_partition.setdefault(partition, []).append(offset)
    for partition in range(3):
        offsets = by_partition[partition]
        # no record skipped: every offset below the final committed offset was handled
        assert set(offsets) == set(range(total // 3)), f"partition {partition} has gaps"
        # duplicates only from the uncommitted window: handled by the killed process,
        # not committed before it died, so at most one batch per partition, contiguous
        duplicates = sorted({o for o in offsets if offsets.count(o) > 1})
        assert len(duplicates) <= FAST_GROUP["max_poll_records"]
        assert duplicates == list(range(duplicates[0], duplicates[0] + len(duplicates))) if duplicates else True
        if duplicates:
            assert {pid for pid, p, o in seen if p == partition and o in duplicates} >= {victim["pid"]}


def test_member_at_the_tail_across_a_leader_failover__no_reset_no_rewind_commits_never_move_back(cluster, tmp_path):
    """A member actor (auto_offset_reset=earliest, the members' default) keeps up
    with a stream; the leader is killed. The new leader's HW may trail the member's
    position for a moment: its fetch must wait there (DESIGN invariant 12), not get
    OFFSET_OUT_OF_RANGE and reset to the earliest offset, which would handle the
    partition again and move the committed offset back."""
    admin = cluster.admin()
    admin.create_topic("tail", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    before = wait_for_leader(cluster, "tail", 0)
    group = cluster.run_consumer_group("tailers", ["tail"], recording_handler(str(tmp_path)), members=1, **FAST_GROUP)
    sampled, sampling = [], threading.Event()

    def sample_commits():
        while not sampling.is_set():
            sampled.append(admin.list_consumer_group_offsets("tailers").get(_tp("tail", 0), -1))
            sampling.wait(0.05)
    sampler = threading.Thread(target=sample_commits)
    sampler.start()

    def kill_leader_at_the_tail():
        wait_until(lambda: (lambda c: c is not None and c >= 100)(
            admin.list_consumer_group_offsets("tailers").get(_tp("tail", 0))), what="the member at the tail")
        ray.kill(replica("tail", 0, before["leader"]), no_restart=False)
    stream = StreamingProducer(cluster, "tail", count=600, fault_after=100)
    acked = stream.run(kill_leader_at_the_tail)
    total = len(acked)   # 600, or more if the fault took long (the stream goes on until it returns)
    wait_until(lambda: admin.list_consumer_group_offsets("tailers").get(_tp("tail", 0)) == total, timeout_s=120,
               what="the member committed every record")
    sampling.set()
    sampler.join()
    group.stop()
    assert wait_for_leader(cluster, "tail", 0)["leader_epoch"] > before["leader_epoch"]
    assert sampled == sorted(sampled), "the committed offset moved back"
    handled = [offset for _, partition, offset in handled_records(str(tmp_path)) if partition == 0]
    assert handled == list(range(total)), "records skipped, or handled again after a reset"
    assert sorted(offset for offset, _ in acked) == list(range(total))


def test_offsets_leader_node_removed__every_committed_offset_returned_unchanged(cluster):
    """Offsets of several groups; the node of the __consumer_offsets-0 leader is
    removed and the coordinator killed too, so it reloads from the new leader;
    every group's offsets come back exactly as committed. The broker then comes
    back with its disk and its replica rejoins the ISR."""
    admin = cluster.admin()
    admin.create_topic("ledger", partitions=2, replication_factor=1)
    committed = {}
    for g in range(6):
        group = f"accounts-{g}"
        offsets = {("ledger", 0): 100 + g, ("ledger", 1): 200 + g}
        admin.alter_consumer_group_offsets(group, offsets)
        committed[group] = offsets
    state = wait_for_leader(cluster, OFFSETS_TOPIC, 0)
    leader_broker = state["brokers"][state["replicas"].index(state["leader"])]
    cluster.remove_node(cluster.node_of_broker(leader_broker))
    wait_for_leader(cluster, OFFSETS_TOPIC, 0, newer_than_epoch=state["leader_epoch"])
    coordinator = ray.get_actor(coordinator_actor_name(0), namespace=NAMESPACE)
    # it may have lived on the removed node and be restarting: wait for its answer
    pid = wait_until(lambda: ray.get(coordinator.ping.remote(), timeout=5), what="the coordinator answers")["pid"]
    ray.kill(coordinator, no_restart=False)            # its cache is gone: it must reload
    wait_until(lambda: (lambda a: a["loaded"] and a["pid"] != pid)(ray.get(coordinator.ping.remote(), timeout=5)),
               what="the restarted coordinator loaded from the new leader")
    for group, offsets in committed.items():
        assert admin.list_consumer_group_offsets(group) == _as_tps(offsets)
    # commits keep working on the new leader
    admin.alter_consumer_group_offsets("accounts-0", {("ledger", 0): 150})
    assert admin.list_consumer_group_offsets("accounts-0")[_tp("ledger", 0)] == 150
    cluster.add_node(leader_broker)                    # the broker back, with its disk
    wait_until(lambda: len(partition_state(cluster, OFFSETS_TOPIC, 0)["isr"]) == 3, timeout_s=90,
               what="the offsets partition back to 3 in-sync replicas")


def _tp(topic, partition):
    from rafka.core.structs import TopicPartition
    return TopicPartition(topic, partition)


def _as_tps(offsets):
    return {_tp(*tp): offset for tp, offset in offsets.items()}
