"""How long a whole-cluster restart takes (DESIGN invariant 13), on one data dir.

    bash scripts/run.sh python bench/restart_bench.py [--partitions 10] [--records 20000]

A 3-broker local cluster gets a topic of `--partitions` partitions (R3, min ISR 2),
`--records` acks=all records of 100 B and a group's committed offsets; then every
node stops (replicas shut down cleanly) and a new cluster opens the same data dir.
Prints one table: the time until the Ray nodes, the controller and the
coordinators are up, then until every partition (the topic's and
`__consumer_offsets`) has a leader answering at the controller's epoch and every
coordinator has loaded; and that nothing was lost (each partition's LEO as its
replicas reopened it, each committed offset). Run twice over: once after a clean
shutdown, once after a crash (the nodes killed, no shutdown: every replica scans
its active segment at open).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # tests.harness, from a checkout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args()

    import rafka
    from rafka.core.structs import TopicPartition
    from tests.harness import describe_replica, wait_until_serving

    data_dir = tempfile.mkdtemp(prefix="rafka-restart-bench-")
    rows = []
    try:
        with rafka.local_cluster(nodes=3, data_dir=data_dir) as cluster:
            cluster.admin().create_topic("bench-restart", partitions=args.partitions, replication_factor=3,
                                         config={"min.insync.replicas": "2"})
            with cluster.producer(acks="all", linger_ms=5) as producer:
                for i in range(args.records):
                    producer.send("bench-restart", value=b"x" * 100, partition=i % args.partitions)
                producer.flush()
            offsets = {("bench-restart", p): p + 1 for p in range(args.partitions)}
            cluster.admin().alter_consumer_group_offsets("bench", offsets)
            leos = {p: describe_replica("bench-restart", p, 0)["log_end_offset"] for p in range(args.partitions)}
        for how in ("clean shutdown", "crash"):
            started_s = time.monotonic()
            cluster = rafka.local_cluster(nodes=3, data_dir=data_dir)
            up_s = time.monotonic() - started_s
            serving_s = wait_until_serving(cluster, timeout_s=300)
            total_s = time.monotonic() - started_s
            reopened = all(describe_replica("bench-restart", p, r)["opened_log_end_offset"] == leos[p]
                           for p in range(args.partitions) for r in range(3))
            kept = cluster.admin().list_consumer_group_offsets("bench") == {
                TopicPartition(*tp): o for tp, o in offsets.items()}
            rows.append((how, up_s, serving_s, total_s, reopened and kept))
            # the second restart follows a crash: no replica closes its log
            cluster.shutdown(clean=how == "crash")
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)

    print(f"\nwhole-cluster restart: 3 brokers, {args.partitions} partitions R3 + __consumer_offsets, "
          f"{args.records} records")
    print(f"{'after':<16}{'cluster up s':>14}{'then serving s':>16}{'total s':>10}  nothing lost")
    for how, up_s, serving_s, total_s, ok in rows:
        print(f"{how:<16}{up_s:>14.1f}{serving_s:>16.1f}{total_s:>10.1f}  {'yes' if ok else 'NO'}")


if __name__ == "__main__":
    main()
