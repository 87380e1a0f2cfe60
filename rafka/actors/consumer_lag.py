"""Consumer lag of the groups a coordinator holds, in records and in seconds, for
its metrics (core.kafka_metrics: kafka_consumergroup_group_lag{,_seconds}): a
core.lag LagSample per group, by the rules `rafka lag` shows.

Why the coordinator: it holds every committed offset of its groups (no request
needed for them), it already keeps connections to partition leaders
(NodeConnections) and the newest cluster image (who leads each partition), and
lag per group is what it exports. The controller would have to ask every
coordinator for offsets first; the leaders know no group. So, before each export
(every few seconds, never on a request's path), per partition some group
committed on:
  * ListOffsets (latest) to its leader: the HW, the end a consumer can reach;
  * for each committed offset below the HW whose record's time is not known yet,
    a read from that offset (protocol.range_reads) with max_bytes 1 (Kafka answers
    with at least the whole first batch, KIP-74; a batch compaction emptied past
    the offset is stepped over), whose first record gives the timestamp of the
    record at the committed offset: lag in seconds is now minus that time (the
    oldest record the group has not consumed). The time is kept while the
    committed offset stays (a stalled group costs one ListOffsets per round), and
    dropped once the offset moves; one not found (the record is gone, or a new leader's HW is still
    behind) is asked again next round.
A partition whose leader does not answer keeps its last position; positions of
offsets no longer committed (a group deleted, offsets expired) go.

The requests go over the coordinator's own connections (its NodeConnections,
with its credentials), at most `REQUESTS_IN_FLIGHT` at a time, so they never
crowd its `__consumer_offsets` writes to the same leader.

Bounds: at most `max_partitions` partitions per round; every request is bounded
by the connection's request timeout, the round by the exporter's interval.
Callers: actors.coordinator (its exporter's refresh), tests through the metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping

from rafka.core.cluster_image import ClusterImage
from rafka.core.errors import KafkaError
from rafka.core.lag import LagSample, PartitionPosition
from rafka.core.replica import LATEST_TIMESTAMP
from rafka.protocol import fetching
from rafka.protocol.range_reads import RangeRead, read_range_async
from rafka.protocol.retry import ask_leader_once_async

MAX_PARTITIONS = 10_000
REQUESTS_IN_FLIGHT = 4
NO_FENCING = -1     # current_leader_epoch -1: the leader does not check it (KIP-320)
logger = logging.getLogger(__name__)

Committed = Mapping[str, Mapping[tuple[str, int], object]]   # group -> (topic, partition) -> value with .offset


class ConsumerLag:
    def __init__(self, nodes, *, image: Callable[[], ClusterImage], committed: Callable[[], Committed],
                 loaded: Callable[[], bool], clock, max_partitions: int = MAX_PARTITIONS) -> None:
        self._nodes = nodes
        self._image = image
        self._committed = committed
        self._loaded = loaded
        self._clock = clock
        self.max_partitions = max_partitions
        self._samples: list[LagSample] = []
        self._positions: dict[tuple[str, str, int], PartitionPosition] = {}   # (group, topic, partition)
        self._timestamps: dict[tuple[str, int, int], int] = {}   # (topic, partition, offset) -> ms
        self._in_flight: asyncio.Semaphore | None = None   # made on the loop, at the first refresh

    def samples(self) -> list[LagSample]:
        """The newest look at each group (core.lag), as of the last refresh."""
        return list(self._samples)

    async def refresh(self) -> None:
        if not self._loaded():
            return
        if self._in_flight is None:
            self._in_flight = asyncio.Semaphore(REQUESTS_IN_FLIGHT)
        offsets_by_partition: dict[tuple[str, int], dict[str, int]] = {}
        for group, offsets in list(self._committed().items()):
            for (topic, partition), value in list(offsets.items()):
                offsets_by_partition.setdefault((topic, partition), {})[group] = value.offset
        partitions = sorted(offsets_by_partition)[:self.max_partitions]
        image = self._image()
        answers = await asyncio.gather(*(self._partition(image, tp, set(offsets_by_partition[tp].values()))
                                         for tp in partitions), return_exceptions=True)
        positions: dict[tuple[str, str, int], PartitionPosition] = {}
        timestamps: dict[tuple[str, int, int], int] = {}
        for (topic, partition), answer in zip(partitions, answers):
            groups = offsets_by_partition[(topic, partition)]
            if isinstance(answer, BaseException):   # keep what was known; the next round asks again
                logger.debug("lag of %s-%d not refreshed: %s", topic, partition, answer)
                positions.update({(g, topic, partition): self._positions[(g, topic, partition)] for g in groups
                                  if (g, topic, partition) in self._positions})
                timestamps.update({k: v for k, v in self._timestamps.items() if k[:2] == (topic, partition)})
                continue
            if answer is None:   # the topic is gone
                continue
            end_offset, found = answer
            for group, offset in groups.items():
                timestamp_ms = found.get(offset)
                if timestamp_ms is not None:
                    timestamps[(topic, partition, offset)] = timestamp_ms
                positions[(group, topic, partition)] = PartitionPosition(
                    topic=topic, partition=partition, committed_offset=offset, log_end_offset=end_offset,
                    oldest_unconsumed_timestamp_ms=timestamp_ms)
        by_group: dict[str, list[PartitionPosition]] = {}
        for (group, _, _), position in sorted(positions.items()):
            by_group.setdefault(group, []).append(position)
        wall_ms, monotonic_ms = self._clock.now_ms(), self._clock.monotonic_ms()
        self._samples = [LagSample(group=group, wall_ms=wall_ms, monotonic_ms=monotonic_ms, positions=tuple(found))
                         for group, found in by_group.items()]
        self._positions, self._timestamps = positions, timestamps

    async def _partition(self, image: ClusterImage, tp: tuple[str, int], offsets: set[int]):
        """(HW, {committed offset below it: its record's timestamp or None}), or None
        if the image no longer has the topic."""
        topic, partition = tp
        if topic not in image.topics:
            return None
        leader = _ImageLeader(image)
        end_offset, _ = await ask_leader_once_async(
            leader, self, topic, partition,
            lambda leader_epoch: fetching.list_offset_request(
                topic=topic, partition=partition, replica_id=fetching.CONSUMER_REPLICA_ID, leader_epoch=leader_epoch,
                timestamp_ms=LATEST_TIMESTAMP),
            lambda response: fetching.list_offset_answer(response, topic=topic, partition=partition))
        found: dict[int, int | None] = {}
        for offset in sorted(o for o in offsets if o < end_offset):
            known = (topic, partition, offset)
            if known in self._timestamps:
                found[offset] = self._timestamps[known]
                continue
            try:
                found[offset] = await self._timestamp_at(leader, topic, partition, offset, end_offset)
            except KafkaError as error:   # e.g. below the log start: retention took it
                logger.debug("no timestamp at %s-%d@%d: %s", topic, partition, offset, error)
                found[offset] = None
        return end_offset, found

    async def _timestamp_at(self, leader, topic: str, partition: int, offset: int, end_offset: int) -> int | None:
        """The time of the first record at or after `offset`, below the HW: a read
        of one batch a fetch (max_bytes 1), past any compaction gap."""
        def ask(request_for, read):
            return ask_leader_once_async(leader, self, topic, partition, request_for, read)
        cursor = RangeRead(topic=topic, partition=partition, start_offset=offset, end_offset=end_offset, max_bytes=1)
        async with contextlib.aclosing(read_range_async(ask, cursor)) as chunks:
            async for chunk in chunks:
                for record in chunk.in_range():   # one batch, decoded off any request's path
                    return record.timestamp_ms
        return None

    async def request(self, address, request):
        """NodeConnections' request, at most REQUESTS_IN_FLIGHT at a time."""
        async with self._in_flight:
            return await self._nodes.request(address, request)


class _ImageLeader:
    """`leaders` from one cluster image: its leader's endpoint, and no fencing
    (current_leader_epoch -1: the leader does not check it, KIP-320)."""

    def __init__(self, image: ClusterImage) -> None:
        self._image = image

    async def leader_address(self, topic: str, partition: int) -> tuple[tuple, int]:
        address, _ = self._image.leader_endpoint(topic, partition)
        return address, NO_FENCING
