"""Micro-batch streaming of a topic into Spark as a consumer group, and a Parquet
sink that writes each batch idempotently.

Each batch: snapshot the HW, plan ranges from the group's committed offsets
(at most `max_records_per_batch`), write that plan ahead to the coordinator,
read the ranges, call `process_batch(df, batch_id)`, and only then commit the
ranges' ends. The group holds no members (Kafka's commits without generation,
as Spark's Kafka source), so its lag shows in `rafka consumer-groups` like any
group's.

Write-ahead: before a batch runs, its ranges go into the commit metadata of
the partitions' current offsets ("rafka-batch:<id>:<end>"; the offsets do not
move). A stream that restarts after a crash finds that plan and runs the same
ranges again with the same batch id, even if the HW moved since; so a sink that
overwrites by batch id (ParquetSink) holds every record exactly once.

A sink with `commits_offsets` (sink.TopicSink) commits the input offsets
itself, in the transactions that write the batch's output: the stream then
writes no plan ahead and commits nothing; it reads the group's stable offsets
(KIP-447's require_stable: never below a transaction still pending), and gives
the sink one Spark partition per range. A batch whose Spark job failed ends
the stream with its error; restarted, the stream plans from those offsets, so
the ranges the failed batch did commit are not read twice.

Invariants:
  a batch's ranges lie below one HW snapshot, from the committed offsets
  the committed offsets move only after process_batch returned, to the ends of
  the batch it processed
  a batch id is a function of the batch's ranges (core/offset_ranges.batch_id)
"""

from __future__ import annotations

import logging
import os
import shutil
import time

from rafka.core.isolation import parse_isolation_level
from rafka.core.offset_ranges import OffsetRange, batch_id, plan_micro_batch, resolve
from rafka.spark_bridge.source import _admin, release, snapshot_offsets, to_dataframe

logger = logging.getLogger(__name__)
PLAN_PREFIX = "rafka-batch:"


def _coordinator(admin, group_id: str):
    return admin._group(group_id)


def _committed(coordinator, topic: str, *, require_stable: bool = False) -> dict[int, tuple[int, str]]:
    fetched = coordinator.call("fetch_offsets", None, require_stable=require_stable)
    return {p: (value[0], value[2]) for (t, p), value in fetched.items() if t == topic and value is not None}


def _pending_plan(topic: str, committed: dict[int, tuple[int, str]]) -> list[OffsetRange] | None:
    """The ranges a crashed run wrote ahead and did not commit, if any."""
    plan = {}
    for partition, (offset, metadata) in committed.items():
        if metadata.startswith(PLAN_PREFIX):
            _, planned_id, end = metadata.rsplit(":", 2)
            plan[partition] = (planned_id, OffsetRange(topic, partition, offset, int(end)))
    if not plan:
        return None
    ids = {planned_id for planned_id, _ in plan.values()}
    ranges = sorted(r for _, r in plan.values())
    if len(ids) != 1 or batch_id(ranges) not in ids:
        logger.warning("stream of %s: a partial write-ahead plan %s; planning afresh", topic, plan)
        return None
    return ranges


def _commit(coordinator, ranges: list[OffsetRange], *, at_start: bool, planned_id: str = "") -> None:
    request = {(r.topic, r.partition): ((r.start, -1, f"{PLAN_PREFIX}{planned_id}:{r.end}") if at_start
                                        else (r.end, -1, "")) for r in ranges}
    response = coordinator.call("commit_offsets", request)
    for error in response.values():
        if error is not None:
            raise error


def stream_topic(spark, topic: str, group_id: str, process_batch, *, trigger_interval_s: float = 1.0,
                 max_records_per_batch: int | None = None, starting_offsets="earliest",
                 max_batches: int | None = None, stop_when_idle: bool = False,
                 isolation_level: str = "read_uncommitted") -> int:
    """Runs micro-batches until `max_batches` ran, or (with `stop_when_idle`) until a
    trigger finds nothing new. Returns the number of batches processed. A partition
    the group has no offset for starts at `starting_offsets`. `isolation_level`
    "read_committed": each batch ends at the LSO snapshot and holds no aborted record."""
    level = parse_isolation_level(isolation_level)
    transactional = getattr(process_batch, "commits_offsets", False)
    admin = _admin()
    coordinator = _coordinator(admin, group_id)
    processed = 0
    while max_batches is None or processed < max_batches:
        started_s = time.monotonic()
        snapshot = snapshot_offsets(admin, topic, level)
        committed = _committed(coordinator, topic, require_stable=transactional)
        ranges = None if transactional else _pending_plan(topic, committed)
        if ranges is None:
            initial = resolve(starting_offsets, "earliest", snapshot)   # for partitions without a commit
            starts = {p: committed[p][0] if p in committed else initial[p] for p in snapshot}
            ranges = [r for r in plan_micro_batch(topic, snapshot, starts, max_records_per_batch) if r.count]
            if not ranges:
                if stop_when_idle:
                    break
                time.sleep(max(0.0, trigger_interval_s - (time.monotonic() - started_s)))
                continue
            if not transactional:
                _commit(coordinator, ranges, at_start=True, planned_id=batch_id(ranges))
        elif any(r.end > snapshot[r.partition].end_offset for r in ranges):
            time.sleep(trigger_interval_s)   # a new leader not yet at the old HW: the plan must stay whole
            continue
        current = batch_id(ranges)
        df = to_dataframe(spark, ranges, isolation_level=level, one_partition_per_range=transactional)
        try:
            if transactional:
                process_batch.write(df, ranges, group_id=group_id,
                                    committed={p: offset for p, (offset, _) in committed.items()})
            else:
                process_batch(df, current)
        finally:
            release(df)
        if not transactional:
            _commit(coordinator, ranges, at_start=False)
        processed += 1
        time.sleep(max(0.0, trigger_interval_s - (time.monotonic() - started_s)))
    return processed


class ParquetSink:
    """process_batch for stream_topic: each batch goes to <path>/batch=<id>, written
    to a temporary directory and renamed into place, so a re-run batch replaces
    its earlier output instead of adding to it. Read the whole output with
    `spark.read.parquet(path)` (the `batch` column tells batches apart)."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(path, exist_ok=True)

    def __call__(self, df, current_batch_id: str) -> None:
        final = os.path.join(self.path, f"batch={current_batch_id}")
        staging = os.path.join(self.path, f"_staging-{current_batch_id}")
        shutil.rmtree(staging, ignore_errors=True)
        df.write.mode("overwrite").parquet(staging)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(staging, final)
