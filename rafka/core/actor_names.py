"""The names of rafka's actors (DESIGN section 2), in the Ray namespace `rafka`.

They are also the identities of Kafka nodes on the internal listener: the
controller keeps one node id per actor name (core.metadata.NodeEndpoint), so a
restarted actor is the same node. Clients see brokers instead (`broker:<id>:<k>`
actors, node id = broker id: core.cluster_image.broker_view).

A replica actor is made before its replica is known (a pool of idle "shells" per
broker, core.replica_pool, so that a topic comes online without starting
processes), so its name says where it runs and which shell it is, not which
replica it holds: `replica:b<broker id>:<controller epoch>-<n>`, the n-th shell
made by the controller of that epoch (never reused: epochs only grow). Which
replica a shell holds is the controller's metadata (`replica_actor` records,
core.metadata.ClusterMetadata.replica_actor); every lookup goes there.
Callers: the actors (to name themselves), the controller, the cluster image, and
operators' tools.
"""

from __future__ import annotations

NAMESPACE = "rafka"   # the Ray namespace of every rafka actor
CONTROLLER_NAME = "controller"
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"


REPLICA_SHELL_PREFIX = "replica:b"


def replica_shell_name(broker_id: int, controller_epoch: int, n: int) -> str:
    """The n-th replica actor ("shell") the controller of `controller_epoch` made
    on broker `broker_id`."""
    return f"{REPLICA_SHELL_PREFIX}{broker_id}:{controller_epoch}-{n}"


def broker_of_shell(actor: str) -> int | None:
    """The broker id in a replica shell's name; None for any other actor."""
    if not actor.startswith(REPLICA_SHELL_PREFIX):
        return None
    broker, _, rest = actor[len(REPLICA_SHELL_PREFIX):].partition(":")
    return int(broker) if broker.isdigit() and rest else None


def shell_key(actor: str) -> str:
    """What names a shell within its broker (`<epoch>-<n>`): its assignment file's
    name (core.replica_assignment)."""
    if broker_of_shell(actor) is None:
        raise ValueError(f"{actor!r} is not a replica shell's name")
    return actor.rpartition(":")[2]


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
