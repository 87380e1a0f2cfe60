"""The transaction coordinator actor of one `__transaction_state` partition: a
thin asyncio shell around core.TransactionShard (which decides: InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn with its markers, the timeout sweep,
transactional.id expiration, Describe/ListTransactions; see its docstring).

What the actor adds, as the group coordinator actor does for its shard (both on
actors.internal_partition):
  * loading: at start (and so after every restart) it reads its partition from
    the partition's leader up to the HW and replays every record; until then
    every request gets COORDINATOR_LOAD_IN_PROGRESS. The loaded shard takes a
    coordinator epoch from the controller, at least the leader epoch the load read
    at and above every one taken for the partition before, so it rises on every
    load as Kafka's does, a restart of this actor without a leader election
    included (the markers carry it, and a partition leader refuses markers of an
    older one); then it completes every transaction left in
    PrepareCommit/PrepareAbort (Kafka's failover);
  * a newer leader epoch of the partition in an image (a leader election):
    Kafka's coordinator resigns and the new leader's loads the partition again
    at the new epoch; here the shard is closed (its requests in flight, its
    marker sends and its writes not yet acknowledged end with NOT_COORDINATOR)
    and a new one loads, so the cache is always what the log holds;
  * writes: the shard's records, acks=all to the partition's leader
    (`request_timeout_ms`, Kafka's request.timeout.ms, as its
    TransactionStateManager appends);
  * markers: WriteTxnMarkers to each partition's leader (protocol.txn_markers);
  * producer ids: blocks from the controller (`allocate_producer_ids`,
    core.producer_ids), the same counter every node's idempotent producer ids
    come from;
  * the shard's `tick()` every TICK_S (it runs each sweep when due).

Named `txn-coordinator:<partition>` in namespace `rafka`, detached, restartable,
spread over the broker nodes; the broker a client reaches it through is the one
it runs on (FindCoordinator key type 1, protocol.edge). Its own Kafka node
answers the transaction APIs for its ids (NOT_COORDINATOR for the others).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

import ray

from rafka.actors.internal_partition import InternalPartition, broker_label
from rafka.actors.serving import (NodeServing, allocate_producer_id_from_controller,
                                  allocate_producer_ids_from_controller, alter_topic_config_on_controller,
                                  next_transaction_coordinator_epoch_from_controller)
from rafka.core.actor_names import TRANSACTION_STATE_TOPIC, transaction_coordinator_actor_name
from rafka.core.clock import SystemClock
from rafka.core.errors import KafkaError, NotCoordinator
from rafka.core.producer_ids import ProducerIdAllocator
from rafka.core.transaction_log import decode_record, encode_key, encode_value, partition_for
from rafka.core.transaction_shard import TransactionShard
from rafka.core.transaction_state import TRANSACTION_MAX_TIMEOUT_MS_DEFAULT, TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT
from rafka.protocol.txn_markers import WireMarkerSender

REQUEST_TIMEOUT_MS_DEFAULT = 30_000   # Kafka's request.timeout.ms

logger = logging.getLogger(__name__)


class TransactionCoordinatorActor:
    TICK_S = 0.25   # the shard's sweeps run when due (their intervals are seconds); this is how late at most

    def __init__(self, *, transaction_state_partition: int, transaction_state_partition_count: int,
                 offsets_partition_count: int, request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
                 retry_backoff_ms: int = 100, transaction_max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS_DEFAULT,
                 transactional_id_expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT,
                 abort_timed_out_transactions_interval_ms: int = 10_000,
                 remove_expired_transactional_ids_interval_ms: int = 3_600_000) -> None:
        self.partition = transaction_state_partition
        self.partition_count = transaction_state_partition_count
        self.clock = SystemClock()
        self.producer_ids = ProducerIdAllocator(allocate_producer_ids_from_controller)   # kept across reloads
        self._shard_options = dict(
            partition=transaction_state_partition, partition_count=transaction_state_partition_count,
            offsets_partition_count=offsets_partition_count, transaction_max_timeout_ms=transaction_max_timeout_ms,
            transactional_id_expiration_ms=transactional_id_expiration_ms,
            abort_timed_out_transactions_interval_ms=abort_timed_out_transactions_interval_ms,
            remove_expired_transactional_ids_interval_ms=remove_expired_transactional_ids_interval_ms,
            marker_retry_backoff_ms=retry_backoff_ms)
        self.shard = self._new_shard()
        self.loaded_leader_epoch = -1   # of the leader the serving shard's load read from
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._taking_epoch: asyncio.Task | None = None
        self.serving = NodeServing(transaction_coordinator_actor_name(transaction_state_partition), transactions=self,
                                   allocate_producer_id=allocate_producer_id_from_controller,
                                   alter_topic_config=alter_topic_config_on_controller)
        self.log = InternalPartition(topic=TRANSACTION_STATE_TOPIC, partition=transaction_state_partition,
                                     serving=self.serving, client_id=f"rafka-txn-coordinator-{self.partition}",
                                     clock=self.clock, write_timeout_ms=request_timeout_ms,
                                     write_timeout_name="request.timeout.ms", retry_backoff_ms=retry_backoff_ms,
                                     decode=decode_record, replay=self.shard.replay,
                                     tick=lambda: self.shard.tick(), tick_s=self.TICK_S, on_loaded=self._loaded,
                                     on_leader_epoch=self._resign_before)
        self.markers = WireMarkerSender(self.log.nodes, image=lambda: self.serving.image,
                                        refresh=self.log.refresh_image, request_timeout_ms=request_timeout_ms)
        # as the group coordinator's: loading starts from a call to ourselves, retried
        ray.get_runtime_context().current_actor.start_loading.options(max_task_retries=-1).remote()

    def _new_shard(self) -> TransactionShard:
        # the coordinator epoch is the controller's, once the load is done (`_loaded`)
        return TransactionShard(coordinator_epoch=-1, clock=self.clock, append=self._append,
                                send_markers=self._send_markers, producer_ids=self.producer_ids,
                                **self._shard_options)

    # --- loading ------------------------------------------------------------------

    async def start_loading(self) -> None:
        self.log.start()

    def _loaded(self) -> None:
        """The load is done: the shard serves once it has its coordinator epoch
        (until then it answers COORDINATOR_LOAD_IN_PROGRESS), unless it resigned
        meanwhile."""
        shard, leader_epoch = self.shard, self.log.load.leader_epoch

        async def take_epoch() -> None:
            while shard is self.shard and not shard.closed:
                try:
                    epoch = await next_transaction_coordinator_epoch_from_controller(self.partition, leader_epoch)
                except Exception as error:   # the controller gone, restarting or slow: asked again
                    logger.info("transaction coordinator %d: %s", self.partition, error)
                    await asyncio.sleep(self.retry_backoff_s)
                    continue
                if shard is self.shard and not shard.closed:
                    shard.coordinator_epoch, self.loaded_leader_epoch = epoch, leader_epoch
                    shard.finish_loading()
                    # an image that named a newer leader while the shard waited was let
                    # pass (`_resign_before` leaves a loading shard alone): looked at now
                    with contextlib.suppress(KafkaError):
                        self._resign_before(self.serving.image.leader_endpoint(TRANSACTION_STATE_TOPIC,
                                                                               self.partition)[1])
                return
        self._taking_epoch = asyncio.get_running_loop().create_task(take_epoch())

    def _require_loaded(self, transactional_id: str) -> None:
        self.log.start()
        owner = partition_for(transactional_id, self.partition_count)
        if owner != self.partition:
            raise NotCoordinator(f"{transactional_id!r} lives in {TRANSACTION_STATE_TOPIC}-{owner}, "
                                 f"not {self.partition}")
        self.log.require_loaded()

    # --- the shard's writes and markers -------------------------------------------

    async def _append(self, records: list) -> None:
        await self.log.append([(encode_key(key), encode_value(value)) for key, value in records])

    async def _send_markers(self, markers: list) -> dict:
        return await self.markers(markers)

    # --- requests: checked here (ownership, loading), decided by the shard ----------

    async def init_producer_id(self, transactional_id: str, *, txn_timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> tuple[int, int]:
        self._require_loaded(transactional_id)
        return await self.shard.init_producer_id(transactional_id, txn_timeout_ms=txn_timeout_ms, expected=expected)

    async def add_partitions(self, transactional_id: str, *, producer_id: int, producer_epoch: int,
                             partitions) -> None:
        self._require_loaded(transactional_id)
        await self.shard.add_partitions(transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
                                        partitions=partitions)

    async def verify_partitions(self, transactional_id: str, *, producer_id: int, producer_epoch: int,
                                partitions) -> dict:
        self._require_loaded(transactional_id)
        return self.shard.verify_partitions(transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
                                            partitions=partitions)

    async def add_offsets(self, transactional_id: str, *, producer_id: int, producer_epoch: int,
                          group_id: str) -> None:
        self._require_loaded(transactional_id)
        await self.shard.add_offsets(transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
                                     group_id=group_id)

    async def end_transaction(self, transactional_id: str, *, producer_id: int, producer_epoch: int, commit: bool,
                              transaction_version: int = 0) -> tuple[int, int]:
        self._require_loaded(transactional_id)
        return await self.shard.end_transaction(transactional_id, producer_id=producer_id,
                                                producer_epoch=producer_epoch, commit=commit,
                                                transaction_version=transaction_version)

    async def describe_transaction(self, transactional_id: str):
        self._require_loaded(transactional_id)
        return self.shard.describe_transaction(transactional_id)

    async def list_transactions(self, *, states=(), producer_ids=(), duration_ms: int = -1):
        self.log.start()
        self.log.require_loaded()
        return self.shard.list_transactions(states=states, producer_ids=producer_ids, duration_ms=duration_ms)

    async def ping(self) -> dict:
        self.log.start()
        endpoint = await self.serving.start()
        load = self.log.load
        return {"partition": self.partition, "loaded": load.loaded and not self.shard.loading, "pid": os.getpid(),
                "coordinator_epoch": self.shard.coordinator_epoch, "load_position": load.position,
                "load_error": load.error, "load_failed": load.failure is not None, "endpoint": endpoint,
                "rack": broker_label(), "image_version": self.serving.image.version}

    # --- the Kafka protocol (handlers.txn_coordinator's TransactionHost) --------------

    def transaction_coordinator_for(self, transactional_id: str):
        return self if partition_for(transactional_id, self.partition_count) == self.partition else None

    def transaction_coordinators(self) -> list:
        return [self]

    async def update_image(self, image) -> None:
        self.offer_image(image)

    def offer_image(self, image) -> None:
        self.log.offer_image(image)

    def _resign_before(self, leader_epoch: int) -> None:
        """An image (pushed, or asked for by a write) names `leader_epoch` for the
        partition: newer than the loaded shard's, the shard resigns and a new one
        loads."""
        if self.shard.loading or leader_epoch <= self.loaded_leader_epoch:
            return
        logger.info("transaction coordinator %d: %s-%d has a new leader (epoch %d, loaded at %d): loading again",
                    self.partition, TRANSACTION_STATE_TOPIC, self.partition, leader_epoch, self.loaded_leader_epoch)
        self.shard.close()
        self.shard = self._new_shard()
        self.log.load_again(self.shard.replay)
