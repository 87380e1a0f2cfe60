"""Replica actors on one Ray node: long-poll replication and acks=all, driven by hand
(the controller comes next); shells given their replica by `assign`, and reopening
it when Ray restarts them."""

import dataclasses
import itertools

import pytest
import ray

from rafka.actors.replica import NAMESPACE, STOPPED, UNASSIGNED, ReplicaActor
from rafka.core.actor_names import replica_shell_name
from rafka.core.broker_identity import BROKER_ID_LABEL
from rafka.core.cluster_image import EMPTY_IMAGE
from rafka.core.errors import NotEnoughReplicas, NotLeaderOrFollower
from rafka.core.records import RecordInput, decode_records, encode_batch
from rafka.core.replica import ACKS_ALL
from tests.harness import produce_to, fetch_from

pytestmark = pytest.mark.ray

OPEN_IMAGE = dataclasses.replace(EMPTY_IMAGE, version=0)


@pytest.fixture(scope="module")
def ray_node():
    # one broker node: replicas reach their log dirs through its broker id label
    ray.init(num_cpus=2, namespace=NAMESPACE, include_dashboard=False, labels={BROKER_ID_LABEL: "0"})
    yield
    ray.shutdown()


_shells = itertools.count()


def start_shell(data_dir, **options):
    """A replica actor holding no replica (as the controller's pool makes them), on
    broker 0; (its name, its handle)."""
    name = replica_shell_name(0, 1, next(_shells))
    return name, ray.remote(ReplicaActor).options(name=name, num_cpus=0, max_restarts=-1).remote(
        name=name, data_dir=str(data_dir), cluster_id="cluster-id", **options)


def start_replica(tmp_path, topic, replica_id, config=None, **options):
    """A shell given replica `replica_id` of partition 0 (its data dir of its own)."""
    _, handle = start_shell(tmp_path / f"node-{replica_id}", **{"fetch_max_wait_ms": 200, **options})
    ray.get(handle.assign.remote(topic=topic, partition=0, replica_id=replica_id, topic_id=f"{topic}-id",
                                 config=config or {}))
    # no controller here: the image it would push (an open cluster, no SASL) is given by
    # hand, else a node before its first image asks every client for a login
    ray.get(handle.update_image.remote(OPEN_IMAGE))
    return handle


def start_replicas(tmp_path, topic, count, config=None, **options):
    """One data dir per replica: on one Ray node (broker 0) they stand in for
    separate brokers' disks."""
    return [start_replica(tmp_path, topic, i, config, **options) for i in range(count)]


def test_acks_all__completes_once_followers_replicated_and_logs_match(ray_node, tmp_path):
    leader, *followers = start_replicas(tmp_path, "sync", 3, {"min.insync.replicas": "2"})
    endpoint = ray.get(leader.become_leader.remote(0, [0, 1, 2], [0, 1, 2], 0))
    ray.get([f.become_follower.remote(0, 0, endpoint) for f in followers])
    results = [produce_to(leader, encode_batch([RecordInput(b"order-%d" % i)]), ACKS_ALL, 10_000).result(timeout=60)
               for i in range(20)]
    assert results == list(range(20))
    state = ray.get(leader.describe.remote())
    assert state["high_watermark"] == 20 and state["isr"] == [0, 1, 2]
    leader_bytes = ray.get(leader.read_below_high_watermark.remote())
    assert [r.value for r in decode_records(leader_bytes)] == [b"order-%d" % i for i in range(20)]
    for follower in followers:
        follower_bytes = ray.get(follower.read_below_high_watermark.remote())
        assert follower_bytes == leader_bytes[:len(follower_bytes)]  # a prefix: its HW may lag by a fetch
    consumed = fetch_from(leader, 0)
    assert decode_records(consumed.records)[-1].offset == 19


def test_acks_all__isr_below_min_isr__not_enough_replicas(ray_node, tmp_path):
    (leader,) = start_replicas(tmp_path, "lonely", 1, {"min.insync.replicas": "2"})
    ray.get(leader.become_leader.remote(0, [0, 1], [0], 0))
    with pytest.raises(NotEnoughReplicas):
        produce_to(leader, encode_batch([RecordInput(b"x")]), ACKS_ALL, 1_000).result(timeout=60)
    assert ray.get(leader.describe.remote())["log_end_offset"] == 0


def test_deposed_leader__parked_acks_all_produce_fails_not_leader(ray_node, tmp_path):
    leader, follower = start_replicas(tmp_path, "deposed", 2)
    ray.get(leader.become_leader.remote(0, [0, 1], [0, 1], 0))   # the follower never fetches
    parked = produce_to(leader, encode_batch([RecordInput(b"x")]), ACKS_ALL, 30_000)
    endpoint = ray.get(follower.become_leader.remote(1, [0, 1], [1], 1))
    ray.get(leader.become_follower.remote(1, 1, endpoint))
    with pytest.raises(NotLeaderOrFollower):
        parked.result(timeout=60)


def test_compacted_topic__every_replica_cleans_its_own_log_on_a_timer(ray_node, tmp_path):
    from tests.harness import wait_until
    config = {"cleanup.policy": "compact", "segment.bytes": "300", "min.insync.replicas": "2"}
    leader, follower = start_replicas(tmp_path, "compacted", 2, config, fetch_max_wait_ms=100,
                                      log_cleaner_backoff_ms=100)
    endpoint = ray.get(leader.become_leader.remote(0, [0, 1], [0, 1], 0))
    ray.get(follower.become_follower.remote(0, 0, endpoint))
    for i in range(60):
        batch = encode_batch([RecordInput(b"value-%d" % i, b"key-%d" % (i % 4))])
        produce_to(leader, batch, ACKS_ALL, 10_000).result(timeout=60)
    latest = {b"key-%d" % k: b"value-%d" % (56 + k) for k in range(4)}

    def cleaned(replica) -> bool:
        records = decode_records(ray.get(replica.read_below_high_watermark.remote()))
        offsets = [r.offset for r in records]
        newest = {}
        for r in records:
            newest[r.key] = r.value
        return len(records) < 20 and offsets == sorted(offsets) and newest == latest
    wait_until(lambda: cleaned(leader) and cleaned(follower), timeout_s=30, what="both replicas compacted")
    assert ray.get(leader.describe.remote())["high_watermark"] == 60   # offsets kept, nothing re-numbered


def test_log_dir_of_another_cluster__replica_offline_with_the_typed_error_and_disk_untouched(ray_node, tmp_path):
    from rafka.core.broker_identity import ensure_identity
    from rafka.core.errors import InconsistentClusterId
    log_dir = tmp_path / "node-0" / "broker-0"
    ensure_identity(log_dir, broker_id=0, cluster_id="another-cluster")
    before = sorted(p.name for p in log_dir.iterdir())
    (replica,) = start_replicas(tmp_path, "foreign", 1)
    assert ray.get(replica.ping.remote())["role"] == "offline"
    assert "INCONSISTENT_CLUSTER_ID" in ray.get(replica.describe.remote())["error"]
    with pytest.raises(InconsistentClusterId):
        ray.get(replica.become_leader.remote(0, [0], [0], 0))
    assert sorted(p.name for p in log_dir.iterdir()) == before


def test_follower_told_to_follow_a_leader_not_started_yet__keeps_trying_and_catches_up(ray_node, tmp_path):
    """A reassignment's new replica can be told its leader before that leader's actor
    exists (or while it restarts); its fetch loop must not die of it (it did: the
    replica stayed a follower at offset 0 for good, found by `rafka verify`). With
    no endpoint given, it fetches from the one the controller's next image names."""
    import uuid

    from rafka.core.cluster_image import PartitionImage, TopicImage
    from rafka.core.metadata import NodeEndpoint
    from tests.harness import wait_until
    follower = start_replica(tmp_path, "late", 1, fetch_max_wait_ms=100)
    ray.get(follower.become_follower.remote(0, 0, None))      # replica 0 does not exist yet
    leader = start_replica(tmp_path, "late", 0, fetch_max_wait_ms=100)
    host, port = ray.get(leader.become_leader.remote(0, [0, 1], [0, 1], 0))
    leader_actor = ray.get(leader.describe.remote())["actor"]
    partition = PartitionImage(partition=0, leader_node=7, leader_epoch=0, replica_nodes=(7,), isr_nodes=(7,),
                               offline_nodes=(), leader_replica=0, replica_actors={0: leader_actor})
    ray.get(follower.update_image.remote(dataclasses.replace(EMPTY_IMAGE, version=1, nodes={
        7: NodeEndpoint(node_id=7, actor=leader_actor, host=host, port=port)}, topics={
        "late": TopicImage(name="late", topic_id=uuid.uuid4(), is_internal=False, partitions=(partition,))})))
    for i in range(5):
        produce_to(leader, encode_batch([RecordInput(b"late-%d" % i)]), ACKS_ALL, 10_000).result(timeout=60)
    wait_until(lambda: ray.get(follower.describe.remote())["log_end_offset"] == 5, timeout_s=30,
               what="the follower catching up with the late leader")


def test_stale_become_follower__refused_and_the_current_fetcher_keeps_running(ray_node, tmp_path):
    """The controller's calls can arrive late: a become_follower of an older epoch
    must be refused before it stops anything (it used to stop the current epoch's
    fetcher, then fail: a follower with the right role that never fetched again)."""
    from rafka.core.errors import FencedLeaderEpoch
    from tests.harness import wait_until
    leader, follower = start_replicas(tmp_path, "stale", 2)
    endpoint = ray.get(leader.become_leader.remote(1, [0, 1], [0, 1], 0))
    ray.get(follower.become_follower.remote(0, 1, endpoint))
    with pytest.raises(FencedLeaderEpoch):
        ray.get(follower.become_follower.remote(0, 0, endpoint))
    for i in range(5):
        produce_to(leader, encode_batch([RecordInput(b"stale-%d" % i)]), ACKS_ALL, 10_000).result(timeout=60)
    wait_until(lambda: ray.get(follower.describe.remote())["log_end_offset"] == 5, timeout_s=30,
               what="the follower still fetching at epoch 1")


def test_shell__holds_nothing_until_assigned__then_serves_and_a_restart_reopens_its_replica(ray_node, tmp_path):
    """A pool's shell: no log, no listener, until `assign`; then the replica's actor
    for good: Ray restarts it with the arguments it was made with (no replica in
    them), and it reopens the replica its assignment file names, with its log."""
    from rafka.core.broker_identity import broker_log_dir
    from rafka.core.replica_assignment import assignment_path
    from tests.harness import wait_until
    data_dir = tmp_path / "node-shell"
    name, shell = start_shell(data_dir)
    idle = ray.get(shell.ping.remote())
    assert (idle["role"], idle["endpoint"], idle["topic_id"]) == (UNASSIGNED, None, None)
    answer = ray.get(shell.assign.remote(topic="held", partition=3, replica_id=1, topic_id="held-id",
                                         config={"min.insync.replicas": "1"}))
    assert (answer["role"], answer["leader_epoch"], answer["topic_id"]) == ("follower", -1, "held-id")
    assert answer["endpoint"] is not None
    assert assignment_path(broker_log_dir(data_dir, 0), name).exists()
    ray.get(shell.update_image.remote(OPEN_IMAGE))
    ray.get(shell.become_leader.remote(0, [1], [1], 0))
    for i in range(3):
        produce_to(shell, encode_batch([RecordInput(b"kept-%d" % i)]), ACKS_ALL, 10_000).result(timeout=60)
    pid = ray.get(shell.describe.remote())["pid"]
    ray.kill(shell, no_restart=False)
    restarted = wait_until(lambda: (d := ray.get(shell.describe.remote(), timeout=5))["pid"] != pid and d,
                           timeout_s=60, what="the shell restarted")
    assert (restarted["topic"], restarted["partition"], restarted["replica_id"]) == ("held", 3, 1)
    assert (restarted["role"], restarted["leader_epoch"]) == ("follower", -1)   # told its role by the controller
    assert restarted["opened_log_end_offset"] == 3 and restarted["actor"] == name


def test_assign_with_leader_and_isr__the_replica_takes_its_role_in_the_same_call(ray_node, tmp_path):
    # a new topic's replicas get their assignment and their role in one call each
    state = {"leader": 0, "leader_epoch": 3, "replicas": [0, 1], "isr": [0, 1], "partition_epoch": 2}
    answers = []
    for replica_id in (0, 1):
        _, shell = start_shell(tmp_path / f"node-{replica_id}")
        answers.append(ray.get(shell.assign.remote(topic="roles", partition=0, replica_id=replica_id,
                                                   topic_id="roles-id", config={}, leader_and_isr=state)))
        if replica_id == 0:
            leader = shell
    assert [(a["role"], a["leader_epoch"]) for a in answers] == [("leader", 3), ("follower", 3)]
    assert answers[0]["endpoint"] is not None and answers[1]["endpoint"] is not None
    described = ray.get(leader.describe.remote())
    assert described["isr"] == [0, 1] and described["leader_id"] == 0


def test_shell__one_replica_for_life__another_assignment_refused_and_deletion_forgets_it(ray_node, tmp_path):
    from rafka.core.broker_identity import broker_log_dir
    from rafka.core.replica_assignment import assignment_path
    data_dir = tmp_path / "node-once"
    name, shell = start_shell(data_dir)
    first = dict(topic="once", partition=0, replica_id=0, topic_id="once-id", config={})
    ray.get(shell.assign.remote(**first))
    assert ray.get(shell.assign.remote(**first))["topic_id"] == "once-id"   # the same again: nothing changes
    with pytest.raises(ValueError, match="cannot take"):
        ray.get(shell.assign.remote(**{**first, "partition": 1}))
    ray.get(shell.delete_log.remote())
    assert not assignment_path(broker_log_dir(data_dir, 0), name).exists()
    # until it is killed it reads no log that is gone (describe, requests and the
    # metrics export read a log of no segments: an IndexError at every export)
    assert ray.get(shell.describe.remote())["role"] == STOPPED


def test_watch__parked_until_the_role_moves__and_failed_when_the_actor_dies(ray_node, tmp_path):
    # the controller's watch of a settled replica (issue 27: no ping every few rounds)
    state = {"leader": 0, "leader_epoch": 1, "replicas": [0], "isr": [0], "partition_epoch": 0}
    _, shell = start_shell(tmp_path / "node-watched")
    ray.get(shell.assign.remote(topic="watched", partition=0, replica_id=0, topic_id="watched-id", config={},
                                leader_and_isr=state))
    parked = shell.watch.remote("leader", 1, 60_000)
    ready, _ = ray.wait([parked], timeout=0.5)
    assert not ready   # in its expected role: the call stays parked
    # a call answered while it is parked: the actor is not held by it
    assert ray.get(shell.ping.remote())["role"] == "leader"
    ray.get(shell.become_follower.remote(1, 2))
    answer = ray.get(parked, timeout=30)
    assert (answer["role"], answer["leader_epoch"]) == ("follower", 2)
    # already not in the expected role: answered at once
    assert ray.get(shell.watch.remote("leader", 1, 60_000), timeout=30)["role"] == "follower"
    # the timeout: answered unchanged
    assert ray.get(shell.watch.remote("follower", 2, 200), timeout=30)["leader_epoch"] == 2
    parked = shell.watch.remote("follower", 2, 60_000)
    ray.kill(shell, no_restart=True)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(parked, timeout=30)
