"""The cluster as Kafka nodes see it, on two listeners:
  * internal (the actors' own nodes, one per replica, coordinator and controller:
    followers fetch there, coordinators write there, brokers forward there):
    nodes, topics, and each partition's leader, replicas and ISR as node ids;
  * clients' (`broker_view`): Kafka's shape, one node per broker, node id = broker
    id, at the broker's fixed address (actors.broker), where every request of a
    client arrives and is routed inside the broker to the actor it is for.

The controller builds an image from its metadata after every change and pushes it
to every actor; each actor answers Metadata (and finds its own partition's state)
from the newest image it holds. Images are immutable and carry the metadata
`version` they were built at, so an actor keeps the newer of two (pushes may
arrive out of order).

Invariants:
  * a partition's leader node is its leader replica's actor's node, or -1 when the
    partition has no leader or that actor has not registered an endpoint yet
    (clients then see LEADER_NOT_AVAILABLE and retry);
  * `nodes` lists the controller, the coordinators and the replicas of existing
    topics that have registered: the endpoints a client may be sent to;
  * replica and ISR lists name only registered nodes: a replica with no endpoint
    yet has no node id to name (`offline_nodes` is for replicas known down).

  * `brokers` lists the brokers whose node has registered (`broker:<id>:<k>`
    actors); `broker_view` names no other node.
  * `acls` are the controller's ACL bindings at the image's version (core.acl):
    every node authorizes from its image, with no call to the controller.
    `authorize` is the cluster's policy over them: `super_users` (Kafka's
    super.users: rafka's own user, core.scram.CLUSTER_USER, and the principals
    `rafka up --super-users` names) may do anything; a resource no binding applies to
    is open to everyone until SASL is required, then closed (Kafka's
    allow.everyone.if.no.acl.found, true on an open cluster, false once logins are).

  * `client_quotas` are the controller's quota configs at the image's version
    (core.client_quotas): each broker throttles its clients by them, with no
    call to the controller.
  * `finalized_features` are the cluster's finalized feature levels at the
    image's version (core.features): ApiVersions tells them, with the image's
    version as their epoch, and the group handlers gate on them.
  * `broker_logger_levels` are each broker's logger levels (core.broker_loggers):
    every process on a broker's node applies its broker's.

Pure data, no I/O. Callers: the controller (build), the actors' Metadata handler
and partition lookups (read), the broker nodes (broker_view, and the internal
endpoints they route to), rafka.client's metadata cache and the coordinators
(leader endpoints).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from typing import Any

from rafka.core import features
from rafka.core.acl import NO_ACLS, AclOperation, Acls, Resource, ResourceType, authorize, \
    authorize_by_resource_type, user_principal
from rafka.core.client_quotas import NO_CLIENT_QUOTAS, ClientQuotas
from rafka.core.actor_names import (CONTROLLER_NAME, OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, broker_of_actor_name,
                                    coordinator_actor_name, transaction_coordinator_actor_name)
from rafka.core.errors import CoordinatorNotAvailable, LeaderNotAvailable, UnknownTopicOrPartition
from rafka.core.metadata import NO_LEADER, ClusterMetadata, NodeEndpoint, id_as_uuid
from rafka.core.scram import CLUSTER_USER, ScramCredential

SUPER_USERS = frozenset({user_principal(CLUSTER_USER)})   # rafka's own: a super user on every cluster


@dataclasses.dataclass(frozen=True)
class PartitionImage:
    partition: int
    leader_node: int              # -1: none
    leader_epoch: int
    replica_nodes: tuple[int, ...]
    isr_nodes: tuple[int, ...]
    offline_nodes: tuple[int, ...]
    leader_replica: int           # the replica index behind leader_node (NO_LEADER: none)
    replica_brokers: tuple[int, ...] = ()   # every assigned replica's broker id, in replica order
    isr_brokers: tuple[int, ...] = ()
    leader_broker: int = NO_LEADER          # the leader replica's broker, once it has an endpoint
    # replica id -> the actor holding it (core.metadata.ClusterMetadata.replica_actor)
    replica_actors: Mapping[int, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    is_internal: bool
    partitions: tuple[PartitionImage, ...]
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)   # the topic's overrides


@dataclasses.dataclass(frozen=True)
class ClusterImage:
    version: int                  # the controller's metadata version it was built at
    cluster_id: str | None
    controller_node: int          # -1 before the controller registered
    nodes: Mapping[int, NodeEndpoint]
    topics: Mapping[str, TopicImage]
    coordinator_nodes: tuple[int, ...]   # by __consumer_offsets partition; -1 unregistered
    scram_credentials: Mapping[tuple[str, str], ScramCredential] = dataclasses.field(default_factory=dict)
    sasl_required: bool = False   # every listener asks for a SASL login (protocol.sasl)
    brokers: Mapping[int, NodeEndpoint] = dataclasses.field(default_factory=dict)   # live brokers' addresses
    # by __transaction_state partition; -1 unregistered (FindCoordinator key type 1)
    transaction_coordinator_nodes: tuple[int, ...] = ()
    acls: Acls = NO_ACLS          # the ACL bindings (core.acl), with the version of their last change
    super_users: frozenset[str] = SUPER_USERS   # Kafka's super.users, rafka's own user always among them
    client_quotas: ClientQuotas = NO_CLIENT_QUOTAS   # per user / client id (core.client_quotas)
    finalized_features: Mapping[str, int] = dataclasses.field(default_factory=lambda: dict(features.DEFAULT_LEVELS))
    # by broker id: the log levels its processes apply (core.broker_loggers)
    broker_logger_levels: Mapping[int, Mapping[str, str]] = dataclasses.field(default_factory=dict)

    def authorize(self, principal: str, host: str, operation: AclOperation, resource: Resource) -> bool:
        """Whether `principal`, connected from `host`, may do `operation` on `resource`."""
        return authorize(self.acls, principal, host, operation, resource, super_users=self.super_users,
                         allow_everyone_if_no_acl_found=not self.sasl_required)

    def authorize_by_resource_type(self, principal: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether `principal` may do `operation` on some resource of the type
        (core.acl.authorize_by_resource_type), under the same policy."""
        return authorize_by_resource_type(self.acls, principal, host, operation, resource_type,
                                          super_users=self.super_users,
                                          allow_everyone_if_no_acl_found=not self.sasl_required)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """A SASL listener's lookup: the user's salted credential for `mechanism`."""
        return self.scram_credentials.get((user, mechanism))

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def coordinator_broker(self, offsets_partition: int, *, nodes: tuple[int, ...] | None = None) -> int:
        """The broker whose node serves the group coordinator of `offsets_partition`
        (where it runs; NO_LEADER while it has no endpoint or its broker none);
        with `nodes`, of that coordinator list (transaction_coordinator_nodes)."""
        nodes = self.coordinator_nodes if nodes is None else nodes
        node = self.nodes.get(nodes[offsets_partition]) if 0 <= offsets_partition < len(nodes) else None
        broker = _broker_id(node.rack) if node is not None else None
        return broker if broker in self.brokers else NO_LEADER

    def coordinator_endpoint(self, offsets_partition: int) -> tuple[str, int]:
        """(host, port) of the group coordinator of `offsets_partition` (its own
        node); CoordinatorNotAvailable (retriable) while it has none."""
        nodes = self.coordinator_nodes
        node = self.nodes.get(nodes[offsets_partition]) if 0 <= offsets_partition < len(nodes) else None
        if node is None:
            raise CoordinatorNotAvailable(f"the coordinator of __consumer_offsets-{offsets_partition} has no "
                                          f"Kafka endpoint yet")
        return node.host, node.port

    def node_of_actor(self, actor: str) -> int:
        return next((n.node_id for n in self.nodes.values() if n.actor == actor), NO_LEADER)

    def replica_actor(self, topic: str, partition: int, replica_id: int) -> str | None:
        """The actor holding the replica, as the metadata had it at this version."""
        found = self.topics.get(topic)
        if found is None or not 0 <= partition < len(found.partitions):
            return None
        return found.partitions[partition].replica_actors.get(replica_id)

    def leader_endpoint(self, topic: str, partition: int) -> tuple[tuple[str, int], int]:
        """((host, port) of the partition's leader, its leader epoch).
        UnknownTopicOrPartition for a partition not in this image; LeaderNotAvailable
        while it has no leader or the leader has no endpoint yet (both retriable:
        a newer image may know)."""
        found = self.topics.get(topic)
        if found is None or not 0 <= partition < len(found.partitions):
            raise UnknownTopicOrPartition(f"Partition {topic}-{partition} does not exist.")
        state = found.partitions[partition]
        node = self.nodes.get(state.leader_node)
        if state.leader_replica < 0 or node is None:
            raise LeaderNotAvailable(f"{topic}-{partition} has no leader with a Kafka endpoint yet")
        return (node.host, node.port), state.leader_epoch


def _broker_id(rack: str | None) -> int | None:
    return int(rack) if rack is not None and rack.isdigit() else None


def named_controller(image: ClusterImage) -> int:
    """The broker clients are told is the controller: the lowest live one (every
    broker forwards administration to the controller, KIP-590); NO_LEADER if none."""
    return min(image.brokers, default=NO_LEADER)


def broker_view(image: ClusterImage) -> ClusterImage:
    """The image clients get from a broker (Kafka's shape): the live brokers as
    the nodes; a partition's leader, replicas and ISR as broker ids, every
    assigned replica listed (Kafka's Metadata lists replicas whose broker is down,
    naming them in offline_replicas); its leader the leader replica's broker when
    that replica and its broker both listen, else none (LEADER_NOT_AVAILABLE);
    each group coordinator the broker it runs on; the controller
    `named_controller`. No answer names a node that is not a live broker."""
    live = image.brokers
    topics = {}
    for name, topic in image.topics.items():
        partitions = []
        for p in topic.partitions:
            leader = p.leader_broker if p.leader_broker in live else NO_LEADER
            partitions.append(dataclasses.replace(
                p, leader_node=leader, replica_nodes=p.replica_brokers, isr_nodes=p.isr_brokers,
                offline_nodes=tuple(b for b in p.replica_brokers if b not in live),
                leader_replica=p.leader_replica if leader >= 0 else NO_LEADER))
        topics[name] = dataclasses.replace(topic, partitions=tuple(partitions))
    return dataclasses.replace(
        image, nodes=dict(live), topics=topics, controller_node=named_controller(image),
        coordinator_nodes=tuple(image.coordinator_broker(p) for p in range(len(image.coordinator_nodes))),
        transaction_coordinator_nodes=tuple(image.coordinator_broker(p, nodes=image.transaction_coordinator_nodes)
                                            for p in range(len(image.transaction_coordinator_nodes))))


EMPTY_IMAGE = ClusterImage(version=-1, cluster_id=None, controller_node=NO_LEADER, nodes={}, topics={},
                           coordinator_nodes=())


# Metadata record types `build_image` reads nothing of: a commit of only these makes
# no new image (a transaction coordinator takes an epoch at every load; an image
# version for it would be pushed to every actor of the cluster).
IMAGE_FREE_RECORD_TYPES = frozenset({"transaction_coordinator_epoch"})


def build_image(metadata: ClusterMetadata, version: int, *, super_users: frozenset[str] = frozenset()) -> ClusterImage:
    """`super_users`: the cluster's super.users setting (principals, `User:<name>`),
    beside rafka's own user."""
    registered = metadata.nodes
    listed: dict[int, NodeEndpoint] = {}

    def node_id(actor: str) -> int:
        node = registered.get(actor)
        if node is None:
            return NO_LEADER
        listed[node.node_id] = node
        return node.node_id

    topics = {}
    for name, topic in metadata.topics.items():
        partitions = []
        for index, state in enumerate(topic.partitions):
            actors = {r: a for r in state.replicas if (a := metadata.replica_actor(name, index, r)) is not None}
            by_replica = {r: node_id(actors[r]) if r in actors else NO_LEADER for r in state.replicas}
            leader_node = by_replica.get(state.leader, NO_LEADER) if state.online else NO_LEADER
            brokers = state.brokers if len(state.brokers) == len(state.replicas) else ()
            broker_of = dict(zip(state.replicas, brokers))
            partitions.append(PartitionImage(
                partition=index, leader_node=leader_node, leader_epoch=state.leader_epoch,
                replica_nodes=tuple(n for n in by_replica.values() if n >= 0),
                isr_nodes=tuple(by_replica[r] for r in state.isr if by_replica.get(r, NO_LEADER) >= 0),
                offline_nodes=(), leader_replica=state.leader if leader_node >= 0 else NO_LEADER,
                replica_brokers=tuple(brokers), isr_brokers=tuple(broker_of[r] for r in state.isr if r in broker_of),
                leader_broker=broker_of.get(state.leader, NO_LEADER) if leader_node >= 0 else NO_LEADER,
                replica_actors=actors))
        topics[name] = TopicImage(name=name, topic_id=id_as_uuid(topic.topic_id),
                                  is_internal=name in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC),
                                  partitions=tuple(partitions),
                                  config=dict(topic.config))
    offsets = metadata.topics.get(OFFSETS_TOPIC)
    coordinators = tuple(node_id(coordinator_actor_name(p))
                         for p in range(len(offsets.partitions) if offsets else 0))
    transaction_state = metadata.topics.get(TRANSACTION_STATE_TOPIC)
    transaction_coordinators = tuple(node_id(transaction_coordinator_actor_name(p))
                                     for p in range(len(transaction_state.partitions) if transaction_state else 0))
    controller = node_id(CONTROLLER_NAME)
    brokers: dict[int, NodeEndpoint] = {}
    for actor, node in sorted(registered.items()):   # a broker's processes share its port: the first names it
        broker = broker_of_actor_name(actor)
        if broker is not None and broker not in brokers:
            brokers[broker] = NodeEndpoint(broker, actor, node.host, node.port)
    return ClusterImage(version=version, cluster_id=metadata.cluster_id, controller_node=controller,
                        nodes=dict(sorted(listed.items())), topics=topics, coordinator_nodes=coordinators,
                        scram_credentials=dict(metadata.scram_credentials),
                        sasl_required=metadata.sasl_required, brokers=dict(sorted(brokers.items())),
                        transaction_coordinator_nodes=transaction_coordinators, acls=metadata.acls(),
                        super_users=SUPER_USERS | frozenset(super_users),
                        client_quotas=metadata.client_quotas(),
                        finalized_features=dict(metadata.feature_levels),
                        broker_logger_levels={b: dict(levels) for b, levels in metadata.broker_logger_levels.items()})
