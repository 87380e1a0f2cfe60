"""Replicated publish, consume and sync-latency on a 3-node local cluster.

    bash scripts/run.sh python bench/replication_bench.py [--seconds 8]

Prints one table:
  publish acks=all to R3 and to R1, 100 B and 1 KiB records: records/s from one
    producer (send() in a loop, futures checked at the end), for `--seconds`
  one consumer reading the R3 1 KiB topic from the beginning, right after it was
    written: records/s
  sync publish latency: send(...).result() one record at a time, acks=all, R3:
    p50 / p99 / p99.9 in ms, first on the fresh cluster (the target's row), and
    again last, after the throughput phases
Phases run in that order, each after `quiesce`: the dirty pages of the phase
before written out (os.sync), so its writeback does not take the cores in this
one, and this driver's C heap trimmed (malloc_trim), as a fresh client process
would start: after the 100 B publish (1.5 million futures and records made and
freed here), the consumer read 278-288k records/s, and 342-375k once the heap
was trimmed (same cluster, same log; probes in session 10's note).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import time

TARGETS = {
    ("publish", "R3", 1024): 60_000,
    ("publish", "R3", 100): 200_000,
    ("consume", "R3", 1024): 300_000,
}
SYNC_P50_TARGET_MS, SYNC_P99_TARGET_MS = 1.0, 5.0


def publish(cluster, topic: str, record_bytes: int, seconds: float, *, partitions: int = 1,
            **producer_options) -> tuple[int, float]:
    """Sends for `seconds`, round-robin over partitions 0..partitions-1, then flushes;
    every record must be acked. The futures are not kept (a producer application
    keeps none either, as Kafka's producer-perf-test keeps none): holding 1.5
    million of them, the driver's garbage collector walked them again and again
    (the 100 B phase read 157k/s with them, 213k/s without, one run each). That
    every send was acked is checked with the producer's counters instead."""
    value = os.urandom(record_bytes)
    round_robin = [i % partitions for i in range(max(1, 1_000 // partitions) * partitions)]   # whole rounds
    with cluster.producer(acks="all", **producer_options) as producer:
        started = time.perf_counter()
        deadline = started + seconds
        count = 0
        while time.perf_counter() < deadline:
            for partition in round_robin:
                producer.send(topic, value, partition=partition)
            count += len(round_robin)
        producer.flush()
        elapsed = time.perf_counter() - started
        metrics = producer.metrics()
    assert metrics["record-send-total"] == count and metrics["record-error-total"] == 0, metrics
    return count, elapsed


def consume(cluster, topic: str, expected: int) -> tuple[int, float]:
    from rafka.core.structs import TopicPartition
    tp = TopicPartition(topic, 0)
    with cluster.consumer(auto_offset_reset="earliest", max_poll_records=10_000) as consumer:
        consumer.assign([tp])
        count = 0
        started = time.perf_counter()
        while count < expected:
            count += len(consumer.poll(timeout=1.0))
        return count, time.perf_counter() - started


def sync_latencies_ms(cluster, topic: str, count: int) -> list[float]:
    latencies = []
    with cluster.producer(acks="all", linger_ms=0) as producer:
        for _ in range(200):  # warm up
            producer.send(topic, b"x" * 100, partition=0).result()
        for _ in range(count):
            started = time.perf_counter()
            producer.send(topic, b"x" * 100, partition=0).result()
            latencies.append((time.perf_counter() - started) * 1000)
    return sorted(latencies)


def quiesce() -> None:
    """Before each measured phase: the page cache's dirty pages written out now, so
    that the kernel's writeback of the phase before (a GB or more of log) does
    not take the cores during this one, and the freed C heap of this driver given
    back (glibc's malloc_trim), so that the phase before's allocations do not
    slow this one's. Each phase is measured as separate runs of a tool would be."""
    os.sync()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):   # not glibc: nothing to trim
        pass


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--latency-samples", type=int, default=3_000)
    parser.add_argument("--batch-size", type=int, default=16_384,
                        help="producer batch_size in bytes (Kafka's default, 16384, unless given)")
    parser.add_argument("--linger-ms", type=int, default=5)
    args = parser.parse_args()

    import rafka
    rows = []
    with rafka.local_cluster(nodes=3) as cluster:
        admin = cluster.admin()
        admin.create_topic("bench-latency", partitions=1, replication_factor=3,
                           config={"min.insync.replicas": "2"})
        quiesce()
        latencies = sync_latencies_ms(cluster, "bench-latency", args.latency_samples)   # the target's row
        for rf in (3, 1):
            for size in (100, 1024):
                topic = f"bench-r{rf}-{size}"
                admin.create_topic(topic, partitions=1, replication_factor=rf,
                                   config={"min.insync.replicas": str(min(rf, 2))})
                quiesce()
                count, elapsed = publish(cluster, topic, size, args.seconds,
                                         batch_size=args.batch_size, linger_ms=args.linger_ms)
                rows.append(("publish", f"R{rf}", size, count, elapsed))
                if (rf, size) == (3, 1024):   # read back at once
                    quiesce()
                    count, elapsed = consume(cluster, topic, count)
                    rows.append(("consume", "R3", 1024, count, elapsed))
        quiesce()
        loaded_latencies = sync_latencies_ms(cluster, "bench-latency", args.latency_samples)

    print(f"\nrafka replication bench: 3 broker nodes, 1 partition, batch_size {args.batch_size} B, "
          f"linger {args.linger_ms} ms, {os.cpu_count()} cores")
    print(f"{'what':<10}{'topic':<7}{'record':>8}{'records':>11}{'seconds':>9}{'records/s':>12}"
          f"{'MB/s':>8}{'target':>10}  met")
    for what, topic, size, count, elapsed in rows:
        rate = count / elapsed
        target = TARGETS.get((what, topic, size))
        met = "" if target is None else ("yes" if rate >= target else "NO")
        print(f"{what:<10}{topic:<7}{size:>7}B{count:>11,}{elapsed:>9.2f}{rate:>12,.0f}"
              f"{rate * size / 1e6:>8.1f}{(f'{target:,}' if target else '-'):>10}  {met}")
    p50, p99, p999 = (percentile(latencies, q) for q in (0.5, 0.99, 0.999))
    print(f"\nsync publish (acks=all, R3, 100 B, one at a time, {len(latencies)} samples, first, on the "
          f"fresh cluster): p50 {p50:.2f} ms (target <= {SYNC_P50_TARGET_MS:g}: "
          f"{'yes' if p50 <= SYNC_P50_TARGET_MS else 'NO'}), "
          f"p99 {p99:.2f} ms (target <= {SYNC_P99_TARGET_MS:g}: {'yes' if p99 <= SYNC_P99_TARGET_MS else 'NO'}), "
          f"p99.9 {p999:.2f} ms, mean {statistics.mean(latencies):.2f} ms")
    p50, p99, p999 = (percentile(loaded_latencies, q) for q in (0.5, 0.99, 0.999))
    print(f"the same, last, after the throughput phases (9 replicas holding ~3 GB of log): p50 {p50:.2f} ms, "
          f"p99 {p99:.2f} ms, p99.9 {p999:.2f} ms, mean {statistics.mean(loaded_latencies):.2f} ms")


if __name__ == "__main__":
    main()
