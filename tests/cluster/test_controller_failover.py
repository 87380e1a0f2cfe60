"""Controller and replica actors on a simulated 3-node Ray cluster."""

import pytest
import ray
from ray.util.placement_group import placement_group_table

from rafka.core.actor_names import REPLICA_SHELL_PREFIX, broker_of_shell
from rafka.core.records import RecordInput, decode_records, encode_batch
from rafka.core.replica import ACKS_ALL

from tests.harness import produce_to, replica, wait_for_controller_epoch_after, wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def controller(cluster):
    return cluster.controller


def leader_of(controller, topic, partition):
    return ray.get(controller.metadata_snapshot.remote())["topics"][topic]["partitions"][partition]


def test_create_topic__each_partitions_replicas_on_three_distinct_nodes(cluster):
    admin = cluster.admin()
    admin.create_topic("placed", partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
    described = admin.describe_topics(["placed"])["placed"]
    for p in described["partitions"]:
        assert len(set(p["replica_nodes"].values())) == 3 and None not in p["replica_nodes"].values()
        assert p["leader_epoch"] == 0
        assert p["leader_node"] == p["replica_nodes"][p["leader"]]
    assert "placed" in admin.list_topics()
    # Every replica in sync. Not asserted at the creation's instant: with this module's
    # replica.lag.time.max.ms of 2 s, a follower whose process starts slowly on a loaded
    # machine leaves the ISR and rejoins once caught up (a CI run saw ISR [0] just after
    # the creation); the leader keeps epoch 0 through that.
    wait_until(lambda: all(p["isr"] == p["replicas"] and p["leader_epoch"] == 0
                           for p in admin.describe_topics(["placed"])["placed"]["partitions"]),
               what="every replica of placed in its ISR at leader epoch 0")


def test_leader_actor_killed__new_leader_next_epoch_and_acked_writes_survive(controller):
    ray.get(controller.create_topic.remote("orders", 1, 3, {"min.insync.replicas": "2"}))
    first = leader_of(controller, "orders", 0)
    leader = replica("orders", 0, first["leader"])
    wait_until(lambda: ray.get(leader.ping.remote())["role"] == "leader")
    acked = []
    for i in range(30):
        result = produce_to(leader, encode_batch([RecordInput(b"order-%d" % i)]), ACKS_ALL, 10_000).result(timeout=60)
        acked.append((result, b"order-%d" % i))
    ray.kill(leader, no_restart=False)  # the actor restarts; the controller must move leadership
    now = wait_until(lambda: (s := leader_of(controller, "orders", 0))["leader_epoch"] > first["leader_epoch"] and s)
    assert now["leader"] != first["leader"] and now["leader_epoch"] == first["leader_epoch"] + 1
    new_leader = replica("orders", 0, now["leader"])
    wait_until(lambda: ray.get(new_leader.ping.remote()) ["role"] == "leader")
    for i in range(30, 40):
        result = produce_to(new_leader, encode_batch([RecordInput(b"order-%d" % i)]), ACKS_ALL, 10_000).result(timeout=60)
        acked.append((result, b"order-%d" % i))
    data = ray.get(new_leader.read_below_high_watermark.remote())
    assert [(r.offset, r.value) for r in decode_records(data)] == acked
    # the restarted replica follows again and converges to the same bytes below the HW
    hw = ray.get(new_leader.describe.remote())["high_watermark"]
    for r in now["replicas"]:
        wait_until(lambda r=r: ray.get(replica("orders", 0, r).describe.remote())["high_watermark"] >= hw)
        got = ray.get(replica("orders", 0, r).read_below_high_watermark.remote())
        assert got[:len(data)] == data


def test_producer__acks_all_across_a_leader_kill__every_record_once_in_order(cluster):
    admin = cluster.admin()
    admin.create_topic("payments", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    with cluster.producer(acks="all", linger_ms=1, batch_size=200) as producer:
        first = [producer.send("payments", b"p-%d" % i, key=b"k") for i in range(50)]
        offsets = [f.result(timeout=30).offset for f in first]
        assert offsets == list(range(50))
        before = leader_of(cluster.controller, "payments", 0)
        ray.kill(replica("payments", 0, before["leader"]), no_restart=False)
        # Half races the kill (it may reach the old leader first); the rest goes once
        # a new leader is elected, to the leader the producer's metadata still names.
        second = [producer.send("payments", b"p-%d" % i, key=b"k") for i in range(50, 75)]
        wait_until(lambda: leader_of(cluster.controller, "payments", 0)["leader_epoch"] > before["leader_epoch"],
                   what="a new leader elected")
        second += [producer.send("payments", b"p-%d" % i, key=b"k") for i in range(75, 100)]
        offsets += [f.result(timeout=60).offset for f in second]
    assert offsets == list(range(100))
    after = leader_of(cluster.controller, "payments", 0)
    assert after["leader_epoch"] > before["leader_epoch"]
    data = ray.get(replica("payments", 0, after["leader"]).read_below_high_watermark.remote())
    assert [r.value for r in decode_records(data)] == [b"p-%d" % i for i in range(100)]


def full_pool(controller):
    """The pool's idle shells by broker, once every live broker's pool is full and answered."""
    def full():
        pool = ray.get(controller.replica_pool.remote())
        ready = pool["ready"]
        return len(ready) == 3 and all(len(names) == pool["size_per_broker"] for names in ready.values()) and ready
    return wait_until(full, what="a full replica pool")


def shells_running():
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == "rafka" and a["name"].startswith(REPLICA_SHELL_PREFIX)}


def test_new_topic__takes_the_pools_shells_on_its_brokers__the_pool_refills__deletion_kills_its_shells(cluster):
    """local_cluster keeps one idle replica actor per broker: a 2-partition RF3 topic
    takes them (one per broker) and has three made on the spot; the pool is full
    again after; deleting the topic kills all six (never reused) and their groups."""
    controller = cluster.controller
    idle = full_pool(controller)
    admin = cluster.admin()
    admin.create_topic("pooled", partitions=2, replication_factor=3)
    partitions = ray.get(controller.metadata_snapshot.remote())["topics"]["pooled"]["partitions"]
    actors = {(p["partition"], r): actor for p in partitions for r, actor in p["actors"].items()}
    assert {name for names in idle.values() for name in names} <= set(actors.values()) and len(set(actors.values())) == 6
    for p in partitions:
        for r, actor in p["actors"].items():
            assert broker_of_shell(actor) == p["brokers"][p["replicas"].index(r)]
            held = ray.get(ray.get_actor(actor, namespace="rafka").describe.remote())
            assert (held["topic"], held["partition"], held["replica_id"], held["actor"]) == ("pooled", p["partition"], r,
                                                                                             actor)
    refilled = full_pool(controller)
    assert not {name for names in refilled.values() for name in names} & set(actors.values())
    admin.delete_topic("pooled")
    assert not set(actors.values()) & shells_running()
    groups = {g["name"] for g in placement_group_table().values() if g.get("state") != "REMOVED"}
    assert not {f"rafka:{actor}" for actor in actors.values()} & groups
    assert full_pool(controller) == refilled


def _prepared(_shell) -> tuple[bool, int]:
    from rafka.actors.cluster_credential import _known
    from rafka.core.scram import salted_password
    return _known() is not None, salted_password.cache_info().currsize


def test_pool_shell__prepared_before_a_topic_takes_it__cluster_login_and_its_pbkdf2_done(cluster):
    """A shell's one-time work (the cluster login, which loads the controller's
    actor class, and its PBKDF2) is done while it waits in the pool, not in the
    creation that takes it."""
    idle = full_pool(cluster.controller)
    for names in idle.values():
        shell = ray.get_actor(names[0], namespace="rafka")
        assert ray.get(shell.__ray_call__.remote(_prepared)) == (True, 1)


def test_controller_killed__its_successor_adopts_the_idle_shells_and_makes_none(cluster):
    controller = cluster.controller
    idle = full_pool(controller)
    epoch = ray.get(controller.ping.remote())
    ray.kill(controller, no_restart=False)
    wait_for_controller_epoch_after(controller, epoch)
    assert full_pool(controller) == idle
    held = {actor for topic in ray.get(controller.metadata_snapshot.remote())["topics"].values()
            for p in topic["partitions"] for actor in p["actors"].values()}
    assert shells_running() == held | {name for names in idle.values() for name in names}


def _set_start_timeout(controller, timeout_ms: int) -> None:
    ray.get(controller.__ray_call__.remote(lambda self: setattr(self, "replica_start_timeout_ms", timeout_ms)))


def test_every_replica_later_than_the_start_timeout__the_watch_loop_brings_the_partitions_online(cluster):
    """A creation on a saturated machine (session 21: 156 new processes) can see
    every replica of a partition miss `replica_start_timeout_ms`: the watch loop
    then gives each its role and registers its endpoint, and every partition
    leads and takes acks=all writes. Here the timeout is 0: no replica answers in it."""
    controller = cluster.controller
    _set_start_timeout(controller, 0)
    try:
        cluster.admin().create_topic("late", partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})
    finally:
        _set_start_timeout(controller, 120_000)
    wait_until(lambda: all(p["leader"] >= 0 and p["leader_node"] is not None and len(p["isr"]) == 3
                           for p in cluster.admin().describe_topics(["late"])["late"]["partitions"]),
               timeout_s=60, what="every partition of 'late' led, its ISR whole")
    with cluster.producer(acks="all") as producer:
        offsets = [producer.send("late", value=b"v%d" % p, partition=p).result(timeout=60) for p in (0, 1)]
    assert [o.offset for o in offsets] == [0, 0]
    cluster.admin().delete_topic("late")


def test_a_live_broker_not_listening__clients_bootstrap_from_the_others_without_waiting_for_it(cluster):
    """A broker Ray counts live whose node does not listen (a lost node Ray has not
    noticed yet; here broker 99, which has no node) must not hold every client's
    bootstrap for BROKERS_LISTEN_WAIT_S (60 s): the listening brokers are answered."""
    controller = cluster.controller
    ray.get(controller.__ray_call__.remote(lambda self: self._live_brokers.add(99)))
    try:
        address = ray.get(controller.bootstrap_address.remote(), timeout=30)
    finally:
        ray.get(controller.__ray_call__.remote(lambda self: self._live_brokers.discard(99)))
        try:   # the watch loop made its network process, which no node can run
            ray.kill(ray.get_actor("broker:99:0", namespace="rafka"), no_restart=True)
        except ValueError:
            pass
    assert len(address.split(",")) == 3
