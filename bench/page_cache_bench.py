"""What a written byte costs as the page cache grows, with and without
log_drop_behind_bytes (README, "Page cache").

    bash scripts/run.sh python bench/page_cache_bench.py [--gib 4] [--runs 5]

Prints two tables:
  core: one PartitionLog (no Ray) appending 1 MiB batches, seconds per GiB
    appended and the kernel's share (system CPU), the first GiB and each after
    it, for drop-behind 0 (Kafka's way) and `--window-mib`;
  cluster: `--runs` consecutive `--seconds` publishes of 1 KiB records, acks=all,
    to one RF3 partition of a 3-broker local_cluster (rafka's Producer), records/s
    and the replicas' system CPU seconds per GB appended, for each setting (the
    drop-behind one first: it starts on whatever warm memory the machine has).
Why: on a VM whose free memory goes back to the host (virtio-balloon free page
reporting, DAMON reclaiming cold pages), a page the page cache grows into is
faulted in by the host on first touch: a log that keeps growing pays that for
each new page it writes, and the cost shows as kernel time in the writers.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def core_rows(gib: int, window_bytes: int) -> list[tuple[str, list[tuple[float, float]]]]:
    from rafka.core.clock import SystemClock
    from rafka.core.config import TopicConfig
    from rafka.core.log import PartitionLog
    from rafka.core.records import RecordInput, encode_batch

    payload = encode_batch([RecordInput(os.urandom(1000), None, 0) for _ in range(1000)])   # ~1 MiB
    rows = []
    for label, drop in (("drop-behind 0", 0), (f"drop-behind {window_bytes >> 20} MiB", window_bytes)):
        with tempfile.TemporaryDirectory() as directory:
            log = PartitionLog(directory, TopicConfig.from_dict({"segment.bytes": 1 << 30}), SystemClock(),
                               drop_behind_bytes=drop)
            per_gib = []
            for _ in range(gib):
                started, cpu = time.perf_counter(), os.times()
                written = 0
                while written < 1 << 30:
                    written += log.append_as_leader(payload, leader_epoch=0).size_bytes
                after = os.times()
                per_gib.append((time.perf_counter() - started, after.system - cpu.system))
            log.close()
        rows.append((label, per_gib))
    return rows


def cluster_rows(runs: int, seconds: float, window_bytes: int):
    import psutil

    import rafka
    from replication_bench import publish, quiesce
    from scale_bench import leader_and_follower_pids
    from wire_bench import wait_for_wire

    rows = []
    for label, drop in ((f"drop-behind {window_bytes >> 20} MiB", window_bytes), ("drop-behind 0", 0)):
        with rafka.local_cluster(nodes=3, log_to_driver=False, log_drop_behind_bytes=drop) as cluster:
            cluster.admin().create_topic("sustained", partitions=1, replication_factor=3,
                                         config={"min.insync.replicas": "2"})
            wait_for_wire(cluster, "sustained")
            leaders, followers = leader_and_follower_pids(cluster, "sustained")
            replicas = [psutil.Process(pid) for pid in leaders + followers]
            measured = []
            for _ in range(runs):
                quiesce()
                before = sum(p.cpu_times().system for p in replicas)
                acked, elapsed = publish(cluster, "sustained", 1024, seconds)
                system_s = sum(p.cpu_times().system for p in replicas) - before
                measured.append((acked / elapsed, system_s / (acked * 1024 * 3 / 1e9)))
        rows.append((label, measured))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=int, default=4, help="GiB each core log appends")
    parser.add_argument("--runs", type=int, default=5, help="consecutive publishes per cluster")
    parser.add_argument("--seconds", type=float, default=7.0)
    parser.add_argument("--window-mib", type=int, default=16, help="the drop-behind setting measured")
    parser.add_argument("--core-only", action="store_true")
    args = parser.parse_args()
    window_bytes = args.window_mib << 20

    print(f"core: one PartitionLog appending 1 MiB batches, s per GiB (system CPU s), {args.gib} GiB")
    for label, per_gib in core_rows(args.gib, window_bytes):
        cells = "  ".join(f"{wall:5.2f} ({system:4.2f})" for wall, system in per_gib)
        print(f"  {label:>20}  {cells}")
    if args.core_only:
        return
    print(f"\ncluster: {args.runs} consecutive {args.seconds:.0f} s publishes, 1 KiB, acks=all, 1 partition RF3; "
          "rec/s (replicas' system CPU s per GB appended over 3 replicas)")
    for label, measured in cluster_rows(args.runs, args.seconds, window_bytes):
        cells = "  ".join(f"{rate:8,.0f} ({system:4.2f})" for rate, system in measured)
        print(f"  {label:>20}  {cells}")


if __name__ == "__main__":
    main()
