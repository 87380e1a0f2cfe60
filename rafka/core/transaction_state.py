"""A transactional id's state at its transaction coordinator: the states, the one
table of which state may follow which, and every transition the coordinator
makes (KIP-98, with KIP-360's epoch bump on InitProducerId and KIP-890's epoch
bump on every EndTxn for transaction version 2).

The rules are Apache Kafka's, read from kafka.coordinator.transaction
(TransactionMetadata.scala, TransactionCoordinator.scala,
TransactionStateManager.scala) at apache/kafka 1eb7644 (October 2024).

Two steps per change, as Kafka does it: `prepare_*` checks the move and returns
a `Prepared`: the metadata with `pending_state` set (which blocks any other
move) and the `TxnTransit` to write to `__transaction_state`; once that record
is written and replicated, `complete_transition_to(transit)` yields the new
metadata; if the write fails, `abandon_pending()` clears the pending state.
Every value here is immutable: a transition returns new metadata.

Invariants:
  a state is entered only from one of VALID_PREVIOUS_STATES[state]; any other
  move is IllegalTxnTransition (a coordinator bug, Kafka's IllegalStateException)
  at most one move is pending at a time
  a producer epoch never reaches 32767 (Short.MaxValue) in a client's hands: an
  epoch of 32766 or more is exhausted and the next one comes with a new producer id,
  so the coordinator can always bump once more to fence
  completing a transition checks the written record against the metadata (same
  producer id, epoch unchanged or bumped by one or restarted at 0 with a new id,
  partitions only grow while Ongoing) and refuses anything else
Requests a client sends are answered with typed Kafka errors
(CONCURRENT_TRANSACTIONS, PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING,
INVALID_TXN_STATE): `init_producer_id`, `add_partitions`, `end_transaction`.

Pure logic, no I/O; time comes in as `now_ms` or a clock, new producer ids from
a callable. Caller: core.transaction_shard (the transaction coordinator's logic).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable
from typing import NamedTuple

from rafka.core.errors import (ConcurrentTransactions, InvalidProducerEpoch, InvalidProducerIdMapping,
                               InvalidTransactionTimeout, InvalidTxnState, KafkaError, ProducerFenced)
from rafka.core.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

EPOCH_MAX = 32767                       # Java's Short.MaxValue: the epoch is an int16 on the wire
EPOCH_EXHAUSTED_AT = EPOCH_MAX - 1      # kept free so the coordinator can always fence once more
NO_TIMESTAMP = -1
TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT = 7 * 24 * 60 * 60 * 1000    # transactional.id.expiration.ms
TRANSACTION_MAX_TIMEOUT_MS_DEFAULT = 15 * 60 * 1000                  # transaction.max.timeout.ms


class TxnState(enum.Enum):
    EMPTY = "Empty"                             # no transaction open (new id, or after InitProducerId)
    ONGOING = "Ongoing"                         # partitions or offsets added
    PREPARE_COMMIT = "PrepareCommit"            # EndTxn(commit) written; markers being sent
    PREPARE_ABORT = "PrepareAbort"              # EndTxn(abort), timeout or fencing written; markers being sent
    COMPLETE_COMMIT = "CompleteCommit"          # every partition has its COMMIT marker
    COMPLETE_ABORT = "CompleteAbort"            # every partition has its ABORT marker
    DEAD = "Dead"                               # the id expired; its tombstone is being written
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"   # bumping the epoch to fence an open transaction's producer

    @property
    def id(self) -> int:
        """The state's byte in the TransactionLogValue record."""
        return STATE_IDS[self]


S = TxnState
STATE_IDS: dict[TxnState, int] = {S.EMPTY: 0, S.ONGOING: 1, S.PREPARE_COMMIT: 2, S.PREPARE_ABORT: 3,
                                  S.COMPLETE_COMMIT: 4, S.COMPLETE_ABORT: 5, S.DEAD: 6, S.PREPARE_EPOCH_FENCE: 7}
STATES_BY_ID: dict[int, TxnState] = {state_id: state for state, state_id in STATE_IDS.items()}

# The transition table, keyed by the state entered (Kafka's validPreviousStates).
# PrepareEpochFence is never completed: the abort it leads to replaces it as the
# pending state, so it never becomes the current state and nothing leaves it.
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
# States in which an idle transactional id may expire (transactional.id.expiration.ms).
EXPIRATION_ALLOWED: frozenset[TxnState] = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
_TRANSACTION_OPEN: frozenset[TxnState] = frozenset({S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT})

TopicPartition = tuple[str, int]


class IllegalTxnTransition(Exception):
    """A coordinator bug: a move the table (or the completion check) does not allow."""

    def __init__(self, transactional_id: str, message: str) -> None:
        super().__init__(f"transactional id {transactional_id!r}: {message}")
        self.transactional_id = transactional_id


def check_transition(from_state: TxnState, to_state: TxnState, *, transactional_id: str = "") -> None:
    """The one gate every prepared move passes."""
    if from_state not in VALID_PREVIOUS_STATES[to_state]:
        raise IllegalTxnTransition(transactional_id, f"cannot move from {from_state.value} to {to_state.value}")


def is_epoch_exhausted(producer_epoch: int) -> bool:
    return producer_epoch >= EPOCH_EXHAUSTED_AT


def supports_epoch_bump(transaction_version: int) -> bool:
    """transaction.version 2 (KIP-890 part 2) bumps the epoch on every EndTxn."""
    return transaction_version >= 2


def validate_transaction_timeout_ms(txn_timeout_ms: int, *, max_timeout_ms: int = TRANSACTION_MAX_TIMEOUT_MS_DEFAULT
                                    ) -> None:
    if not 0 < txn_timeout_ms <= max_timeout_ms:
        raise InvalidTransactionTimeout(f"transaction.timeout.ms {txn_timeout_ms} is not in "
                                        f"(0, {max_timeout_ms}] (transaction.max.timeout.ms)")


def fenced_error_for(api: str, version: int) -> type[KafkaError]:
    """PRODUCER_FENCED as an older client understands it: InitProducerId below v4
    and EndTxn, AddPartitionsToTxn, AddOffsetsToTxn below v2 answer
    INVALID_PRODUCER_EPOCH instead (KafkaApis does this per response)."""
    oldest_with_fenced = {"InitProducerId": 4, "EndTxn": 2, "AddPartitionsToTxn": 2, "AddOffsetsToTxn": 2}[api]
    return ProducerFenced if version >= oldest_with_fenced else InvalidProducerEpoch


@dataclasses.dataclass(frozen=True)
class TxnTransit:
    """The target of a prepared move: what goes into the transaction log record."""

    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp_ms: int
    txn_last_update_timestamp_ms: int
    transaction_version: int


class Prepared(NamedTuple):
    metadata: TransactionMetadata   # with pending_state set: hold this until the write completes
    transit: TxnTransit             # write this; then metadata.complete_transition_to(transit)


@dataclasses.dataclass(frozen=True)
class TransactionMetadata:
    """One transactional id. `previous_producer_id`: the id before the last
    rotation; `next_producer_id`: the id a version-2 EndTxn that exhausted the
    epoch hands out once the markers are written; `last_producer_epoch`: the epoch
    before the last bump, so a retried InitProducerId or EndTxn is recognised."""

    transactional_id: str
    producer_id: int
    txn_timeout_ms: int
    txn_last_update_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    state: TxnState = TxnState.EMPTY
    topic_partitions: frozenset[TopicPartition] = frozenset()
    txn_start_timestamp_ms: int = NO_TIMESTAMP
    transaction_version: int = 0
    pending_state: TxnState | None = None
    # An epoch fence whose write failed already raised the epoch in memory (never
    # told to a client): the next fence reuses it instead of bumping again.
    has_failed_epoch_fence: bool = False

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    # -- prepared moves -------------------------------------------------------

    def prepare_fence_producer_epoch(self) -> Prepared:
        if self.producer_epoch == EPOCH_MAX:
            raise IllegalTxnTransition(self.transactional_id, "cannot fence: the epoch is at 32767 and would overflow")
        bumped_epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(S.PREPARE_EPOCH_FENCE, producer_id=self.producer_id, producer_epoch=bumped_epoch,
                             last_producer_epoch=NO_PRODUCER_EPOCH, txn_timeout_ms=self.txn_timeout_ms,
                             topic_partitions=self.topic_partitions,
                             txn_start_timestamp_ms=self.txn_start_timestamp_ms,
                             now_ms=self.txn_last_update_timestamp_ms)

    def prepare_increment_producer_epoch(self, *, txn_timeout_ms: int, expected_epoch: int | None,
                                         now_ms: int) -> Prepared:
        """InitProducerId on an id with no open transaction. No expected epoch: a
        new producer, bump and forget the last epoch. Expected = current (or no
        epoch yet): a producer recovering from an error (KIP-360), bump and remember.
        Expected = last epoch: a retry of a bump that succeeded, hand out the same
        epoch again. Anything else: PRODUCER_FENCED."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTxnTransition(self.transactional_id,
                                       f"epochs of producer id {self.producer_id} are exhausted: rotate the id")
        bumped_epoch = self.producer_epoch + 1
        if expected_epoch is None:
            next_epoch, last_epoch = bumped_epoch, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            next_epoch, last_epoch = bumped_epoch, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            next_epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            raise ProducerFenced(f"expected epoch {expected_epoch} is neither the current epoch "
                                 f"{self.producer_epoch} nor the last one {self.last_producer_epoch}")
        return self._prepare(S.EMPTY, producer_id=self.producer_id, producer_epoch=next_epoch,
                             last_producer_epoch=last_epoch, txn_timeout_ms=txn_timeout_ms,
                             topic_partitions=frozenset(), txn_start_timestamp_ms=NO_TIMESTAMP, now_ms=now_ms)

    def prepare_producer_id_rotation(self, *, new_producer_id: int, txn_timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> Prepared:
        if self.state in _TRANSACTION_OPEN:
            raise IllegalTxnTransition(self.transactional_id, "cannot rotate the producer id inside a transaction")
        return self._prepare(S.EMPTY, producer_id=new_producer_id, producer_epoch=0,
                             last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             txn_timeout_ms=txn_timeout_ms, topic_partitions=frozenset(),
                             txn_start_timestamp_ms=NO_TIMESTAMP, now_ms=now_ms)

    def prepare_add_partitions(self, partitions: Iterable[TopicPartition], *, now_ms: int) -> Prepared:
        # The transaction starts (for its timeout) with its first partition.
        starting = self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT)
        return self._prepare(S.ONGOING, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                             last_producer_epoch=self.last_producer_epoch, txn_timeout_ms=self.txn_timeout_ms,
                             topic_partitions=self.topic_partitions | frozenset(partitions),
                             txn_start_timestamp_ms=now_ms if starting else self.txn_start_timestamp_ms,
                             now_ms=now_ms)

    def prepare_abort_or_commit(self, state: TxnState, *, transaction_version: int, next_producer_id: int,
                                now_ms: int) -> Prepared:
        if supports_epoch_bump(transaction_version):   # never overflows: exhausted epochs rotate before
            epoch, last_epoch = self.producer_epoch + 1, self.producer_epoch
        else:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        return self._prepare(state, producer_id=self.producer_id, next_producer_id=next_producer_id,
                             producer_epoch=epoch, last_producer_epoch=last_epoch,
                             txn_timeout_ms=self.txn_timeout_ms, topic_partitions=self.topic_partitions,
                             txn_start_timestamp_ms=self.txn_start_timestamp_ms, now_ms=now_ms,
                             transaction_version=transaction_version)

    def prepare_complete(self, *, now_ms: int) -> Prepared:
        """The markers are written: PrepareCommit -> CompleteCommit, PrepareAbort ->
        CompleteAbort. A version-2 commit that exhausted the epoch switches to its
        next producer id, at epoch 0, here."""
        state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        if supports_epoch_bump(self.transaction_version) and self.next_producer_id != NO_PRODUCER_ID:
            producer_id, epoch = self.next_producer_id, 0
        else:
            producer_id, epoch = self.producer_id, self.producer_epoch
        prepared = self._prepare(state, producer_id=producer_id, producer_epoch=epoch,
                                 last_producer_epoch=self.producer_epoch, txn_timeout_ms=self.txn_timeout_ms,
                                 topic_partitions=frozenset(), txn_start_timestamp_ms=self.txn_start_timestamp_ms,
                                 now_ms=now_ms, transaction_version=self.transaction_version)
        # the PrepareX record was written, so a failed fence before it no longer matters
        return prepared._replace(metadata=dataclasses.replace(prepared.metadata, has_failed_epoch_fence=False))

    def prepare_dead(self) -> Prepared:
        return self._prepare(S.DEAD, producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                             last_producer_epoch=self.last_producer_epoch, txn_timeout_ms=self.txn_timeout_ms,
                             topic_partitions=frozenset(), txn_start_timestamp_ms=self.txn_start_timestamp_ms,
                             now_ms=self.txn_last_update_timestamp_ms)

    def _prepare(self, state: TxnState, *, producer_id: int, producer_epoch: int, last_producer_epoch: int,
                 txn_timeout_ms: int, topic_partitions: frozenset[TopicPartition], txn_start_timestamp_ms: int,
                 now_ms: int, next_producer_id: int = NO_PRODUCER_ID, transaction_version: int = 0) -> Prepared:
        # Moves other than EndTxn and its completion record transaction version 0,
        # as Kafka's shorter prepareTransitionTo does.
        if self.pending_state is not None:
            raise IllegalTxnTransition(self.transactional_id, f"cannot prepare {state.value}: "
                                       f"{self.pending_state.value} is still pending")
        if producer_id < 0:
            raise IllegalTxnTransition(self.transactional_id, f"illegal new producer id {producer_id}")
        # A new id's epoch is -1 until its first InitProducerId completes; only Dead may keep it.
        if state is not S.DEAD and producer_epoch < 0:
            raise IllegalTxnTransition(self.transactional_id, f"illegal new producer epoch {producer_epoch}")
        check_transition(self.state, state, transactional_id=self.transactional_id)
        transit = TxnTransit(producer_id=producer_id, previous_producer_id=self.producer_id,
                             next_producer_id=next_producer_id, producer_epoch=producer_epoch,
                             last_producer_epoch=last_producer_epoch, txn_timeout_ms=txn_timeout_ms, state=state,
                             topic_partitions=frozenset(topic_partitions),
                             txn_start_timestamp_ms=txn_start_timestamp_ms, txn_last_update_timestamp_ms=now_ms,
                             transaction_version=transaction_version)
        return Prepared(dataclasses.replace(self, pending_state=state), transit)

    # -- after the write ------------------------------------------------------

    def abandon_pending(self, *, epoch_fence_failed: bool = False) -> TransactionMetadata:
        """The transaction log write failed: nothing changed but the pending state
        (and, for a failed epoch fence, the flag that stops a second bump)."""
        return dataclasses.replace(self, pending_state=None,
                                   has_failed_epoch_fence=self.has_failed_epoch_fence or epoch_fence_failed)

    def complete_transition_to(self, transit: TxnTransit) -> TransactionMetadata:
        """The transit's record is written and replicated: apply it, after checking
        it is the move that was prepared and that it keeps the invariants."""
        to_state = self.pending_state
        if to_state is None:
            self._refuse(transit, "no move is pending")
        if to_state is not transit.state:
            self._refuse(transit, f"the pending move is to {to_state.value}")
        changes: dict = {}
        epoch_bump_v2 = supports_epoch_bump(transit.transaction_version)
        if to_state is S.EMPTY:        # InitProducerId
            if ((self.producer_epoch != transit.producer_epoch and not self._valid_epoch_bump(transit))
                    or transit.topic_partitions or transit.txn_start_timestamp_ms != NO_TIMESTAMP):
                self._refuse(transit, "not a valid producer epoch bump, or a transaction is in it")
            # The start time is the record's (-1, no transaction): Kafka keeps the last
            # transaction's in memory, which its reload then reads as -1.
            changes.update(txn_timeout_ms=transit.txn_timeout_ms, producer_epoch=transit.producer_epoch,
                           last_producer_epoch=transit.last_producer_epoch, producer_id=transit.producer_id,
                           previous_producer_id=transit.previous_producer_id,
                           txn_start_timestamp_ms=transit.txn_start_timestamp_ms)
        elif to_state is S.ONGOING:    # AddPartitionsToTxn / AddOffsetsToTxn
            if (not self._valid_epoch(transit) or not self.topic_partitions <= transit.topic_partitions
                    or self.txn_timeout_ms != transit.txn_timeout_ms):
                self._refuse(transit, "epoch, partitions or timeout do not follow")
            changes.update(txn_start_timestamp_ms=transit.txn_start_timestamp_ms,
                           topic_partitions=self.topic_partitions | transit.topic_partitions)
        elif to_state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):    # EndTxn
            if (not self._valid_epoch(transit) or self.topic_partitions != transit.topic_partitions
                    or self.txn_timeout_ms != transit.txn_timeout_ms
                    or self.txn_start_timestamp_ms != transit.txn_start_timestamp_ms):
                self._refuse(transit, "epoch, partitions, timeout or start time changed")
            if epoch_bump_v2:
                changes.update(producer_epoch=transit.producer_epoch, last_producer_epoch=transit.last_producer_epoch,
                               next_producer_id=transit.next_producer_id)
        elif to_state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT):  # markers written
            if (not self._valid_epoch(transit) or self.txn_timeout_ms != transit.txn_timeout_ms
                    or transit.txn_start_timestamp_ms == NO_TIMESTAMP):
                self._refuse(transit, "epoch or timeout changed, or the transaction never started")
            changes.update(txn_start_timestamp_ms=transit.txn_start_timestamp_ms, topic_partitions=frozenset())
            if epoch_bump_v2:
                changes.update(producer_epoch=transit.producer_epoch, last_producer_epoch=transit.last_producer_epoch,
                               previous_producer_id=transit.previous_producer_id, producer_id=transit.producer_id,
                               next_producer_id=transit.next_producer_id)
        elif to_state is S.PREPARE_EPOCH_FENCE:
            self._refuse(transit, "PrepareEpochFence is replaced by PrepareAbort, never completed")
        else:                          # Dead: the id is removed from the cache, never completed
            self._refuse(transit, "an expiring id is removed, not moved to Dead")
        return dataclasses.replace(self, **changes, transaction_version=transit.transaction_version,
                                   txn_last_update_timestamp_ms=transit.txn_last_update_timestamp_ms,
                                   pending_state=None, state=to_state)

    def _valid_epoch(self, transit: TxnTransit) -> bool:
        v2 = supports_epoch_bump(transit.transaction_version)
        overflow_complete = (v2 and transit.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
                             and transit.producer_epoch == 0)
        # a version-2 EndTxn carries the bumped epoch; the epoch it was made at is the last one
        if overflow_complete or (v2 and transit.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)):
            transit_epoch = transit.last_producer_epoch
        else:
            transit_epoch = transit.producer_epoch
        transit_producer_id = transit.previous_producer_id if overflow_complete else transit.producer_id
        return transit_epoch == self.producer_epoch and transit_producer_id == self.producer_id

    def _valid_epoch_bump(self, transit: TxnTransit) -> bool:
        return (transit.producer_epoch == self.producer_epoch + 1
                or (transit.producer_epoch == 0 and transit.producer_id != self.producer_id))

    def _refuse(self, transit: TxnTransit, why: str):
        raise IllegalTxnTransition(self.transactional_id,
                                   f"cannot complete the move from {self.state.value} to {transit}: {why}")


def new_transaction_metadata(transactional_id: str, *, producer_id: int, txn_timeout_ms: int,
                             now_ms: int) -> TransactionMetadata:
    """A transactional id the coordinator has not seen: Empty, epoch -1 (the first
    InitProducerId bumps it to 0)."""
    return TransactionMetadata(transactional_id=transactional_id, producer_id=producer_id,
                               txn_timeout_ms=txn_timeout_ms, txn_last_update_timestamp_ms=now_ms)


# -- the coordinator's decisions per request ----------------------------------


def init_producer_id(metadata: TransactionMetadata, *, txn_timeout_ms: int,
                     expected: tuple[int, int] | None, now_ms: int,
                     new_producer_id: Callable[[], int]) -> Prepared:
    """InitProducerId for a known transactional id (`expected`: the producer's
    (producer id, epoch), KIP-360). A result in PrepareEpochFence means an open
    transaction must be aborted first: the coordinator runs `end_transaction`
    (abort, not from the client) on it and answers CONCURRENT_TRANSACTIONS, and the
    producer's retry then gets the bumped epoch (or a new producer id)."""
    def valid_producer_id(producer_id: int, epoch: int) -> bool:
        return (metadata.producer_epoch == NO_PRODUCER_EPOCH      # just created (after UNKNOWN_PRODUCER_ID)
                or producer_id == metadata.producer_id            # the epoch is checked by the bump
                or (producer_id == metadata.previous_producer_id  # a retry of a rotation it never heard of
                    and is_epoch_exhausted(epoch)))

    if metadata.pending_transition_in_progress:
        raise ConcurrentTransactions(f"a move to {metadata.pending_state.value} is being written")
    if expected is not None and not valid_producer_id(*expected):
        raise ProducerFenced(f"producer id {expected[0]} is not {metadata.producer_id} "
                             f"(nor its previous id at an exhausted epoch)")
    state = metadata.state
    if state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
        raise ConcurrentTransactions(f"the transaction is in {state.value}: retry once it completes")
    if state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
        if metadata.is_producer_epoch_exhausted and (expected is None or expected[1] == metadata.producer_epoch):
            return metadata.prepare_producer_id_rotation(new_producer_id=new_producer_id(),
                                                         txn_timeout_ms=txn_timeout_ms, now_ms=now_ms,
                                                         record_last_epoch=expected is not None)
        return metadata.prepare_increment_producer_epoch(
            txn_timeout_ms=txn_timeout_ms, expected_epoch=None if expected is None else expected[1], now_ms=now_ms)
    if state is S.ONGOING:
        return metadata.prepare_fence_producer_epoch()
    raise IllegalTxnTransition(metadata.transactional_id, f"found in state {state.value}, which is never current")


def add_partitions(metadata: TransactionMetadata, *, producer_id: int, producer_epoch: int,
                   partitions: Iterable[TopicPartition], now_ms: int) -> Prepared | None:
    """AddPartitionsToTxn (and AddOffsetsToTxn, with the offsets partition). None:
    every partition is in the transaction already, answer at once."""
    partitions = frozenset(partitions)
    if metadata.producer_id != producer_id:
        raise InvalidProducerIdMapping(f"producer id {producer_id} is not {metadata.producer_id}")
    if metadata.producer_epoch != producer_epoch:
        raise ProducerFenced(f"epoch {producer_epoch} is not the current {metadata.producer_epoch}")
    if metadata.pending_transition_in_progress:
        raise ConcurrentTransactions(f"a move to {metadata.pending_state.value} is being written")
    if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        raise ConcurrentTransactions(f"the previous transaction is in {metadata.state.value}")
    if metadata.state is S.ONGOING and partitions <= metadata.topic_partitions:
        return None
    return metadata.prepare_add_partitions(partitions, now_ms=now_ms)


def _end_txn_epoch_bumped(metadata: TransactionMetadata, producer_epoch: int) -> bool:
    """A version-2 EndTxn already bumped the epoch: this request carries the one before."""
    return (metadata.pending_state is not S.PREPARE_EPOCH_FENCE
            and supports_epoch_bump(metadata.transaction_version)
            and metadata.producer_epoch == producer_epoch + 1)


def end_transaction(metadata: TransactionMetadata, *, producer_id: int, producer_epoch: int, commit: bool,
                    from_client: bool, transaction_version: int, now_ms: int,
                    new_producer_id: Callable[[], int]) -> Prepared | None:
    """EndTxn, or the coordinator's own abort (a timed-out transaction, a fence:
    from_client=False, at the server's transaction version). None: a retry of an
    EndTxn already completed; answer success with the current id and epoch."""
    fencing = metadata.pending_state is S.PREPARE_EPOCH_FENCE
    v2_state = not fencing and supports_epoch_bump(metadata.transaction_version)
    retry_on_overflow = (v2_state and metadata.previous_producer_id == producer_id
                         and producer_epoch == EPOCH_EXHAUSTED_AT and metadata.producer_epoch == 0)
    retry_on_epoch_bump = _end_txn_epoch_bumped(metadata, producer_epoch)
    state = metadata.state
    if v2_state:
        # with version 2 the same epoch means the next EndTxn, not a retry
        if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            valid_epoch = retry_on_epoch_bump
        elif state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            valid_epoch = retry_on_epoch_bump or retry_on_overflow
        else:
            valid_epoch = producer_epoch == metadata.producer_epoch
    else:
        valid_epoch = ((not from_client or producer_epoch == metadata.producer_epoch)
                       and producer_epoch >= metadata.producer_epoch)
    if metadata.producer_id != producer_id and not retry_on_overflow:
        raise InvalidProducerIdMapping(f"producer id {producer_id} is not {metadata.producer_id}")
    if not valid_epoch:
        raise ProducerFenced(f"epoch {producer_epoch} is not valid against {metadata.producer_epoch}")
    if metadata.pending_transition_in_progress and not fencing:
        raise ConcurrentTransactions(f"a move to {metadata.pending_state.value} is being written")
    result = "COMMIT" if commit else "ABORT"
    if state is S.ONGOING:
        next_state = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        next_producer_id = NO_PRODUCER_ID
        if supports_epoch_bump(transaction_version) and not fencing and metadata.is_producer_epoch_exhausted:
            next_producer_id = new_producer_id()
        if fencing and not commit:
            # the fence's bumped epoch replaces the pending move and becomes the abort's epoch
            metadata = dataclasses.replace(metadata, pending_state=None, producer_epoch=producer_epoch,
                                           last_producer_epoch=NO_PRODUCER_EPOCH)
        return metadata.prepare_abort_or_commit(next_state, transaction_version=transaction_version,
                                                next_producer_id=next_producer_id, now_ms=now_ms)
    if (state, commit) in ((S.COMPLETE_COMMIT, True), (S.COMPLETE_ABORT, False)):
        return None
    if (state, commit) in ((S.PREPARE_COMMIT, True), (S.PREPARE_ABORT, False)):
        raise ConcurrentTransactions(f"the transaction is in {state.value}: its markers are being written")
    if state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
        raise IllegalTxnTransition(metadata.transactional_id, f"found in state {state.value}, which is never current")
    raise InvalidTxnState(f"the transaction is in {state.value}: {result} does not apply")


def complete_end_transaction(metadata: TransactionMetadata, *, producer_id: int, producer_epoch: int,
                             commit: bool, now_ms: int) -> Prepared:
    """After the PrepareCommit/PrepareAbort record is written: the move to
    Complete*, whose record is written once every partition has its marker."""
    if metadata.producer_id != producer_id:
        raise InvalidProducerIdMapping(f"producer id {producer_id} is not {metadata.producer_id}")
    if metadata.producer_epoch != producer_epoch and not _end_txn_epoch_bumped(metadata, producer_epoch):
        raise ProducerFenced(f"epoch {producer_epoch} is not the current {metadata.producer_epoch}")
    if metadata.pending_transition_in_progress:
        raise ConcurrentTransactions(f"a move to {metadata.pending_state.value} is being written")
    if (metadata.state, commit) in ((S.PREPARE_COMMIT, True), (S.PREPARE_ABORT, False)):
        return metadata.prepare_complete(now_ms=now_ms)
    if metadata.state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
        raise IllegalTxnTransition(metadata.transactional_id,
                                   f"found in state {metadata.state.value}, which is never current")
    raise InvalidTxnState(f"the transaction is in {metadata.state.value}: "
                          f"{'COMMIT' if commit else 'ABORT'} markers do not apply")


# -- background scans ---------------------------------------------------------


class TimedOutTransaction(NamedTuple):
    transactional_id: str
    producer_id: int
    producer_epoch: int


def timed_out_transactions(metadatas: Iterable[TransactionMetadata], *, clock) -> list[TimedOutTransaction]:
    """Ongoing transactions open longer than their transaction.timeout.ms (and not
    in the middle of a move): the coordinator aborts each with
    `prepare_timeout_abort` then `end_transaction`."""
    now_ms = clock.now_ms()
    return [TimedOutTransaction(m.transactional_id, m.producer_id, m.producer_epoch) for m in metadatas
            if not m.pending_transition_in_progress and m.state is S.ONGOING
            and m.txn_start_timestamp_ms + m.txn_timeout_ms < now_ms]


def prepare_timeout_abort(metadata: TransactionMetadata, timed_out: TimedOutTransaction, *,
                          clock) -> Prepared | None:
    """Fence the producer of a timed-out transaction (so it cannot commit what the
    coordinator aborts). None: the id has moved on since the scan (another
    producer id or epoch, a move pending, or the transaction ended and a new one
    began): leave it. The sweep writes one abort at a time, each waiting for its
    acks, so a scan's list can be seconds old when an id's turn comes; Kafka's
    sweep, which does not wait, checks the producer id and epoch alone."""
    if (metadata.producer_id != timed_out.producer_id or metadata.producer_epoch != timed_out.producer_epoch
            or metadata.pending_transition_in_progress or metadata.state is not S.ONGOING
            or metadata.txn_start_timestamp_ms + metadata.txn_timeout_ms >= clock.now_ms()):
        return None
    return metadata.prepare_fence_producer_epoch()


def expired_transactional_ids(metadatas: Iterable[TransactionMetadata], *, clock,
                              transactional_id_expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS_DEFAULT
                              ) -> list[str]:
    """Idle ids (Empty or Complete*, no move pending, untouched for
    transactional.id.expiration.ms): the coordinator prepares Dead for each,
    writes its tombstone and drops it."""
    now_ms = clock.now_ms()
    return [m.transactional_id for m in metadatas
            if not m.pending_transition_in_progress and m.state in EXPIRATION_ALLOWED
            and m.txn_last_update_timestamp_ms <= now_ms - transactional_id_expiration_ms]
