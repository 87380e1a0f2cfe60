"""The cluster as Kafka clients see it: nodes (one per actor serving the wire
protocol), topics, and each partition's leader, replicas and ISR as node ids.

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

Pure data, no I/O. Callers: the controller (build), the actors' Metadata handler
and partition lookups (read), rafka.client's metadata cache and the
coordinators (leader endpoints).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from typing import Any

from rafka.core.actor_names import (CONTROLLER_NAME, OFFSETS_TOPIC, coordinator_actor_name,
                                    replica_actor_name)
from rafka.core.errors import LeaderNotAvailable, UnknownTopicOrPartition
from rafka.core.metadata import NO_LEADER, ClusterMetadata, NodeEndpoint, id_as_uuid
from rafka.core.scram import ScramCredential


@dataclasses.dataclass(frozen=True)
class PartitionImage:
    partition: int
    leader_node: int              # -1: none
    leader_epoch: int
    replica_nodes: tuple[int, ...]
    isr_nodes: tuple[int, ...]
    offline_nodes: tuple[int, ...]
    leader_replica: int           # the replica index behind leader_node (NO_LEADER: none)


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

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """A SASL listener's lookup: the user's salted credential for `mechanism`."""
        return self.scram_credentials.get((user, mechanism))

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def node_of_actor(self, actor: str) -> int:
        return next((n.node_id for n in self.nodes.values() if n.actor == actor), NO_LEADER)

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


EMPTY_IMAGE = ClusterImage(version=-1, cluster_id=None, controller_node=NO_LEADER, nodes={}, topics={},
                           coordinator_nodes=())


def build_image(metadata: ClusterMetadata, version: int) -> ClusterImage:
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
            by_replica = {r: node_id(replica_actor_name(name, index, r)) for r in state.replicas}
            leader_node = by_replica.get(state.leader, NO_LEADER) if state.online else NO_LEADER
            partitions.append(PartitionImage(
                partition=index, leader_node=leader_node, leader_epoch=state.leader_epoch,
                replica_nodes=tuple(n for n in by_replica.values() if n >= 0),
                isr_nodes=tuple(by_replica[r] for r in state.isr if by_replica.get(r, NO_LEADER) >= 0),
                offline_nodes=(), leader_replica=state.leader if leader_node >= 0 else NO_LEADER))
        topics[name] = TopicImage(name=name, topic_id=id_as_uuid(topic.topic_id),
                                  is_internal=name == OFFSETS_TOPIC, partitions=tuple(partitions),
                                  config=dict(topic.config))
    offsets = metadata.topics.get(OFFSETS_TOPIC)
    coordinators = tuple(node_id(coordinator_actor_name(p))
                         for p in range(len(offsets.partitions) if offsets else 0))
    controller = node_id(CONTROLLER_NAME)
    return ClusterImage(version=version, cluster_id=metadata.cluster_id, controller_node=controller,
                        nodes=dict(sorted(listed.items())), topics=topics, coordinator_nodes=coordinators,
                        scram_credentials=dict(metadata.scram_credentials),
                        sasl_required=metadata.sasl_required)
