"""Controller and replica actors on a simulated 3-node Ray cluster."""

import time

import pytest
import ray
from ray.cluster_utils import Cluster

from rafka.actors.controller import CONTROLLER_NAME, ControllerActor
from rafka.actors.replica import NAMESPACE, replica_actor_name
from rafka.core.records import RecordInput, decode_records, encode_batch
from rafka.core.replica import ACKS_ALL
from rafka.placement.groups import BROKER_RESOURCE

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {BROKER_RESOURCE: 1}})
    for _ in range(2):
        cluster.add_node(num_cpus=1, resources={BROKER_RESOURCE: 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace=NAMESPACE)
    handle = ray.remote(ControllerActor).options(name=CONTROLLER_NAME, lifetime="detached", max_restarts=-1,
                                                 num_cpus=0).remote(
        data_dir=str(tmp_path_factory.mktemp("rafka")), replica_lag_time_max_ms=2_000,
        fetch_max_wait_ms=100, leader_ping_timeout_ms=1_000, watch_interval_ms=100)
    ray.get(handle.ping.remote())
    yield handle
    ray.shutdown()
    cluster.shutdown()


def wait_until(condition, timeout_s=30.0, interval_s=0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError("condition not met in time")


def replica(topic, partition, replica_id):
    return ray.get_actor(replica_actor_name(topic, partition, replica_id), namespace=NAMESPACE)


def leader_of(controller, topic, partition):
    return ray.get(controller.metadata_snapshot.remote())["topics"][topic]["partitions"][partition]


def test_create_topic__each_partitions_replicas_on_three_distinct_nodes(controller):
    described = ray.get(controller.create_topic.remote("placed", 2, 3, {"min.insync.replicas": "2"}))
    for p in described["partitions"]:
        nodes = {ray.get(replica("placed", p["partition"], r).ping.remote())["node_id"] for r in p["replicas"]}
        assert len(nodes) == 3


def test_leader_actor_killed__new_leader_next_epoch_and_acked_writes_survive(controller):
    ray.get(controller.create_topic.remote("orders", 1, 3, {"min.insync.replicas": "2"}))
    first = leader_of(controller, "orders", 0)
    leader = replica("orders", 0, first["leader"])
    wait_until(lambda: ray.get(leader.ping.remote())["role"] == "leader")
    acked = []
    for i in range(30):
        result = ray.get(leader.produce.remote(encode_batch([RecordInput(b"order-%d" % i)]), ACKS_ALL, 10_000))
        acked.append((result.base_offset, b"order-%d" % i))
    ray.kill(leader, no_restart=False)  # the actor restarts; the controller must move leadership
    now = wait_until(lambda: (s := leader_of(controller, "orders", 0))["leader_epoch"] > first["leader_epoch"] and s)
    assert now["leader"] != first["leader"] and now["leader_epoch"] == first["leader_epoch"] + 1
    new_leader = replica("orders", 0, now["leader"])
    wait_until(lambda: ray.get(new_leader.ping.remote()) ["role"] == "leader")
    for i in range(30, 40):
        result = ray.get(new_leader.produce.remote(encode_batch([RecordInput(b"order-%d" % i)]), ACKS_ALL, 10_000))
        acked.append((result.base_offset, b"order-%d" % i))
    data = ray.get(new_leader.read_below_high_watermark.remote())
    assert [(r.offset, r.value) for r in decode_records(data)] == acked
    # the restarted replica follows again and converges to the same bytes below the HW
    hw = ray.get(new_leader.describe.remote())["high_watermark"]
    for r in now["replicas"]:
        wait_until(lambda r=r: ray.get(replica("orders", 0, r).describe.remote())["high_watermark"] >= hw)
        got = ray.get(replica("orders", 0, r).read_below_high_watermark.remote())
        assert got[:len(data)] == data
