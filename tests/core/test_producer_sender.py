"""The producer's sender runs on its network loop: what must stay true there."""

import threading

import pytest

from rafka.client.producer import Producer
from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.core


class _Metadata:
    """The node's image, with one topic ("slow") whose metadata fetch blocks, off
    the calling thread, until `release` is set: a controller that does not answer."""

    def __init__(self, node) -> None:
        self.node = node
        self.release = threading.Event()
        self.fetched_off_main_thread = threading.Event()

    def needs_refresh(self, topic: str) -> bool:
        return topic == "slow" and not self.release.is_set()

    def partition_count(self, topic: str) -> int:
        if topic == "slow" and threading.current_thread() is not threading.main_thread():
            self.fetched_off_main_thread.set()
            assert self.release.wait(10)
        return len(self.node.image().topics[topic].partitions)

    def max_message_bytes(self, topic: str) -> int:
        return 1_048_576

    def leader_address(self, topic: str, partition: int):
        return self.node.image().leader_endpoint(topic, partition)

    def invalidate(self, topic: str) -> None:
        pass


def test_a_metadata_fetch_that_blocks__never_on_the_loop__other_topics_acked_meanwhile(tmp_path):
    with ProtocolNode(tmp_path, {"orders": 1, "slow": 1}) as node:
        producer = Producer(None, acks=1, linger_ms=0)   # no idempotence: no controller asked
        metadata = producer._metadata = _Metadata(node)
        try:
            slow = producer.send("slow", b"waits for its metadata", partition=0)
            assert metadata.fetched_off_main_thread.wait(10)
            assert producer.send("orders", b"goes now", partition=0).result(timeout=10).offset == 0
            assert not slow.done()
            metadata.release.set()
            assert slow.result(timeout=10).offset == 0
        finally:
            metadata.release.set()
            producer.close(timeout=10)
