"""What a process costs under load (issue 27's last line: at RF3, the 30-partition
aggregate at least the 1-partition rate).

    bash scripts/run.sh python bench/process_floor_bench.py [--seconds 5]

Prints two tables, each on one 3-broker local_cluster, logs with
log_drop_behind_bytes 16 MiB (bench/page_cache_bench.py: without it the page cache's
growth moves every rate run to run), 1 KiB records, acks=all, rafka's Producer:
  floor: the 1-partition RF3 rate with 0 idle bare Ray actors beside it, then with
    `--bare` (default 87: the replica actors a 30-partition RF3 topic adds), in
    turn, twice each, two publishes each time: what processes that do nothing
    take from the data path; beside it what the bare actors burned during the
    second publish (% of a core, all of them) and how often they woke (context
    switches a second, all of them: Ray's 10 ms tick is 100 a second each);
  spread: one cluster holding a 1-partition and a 30-partition RF3 topic, the
    same load sent to one and to the other in turn (3 times): the data path's own
    scaling, with the processes the same in both rows.
scale_bench's rate rows measure the 1-partition row before the 30-partition
topic exists, so its ratio holds both.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DROP_BEHIND_BYTES = 16 << 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--bare", type=int, default=87)
    args = parser.parse_args()

    import ray

    import rafka
    from replication_bench import publish, quiesce
    from wire_bench import wait_for_wire

    import psutil

    @ray.remote(num_cpus=0)
    class Bare:
        def pid(self) -> int:
            return os.getpid()

    def rate(cluster, topic: str, partitions: int) -> float:
        quiesce()
        acked, elapsed_s = publish(cluster, topic, 1024, args.seconds, partitions=partitions)
        return acked / elapsed_s

    def cpu_and_switches(processes) -> tuple[float, int]:
        """(CPU seconds, context switches) of `processes` so far, summed."""
        cpu_s = switches = 0
        for process in processes:
            times, counts = process.cpu_times(), process.num_ctx_switches()
            cpu_s += times.user + times.system
            switches += counts.voluntary + counts.involuntary
        return cpu_s, switches

    with rafka.local_cluster(nodes=3, log_to_driver=False, log_drop_behind_bytes=DROP_BEHIND_BYTES) as cluster:
        admin = cluster.admin()
        admin.create_topic("one", partitions=1, replication_factor=3, config={"min.insync.replicas": "2"})
        wait_for_wire(cluster, "one")
        print(f"floor: 1 partition RF3, {args.seconds:.0f} s publishes, with idle bare Ray actors beside it")
        print(f"{'bare actors':>12}  {'rec/s':>9}  {'rec/s':>9}  {'bare CPU%':>9}  {'bare wakes/s':>12}")
        for bare_count in (0, args.bare, 0, args.bare):
            handles = [Bare.remote() for _ in range(bare_count)]
            bare = [psutil.Process(pid) for pid in ray.get([h.pid.remote() for h in handles])]   # started, idle
            first = rate(cluster, "one", 1)
            cpu_before_s, switches_before = cpu_and_switches(bare)
            started_s = time.monotonic()
            second = rate(cluster, "one", 1)
            elapsed_s = time.monotonic() - started_s
            cpu_s, switches = (after - before for after, before in zip(cpu_and_switches(bare),
                                                                       (cpu_before_s, switches_before)))
            print(f"{bare_count:>12}  {first:>9,.0f}  {second:>9,.0f}  {100 * cpu_s / elapsed_s:>9.1f}  "
                  f"{switches / elapsed_s:>12,.0f}", flush=True)
            for handle in handles:
                ray.kill(handle)

        admin.create_topic("thirty", partitions=30, replication_factor=3, config={"min.insync.replicas": "2"})
        wait_for_wire(cluster, "thirty")
        print("\nspread: one cluster holding both topics, the load sent to one, then the other")
        print(f"{'round':>5}  {'1p rec/s':>9}  {'30p rec/s':>9}  {'x 1p':>5}")
        for round_number in range(3):
            one, thirty = rate(cluster, "one", 1), rate(cluster, "thirty", 30)
            print(f"{round_number:>5}  {one:>9,.0f}  {thirty:>9,.0f}  {thirty / one:>5.2f}", flush=True)


if __name__ == "__main__":
    main()
