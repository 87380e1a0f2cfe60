"""Committed offsets of the groups of one `__consumer_offsets` partition.

As Kafka's OffsetMetadataManager: a handler validates a request and returns the
records to write with the response it will give once they are written
(`CoordinatorResult`), changing nothing; `replay(key, value)` applies one record
to the cache; loading a partition after failover replays it. One path, live or
loading. A tombstone (value None) removes the offset.

Invariants:
  the cache holds exactly what replaying the partition's records below the HW
  gives (the coordinator replays a commit only once it is below the HW, and
  answers the commit only then)
  a committed offset is the next offset to read, >= 0
  errors are per partition, as Kafka's: a partition whose metadata is longer than
  offset.metadata.max.bytes (OFFSET_METADATA_TOO_LARGE) or whose offset is
  negative (INVALID_REQUEST) writes nothing; the other partitions commit
  expiry (KIP-211): a group's offsets expire offsets.retention.ms after the group
  became Empty; offsets of a group without membership (assign mode) expire that
  long after their commit; a group with members never loses offsets
Pure logic, no I/O; the clock is passed in. Caller: core.coordinator_shard (for the
group coordinator actor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from rafka.core.errors import InvalidRequest, OffsetMetadataTooLarge
from rafka.core.offsets_schema import NO_LEADER_EPOCH, GroupKey, OffsetKey, OffsetValue

Record = tuple[OffsetKey | GroupKey, object]   # (key, value or None for a tombstone)


@dataclasses.dataclass(frozen=True)
class CoordinatorResult:
    records: list[Record]
    response: object


@dataclasses.dataclass(frozen=True)
class OffsetCommit:
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""


class OffsetStore:
    def __init__(self, *, offset_metadata_max_bytes: int = 4096,
                 offsets_retention_ms: int = 7 * 24 * 3600 * 1000) -> None:
        self.offset_metadata_max_bytes = offset_metadata_max_bytes
        self.offsets_retention_ms = offsets_retention_ms
        self.offsets_by_group: dict[str, dict[tuple[str, int], OffsetValue]] = {}

    # --- handlers: validate, return records and the response -----------------------

    def handle_commit(self, group: str, commits: Mapping[tuple[str, int], OffsetCommit],
                      now_ms: int) -> CoordinatorResult:
        """Response: partition -> None (committed once the records are below the HW)
        or its error. Membership is checked by the caller
        (group_state.validate_offset_commit)."""
        records: list[Record] = []
        response: dict[tuple[str, int], Exception | None] = {}
        for (topic, partition), commit in sorted(commits.items()):
            if not isinstance(commit.offset, int) or commit.offset < 0:
                response[(topic, partition)] = InvalidRequest(
                    f"{topic}-{partition}: offset {commit.offset!r} is negative")
            elif len(commit.metadata.encode("utf-8")) > self.offset_metadata_max_bytes:
                response[(topic, partition)] = OffsetMetadataTooLarge(
                    f"{topic}-{partition}: metadata is longer than offset.metadata.max.bytes "
                    f"({self.offset_metadata_max_bytes})")
            else:
                response[(topic, partition)] = None
                records.append((OffsetKey(group, topic, partition),
                                OffsetValue(commit.offset, commit.leader_epoch, commit.metadata, now_ms)))
        return CoordinatorResult(records, response)

    def handle_expire(self, now_ms: int, empty_since_ms_by_group: Mapping[str, int | None], *,
                      only_group: str | None = None) -> CoordinatorResult:
        """Tombstones for expired offsets (of every group, or of `only_group`).
        `empty_since_ms_by_group`: for each group with membership metadata, when it
        became Empty, or None while it has members; a group absent from it commits
        outside the group protocol. The decision holds only until the group's next
        commit: the caller writes the tombstones before any later commit of the
        group is acked (core.coordinator_shard decides and writes under the group's
        lock), or a tombstone would delete a newer commit."""
        records: list[Record] = []
        if only_group is None:
            groups = sorted(self.offsets_by_group.items())
        else:
            groups = [(only_group, self.offsets_by_group[only_group])] if only_group in self.offsets_by_group else []
        for group, offsets in groups:
            if group in empty_since_ms_by_group:
                empty_since_ms = empty_since_ms_by_group[group]
                if empty_since_ms is None or now_ms - empty_since_ms < self.offsets_retention_ms:
                    continue
                expired = sorted(offsets)
            else:
                expired = sorted(tp for tp, value in offsets.items()
                                 if now_ms - value.commit_timestamp_ms >= self.offsets_retention_ms)
            records += [(OffsetKey(group, topic, partition), None) for topic, partition in expired]
        return CoordinatorResult(records, len(records))

    # --- replay: the one way the cache changes ----------------------------------------

    def replay(self, key, value) -> None:
        if not isinstance(key, OffsetKey):
            return  # group metadata records belong to the group manager
        tp = (key.topic, key.partition)
        if value is None:
            offsets = self.offsets_by_group.get(key.group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self.offsets_by_group[key.group]
            return
        if value.offset < 0:
            raise ValueError(f"replayed a negative offset for {key}")  # an invariant, not input
        self.offsets_by_group.setdefault(key.group, {})[tp] = value

    # --- reads ------------------------------------------------------------------------

    def fetch(self, group: str, partitions=None) -> dict[tuple[str, int], OffsetValue | None]:
        """Committed offsets of `group` (all, or those of `partitions`; None where
        there is no commit)."""
        offsets = self.offsets_by_group.get(group, {})
        if partitions is None:
            return dict(offsets)
        return {tuple(tp): offsets.get(tuple(tp)) for tp in partitions}
