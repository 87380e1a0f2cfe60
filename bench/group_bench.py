"""Offset commits on a 3-node local cluster (`__consumer_offsets` R3, min ISR 2).

    bash scripts/run.sh python bench/group_bench.py [--seconds 8]

Prints one table:
  commit_sync latency: one subscribed consumer (a group member) commits one
    partition's offset at a time; p50 / p99 / p99.9 in ms
  commits/s: the same member commits 10 partitions per commit, back to back, for
    `--seconds` each: with commit_async (several in flight, as a Kafka consumer
    committing at a high rate does; a final commit_sync waits for them, and
    every callback must report success), and with commit_sync (one at a time,
    so its rate is 1 / its latency)
Targets (issue 15, this 2-core machine): commit_sync p50 <= 2 ms, >= 1,000
commits/s of 10 partitions from one member (the commit_async row).
A commit is acked only once replicated: OffsetCommit to the coordinator's Kafka
endpoint, an acks=all Produce to the offsets partition's leader (both followers
fetch it), then the answer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from replication_bench import percentile  # bench/ is the script's directory

P50_TARGET_MS = 2.0
COMMITS_PER_S_TARGET = 1_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--latency-samples", type=int, default=2_000)
    args = parser.parse_args()

    import rafka
    from rafka.core.structs import TopicPartition
    with rafka.local_cluster(nodes=3, coordinator_options={"group_initial_rebalance_delay_ms": 0}) as cluster:
        cluster.admin().create_topic("bench-commits", partitions=10, replication_factor=1)
        partitions = [TopicPartition("bench-commits", p) for p in range(10)]
        with cluster.consumer(group_id="bench", enable_auto_commit=False, session_timeout_ms=10_000) as member:
            member.subscribe(["bench-commits"])
            member.poll(timeout=0.1)
            assert member.assignment() == set(partitions), "the bench member owns all 10 partitions"
            for i in range(200):  # warm up
                member.commit_sync({partitions[0]: i})
            latencies = []
            for i in range(args.latency_samples):
                started = time.perf_counter()
                member.commit_sync({partitions[0]: 1_000 + i})
                latencies.append((time.perf_counter() - started) * 1000)
            latencies.sort()
            offset = 10_000
            rates = {}
            for mode in ("commit_async", "commit_sync"):
                failures, requests = [], 0
                started = time.perf_counter()
                deadline = started + args.seconds
                while time.perf_counter() < deadline:
                    if mode == "commit_async":
                        member.commit_async({tp: offset for tp in partitions},
                                            callback=lambda _, error: error and failures.append(error))
                    else:
                        member.commit_sync({tp: offset for tp in partitions})
                    requests += 1
                    offset += 1
                member.commit_sync({tp: offset - 1 for tp in partitions})   # waits for every async one
                elapsed = time.perf_counter() - started
                assert failures == [], f"{mode}: {len(failures)} commits failed: {failures[:3]}"
                assert member.committed(partitions)[partitions[9]].offset == offset - 1
                rates[mode] = requests / elapsed
        parts = _where_the_time_goes(cluster, args.latency_samples // 4)

    p50, p99, p999 = (percentile(latencies, q) for q in (0.5, 0.99, 0.999))
    print(f"\nrafka group bench: 3 broker nodes, __consumer_offsets 1 partition R3 min ISR 2, "
          f"{os.cpu_count()} cores")
    print(f"{'what':<40}{'value':>14}  target")
    print(f"{'commit_sync p50 (1 partition)':<40}{p50:>11.2f} ms  <= {P50_TARGET_MS:g} ms: "
          f"{'met' if p50 <= P50_TARGET_MS else 'MISSED'}")
    print(f"{'commit_sync p99':<40}{p99:>11.2f} ms  -")
    print(f"{'commit_sync p99.9':<40}{p999:>11.2f} ms  -")
    print(f"{'commit_sync mean':<40}{statistics.mean(latencies):>11.2f} ms  -")
    rate = rates["commit_async"]
    print(f"{'commits/s, commit_async (10 partitions)':<40}{rate:>14,.0f}  >= {COMMITS_PER_S_TARGET:,}: "
          f"{'met' if rate >= COMMITS_PER_S_TARGET else 'MISSED'}")
    print(f"{'partition offsets committed/s':<40}{10 * rate:>14,.0f}  -")
    print(f"{'commits/s, commit_sync one at a time':<40}{rates['commit_sync']:>14,.0f}  -")
    print("where a commit's time goes (p50, the same cluster):")
    for what, value in parts:
        print(f"  {what:<54}{value:>8.2f} ms")


def _where_the_time_goes(cluster, samples: int) -> list[tuple[str, float]]:
    """A commit is client -> coordinator (OffsetCommit on the wire) -> acks=all
    Produce to the offsets leader (on the wire), which waits for both followers'
    next fetch. Each part, measured alone; the produces go to a topic replicated
    like __consumer_offsets (R3, min ISR 2), not to it, so that no group's state
    is touched. A Ray call (ping) is the control plane's cost, for scale."""
    import ray

    from rafka.actors.coordinator import coordinator_actor_name
    from rafka.actors.replica import NAMESPACE
    from rafka.actors.cluster_credential import cluster_login
    from rafka.client.admin import admin_network
    from rafka.core.offsets_schema import partition_for_group
    from rafka.core.records import RecordInput, encode_batch
    from rafka.core.replica import ACKS_ALL, ACKS_LEADER
    from rafka.protocol import producing

    admin = cluster.admin()
    admin.create_topic("bench-probe", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
    leader_index = admin.describe_topics(["bench-probe"])["bench-probe"]["partitions"][0]["leader"]
    leader = cluster.replica("bench-probe", 0, leader_index)
    coordinator = ray.get_actor(coordinator_actor_name(partition_for_group("bench", 1)), namespace=NAMESPACE)
    address = tuple(ray.get(leader.ping.remote())["endpoint"])
    batch = encode_batch([RecordInput(b"x" * 40, b"commit-sized")])
    network = admin_network(cluster_login)

    def produce(acks: int) -> None:
        producing.produce_answer(network.submit(address, producing.produce_request(
            topic="bench-probe", partition=0, records=batch, acks=acks, timeout_ms=10_000)).result(),
            topic="bench-probe", partition=0)

    def p50(call) -> float:
        latencies = []
        for _ in range(samples):
            started = time.perf_counter()
            call()
            latencies.append((time.perf_counter() - started) * 1000)
        return percentile(sorted(latencies), 0.5)
    return [("one Ray call to the coordinator (ping)", p50(lambda: ray.get(coordinator.ping.remote()))),
            ("Produce to an R3 leader, acks=1 (wire)", p50(lambda: produce(ACKS_LEADER))),
            ("Produce to an R3 leader, acks=all (wire, both followers)", p50(lambda: produce(ACKS_ALL)))]


if __name__ == "__main__":
    main()
