"""Reading a topic back with confluent-kafka (librdkafka) at an isolation level:
what the transaction tests, in process and on the cluster, compare."""

from __future__ import annotations

import time


def read_values(bootstrap_servers: str, topic: str, isolation_level: str, *, partitions=(0, 1),
                timeout_s: float = 60.0) -> dict[int, list[bytes]]:
    """Every record value a confluent-kafka consumer at `isolation_level` reads from
    the start of `partitions`, by partition, up to where each ends for it (the LSO
    read_committed, the HW read_uncommitted). librdkafka skips control batches and,
    read_committed, the aborted transactions the Fetch answer names."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": f"read-{isolation_level}",
                         "isolation.level": isolation_level, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        values: dict[int, list[bytes]] = {p: [] for p in partitions}
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(partitions) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                at_end.add(message.partition())
                continue
            values[message.partition()].append(message.value())
        assert at_end == set(partitions), f"the consumer did not reach the end of {partitions}: {values}"
        return values
    finally:
        consumer.close()
