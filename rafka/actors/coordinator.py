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
min.insync.replicas, no leader) fails with REQUEST_TIMED_OUT, a retriable error,
and changes nothing in the cache.

Named `coordinator:<offsets partition>` in namespace `rafka`, detached,
restartable, spread over the broker nodes.
Membership: join parks until the group's join phase completes (every member
rejoined, or the rebalance deadline passed), as Kafka's JoinGroup does; sync,
heartbeat and leave answer at once (after the group's write in flight, if any); a
ticker expires members whose session timed out, expires offsets past retention and
completes joins whose deadline passed.
"""

from __future__ import annotations

import asyncio
import logging
import os

import ray

from rafka.core.broker_identity import BROKER_ID_LABEL

from rafka.actors.consumer_lag import ConsumerLag
from rafka.actors.replica import NAMESPACE
from rafka.actors.serving import (NodeServing, allocate_producer_id_from_controller,
                                  alter_topic_config_on_controller)
from rafka.actors.cluster_credential import cluster_login
from rafka.protocol.network import NodeConnections
from rafka.protocol.tls import cluster_client_context
from rafka.actors.coordinator_load import PartitionLoad
from rafka.protocol.retry import is_retriable, kafka_cause
from rafka.core.actor_names import CONTROLLER_NAME, OFFSETS_TOPIC, coordinator_actor_name
from rafka.core.clock import SystemClock
from rafka.core.coordinator_shard import CoordinatorShard
from rafka.core.errors import CoordinatorLoadInProgress, KafkaError, NetworkException, NotCoordinator, RequestTimedOut
from rafka.core.group_manager import GroupManager
from rafka.core.kafka_metrics import register_consumer_lag, register_coordinator
from rafka.core.offset_store import OffsetStore
from rafka.core.offsets_schema import encode_key, encode_value, partition_for_group
from rafka.core.records import RecordInput, encode_batch
from rafka.core.replica import ACKS_ALL
from rafka.protocol import producing
from rafka.protocol.pipelining import admit_next

# A member's commits are batched into one append only as far as they are started
# together: 16 per connection (a node's default is 5) lets a consumer's
# ASYNC_COMMITS_UNANSWERED_MAX (16) commits all be queued, so an append carries up
# to 16 of them, not 2 or 3 (group_bench: 1,100 -> 1,420 commits/s). Each parked
# commit holds only its answer's state; the write queue bounds what all hold.
PIPELINED_REQUESTS_PER_CONNECTION = 16

logger = logging.getLogger(__name__)


class GroupCoordinatorActor:
    def __init__(self, *, offsets_partition: int, offsets_partition_count: int,
                 offsets_commit_timeout_ms: int = 5_000, offset_metadata_max_bytes: int = 4096,
                 offsets_retention_minutes: float = 10_080, offsets_retention_check_interval_ms: int = 600_000,
                 retry_backoff_ms: int = 100, group_initial_rebalance_delay_ms: int = 3_000,
                 group_min_session_timeout_ms: int = 6_000, group_max_session_timeout_ms: int = 1_800_000,
                 group_max_size: int = 1_000) -> None:
        self.partition = offsets_partition
        self.partition_count = offsets_partition_count
        self.offsets_commit_timeout_ms = offsets_commit_timeout_ms
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.clock = SystemClock()
        self.shard = CoordinatorShard(
            offsets=OffsetStore(offset_metadata_max_bytes=offset_metadata_max_bytes,
                                offsets_retention_ms=int(offsets_retention_minutes * 60_000)),
            groups=GroupManager(group_initial_rebalance_delay_ms=group_initial_rebalance_delay_ms,
                                group_min_session_timeout_ms=group_min_session_timeout_ms,
                                group_max_session_timeout_ms=group_max_session_timeout_ms,
                                max_group_size=group_max_size),
            clock=self.clock, append=self._append, partitions_per_topic=self._partitions_per_topic,
            offsets_retention_check_interval_ms=offsets_retention_check_interval_ms,
            join_poll_interval_ms=int(self.TICK_S * 1000))
        self._image_stale = True     # ask the controller for the image before the first lookup
        self._nodes = NodeConnections(client_id=f"rafka-coordinator-{offsets_partition}",
                                      request_timeout_ms=offsets_commit_timeout_ms, sasl=cluster_login,
                                      tls=cluster_client_context())
        # `_leader` may ask the controller over Ray: Ray's errors are retried too
        self._load = PartitionLoad(topic=OFFSETS_TOPIC, partition=offsets_partition, leader=self._leader,
                                   nodes=self._nodes, replay=self.shard.replay,
                                   ask_timeout_s=offsets_commit_timeout_ms / 1000, retry_backoff_s=self.retry_backoff_s,
                                   may_retry_also=lambda error: isinstance(error, ray.exceptions.RayError),
                                   on_retry=lambda _error: self._forget_leader())
        self._loader: asyncio.Task | None = None
        self._ticker: asyncio.Task | None = None
        self.serving = NodeServing(coordinator_actor_name(offsets_partition), groups=self,
                                   list_groups=self.list_groups, allocate_producer_id=allocate_producer_id_from_controller,
                                   alter_topic_config=alter_topic_config_on_controller,
                                   max_pipelined_requests=PIPELINED_REQUESTS_PER_CONNECTION)
        register_coordinator(self.serving.metrics, self.shard, lambda: self._load.loaded)
        self.lag = ConsumerLag(self._nodes, image=lambda: self.serving.image, loaded=lambda: self._load.loaded,
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
        self._start_loading()

    def _start_loading(self) -> None:
        """From the event loop: the loader and the ticker, if not running yet."""
        if self._loader is None:
            self._loader = asyncio.get_running_loop().create_task(self._load.run())
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.TICK_S)
            if not self._load.loaded:
                continue
            try:
                await self.shard.tick()
            except Exception as error:  # the next tick retries what is still due
                logger.warning("coordinator %d: expiring members or offsets failed: %s", self.partition, error)

    async def _leader(self) -> tuple[tuple[str, int], int]:
        """((host, port) of this coordinator's partition leader, leader epoch), from
        the newest cluster image; after a failed request (`_forget_leader`) the image
        is asked of the controller afresh: a commit costs no controller call."""
        if self._image_stale:
            await self._refresh_image()
            self._image_stale = False
        try:
            return self.serving.image.leader_endpoint(OFFSETS_TOPIC, self.partition)
        except KafkaError:
            self._image_stale = True
            raise

    def _forget_leader(self) -> None:
        self._image_stale = True

    def _require_loaded(self, group: str) -> None:
        self._start_loading()
        if partition_for_group(group, self.partition_count) != self.partition:
            raise NotCoordinator(f"group {group!r} lives in {OFFSETS_TOPIC}-"
                                 f"{partition_for_group(group, self.partition_count)}, not {self.partition}")
        self._require_loaded_partition()

    def _require_loaded_partition(self) -> None:
        if self._load.failure is not None:
            raise NotCoordinator(f"coordinator {self.partition} failed to load {OFFSETS_TOPIC}-{self.partition}: "
                                 f"{self._load.error}")
        if not self._load.loaded:
            raise CoordinatorLoadInProgress(f"coordinator {self.partition} is loading {OFFSETS_TOPIC}")

    # --- writes -------------------------------------------------------------------

    async def _append(self, records: list) -> None:
        """The shard's append: acks=all to the partition's leader, retried on
        retriable errors until the commit timeout; returns once acknowledged (the
        shard replays then)."""
        batch = encode_batch([RecordInput(encode_value(value), encode_key(key), self.clock.now_ms())
                              for key, value in records])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.offsets_commit_timeout_ms / 1000
        while True:
            remaining_ms = int((deadline - loop.time()) * 1000)
            if remaining_ms <= 0:
                raise RequestTimedOut(f"{OFFSETS_TOPIC}-{self.partition}: the write was not replicated "
                                      f"within offsets.commit.timeout.ms ({self.offsets_commit_timeout_ms})")
            try:
                address, _ = await self._leader()
                producing.produce_answer(await self._nodes.request(address, producing.produce_request(
                    topic=OFFSETS_TOPIC, partition=self.partition, records=batch, acks=ACKS_ALL,
                    timeout_ms=remaining_ms)), topic=OFFSETS_TOPIC, partition=self.partition)
                return
            except Exception as error:
                # protocol.retry's rule, and the controller dead or restarting (`_leader`
                # asks it for the image over Ray): the image is asked again
                if not (is_retriable(error) or isinstance(error, ray.exceptions.RayActorError)):
                    cause = kafka_cause(error)
                    raise cause if isinstance(cause, KafkaError) else error
                self._forget_leader()
                await asyncio.sleep(min(self.retry_backoff_s, max(0.0, deadline - loop.time())))

    async def _partitions_per_topic(self, topics: set[str]) -> dict[str, int]:
        """Partition counts for an assignment, from the newest cluster image (asked of
        the controller afresh only when a subscribed topic is not in it yet: a topic
        just created). A count that grows later reaches the group as Kafka's does:
        with the next rebalance."""
        if not set(topics) <= set(self.serving.image.topics):
            await self._refresh_image()
        image = self.serving.image
        return {t: len(image.topics[t].partitions) for t in topics if t in image.topics}

    async def _refresh_image(self) -> None:
        try:
            controller = ray.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
        except ValueError as error:   # Ray's "no such actor": not registered (yet), retriable as a lost connection
            raise NetworkException(f"the controller is not registered: {error}") from error
        self.offer_image(await controller.cluster_image.remote())

    # --- requests: checked here (ownership, loading), decided by the shard ------------

    async def commit_offsets(self, group: str, offsets: dict, member_id: str = "",
                             generation: int = -1, group_instance_id: str | None = None) -> dict:
        """offsets: {(topic, partition): (offset, leader_epoch, metadata)}. Returns
        {(topic, partition): None or the partition's error}."""
        self._require_loaded(group)
        return await self.shard.commit_offsets(group, offsets, member_id, generation, group_instance_id,
                                               on_queued=admit_next)

    async def fetch_offsets(self, group: str, partitions: list | None = None) -> dict:
        """{(topic, partition): (offset, leader_epoch, metadata) or None}."""
        self._require_loaded(group)
        return self.shard.fetch_offsets(group, partitions)

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
        self._require_loaded_partition()
        return self.shard.list_groups()

    async def delete_group(self, group: str) -> None:
        """Kafka's DeleteGroups (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND): tombstones for
        the group's offsets and the group, acknowledged once replicated."""
        self._require_loaded(group)
        await self.shard.delete_group(group)

    async def ping(self) -> dict:
        self._start_loading()
        endpoint = await self.serving.start()
        return {"partition": self.partition, "loaded": self._load.loaded, "pid": os.getpid(),
                "load_position": self._load.position, "load_error": self._load.error,
                "load_failed": self._load.failure is not None,
                "endpoint": endpoint, "rack": _broker_label(), "image_version": self.serving.image.version}

    # --- the Kafka protocol -------------------------------------------------------

    def coordinator_for(self, group_id: str):
        """GroupHost: this actor, if it coordinates the group."""
        return self if partition_for_group(group_id, self.partition_count) == self.partition else None

    async def update_image(self, image) -> None:
        self.offer_image(image)

    def offer_image(self, image) -> None:
        """A newer image is kept; one that names a newer leader epoch for this
        partition than the one its failed load read from starts the load again."""
        self.serving.offer_image(image)
        try:
            _, leader_epoch = self.serving.image.leader_endpoint(OFFSETS_TOPIC, self.partition)
        except KafkaError:
            return
        if self._load.load_again_for(leader_epoch):
            logger.warning("coordinator %d: %s-%d has a new leader (epoch %d): loading again after the failed load",
                           self.partition, OFFSETS_TOPIC, self.partition, leader_epoch)
            self._loader = None
            self._start_loading()


def _broker_label() -> str | None:
    """The broker id of the node this coordinator runs on: the broker whose node
    clients reach it through (core.cluster_image.broker_view)."""
    return ray.get_runtime_context().get_node_labels().get(BROKER_ID_LABEL)
