"""Bounded reads of a topic: a Ray Data datasource, and Spark DataFrames over it.

A read takes one snapshot of every partition's log start and HW, plans one offset
range per partition below that HW (core/offset_ranges.py), and reads each range
in a Ray Data read task from the partition's leader, in whole batches (the
leader's consumer fetch: only data below its HW), decoding them into one Arrow
table with Spark's Kafka-source schema.

`isolation_level` is Kafka's consumer's: "read_uncommitted" (the default) or
"read_committed", which snapshots each partition's last stable offset (LSO)
instead of its HW (ListOffsets latest at isolation level 1) and reads with
read_committed Fetches. At both levels the batches a Kafka consumer would not
hand out are dropped before decoding (protocol.range_reads' `handed_out`, the
consumer's rule in core.isolation): transaction markers, and read_committed
the aborted transactions' batches. So a range's offsets are not all rows: a
range counts offsets, the read returns the records among them.

`read_topic` runs the same read tasks as plain Ray tasks that return each table
as Arrow IPC bytes, and gives those objects to RayDP's Arrow reader: Spark's
executors (Java Ray actors) take the bytes from the object store and turn them
into rows in the JVM. `Dataset.to_spark` instead goes through pandas in Spark's
Python workers (Arrow -> pandas -> Arrow); on 1M records of 100 B that cost
about 8 s of a 18 s read, and the JVM path needs no Python worker at all.
Spark reads those objects whenever an action runs on the DataFrame or on one
derived from it, so the read's blocks are kept (owned by this driver) until
`release(df)` or `stop_spark()`; stream_topic releases each batch's.

Invariants:
  a read returns exactly the records of its planned ranges: offsets start ..
  end - 1 of each partition, each once; nothing at or above the snapshot's HW
  (read_committed: its LSO), no marker, and read_committed no record of an
  aborted transaction
  the ranges (and so the snapshot) are reported with the result:
  `TopicRead.ranges`, and `DataFrame.offset_ranges` for read_topic
Read tasks ask for 0.1 CPU: on a small cluster, Spark's executors hold most CPUs.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pyarrow as pa
import ray

from rafka.core.isolation import IsolationLevel, parse_isolation_level
from rafka.core.offset_ranges import LATEST, OffsetRange, PartitionOffsets, plan_ranges, resolve

KAFKA_ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])
READ_TASK_CPUS = 0.1
FETCH_MAX_BYTES = 4 << 20   # per leader fetch: under Ray's 4 MiB inline limit set by rafka's cluster
# Larger ranges are split (more Spark partitions, smaller blocks). Not finer: every
# concurrent read task is a Ray worker process, and on 2 cores extra tasks only add
# worker start-ups (600k records: 3 tasks 2.2 s, 6 tasks 5.7-9.4 s, 12 tasks 11.6 s).
SPARK_BLOCK_MAX_RECORDS = 500_000
IPC_BLOCK_MAX_BYTES = 256 << 20   # per object Spark's executors read (a Java array holds < 2 GiB)
# each fetch of a read task is retried this long (a new leader's HW catching up
# with the snapshot's is retried as OFFSET_NOT_AVAILABLE), pausing between tries
LEADER_ASK_TIMEOUT_S = 60.0
LEADER_ASK_BACKOFF_S = 0.1

# read id -> the object refs of its Arrow IPC blocks, kept until release / stop_spark
_kept_blocks: dict[str, list] = {}


@dataclasses.dataclass(frozen=True)
class TopicRead:
    dataset: object                          # ray.data.Dataset
    ranges: list[OffsetRange]                # what the read holds, planned from `snapshot`
    snapshot: dict[int, PartitionOffsets]    # each partition's log start and HW (or LSO) when the read began

    @property
    def count(self) -> int:
        """Offsets in the ranges: the records, and any markers or aborted records among them."""
        return sum(r.count for r in self.ranges)


def _admin():
    from rafka.spark_bridge.cluster_access import admin
    return admin()


def snapshot_offsets(admin, topic: str, isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
                     ) -> dict[int, PartitionOffsets]:
    """Each partition's log start and end: its HW, read_committed its LSO."""
    partitions = admin.topic_partitions(topic)
    starts = admin.beginning_offsets(partitions)
    ends = admin.end_offsets(partitions, isolation_level=isolation_level)
    return {tp.partition: PartitionOffsets(starts[tp], ends[tp]) for tp in partitions}


def committed_offsets(admin, group_id: str, topic: str) -> dict[int, int]:
    return {tp.partition: offset for tp, offset in admin.list_consumer_group_offsets(group_id).items()
            if tp.topic == topic}


def plan_read(admin, topic: str, starting_offsets="earliest", ending_offsets=LATEST, *,
              group_id: str | None = None, isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
              ) -> tuple[list[OffsetRange], dict[int, PartitionOffsets]]:
    """The ranges of a read and the snapshot they come from."""
    snapshot = snapshot_offsets(admin, topic, isolation_level)
    committed = committed_offsets(admin, group_id, topic) if group_id is not None else None

    def offsets_for_time(partition: int, timestamp_ms: int):
        from rafka.core.structs import TopicPartition
        found = admin.list_offsets([(topic, partition)], timestamp_ms,
                                   isolation_level=isolation_level)[TopicPartition(topic, partition)]
        return None if found is None else found[0]
    starts = resolve(starting_offsets, "earliest", snapshot, offsets_for_time=offsets_for_time, committed=committed)
    ends = resolve(ending_offsets, LATEST, snapshot, offsets_for_time=offsets_for_time, committed=committed)
    return plan_ranges(topic, snapshot, starts, ends), snapshot


def read_range(offset_range: OffsetRange, fetch_max_bytes: int = FETCH_MAX_BYTES, *,
               isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> pa.Table:
    """One range, from the partition's leader, as an Arrow table (runs in a read task).
    protocol.range_reads reads it (a consumer's Fetch on the leader's Kafka endpoint,
    each retried by protocol.retry's rule for up to LEADER_ASK_TIMEOUT_S: a leader
    moved, or a new one whose HW is still below the range's end). The batches a
    consumer at `isolation_level` hands out are decoded into columns
    (core/columnar.py: no Python object per record), one table chunk per fetch (so
    a range may hold more than the 2 GiB one binary array can), and the table is
    sliced to the range at the end."""
    from rafka.client.admin import admin_network
    from rafka.client.metadata import MetadataCache
    from rafka.protocol.range_reads import RangeRead, read_range as read_chunks
    from rafka.protocol.retry import ask_leader
    from rafka.spark_bridge.cluster_access import bootstrap_servers, cluster_login
    from rafka.core.columnar import decode_columns

    network = admin_network(cluster_login)
    metadata = MetadataCache(bootstrap_servers, network)
    topic, partition = offset_range.topic, offset_range.partition
    ask = functools.partial(ask_leader, metadata, network, topic, partition, timeout_s=LEADER_ASK_TIMEOUT_S,
                            retry_backoff_s=LEADER_ASK_BACKOFF_S)
    chunks, offsets = [], []
    for chunk in read_chunks(ask, RangeRead(topic=topic, partition=partition, start_offset=offset_range.start,
                                            end_offset=offset_range.end, max_bytes=fetch_max_bytes,
                                            isolation_level=isolation_level)):
        records = chunk.handed_out()
        if not records:
            continue
        columns = decode_columns(records)
        chunks.append(_as_table(offset_range, columns))
        offsets.append(columns.offsets)
    if not chunks:
        return KAFKA_ARROW_SCHEMA.empty_table()
    # whole batches were decoded: keep offsets start .. end - 1 (offsets ascend)
    first, stop = np.searchsorted(np.concatenate(offsets), [offset_range.start, offset_range.end])
    return pa.concat_tables(chunks).slice(int(first), int(stop - first))


def _as_table(offset_range: OffsetRange, columns) -> pa.Table:
    count = len(columns)
    return pa.Table.from_arrays([
        columns.keys, columns.values, pa.repeat(pa.scalar(offset_range.topic, pa.string()), count),
        pa.repeat(pa.scalar(offset_range.partition, pa.int32()), count), pa.array(columns.offsets),
        pa.array(columns.timestamps_ms * 1000, pa.timestamp("us", tz="UTC")), pa.array(columns.timestamp_types),
        columns.headers], schema=KAFKA_ARROW_SCHEMA)


def _datasource(ranges: list[OffsetRange], isolation_level: IsolationLevel):
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class TopicDatasource(Datasource):
        """One read task per non-empty range. Its row count is not known ahead:
        markers and aborted transactions hold offsets without rows."""

        def estimate_inmemory_data_size(self):
            return sum(r.count for r in ranges) * 128

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            return [ReadTask(functools.partial(lambda r: [read_range(r, isolation_level=isolation_level)], r),
                             BlockMetadata(num_rows=None, size_bytes=r.count * 128, input_files=None,
                                           exec_stats=None),
                             schema=KAFKA_ARROW_SCHEMA)
                    for r in ranges if r.count > 0]
    return TopicDatasource()


def read_dataset(topic: str, starting_offsets="earliest", ending_offsets=LATEST, *,
                 group_id: str | None = None, isolation_level: str = "read_uncommitted") -> TopicRead:
    """A Ray Dataset of the topic's records in the planned ranges (no Spark needed).
    Offsets: "earliest", "latest" (the HW snapshot; read_committed: the LSO),
    {partition: offset}, {"timestamp": {partition: ms}}, or "committed" (with
    `group_id`). `isolation_level`: "read_uncommitted" or "read_committed"."""
    level = parse_isolation_level(isolation_level)
    ranges, snapshot = plan_read(_admin(), topic, starting_offsets, ending_offsets, group_id=group_id,
                                 isolation_level=level)
    dataset = ray.data.read_datasource(_datasource(ranges, level), override_num_blocks=max(1, len(ranges)),
                                       num_cpus=READ_TASK_CPUS)
    return TopicRead(dataset, ranges, snapshot)


def _split(ranges: list[OffsetRange], max_records: int) -> list[OffsetRange]:
    return [OffsetRange(r.topic, r.partition, start, min(start + max_records, r.end))
            for r in ranges for start in range(r.start, r.end, max_records)]


@functools.cache
def _read_range_as_ipc():
    @ray.remote(num_cpus=READ_TASK_CPUS)
    def read_range_as_ipc(offset_range: OffsetRange, block_max_bytes: int, isolation_level: IsolationLevel):
        """Yields the range as Arrow IPC streams of about `block_max_bytes` at most (a
        Java byte[] holds under 2 GiB). Python `bytes` are stored raw in the object
        store, so Java can read them."""
        table = read_range(offset_range, isolation_level=isolation_level)
        rows_per_block = max(1, int(table.num_rows * block_max_bytes / max(1, table.nbytes)))
        pieces, size = [], 0
        for record_batch in table.to_batches(max_chunksize=rows_per_block):
            if pieces and size + record_batch.nbytes > block_max_bytes:
                yield _ipc_bytes(pieces)
                pieces, size = [], 0
            pieces.append(record_batch)
            size += record_batch.nbytes
        yield _ipc_bytes(pieces)
    return read_range_as_ipc


def _ipc_bytes(record_batches: list) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, KAFKA_ARROW_SCHEMA) as writer:
        for record_batch in record_batches:
            writer.write_batch(record_batch)
    return sink.getvalue().to_pybytes()


def to_dataframe(spark, ranges: list[OffsetRange], *, ipc_block_max_bytes: int = IPC_BLOCK_MAX_BYTES,
                 isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
                 one_partition_per_range: bool = False):
    """The ranges as a Spark DataFrame with Spark's Kafka-source schema; the ranges
    on `df.offset_ranges`, the id its blocks are kept under on `df.read_id`.
    `one_partition_per_range`: Spark partition i holds the i-th non-empty range
    whole (a transactional sink's task per input partition); a range whose
    table is over `ipc_block_max_bytes` is then refused (ValueError), not split."""
    import uuid
    from raydp.spark.dataset import ray_dataset_to_spark_dataframe

    non_empty = [r for r in ranges if r.count > 0]
    # each task streams its blocks' refs back (a Ray generator task), owned by this driver
    readers = [_read_range_as_ipc().remote(r, ipc_block_max_bytes, isolation_level)
               for r in (non_empty if one_partition_per_range else _split(non_empty, SPARK_BLOCK_MAX_RECORDS))]
    blocks_by_reader = [list(reader) for reader in readers]
    if one_partition_per_range and any(len(blocks) != 1 for blocks in blocks_by_reader):
        raise ValueError(f"a range read is over {ipc_block_max_bytes} bytes: a batch read one Spark partition per "
                         f"range needs smaller batches (max_records_per_batch)")
    blocks = [block for reader_blocks in blocks_by_reader for block in reader_blocks]
    if not blocks:   # RayDP's reader needs at least one block
        from pyspark.sql.pandas.types import from_arrow_schema
        df = spark.createDataFrame([], from_arrow_schema(KAFKA_ARROW_SCHEMA))
    else:
        df = ray_dataset_to_spark_dataframe(spark, KAFKA_ARROW_SCHEMA, blocks)
    df.read_id = uuid.uuid4().hex
    _kept_blocks[df.read_id] = blocks
    df.offset_ranges = ranges
    return df


def release(df) -> None:
    """Frees the blocks of a read_topic DataFrame: call when no action will run on
    it (or on a DataFrame derived from it) again."""
    _kept_blocks.pop(getattr(df, "read_id", None), None)


def release_all() -> None:
    _kept_blocks.clear()


def read_topic(spark, topic: str, starting_offsets="earliest", ending_offsets=LATEST, *,
               group_id: str | None = None, isolation_level: str = "read_uncommitted"):
    """A Spark DataFrame of exactly the records below one HW snapshot (read_committed:
    one LSO snapshot, without aborted transactions' records; see read_dataset)."""
    level = parse_isolation_level(isolation_level)
    ranges, _ = plan_read(_admin(), topic, starting_offsets, ending_offsets, group_id=group_id,
                          isolation_level=level)
    return to_dataframe(spark, ranges, isolation_level=level)
