"""librdkafka (confluent-kafka) on rafka's wire protocol, beside rafka's own
client (Ray calls), in one run on a 3-node local cluster.

    bash scripts/run.sh python bench/wire_bench.py [--seconds 6]

Prints one table, one row per client and case:
  publish   acks=all, R3 (min ISR 2), one partition, 100 B and 1 KiB records,
            librdkafka's defaults (linger 5 ms, batch 1 MB, idempotent) against
            rafka's Producer (its defaults: linger 5 ms, batch 16 KiB); records/s, MB/s
  consume   one consumer reading the 1 KiB topic from the start; records/s
  sync      one 100 B record at a time, acks=all R3: p50 / p99 in ms
No target (issue 14): the figures, and where rafka's time goes: with --profile,
py-spy samples the leader's and a follower's actor processes (and, for rafka's
client, this driver) during the 1 KiB publish, and prints where each spent it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time

from spy import Sampler, actor_pid, report   # bench/ is the script's directory
from replication_bench import percentile


def in_own_process(measure, *args):
    """`measure(*args)` (a librdkafka measurement of this module) run in a fresh
    Python process, as a librdkafka application runs: not inside this driver, whose
    heap (a million freed futures after rafka's own publish) and threads (Ray's,
    rafka's clients) it would otherwise share. Its result, through JSON."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import wire_bench; "
            f"print(json.dumps(wire_bench.{measure.__name__}(*json.loads(sys.argv[2]))))")
    done = subprocess.run([sys.executable, "-c", code, os.path.dirname(os.path.abspath(__file__)), json.dumps(args)],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout.splitlines()[-1])


def librdkafka_publish(bootstrap: str, topic: str, size: int, seconds: float,
                       partitions: int = 1) -> tuple[int, float]:
    """Produces for `seconds`, round-robin over partitions 0..partitions-1, then
    flushes. Returns (records acked, seconds): a delivery report without an error
    is an ack."""
    from confluent_kafka import Producer
    acked = 0

    def delivered(error, _message) -> None:
        nonlocal acked
        acked += error is None
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "on_delivery": delivered})
    value = b"x" * size
    sent = 0
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        try:
            producer.produce(topic, value=value, partition=sent % partitions)
            sent += 1
        except BufferError:     # the local queue is full: let deliveries drain it
            producer.poll(0.01)
        if sent % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return acked, time.perf_counter() - started


def rafka_publish(cluster, topic: str, size: int, seconds: float) -> tuple[int, float]:
    value = b"x" * size
    sent = 0
    with cluster.producer(acks="all") as producer:
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            for _ in range(100):
                producer.send(topic, value=value, partition=0)
            sent += 100
        producer.flush()
        return sent, time.perf_counter() - started


def librdkafka_consume(bootstrap: str, topic: str, count: int) -> tuple[int, float]:
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-wire", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.perf_counter()
    while got < count:
        messages = consumer.consume(10_000, timeout=5)
        if not messages:
            break
        got += sum(1 for m in messages if m.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    return got, elapsed


def rafka_consume(cluster, topic: str, count: int) -> tuple[int, float]:
    from rafka.core.structs import TopicPartition
    consumer = cluster.consumer(auto_offset_reset="earliest", max_poll_records=10_000)
    consumer.assign([TopicPartition(topic, 0)])
    got = 0
    started = time.perf_counter()
    while got < count:
        records = consumer.poll(timeout=5)
        if not records:
            break
        got += len(records)
    elapsed = time.perf_counter() - started
    consumer.close()
    return got, elapsed


def librdkafka_sync(bootstrap: str, topic: str, samples: int) -> list[float]:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0})
    latencies = []
    for i in range(samples + 50):
        started = time.perf_counter()
        producer.produce(topic, value=b"x" * 100, partition=0)
        assert producer.flush(30) == 0
        if i >= 50:
            latencies.append((time.perf_counter() - started) * 1000)
    return sorted(latencies)


def rafka_sync(cluster, topic: str, samples: int) -> list[float]:
    latencies = []
    with cluster.producer(acks="all", linger_ms=0) as producer:
        for i in range(samples + 50):
            started = time.perf_counter()
            producer.send(topic, value=b"x" * 100, partition=0).result(30)
            if i >= 50:
                latencies.append((time.perf_counter() - started) * 1000)
    return sorted(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--latency-samples", type=int, default=1_000)
    parser.add_argument("--profile", action="store_true", help="py-spy the actors during the 1 KiB publish")
    args = parser.parse_args()

    import rafka
    rows, sync_rows, profiles = [], [], []
    with rafka.local_cluster(nodes=3) as cluster:
        admin = cluster.admin()
        bootstrap = cluster.bootstrap_servers
        for client in ("librdkafka", "rafka"):
            for size in (100, 1024):
                topic = f"bench-{client}-{size}"
                admin.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
                wait_for_wire(cluster, topic)
                publish = librdkafka_publish if client == "librdkafka" else None
                with sampled(args.profile and size == 1024, cluster, topic, client) as samplers:
                    count, elapsed = (publish(bootstrap, topic, size, args.seconds) if publish
                                      else rafka_publish(cluster, topic, size, args.seconds))
                profiles += samplers
                rows.append((client, "publish", size, count, elapsed))
            topic = f"bench-{client}-1024"
            produced = next(r[3] for r in rows if r[:3] == (client, "publish", 1024))
            count, elapsed = (librdkafka_consume(bootstrap, topic, produced) if client == "librdkafka"
                              else rafka_consume(cluster, topic, produced))
            rows.append((client, "consume", 1024, count, elapsed))
            topic = f"bench-{client}-sync"
            admin.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
            wait_for_wire(cluster, topic)
            latencies = (librdkafka_sync(bootstrap, topic, args.latency_samples) if client == "librdkafka"
                         else rafka_sync(cluster, topic, args.latency_samples))
            sync_rows.append((client, latencies))

    print(f"\nrafka wire bench: 3 broker nodes, 1 partition, R3, min ISR 2, acks=all, {os.cpu_count()} cores")
    print(f"{'client':<12}{'what':<9}{'record':>8}{'records':>11}{'seconds':>9}{'records/s':>12}{'MB/s':>8}")
    for client, what, size, count, elapsed in rows:
        rate = count / elapsed
        print(f"{client:<12}{what:<9}{size:>7}B{count:>11,}{elapsed:>9.2f}{rate:>12,.0f}{rate * size / 1e6:>8.1f}")
    print(f"\n{'client':<12}sync publish, 100 B, one at a time")
    for client, latencies in sync_rows:
        print(f"{client:<12}p50 {percentile(latencies, 0.5):.2f} ms   p99 {percentile(latencies, 0.99):.2f} ms   "
              f"({len(latencies)} samples)")
    for sampler in profiles:
        print()
        print(report(sampler))


@contextlib.contextmanager
def sampled(enabled: bool, cluster, topic: str, client: str):
    """py-spy on the partition's leader and one follower (and on this driver when
    rafka's own client publishes) while the body runs."""
    if not enabled:
        yield []
        return
    from rafka.actors.replica import NAMESPACE
    described = cluster.admin().describe_topics([topic])[topic]["partitions"][0]
    follower = next(r for r in described["replicas"] if r != described["leader"])
    actors = described["actors"]
    targets = [(actor_pid(actors[described["leader"]], NAMESPACE), f"{client} publish: leader"),
               (actor_pid(actors[follower], NAMESPACE), f"{client} publish: follower")]
    if client == "rafka":
        targets.append((os.getpid(), "rafka publish: the producing driver"))
    samplers = [Sampler(pid, label) for pid, label in targets]
    with contextlib.ExitStack() as stack:
        for sampler in samplers:
            stack.enter_context(sampler)
        yield samplers


def wait_for_wire(cluster, topic: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        partitions = cluster.admin().describe_topics([topic])[topic]["partitions"]
        if all(p["leader_endpoint"] for p in partitions):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{topic}: leaders not serving the protocol after {timeout_s} s")


if __name__ == "__main__":
    main()
