"""Producer: batches records per partition and sends them to partition leaders.

Design, as Kafka's client: `send` puts a record in the open batch of its
partition and returns a future; the sender closes batches that are full
(`batch_size` bytes), old (`linger_ms`) or flushed, encodes each once (with the
producer id, epoch and the partition's next sequence) and sends it to the
leader's Kafka endpoint as a Produce request (protocol.network: one connection per
node). A retriable failure (leader moved, connection lost, ISR too small for a
while) refreshes metadata and resends the same bytes after `retry_backoff_ms`,
until `delivery_timeout_ms` since the batch was made: the leader drops a batch it
has already written and answers with the original offsets, so a retry never
duplicates (idempotence). Every record's future resolves by that timeout, as
Kafka's: a batch still waiting then (no leader with an endpoint, a metadata
fetch, a connection's slots full, a retry's backoff) fails with
REQUEST_TIMED_OUT ("Expiring N record(s)"), and one in flight fails when its
request ends, which is within `request_timeout_ms`. A
request unanswered for `request_timeout_ms` closes its connection (Kafka's
NetworkClient does the same), which fails, and so retries, everything in flight
on it.

The sender is not a thread of its own: it runs on the client's network event
loop (`_pump`), where the requests go out and their answers come in. Kafka's
sender thread is its network thread too; here a separate one cost two thread
wake-ups per request, a visible part of a sync send's latency. `send` wakes it
only when a batch opens or fills, not per record; an acked batch is finished in
its request's done callback; metadata is fetched (client.metadata: a blocking
request to any node) on a worker thread, never on the loop, while that topic's
partitions wait. A record's future is a
view on its batch's one future (index into the batch), so a send costs no Future
of its own.

In flight: up to `max_in_flight_requests_per_connection` (Kafka's 5) requests
per connection, as Kafka counts them: a broker's partitions share its five, taken
in turn (the first partition served rotates each round, and each takes one
request a round); and on each partition up to that many with idempotence (one
until a batch of the producer id and epoch is acked there, `_sequence_held`: a
leader takes any sequence as a new producer's first), one without. Batches that
wait for a slot stay in the producer, where the ones behind them join them
(`_absorb_waiting`): with many partitions a request grows toward
max_request_size instead of five small ones per partition queueing in the
connection (each request is a wake-up of the leader's and the followers'
processes: at 30 partitions RF3, 5 per partition held the aggregate rate to
0.53-0.67 of what 5 per connection gives, bench/scale_bench.py). Order is kept
as Kafka's idempotent producer keeps it: batches take their sequence numbers in send order; after any
failure on a partition it sends nothing more there until its requests in flight
have come back, then resends the failed batches in their original order, one at
a time until one succeeds. While recovering, OUT_OF_ORDER_SEQUENCE is retriable
(a batch after the one that failed). A batch that fails for good starts a new
producer epoch (KIP-360); batches not yet sent take the new epoch and fresh
sequences, and a batch sent before keeps the epoch and sequence it went with, so
a retry of one that was written is recognised by the leader (or fenced), never
written twice.

Transactions (`transactional_id`; Kafka's KIP-98 producer, kafka-python's
names): init_transactions gets the producer id and epoch from the id's
transaction coordinator (FindCoordinator, key type transaction; InitProducerId,
which also ends what an earlier producer with this id left open and fences it).
Between begin_transaction and commit_transaction / abort_transaction every batch
is transactional (the attribute bit, the producer id, epoch and sequence), and
none goes to a partition before AddPartitionsToTxn put that partition in the
transaction: the sender asks for the partitions its batches wait on, on a worker
thread, and sends them once answered. That request is retried until the producer
closes or the transaction's own timeout has passed (by then the coordinator has
aborted it itself), whichever is first, and at least for `delivery_timeout_ms`:
given up sooner, its outcome would be unknown (the coordinator may have added
them), and an abort that skipped EndTxn would leave the transaction open at the
coordinator until that timeout. Kafka's TxnRequestHandler retries it until the
transaction fails; a bound here keeps a producer never closed from holding its
process at exit for longer. Commit and abort wait for it up to their `timeout`.
send_offsets_to_transaction adds the group's offsets (AddOffsetsToTxn, then
TxnOffsetCommit to the group's coordinator). commit_transaction flushes, then EndTxn; abort_transaction fails
the batches not yet sent (TransactionAborted), waits for those in flight, then
EndTxn. What the coordinator's and leaders' errors mean, and which call may run
in which state, is core.producer_transaction's (retriable: retried by the one
retry rule until the call's time runs out; abortable: only abort_transaction
goes on; fatal, e.g. PRODUCER_FENCED: the producer is done).

Bounds: the requests in flight above, `buffer_memory` bytes of unsent records
(send blocks up to `max_block_ms`); a transactional call blocks up to its
`timeout` (default `max_block_ms`).
Thread-safe: any thread may call send/flush; one thread drives the transaction.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import logging
import operator
import threading
import time
from concurrent.futures import Future

from rafka.client.metadata import MetadataCache
from rafka.protocol.network import ClientNetwork, client_security, coordinator_channel
from rafka.protocol.retry import is_retriable, kafka_cause, retry_until
from rafka.core.errors import (IllegalStateError, NetworkException, OutOfOrderSequence, RecordTooLarge,
                               RequestTimedOut, SerializationError, TransactionAborted, UnknownTopicOrPartition)
from rafka.core.producer_transaction import (ABANDONING_STATES, ProducerTransaction, TransactionState, TxnApi,
                                             TxnEvent, is_retriable_for)
from rafka.core.partitioner import StickyPartitioner, partition_for_key
from rafka.core.producer_state import SEQUENCE_MODULUS
from rafka.core.structs import ConsumerGroupMetadata, OffsetAndMetadata, RecordMetadata
from rafka.core.compression import parse_compression_type
from rafka.core.records import ATTR_TRANSACTIONAL, NO_PRODUCER_ID, RecordInput, encode_batch
from rafka.core.replica import ACKS_ALL, ACKS_NONE, parse_acks
from rafka.protocol import cluster_requests, producing, txn_requests

RECORD_OVERHEAD_BYTES = 16  # a record's framing, roughly, for batch sizing
MAX_PRODUCER_EPOCH = 32_767  # an int16 on the wire; past it, a new producer id
BYTES_LIKE = (bytes, bytearray, memoryview)
MAX_TIMESTAMP_MS = 1 << 63

logger = logging.getLogger(__name__)


def record_fields(value, key, partition, timestamp_ms, headers):
    """send's arguments as the record will hold them, or SerializationError.

    Checked in send, before anything is queued: a value the sender cannot
    encode would otherwise fail there, after send returned, and stop the sender.
    Key and value: bytes-like or None (bytearray and memoryview are copied to bytes
    now, as Kafka serializes in send: a later change to the caller's buffer does
    not reach the record). Headers: (str, bytes-like or None) pairs. Partition and
    timestamp: ints or None. Type checks only: this runs on every send.
    """
    timestamp_ms = _as_int(timestamp_ms, "timestamp_ms")
    if timestamp_ms is not None and not 0 <= timestamp_ms < MAX_TIMESTAMP_MS:
        # Kafka's producer: "Invalid timestamp" (an int64 of milliseconds, not negative)
        raise SerializationError(f"Can't send timestamp_ms {timestamp_ms}: expected 0 <= timestamp_ms < 2**63")
    return (_as_bytes(value, "value"), _as_bytes(key, "key"), _as_int(partition, "partition"),
            timestamp_ms, _as_headers(headers))


def _as_bytes(data, what: str):
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, BYTES_LIKE):
        return bytes(data)
    raise SerializationError(f"Can't send {what} of type {type(data).__name__}: the producer takes bytes, "
                             f"bytearray, memoryview or None (encode a str first)")


def _as_int(number, what: str):
    if number is None or type(number) is int:
        return number
    if not isinstance(number, bool):
        try:
            return operator.index(number)  # e.g. a numpy integer
        except TypeError:
            pass
    raise SerializationError(f"Can't send {what} {number!r} of type {type(number).__name__}: "
                             f"expected an int or None")


def _as_headers(headers) -> tuple:
    if headers is None:
        return ()
    if not isinstance(headers, (list, tuple)):
        raise SerializationError(f"Can't send headers of type {type(headers).__name__}: expected a list of "
                                 f"(str, bytes or None) pairs")
    checked = []
    for header in headers:
        if not (isinstance(header, (tuple, list)) and len(header) == 2 and isinstance(header[0], str)):
            raise SerializationError(f"Can't send header {header!r}: expected a (str, bytes or None) pair")
        if not header[0].isascii():   # the common case costs one check; others must encode as UTF-8
            try:
                header[0].encode("utf-8")
            except UnicodeEncodeError:
                raise SerializationError(f"Can't send header key {header[0]!r}: not encodable as UTF-8") from None
        checked.append((header[0], _as_bytes(header[1], f"the value of header {header[0]!r}")))
    return tuple(checked)


@dataclasses.dataclass
class _Batch:
    topic: str
    partition: int
    created_s: float
    records: list = dataclasses.field(default_factory=list)
    done: Future = dataclasses.field(default_factory=Future)   # -> base offset, or the error
    size_bytes: int = 0
    encoded: bytes | None = None
    encoded_for: tuple[int, int] = (-1, -1)   # the (producer id, epoch) `encoded` carries
    base_sequence: int = -1                   # the sequence `encoded` carries (-1: none)
    order: int = 0                            # close order on its partition: the send order
    absorbed: list = dataclasses.field(default_factory=list)   # (batch, index of its first record here)
    attempts: int = 0
    retried_after: Exception | None = None    # what its last retried attempt was answered (for the log)
    not_before_s: float = 0.0
    node: object = None                       # the leader's address it was taken for: its connection's slot


class RecordFuture:
    """The future of one sent record: resolves to its RecordMetadata. A view on its
    batch's future (concurrent.futures-like: result, exception, done,
    add_done_callback)."""

    __slots__ = ("_batch", "_index", "_timestamp_ms")

    def __init__(self, batch: _Batch, index: int, timestamp_ms: int) -> None:
        self._batch, self._index, self._timestamp_ms = batch, index, timestamp_ms

    def result(self, timeout: float | None = None) -> RecordMetadata:
        base_offset = self._batch.done.result(timeout)
        offset = -1 if base_offset < 0 else base_offset + self._index
        return RecordMetadata(self._batch.topic, self._batch.partition, offset, self._timestamp_ms)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._batch.done.exception(timeout)

    def done(self) -> bool:
        return self._batch.done.done()

    def add_done_callback(self, callback) -> None:
        """`callback(this future)` once the record is acked or failed. It runs on the
        producer's network thread, as Kafka's callbacks run on its I/O thread: keep
        it short, and do not wait on the producer (flush, a full buffer) from it."""
        self._batch.done.add_done_callback(lambda _: callback(self))


class Producer:
    """`bootstrap_servers`: "host:port[,host:port]" of any of the cluster's nodes
    (`cluster.bootstrap_servers`); options are kafka-python's, defaults Kafka's.
    `transactional_id`: a transactional producer (idempotence on, acks=all), whose
    transactions the coordinator aborts after `transaction_timeout_ms`."""

    def __init__(self, bootstrap_servers, *, acks="all", batch_size: int = 16_384, linger_ms: int = 5,
                 retry_backoff_ms: int = 100, request_timeout_ms: int = 30_000,
                 delivery_timeout_ms: int = 120_000, enable_idempotence: bool | None = None,
                 max_request_size: int = 1_048_576, buffer_memory: int = 33_554_432,
                 max_block_ms: int = 60_000, compression_type: str = "none",
                 max_in_flight_requests_per_connection: int = 5,
                 transactional_id: str | None = None, transaction_timeout_ms: int = 60_000,
                 security_protocol: str = "PLAINTEXT", sasl_mechanism: str | None = None,
                 sasl_plain_username: str | None = None, sasl_plain_password: str | None = None,
                 ssl_cafile: str | None = None, ssl_check_hostname: bool = True) -> None:
        self.acks = parse_acks(acks)
        # As Kafka: a transactional producer is idempotent, and asking for one
        # without idempotence is a configuration error.
        self._txn = ProducerTransaction(transactional_id) if transactional_id is not None else None
        if self._txn is not None:
            if enable_idempotence is False:
                raise ValueError("Cannot set a transactional_id without also enabling idempotence.")
            enable_idempotence = True
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.compression_codec = parse_compression_type(compression_type)
        self.batch_size = batch_size
        self.linger_s = linger_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.max_request_size = max_request_size
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_ms / 1000
        if max_in_flight_requests_per_connection < 1:
            raise ValueError("max_in_flight_requests_per_connection must be at least 1")
        security = client_security(security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password,
                                   ssl_cafile, ssl_check_hostname)
        self._network = ClientNetwork(client_id="rafka-producer", request_timeout_ms=request_timeout_ms,
                                      max_in_flight_requests=max_in_flight_requests_per_connection,
                                      sasl=security.sasl, tls=security.tls)
        # a send waits for its topic's metadata up to max_block_ms, as Kafka's does
        self._metadata = MetadataCache(bootstrap_servers, self._network, max_wait_ms=max_block_ms,
                                       retry_backoff_ms=retry_backoff_ms)
        self._sticky = StickyPartitioner()
        # As Kafka: idempotence is on by default only with acks=all, and asking for it
        # with other acks is a configuration error.
        if enable_idempotence is None:
            enable_idempotence = self.acks == ACKS_ALL
        elif enable_idempotence and self.acks != ACKS_ALL:
            raise ValueError("Must set acks to all in order to use the idempotent producer.")
        if enable_idempotence and self._txn is None:   # a transactional one's: init_transactions
            try:
                self.producer_id, self.producer_epoch = self._new_producer_id()
            except BaseException:
                self._network.close()
                raise
        else:
            self.producer_id, self.producer_epoch = NO_PRODUCER_ID, -1
        self._awaiting_producer_id = False   # a new id asked for (epochs ran out): nothing is sent
        # send() takes the lock itself (C-level, no Condition method per record);
        # waits and wake-ups go through the condition on that same lock
        self._mutex = threading.Lock()
        self._lock = threading.Condition(self._mutex)
        self._open: dict[tuple[str, int], _Batch] = {}
        self._ready: dict[tuple[str, int], collections.deque] = collections.defaultdict(collections.deque)
        self._in_flight: dict = {}          # request task -> _Batch (network loop only)
        # requests in flight per partition, and at most how many (with idempotence,
        # order survives retries; without, only one in flight keeps it)
        self._sending: collections.Counter = collections.Counter()
        self._max_in_flight = max_in_flight_requests_per_connection if enable_idempotence else 1
        # requests in flight per connection (leader address), Kafka's limit for them,
        # whether a partition waited on one in the last round, and where the next round starts
        self._node_sending: collections.Counter = collections.Counter()
        self._max_in_flight_per_node = max_in_flight_requests_per_connection
        self._node_waited = False
        self._rotation = 0
        self._recovering: set[tuple[str, int]] = set()   # a batch failed here: one at a time
        # Partitions where a batch of the current producer id and epoch was acked:
        # their leader holds this producer's sequence. Elsewhere one batch at a time
        # (`_pump`): a leader that has never seen a producer takes any sequence as
        # its first (Kafka's ProducerAppendInfo does too), so with several in flight
        # a first batch refused for a moment (NOT_ENOUGH_REPLICAS while the ISR
        # regrows, NOT_LEADER_OR_FOLLOWER) let the next one in ahead of it, and its
        # retry was refused OUT_OF_ORDER_SEQUENCE_NUMBER (`rafka verify`,
        # restart-cluster: new producers, ISRs not yet back).
        self._sequence_held: set[tuple[str, int]] = set()
        self._orders = itertools.count()
        self._next_sequence: dict[tuple[str, int], int] = collections.defaultdict(int)
        self._buffered_bytes = 0
        # per topic: how many bytes of records one request may carry (_absorb_waiting)
        self._request_bytes_limit: dict[str, int] = {}
        self._metrics = collections.Counter()
        self._flushing = 0
        self._closed = False
        # the sender runs on the network's loop (see _pump); these are its own
        self._loop = self._network.loop
        self._wake_lock = threading.Lock()
        self._pump_scheduled = False
        self._requeued = False                  # a batch went back to its queue during this pump
        self._timer = None                      # the next linger or backoff due
        self._refreshing: set[str] = set()      # topics whose metadata is being fetched (or waits to be)
        self._refreshed_s: dict[str, float] = {}   # topic -> when its last fetch ended (monotonic s)
        self._refresh_failures: dict[str, Exception] = {}
        self._adding_partitions: set[tuple[str, int]] = set()   # AddPartitionsToTxn in flight for them

    # --- public API ---------------------------------------------------------------

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             partition: int | None = None, timestamp_ms: int | None = None,
             headers: list[tuple[str, bytes | None]] | None = None) -> RecordFuture:
        if self._closed:
            raise RuntimeError("send after close")
        if ((value is None or type(value) is bytes) and (key is None or type(key) is bytes) and headers is None
                and timestamp_ms is None and (partition is None or type(partition) is int)):
            headers = ()   # the common case, every check of record_fields passed by the types alone
        else:
            value, key, partition, timestamp_ms, headers = record_fields(value, key, partition, timestamp_ms,
                                                                         headers)
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        record = RecordInput(value, key, timestamp_ms, headers)
        size = len(value or b"") + len(key or b"") + RECORD_OVERHEAD_BYTES
        if size > self.max_request_size:
            raise RecordTooLarge(f"The message is {size} bytes when serialized which is larger than "
                                 f"max.request.size ({self.max_request_size})")
        partition_count = self._metadata.partition_count(topic)
        if topic not in self._request_bytes_limit:   # asked once, outside the lock
            self._request_bytes_limit[topic] = min(self.max_request_size,
                                                   self._metadata.max_message_bytes(topic)) * 9 // 10
        if partition is None:
            partition = (partition_for_key(key, partition_count) if key is not None
                         else self._sticky.partition(topic, partition_count))
        elif not 0 <= partition < partition_count:
            raise UnknownTopicOrPartition(f"Partition {topic}-{partition} does not exist.")
        with self._mutex:
            if self._txn is not None:
                self._txn.check_send()   # in a transaction only; raises its error after a failure
            if self._buffered_bytes + size > self.buffer_memory:
                deadline = time.monotonic() + self.max_block_s
                while self._buffered_bytes + size > self.buffer_memory:
                    if not self._lock.wait(timeout=max(0.0, deadline - time.monotonic())):
                        raise RequestTimedOut(f"buffer_memory full for {self.max_block_s}s")
            key_tp = (topic, partition)
            batch = self._open.get(key_tp)
            if batch is not None and batch.size_bytes + size > self.batch_size:
                self._close_batch(key_tp, partition_count)
                batch = None
            if batch is None:
                batch = self._open[key_tp] = _Batch(topic, partition, time.monotonic())
                self._wake()   # the sender times this batch's linger
            future = RecordFuture(batch, len(batch.records), timestamp_ms)
            batch.records.append(record)
            batch.size_bytes += size
            self._buffered_bytes += size
            if batch.size_bytes >= self.batch_size:
                self._close_batch(key_tp, partition_count)
                self._wake()
        return future

    # --- transactions -----------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """The producer id and epoch for `transactional_id`, from its coordinator,
        which first completes or aborts what an earlier producer with the id left
        open, and fences that producer. Once, before the first transaction. Out of
        time: RequestTimedOut, and calling it again resumes."""
        with self._lock:
            self._transaction().raise_if_failed()
            self._txn.move(TxnEvent.INIT)
        self._init_producer_id(self._timeout_s(timeout))

    def begin_transaction(self) -> None:
        """Start a transaction: sends are allowed (only) until it is committed or aborted."""
        with self._lock:
            self._transaction().raise_if_failed()
            self._txn.move(TxnEvent.BEGIN)

    def send_offsets_to_transaction(self, offsets: dict, group_metadata: ConsumerGroupMetadata | str,
                                    timeout: float | None = None) -> None:
        """Commit `offsets` ({TopicPartition: OffsetAndMetadata or next offset to
        read}) for the consumer's group with this transaction: visible if it
        commits, dropped if it aborts. `group_metadata`: the consumer's
        `group_metadata()` (the coordinator refuses a generation the group moved
        past, KIP-447), or a group id. Out of time, the transaction can only be
        aborted (committed without these offsets, its input would be read again)."""
        group = _group_metadata(group_metadata)
        committed = {}
        for tp, value in offsets.items():
            value = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
            if not isinstance(value.offset, int) or value.offset < 0:
                raise ValueError(f"offset for {tp[0]}-{tp[1]} must be a non-negative int, got {value.offset!r}")
            committed[(tp[0], tp[1])] = (value.offset, value.leader_epoch, value.metadata)
        with self._lock:
            self._transaction().check_send_offsets()
            needs_add = group.group_id not in self._txn.groups
        deadline_s = time.monotonic() + self._timeout_s(timeout)
        if needs_add:
            self._txn_call(TxnApi.ADD_OFFSETS, lambda: txn_requests.add_offsets_request(
                self.transactional_id, self.producer_id, self.producer_epoch, group.group_id),
                lambda response: txn_requests.error_code_answer(response, "AddOffsetsToTxn"),
                timeout_s=deadline_s - time.monotonic())
            with self._lock:
                self._txn.groups.add(group.group_id)
        if committed:
            self._txn_call(TxnApi.TXN_OFFSET_COMMIT, lambda: txn_requests.txn_offset_commit_request(
                self.transactional_id, self.producer_id, self.producer_epoch, group_id=group.group_id,
                generation_id=group.generation_id, member_id=group.member_id,
                group_instance_id=group.group_instance_id, offsets=committed),
                lambda response: txn_requests.txn_offset_commit_answer(response, committed),
                timeout_s=max(0.001, deadline_s - time.monotonic()), group_id=group.group_id)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit (EndTxn): every record sent in the transaction, and
        the offsets sent with it, become visible together. A batch that failed
        makes the transaction abortable: this raises its error and only
        abort_transaction goes on. Out of time: RequestTimedOut, and calling it
        again resumes."""
        with self._lock:
            self._transaction().begin_commit()
        deadline_s = time.monotonic() + self._timeout_s(timeout)
        self.flush(timeout=self._timeout_s(timeout))
        with self._lock:
            self._wait_for_partitions_added(deadline_s)
            self._txn.raise_if_failed()
            started = self._txn.started
        if started:
            self._end_txn(commit=True, timeout_s=deadline_s - time.monotonic())
        with self._lock:
            self._txn.end()

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort: records not yet sent fail (TransactionAborted), those in flight
        are waited for, then EndTxn; read_committed consumers never see any of
        them. After an abortable error too. When a batch failed for good, the
        epoch is bumped afterwards (KIP-360). Out of time: RequestTimedOut, and
        calling it again resumes."""
        with self._lock:
            resuming_bump = self._transaction().state is TransactionState.INITIALIZING and self._txn.epoch_bump_required
            if not resuming_bump:
                self._txn.begin_abort()
        deadline_s = time.monotonic() + self._timeout_s(timeout)
        if not resuming_bump:
            self._wake()   # the sender fails what it has not sent
            self.flush(timeout=self._timeout_s(timeout))
            with self._lock:
                self._wait_for_partitions_added(deadline_s)
                started = self._txn.started
            if started:
                self._end_txn(commit=False, timeout_s=deadline_s - time.monotonic())
            with self._lock:
                resuming_bump = self._txn.end()
        if resuming_bump:
            self._init_producer_id(max(0.001, deadline_s - time.monotonic()))

    def _transaction(self) -> ProducerTransaction:
        if self._txn is None:
            raise IllegalStateError("Transactional method invoked on a non-transactional producer.")
        return self._txn

    def _timeout_s(self, timeout: float | None) -> float:
        return self.max_block_s if timeout is None else timeout

    def _wait_for_partitions_added(self, deadline_s: float) -> None:
        """Under the lock: until no AddPartitionsToTxn is in flight (EndTxn must
        come after it, or it would open the next transaction)."""
        remaining_s = max(0.0, deadline_s - time.monotonic())
        if not self._lock.wait_for(lambda: not self._adding_partitions, timeout=remaining_s):
            raise RequestTimedOut("AddPartitionsToTxn still in flight at the call's timeout")

    def _init_producer_id(self, timeout_s: float) -> None:
        """InitProducerId with the transactional id; with the current id and epoch
        when an epoch bump is due (KIP-360). Then READY, sequences from 0."""
        with self._lock:
            bump = self._txn.epoch_bump_required and self.producer_id != NO_PRODUCER_ID
            current = (self.producer_id, self.producer_epoch) if bump else (NO_PRODUCER_ID, -1)
        producer_id, epoch = self._txn_call(
            TxnApi.INIT_PRODUCER_ID, lambda: cluster_requests.init_producer_id_request(
                self.transactional_id, transaction_timeout_ms=self.transaction_timeout_ms,
                producer_id=current[0], producer_epoch=current[1]),
            cluster_requests.init_producer_id_answer, timeout_s=timeout_s)
        with self._lock:
            self.producer_id, self.producer_epoch = producer_id, epoch
            self._new_sequences()
            self._txn.move(TxnEvent.INITIALIZED)

    def _end_txn(self, *, commit: bool, timeout_s: float) -> None:
        self._txn_call(TxnApi.END_TXN, lambda: txn_requests.end_txn_request(
            self.transactional_id, self.producer_id, self.producer_epoch, commit=commit),
            lambda response: txn_requests.error_code_answer(response, "EndTxn"), timeout_s=timeout_s)

    def _txn_call(self, api: TxnApi, request_for, read, *, timeout_s: float, group_id: str | None = None):
        """`read(answer)` of `request_for()` sent to the transaction coordinator (the
        group's coordinator with `group_id`), by the one retry rule with the
        request's own sense of retriable (core.producer_transaction), the
        coordinator found afresh before each retry. What the error means is
        recorded (abortable, fatal) and the error raised. Blocking: never on the
        network loop."""
        def attempt(remaining_s: float):
            if group_id is None:
                address = self._metadata.transaction_coordinator_address(self.transactional_id)
            else:
                address = self._metadata.coordinator_address(group_id)
            return read(self._network.submit(coordinator_channel(address), request_for())
                        .result(timeout=remaining_s))

        def forget(_) -> None:
            if group_id is None:
                self._metadata.invalidate_transaction_coordinator(self.transactional_id)
            else:
                self._metadata.invalidate_coordinator(group_id)
        try:
            return retry_until(attempt, timeout_s=max(0.001, timeout_s), retry_backoff_s=self.retry_backoff_s,
                               what=f"{api.value} of transactional id {self.transactional_id!r}",
                               on_retry=forget, retriable=is_retriable_for(api))
        except Exception as error:
            cause = kafka_cause(error)
            with self._lock:
                reported = self._txn.fail(api, cause)
            if reported is error:
                raise
            raise reported from error

    def _add_partitions(self, partitions: set[tuple[str, int]]) -> None:
        """The sender's: AddPartitionsToTxn for partitions its batches wait on, on a
        worker thread (a blocking request); they are sent once it is answered, and
        fail with the transaction's error if it fails. The pump marked them
        in `_adding_partitions`."""
        def ask() -> None:
            self._txn_call(TxnApi.ADD_PARTITIONS, lambda: txn_requests.add_partitions_request(
                self.transactional_id, self.producer_id, self.producer_epoch, partitions),
                lambda response: txn_requests.add_partitions_answer(response, partitions),
                timeout_s=max(self.delivery_timeout_s, self.transaction_timeout_ms / 1000))

        def added(done) -> None:
            with self._lock:
                self._adding_partitions -= partitions
                if done.exception() is None:
                    self._txn.partitions |= partitions
                self._lock.notify_all()
            self._wake()
        self._loop.run_in_executor(None, ask).add_done_callback(added)

    def _abandon_unsent(self) -> list[tuple[_Batch, Exception]]:
        """Under the lock, the transaction aborting or failed: every batch not yet
        sent leaves its queue, to be failed (Kafka's abortUndrainedBatches).
        Batches sent before go on: their sequences are the leader's already."""
        error = self._txn.last_error if self._txn.last_error is not None else TransactionAborted(
            "Failing batch since transaction was aborted")
        abandoned = [(batch, error) for batch in self._open.values()]
        self._open.clear()
        for queue in self._ready.values():
            kept = [batch for batch in queue if batch.encoded is not None]
            abandoned += [(batch, error) for batch in queue if batch.encoded is None]
            queue.clear()
            queue.extend(kept)
        return abandoned

    def metrics(self) -> dict[str, int]:
        """Kafka's producer counters: record-send-total (first attempts),
        record-retry-total (resends), record-error-total (failed for good),
        request-total (Produce requests sent)."""
        return {name: self._metrics[name] for name in
                ("record-send-total", "record-retry-total", "record-error-total", "request-total")}

    def flush(self, timeout: float | None = None) -> None:
        """Send every buffered record now and wait until each is acked or failed."""
        with self._lock:
            self._flushing += 1
            self._wake()
            try:
                ok = self._lock.wait_for(lambda: self._buffered_bytes == 0, timeout=timeout)
            finally:
                self._flushing -= 1
        if not ok:
            raise RequestTimedOut(f"flush did not complete in {timeout}s")

    def close(self, timeout: float | None = None) -> None:
        """Kafka's close(timeout): send what is buffered and wait up to `timeout`
        seconds (None: as long as it takes) until every record is acked or failed;
        past it, every record still unfinished fails at once (IllegalStateError
        "Producer is closed forcefully.", as kafka-python's forced close) and the
        producer closes all the same: a timeout is not raised, and never leaves
        the network open."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        except RequestTimedOut:
            failed = asyncio.run_coroutine_threadsafe(self._fail_unfinished(), self._loop)
            failed.result()
        with self._lock:
            self._closed = True
        self._network.close()

    async def _fail_unfinished(self) -> None:
        """On the network loop (where the sender runs, so none is sent meanwhile): the
        producer closes, and every batch not yet finished fails; the answers of
        those in flight, should they come, find nothing to finish (_on_answer)."""
        error = IllegalStateError("Producer is closed forcefully.")
        with self._lock:
            self._closed = True
            unsent = [*self._open.values(), *(batch for queue in self._ready.values() for batch in queue)]
            self._open.clear()
            for queue in self._ready.values():
                queue.clear()
        in_flight = list(self._in_flight.values())
        self._in_flight.clear()
        for batch, taken in [*((b, False) for b in unsent), *((b, True) for b in in_flight)]:
            self._metrics["record-error-total"] += len(batch.records)   # the absorbed batches' records too
            self._finish(batch, -1, error, taken=taken)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- batching (under self._lock) -----------------------------------------------

    def _close_batch(self, key_tp: tuple[str, int], partition_count: int) -> None:
        batch = self._open.pop(key_tp)
        batch.order = next(self._orders)
        self._ready[key_tp].append(batch)
        self._sticky.on_new_batch(batch.topic, partition_count, batch.partition)

    def _close_lingered(self, now_s: float) -> float:
        """Close open batches past linger (all, when flushing). Returns seconds until
        the next one is due (infinity with none open)."""
        next_due = float("inf")
        for key_tp, batch in list(self._open.items()):
            due = batch.created_s + self.linger_s - now_s
            if due <= 0 or self._flushing or self._closed:
                batch = self._open.pop(key_tp)
                batch.order = next(self._orders)
                self._ready[key_tp].append(batch)
            else:
                next_due = min(next_due, due)
        return next_due

    def _absorb_waiting(self, batch: _Batch, queue: collections.deque) -> None:
        """Send the partition's batches that wait behind `batch` (closed, never sent)
        in the same request: `batch` takes their records, up to a request the
        leader accepts (max_request_size and the topic's max.message.bytes, less a
        tenth for framing). Under load batches queue up behind the requests in
        flight, and one request of many batches costs the broker what one of a
        single batch does, where each request is Python work on it and its
        followers (librdkafka's batches grow the same way, up to batch.size 1 MB).
        Kafka's Java producer sends them one by one; order, sequences and offsets
        are the same: the records stay in send order and each absorbed batch's
        records learn their offsets from `batch`'s answer."""
        if not queue or queue[0].encoded is not None:
            return
        limit_bytes = self._request_bytes_limit.get(batch.topic, self.batch_size)
        while queue and queue[0].encoded is None and batch.size_bytes + queue[0].size_bytes <= limit_bytes:
            waiting = queue.popleft()
            batch.absorbed.append((waiting, len(batch.records)))
            batch.records.extend(waiting.records)
            batch.size_bytes += waiting.size_bytes

    def _expire_waiting(self, now_s: float) -> tuple[list[_Batch], float]:
        """Under the lock: the batches waiting in their partitions' queues that were
        created `delivery_timeout_ms` ago or more leave them, to be failed (Kafka's
        RecordAccumulator.expiredBatches: from each queue's head, in send order);
        with seconds until the next head reaches its timeout (infinity: none waits).
        Whatever keeps a batch from going (no leader with an endpoint, a metadata
        fetch, a full connection, a retry's backoff), its future resolves by then.
        A batch in flight is not expired here: its request ends within
        request_timeout_ms, and `_retry_or_fail` then sees its timeout."""
        expired, next_due_s = [], float("inf")
        for queue in self._ready.values():
            while queue and queue[0].created_s + self.delivery_timeout_s <= now_s:
                expired.append(queue.popleft())
            if queue:
                next_due_s = min(next_due_s, queue[0].created_s + self.delivery_timeout_s - now_s)
        return expired, next_due_s

    # --- the sender: on the network's event loop ---------------------------------------

    def _wake(self) -> None:
        """Run `_pump` on the network loop soon: from any thread, holding the
        producer's lock or not (its own small lock); once however often asked
        before it runs."""
        with self._wake_lock:
            if self._pump_scheduled:
                return
            self._pump_scheduled = True
        self._loop.call_soon_threadsafe(self._pump)

    def _pump(self) -> None:
        """The sender's round, on the network loop: close batches past linger, send
        what may go (up to the requests allowed in flight per connection and per
        partition, none while its topic's metadata is being fetched), then come back when the next linger
        or retry backoff is due. An answer that frees a slot, and a metadata fetch
        that ends, wake it too."""
        with self._wake_lock:
            self._pump_scheduled = False
        with self._lock:
            now = time.monotonic()
            abandoned = (self._abandon_unsent() if self._txn is not None and self._txn.state in ABANDONING_STATES
                         else [])
            due_s = self._close_lingered(now)
            expired, expiry_due_s = self._expire_waiting(now)
            due_s = min(due_s, expiry_due_s)
            to_send, to_add, sendable = [], set(), []
            keys = list(self._ready)
            self._rotation = (self._rotation + 1) % max(1, len(keys))
            for key_tp in keys[self._rotation:] + keys[:self._rotation]:
                queue = self._ready[key_tp]
                if not queue or key_tp[0] in self._refreshing or self._awaiting_producer_id:
                    continue
                if self._txn is not None and key_tp not in self._txn.partitions:   # not in the transaction yet
                    if key_tp not in self._adding_partitions:
                        to_add.add(key_tp)
                        self._adding_partitions.add(key_tp)
                    continue
                sendable.append(key_tp)
            self._node_waited = False
            considered = sendable
            while sendable:   # rounds: one request per partition each, while its connection has a slot
                again = []
                for key_tp in sendable:
                    queue = self._ready[key_tp]
                    limit = (1 if key_tp in self._recovering or key_tp not in self._sequence_held
                             else self._max_in_flight)
                    if not queue or self._sending[key_tp] >= limit or queue[0].not_before_s > now:
                        continue
                    node = self._leader_node(key_tp)
                    if self._node_sending[node] >= self._max_in_flight_per_node:
                        self._node_waited = True   # an answer from that node wakes the sender
                        continue
                    batch = queue.popleft()
                    if batch.encoded is None and key_tp not in self._recovering:
                        self._absorb_waiting(batch, queue)
                    batch.node = node
                    to_send.append(batch)
                    self._sending[key_tp] += 1
                    self._node_sending[node] += 1
                    again.append(key_tp)
                sendable = again
            for key_tp in considered:   # a retry at the head of its queue, backing off: its timer
                queue = self._ready[key_tp]
                if queue and queue[0].not_before_s > now:
                    due_s = min(due_s, queue[0].not_before_s - now)
        for batch, error in abandoned:
            self._finish(batch, -1, error, taken=False)
        for batch in expired:
            self._fail_for_good(batch, RequestTimedOut(
                f"Expiring {len(batch.records)} record(s) for {batch.topic}-{batch.partition}: "
                f"{(now - batch.created_s) * 1000:.0f} ms has passed since batch creation"), taken=False)
        if to_add:
            self._add_partitions(to_add)
        self._requeued = False
        for batch in to_send:
            self._send(batch)
        if self._requeued:
            self._wake()   # a send that failed at once was requeued: it may go again (or time its backoff)
        elif due_s != float("inf"):
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._loop.call_later(due_s, self._pump)

    def _leader_node(self, key_tp: tuple[str, int]):
        """The connection a batch of `key_tp` would go on now: its leader's address
        from the cache (never a blocking lookup); None while unknown (`_send` then
        looks it up or retries, and the batch holds a slot of "unknown")."""
        if self._metadata.needs_refresh(key_tp[0]):
            return None
        try:
            return self._metadata.leader_address(*key_tp)[0]
        except Exception:   # no leader known: _send's own lookup fails it the usual way
            return None

    def _refresh(self, topic: str) -> None:
        """Fetch the topic's metadata on a worker thread (a Ray call: never on the
        loop); its partitions send nothing meanwhile, and go on once it is back.
        One fetch per topic at a time, and the next no sooner than retry_backoff_ms
        after the last ended (Kafka's backoff between metadata requests): an answer
        that still names no leader for a partition otherwise sends its batches
        straight back for another fetch, in a loop."""
        if topic in self._refreshing:
            return
        self._refreshing.add(topic)

        def refreshed(done) -> None:
            self._refreshed_s[topic] = time.monotonic()
            self._refreshing.discard(topic)
            error = done.exception()
            if error is not None:
                self._refresh_failures[topic] = error
            else:   # an older failure is stale now
                self._refresh_failures.pop(topic, None)
            self._wake()

        def fetch() -> None:
            if self._closed:
                return
            self._loop.run_in_executor(None, self._metadata.partition_count, topic).add_done_callback(refreshed)
        wait_s = self._refreshed_s.get(topic, float("-inf")) + self.retry_backoff_s - time.monotonic()
        if wait_s > 0:
            self._loop.call_later(wait_s, fetch)
        else:
            fetch()

    def _on_answer(self, answer) -> None:
        """Done callback of a request (the network loop, where the sender runs): the
        batch is finished or retried at once, with no other wake-up in between (a
        sync send waits on this); then the sender goes on if its partition has
        batches waiting for the slot this request held."""
        batch = self._in_flight.pop(answer, None)
        if batch is None:   # failed already: the producer was closed forcefully
            return
        self._complete(answer, batch)
        if self._ready.get((batch.topic, batch.partition)):   # (one waiting on a connection: _finish woke it)
            self._wake()

    def _send(self, batch: _Batch) -> None:
        key_tp = (batch.topic, batch.partition)
        if batch.topic not in self._refresh_failures and self._metadata.needs_refresh(batch.topic):
            with self._lock:   # back in its place: sent once the metadata is here (off the loop)
                self._requeue(batch)
            self._refresh(batch.topic)
            return
        # A batch encoded before keeps its producer id, epoch and sequence, even
        # after a new epoch began: it may already be in the leader's log (sent, its
        # answer lost), and only those let the leader recognise the retry (or fence
        # it); encoded again with the new epoch's sequence it would be written twice.
        if batch.encoded is None:
            sequence = self._next_sequence[key_tp] if self.producer_id != NO_PRODUCER_ID else -1
            try:
                batch.encoded = encode_batch(batch.records, producer_id=self.producer_id,
                                             producer_epoch=self.producer_epoch, base_sequence=sequence,
                                             compression_codec=self.compression_codec,
                                             attributes=ATTR_TRANSACTIONAL if self._txn is not None else 0)
            except Exception as error:   # send checked every field; should one still not encode,
                # this batch fails, not the sender (every later future would hang)
                self._metrics["record-error-total"] += len(batch.records)
                self._finish(batch, -1, SerializationError(f"the batch could not be encoded: {error!r}"))
                return
            if sequence >= 0:
                self._next_sequence[key_tp] = (sequence + len(batch.records)) % SEQUENCE_MODULUS
            batch.encoded_for = (self.producer_id, self.producer_epoch)
            batch.base_sequence = sequence
        batch.attempts += 1
        self._metrics["record-send-total" if batch.attempts == 1 else "record-retry-total"] += len(batch.records)
        self._metrics["request-total"] += 1
        try:
            failure = self._refresh_failures.pop(batch.topic, None)
            if failure is not None:   # the metadata fetch for this topic failed
                raise failure
            address, _ = self._metadata.leader_address(batch.topic, batch.partition)
        except Exception as error:  # no leader known yet: retry like a failed request
            self._retry_or_fail(batch, error)
            return
        answer = self._loop.create_task(self._network.nodes.request(
            address, self._produce_request(batch), expect_response=self.acks != ACKS_NONE))
        if self.acks == ACKS_NONE:
            # Kafka's acks=0: the batch is done once its request is on the wire (its
            # failure dropped: no answer, no retry), not before, so flush and close
            # wait for the write; finished at once, close could drop it unsent.
            def written(done) -> None:
                done.cancelled() or done.exception()   # retrieved, so never logged as unretrieved
                self._finish(batch, -1)
            answer.add_done_callback(written)
            return
        self._in_flight[answer] = batch
        answer.add_done_callback(self._on_answer)

    def _produce_request(self, batch: _Batch):
        return producing.produce_request(topic=batch.topic, partition=batch.partition, records=batch.encoded,
                                         acks=self.acks, timeout_ms=self.request_timeout_ms,
                                         transactional_id=self.transactional_id)

    def _complete(self, answer, batch: _Batch) -> None:
        try:
            if answer.cancelled():   # the network is closing
                raise NetworkException(f"the request for {batch.topic}-{batch.partition} was cancelled")
            base_offset = producing.produce_answer(answer.result(), topic=batch.topic, partition=batch.partition)
        except Exception as error:
            self._retry_or_fail(batch, error)
            return
        self._finish(batch, base_offset)

    def _retry_or_fail(self, batch: _Batch, error: Exception) -> None:
        key_tp = (batch.topic, batch.partition)
        cause = kafka_cause(error)
        expired = time.monotonic() - batch.created_s >= self.delivery_timeout_s   # Kafka's: since creation
        # A batch after one that failed finds its sequence out of order: it goes
        # again after that one (Kafka's TransactionManager.canRetry does the same).
        # "After one that failed" is known before that one's answer is: an earlier
        # batch of the partition still unanswered or queued. After a leader change
        # the answers come on two connections, and the new leader's
        # OUT_OF_ORDER_SEQUENCE can arrive before the old leader's NOT_LEADER.
        with self._lock:
            earlier_outstanding = any(
                other.order < batch.order for other in (*self._in_flight.values(), *self._ready[key_tp])
                if (other.topic, other.partition) == key_tp)
            retriable = is_retriable(error) or (isinstance(cause, OutOfOrderSequence)
                                                and (key_tp in self._recovering or earlier_outstanding))
            self._recovering.add(key_tp)
        if retriable and not expired:
            batch.retried_after = error
            self._metadata.invalidate(batch.topic)
            batch.not_before_s = time.monotonic() + self.retry_backoff_s
            with self._lock:
                self._requeue(batch)
            self._refresh(batch.topic)   # during the backoff
            return
        if isinstance(cause, OutOfOrderSequence):   # as Kafka's Sender logs it: the leader lost track of us
            logger.error("%s-%d: the leader answered %s for producer id %d, epoch %d, sequence %d (attempt %d; "
                         "no earlier batch outstanding; the attempt before answered %r)", batch.topic,
                         batch.partition, type(cause).__name__, *batch.encoded_for, batch.base_sequence,
                         batch.attempts, batch.retried_after)
        self._fail_for_good(batch, cause if isinstance(cause, Exception) else error)

    def _fail_for_good(self, batch: _Batch, failure: Exception, *, taken: bool = True) -> None:
        """The batch will not be sent again (sender only). In a transaction, the
        transaction cannot commit now; else, if it went out with a sequence of the
        current epoch, whether the leader holds it is unknown, and a new epoch
        begins (_bump_epoch). `taken`: as `_finish`'s."""
        self._metrics["record-error-total"] += len(batch.records)
        if self._txn is not None:
            # the transaction cannot commit (or, fenced, the producer is done); its
            # epoch is bumped by the coordinator after the abort, not here
            with self._lock:
                failure = self._txn.fail(TxnApi.PRODUCE, failure)
            self._wake()   # batches not sent yet fail too
        elif (self.producer_id != NO_PRODUCER_ID and batch.encoded is not None
              and batch.encoded_for == (self.producer_id, self.producer_epoch)):
            self._bump_epoch()
        self._finish(batch, -1, failure, taken=taken)

    def _requeue(self, batch: _Batch) -> None:
        """Under the lock: a batch taken to send goes back to its partition's queue,
        in send order (by `order`), and no longer counts as in flight."""
        queue = self._ready[(batch.topic, batch.partition)]
        position = next((i for i, queued in enumerate(queue) if queued.order > batch.order), len(queue))
        queue.insert(position, batch)
        self._sending[(batch.topic, batch.partition)] -= 1
        self._node_sending[batch.node] -= 1
        self._requeued = True

    def _new_producer_id(self) -> tuple[int, int]:
        """(producer id, epoch) from any node (InitProducerId); blocking."""
        return self._metadata.ask_any_node(cluster_requests.init_producer_id_request(),
                                           cluster_requests.init_producer_id_answer, what="a producer id")

    def _new_sequences(self) -> None:
        """A new producer id or epoch: sequences restart at 0 on every partition,
        and no leader holds them yet."""
        self._next_sequence.clear()
        self._sequence_held.clear()

    def _bump_epoch(self) -> None:
        """A batch failed for good: the leader may or may not hold it, so its sequence
        can be neither reused nor skipped. As Kafka's idempotent producer does
        (KIP-360), start a new producer epoch, whose sequences restart at 0 on every
        partition. Sender (network loop) only; with one request in flight per
        partition no older-epoch batch is sent after a newer one to the same
        partition. Once per 32,767 epochs a new producer id is needed: asked for
        on a worker thread (a blocking request), and nothing is sent until it is
        here (batches are encoded again with it)."""
        self._new_sequences()
        if self.producer_epoch < MAX_PRODUCER_EPOCH:
            self.producer_epoch += 1
            return
        self._awaiting_producer_id = True

        def answered(done) -> None:
            if done.exception() is not None:   # asked again after the backoff
                self._loop.call_later(self.retry_backoff_s, ask)
                return
            self.producer_id, self.producer_epoch = done.result()
            self._new_sequences()
            self._awaiting_producer_id = False
            self._wake()

        def ask() -> None:
            if not self._closed:
                self._loop.run_in_executor(None, self._new_producer_id).add_done_callback(answered)
        ask()

    def _finish(self, batch: _Batch, base_offset: int, error: Exception | None = None, *, taken: bool = True) -> None:
        """The batch's futures resolved; `taken`: it was counted in flight (sent,
        or taken to be sent), which it no longer is."""
        for part, first_index in [(batch, 0), *batch.absorbed]:
            if error is not None:
                part.done.set_exception(error)
            else:
                part.done.set_result(-1 if base_offset < 0 else base_offset + first_index)
        key_tp = (batch.topic, batch.partition)
        with self._lock:
            if taken:
                self._sending[key_tp] -= 1
                self._node_sending[batch.node] -= 1
            if error is None and batch.encoded_for == (self.producer_id, self.producer_epoch):
                self._sequence_held.add(key_tp)   # its leader knows this producer now
            if error is None and not self._sending[key_tp]:
                self._recovering.discard(key_tp)   # in order again: back to full pipelining
            self._buffered_bytes -= batch.size_bytes
            self._lock.notify_all()
        if taken and self._node_waited:   # a connection's slot is free: partitions wait on one
            self._wake()


def _group_metadata(group_metadata) -> ConsumerGroupMetadata:
    """send_offsets_to_transaction's group: the consumer's group_metadata(), or a
    group id (kafka-python takes either; a group id alone skips KIP-447's checks)."""
    if isinstance(group_metadata, str):
        return ConsumerGroupMetadata(group_metadata)
    if isinstance(group_metadata, ConsumerGroupMetadata):
        if group_metadata.generation_id > 0 and not group_metadata.member_id:
            raise ValueError(f"Invalid group metadata: generation {group_metadata.generation_id} without a member id")
        return group_metadata
    raise TypeError(f"send_offsets_to_transaction takes the consumer's group_metadata() or a group id, "
                    f"got {type(group_metadata).__name__}")
