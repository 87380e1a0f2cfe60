"""Bounded reads of a topic: a Ray Data datasource, and Spark DataFrames over it.

A read takes one snapshot of every partition's log start and HW, plans one offset
range per partition below that HW (core/offset_ranges.py), and reads each range
in a Ray Data read task from the partition's leader, in whole batches (the
leader's consumer fetch: only data below its HW), decoding them into one Arrow
table with Spark's Kafka-source schema. `read_topic` hands the blocks to Spark
with `Dataset.to_spark` (RayDP).

Invariants:
  a read returns exactly the records of its planned ranges: offsets start ..
  end - 1 of each partition, each once; nothing at or above the snapshot's HW
  the ranges (and so the snapshot) are reported with the result:
  `TopicRead.ranges`, and `DataFrame.offset_ranges` for read_topic
Read tasks ask for 0.1 CPU: on a small cluster, Spark's executors hold most CPUs.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools

import pyarrow as pa
import ray

from rafka.core.offset_ranges import LATEST, OffsetRange, PartitionOffsets, plan_ranges, resolve

KAFKA_ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])
READ_TASK_CPUS = 0.1
FETCH_MAX_BYTES = 4 << 20   # per leader fetch: under Ray's 4 MiB inline limit set by rafka's cluster


@dataclasses.dataclass(frozen=True)
class TopicRead:
    dataset: object                          # ray.data.Dataset
    ranges: list[OffsetRange]                # what the read holds, planned from `snapshot`
    snapshot: dict[int, PartitionOffsets]    # each partition's log start and HW when the read began

    @property
    def count(self) -> int:
        return sum(r.count for r in self.ranges)


def _admin():
    from rafka.actors.controller import CONTROLLER_NAME
    from rafka.actors.replica import NAMESPACE
    from rafka.client.admin import Admin
    return Admin(ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE))


def snapshot_offsets(admin, topic: str) -> dict[int, PartitionOffsets]:
    partitions = admin.topic_partitions(topic)
    starts, ends = admin.beginning_offsets(partitions), admin.end_offsets(partitions)
    return {tp.partition: PartitionOffsets(starts[tp], ends[tp]) for tp in partitions}


def committed_offsets(admin, group_id: str, topic: str) -> dict[int, int]:
    return {tp.partition: offset for tp, offset in admin.list_consumer_group_offsets(group_id).items()
            if tp.topic == topic}


def plan_read(admin, topic: str, starting_offsets="earliest", ending_offsets=LATEST, *,
              group_id: str | None = None) -> tuple[list[OffsetRange], dict[int, PartitionOffsets]]:
    """The ranges of a read and the snapshot they come from."""
    snapshot = snapshot_offsets(admin, topic)
    committed = committed_offsets(admin, group_id, topic) if group_id is not None else None

    def offsets_for_time(partition: int, timestamp_ms: int):
        from rafka.core.structs import TopicPartition
        found = admin.list_offsets([(topic, partition)], timestamp_ms)[TopicPartition(topic, partition)]
        return None if found is None else found[0]
    starts = resolve(starting_offsets, "earliest", snapshot, offsets_for_time=offsets_for_time, committed=committed)
    ends = resolve(ending_offsets, LATEST, snapshot, offsets_for_time=offsets_for_time, committed=committed)
    return plan_ranges(topic, snapshot, starts, ends), snapshot


def read_range(offset_range: OffsetRange, fetch_max_bytes: int = FETCH_MAX_BYTES) -> pa.Table:
    """One range, from the partition's leader, as an Arrow table (runs in a read task).
    Records are decoded straight into column lists (no object per record); whole
    batches are decoded, and the table is sliced to the range at the end."""
    from rafka.actors.controller import CONTROLLER_NAME
    from rafka.actors.replica import NAMESPACE
    from rafka.client.metadata import MetadataCache
    from rafka.client.retry import call_leader
    from rafka.core.records import decode_batches

    metadata = MetadataCache(ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE))
    offsets, timestamps, keys, values, header_pairs = [], [], [], [], []
    header_ends = [0]       # list offsets of the headers column
    batch_types = []        # (timestamp type, records) per batch

    def column(offset, timestamp_ms, key, value, headers) -> None:
        offsets.append(offset)
        timestamps.append(timestamp_ms)
        keys.append(key)
        values.append(value)
        if headers:
            header_pairs.extend({"key": k, "value": v} for k, v in headers)
        header_ends.append(len(header_pairs))

    position = offset_range.start
    while position < offset_range.end:
        result = call_leader(metadata, offset_range.topic, offset_range.partition, "consumer_fetch", position,
                             fetch_max_bytes, 0, timeout_s=60.0, retry_backoff_s=0.1)
        if not result.records:
            raise RuntimeError(f"{offset_range}: the leader returned nothing at offset {position}, below "
                               f"the planned end (its HW is {result.high_watermark})")
        for header, records in decode_batches(result.records, lambda _: column):
            batch_types.append((header.timestamp_type, len(records)))
            position = max(position, min(header.next_offset, offset_range.end))
    header_type = KAFKA_ARROW_SCHEMA.field("headers").type
    count = len(offsets)
    table = pa.Table.from_arrays([
        pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
        pa.array([offset_range.topic] * count, pa.string()),
        pa.array([offset_range.partition] * count, pa.int32()), pa.array(offsets, pa.int64()),
        pa.array(timestamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
        pa.array([t for t, n in batch_types for _ in range(n)], pa.int32()),
        pa.ListArray.from_arrays(pa.array(header_ends, pa.int32()),
                                 pa.array(header_pairs, header_type.value_type))], schema=KAFKA_ARROW_SCHEMA)
    # whole batches were decoded: keep offsets start .. end - 1 (offsets ascend)
    first = bisect.bisect_left(offsets, offset_range.start)
    return table.slice(first, bisect.bisect_left(offsets, offset_range.end) - first)


def _datasource(ranges: list[OffsetRange]):
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class TopicDatasource(Datasource):
        """One read task per non-empty range."""

        def estimate_inmemory_data_size(self):
            return sum(r.count for r in ranges) * 128

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            return [ReadTask(functools.partial(lambda r: [read_range(r)], r),
                             BlockMetadata(num_rows=r.count, size_bytes=r.count * 128, input_files=None,
                                           exec_stats=None),
                             schema=KAFKA_ARROW_SCHEMA)
                    for r in ranges if r.count > 0]
    return TopicDatasource()


def read_dataset(topic: str, starting_offsets="earliest", ending_offsets=LATEST, *,
                 group_id: str | None = None) -> TopicRead:
    """A Ray Dataset of the topic's records in the planned ranges (no Spark needed).
    Offsets: "earliest", "latest" (the HW snapshot), {partition: offset},
    {"timestamp": {partition: ms}}, or "committed" (with `group_id`)."""
    ranges, snapshot = plan_read(_admin(), topic, starting_offsets, ending_offsets, group_id=group_id)
    return read_ranges(ranges, snapshot)


def read_ranges(ranges: list[OffsetRange], snapshot: dict) -> TopicRead:
    dataset = ray.data.read_datasource(_datasource(ranges), override_num_blocks=max(1, len(ranges)),
                                       num_cpus=READ_TASK_CPUS)
    return TopicRead(dataset, ranges, snapshot)


def to_dataframe(spark, read: TopicRead):
    """The read as a Spark DataFrame with Spark's Kafka-source schema; its ranges on
    `df.offset_ranges`."""
    if read.count == 0:   # RayDP's to_spark needs at least one block
        from pyspark.sql.pandas.types import from_arrow_schema
        df = spark.createDataFrame([], from_arrow_schema(KAFKA_ARROW_SCHEMA))
    else:
        df = read.dataset.to_spark(spark)
    df.offset_ranges = read.ranges
    return df


def read_topic(spark, topic: str, starting_offsets="earliest", ending_offsets=LATEST, *,
               group_id: str | None = None):
    """A Spark DataFrame of exactly the records below one HW snapshot (see read_dataset)."""
    return to_dataframe(spark, read_dataset(topic, starting_offsets, ending_offsets, group_id=group_id))
