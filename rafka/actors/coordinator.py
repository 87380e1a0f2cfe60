"""The group coordinator actor of one `__consumer_offsets` partition: a thin
asyncio shell around core.CoordinatorShard (which decides, and orders every
request of a group under that group's lock: see its docstring). The actor loads,
finds its partition's leader and produces.

Loading: at start (and so after every restart) it reads its partition from the
partition's leader, from the log start to the HW (ListOffsets, then
protocol.range_reads' Fetches as a consumer, on the leader's Kafka endpoint), and
replays every record (actors.coordinator_load); until that is done every request
gets COORDINATOR_LOAD_IN_PROGRESS, never stale data. A load that met a record it
cannot decode or replay stops, logged at error level and shown by ping's
load_error; every request then gets NOT_COORDINATOR (Kafka's answer for a
partition whose load failed) until an image names a newer leader epoch for the
partition, which starts the load again.

Writes: the shard's handlers return records, queued in decision order
(core.write_queue); `_append` encodes what is queued as one batch and produces it
(Produce, acks=all, on the wire) to its partition's leader, found in the newest
cluster image, and the shard replays the records, and answers, only once the
leader acknowledged them (so they are below the HW: invariant 8). One append is
in flight at a time and carries every write queued meanwhile, of any group, so
commits are batched under load and no group's commit waits for another's round
trip of its own. A commit lets its connection's next request start as soon as it
is queued (pipelining.admit_next), so one member's commits are in flight together.
A write that cannot complete within `offsets_commit_timeout_ms` (the ISR below
min.insync.replicas, no leader) fails with COORDINATOR_NOT_AVAILABLE (Kafka's
answer to its REQUEST_TIMED_OUT: core.errors.coordinator_append_error), a
retriable error, and changes nothing in the cache.

Transactions: a TxnOffsetCommit is verified with the transaction coordinator
first (`_verify_transaction`, KIP-890), then its records go out as the producer's
transactional batch (`_append` with a TransactionalBatch), pending in the shard
until the transaction's marker; the transaction coordinator's WriteTxnMarkers for
this partition come to this actor's node (handlers.write_txn_markers), and the
shard queues the marker behind its writes, which `_append` sends to the leader as
WriteTxnMarkers (InternalPartition.append_marker). Loading replays the markers in
the log (`replay_marker`).

Named `coordinator:<offsets partition>` in namespace `rafka`, detached,
restartable, spread over the broker nodes. The partition's leader lookup, the
acks=all writes, the load and the ticker are actors.internal_partition's, shared
with the transaction coordinator actor.
Membership: join parks until the group's join phase completes (every member
rejoined, or the rebalance deadline passed), as Kafka's JoinGroup does; sync,
heartbeat and leave answer at once (after the group's write in flight, if any); a
ticker expires members whose session timed out, expires offsets past retention and
completes joins whose deadline passed.
"""

from __future__ import annotations

import logging
import os

import ray

from rafka.actors.consumer_lag import ConsumerLag
from rafka.actors.internal_partition import InternalPartition, broker_label
from rafka.actors.serving import (NodeServing, allocate_producer_id_from_controller,
                                  alter_topic_config_on_controller)
from rafka.core.actor_names import OFFSETS_TOPIC, coordinator_actor_name
from rafka.core.clock import SystemClock
from rafka.core.consumer_group import ConsumerGroups
from rafka.core.coordinator_shard import CoordinatorShard
from rafka.core.errors import NotCoordinator
from rafka.core.group_manager import GroupManager
from rafka.core.kafka_metrics import register_consumer_lag, register_coordinator
from rafka.core.offset_store import OffsetStore
from rafka.core.offsets_schema import decode_record, encode_key, encode_value, partition_for_group
from rafka.core.write_queue import TransactionalBatch, TxnMarkerWrite, WriteKind
from rafka.protocol.pipelining import admit_next
from rafka.protocol.txn_verification import TransactionVerifier

# A member's commits are batched into one append only as far as they are started
# together: 16 per connection (a node's default is 5) lets a consumer's
# ASYNC_COMMITS_UNANSWERED_MAX (16) commits all be queued, so an append carries up
# to 16 of them, not 2 or 3 (group_bench: 1,100 -> 1,420 commits/s). Each parked
# commit holds only its answer's state; the write queue bounds what all hold.
PIPELINED_REQUESTS_PER_CONNECTION = 16

logger = logging.getLogger(__name__)


IMAGE_ASK_INTERVAL_MS = 250   # a topic missing from the image: the controller asked at most this often


class GroupCoordinatorActor:
    def __init__(self, *, offsets_partition: int, offsets_partition_count: int,
                 offsets_commit_timeout_ms: int = 5_000, offset_metadata_max_bytes: int = 4096,
                 offsets_retention_minutes: float = 10_080, offsets_retention_check_interval_ms: int = 600_000,
                 retry_backoff_ms: int = 100, group_initial_rebalance_delay_ms: int = 3_000,
                 group_min_session_timeout_ms: int = 6_000, group_max_session_timeout_ms: int = 1_800_000,
                 group_max_size: int = 1_000, group_consumer_session_timeout_ms: int = 45_000,
                 group_consumer_heartbeat_interval_ms: int = 5_000) -> None:
        self.partition = offsets_partition
        self.partition_count = offsets_partition_count
        self.clock = SystemClock()
        self._image_asked_ms = -IMAGE_ASK_INTERVAL_MS   # when the controller was last asked for an image
        self._transaction_verifier: TransactionVerifier | None = None   # made at the first TxnOffsetCommit
        self.shard = CoordinatorShard(
            offsets=OffsetStore(offset_metadata_max_bytes=offset_metadata_max_bytes,
                                offsets_retention_ms=int(offsets_retention_minutes * 60_000)),
            groups=GroupManager(group_initial_rebalance_delay_ms=group_initial_rebalance_delay_ms,
                                group_min_session_timeout_ms=group_min_session_timeout_ms,
                                group_max_session_timeout_ms=group_max_session_timeout_ms,
                                max_group_size=group_max_size),
            clock=self.clock, append=self._append, partitions_per_topic=self._partitions_per_topic,
            offsets_retention_check_interval_ms=offsets_retention_check_interval_ms,
            join_poll_interval_ms=int(self.TICK_S * 1000),
            consumer_groups=ConsumerGroups(session_timeout_ms=group_consumer_session_timeout_ms,
                                           heartbeat_interval_ms=group_consumer_heartbeat_interval_ms,
                                           max_group_size=group_max_size),
            topic_metadata=self._topic_metadata, verify_transaction=self._verify_transaction)
        self.serving = NodeServing(coordinator_actor_name(offsets_partition), groups=self,
                                   list_groups=self.list_groups, allocate_producer_id=allocate_producer_id_from_controller,
                                   alter_topic_config=alter_topic_config_on_controller,
                                   max_pipelined_requests=PIPELINED_REQUESTS_PER_CONNECTION)
        self.log = InternalPartition(topic=OFFSETS_TOPIC, partition=offsets_partition, serving=self.serving,
                                     client_id=f"rafka-coordinator-{offsets_partition}", clock=self.clock,
                                     write_timeout_ms=offsets_commit_timeout_ms,
                                     write_timeout_name="offsets.commit.timeout.ms", retry_backoff_ms=retry_backoff_ms,
                                     decode=decode_record, replay=self.shard.replay, tick=self.shard.tick,
                                     tick_s=self.TICK_S, replay_marker=self.shard.replay_marker)
        register_coordinator(self.serving.metrics, self.shard, lambda: self.log.load.loaded)
        self.lag = ConsumerLag(self.log.nodes, image=lambda: self.serving.image, loaded=lambda: self.log.load.loaded,
                               committed=lambda: self.shard.offsets.offsets_by_group, clock=self.clock)
        register_consumer_lag(self.serving.metrics, self.lag.samples)
        self.serving.metrics_exporter.refresh_before_export(self.lag.refresh)
        # Loading starts from a call to ourselves (an actor cannot start tasks in
        # __init__), retried: a restarting actor's call to itself from __init__ can fail
        # with ACTOR_UNAVAILABLE ("the actor is restarting"; seen with Ray 2.60, the
        # coordinator then never loaded). Every request also starts it if it is not.
        ray.get_runtime_context().current_actor.start_loading.options(max_task_retries=-1).remote()

    TICK_S = 0.1  # how often session expiry and join deadlines are checked

    # --- loading ------------------------------------------------------------------

    async def start_loading(self) -> None:
        self.log.start()

    def _require_loaded(self, group: str) -> None:
        self.log.start()
        if partition_for_group(group, self.partition_count) != self.partition:
            raise NotCoordinator(f"group {group!r} lives in {OFFSETS_TOPIC}-"
                                 f"{partition_for_group(group, self.partition_count)}, not {self.partition}")
        self.log.require_loaded()

    # --- writes -------------------------------------------------------------------

    async def _append(self, records: list, kind: WriteKind = None) -> None:
        """The shard's append (actors.internal_partition): acks=all to the
        partition's leader, a transactional batch for a TxnOffsetCommit, a
        WriteTxnMarkers for a marker; returns once acknowledged (the shard
        replays then)."""
        if isinstance(kind, TxnMarkerWrite):
            await self.log.append_marker(producer_id=kind.producer_id, producer_epoch=kind.producer_epoch,
                                         coordinator_epoch=kind.coordinator_epoch, commit=kind.commit)
            return
        encoded = [(encode_key(key), encode_value(value)) for key, value in records]
        if isinstance(kind, TransactionalBatch):
            await self.log.append(encoded, producer_id=kind.producer_id, producer_epoch=kind.producer_epoch)
        else:
            await self.log.append(encoded)

    async def _verify_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int):
        """KIP-890 before a TxnOffsetCommit (core.coordinator_shard._verified): does
        the transaction hold this partition? The transaction coordinator's answer
        (None, or its error as it gave it), asked over the partition's connections
        (the cluster user's; bounded by offsets.commit.timeout.ms)."""
        if self._transaction_verifier is None:
            self._transaction_verifier = TransactionVerifier(lambda: self.serving.image, self.log.nodes)
        partition = (OFFSETS_TOPIC, self.partition)
        answers = await self._transaction_verifier.verify(transactional_id, producer_id, producer_epoch, [partition])
        return answers[partition]

    async def _partitions_per_topic(self, topics: set[str]) -> dict[str, int]:
        """Partition counts of the topics of a commit (unknown ones are refused)."""
        return {t: count for t, (_, count) in (await self._topic_metadata(topics)).items()}

    async def _topic_metadata(self, topics: set[str] | None) -> dict:
        """{topic: (topic id, partition count)} (None: of every topic) from the newest
        cluster image (asked of the controller afresh when a topic is not in it yet,
        a topic just created; at most every IMAGE_ASK_INTERVAL_MS, since a KIP-848
        member subscribed to a topic that does not exist asks at every heartbeat).
        A consumer group (KIP-848) sees a count that grows, or a topic its regex
        matches, at its members' next heartbeats, as Kafka's sees a new metadata
        image."""
        if (topics is not None and not set(topics) <= set(self.serving.image.topics)
                and self.clock.now_ms() - self._image_asked_ms >= IMAGE_ASK_INTERVAL_MS):
            self._image_asked_ms = self.clock.now_ms()
            try:
                await self.log.refresh_image()
            except Exception as error:   # the controller gone or restarting: the image held answers
                logger.info("coordinator %d: asking the controller for the image failed: %s", self.partition, error)
        image = self.serving.image
        names = image.topics if topics is None else topics
        return {t: (image.topics[t].topic_id, len(image.topics[t].partitions)) for t in names if t in image.topics}

    # --- requests: checked here (ownership, loading), decided by the shard ------------

    async def commit_offsets(self, group: str, offsets: dict, member_id: str = "",
                             generation: int = -1, group_instance_id: str | None = None) -> dict:
        """offsets: {(topic, partition): (offset, leader_epoch, metadata)}. Returns
        {(topic, partition): None or the partition's error}."""
        self._require_loaded(group)
        return await self.shard.commit_offsets(group, offsets, member_id, generation, group_instance_id,
                                               on_queued=admit_next)

    async def fetch_offsets(self, group: str, partitions: list | None = None, *,
                            require_stable: bool = False) -> dict:
        """{(topic, partition): (offset, leader_epoch, metadata) or None, or
        UNSTABLE_OFFSET_COMMIT with `require_stable` while one is pending}."""
        self._require_loaded(group)
        return self.shard.fetch_offsets(group, partitions, require_stable=require_stable)

    async def commit_transactional_offsets(self, group: str, offsets: dict, **txn) -> dict:
        """TxnOffsetCommit (CoordinatorShard.commit_transactional_offsets:
        transactional_id, producer_id, producer_epoch, member_id, generation,
        group_instance_id)."""
        self._require_loaded(group)
        return await self.shard.commit_transactional_offsets(group, offsets, **txn, on_queued=admit_next)

    async def complete_transaction(self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                                   commit: bool) -> None:
        """A transaction's marker for this partition (WriteTxnMarkers)."""
        self.log.start()
        self.log.require_loaded()
        await self.shard.complete_transaction(producer_id=producer_id, producer_epoch=producer_epoch,
                                              coordinator_epoch=coordinator_epoch, commit=commit)

    async def join_group(self, group: str, member_id: str, **join) -> dict:
        """Parks until this join's generation completes (CoordinatorShard.join_group:
        group_instance_id, client_id, client_host, protocol_type, protocols,
        session_timeout_ms, rebalance_timeout_ms). The assignment comes from sync_group."""
        self._require_loaded(group)
        return await self.shard.join_group(group, member_id, **join)

    async def sync_group(self, group: str, member_id: str, generation: int, **sync) -> dict:
        """CoordinatorShard.sync_group: the leader's assignments, a follower's wait for them."""
        self._require_loaded(group)
        return await self.shard.sync_group(group, member_id, generation, **sync)

    async def heartbeat(self, group: str, member_id: str, generation: int,
                        group_instance_id: str | None = None) -> None:
        self._require_loaded(group)
        await self.shard.heartbeat(group, member_id, generation, group_instance_id)

    async def leave_group(self, group: str, members: list) -> list:
        """[(member id, instance id)] -> each one's error or None."""
        self._require_loaded(group)
        return await self.shard.leave_group(group, members)

    async def consumer_group_heartbeat(self, group: str, **heartbeat):
        """CoordinatorShard.consumer_group_heartbeat (KIP-848): a HeartbeatAnswer."""
        self._require_loaded(group)
        return await self.shard.consumer_group_heartbeat(group, **heartbeat)

    async def consumer_group_describe(self, group: str) -> dict:
        self._require_loaded(group)
        return self.shard.consumer_group_describe(group)

    async def delete_offsets(self, group: str, partitions: list) -> dict:
        """Kafka's OffsetDelete: {(topic, partition): None or its error}."""
        self._require_loaded(group)
        return await self.shard.delete_offsets(group, partitions)

    async def describe_group(self, group: str) -> dict:
        """State, generation, members (client, host, subscribed topics, assignment);
        Empty for a group known only by its offsets, Dead for an unknown one."""
        self._require_loaded(group)
        return self.shard.describe_group(group)

    async def list_groups(self) -> list[dict]:
        """Every group of this partition: [{group, state}], those known only by
        their committed offsets included (Empty)."""
        self.log.start()
        self.log.require_loaded()
        return self.shard.list_groups()

    async def delete_group(self, group: str) -> None:
        """Kafka's DeleteGroups (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND): tombstones for
        the group's offsets and the group, acknowledged once replicated."""
        self._require_loaded(group)
        await self.shard.delete_group(group)

    async def ping(self) -> dict:
        self.log.start()
        endpoint = await self.serving.start()
        load = self.log.load
        return {"partition": self.partition, "loaded": load.loaded, "pid": os.getpid(),
                "load_position": load.position, "load_error": load.error, "load_failed": load.failure is not None,
                "endpoint": endpoint, "rack": broker_label(), "image_version": self.serving.image.version}

    # --- the Kafka protocol -------------------------------------------------------

    def coordinator_for(self, group_id: str):
        """GroupHost: this actor, if it coordinates the group."""
        return self if partition_for_group(group_id, self.partition_count) == self.partition else None

    def offsets_partition_coordinator(self, partition: int):
        """GroupHost: this actor, for its own partition's transaction markers."""
        return self if partition == self.partition else None

    async def update_image(self, image) -> None:
        self.offer_image(image)

    def offer_image(self, image) -> None:
        """A newer image is kept; one that names a newer leader epoch for this
        partition than the one its failed load read from starts the load again."""
        self.log.offer_image(image)
