"""A coordinator actor's partition of its internal topic (a group coordinator's
`__consumer_offsets` partition, a transaction coordinator's `__transaction_state`
partition): what both actors do with it, so that each stays a shell around its
core shard.

  * the leader: found in the newest cluster image the actor holds; after a
    failed request the image is asked of the controller afresh (`forget_leader`),
    so a write costs no controller call;
  * writes (`append`): the shard's records encoded as one batch and produced
    (acks=all, on the wire) to the leader, retried on retriable errors
    (protocol.retry's rule, and the controller dead or restarting: the leader
    lookup asks it over Ray) until `write_timeout_ms`, then REQUEST_TIMED_OUT
    (retriable); returns once the leader acknowledged, so the records are below
    the HW (invariant 8). A write started for a load that was replaced
    (`load_again`) is not retried: its shard is gone, and a late record must not
    land after the new shard's;
  * transaction markers (`append_marker`, the group coordinator's only): a
    WriteTxnMarkers of one marker to the leader, with the same retries and
    timeout; the leader checks the epochs and answers once replicated;
  * loading (actors.coordinator_load): started by the actor's first call (an
    actor cannot start tasks in __init__), COORDINATOR_LOAD_IN_PROGRESS until
    done (`require_loaded`), NOT_COORDINATOR after a failed load until an image
    names a newer leader epoch for the partition (`offer_image` then loads again);
  * the ticker: `tick()` every `tick_s`, once loaded; a failed tick is logged and
    the next one tries what is still due.
Callers: actors.coordinator, actors.transaction_coordinator.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import ray

from rafka.actors.cluster_credential import cluster_login
from rafka.actors.coordinator_load import Decode, PartitionLoad
from rafka.actors.serving import NodeServing, controller
from rafka.core.broker_identity import BROKER_ID_LABEL
from rafka.core.errors import CoordinatorLoadInProgress, KafkaError, NetworkException, NotCoordinator, RequestTimedOut
from rafka.core.records import ATTR_TRANSACTIONAL, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, RecordInput, encode_batch
from rafka.core.replica import ACKS_ALL
from rafka.core.transaction_shard import TxnMarker
from rafka.protocol import producing
from rafka.protocol.txn_markers import write_txn_markers_answers, write_txn_markers_request
from rafka.protocol.network import NodeConnections
from rafka.protocol.retry import is_retriable, kafka_cause
from rafka.protocol.tls import cluster_client_context

logger = logging.getLogger(__name__)

# (key bytes, value bytes or None) of one record to write
EncodedRecord = tuple[bytes, bytes | None]


class InternalPartition:
    def __init__(self, *, topic: str, partition: int, serving: NodeServing, client_id: str, clock,
                 write_timeout_ms: int, write_timeout_name: str, retry_backoff_ms: int,
                 decode: Decode, replay: Callable, tick: Callable[[], Awaitable[None]], tick_s: float,
                 replay_marker: Callable[..., None] | None = None,
                 on_loaded: Callable[[], None] = lambda: None,
                 on_leader_epoch: Callable[[int], None] = lambda leader_epoch: None) -> None:
        """`write_timeout_name`: the setting `write_timeout_ms` is, for the timeout's
        message (offsets.commit.timeout.ms, request.timeout.ms); `on_loaded()`: at
        the end of every load that completes (before `tick` runs for it);
        `on_leader_epoch(epoch)`: the partition's leader epoch in every image taken
        (pushed or asked for); `replay_marker`: the load replays transaction
        markers into it (actors.coordinator_load)."""
        self.topic, self.partition = topic, partition
        self.serving = serving
        self.clock = clock
        self.write_timeout_ms = write_timeout_ms
        self.write_timeout_name = write_timeout_name
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._decode = decode
        self._tick_once = tick
        self.tick_s = tick_s
        self._on_loaded = on_loaded
        self._on_leader_epoch = on_leader_epoch
        self._image_stale = True     # ask the controller for the image before the first lookup
        self.nodes = NodeConnections(client_id=client_id, request_timeout_ms=write_timeout_ms, sasl=cluster_login,
                                     tls=cluster_client_context())
        self._replay_marker = replay_marker
        self.load = self._new_load(replay)
        self._loader: asyncio.Task | None = None
        self._ticker: asyncio.Task | None = None

    def _new_load(self, replay: Callable) -> PartitionLoad:
        # `leader` may ask the controller over Ray: Ray's errors are retried too
        return PartitionLoad(topic=self.topic, partition=self.partition, leader=self.leader, nodes=self.nodes,
                             decode=self._decode, replay=replay, replay_marker=self._replay_marker,
                             ask_timeout_s=self.write_timeout_ms / 1000,
                             retry_backoff_s=self.retry_backoff_s,
                             may_retry_also=lambda error: isinstance(error, ray.exceptions.RayError),
                             on_retry=lambda _error: self.forget_leader())

    # --- loading and ticking ----------------------------------------------------------

    def start(self) -> None:
        """From the event loop: the loader and the ticker, if not running yet."""
        if self._loader is None:
            load = self.load

            async def run() -> None:
                await load.run()
                if load.loaded and load is self.load:
                    self._on_loaded()
            self._loader = asyncio.get_running_loop().create_task(run())
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    def load_again(self, replay: Callable) -> None:
        """Drop the load (and stop retrying the writes made for it) and load anew
        into `replay`."""
        if self._loader is not None:
            self._loader.cancel()
            self._loader = None
        self.load = self._new_load(replay)
        self.start()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            if not self.load.loaded:
                continue
            try:
                await self._tick_once()
            except Exception as error:  # the next tick retries what is still due
                logger.warning("coordinator of %s-%d: its timers failed: %s", self.topic, self.partition, error)

    def require_loaded(self) -> None:
        if self.load.failure is not None:
            raise NotCoordinator(f"the coordinator of {self.topic}-{self.partition} failed to load it: "
                                 f"{self.load.error}")
        if not self.load.loaded:
            raise CoordinatorLoadInProgress(f"the coordinator of {self.topic}-{self.partition} is loading it")

    def offer_image(self, image) -> None:
        """A newer image is kept; one that names a newer leader epoch for the
        partition than the one its failed load read from starts the load again."""
        self.serving.offer_image(image)
        try:
            _, leader_epoch = self.serving.image.leader_endpoint(self.topic, self.partition)
        except KafkaError:
            return
        if self.load.load_again_for(leader_epoch):
            logger.warning("coordinator of %s-%d: a new leader (epoch %d): loading again after the failed load",
                           self.topic, self.partition, leader_epoch)
            self._loader = None
            self.start()
        self._on_leader_epoch(leader_epoch)

    # --- the leader ---------------------------------------------------------------------

    async def leader(self) -> tuple[tuple[str, int], int]:
        """((host, port) of the partition's leader, leader epoch), from the newest
        cluster image; after a failed request (`forget_leader`) the image is asked
        of the controller afresh."""
        if self._image_stale:
            await self.refresh_image()
            self._image_stale = False
        try:
            return self.serving.image.leader_endpoint(self.topic, self.partition)
        except KafkaError:
            self._image_stale = True
            raise

    def forget_leader(self) -> None:
        self._image_stale = True

    async def refresh_image(self) -> None:
        try:
            found = await controller()
        except ValueError as error:   # Ray's "no such actor": not registered (yet), retriable as a lost connection
            raise NetworkException(f"the controller is not registered: {error}") from error
        self.offer_image(await found.cluster_image.remote())

    # --- writes -------------------------------------------------------------------------

    async def append(self, records: list[EncodedRecord], *, producer_id: int = NO_PRODUCER_ID,
                     producer_epoch: int = NO_PRODUCER_EPOCH) -> None:
        """acks=all to the partition's leader, retried on retriable errors until
        the write timeout; returns once acknowledged. With a `producer_id`, one
        transactional batch of that producer (a TxnOffsetCommit's), without a
        sequence (core.producer_state: a coordinator's write) and without a
        transactional id (the coordinator verified the transaction before it
        queued the write: core.coordinator_shard)."""
        batch = encode_batch([RecordInput(value, key, self.clock.now_ms()) for key, value in records],
                             producer_id=producer_id, producer_epoch=producer_epoch,
                             attributes=ATTR_TRANSACTIONAL if producer_id != NO_PRODUCER_ID else 0)

        async def produce(address, remaining_ms: int) -> None:
            producing.produce_answer(await self.nodes.request(address, producing.produce_request(
                topic=self.topic, partition=self.partition, records=batch, acks=ACKS_ALL,
                timeout_ms=remaining_ms)), topic=self.topic, partition=self.partition)
        await self._write(produce)

    async def append_marker(self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                            commit: bool) -> None:
        """A transaction's COMMIT or ABORT marker, written by the leader
        (WriteTxnMarkers) and replicated; retried as `append`. The leader's
        INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED raises."""
        markers = [TxnMarker(self.topic, self.partition, producer_id, producer_epoch, coordinator_epoch, commit)]

        async def write(address, remaining_ms: int) -> None:
            answer = write_txn_markers_answers(await self.nodes.request(
                address, write_txn_markers_request(markers), timeout_ms=remaining_ms), markers)
            error = answer[(self.topic, self.partition)]
            if error is not None:
                raise error
        await self._write(write)

    async def _write(self, send: Callable[[tuple[str, int], int], Awaitable[None]]) -> None:
        """`send(leader address, remaining ms)` until it succeeds, retried on
        retriable errors until the write timeout."""
        load = self.load
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.write_timeout_ms / 1000
        while True:
            remaining_ms = int((deadline - loop.time()) * 1000)
            if remaining_ms <= 0:
                raise RequestTimedOut(f"{self.topic}-{self.partition}: the write was not replicated "
                                      f"within {self.write_timeout_name} ({self.write_timeout_ms})")
            if load is not self.load:
                raise NotCoordinator(f"{self.topic}-{self.partition} is being loaded again: the write is dropped")
            try:
                address, _ = await self.leader()
                await send(address, remaining_ms)
                return
            except Exception as error:
                # protocol.retry's rule, and the controller dead or restarting (`leader`
                # asks it for the image over Ray): the image is asked again
                if not (is_retriable(error) or isinstance(error, ray.exceptions.RayActorError)):
                    cause = kafka_cause(error)
                    raise cause if isinstance(cause, KafkaError) else error
                self.forget_leader()
                await asyncio.sleep(min(self.retry_backoff_s, max(0.0, deadline - loop.time())))


def broker_label() -> str | None:
    """The broker id of the node this coordinator runs on: the broker whose node
    clients reach it through (core.cluster_image.broker_view)."""
    return ray.get_runtime_context().get_node_labels().get(BROKER_ID_LABEL)
