"""The driver's one metadata cache: the controller's newest cluster image (topics,
partitions, each leader's replica id, epoch and Kafka endpoint).

Fetched from the controller on first use and again after `invalidate(topic)` (a
NOT_LEADER_OR_FOLLOWER, a lost connection or actor, a stale epoch) or when a
topic is not in it; an image never replaces a newer one (the controller's
version orders them). Thread-safe.

Callers: the producer and the consumer (leader endpoints, on the wire),
client.membership (coordinator endpoints), the admin's offset lookups and Spark
read tasks (leader endpoints).
"""

from __future__ import annotations

import threading

import ray

from rafka.core.cluster_image import ClusterImage, PartitionImage
from rafka.core.config import TopicConfig
from rafka.core.actor_names import OFFSETS_TOPIC
from rafka.core.errors import CoordinatorNotAvailable, LeaderNotAvailable, UnknownTopicOrPartition
from rafka.core.offsets_schema import partition_for_group


class MetadataCache:
    def __init__(self, controller) -> None:
        self._controller = controller
        self._lock = threading.Lock()
        self._image: ClusterImage | None = None
        self._stale: set[str] = set()        # topics to look up afresh

    def _topic_image(self, topic: str) -> tuple[ClusterImage, tuple[PartitionImage, ...]]:
        """The image holding `topic`, and the topic's partitions in it."""
        image = self._image   # the fast path, every send: one read each, no lock (the GIL orders them)
        if image is not None and topic not in self._stale:
            found = image.topics.get(topic)
            if found is not None:
                return image, found.partitions
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

    def needs_refresh(self, topic: str) -> bool:
        """Whether asking about `topic` now would fetch the image from the controller
        (a blocking call): it is marked stale or not in the image."""
        image = self._image
        return image is None or topic in self._stale or topic not in image.topics

    def max_message_bytes(self, topic: str) -> int:
        """The topic's max.message.bytes: the largest record batch its leader takes."""
        image, _ = self._topic_image(topic)
        return TopicConfig.from_dict(image.topics[topic].config).max_message_bytes

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

    def coordinator_address(self, group_id: str) -> tuple[str, int]:
        """(host, port) of the group's coordinator (the coordinator of its
        __consumer_offsets partition); CoordinatorNotAvailable while it has no
        endpoint in the image (Kafka's FindCoordinator answers the same)."""
        image, partitions = self._topic_image(OFFSETS_TOPIC)
        partition = partition_for_group(group_id, len(partitions))
        nodes = image.coordinator_nodes
        node = image.nodes.get(nodes[partition]) if partition < len(nodes) else None
        if node is None:
            self.invalidate(OFFSETS_TOPIC)
            raise CoordinatorNotAvailable(f"the coordinator of group {group_id!r} has no Kafka endpoint yet")
        return node.host, node.port

    def coordinator_addresses(self) -> list[tuple[str, int]]:
        """Every coordinator's (host, port), by __consumer_offsets partition;
        CoordinatorNotAvailable while one has no endpoint yet."""
        image, partitions = self._topic_image(OFFSETS_TOPIC)
        found = [image.nodes.get(n) for n in image.coordinator_nodes[:len(partitions)]]
        if len(found) < len(partitions) or None in found:
            self.invalidate(OFFSETS_TOPIC)
            raise CoordinatorNotAvailable("a group coordinator has no Kafka endpoint yet")
        return [(node.host, node.port) for node in found]

    def invalidate(self, topic: str) -> None:
        with self._lock:
            self._stale.add(topic)
