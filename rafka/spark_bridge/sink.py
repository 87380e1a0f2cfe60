"""Spark to log: `write_topic(df, topic)` produces a DataFrame's key / value
columns from Spark's executors.

Each executor's Python worker joins the Ray cluster as a driver of its own (as
RayDP's `to_spark` does in the other direction) and sends its partition's rows
with a rafka Producer, acks=all by default, waiting for every acknowledgement
before its task ends. `ray.data.from_spark` is not used: it crashes RayDP's Java
worker on this stack (Ray 2.60, RayDP 1.6.5).

Invariants: write_topic returns only once every row is acknowledged (with
acks=all: replicated to the ISR, at or above min.insync.replicas). A Spark task
that fails and is retried sends its rows again: delivery is at least once, as
Spark's own Kafka sink.
"""

from __future__ import annotations

import ray

from rafka.core.actor_names import NAMESPACE


def write_topic(df, topic: str, *, acks: str = "all", linger_ms: int = 5, batch_size: int = 256 * 1024) -> int:
    """Produces every row's `value` (and `key`, and `partition` when present; binary
    or string) to `topic`. Returns the number of records acknowledged."""
    import pyarrow as pa

    columns = set(df.columns)
    if "value" not in columns:
        raise ValueError(f"write_topic needs a 'value' column; the DataFrame has {sorted(columns)}")
    selected = ["CAST(value AS BINARY) AS value"]
    selected += ["CAST(key AS BINARY) AS key"] if "key" in columns else []
    selected += ["CAST(partition AS INT) AS partition"] if "partition" in columns else []
    address = ray.get_runtime_context().gcs_address
    options = dict(acks=acks, linger_ms=linger_ms, batch_size=batch_size)

    def produce(batches):
        if not ray.is_initialized():
            ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)
        from rafka.client.producer import Producer
        from rafka.spark_bridge.cluster_access import bootstrap_servers, client_options
        futures = []
        with Producer(bootstrap_servers, **client_options(), **options) as producer:
            for batch in batches:
                rows = batch.to_pydict()
                keys = rows.get("key") or [None] * batch.num_rows
                partitions = rows.get("partition") or [None] * batch.num_rows
                for key, value, partition in zip(keys, rows["value"], partitions):
                    futures.append(producer.send(topic, value=value, key=key, partition=partition))
            producer.flush()
        for future in futures:
            future.result()
        yield pa.RecordBatch.from_pydict({"written": [len(futures)]})

    written = df.selectExpr(*selected).mapInArrow(produce, "written long").collect()
    return sum(row["written"] for row in written)
