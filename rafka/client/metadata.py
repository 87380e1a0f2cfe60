"""The driver's one metadata cache: topic -> partitions -> leader replica and epoch.

Filled from the controller on first use of a topic; `invalidate(topic)` after a
NOT_LEADER_OR_FOLLOWER, a dead actor or a stale epoch makes the next lookup ask
the controller again. Thread-safe.
"""

from __future__ import annotations

import threading

import ray

from rafka.actors.replica import NAMESPACE, replica_actor_name
from rafka.core.errors import LeaderNotAvailable, UnknownTopicOrPartition


class MetadataCache:
    def __init__(self, controller) -> None:
        self._controller = controller
        self._lock = threading.Lock()
        self._partitions_by_topic: dict[str, list[dict]] = {}
        self._handles: dict[tuple[str, int, int], object] = {}

    def partitions(self, topic: str) -> list[dict]:
        with self._lock:
            cached = self._partitions_by_topic.get(topic)
        if cached is not None:
            return cached
        snapshot = ray.get(self._controller.metadata_snapshot.remote())["topics"]
        if topic not in snapshot:
            raise UnknownTopicOrPartition(f"Topic '{topic}' does not exist.")
        partitions = snapshot[topic]["partitions"]
        with self._lock:
            self._partitions_by_topic[topic] = partitions
        return partitions

    def partition_count(self, topic: str) -> int:
        return len(self.partitions(topic))

    def leader(self, topic: str, partition: int):
        """The leader replica actor's handle; LeaderNotAvailable while there is none."""
        return self.leader_and_epoch(topic, partition)[0]

    def leader_and_epoch(self, topic: str, partition: int) -> tuple[object, int]:
        """(leader replica actor, leader epoch); LeaderNotAvailable while there is none,
        UnknownTopicOrPartition for a partition the topic does not have."""
        partitions = self.partitions(topic)
        if not 0 <= partition < len(partitions):
            raise UnknownTopicOrPartition(f"Partition {topic}-{partition} does not exist.")
        state = partitions[partition]
        if state["leader"] < 0:
            self.invalidate(topic)
            raise LeaderNotAvailable(f"{topic}-{partition} has no leader")
        return self.replica(topic, partition, state["leader"]), state["leader_epoch"]

    def replica(self, topic: str, partition: int, replica_id: int):
        key = (topic, partition, replica_id)
        with self._lock:
            handle = self._handles.get(key)
        if handle is None:
            handle = ray.get_actor(replica_actor_name(topic, partition, replica_id), namespace=NAMESPACE)
            with self._lock:
                self._handles[key] = handle
        return handle

    def invalidate(self, topic: str) -> None:
        with self._lock:
            self._partitions_by_topic.pop(topic, None)
