"""Where replicas run: one placement group per replica actor, its one bundle pinned
to the actor's broker by the `rafka-broker-id` node label. The group is made with
the actor, which may be a shell of the pool holding no replica yet
(core.replica_pool): it is on its broker before it is given a replica there.

A partition's replicas sit on different brokers because the controller assigns
them to different broker ids (DESIGN section 4); the label pins each one there.
When a broker's node dies its bundles wait (Ray reschedules them) until a node
with the same label, the broker restarted with its disk, comes back; the replica
actor restarts there and reopens its own log. A broker gone for good is replaced
by reassignment (a new replica and group), never by Ray moving a bundle.

Why a group per replica and not DESIGN's one STRICT_SPREAD group per partition: a
group is placed all or nothing, so a partition's group created while one of its
brokers is down (after `rafka down` + `rafka up`, or a whole-cluster restart,
without that broker) would keep every replica of the partition off, though the
rest of its ISR could serve it. Label pinning to distinct broker ids is the
stronger spread: distinct broker identities, not only distinct Ray nodes.
Bundles ask for a sliver of the `rafka_broker` resource, so replicas avoid nodes
not given to rafka (e.g. a head node reserved for drivers).
"""

from __future__ import annotations

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group  # noqa: F401 (re-exported)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rafka.core.broker_identity import BROKER_ID_LABEL
from rafka.core.errors import LeaderNotAvailable
from rafka.placement.brokers import BROKER_RESOURCE  # noqa: F401 (re-exported)

# A bundle holds no CPU: replicas wait on I/O and many share a core, and Spark
# executors on the same nodes take whole CPUs. Its sliver of `rafka_broker` is what
# pins it to broker nodes, and bounds a broker to 1000 replica actors (metadata's
# MAX_REPLICAS_PER_BROKER, checked before a topic is written; the pool's idle
# shells are bounded by core.replica_pool.MAX_POOL_SIZE_PER_BROKER).
REPLICA_BROKER_SHARE = 0.001
GROUP_PREFIX = "rafka:"


def replica_group_name(shell: str) -> str:
    """The group of a replica actor, by the actor's (shell's) name."""
    return f"{GROUP_PREFIX}{shell}"


def replica_placement_group(shell: str, broker_id: int) -> PlacementGroup:
    """The group of one replica actor, on broker `broker_id` only; an existing one
    is reused. Made with the shell (core.replica_pool), before it holds a replica."""
    existing = existing_replica_group(shell)
    if existing is not None:
        return existing
    # Detached: the group (and so its replica) outlives the controller that made it.
    return placement_group([{BROKER_RESOURCE: REPLICA_BROKER_SHARE}], strategy="STRICT_PACK",
                           name=replica_group_name(shell), lifetime="detached",
                           bundle_label_selector=[{BROKER_ID_LABEL: str(broker_id)}])


def existing_replica_group(shell: str) -> PlacementGroup | None:
    try:
        return ray.util.get_placement_group(replica_group_name(shell))
    except ValueError:
        return None


def wait_ready(group: PlacementGroup, timeout_s: float) -> None:
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        raise LeaderNotAvailable(f"placement group {group.id.hex()} could not be placed in {timeout_s}s "
                                 f"(fewer live rafka nodes than replicas?)")


def in_bundle(group: PlacementGroup, bundle_index: int) -> PlacementGroupSchedulingStrategy:
    return PlacementGroupSchedulingStrategy(placement_group=group,
                                            placement_group_bundle_index=bundle_index,
                                            placement_group_capture_child_tasks=False)
