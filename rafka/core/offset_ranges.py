"""Offset ranges for bounded reads of a topic (Spark's batch and micro-batch
reads): what to read from each partition, given a snapshot of its offsets.

A read is planned once, from one snapshot of every partition's log start and
end (`PartitionOffsets`), so it names exactly which records it returns; records
produced after the snapshot are left for the next read. The end is the HW, or
for a read_committed read the last stable offset (LSO): below it every
transaction is decided, so none is read open. "HW" below means that end.

Invariants:
  every planned range satisfies log_start <= start <= end <= HW: nothing at or
  above the HW is ever read (DESIGN invariant 4; read_committed: nothing at or
  above the LSO, DESIGN section 5)
  a start below the log start (retention moved it) becomes the log start; a
  start above the HW is refused (InvalidRequest), as an offset that does not
  exist yet
  a micro-batch takes at most `max_records` records in all, shared over the
  partitions in order of their lag, each partition at least one when it lags
  (so a batch always progresses); its id is a function of its ranges alone, so
  a batch re-run after a crash has the id it had, and a sink can overwrite it
Pure: no I/O. Callers: rafka.spark_bridge (source and stream).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping

from rafka.core.errors import InvalidRequest, UnknownTopicOrPartition

EARLIEST, LATEST = "earliest", "latest"


@dataclasses.dataclass(frozen=True)
class PartitionOffsets:
    log_start: int
    end_offset: int   # where a read may end: the HW, or (read_committed) the last stable offset


@dataclasses.dataclass(frozen=True, order=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int          # exclusive: the range holds offsets start .. end - 1

    @property
    def count(self) -> int:
        return self.end - self.start


def resolve(spec, default: str, snapshot: Mapping[int, PartitionOffsets], *,
            offsets_for_time: Callable[[int, int], int | None] | None = None,
            committed: Mapping[int, int] | None = None) -> dict[int, int]:
    """Offsets of every partition from a Spark-style spec: "earliest", "latest"
    (the HW snapshot), {partition: offset} (-2 earliest, -1 latest, as Spark),
    {"timestamp": {partition: ms}} (the first offset at or after that time, or the
    HW when none), or "committed" (the group's offsets; `default` where none)."""
    def named(partition: int, name: str) -> int:
        offsets = snapshot[partition]
        return offsets.log_start if name == EARLIEST else offsets.end_offset

    if spec in (EARLIEST, LATEST):
        return {p: named(p, spec) for p in snapshot}
    if spec == "committed":
        if committed is None:
            raise ValueError('"committed" offsets need a group (group_id)')
        return {p: committed[p] if p in committed else named(p, default) for p in snapshot}
    if isinstance(spec, Mapping) and set(spec) == {"timestamp"}:
        if offsets_for_time is None:
            raise ValueError("timestamp offsets need offsets_for_time")
        out = {}
        for p in snapshot:
            if p not in spec["timestamp"]:
                out[p] = named(p, default)
                continue
            found = offsets_for_time(p, int(spec["timestamp"][p]))
            out[p] = snapshot[p].end_offset if found is None else found
        return out
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - set(snapshot))
        if unknown:
            raise UnknownTopicOrPartition(f"partitions {unknown} do not exist")
        out = {}
        for p in snapshot:
            offset = spec.get(p)
            if offset is None:
                out[p] = named(p, default)
            elif offset in (-2, -1):
                out[p] = named(p, EARLIEST if offset == -2 else LATEST)
            elif isinstance(offset, int) and offset >= 0:
                out[p] = offset
            else:
                raise InvalidRequest(f"partition {p}: offset {offset!r} is not an offset, -2 or -1")
        return out
    raise ValueError(f"offsets must be 'earliest', 'latest', 'committed', {{partition: offset}} or "
                     f"{{'timestamp': {{partition: ms}}}}, got {spec!r}")


def plan_ranges(topic: str, snapshot: Mapping[int, PartitionOffsets], starts: Mapping[int, int],
                ends: Mapping[int, int]) -> list[OffsetRange]:
    """One range per partition, clamped into [log start, HW]; empty ranges kept
    (a partition with nothing to read reads nothing)."""
    ranges = []
    for p in sorted(snapshot):
        offsets = snapshot[p]
        start, end = starts[p], ends[p]
        if start > offsets.end_offset:
            raise InvalidRequest(f"{topic}-{p}: start offset {start} is above the high watermark "
                                 f"(or last stable offset) {offsets.end_offset}")
        start = max(start, offsets.log_start)
        end = min(max(end, start), offsets.end_offset)
        ranges.append(OffsetRange(topic, p, start, end))
    return ranges


def plan_micro_batch(topic: str, snapshot: Mapping[int, PartitionOffsets], starts: Mapping[int, int],
                     max_records: int | None) -> list[OffsetRange]:
    """From `starts` (the group's committed offsets) towards the HW snapshot, at
    most `max_records` records in all (None: no cap)."""
    full = plan_ranges(topic, snapshot, starts, {p: offsets.end_offset for p, offsets in snapshot.items()})
    if max_records is None or sum(r.count for r in full) <= max_records:
        return full
    if max_records < 1:
        raise ValueError(f"max_records must be at least 1, got {max_records}")
    lagging = [r for r in full if r.count > 0]
    budget = max(max_records, len(lagging))
    # one record for every lagging partition (none starves), the rest shared by lag;
    # floors, so the sum stays within the budget
    spare = budget - len(lagging)
    beyond_first = sum(r.count for r in lagging) - len(lagging)
    taken = {r.partition: 1 + (r.count - 1) * spare // beyond_first if beyond_first else 1 for r in lagging}
    # hand out what rounding left, to the partitions that lag most
    for r in sorted(lagging, key=lambda r: (-r.count, r.partition)):
        if sum(taken.values()) >= budget:
            break
        taken[r.partition] = min(r.count, taken[r.partition] + budget - sum(taken.values()))
    return [dataclasses.replace(r, end=r.start + min(r.count, taken.get(r.partition, 0))) for r in full]


def batch_id(ranges: list[OffsetRange]) -> str:
    """A stable id of a batch: the same ranges give the same id, in any run."""
    text = ";".join(f"{r.topic}:{r.partition}:{r.start}-{r.end}" for r in sorted(ranges))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
