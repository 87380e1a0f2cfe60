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
  expiry (KIP-211, Kafka's offsetExpirationCondition with isSubscribedToTopic):
  each group's `Retention` says how its offsets age: an Empty group's all from
  when it became Empty (from their commit when that time is unknown: a group
  value of format v0/v1 holds none); a group without membership (assign mode)
  each from its commit; a group with members each from its commit but never a
  topic its members subscribe to, and nothing while their subscriptions are not
  known. A partition whose transactional offset is pending never expires
  transactional offsets (KIP-98, Kafka's pendingTransactionalOffsets): a commit
  written in a producer's transactional batch stays pending, invisible to fetch,
  until that producer's marker replays: COMMIT makes it the committed offset
  unless a commit replayed after it (later in the log) already is, ABORT drops
  it. A tombstone drops the pending offsets of its partition too. "Later in the
  log" is the replay order (`_replayed`): the log's order, live or loading, as
  the coordinator appends one write at a time and replays each once acked
Pure logic, no I/O; the clock is passed in. Caller: core.coordinator_shard (for the
group coordinator actor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from rafka.core.errors import InvalidRequest, OffsetMetadataTooLarge
from rafka.core.offsets_schema import NO_LEADER_EPOCH, GroupKey, OffsetKey, OffsetValue
from rafka.core.records import NO_PRODUCER_ID

Record = tuple[OffsetKey | GroupKey, object]   # (key, value or None for a tombstone)


@dataclasses.dataclass(frozen=True)
class CoordinatorResult:
    records: list[Record]
    response: object


@dataclasses.dataclass(frozen=True)
class Retention:
    """How one group's offsets age (`handle_expire`): each from `since_ms` when
    set (an Empty group's: when it became Empty), else from its own commit; never
    an offset of a topic in `subscribed` (a group with members)."""
    since_ms: int | None = None
    subscribed: frozenset[str] = frozenset()


BY_COMMIT = Retention()   # a group without membership, or Empty since a time not known


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
        # the replay order of each committed offset, and of each pending one
        self._replayed = 0
        self._committed_order: dict[tuple[str, tuple[str, int]], int] = {}
        # producer id -> group -> partition -> (replay order, value), until its marker
        self.pending_by_producer: dict[int, dict[str, dict[tuple[str, int], tuple[int, OffsetValue]]]] = {}
        self.open_producers_by_group: dict[str, set[int]] = {}

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

    def handle_expire(self, now_ms: int, retention_by_group: Mapping[str, Retention | None], *,
                      only_group: str | None = None) -> CoordinatorResult:
        """Tombstones for expired offsets (of every group, or of `only_group`).
        `retention_by_group`: how each group's offsets age, None for a group none
        of whose offsets may expire now; a group absent from it ages by commit
        (BY_COMMIT: it commits outside the group protocol). The decision holds
        only until the group's next commit: the caller writes the tombstones
        before any later commit of the group is acked (core.coordinator_shard
        decides and writes under the group's lock), or a tombstone would delete a
        newer commit."""
        records: list[Record] = []
        if only_group is None:
            groups = sorted(self.offsets_by_group.items())
        else:
            groups = [(only_group, self.offsets_by_group[only_group])] if only_group in self.offsets_by_group else []
        for group, offsets in groups:
            retention = retention_by_group.get(group, BY_COMMIT)
            if retention is None:
                continue
            pending = self.pending_partitions(group)   # Kafka keeps them until the marker
            expired = sorted(
                tp for tp, value in offsets.items()
                if tp not in pending and tp[0] not in retention.subscribed
                and now_ms - (value.commit_timestamp_ms if retention.since_ms is None else retention.since_ms)
                >= self.offsets_retention_ms)
            records += [(OffsetKey(group, topic, partition), None) for topic, partition in expired]
        return CoordinatorResult(records, len(records))

    # --- replay: the one way the cache changes ----------------------------------------

    def replay(self, key, value, *, producer_id: int = NO_PRODUCER_ID) -> None:
        """One record; `producer_id`: of its batch when that batch is transactional
        (a TxnOffsetCommit's), else NO_PRODUCER_ID."""
        if not isinstance(key, OffsetKey):
            return  # group metadata records belong to the group manager
        tp = (key.topic, key.partition)
        self._replayed += 1
        if value is None:
            offsets = self.offsets_by_group.get(key.group)
            if offsets is not None:
                offsets.pop(tp, None)
                self._committed_order.pop((key.group, tp), None)
                if not offsets:
                    del self.offsets_by_group[key.group]
            for producer_id_open in list(self.open_producers_by_group.get(key.group, ())):
                self._drop_pending(producer_id_open, key.group, tp)
            return
        if value.offset < 0:
            raise ValueError(f"replayed a negative offset for {key}")  # an invariant, not input
        if producer_id == NO_PRODUCER_ID:
            self.offsets_by_group.setdefault(key.group, {})[tp] = value
            self._committed_order[(key.group, tp)] = self._replayed
            return
        self.pending_by_producer.setdefault(producer_id, {}).setdefault(key.group, {})[tp] = (self._replayed, value)
        self.open_producers_by_group.setdefault(key.group, set()).add(producer_id)

    def replay_marker(self, producer_id: int, *, commit: bool) -> None:
        """A COMMIT or ABORT marker of `producer_id`'s transaction (Kafka's
        replayEndTransactionMarker); a producer without pending offsets: nothing."""
        self._replayed += 1
        pending = self.pending_by_producer.pop(producer_id, None)
        if pending is None:
            return
        for group, offsets in pending.items():
            self._close(producer_id, group)
            if not commit:
                continue
            for tp, (order, value) in offsets.items():
                existing = self._committed_order.get((group, tp))
                if existing is None or order > existing:   # a later plain commit wins
                    self.offsets_by_group.setdefault(group, {})[tp] = value
                    self._committed_order[(group, tp)] = order

    def _drop_pending(self, producer_id: int, group: str, tp: tuple[str, int]) -> None:
        by_group = self.pending_by_producer.get(producer_id)
        offsets = by_group.get(group) if by_group is not None else None
        if offsets is None:
            return
        offsets.pop(tp, None)
        if not offsets:
            del by_group[group]
            self._close(producer_id, group)
            if not by_group:
                del self.pending_by_producer[producer_id]

    def _close(self, producer_id: int, group: str) -> None:
        producers = self.open_producers_by_group.get(group)
        if producers is not None:
            producers.discard(producer_id)
            if not producers:
                del self.open_producers_by_group[group]

    # --- reads ------------------------------------------------------------------------

    def fetch(self, group: str, partitions=None) -> dict[tuple[str, int], OffsetValue | None]:
        """Committed offsets of `group` (all, or those of `partitions`; None where
        there is no commit)."""
        offsets = self.offsets_by_group.get(group, {})
        if partitions is None:
            return dict(offsets)
        return {tuple(tp): offsets.get(tuple(tp)) for tp in partitions}

    def pending_partitions(self, group: str) -> set[tuple[str, int]]:
        """The partitions of `group` with a transactional offset pending (KIP-447's
        unstable offsets)."""
        return {tp for producer_id in self.open_producers_by_group.get(group, ())
                for tp in self.pending_by_producer[producer_id].get(group, ())}

    def has_open_transactions(self, group: str) -> bool:
        return group in self.open_producers_by_group
