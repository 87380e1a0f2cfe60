"""fetch.min.bytes as Kafka's broker honours it (DelayedFetch): a consumer's fetch
is answered once it can carry that much, not at its first batch. librdkafka and
rafka's Consumer, at an actor's node and through a broker's edge (in-process, no
Ray)."""

import time

import pytest

from tests.core.protocol_node import ProtocolNode

pytestmark = pytest.mark.compat

VALUE = b"m" * 1000          # one record's batch: about 1,070 bytes
MIN_BYTES = 1_500            # more than one such batch, less than two
QUIET_S = 1.5                # how long the first record alone must stay unread


@pytest.fixture(params=[False, True], ids=["actor-nodes", "broker-edge"])
def node(tmp_path, request):
    with ProtocolNode(tmp_path, {"orders": 1}, edge=request.param) as node:
        yield node


def produce_one(node, value: bytes) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all"})
    producer.produce("orders", value=value, partition=0)
    assert producer.flush(30) == 0


def test_confluent_kafka__fetch_min_bytes__first_record_waits_for_the_second(node):
    from confluent_kafka import Consumer, TopicPartition
    produce_one(node, VALUE)
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "min-bytes", "enable.auto.commit": False,
                         "fetch.min.bytes": MIN_BYTES, "fetch.wait.max.ms": 60_000})
    try:
        consumer.assign([TopicPartition("orders", 0, 0)])
        deadline = time.monotonic() + QUIET_S
        while time.monotonic() < deadline:   # one batch is readable, but less than fetch.min.bytes
            message = consumer.poll(0.25)
            assert message is None or message.error() is not None, "answered before fetch.min.bytes"
        produce_one(node, VALUE + b"2")
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.offset())
        assert got == [0, 1]
    finally:
        consumer.close()


def test_rafka_consumer__fetch_min_bytes__first_record_waits_for_the_second(node):
    from rafka.client.consumer import Consumer
    from rafka.core.structs import TopicPartition
    produce_one(node, VALUE)
    consumer = Consumer(node.bootstrap, auto_offset_reset="earliest", fetch_min_bytes=MIN_BYTES,
                        fetch_max_wait_ms=60_000)
    try:
        consumer.assign([TopicPartition("orders", 0)])
        assert consumer.poll(QUIET_S) == []   # one batch is readable, but less than fetch_min_bytes
        produce_one(node, VALUE + b"2")
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            got += [record.offset for record in consumer.poll(0.5)]
        assert got == [0, 1]
    finally:
        consumer.close()
