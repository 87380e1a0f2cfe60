"""Where replicas run: one STRICT_SPREAD placement group per partition.

Each bundle holds one replica actor, so a partition's replicas sit on different
Ray nodes (Ray refuses to place the group when there are fewer nodes than
replicas: creation waits, and `wait_ready` times out with LeaderNotAvailable).
Bundles ask for a custom resource that every rafka node advertises, so replicas
avoid nodes that were not given to rafka (e.g. a head node reserved for drivers).
"""

from __future__ import annotations

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group  # noqa: F401 (re-exported)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rafka.core.errors import LeaderNotAvailable

BROKER_RESOURCE = "rafka_broker"
REPLICA_CPU = 0.01  # replicas are mostly waiting on I/O; many share a core


def partition_group_name(topic: str, partition: int) -> str:
    return f"rafka:{topic}:{partition}"


def partition_placement_group(topic: str, partition: int, replication_factor: int) -> PlacementGroup:
    bundles = [{"CPU": REPLICA_CPU, BROKER_RESOURCE: 0.001} for _ in range(replication_factor)]
    # Detached: the group (and so its replicas) outlives the controller that made it.
    return placement_group(bundles, strategy="STRICT_SPREAD", name=partition_group_name(topic, partition),
                           lifetime="detached")


def wait_ready(group: PlacementGroup, timeout_s: float) -> None:
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        raise LeaderNotAvailable(f"placement group {group.id.hex()} could not be placed in {timeout_s}s "
                                 f"(fewer live rafka nodes than replicas?)")


def in_bundle(group: PlacementGroup, bundle_index: int) -> PlacementGroupSchedulingStrategy:
    return PlacementGroupSchedulingStrategy(placement_group=group,
                                            placement_group_bundle_index=bundle_index,
                                            placement_group_capture_child_tasks=False)

