"""Entry points: `local_cluster()` (embedded, simulated nodes) and `connect()`.

A `Cluster` is the driver's handle on a running rafka system: the controller
actor, and factories for Admin, Producer and Consumer. `local_cluster` starts a
`ray.cluster_utils.Cluster`: a head node (GCS, the driver, the controller; no
replicas) and one Ray node per simulated broker, each with its own resources and
object store, so placement groups and node loss behave as on a real cluster and
any broker node can be removed without taking the driver or the controller down.

Brokers have stable ids (DESIGN section 4): simulated node k carries the label
`rafka-broker-id=k` and keeps its log dir in `<data_dir>/broker-k`, so a second
`local_cluster(data_dir=D)` is the same brokers restarted on the same disks, and
`restart_node(k)` restarts one broker (a new Ray node, the same label and disk).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rafka.actors.cluster_credential import cluster_client_options
from rafka.actors.controller import CONTROLLER_NAME, ControllerActor, cluster_bootstrap_servers
from rafka.actors.controller_calls import ControllerCalls
from rafka.actors.replica import NAMESPACE
from rafka.client.admin import Admin
from rafka.client.consumer import Consumer
from rafka.client.producer import Producer
from rafka.cluster_errors import NotRunning
from rafka.core.broker_identity import BROKER_ID_LABEL, broker_log_dir, ensure_identity
from rafka.placement.brokers import BROKER_RESOURCE, broker_nodes

NODE_CPUS = 2  # logical CPUs per simulated broker node: replicas ask for none, Spark executors do
HEAD_CPUS = 1  # the head runs the controller (0 CPUs) and tasks the driver starts
# Ray moves call arguments and results above 100 KiB through the object store (a
# plasma put, then a raylet-to-raylet transfer between nodes): a 512 KiB produce to
# R3 took 18.5 ms that way and 6.4 ms inline. Batches and fetches are at most a few
# MiB (max_request_size, replica fetch and consumer fetch limits), so rafka's Ray
# cluster passes objects up to 4 MiB inline in the gRPC call. For `ray up`, the
# same setting goes on `ray start --head --system-config` (see cluster.yaml).
RAY_SYSTEM_CONFIG = {"max_direct_call_object_size": 4 << 20}
# Idle replica actors per simulated broker (the controller's replica_pool_size):
# one, so that every test module meets the pool (a one-partition RF3 topic takes
# pool shells, a larger one shells made on the spot too) and pays for three idle
# processes only; `rafka up` keeps more (actors.controller), benchmarks choose.
LOCAL_REPLICA_POOL_SIZE = 1


class Cluster:
    def __init__(self, *, controller, data_dir: str | None, ray_cluster=None, owns_data_dir: bool = False) -> None:
        self.controller = controller
        self.data_dir = data_dir
        self.ray_cluster = ray_cluster
        self._owns_data_dir = owns_data_dir

    def admin(self) -> Admin:
        return Admin(ControllerCalls(self.controller))

    @property
    def bootstrap_servers(self) -> str:
        """Every broker's host:port, comma-separated: `bootstrap.servers` for any
        Kafka client (kafka-python, confluent-kafka, kcat, the Java tools)."""
        return ray.get(self.controller.bootstrap_address.remote())

    def producer(self, **options) -> Producer:
        """A Producer; options are kafka-python style (acks, batch_size, linger_ms, ...).
        It logs in with the cluster credential (actors.cluster_credential) unless
        the options name a login."""
        return Producer(cluster_bootstrap_servers, **{**cluster_client_options(), **options})

    def consumer(self, **options) -> Consumer:
        """A Consumer (assign mode); options are kafka-python style
        (auto_offset_reset, max_poll_records, fetch_max_wait_ms, ...)."""
        return Consumer(cluster_bootstrap_servers, **{**cluster_client_options(), **options})

    def run_consumer_group(self, group_id: str, topics: list[str], handler, *, members: int = 1,
                           exactly_once: bool = False, producer_options: dict | None = None, **consumer_options):
        """N ConsumerMember actors (rafka/actors/member.py) in `group_id`, spread over
        the broker nodes, each polling `topics`, calling `handler(records)` on every
        batch, writing the ProducerRecords it returns (if any) and committing the
        batch after them. `exactly_once`: the output and the batch's offsets in one
        transaction per batch (read_committed input, a transactional producer per
        member), so a killed member never duplicates output. Returns a
        ConsumerGroupHandle (describe, assignment, stop)."""
        from rafka.actors.member import run_consumer_group
        return run_consumer_group(group_id, topics, handler, members=members, exactly_once=exactly_once,
                                  producer_options=producer_options, **consumer_options)

    def start_group_coordinators(self, *, offsets_topic_num_partitions: int = 1,
                                 offsets_topic_replication_factor: int = 3,
                                 offsets_topic_segment_bytes: int = 104_857_600, **coordinator_options) -> list:
        """Creates the compacted `__consumer_offsets` topic (if missing) and one group
        coordinator actor per partition of it, spread over the broker nodes.
        Default 1 partition: every partition costs RF replica processes plus a
        coordinator (~80 MB each), and one keeps an idle 3-node cluster light; Kafka's
        default is 50. Segments of `offsets_topic_segment_bytes` (Kafka's
        offsets.topic.segment.bytes): the log cleaner compacts sealed segments only.
        `local_cluster` and `rafka up` call it; it is idempotent."""
        from rafka.actors.coordinator import OFFSETS_TOPIC, GroupCoordinatorActor, coordinator_actor_name
        return self._start_coordinators(
            OFFSETS_TOPIC, GroupCoordinatorActor, coordinator_actor_name, partitions=offsets_topic_num_partitions,
            replication_factor=offsets_topic_replication_factor, segment_bytes=offsets_topic_segment_bytes,
            options_of=lambda p, count: dict(offsets_partition=p, offsets_partition_count=count,
                                             **coordinator_options))

    def start_transaction_coordinators(self, *, transaction_state_num_partitions: int = 1,
                                       transaction_state_replication_factor: int = 3,
                                       transaction_state_segment_bytes: int = 104_857_600,
                                       **coordinator_options) -> list:
        """The same for transactions: the compacted `__transaction_state` topic (if
        missing; Kafka's transaction.state.log.num.partitions is 50, rafka's default
        1 for the reason above, its min ISR 2 as Kafka's transaction.state.log.min.isr)
        and one transaction coordinator actor per partition of it
        (actors.transaction_coordinator), after the group coordinators: AddOffsetsToTxn
        maps a group to its `__consumer_offsets` partition. Idempotent."""
        from rafka.actors.coordinator import OFFSETS_TOPIC
        from rafka.actors.transaction_coordinator import TransactionCoordinatorActor
        from rafka.core.actor_names import TRANSACTION_STATE_TOPIC, transaction_coordinator_actor_name
        offsets_partitions = len(ray.get(self.controller.metadata_snapshot.remote())["topics"][OFFSETS_TOPIC][
            "partitions"])
        return self._start_coordinators(
            TRANSACTION_STATE_TOPIC, TransactionCoordinatorActor, transaction_coordinator_actor_name,
            partitions=transaction_state_num_partitions, replication_factor=transaction_state_replication_factor,
            segment_bytes=transaction_state_segment_bytes,
            options_of=lambda p, count: dict(transaction_state_partition=p, transaction_state_partition_count=count,
                                             offsets_partition_count=offsets_partitions, **coordinator_options))

    def _start_coordinators(self, topic: str, actor_class, name_of, *, partitions: int, replication_factor: int,
                            segment_bytes: int, options_of) -> list:
        """A coordinators' compacted internal topic, created if missing (min ISR 2 at
        R3, as Kafka's), and one detached, restartable coordinator actor per
        partition, spread over the broker nodes; returns their handles once each
        answers a ping."""
        admin = self.admin()
        if topic not in admin.list_topics():
            rf = replication_factor
            admin.create_topic(topic, partitions=partitions, replication_factor=rf,
                               config={"cleanup.policy": "compact", "min.insync.replicas": str(min(rf, 2)),
                                       "segment.bytes": str(segment_bytes)})
        # from the metadata, not the replicas: after a restart they may still be starting
        snapshot = ray.get(self.controller.metadata_snapshot.remote())
        count = len(snapshot["topics"][topic]["partitions"])
        actor = ray.remote(actor_class)
        handles = [actor.options(name=name_of(p), namespace=NAMESPACE, lifetime="detached",
                                 get_if_exists=True, max_restarts=-1, num_cpus=0,
                                 resources={BROKER_RESOURCE: 0.001}, scheduling_strategy="SPREAD").remote(
                       **options_of(p, count))
                   for p in range(count)]
        ray.get([h.ping.remote() for h in handles])
        return handles

    def replica(self, topic: str, partition: int, replica_id: int):
        """The handle of the actor holding the replica (the controller's metadata
        says which); ValueError if it has none."""
        name = ray.get(self.controller.replica_actor.remote(topic, partition, replica_id))
        if name is None:
            raise ValueError(f"Failed to look up actor: {topic}-{partition} replica {replica_id} has none")
        return ray.get_actor(name, namespace=NAMESPACE)

    def add_node(self, broker_id: int | None = None) -> str:
        """Embedded only: a broker node (a new broker id unless given: then that
        broker, restarted on its log dir); returns its Ray node id."""
        if broker_id is None:
            known = [int(p.name[len("broker-"):]) for p in Path(self.data_dir).glob("broker-*")
                     if p.name[len("broker-"):].isdigit()]
            broker_id = max(known, default=-1) + 1
        node = _add_broker_node(self.ray_cluster, self.data_dir, broker_id)
        self.ray_cluster.wait_for_nodes()
        return node.node_id

    def node_of_broker(self, broker_id: int) -> str:
        for broker in broker_nodes():
            if broker["broker_id"] == broker_id:
                return broker["node_id"]
        raise ValueError(f"broker {broker_id} is not running")

    def broker_of_node(self, node_id: str) -> int:
        for broker in broker_nodes():
            if broker["node_id"] == node_id:
                return broker["broker_id"]
        raise ValueError(f"node {node_id} is not a running broker")

    def remove_node(self, node_id: str) -> None:
        """Embedded only: kill a broker node's processes (its replicas die with it;
        its log dir stays, for `add_node(broker_id)`)."""
        for node in self.ray_cluster.list_all_nodes():
            if node.node_id == node_id:
                if node is self.ray_cluster.head_node:
                    raise ValueError("the head node runs the controller and the driver: not removable")
                self.ray_cluster.remove_node(node)
                return
        raise ValueError(f"no node {node_id} in this embedded cluster")

    def restart_node(self, broker_id: int) -> str:
        """Embedded only: stop broker `broker_id`'s node and start it again with its
        label and log dir (a new Ray node id); returns the new node id."""
        self.remove_node(self.node_of_broker(broker_id))
        return self.add_node(broker_id)

    def shutdown(self, *, clean: bool = True) -> None:
        """Leave the cluster. An embedded cluster whose data dir outlives it first
        shuts every replica down cleanly (flush, checkpoints, clean-shutdown
        marker), so the next `local_cluster(data_dir=...)` reopens the logs
        without a recovery scan. `clean=False` stops every node as a power cut
        would (tests, benchmarks): no replica closes its log."""
        if self.ray_cluster is not None:
            if clean and not self._owns_data_dir:
                try:
                    ray.get(self.controller.shutdown_replicas.remote(), timeout=60)
                except ray.exceptions.RayError as error:   # a crashed cluster still shuts down
                    print(f"rafka: replicas were not shut down cleanly: {error}")
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


def local_cluster(nodes: int = 3, data_dir: str | None = None, *, offsets_topic_num_partitions: int = 1,
                  offsets_topic_segment_bytes: int = 104_857_600, coordinator_options: dict | None = None,
                  transaction_state_num_partitions: int = 1, transaction_coordinator_options: dict | None = None,
                  log_to_driver: bool = True, replica_pool_size: int = LOCAL_REPLICA_POOL_SIZE,
                  **controller_options) -> Cluster:
    """An embedded rafka on `nodes` simulated broker nodes of this machine (plus a
    head node), with `__consumer_offsets` and its group coordinators started, and
    `__transaction_state` and its transaction coordinators.
    `log_to_driver=False`: the actors' output stays in Ray's session logs (rafka.quiet).
    `replica_pool_size`: idle replica actors kept per broker (the controller's option)."""
    from ray.cluster_utils import Cluster as RayCluster

    if nodes < 1:
        raise ValueError("nodes must be at least 1")
    owns = data_dir is None
    data_dir = os.path.abspath(data_dir or tempfile.mkdtemp(prefix="rafka-"))
    ray_cluster = RayCluster(initialize_head=True, head_node_args={
        "num_cpus": HEAD_CPUS, "include_dashboard": False, "_system_config": RAY_SYSTEM_CONFIG})
    for broker_id in range(nodes):
        _add_broker_node(ray_cluster, data_dir, broker_id)
    ray_cluster.wait_for_nodes()
    ray.init(address=ray_cluster.address, namespace=NAMESPACE, log_to_driver=log_to_driver)
    controller = start_controller(data_dir, replica_pool_size=replica_pool_size, **controller_options)
    cluster = Cluster(controller=controller, data_dir=data_dir, ray_cluster=ray_cluster, owns_data_dir=owns)
    cluster.start_group_coordinators(offsets_topic_num_partitions=offsets_topic_num_partitions,
                                     offsets_topic_replication_factor=min(3, nodes),
                                     offsets_topic_segment_bytes=offsets_topic_segment_bytes,
                                     **(coordinator_options or {}))
    cluster.start_transaction_coordinators(transaction_state_num_partitions=transaction_state_num_partitions,
                                           transaction_state_replication_factor=min(3, nodes),
                                           **(transaction_coordinator_options or {}))
    return cluster


def _add_broker_node(ray_cluster, data_dir: str, broker_id: int):
    """A simulated broker node: its log dir's identity is written (first start) or
    checked (restart) before Ray starts it, as `rafka broker-id` does on a host."""
    ensure_identity(broker_log_dir(data_dir, broker_id), broker_id=broker_id)
    return ray_cluster.add_node(num_cpus=NODE_CPUS, resources={BROKER_RESOURCE: 1},
                                labels={BROKER_ID_LABEL: str(broker_id)})


def start_controller(data_dir: str, **controller_options):
    """The controller, detached and restartable, pinned to the node of the caller
    (the head node, for `rafka up` and `local_cluster`), where its metadata log lives."""
    head_node = ray.get_runtime_context().get_node_id()
    controller = ray.remote(ControllerActor).options(
        name=CONTROLLER_NAME, namespace=NAMESPACE, lifetime="detached", max_restarts=-1,
        num_cpus=0, get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(head_node, soft=False)).remote(
        data_dir=os.path.abspath(data_dir), **controller_options)
    ray.get(controller.resume.remote())   # an existing one may be left stopped by an unfinished `rafka down`
    return controller


def connect(address: str = "auto", *, log_to_driver: bool = True) -> Cluster:
    """Join a Ray cluster where `rafka up` ran."""
    ray.init(address=address, namespace=NAMESPACE, ignore_reinit_error=True, logging_level="WARNING",
             log_to_driver=log_to_driver)
    try:
        controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    except ValueError:
        raise NotRunning(f"rafka is not up on the Ray cluster at {address!r}: run `rafka up` there") from None
    return Cluster(controller=controller, data_dir=None)
