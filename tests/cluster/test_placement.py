"""Placement on a simulated 3-node Ray cluster (ray.cluster_utils.Cluster)."""

import pytest
import ray
from ray.cluster_utils import Cluster

from rafka.placement.groups import BROKER_RESOURCE, in_bundle, partition_placement_group, remove, wait_ready

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def three_nodes():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {BROKER_RESOURCE: 1}})
    for _ in range(2):
        cluster.add_node(num_cpus=1, resources={BROKER_RESOURCE: 1})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="rafka-test")
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@ray.remote(num_cpus=0.01)
class Probe:
    def node_id(self):
        return ray.get_runtime_context().get_node_id()


def test_partition_replicas__each_on_a_distinct_node(three_nodes):
    group = partition_placement_group("orders", 0, 3)
    wait_ready(group, timeout_s=60)
    probes = [Probe.options(scheduling_strategy=in_bundle(group, i)).remote() for i in range(3)]
    nodes = ray.get([p.node_id.remote() for p in probes])
    assert len(set(nodes)) == 3
    for probe in probes:
        ray.kill(probe)
    remove(group)
