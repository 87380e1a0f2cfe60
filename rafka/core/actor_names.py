"""The names of rafka's actors (DESIGN section 2), in the Ray namespace `rafka`.

They are also the identities of Kafka nodes: the controller keeps one node id per
actor name (core.metadata.NodeEndpoint), so a restarted actor is the same node.
Callers: the actors (to name themselves), the controller, the cluster image, and
operators' tools.
"""

from __future__ import annotations

NAMESPACE = "rafka"   # the Ray namespace of every rafka actor
CONTROLLER_NAME = "controller"
OFFSETS_TOPIC = "__consumer_offsets"


def replica_actor_name(topic: str, partition: int, replica_id: int) -> str:
    return f"replica:{topic}:{partition}:{replica_id}"


def coordinator_actor_name(offsets_partition: int) -> str:
    return f"coordinator:{offsets_partition}"
