"""rafka beside NATS JetStream, in one run on this machine: issue 15's comparison.

    bash scripts/run.sh python bench/peer_bench.py [--quick] [--seconds 6]

First the peer: ../shared/peers/setup_nats.sh starts three nats-servers on
loopback, ../shared/peers/nats_jetstream_bench.py measures JetStream R3 (acked
publish, sync publish latency) with nats-py, and the servers are stopped. Then
rafka on a 3-node local cluster, one partition R3 with min ISR 2, acks=all,
each client with its default settings: rafka's own Producer (batch 16 KiB,
linger 5 ms) in this driver, and librdkafka (confluent-kafka) in a Python
process of its own, as its applications run. Nothing of the two runs at once:
each phase has a topic of its own, created before it and deleted after, on a
quiesced machine (replication_bench.quiesce).

Prints one table: records/s at 1 KiB and 100 B, the ratio to JetStream at
1 KiB (target: >= 2x with both clients), and sync publish p50 / p99; then the
Apache Kafka 3.8 figures measured on this machine class with Kafka's own tools
(../shared/peers/README.md), for scale. The peer is set up with
`bash ../shared/peers/setup_nats.sh install` (Debian's nats-server, nats-py in
/tmp/peervenv): this script says so and stops if it is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from replication_bench import percentile, quiesce   # bench/ is the script's directory
from wire_bench import in_own_process, librdkafka_publish, librdkafka_sync, rafka_publish, rafka_sync

PEERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "peers")
PEER_PYTHON = os.environ.get("PEERVENV", "/tmp/peervenv") + "/bin/python"
RATIO_TARGET = 2.0
KAFKA_38 = {"1 KiB": 17_330, "100 B": 145_447, "sync p50": 0.66, "sync p99": 3.75, "commitSync p50": 0.83}


def jetstream(quick: bool) -> dict:
    """JetStream's R3 figures: the fastest publish pattern's records/s per size, and
    the sync publish latency at 100 B (what rafka's sync row measures)."""
    setup = os.path.join(PEERS, "setup_nats.sh")
    if not os.path.exists(PEER_PYTHON):
        sys.exit(f"the peer is not installed: bash {setup} install")
    subprocess.run(["bash", setup, "clean"], check=False, capture_output=True)
    subprocess.run(["bash", setup, "start"], check=True, capture_output=True)
    results = os.path.join(tempfile.mkdtemp(prefix="rafka-peer-"), "nats.json")
    try:
        subprocess.run([PEER_PYTHON, os.path.join(PEERS, "nats_jetstream_bench.py"), "--json", results,
                        *(["--quick"] if quick else [])], check=True, capture_output=True)
    finally:
        subprocess.run(["bash", setup, "stop"], check=False, capture_output=True)
    with open(results) as f:
        found = json.load(f)
    publish = {size: max(r["msgs_s"] for r in found["pub"] if r["replicas"] == 3 and r["size"] == size)
               for size in (1024, 100)}
    (sync,) = [r for r in found["lat"] if r["replicas"] == 3 and r["size"] == 100]
    return {"version": found["env"]["nats_server"], "1 KiB": publish[1024], "100 B": publish[100],
            "sync p50": sync["p50_ms"], "sync p99": sync["p99_ms"]}


def rafka_figures(seconds: float, samples: int) -> dict[str, dict]:
    import rafka
    figures = {}
    with rafka.local_cluster(nodes=3) as cluster:
        admin = cluster.admin()
        bootstrap = cluster.bootstrap_servers

        def phase(name: str, measure):
            """`measure(topic)` on a topic of its own, created before it and deleted
            after, on a quiesced machine, as separate runs of a tool would be: each
            replica is a process, and a finished phase's idle replicas (long polls,
            the controller's pings) would take a share of the two cores."""
            topic = f"peer-{name}"
            admin.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
            quiesce()
            try:
                return measure(topic)
            finally:
                admin.delete_topic(topic)
        # librdkafka runs in a process of its own, as its applications do
        own, rdk = {}, {}
        for label, size in (("1 KiB", 1024), ("100 B", 100)):
            own[label] = phase(f"own-{size}", lambda topic: rafka_publish(cluster, topic, size, seconds))
            rdk[label] = phase(f"rdk-{size}", lambda topic: in_own_process(librdkafka_publish, bootstrap, topic,
                                                                           size, seconds))
        own_sync = phase("sync-own", lambda topic: rafka_sync(cluster, topic, samples))
        rdk_sync = phase("sync-rdk", lambda topic: in_own_process(librdkafka_sync, bootstrap, topic, samples))
    for label, publish, sync in (("rafka, its own Producer", own, own_sync),
                                 ("rafka, confluent-kafka (librdkafka)", rdk, rdk_sync)):
        figures[label] = {size: sent / elapsed for size, (sent, elapsed) in publish.items()}
        figures[label] |= {"sync p50": percentile(sync, 0.5), "sync p99": percentile(sync, 0.99)}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the peer's quick run (~20 s)")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--latency-samples", type=int, default=1_000)
    args = parser.parse_args()
    peer = jetstream(args.quick)
    rows = {f"NATS JetStream {peer['version']} (nats-py)": peer, **rafka_figures(args.seconds, args.latency_samples)}
    print(f"\nR3, acked publish from one client, one partition/stream, {os.cpu_count()} cores, one run")
    print(f"{'who':<40}{'1 KiB/s':>10}{'x JetStream':>13}{'100 B/s':>10}{'sync p50':>10}{'sync p99':>10}")
    for who, row in rows.items():
        ratio = row["1 KiB"] / peer["1 KiB"]
        verdict = "" if row is peer else ("  met" if ratio >= RATIO_TARGET else "  MISSED")
        print(f"{who:<40}{row['1 KiB']:>10,.0f}{ratio:>12.2f}x{row['100 B']:>10,.0f}"
              f"{row['sync p50']:>8.2f}ms{row['sync p99']:>8.2f}ms{verdict}")
    print(f"target: rafka's 1 KiB >= {RATIO_TARGET:g}x JetStream's, with both clients")
    print(f"for scale, Apache Kafka 3.8 on this machine class (its own tools, producer defaults): "
          f"1 KiB {KAFKA_38['1 KiB']:,}/s, 100 B {KAFKA_38['100 B']:,}/s, sync p50 {KAFKA_38['sync p50']} ms "
          f"p99 {KAFKA_38['sync p99']} ms, commitSync p50 {KAFKA_38['commitSync p50']} ms")


if __name__ == "__main__":
    main()
