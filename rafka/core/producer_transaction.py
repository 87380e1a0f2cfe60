"""A transactional producer's side of its transactions (Kafka's client
TransactionManager; states and errors named as kafka-python names them): which
call may run in which state, the moves the answers make, and what each error a
transactional request gets means for the transaction.

Pure: no I/O, no clock. client.producer sends InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn and the transactional Produce batches,
and feeds the outcomes in here.

States, moves (TRANSITIONS, one table; a pair not in it raises IllegalStateError
naming the state and the event, which is what a call out of order gets):

    UNINITIALIZED --init--> INITIALIZING --initialized--> READY --begin--> IN_TRANSACTION
    IN_TRANSACTION --commit--> COMMITTING_TRANSACTION --ended--> READY
    IN_TRANSACTION, ABORTABLE_ERROR --abort--> ABORTING_TRANSACTION --ended--> READY
    ABORTING_TRANSACTION --bump epoch--> INITIALIZING (KIP-360: a batch failed for
        good, so its sequence is unknown: InitProducerId with the current id and
        epoch gets the next epoch, whose sequences start at 0)
    any --fatal error--> FATAL_ERROR (nothing leaves it: close the producer)
A call that timed out leaves its state (INITIALIZING, COMMITTING_TRANSACTION,
ABORTING_TRANSACTION) as it was; calling it again resumes it (Kafka's
handleCachedTransactionRequestResult), hence the self-loops.

What an error means (`outcome_of`, Kafka's per-request handlers):
  RETRY      retriable (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
             CONCURRENT_TRANSACTIONS, a lost connection): the client's one retry
             loop sends it again, finding the coordinator afresh;
  ABORTABLE  the transaction cannot commit; abort_transaction recovers and the
             producer goes on (a Produce batch that failed for good, a refused
             topic or group, a consumer generation the group moved past);
  FATAL      the producer can do nothing more: PRODUCER_FENCED and
             INVALID_PRODUCER_EPOCH (raised as PRODUCER_FENCED, as Kafka's
             client does: a newer producer with this transactional id exists),
             TRANSACTIONAL_ID_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED,
             UNSUPPORTED_VERSION, INVALID_TXN_STATE, and what a request does not
             expect.
Once in ABORTABLE_ERROR or FATAL_ERROR every call but abort (and, for fatal,
that too) raises the error again, a new instance of its type naming it.

Invariants: a Produce batch of a partition goes out only once the partition is
in `partitions` (AddPartitionsToTxn answered); EndTxn is sent only when the
transaction `started` (a partition or a group's offsets were added; Kafka skips
it otherwise); `partitions` is empty outside a transaction.
Caller: client.producer only.
"""

from __future__ import annotations

import enum

from rafka.core.errors import (ClusterAuthorizationFailed, FencedInstanceId, GroupAuthorizationFailed,
                               IllegalGeneration, IllegalStateError, InvalidProducerEpoch, InvalidProducerIdMapping,
                               InvalidTxnState, KafkaError, ProducerFenced,
                               TopicAuthorizationFailed, TransactionAbortable, TransactionalIdAuthorizationFailed,
                               UnknownMemberId, UnknownProducerId, UnsupportedForMessageFormat,
                               UnsupportedVersion)


class TransactionState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


class TxnEvent(enum.Enum):
    INIT = "init_transactions"
    INITIALIZED = "producer id and epoch received"
    BEGIN = "begin_transaction"
    COMMIT = "commit_transaction"
    ABORT = "abort_transaction"
    ENDED = "EndTxn answered"
    BUMP_EPOCH = "EndTxn answered, epoch bump needed"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


S, E = TransactionState, TxnEvent
TRANSITIONS: dict[TransactionState, dict[TxnEvent, TransactionState]] = {
    S.UNINITIALIZED: {E.INIT: S.INITIALIZING},
    S.INITIALIZING: {E.INIT: S.INITIALIZING, E.INITIALIZED: S.READY, E.ABORTABLE_ERROR: S.ABORTABLE_ERROR},
    S.READY: {E.BEGIN: S.IN_TRANSACTION},
    S.IN_TRANSACTION: {E.COMMIT: S.COMMITTING_TRANSACTION, E.ABORT: S.ABORTING_TRANSACTION,
                       E.ABORTABLE_ERROR: S.ABORTABLE_ERROR},
    S.COMMITTING_TRANSACTION: {E.COMMIT: S.COMMITTING_TRANSACTION, E.ENDED: S.READY,
                               E.ABORTABLE_ERROR: S.ABORTABLE_ERROR},
    S.ABORTING_TRANSACTION: {E.ABORT: S.ABORTING_TRANSACTION, E.ENDED: S.READY, E.BUMP_EPOCH: S.INITIALIZING},
    S.ABORTABLE_ERROR: {E.ABORT: S.ABORTING_TRANSACTION, E.ABORTABLE_ERROR: S.ABORTABLE_ERROR},
    S.FATAL_ERROR: {},
}
for _moves in TRANSITIONS.values():   # Kafka: FATAL_ERROR may be entered from anywhere
    _moves[E.FATAL_ERROR] = S.FATAL_ERROR
del _moves

# The states in which batches not yet sent are failed rather than sent (Kafka's
# Sender.maybeAbortBatches): the transaction will not commit.
ABANDONING_STATES = frozenset({S.ABORTING_TRANSACTION, S.ABORTABLE_ERROR, S.FATAL_ERROR})
ERROR_STATES = frozenset({S.ABORTABLE_ERROR, S.FATAL_ERROR})


class TxnApi(enum.Enum):
    INIT_PRODUCER_ID = "InitProducerId"
    ADD_PARTITIONS = "AddPartitionsToTxn"
    ADD_OFFSETS = "AddOffsetsToTxn"
    TXN_OFFSET_COMMIT = "TxnOffsetCommit"
    END_TXN = "EndTxn"
    PRODUCE = "Produce"   # a batch the producer's own retries gave up on: never retried here


class Outcome(enum.Enum):
    RETRY = "retry"
    ABORTABLE = "abortable"
    ABORTABLE_BUMP = "abortable, the epoch bumped after the abort"
    FATAL = "fatal"


A, AB, F = Outcome.ABORTABLE, Outcome.ABORTABLE_BUMP, Outcome.FATAL
# Fatal whatever the request (Kafka's maybeTransitionToErrorState and each handler).
_ALWAYS_FATAL = (ProducerFenced, InvalidProducerEpoch, TransactionalIdAuthorizationFailed,
                 ClusterAuthorizationFailed, UnsupportedVersion, UnsupportedForMessageFormat)
R = Outcome.RETRY
# Per request: (the outcome of an error not named, of retries that ran out of
# time, of the errors named). Retries out of time: InitProducerId and EndTxn
# keep their state, and the call made again resumes them (both are idempotent
# at the coordinator); for the requests a transaction's content depends on, the
# transaction cannot commit without them (a commit without the consumed offsets
# would let the input be read again): abortable. A Produce batch reaches this
# table only once the producer's own retries gave up on it.
_BY_API: dict[TxnApi, tuple[Outcome, Outcome, dict[type, Outcome]]] = {
    TxnApi.INIT_PRODUCER_ID: (F, R, {}),
    TxnApi.ADD_PARTITIONS: (A, A, {TopicAuthorizationFailed: A, InvalidProducerIdMapping: F, InvalidTxnState: F,
                                   UnknownProducerId: AB, TransactionAbortable: A}),
    TxnApi.ADD_OFFSETS: (F, A, {GroupAuthorizationFailed: A, UnknownProducerId: AB, InvalidProducerIdMapping: AB,
                                TransactionAbortable: A}),
    TxnApi.TXN_OFFSET_COMMIT: (F, A, {GroupAuthorizationFailed: A, FencedInstanceId: A, UnknownMemberId: A,
                                      IllegalGeneration: A, TransactionAbortable: A}),
    TxnApi.END_TXN: (F, R, {InvalidTxnState: F, UnknownProducerId: AB, InvalidProducerIdMapping: AB,
                            TransactionAbortable: A}),
    # Kafka's producer bumps the epoch after the abort when a batch failed for good
    # (epochBumpRequired): the leader may or may not hold it.
    TxnApi.PRODUCE: (AB, AB, {TopicAuthorizationFailed: A}),
}


def outcome_of(api: TxnApi, error: BaseException) -> Outcome:
    """What `error`, answered to `api`, means for the transaction."""
    if isinstance(error, _ALWAYS_FATAL):
        return F
    default, _, special = _BY_API[api]
    for error_type, outcome in special.items():
        if isinstance(error, error_type):
            return outcome
    if api is not TxnApi.PRODUCE and (getattr(error, "retriable", False) or isinstance(error, TimeoutError)):
        return Outcome.RETRY
    return default


def outcome_after_retries(api: TxnApi, error: BaseException) -> Outcome:
    """What `error` means once the request's retries are over: a retriable one
    means they ran out of time."""
    outcome = outcome_of(api, error)
    return _BY_API[api][1] if outcome is Outcome.RETRY else outcome


def is_retriable_for(api: TxnApi):
    """The retry rule of one request (protocol.retry's `retriable=`)."""
    return lambda error: outcome_of(api, getattr(error, "cause", None) or error) is Outcome.RETRY


class ProducerTransaction:
    """One transactional producer's state. Not thread-safe: the producer holds
    its lock around every call."""

    def __init__(self, transactional_id: str) -> None:
        if not isinstance(transactional_id, str) or not transactional_id:
            raise ValueError(f"transactional_id must be a non-empty string, got {transactional_id!r}")
        self.transactional_id = transactional_id
        self.state = S.UNINITIALIZED
        self.last_error: BaseException | None = None
        self.epoch_bump_required = False
        self.partitions: set[tuple[str, int]] = set()      # AddPartitionsToTxn answered for them
        self.groups: set[str] = set()                      # AddOffsetsToTxn answered for them
        self.has_producer_id = False

    @property
    def started(self) -> bool:
        """Whether the coordinator knows of this transaction (EndTxn needed)."""
        return bool(self.partitions or self.groups)

    def move(self, event: TxnEvent) -> None:
        """The table's move, or IllegalStateError naming the state and the event."""
        try:
            self.state = TRANSITIONS[self.state][event]
        except KeyError:
            raise IllegalStateError(f"TransactionalId {self.transactional_id}: Invalid transition attempted from "
                                    f"state {self.state.name} on {event.value}") from None
        if event in (E.ENDED, E.INIT, E.BUMP_EPOCH):   # the transaction is over, with or without a new epoch
            self.partitions.clear()
            self.groups.clear()
        if event in (E.ENDED, E.INITIALIZED):
            self.last_error = None
        if event is E.INITIALIZED:
            self.has_producer_id = True
            self.epoch_bump_required = False

    # --- checks before a call -------------------------------------------------------

    def raise_if_failed(self) -> None:
        """In ABORTABLE_ERROR or FATAL_ERROR: the error again (Kafka's maybeFailWithError)."""
        if self.state in ERROR_STATES:
            raise self.error_state_error()

    def error_state_error(self) -> KafkaError:
        error = self.last_error
        message = (f"TransactionalId {self.transactional_id}: cannot execute transactional method because we are "
                   f"in an error state ({self.state.name}): {error}")
        if isinstance(error, KafkaError):
            return type(error)(message)
        return KafkaError(message)

    def check_send(self) -> None:
        """send() in a transaction: only IN_TRANSACTION (Kafka's maybeAddPartition)."""
        self.raise_if_failed()
        if not self.has_producer_id:
            raise IllegalStateError("Cannot perform a 'send' before completing a call to init_transactions "
                                    "when transactions are enabled.")
        if self.state is not S.IN_TRANSACTION:
            raise IllegalStateError(f"Cannot call send in state {self.state.name}")

    def check_send_offsets(self) -> None:
        self.raise_if_failed()
        if self.state is not S.IN_TRANSACTION:
            raise IllegalStateError(f"Cannot send offsets if a transaction is not in progress "
                                    f"(currentState= {self.state.name})")

    def begin_commit(self) -> None:
        """COMMITTING_TRANSACTION (again, resuming one that timed out)."""
        self.raise_if_failed()
        self.move(E.COMMIT)

    def begin_abort(self) -> None:
        """ABORTING_TRANSACTION, from an abortable error too; a fatal one raises."""
        if self.state is S.FATAL_ERROR:
            raise self.error_state_error()
        self.move(E.ABORT)

    def end(self) -> bool:
        """EndTxn answered (or not needed). Returns whether an epoch bump comes next."""
        if self.state is S.ABORTING_TRANSACTION and self.epoch_bump_required:
            self.move(E.BUMP_EPOCH)
            return True
        self.move(E.ENDED)
        return False

    # --- failures -------------------------------------------------------------------

    def fail(self, api: TxnApi, error: BaseException) -> KafkaError | BaseException:
        """Record what `error` (final, or retried until the call's time ran out)
        means; returns the error for the caller to raise (PRODUCER_FENCED for a
        stale epoch)."""
        outcome = outcome_after_retries(api, error)
        if isinstance(error, InvalidProducerEpoch):
            error = ProducerFenced(f"Producer with transactionalId '{self.transactional_id}' has been fenced by "
                                   f"another producer with the same transactionalId ({error})")
        if outcome is Outcome.RETRY:   # retried until the deadline: the call may be made again
            return error
        if outcome is Outcome.FATAL:
            self.last_error = error
            self.move(E.FATAL_ERROR)
            return error
        if outcome is Outcome.ABORTABLE_BUMP:
            self.epoch_bump_required = True
        if self.state in (S.ABORTING_TRANSACTION, S.FATAL_ERROR):
            return error   # Kafka: already aborting, the error changes nothing
        if self.state is S.ABORTABLE_ERROR:
            return error   # the first error is the one the next calls report
        self.last_error = error
        self.move(E.ABORTABLE_ERROR)
        return error
