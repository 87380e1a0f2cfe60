"""Spark to log: `write_topic(df, topic)` produces a DataFrame's key / value
columns from Spark's executors, at least once; `TopicSink` is a stream_topic
sink that writes each micro-batch's output and commits the stream's input
offsets in Kafka transactions, exactly once.

Each executor's Python worker joins the Ray cluster as a driver of its own (as
RayDP's `to_spark` does in the other direction) and sends its partition's rows
with a rafka Producer, acks=all by default, waiting for every acknowledgement
before its task ends. `ray.data.from_spark` is not used: it crashes RayDP's Java
worker on this stack (Ray 2.60, RayDP 1.6.5).

TopicSink, Kafka Streams' exactly-once per task (KIP-98, KIP-447) in Spark: a
batch's DataFrame has one Spark partition per input range (one per input
partition), and the sink's transform must keep that (a narrow transform:
select, filter, withColumn; no shuffle). The task of input partition p runs one
transaction with the transactional id `<prefix>:<input topic>:<p>`: init
(fencing any earlier attempt of that partition's task, whose open transaction
the coordinator aborts), check that the group's stable committed offset is
still where the batch planned from, send the rows, send_offsets_to_transaction
(the range's end, for the stream's group), commit. Spark retries a failed task;
the retry fences the attempt before it, so a partition's output and offset move
together or not at all.

Invariants: write_topic returns only once every row is acknowledged (with
acks=all: replicated to the ISR, at or above min.insync.replicas); a write_topic
task that fails and is retried sends its rows again: at least once, as Spark's
own Kafka sink. TopicSink: an input record's output is visible to read_committed
readers exactly once, in the transaction that moved the group's offset past it;
a task finding the group's offset already at its range's end (an earlier attempt
committed, then its task was lost) writes nothing; one finding it anywhere else
fails with COMMIT_FAILED (the batch is stale: the stream must plan again).
Callers: users; spark_bridge.stream (TopicSink.write).
"""

from __future__ import annotations

import ray

from rafka.core.actor_names import NAMESPACE
from rafka.core.errors import CommitFailed
from rafka.core.offset_ranges import OffsetRange
from rafka.core.structs import TopicPartition


def _selected_columns(df) -> list[str]:
    """The value (and key, partition) columns a sink produces, cast to Kafka's types."""
    columns = set(df.columns)
    if "value" not in columns:
        raise ValueError(f"a topic sink needs a 'value' column; the DataFrame has {sorted(columns)}")
    selected = ["CAST(value AS BINARY) AS value"]
    selected += ["CAST(key AS BINARY) AS key"] if "key" in columns else []
    selected += ["CAST(partition AS INT) AS partition"] if "partition" in columns else []
    return selected


def _join_cluster(address: str) -> None:
    """In a Spark task's Python worker: connect to the rafka cluster's Ray once."""
    if not ray.is_initialized():
        ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False)


def _send_rows(producer, topic: str, batches) -> list:
    """Sends every row of the Arrow record batches; their futures."""
    futures = []
    for batch in batches:
        rows = batch.to_pydict()
        keys = rows.get("key") or [None] * batch.num_rows
        partitions = rows.get("partition") or [None] * batch.num_rows
        for key, value, partition in zip(keys, rows["value"], partitions):
            futures.append(producer.send(topic, value=value, key=key, partition=partition))
    return futures


def write_topic(df, topic: str, *, acks: str = "all", linger_ms: int = 5, batch_size: int = 256 * 1024) -> int:
    """Produces every row's `value` (and `key`, and `partition` when present; binary
    or string) to `topic`. Returns the number of records acknowledged."""
    import pyarrow as pa

    selected = _selected_columns(df)
    address = ray.get_runtime_context().gcs_address
    options = dict(acks=acks, linger_ms=linger_ms, batch_size=batch_size)

    def produce(batches):
        _join_cluster(address)
        from rafka.client.producer import Producer
        from rafka.spark_bridge.cluster_access import bootstrap_servers, client_options
        with Producer(bootstrap_servers(), **client_options(), **options) as producer:
            futures = _send_rows(producer, topic, batches)
            producer.flush()
        for future in futures:
            future.result()
        yield pa.RecordBatch.from_pydict({"written": [len(futures)]})

    written = df.selectExpr(*selected).mapInArrow(produce, "written long").collect()
    return sum(row["written"] for row in written)


class TopicSink:
    """A stream_topic sink into `topic`, exactly once (see the module's note).

    `transform(df) -> df`: the batch's output, a narrow transform of the batch
    (default: its key and value); it needs a `value` column (`key`, `partition`
    optional). `transactional_id_prefix`: default "rafka-stream:<group id>", so
    one query (a group and its input topic) keeps its ids across restarts; two
    queries must not share one. `before_commit(offset_range, attempt)` runs in
    the task after its records are sent and its offsets added, before the
    commit (tests inject a task failure there)."""

    commits_offsets = True   # stream_topic leaves the input offsets to the sink

    def __init__(self, topic: str, *, transform=None, transactional_id_prefix: str | None = None,
                 producer_options: dict | None = None, before_commit=None) -> None:
        self.topic = topic
        self.transform = transform
        self.transactional_id_prefix = transactional_id_prefix
        self.producer_options = dict(linger_ms=5, transaction_timeout_ms=60_000, **(producer_options or {}))
        self.before_commit = before_commit

    def transactional_id(self, group_id: str, offset_range: OffsetRange) -> str:
        prefix = self.transactional_id_prefix or f"rafka-stream:{group_id}"
        return f"{prefix}:{offset_range.topic}:{offset_range.partition}"

    def write(self, df, ranges: list[OffsetRange], *, group_id: str, committed: dict[int, int | None]) -> int:
        """Runs the batch: one task, one transaction per range (`ranges[i]` is Spark
        partition i of `df`); `committed`: the group's offset of each range's
        partition when the batch was planned (None: none yet). Returns the number
        of records written."""
        import pyarrow as pa

        output = self.transform(df) if self.transform is not None else df.selectExpr("key", "value")
        partitions = output._jdf.rdd().getNumPartitions()
        if partitions != len(ranges):
            raise ValueError(f"the sink's transform must keep one Spark partition per input range (a narrow "
                             f"transform): {partitions} partitions for {len(ranges)} ranges")
        selected = _selected_columns(output)
        address = ray.get_runtime_context().gcs_address
        topic, options, before_commit = self.topic, self.producer_options, self.before_commit
        planned = [(r, self.transactional_id(group_id, r), committed.get(r.partition)) for r in ranges]

        def produce(batches):
            from pyspark import TaskContext
            context = TaskContext.get()
            offset_range, transactional_id, planned_from = planned[context.partitionId()]
            _join_cluster(address)

            def hook() -> None:
                if before_commit is not None:
                    before_commit(offset_range, context.attemptNumber())
            written = _write_in_transaction(batches, topic, offset_range, transactional_id, planned_from, group_id,
                                            options, hook)
            yield pa.RecordBatch.from_pydict({"written": [written]})

        written = output.selectExpr(*selected).mapInArrow(produce, "written long").collect()
        return sum(row["written"] for row in written)


def _write_in_transaction(batches, topic: str, offset_range: OffsetRange, transactional_id: str,
                          planned_from: int | None, group_id: str, options: dict, before_commit) -> int:
    """One range's output and its end offset in one transaction (in a Spark task)."""
    from rafka.client.producer import Producer
    from rafka.spark_bridge.cluster_access import admin, bootstrap_servers, client_options
    input_tp = TopicPartition(offset_range.topic, offset_range.partition)
    producer = Producer(bootstrap_servers(), **client_options(), transactional_id=transactional_id, **options)
    begun = False
    try:
        producer.init_transactions()   # fences every earlier attempt; its open transaction is aborted
        stable = admin().list_consumer_group_offsets(group_id, [input_tp], require_stable=True).get(input_tp)
        if stable == offset_range.end:
            return 0   # an earlier attempt committed this range, then its task was lost
        if stable != planned_from:
            raise CommitFailed(f"{input_tp}: the group {group_id!r} is at offset {stable}, the batch was planned "
                               f"from {planned_from} (to {offset_range.end}): it is stale")
        producer.begin_transaction()
        begun = True
        futures = _send_rows(producer, topic, batches)
        producer.send_offsets_to_transaction({input_tp: offset_range.end}, group_id)
        producer.flush()
        before_commit()
        producer.commit_transaction()
        begun = False
        for future in futures:
            future.result()
        return len(futures)
    except BaseException:
        if begun:   # not left open for the retry to fence: the output partitions' LSO moves on now
            try:
                producer.abort_transaction(timeout=10)
            except Exception:   # the retry's init_transactions aborts it, or its timeout does
                pass
        raise
    finally:
        producer.close()
