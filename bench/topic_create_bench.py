"""How long a topic takes to come online, and whether the bootstrap node keeps
answering meanwhile (issue 26).

    bash scripts/run.sh python bench/topic_create_bench.py [--partitions 4 10 30]

A 3-broker local cluster; for each size, confluent-kafka's AdminClient creates an
RF3 topic (CreateTopics, operation timeout 60 s) while a second thread sends
Metadata to the bootstrap address every 20 ms over rafka's Connection. Prints one
table: the time until CreateTopics answered, until every partition has a leader
that Metadata names and whose endpoint accepts a connection (what a client needs
to produce), and the Metadata latencies seen while that happened (p50, p99, max).
Then the topics are deleted, timed the same way.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # a checkout's rafka first


def _connectable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def online(answer, topic: str, partitions: int) -> bool:
    """Every partition of `topic` has a leader Metadata names, at an endpoint that
    accepts a connection."""
    if answer is None:
        return False
    nodes = {int(b.node_id): (b.host, int(b.port)) for b in answer.brokers}
    found = [t for t in answer.topics if t.name == topic and int(t.error_code) == 0]
    if not found or len(found[0].partitions) != partitions:
        return False
    leaders = [int(p.leader_id) for p in found[0].partitions]
    return all(n in nodes and _connectable(*nodes[n]) for n in leaders)


def gone(answer, topic: str) -> bool:
    return answer is not None and not any(t.name == topic and int(t.error_code) == 0 for t in answer.topics)


def _wait(probe, done, timeout_s: float) -> float | None:
    started_s = time.monotonic()
    while time.monotonic() - started_s < timeout_s:
        if done(probe.latest):
            return time.monotonic()
        time.sleep(0.02)
    return None


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[4, 10, 30])
    parser.add_argument("--timeout-s", type=float, default=120)
    args = parser.parse_args()

    import rafka
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.harness import MetadataProbe

    rows = []
    with rafka.local_cluster(nodes=3, log_to_driver=False) as cluster:
        bootstrap = cluster.bootstrap_servers
        host, port = bootstrap.split(",")[0].rsplit(":", 1)   # one broker of the list (edge: any bootstraps)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        with MetadataProbe(host, int(port)) as probe:
            for count in args.partitions:
                topic = f"create-bench-{count}"
                started_s = time.monotonic()
                future = admin.create_topics([NewTopic(topic, count, 3)], operation_timeout=60,
                                             request_timeout=90)[topic]
                error = None
                try:
                    future.result()
                except Exception as e:   # REQUEST_TIMED_OUT: the creation goes on
                    error = str(e)
                answered_s = time.monotonic()
                online_s = _wait(probe, lambda a: online(a, topic, count), args.timeout_s)
                end_s = online_s or time.monotonic()
                latencies = probe.latencies_ms(started_s, end_s)
                rows.append(("create", count, answered_s - started_s, (online_s - started_s) if online_s else None,
                             latencies, error))
            for count in args.partitions:
                topic = f"create-bench-{count}"
                started_s = time.monotonic()
                admin.delete_topics([topic], operation_timeout=60, request_timeout=90)[topic].result()
                answered_s = time.monotonic()
                gone_s = _wait(probe, lambda a: gone(a, topic), args.timeout_s)
                end_s = gone_s or time.monotonic()
                rows.append(("delete", count, answered_s - started_s, (gone_s - started_s) if gone_s else None,
                             probe.latencies_ms(started_s, end_s), None))
        del admin   # its connections close before the nodes do

    print()
    print(f"{'op':<7}{'partitions':>11}{'RF':>4}{'answered s':>12}{'online s':>10}"
          f"{'metadata n':>12}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}  error")
    for op, count, answered, online_s, latencies, error in rows:
        shown = f"{online_s:10.2f}" if online_s is not None else f"{'>' + str(int(args.timeout_s)):>10}"
        print(f"{op:<7}{count:>11}{3:>4}{answered:12.2f}{shown}{len(latencies):>12}"
              f"{statistics.median(latencies) if latencies else float('nan'):9.1f}"
              f"{_quantile(latencies, 0.99):9.1f}{max(latencies, default=float('nan')):9.1f}  {error or ''}")
    print("online: every partition's leader named by Metadata and accepting connections "
          "(delete: the topic gone from Metadata)")


if __name__ == "__main__":
    main()
