"""The decisions of the transaction coordinator of one `__transaction_state`
partition (Kafka's TransactionCoordinator with its TransactionStateManager and
marker completion, for one partition): InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn with its markers, DescribeTransactions,
ListTransactions, the timeout sweep and transactional.id expiration, over an
injected acks=all append and an injected marker sender. No Ray.

How a change is made (Kafka's two steps, core.transaction_state): the request is
decided on the cached metadata, which then holds the move as pending (any other
move of that id meanwhile answers CONCURRENT_TRANSACTIONS, retriable); the
record is appended; once acked the move completes (`complete_transition_to`
checks it) and the answer goes out; a failed append abandons the move. So no
lock is needed: asyncio runs each decision without a break, and at most one
write per id is ever in flight, which also keeps each id's records in decision
order in the log. An append runs to its end even when the request that made it
is cancelled (its client went away): the cache never differs from what the log
holds plus the one pending move.

EndTxn: the PrepareCommit/PrepareAbort record is written, the client answered,
then markers go to every partition of the transaction (the `send_markers`
callable: the coordinator actor's WriteTxnMarkers to the partition leaders),
retried until each is written, and the CompleteCommit/CompleteAbort record is
written (pending all along, so nothing else moves the id meanwhile). A
coordinator that loads its partition finds the transactions left in Prepare*
and completes them the same way (Kafka's loadTransactionsForTxnTopicPartition).

Invariants:
  the cache is what loading the partition's acked records gives (core.transaction_log
  .replay_into), plus each id's one pending move and the last epochs (which no
  record carries: a loaded id has none, as in Kafka); the tests reload a shard
  from the records written and compare
  a Complete* record is written only after every partition of its transaction
  acknowledged its marker (or is gone); markers carry the epoch the Prepare*
  record holds and this coordinator's epoch
  at most one marker task per transactional id; a closed shard (resigned) sends
  nothing more and answers NOT_COORDINATOR
Pure logic over asyncio; the clock, the append, the marker sender, the sleep
between marker retries and the producer id blocks are passed in. Caller: the
transaction coordinator actor (issue 28, a later slice) and tests' in-process node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable

from rafka.core.actor_names import OFFSETS_TOPIC
from rafka.core.errors import (ConcurrentTransactions, CoordinatorLoadInProgress, CoordinatorNotAvailable,
                               InvalidProducerEpoch, InvalidProducerIdMapping, InvalidRequest, KafkaError,
                               KafkaStorageError, NotCoordinator, NotEnoughReplicas, NotEnoughReplicasAfterAppend,
                               NotLeaderOrFollower, ProducerFenced, RequestTimedOut, TransactionAbortable,
                               TransactionCoordinatorFenced, TransactionalIdNotFound, UnknownTopicOrPartition,
                               UnsupportedForMessageFormat, UnsupportedVersion, coordinator_append_error)
from rafka.core.offsets_schema import partition_for_group
from rafka.core.producer_ids import ProducerIdAllocator
from rafka.core.transaction_log import Record, TxnKey, partition_for, replay_into, value_of
from rafka.core.transaction_state import (TRANSACTION_MAX_TIMEOUT_MS_DEFAULT, TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT,
                                          Prepared, TopicPartition, TransactionMetadata, TxnState,
                                          add_partitions, complete_end_transaction, end_transaction,
                                          expired_transactional_ids, init_producer_id, new_transaction_metadata,
                                          prepare_timeout_abort, supports_epoch_bump, timed_out_transactions,
                                          validate_transaction_timeout_ms)

logger = logging.getLogger(__name__)
S = TxnState

# acks=all append of records to this __transaction_state partition; returns once
# they are below the HW, raises a KafkaError if they could not be written
TxnAppend = Callable[[list[Record]], Awaitable[None]]


@dataclasses.dataclass(frozen=True)
class TxnMarker:
    """One partition's COMMIT or ABORT marker (a WriteTxnMarkers entry)."""
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


# The sender's answer for a partition whose topic no longer exists (no leader in
# the metadata): Kafka drops it from the transaction's markers.
PARTITION_DELETED = "partition deleted"
# {(topic, partition): None (written), PARTITION_DELETED, or the partition's error}
MarkerSender = Callable[[list[TxnMarker]], Awaitable[dict]]

# Kafka's TransactionMarkerRequestCompletionHandler, by error.
_MARKER_RETRIABLE = (UnknownTopicOrPartition, NotLeaderOrFollower, NotEnoughReplicas, NotEnoughReplicasAfterAppend,
                     RequestTimedOut, KafkaStorageError)
_MARKER_CANCELS = (InvalidProducerEpoch, TransactionCoordinatorFenced)   # a newer epoch took over
_MARKER_DROPS_PARTITION = (UnsupportedForMessageFormat, UnsupportedVersion)   # it never took the producer's writes


@dataclasses.dataclass(frozen=True)
class TransactionDescription:
    """DescribeTransactions' answer for one id."""
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    txn_start_timestamp_ms: int
    topic_partitions: frozenset[TopicPartition]


@dataclasses.dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


class TransactionShard:
    def __init__(self, *, partition: int, partition_count: int, coordinator_epoch: int, clock, append: TxnAppend,
                 send_markers: MarkerSender, producer_ids: ProducerIdAllocator, offsets_partition_count: int,
                 transaction_max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS_DEFAULT,
                 transactional_id_expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT,
                 abort_timed_out_transactions_interval_ms: int = 10_000,
                 remove_expired_transactional_ids_interval_ms: int = 3_600_000,
                 transaction_version_level: int = 1, marker_retry_backoff_ms: int = 100,
                 max_tombstones_per_append: int = 500,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """`coordinator_epoch`: the leader epoch of this `__transaction_state`
        partition (markers carry it; a newer one fences them).
        `transaction_version_level`: the cluster's transaction.version (Kafka's
        feature level): 1+ writes value v1, 2+ bumps the epoch on the
        coordinator's own aborts."""
        self.partition = partition
        self.partition_count = partition_count
        self.coordinator_epoch = coordinator_epoch
        self.clock = clock
        self._append = append
        self._send_markers = send_markers
        self.producer_ids = producer_ids
        self.offsets_partition_count = offsets_partition_count
        self.transaction_max_timeout_ms = transaction_max_timeout_ms
        self.transactional_id_expiration_ms = transactional_id_expiration_ms
        self.abort_timed_out_transactions_interval_ms = abort_timed_out_transactions_interval_ms
        self.remove_expired_transactional_ids_interval_ms = remove_expired_transactional_ids_interval_ms
        self.transaction_version_level = transaction_version_level
        self.marker_retry_backoff_ms = marker_retry_backoff_ms
        self.max_tombstones_per_append = max_tombstones_per_append
        self._sleep = sleep
        self.metadata: dict[str, TransactionMetadata] = {}
        self.loading = True
        self.closed = False
        self._marker_tasks: dict[str, asyncio.Task] = {}
        self._next_abort_sweep_ms = 0
        self._next_expiration_ms = 0

    # --- loading and leaving ------------------------------------------------------

    def replay(self, key, value) -> None:
        """One record of the partition, while loading (decoded by core.transaction_log)."""
        if not self.loading:
            raise RuntimeError("records are replayed only while loading; a live write completes its move")
        replay_into(self.metadata, key, value)

    def finish_loading(self) -> None:
        """The partition is loaded up to its HW: serve, and complete every
        transaction left in PrepareCommit/PrepareAbort (its markers again, then
        its Complete* record)."""
        self.loading = False
        now_ms = self.clock.now_ms()
        for tid, metadata in sorted(self.metadata.items()):
            if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                pending = metadata.prepare_complete(now_ms=now_ms)
                self.metadata[tid] = pending.metadata
                self._start_markers(metadata, pending, commit=metadata.state is S.PREPARE_COMMIT)

    def close(self) -> None:
        """Resigned (another coordinator epoch took the partition): stop sending
        markers; requests answer NOT_COORDINATOR."""
        self.closed = True
        for task in self._marker_tasks.values():
            task.cancel()
        self._marker_tasks.clear()

    async def drain_markers(self) -> None:
        """Waits until every marker task in flight has ended (tests, clean shutdown)."""
        while self._marker_tasks:
            await asyncio.wait(list(self._marker_tasks.values()))

    # --- requests -------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, *, txn_timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> tuple[int, int]:
        """InitProducerId with a transactional id: (producer id, epoch). `expected`:
        the producer's current (id, epoch) (v3+, KIP-360), None when it has none.
        An open transaction is aborted first (its producer fenced) and the answer
        is CONCURRENT_TRANSACTIONS: the client retries and gets the next epoch."""
        if not transactional_id:
            raise InvalidRequest("the transactional id is empty")
        validate_transaction_timeout_ms(txn_timeout_ms, max_timeout_ms=self.transaction_max_timeout_ms)
        self._check_serving(transactional_id)
        metadata = self.metadata.get(transactional_id)
        if metadata is None or metadata.is_producer_epoch_exhausted:
            await self.producer_ids.ready()          # a new id is needed: have one at hand
            self._check_serving(transactional_id)
            metadata = self.metadata.get(transactional_id)
        if metadata is None:
            metadata = new_transaction_metadata(transactional_id, producer_id=self.producer_ids.claim(),
                                                txn_timeout_ms=txn_timeout_ms, now_ms=self.clock.now_ms())
            self.metadata[transactional_id] = metadata
        prepared = init_producer_id(metadata, txn_timeout_ms=txn_timeout_ms, expected=expected,
                                    now_ms=self.clock.now_ms(), new_producer_id=self.producer_ids.claim)
        if prepared.transit.state is S.PREPARE_EPOCH_FENCE:
            await self._fence_and_abort(metadata, prepared)
            raise ConcurrentTransactions(f"{transactional_id!r} had an open transaction: it is being aborted, retry")
        written = await self._write(prepared)
        return written.producer_id, written.producer_epoch

    async def add_partitions(self, transactional_id: str, *, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition]) -> None:
        """AddPartitionsToTxn (v0-3, and v4+ without verify_only): once written."""
        if not transactional_id:
            raise InvalidRequest("the transactional id is empty")
        metadata = self._known(transactional_id)
        prepared = add_partitions(metadata, producer_id=producer_id, producer_epoch=producer_epoch,
                                  partitions=partitions, now_ms=self.clock.now_ms())
        if prepared is not None:
            await self._write(prepared)

    def verify_partitions(self, transactional_id: str, *, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, KafkaError | None]:
        """AddPartitionsToTxn v4+ with verify_only (KIP-890, a partition leader
        asking before it appends): None for each partition in the transaction,
        TRANSACTION_ABORTABLE for the others; one error for the whole request
        raises (Kafka's handleVerifyPartitionsInTransaction)."""
        if not transactional_id:
            raise InvalidRequest("the transactional id is empty")
        metadata = self._known(transactional_id)
        if metadata.producer_id != producer_id:
            raise InvalidProducerIdMapping(f"producer id {producer_id} is not {metadata.producer_id}")
        if metadata.producer_epoch != producer_epoch:
            raise ProducerFenced(f"epoch {producer_epoch} is not the current {metadata.producer_epoch}")
        if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise ConcurrentTransactions(f"the transaction is in {metadata.state.value}")
        return {tp: None if tp in metadata.topic_partitions else
                TransactionAbortable(f"{tp[0]}-{tp[1]} is not in the transaction")
                for tp in partitions}

    async def add_offsets(self, transactional_id: str, *, producer_id: int, producer_epoch: int,
                          group_id: str) -> None:
        """AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the
        transaction (its TxnOffsetCommit records get the markers)."""
        offsets_partition = partition_for_group(group_id, self.offsets_partition_count)
        await self.add_partitions(transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
                                  partitions=[(OFFSETS_TOPIC, offsets_partition)])

    async def end_transaction(self, transactional_id: str, *, producer_id: int, producer_epoch: int, commit: bool,
                              transaction_version: int = 0) -> tuple[int, int]:
        """EndTxn: (producer id, epoch) once the PrepareCommit/PrepareAbort record is
        written; the markers and the Complete* record follow in the background. A
        retry of an EndTxn already completed answers at once."""
        if not transactional_id:
            raise InvalidRequest("the transactional id is empty")
        metadata = self._known(transactional_id)
        if supports_epoch_bump(transaction_version) and metadata.is_producer_epoch_exhausted:
            await self.producer_ids.ready()
            metadata = self._known(transactional_id)
        return await self._end(metadata, producer_id=producer_id, producer_epoch=producer_epoch, commit=commit,
                               from_client=True, transaction_version=transaction_version)

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        if not transactional_id:
            raise InvalidRequest("the transactional id is empty")
        self._check_serving(transactional_id)
        metadata = self.metadata.get(transactional_id)
        if metadata is None or metadata.state is S.DEAD:
            raise TransactionalIdNotFound(f"no transaction state for {transactional_id!r}")
        return TransactionDescription(transactional_id, metadata.state.value, metadata.producer_id,
                                      metadata.producer_epoch, metadata.txn_timeout_ms,
                                      metadata.txn_start_timestamp_ms, metadata.topic_partitions)

    def list_transactions(self, *, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          duration_ms: int = -1) -> tuple[list[TransactionListing], list[str]]:
        """ListTransactions' (listings, state filters no state is named by). Empty
        filters match everything; `duration_ms` >= 0 keeps only transactions
        started more than that long ago (v1)."""
        if self.closed:
            raise NotCoordinator("this coordinator resigned")
        if self.loading:
            raise CoordinatorLoadInProgress(f"__transaction_state-{self.partition} is loading")
        states, producer_ids = set(states), set(producer_ids)
        by_name = {state.value: state for state in S}
        unknown = sorted(name for name in states if name not in by_name)
        wanted = {by_name[name] for name in states if name in by_name}
        now_ms = self.clock.now_ms()
        listings = [TransactionListing(m.transactional_id, m.producer_id, m.state.value)
                    for m in sorted(self.metadata.values(), key=lambda m: m.transactional_id)
                    if m.state is not S.DEAD
                    and (not producer_ids or m.producer_id in producer_ids)
                    and (not states or m.state in wanted)
                    and not (duration_ms >= 0 and now_ms - m.txn_start_timestamp_ms <= duration_ms)]
        return listings, unknown

    # --- background: timeouts and expiration -------------------------------------------

    async def tick(self) -> None:
        """Runs the timeout sweep and the expiration when due (Kafka's
        transaction.abort.timed.out.transaction.cleanup.interval.ms and
        transaction.remove.expired.transaction.cleanup.interval.ms)."""
        if self.loading or self.closed:
            return
        now_ms = self.clock.now_ms()
        if now_ms >= self._next_abort_sweep_ms:
            self._next_abort_sweep_ms = now_ms + self.abort_timed_out_transactions_interval_ms
            await self.abort_timed_out_transactions()
        if now_ms >= self._next_expiration_ms:
            self._next_expiration_ms = now_ms + self.remove_expired_transactional_ids_interval_ms
            await self.expire_transactional_ids()

    async def abort_timed_out_transactions(self) -> list[str]:
        """Aborts every Ongoing transaction open past its transaction.timeout.ms,
        fencing its producer (the epoch is bumped, as Kafka's
        abortTimedOutTransactions does). The ids whose PrepareAbort was written."""
        aborted = []
        for timed_out in timed_out_transactions(self.metadata.values(), clock=self.clock):
            metadata = self.metadata.get(timed_out.transactional_id)
            if metadata is None or self.closed:
                continue
            prepared = prepare_timeout_abort(metadata, timed_out, clock=self.clock)
            if prepared is None:
                continue
            try:
                await self._fence_and_abort(metadata, prepared)
            except KafkaError as error:   # the next sweep tries again
                logger.info("aborting timed-out transaction %r failed: %s", timed_out.transactional_id, error)
                continue
            aborted.append(timed_out.transactional_id)
        return aborted

    async def expire_transactional_ids(self) -> list[str]:
        """Writes a tombstone for every id idle past transactional.id.expiration.ms
        (Empty or Complete*, no move pending) and forgets it once acked. The ids
        removed."""
        removed: list[str] = []
        expired = expired_transactional_ids(self.metadata.values(), clock=self.clock,
                                            transactional_id_expiration_ms=self.transactional_id_expiration_ms)
        for start in range(0, len(expired), self.max_tombstones_per_append):
            dying = {}
            for tid in expired[start:start + self.max_tombstones_per_append]:
                metadata = self.metadata.get(tid)
                if metadata is None or metadata.pending_transition_in_progress or self.closed:
                    continue
                dying[tid] = self.metadata[tid] = metadata.prepare_dead().metadata
            if not dying:
                continue
            try:
                await asyncio.shield(self._append([(TxnKey(tid), None) for tid in dying]))
            except Exception as error:
                for tid, pending in dying.items():
                    if self.metadata.get(tid) is pending:
                        self.metadata[tid] = pending.abandon_pending()
                logger.info("expiring transactional ids failed: %s", error)
                break
            for tid, pending in dying.items():
                if self.metadata.get(tid) is pending:
                    del self.metadata[tid]
                    removed.append(tid)
        return removed

    # --- the write path -------------------------------------------------------------

    def _check_serving(self, transactional_id: str) -> None:
        if self.closed or partition_for(transactional_id, self.partition_count) != self.partition:
            raise NotCoordinator(f"{transactional_id!r} is not coordinated by __transaction_state-{self.partition} "
                                 f"here")
        if self.loading:
            raise CoordinatorLoadInProgress(f"__transaction_state-{self.partition} is loading")

    def _known(self, transactional_id: str) -> TransactionMetadata:
        self._check_serving(transactional_id)
        metadata = self.metadata.get(transactional_id)
        if metadata is None:
            raise InvalidProducerIdMapping(f"no producer id is mapped to {transactional_id!r}")
        return metadata

    async def _write(self, prepared: Prepared, *, epoch_fence: bool = False,
                     then: Callable[[TransactionMetadata], object] | None = None):
        """Holds the move pending, appends its record, completes it once acked (or
        abandons it). `then(completed)` runs right after, before any other
        coroutine sees the id. Runs to its end even if the caller is cancelled."""
        tid = prepared.metadata.transactional_id
        self.metadata[tid] = prepared.metadata

        async def append_and_complete():
            try:
                await self._append([(TxnKey(tid), value_of(prepared.transit))])
            except Exception as error:
                if self.metadata.get(tid) is prepared.metadata:
                    self.metadata[tid] = prepared.metadata.abandon_pending(epoch_fence_failed=epoch_fence)
                raise coordinator_append_error(error) from None
            if self.closed or self.metadata.get(tid) is not prepared.metadata:
                raise NotCoordinator(f"{tid!r} left this coordinator while its record was written")
            completed = self.metadata[tid] = prepared.metadata.complete_transition_to(prepared.transit)
            return completed if then is None else then(completed)

        return await asyncio.shield(asyncio.ensure_future(append_and_complete()))

    async def _fence_and_abort(self, before: TransactionMetadata, fence: Prepared) -> None:
        """The coordinator's own abort of an open transaction (InitProducerId of a
        new producer, or a timeout): the epoch fence replaced by PrepareAbort at
        the bumped epoch, at the server's transaction version."""
        self.metadata[before.transactional_id] = fence.metadata
        try:
            await self._end(fence.metadata, producer_id=fence.transit.producer_id,
                            producer_epoch=fence.transit.producer_epoch, commit=False, from_client=False,
                            transaction_version=self.transaction_version_level)
        except BaseException:
            current = self.metadata.get(before.transactional_id)
            if current is fence.metadata:   # the fence was never written: as before
                self.metadata[before.transactional_id] = before
            raise

    async def _end(self, metadata: TransactionMetadata, *, producer_id: int, producer_epoch: int, commit: bool,
                   from_client: bool, transaction_version: int) -> tuple[int, int]:
        prepared = end_transaction(metadata, producer_id=producer_id, producer_epoch=producer_epoch, commit=commit,
                                   from_client=from_client, transaction_version=transaction_version,
                                   now_ms=self.clock.now_ms(), new_producer_id=self.producer_ids.claim)
        if prepared is None:   # a retry of an EndTxn already completed
            return metadata.producer_id, metadata.producer_epoch
        fencing = metadata.pending_state is S.PREPARE_EPOCH_FENCE

        def send_markers(written: TransactionMetadata) -> tuple[int, int]:
            pending = complete_end_transaction(written, producer_id=producer_id, producer_epoch=producer_epoch,
                                               commit=commit, now_ms=self.clock.now_ms())
            self.metadata[written.transactional_id] = pending.metadata
            self._start_markers(written, pending, commit=commit)
            return written.producer_id, written.producer_epoch

        return await self._write(prepared, epoch_fence=fencing, then=send_markers)

    # --- markers --------------------------------------------------------------------

    def _start_markers(self, prepared_state: TransactionMetadata, complete: Prepared, *, commit: bool) -> None:
        tid = prepared_state.transactional_id
        old = self._marker_tasks.pop(tid, None)
        if old is not None:
            old.cancel()
        task = asyncio.get_running_loop().create_task(
            self._complete_with_markers(prepared_state, complete, commit=commit))
        self._marker_tasks[tid] = task

        def done(finished: asyncio.Task) -> None:
            if self._marker_tasks.get(tid) is finished:
                del self._marker_tasks[tid]
            if not finished.cancelled() and finished.exception() is not None:
                logger.error("completing the transaction of %r failed", tid, exc_info=finished.exception())
        task.add_done_callback(done)

    async def _complete_with_markers(self, prepared_state: TransactionMetadata, complete: Prepared, *,
                                     commit: bool) -> None:
        """Markers to every partition until each is written, then the Complete*
        record (retried while the log is not available, as Kafka retries it)."""
        tid = prepared_state.transactional_id
        remaining = set(prepared_state.topic_partitions)
        while remaining:
            markers = [TxnMarker(topic, partition, prepared_state.producer_id, prepared_state.producer_epoch,
                                 self.coordinator_epoch, commit) for topic, partition in sorted(remaining)]
            try:
                outcomes = await self._send_markers(markers)
            except KafkaError as error:
                if not error.retriable:
                    raise
                outcomes = {tp: error for tp in remaining}
            for tp in sorted(remaining):
                outcome = outcomes.get(tp, RequestTimedOut(f"no marker answer for {tp[0]}-{tp[1]}"))
                if outcome is None or outcome == PARTITION_DELETED or isinstance(outcome, _MARKER_DROPS_PARTITION):
                    remaining.discard(tp)
                elif isinstance(outcome, _MARKER_CANCELS):
                    logger.info("markers of %r cancelled: %s answered %s", tid, tp, outcome)
                    return   # a newer producer or coordinator epoch took over
                elif not isinstance(outcome, _MARKER_RETRIABLE) and not (
                        isinstance(outcome, KafkaError) and outcome.retriable):
                    raise RuntimeError(f"unexpected marker answer for {tid!r} at {tp}: {outcome!r}")
            if remaining:
                await self._sleep(self.marker_retry_backoff_ms / 1000)
        while not self.closed:
            if self.metadata.get(tid) is not complete.metadata:
                return   # the cache moved on (reloaded): the new load completes it
            try:
                await asyncio.shield(self._append([(TxnKey(tid), value_of(complete.transit))]))
            except Exception as error:
                mapped = coordinator_append_error(error)
                if isinstance(mapped, CoordinatorNotAvailable):
                    await self._sleep(self.marker_retry_backoff_ms / 1000)
                    continue
                logger.info("writing the completion of %r failed: %s", tid, mapped)
                return   # NOT_COORDINATOR and the like: the next coordinator completes it
            if not self.closed and self.metadata.get(tid) is complete.metadata:
                self.metadata[tid] = complete.metadata.complete_transition_to(complete.transit)
            return

