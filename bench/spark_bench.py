"""read_topic into Spark on a 3-node local cluster.

    bash scripts/run.sh python bench/spark_bench.py [--records 1000000] [--partitions 3]

Produces `--records` records of 100 B to an R3 topic (acks=all), starts Spark
(2 executors, 1 core each), then times `read_topic(spark, topic).count()` with
Spark already started: records/s and wall time. Target (issue 6, this 2-core
machine): 1,000,000 records under 15 s.
"""

from __future__ import annotations

import argparse
import os
import time

TARGET_S = 15.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    import rafka
    from rafka.spark_bridge import init_spark, read_dataset, read_topic, release, stop_spark
    with rafka.local_cluster(nodes=3) as cluster:
        cluster.admin().create_topic("bench-spark", partitions=args.partitions, replication_factor=3,
                                     config={"min.insync.replicas": "2"})
        value = os.urandom(100)
        started = time.perf_counter()
        with cluster.producer(acks="all", batch_size=512 * 1024, linger_ms=5) as producer:
            for i in range(args.records):
                producer.send("bench-spark", value, partition=i % args.partitions)
            producer.flush()
        produce_s = time.perf_counter() - started
        spark = init_spark(cluster, "bench", num_executors=2, executor_cores=1, executor_memory="1g")
        try:
            rows = []
            for run in range(args.runs):
                started = time.perf_counter()
                df = read_topic(spark, "bench-spark")
                count = df.count()
                release(df)
                rows.append(("read_topic -> df.count()", count, time.perf_counter() - started))
            started = time.perf_counter()   # materialize: the read tasks run (count() alone reads metadata)
            count = read_dataset("bench-spark").dataset.materialize().count()
            rows.append(("read_dataset -> materialize (no Spark)", count, time.perf_counter() - started))
        finally:
            stop_spark()

    print(f"\nrafka spark bench: 3 broker nodes, R3, {args.partitions} partitions, 100 B records, "
          f"2 executors x 1 core, {os.cpu_count()} cores (produced in {produce_s:.1f} s)")
    print(f"{'what':<40}{'records':>11}{'seconds':>9}{'records/s':>12}  target <= {TARGET_S:g} s")
    for what, count, elapsed in rows:
        met = ("met" if elapsed <= TARGET_S else "MISSED") if what.startswith("read_topic") else "-"
        print(f"{what:<40}{count:>11,}{elapsed:>9.2f}{count / elapsed:>12,.0f}  {met}")


if __name__ == "__main__":
    main()
