"""The driver's one metadata cache: the controller's newest cluster image (topics,
partitions, each leader's replica id, epoch and Kafka endpoint).

Fetched from the controller on first use and again after `invalidate(topic)` (a
NOT_LEADER_OR_FOLLOWER, a lost connection or actor, a stale epoch) or when a
topic is not in it; an image never replaces a newer one (the controller's
version orders them). Thread-safe.

Callers: the producer and the consumer (leader endpoints, on the wire), the
admin's offset lookups and Spark read tasks (leader replica actors, over Ray
calls until issue 15 moves them onto the wire too).
"""

from __future__ import annotations

import threading

import ray

from rafka.actors.replica import NAMESPACE, replica_actor_name
from rafka.core.cluster_image import ClusterImage, PartitionImage
from rafka.core.errors import LeaderNotAvailable, UnknownTopicOrPartition


class MetadataCache:
    def __init__(self, controller) -> None:
        self._controller = controller
        self._lock = threading.Lock()
        self._image: ClusterImage | None = None
        self._stale: set[str] = set()        # topics to look up afresh
        self._handles: dict[tuple[str, int, int], object] = {}

    def _topic_image(self, topic: str) -> tuple[ClusterImage, tuple[PartitionImage, ...]]:
        """The image holding `topic`, and the topic's partitions in it."""
        with self._lock:
            image, stale = self._image, topic in self._stale
        if image is None or stale or topic not in image.topics:
            fetched = ray.get(self._controller.cluster_image.remote())
            with self._lock:
                if self._image is None or fetched.version >= self._image.version:
                    self._image = fetched
                self._stale.discard(topic)
                image = self._image
        if topic not in image.topics:
            raise UnknownTopicOrPartition(f"Topic '{topic}' does not exist.")
        return image, image.topics[topic].partitions

    def partition_count(self, topic: str) -> int:
        return len(self._topic_image(topic)[1])

    def _led(self, topic: str, partition: int) -> tuple[ClusterImage, PartitionImage]:
        image, partitions = self._topic_image(topic)
        if not 0 <= partition < len(partitions):
            raise UnknownTopicOrPartition(f"Partition {topic}-{partition} does not exist.")
        state = partitions[partition]
        if state.leader_replica < 0:
            self.invalidate(topic)
            raise LeaderNotAvailable(f"{topic}-{partition} has no leader")
        return image, state

    def leader_address(self, topic: str, partition: int) -> tuple[tuple[str, int], int]:
        """((host, port) of the leader's Kafka endpoint, leader epoch);
        LeaderNotAvailable while there is no leader or it has no endpoint yet."""
        image, _ = self._topic_image(topic)
        try:
            return image.leader_endpoint(topic, partition)
        except LeaderNotAvailable:
            self.invalidate(topic)
            raise

    def leader(self, topic: str, partition: int):
        """The leader replica actor's handle; LeaderNotAvailable while there is none."""
        return self.leader_and_epoch(topic, partition)[0]

    def leader_and_epoch(self, topic: str, partition: int) -> tuple[object, int]:
        """(leader replica actor, leader epoch); LeaderNotAvailable while there is none,
        UnknownTopicOrPartition for a partition the topic does not have."""
        _, state = self._led(topic, partition)
        return self.replica(topic, partition, state.leader_replica), state.leader_epoch

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
            self._stale.add(topic)
