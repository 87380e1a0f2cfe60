"""rafka.spark_bridge: Spark on the same Ray cluster as the log, through RayDP
(DESIGN.md section 7).

    spark = init_spark(cluster, "app", num_executors=2, executor_cores=1, executor_memory="1g")
    df = read_topic(spark, "orders")                  # exactly the records below one HW snapshot
    read = read_dataset("orders")                     # the same as a Ray Dataset, without Spark
    stream_topic(spark, "orders", "revenue", ParquetSink("/data/out"), trigger_interval_s=1.0)
    stream_topic(spark, "orders", "billing", TopicSink("invoices", transform=to_invoices))   # exactly once
    write_topic(df.selectExpr("key", "value"), "orders-copy")
    release(df)                       # no more actions on df: its blocks leave the object store
    stop_spark()

Importing this package does not import Spark or RayDP; each function does.
"""

from rafka.spark_bridge.session import executor_nodes, init_spark, session_nodes, stop_spark
from rafka.spark_bridge.sink import TopicSink, write_topic
from rafka.spark_bridge.source import KAFKA_ARROW_SCHEMA, TopicRead, read_dataset, read_topic, release
from rafka.spark_bridge.stream import ParquetSink, stream_topic

__all__ = ["KAFKA_ARROW_SCHEMA", "ParquetSink", "TopicRead", "executor_nodes", "init_spark", "read_dataset",
           "read_topic", "release", "session_nodes", "stop_spark", "stream_topic", "TopicSink", "write_topic"]
