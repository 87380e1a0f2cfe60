"""A stream run as its own process (the driver a test kills): joins the cluster at
RAY_ADDRESS, starts its own Spark, and streams `topic` for `group` into a Parquet
directory. With CRASH_AFTER_WRITE=1 the process dies (os._exit) right after the
sink wrote its first batch, before that batch is committed.

    python -m tests.spark.stream_job <topic> <group> <output dir> <max records per batch>
"""

import os
import sys


def main() -> None:
    topic, group, output, max_records = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    import ray

    import rafka
    from rafka.spark_bridge import ParquetSink, init_spark, stop_spark, stream_topic
    # A namespace of its own: RayDP names its app master actor per namespace.
    ray.init(address=os.environ["RAY_ADDRESS"], namespace=f"stream-{os.getpid()}", logging_level="ERROR")
    cluster = rafka.connect(os.environ["RAY_ADDRESS"])
    spark = init_spark(cluster, f"stream-{os.getpid()}", num_executors=1, executor_cores=1,
                       executor_memory="512m")
    sink = ParquetSink(output)

    def process_batch(df, batch_id):
        sink(df, batch_id)
        print(f"wrote batch {batch_id}", flush=True)
        if os.environ.get("CRASH_AFTER_WRITE") == "1":
            os._exit(17)   # killed between writing the output and committing the offsets
    batches = stream_topic(spark, topic, group, process_batch, trigger_interval_s=0.2,
                           max_records_per_batch=max_records, stop_when_idle=True)
    print(f"processed {batches} batches", flush=True)
    stop_spark()


if __name__ == "__main__":
    main()
