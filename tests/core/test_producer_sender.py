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


def test_a_new_producer_epoch__a_batch_sent_before_keeps_its_epoch_and_is_never_written_twice(tmp_path):
    """KIP-360 without duplicates. Batch X (partition 0) is written but its answer
    is lost; while X waits to retry, batch Y (partition 1) fails for good and the
    producer starts a new epoch. X's retry must go with the epoch and sequence it
    was written with, so the leader recognises it and answers the first offset;
    encoded again with the new epoch and sequence 0 it was written a second time
    (`rafka verify` found one: six records twice in verify-0)."""
    from kio.serial import entity_reader
    from rafka.core.errors import InvalidRecord, NetworkException
    from rafka.protocol.hot_writers import write_body
    with ProtocolNode(tmp_path, {"orders": 2}) as node:
        producer = Producer(node.bootstrap, acks="all", linger_ms=0, retry_backoff_ms=300)
        real_request = producer._network.nodes.request
        x_lost = threading.Event()

        async def request(address, body, **options):
            if body.__api_key__ != 0:   # not a Produce (metadata, producer id)
                return await real_request(address, body, **options)
            produce, _ = entity_reader(body.entity_type)(write_body(body), 0)   # as the leader reads it
            if produce.topic_data[0].partition_data[0].index == 1:
                raise InvalidRecord("this batch fails for good")
            answer = await real_request(address, body, **options)
            if not x_lost.is_set():   # X's first attempt: written, then its answer lost
                x_lost.set()
                raise NetworkException("the answer was lost")
            return answer
        producer._network.nodes.request = request
        try:
            epoch = producer.producer_epoch
            x = producer.send("orders", b"X", partition=0)
            assert x_lost.wait(10)
            with pytest.raises(InvalidRecord):
                producer.send("orders", b"Y", partition=1).result(timeout=10)
            assert producer.producer_epoch == epoch + 1
            assert x.result(timeout=10).offset == 0
            z = producer.send("orders", b"Z", partition=0).result(timeout=10)   # the new epoch, sequence 0
        finally:
            producer.close(timeout=10)
        log = node.endpoint("orders", 0).replica.log
        assert log.log_end_offset == 2 and z.offset == 1


def test_out_of_order_sequence_with_nothing_earlier_outstanding__fails_the_batch_and_logs_its_sequence(tmp_path,
                                                                                                       caplog):
    """A leader that answers OUT_OF_ORDER_SEQUENCE_NUMBER to a batch with no earlier
    batch of its partition outstanding has lost track of the producer: the batch
    fails (not retried), and the producer logs the id, epoch and sequence it sent,
    as Kafka's Sender does (a CI run saw one on a fresh topic and nothing else)."""
    from rafka.core.errors import OutOfOrderSequence
    with ProtocolNode(tmp_path, {"orders": 1}) as node:
        producer = Producer(node.bootstrap, acks="all", linger_ms=0)
        real_request = producer._network.nodes.request

        async def request(address, body, **options):
            if body.__api_key__ == 0:   # a Produce
                raise OutOfOrderSequence("the leader expected another sequence")
            return await real_request(address, body, **options)
        producer._network.nodes.request = request
        try:
            with caplog.at_level("ERROR", logger="rafka.client.producer"):
                failed = producer.send("orders", b"x", partition=0)
                with pytest.raises(OutOfOrderSequence):
                    failed.result(timeout=10)
            logged = [r.getMessage() for r in caplog.records if r.name == "rafka.client.producer"]
            assert len(logged) == 1 and f"producer id {producer.producer_id}" in logged[0]
            assert "epoch 0, sequence 0 (attempt 1" in logged[0]
        finally:
            producer.close(timeout=10)
