"""What DescribeLogDirs tells of a broker's log dir: per partition hosted there,
the bytes of its segments, and the volume's total and usable bytes.

Read from the disk as it is (Kafka's ReplicaManager.describeLogDirs reads its
open logs; here the broker's network process holds none, the replica actors
do): a partition's size is the sum of its `.log` files (Kafka's log.size), its
offset lag 0 (Kafka's lag of a current log, max(HW - LEO, 0), is never positive;
only a future log, which rafka does not make, has one). A partition directory
that vanishes while it is read (a replica deleted) is left out.
Callers: actors.broker (through protocol.handlers.describe_log_dirs), tests.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class PartitionDirSize:
    topic: str
    partition: int
    size_bytes: int
    offset_lag: int = 0


@dataclasses.dataclass(frozen=True)
class LogDirDescription:
    path: str                     # absolute, as Kafka answers it
    partitions: tuple[PartitionDirSize, ...]
    total_bytes: int
    usable_bytes: int


def describe_log_dir(log_dir: str | os.PathLike, hosted: Iterable[tuple[str, int]]) -> LogDirDescription:
    """The log dir with each of the `hosted` (topic, partition) whose directory
    is in it; KafkaStorageError-free: an unreadable volume raises OSError."""
    root = Path(log_dir).absolute()
    volume = os.statvfs(root)
    partitions = []
    for topic, partition in hosted:
        size = _segments_bytes(root / f"{topic}-{partition}")
        if size is not None:
            partitions.append(PartitionDirSize(topic, partition, size))
    return LogDirDescription(str(root), tuple(partitions), total_bytes=volume.f_blocks * volume.f_frsize,
                             usable_bytes=volume.f_bavail * volume.f_frsize)


def _segments_bytes(directory: Path) -> int | None:
    try:
        with os.scandir(directory) as entries:
            return sum(entry.stat().st_size for entry in entries if entry.name.endswith(".log"))
    except FileNotFoundError:
        return None
