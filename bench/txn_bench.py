"""Consume-transform-produce with and without transactions, on a 3-node local cluster.

    bash scripts/run.sh python bench/txn_bench.py [--records 250000] [--seconds 6] [--clients confluent,rafka]

An input topic of 3 partitions at R3 (min ISR 2) is filled once with `--records`
1 KiB records. Then, for each client (confluent-kafka, rafka's own clients) and
each mode, one application (a group member of its own group, reading the input
from the start) reads batches, writes every record (its bytes reversed: the
"transform") to the same partition of an output topic of 3 partitions at R3, and
every 100 ms commits:
  transactional: the consumed offsets sent with send_offsets_to_transaction, then
    commit_transaction (isolation.level read_committed; EOS, KIP-98/KIP-447)
  plain: the idempotent producer flushed, then the consumed offsets committed
    with a synchronous offset commit (at-least-once)
until the input is read or `--seconds` have passed (the last commit included).
Both producers buffer at most ~100 ms of records (librdkafka's queue 2,000
records, rafka's buffer_memory 4 MiB), as an application pacing its reads by its
writes does: unbounded, consume ran seconds ahead and a commit waited for all of
it (confluent-kafka's commit_transaction p50 was 1.5 s).
Prints one table: records/s of each, the ratio transactional / plain (issue 28's
target: >= 0.5), and the latency of each commit: commit_transaction's p50 and p99
(its own flush of what is still buffered included, as the call does), the plain
rows' flush + commit.
"""

from __future__ import annotations

import argparse
import os
import time

from replication_bench import percentile, quiesce  # bench/ is the script's directory

RECORD_BYTES = 1024
PARTITIONS = 3
COMMIT_INTERVAL_S = 0.1
RATIO_TARGET = 0.5
INPUT = "bench-txn-in"
CONFLUENT_QUEUED_RECORDS_MAX = 2_000
RAFKA_BUFFER_BYTES_MAX = 4 << 20


class ConfluentApp:
    """The loop's calls on confluent-kafka (librdkafka)."""

    def __init__(self, bootstrap_servers: str, *, group: str, output: str, transactional: bool) -> None:
        from confluent_kafka import Consumer, Producer
        self.output = output
        self.consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed" if transactional else "read_uncommitted"})
        self.consumer.subscribe([INPUT])
        # librdkafka's queue bounded to ~100 ms of its produce rate here: unbounded
        # (100,000 records), consume ran seconds ahead of produce, and every
        # commit waited for all of that to be written (commits of 1.5 s, not 100 ms)
        config = {"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "enable.idempotence": True,
                  "queue.buffering.max.messages": CONFLUENT_QUEUED_RECORDS_MAX}
        if transactional:
            config["transactional.id"] = group
        self.producer = Producer(config)
        if transactional:
            self.producer.init_transactions(60)

    def poll(self) -> list:
        return self.consumer.consume(500, 0.1)

    def forward(self, messages, positions: dict) -> None:
        produce, output = self.producer.produce, self.output
        for m in messages:
            assert not m.error(), m.error()
            while True:
                try:
                    produce(output, m.value()[::-1], partition=m.partition())
                    break
                except BufferError:   # librdkafka's queue is full: serve it
                    self.producer.poll(0.01)
            positions[m.partition()] = m.offset() + 1
        self.producer.poll(0)

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send_offsets(self, positions: dict) -> None:
        from confluent_kafka import TopicPartition
        self.producer.send_offsets_to_transaction([TopicPartition(INPUT, p, o) for p, o in positions.items()],
                                                  self.consumer.consumer_group_metadata(), 60)

    def commit_transaction(self) -> None:
        self.producer.commit_transaction(60)

    def commit_plain(self, positions: dict) -> None:
        from confluent_kafka import TopicPartition
        assert self.producer.flush(60) == 0
        self.consumer.commit(offsets=[TopicPartition(INPUT, p, o) for p, o in positions.items()],
                             asynchronous=False)

    def close(self) -> None:
        self.consumer.close()


class RafkaApp:
    """The loop's calls on rafka's Producer and Consumer (rafka.client)."""

    def __init__(self, cluster, *, group: str, output: str, transactional: bool) -> None:
        from rafka.core.structs import TopicPartition
        self.output = output
        self.tps = [TopicPartition(INPUT, p) for p in range(PARTITIONS)]
        self.consumer = cluster.consumer(group_id=group, enable_auto_commit=False, auto_offset_reset="earliest",
                                         isolation_level="read_committed" if transactional else "read_uncommitted",
                                         max_poll_records=500, fetch_max_wait_ms=100)
        self.consumer.subscribe([INPUT])
        # the producer's buffer bounded as librdkafka's queue is (ConfluentApp), so
        # that consume does not run far ahead of produce and a commit waits for
        # ~100 ms of records, not seconds of them
        options = dict(linger_ms=5, buffer_memory=RAFKA_BUFFER_BYTES_MAX)
        self.producer = (cluster.producer(transactional_id=group, **options) if transactional
                         else cluster.producer(acks="all", enable_idempotence=True, **options))
        if transactional:
            self.producer.init_transactions(60)

    def poll(self) -> list:
        return self.consumer.poll(timeout=0.1)

    def forward(self, records, positions: dict) -> None:
        send, output = self.producer.send, self.output
        for r in records:
            send(output, r.value[::-1], partition=r.partition)
            positions[r.partition] = r.offset + 1

    def begin(self) -> None:
        self.producer.begin_transaction()

    def send_offsets(self, positions: dict) -> None:
        self.producer.send_offsets_to_transaction({self.tps[p]: o for p, o in positions.items()},
                                                  self.consumer.group_metadata(), 60)

    def commit_transaction(self) -> None:
        self.producer.commit_transaction(60)

    def commit_plain(self, positions: dict) -> None:
        self.producer.flush(60)
        self.consumer.commit_sync({self.tps[p]: o for p, o in positions.items()})

    def close(self) -> None:
        self.producer.close()
        self.consumer.close()


def run(app, *, records: int, seconds: float, transactional: bool) -> tuple[int, float, list[float]]:
    """The loop, timed from its first record (the group joined) to its last
    commit: (records processed, seconds, commit latencies in ms)."""
    positions: dict[int, int] = {}
    batch = []
    while not batch:
        batch = app.poll()
    started = time.perf_counter()
    deadline = started + seconds
    processed, latencies_ms = 0, []
    if transactional:
        app.begin()
    commit_due = started + COMMIT_INTERVAL_S
    while True:
        app.forward(batch, positions)
        processed += len(batch)
        now = time.perf_counter()
        done = processed >= records or now >= deadline
        if now >= commit_due or done:
            commit_started = time.perf_counter()
            if transactional:
                app.send_offsets(positions)
                commit_started = time.perf_counter()
                app.commit_transaction()
            else:
                app.commit_plain(positions)
            latencies_ms.append((time.perf_counter() - commit_started) * 1000)
            if done:
                break
            if transactional:
                app.begin()
            commit_due = time.perf_counter() + COMMIT_INTERVAL_S
        batch = app.poll()
    return processed, time.perf_counter() - started, sorted(latencies_ms)


def fill_input(cluster, records: int) -> None:
    """The input, written once by rafka's producer (acks=all, idempotent)."""
    value = os.urandom(RECORD_BYTES)
    with cluster.producer(acks="all", linger_ms=5) as producer:
        for i in range(records):
            producer.send(INPUT, value, partition=i % PARTITIONS)
        producer.flush()
        metrics = producer.metrics()
    assert metrics["record-send-total"] == records and metrics["record-error-total"] == 0, metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=250_000,
                        help="input records; each row reads them from the start")
    parser.add_argument("--seconds", type=float, default=6.0, help="at most this long per row")
    parser.add_argument("--clients", default="confluent,rafka")
    args = parser.parse_args()

    import rafka
    rows = []
    with rafka.local_cluster(nodes=3, log_to_driver=False,
                             coordinator_options={"group_initial_rebalance_delay_ms": 0}) as cluster:
        admin = cluster.admin()
        admin.create_topic(INPUT, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": "2"})
        bootstrap_servers = cluster.bootstrap_servers
        fill_input(cluster, args.records)
        for client in args.clients.split(","):
            for transactional in (False, True):
                name = f"bench-{client}-{'txn' if transactional else 'plain'}"
                admin.create_topic(f"{name}-out", partitions=PARTITIONS, replication_factor=3,
                                   config={"min.insync.replicas": "2"})
                options = dict(group=name, output=f"{name}-out", transactional=transactional)
                app = (ConfluentApp(bootstrap_servers, **options) if client == "confluent"
                       else RafkaApp(cluster, **options))
                quiesce()
                try:
                    processed, elapsed, latencies_ms = run(app, records=args.records, seconds=args.seconds,
                                                           transactional=transactional)
                finally:
                    app.close()
                rows.append((client, transactional, processed, elapsed, latencies_ms))

    print(f"\nrafka transactions bench: 3 broker nodes, input and output 3 partitions R3 min ISR 2, "
          f"{RECORD_BYTES} B records, a commit every {COMMIT_INTERVAL_S * 1000:g} ms, {os.cpu_count()} cores")
    print(f"{'client':<11}{'mode':<15}{'records':>9}{'seconds':>9}{'records/s':>11}{'ratio':>7}"
          f"{'commits':>9}{'commit p50':>12}{'commit p99':>12}")
    plain_rates = {}
    for client, transactional, processed, elapsed, latencies_ms in rows:
        rate = processed / elapsed
        if not transactional:
            plain_rates[client] = rate
            mode, ratio = "plain", ""
        else:
            mode = "transactional"
            value = rate / plain_rates[client]
            ratio = f"{value:.2f}{'' if value >= RATIO_TARGET else '!'}"
        p50, p99 = percentile(latencies_ms, 0.5), percentile(latencies_ms, 0.99)
        print(f"{client:<11}{mode:<15}{processed:>9,}{elapsed:>9.2f}{rate:>11,.0f}{ratio:>7}"
              f"{len(latencies_ms):>9}{p50:>9.2f} ms{p99:>9.2f} ms")
    print(f"ratio: transactional / plain records/s of the same client (target >= {RATIO_TARGET:g}; '!' missed). "
          "commit: commit_transaction (transactional), flush + synchronous offset commit (plain).")


if __name__ == "__main__":
    main()
