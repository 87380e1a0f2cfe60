"""The names of rafka's actors (DESIGN section 2), in the Ray namespace `rafka`.

They are also the identities of Kafka nodes on the internal listener: the
controller keeps one node id per actor name (core.metadata.NodeEndpoint), so a
restarted actor is the same node. Clients see brokers instead (`broker:<id>:<k>`
actors, node id = broker id: core.cluster_image.broker_view).
Callers: the actors (to name themselves), the controller, the cluster image, and
operators' tools.
"""

from __future__ import annotations

NAMESPACE = "rafka"   # the Ray namespace of every rafka actor
CONTROLLER_NAME = "controller"
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"


def replica_actor_name(topic: str, partition: int, replica_id: int) -> str:
    return f"replica:{topic}:{partition}:{replica_id}"


def replica_actor_partition(actor: str) -> tuple[str, int]:
    """(topic, partition) of a replica actor's name (Kafka's topic names hold no ':')."""
    _, topic, partition, _ = actor.rsplit(":", 3)
    return topic, int(partition)


def coordinator_actor_name(offsets_partition: int) -> str:
    return f"coordinator:{offsets_partition}"


def transaction_coordinator_actor_name(transaction_state_partition: int) -> str:
    return f"txn-coordinator:{transaction_state_partition}"


BROKER_ACTOR_PREFIX = "broker:"


def broker_actor_name(broker_id: int, process: int = 0) -> str:
    """One of broker `broker_id`'s network processes: its Kafka node at the
    broker's fixed port (actors.broker)."""
    return f"{BROKER_ACTOR_PREFIX}{broker_id}:{process}"


def broker_of_actor_name(actor: str) -> int | None:
    """The broker id in a broker actor's name; None for any other actor."""
    if not actor.startswith(BROKER_ACTOR_PREFIX):
        return None
    broker, _, _ = actor[len(BROKER_ACTOR_PREFIX):].partition(":")
    return int(broker) if broker.isdigit() else None
