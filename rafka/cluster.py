"""Entry points: `local_cluster()` (embedded, simulated nodes) and `connect()`.

A `Cluster` is the driver's handle on a running rafka system: the controller
actor, and factories for Admin (producers and consumers come with the client
issue). `local_cluster` starts a `ray.cluster_utils.Cluster` with one Ray node per
simulated broker (each with its own resources and object store), so placement
groups and node loss behave as on a real cluster.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rafka.actors.controller import CONTROLLER_NAME, ControllerActor
from rafka.actors.replica import NAMESPACE, replica_actor_name
from rafka.client.admin import Admin
from rafka.client.producer import Producer
from rafka.placement.groups import BROKER_RESOURCE

NODE_CPUS = 2  # logical CPUs per simulated node: replicas ask for none, Spark executors do


class Cluster:
    def __init__(self, *, controller, data_dir: str | None, ray_cluster=None, owns_data_dir: bool = False) -> None:
        self.controller = controller
        self.data_dir = data_dir
        self.ray_cluster = ray_cluster
        self._owns_data_dir = owns_data_dir

    def admin(self) -> Admin:
        return Admin(self.controller)

    def producer(self, **options) -> Producer:
        """A Producer; options are kafka-python style (acks, batch_size, linger_ms, ...)."""
        return Producer(self.controller, **options)

    def replica(self, topic: str, partition: int, replica_id: int):
        return ray.get_actor(replica_actor_name(topic, partition, replica_id), namespace=NAMESPACE)

    def add_node(self):
        """Embedded only: a fresh simulated broker node."""
        node = self.ray_cluster.add_node(num_cpus=NODE_CPUS, resources={BROKER_RESOURCE: 1})
        self.ray_cluster.wait_for_nodes()
        return node

    def shutdown(self) -> None:
        if self.ray_cluster is not None:
            ray.shutdown()
            self.ray_cluster.shutdown()
            self.ray_cluster = None
            if self._owns_data_dir and self.data_dir:
                shutil.rmtree(self.data_dir, ignore_errors=True)
        elif ray.is_initialized():
            ray.shutdown()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def local_cluster(nodes: int = 3, data_dir: str | None = None, **controller_options) -> Cluster:
    """An embedded rafka on `nodes` simulated Ray nodes of this machine."""
    from ray.cluster_utils import Cluster as RayCluster

    if nodes < 1:
        raise ValueError("nodes must be at least 1")
    owns = data_dir is None
    data_dir = data_dir or tempfile.mkdtemp(prefix="rafka-")
    ray_cluster = RayCluster(initialize_head=True, head_node_args={
        "num_cpus": NODE_CPUS, "resources": {BROKER_RESOURCE: 1}})
    for _ in range(nodes - 1):
        ray_cluster.add_node(num_cpus=NODE_CPUS, resources={BROKER_RESOURCE: 1})
    ray_cluster.wait_for_nodes()
    ray.init(address=ray_cluster.address, namespace=NAMESPACE)
    controller = start_controller(data_dir, **controller_options)
    return Cluster(controller=controller, data_dir=data_dir, ray_cluster=ray_cluster, owns_data_dir=owns)


def start_controller(data_dir: str, **controller_options):
    """The controller, detached and restartable, pinned to the node of the caller
    (the head node, for `rafka up` and `local_cluster`), where its metadata log lives."""
    head_node = ray.get_runtime_context().get_node_id()
    controller = ray.remote(ControllerActor).options(
        name=CONTROLLER_NAME, namespace=NAMESPACE, lifetime="detached", max_restarts=-1,
        num_cpus=0, get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(head_node, soft=False)).remote(
        data_dir=os.path.abspath(data_dir), **controller_options)
    ray.get(controller.ping.remote())
    return controller


def connect(address: str = "auto") -> Cluster:
    """Join a Ray cluster where `rafka up` ran."""
    ray.init(address=address, namespace=NAMESPACE, ignore_reinit_error=True)
    return Cluster(controller=ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE), data_dir=None)
