"""The workload of `rafka verify`, after Jepsen's Kafka workload and Kafka's
VerifiableProducer / VerifiableConsumer: every client logs what it saw into one
history (rafka.core.history), which the checker judges afterwards.

- producers send unique values ("<producer>-<n>") round-robin over the partitions,
  a bounded window in flight, and log each send as ok (partition and offset),
  failed (a definite error) or indeterminate (no answer in time);
- group members (threads of this process, each a Consumer in one group) poll, log
  every record with their incarnation and generation, commit sync and async in
  turn, log where each newly assigned partition resumed, and restart now and then;
- member actors (ConsumerMember, rafka's run_consumer_group) of a second group log
  what their handler is given, from their own processes, so that faults can kill
  them (Ray kill, SIGKILL);
- assign-mode readers follow the tail of every partition;
- an observer reads the groups' committed offsets now and then;
- transactional producers (rafka's Producer with a transactional_id, unless
  `transactions` is off) write each transaction's values ("<producer>-<n>-<j>")
  to several partitions of the transactional topic (`<topic>-txn`), abort some on
  purpose, and log each as a Txn: asked to commit or abort, ok, failed (a
  definite error: aborted instead) or indeterminate (then the producer is
  replaced: the next one's init_transactions fences it and ends what it left);
- read_committed readers follow that topic from its start;
- a consume-transform-produce chain (`ctp`): a read_committed group member of
  that topic whose transactions write each input value, transformed, to the
  same partition of `<topic>-txn-out` and commit the consumed offsets with them
  (send_offsets_to_transaction); some aborted on purpose, after which it goes
  back to the group's committed offsets (a Resume) and processes them again;
- at the end, a final read of every partition from its log start to its HW, and
  of the transactional topic also read_committed (once its LSO has caught up
  with its HW: every transaction ended).

Time: every event's time is wall-clock ms since the run started (`RunClock`), one
clock for the driver and the member actors (on one machine, or NTP-synchronised
hosts). Bounded: each producer keeps at most `window` sends in flight; each
client's history writes go through one lock to one file.
Callers: rafka.verify.run only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import threading
import time
from collections import deque
from pathlib import Path

from rafka.core.errors import IllegalStateError, KafkaError
from rafka.core.history import (ABORT, ABORTED, COMMIT, FAILED, INDETERMINATE, OK, READ_COMMITTED, READ_UNCOMMITTED,
                                Assigned, Commit, CommittedRead, FinalRead, HistoryWriter, Poll, Resume, Send, Txn,
                                event_from_json)
from rafka.core.structs import TopicPartition

GROUP = "verify-members"          # the driver-side members' group
ACTOR_GROUP = "verify-actors"     # the member actors' group
CTP_GROUP = "verify-ctp"          # the consume-transform-produce chain's group


class RunClock:
    """Milliseconds since the run started, on the wall clock (shared with actors)."""

    def __init__(self, started_s: float | None = None) -> None:
        self.started_s = time.time() if started_s is None else started_s

    def now_ms(self) -> int:
        return max(0, int((time.time() - self.started_s) * 1000))


class History:
    """The run's history file: one writer, one lock, any thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._writer = HistoryWriter.open(path)
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def log(self, event) -> None:
        with self._lock:
            self._writer.write(event)
            for key in _count_keys(event):
                self.counts[key] = self.counts.get(key, 0) + 1

    def close(self) -> None:
        with self._lock:
            self._writer.close()


def _count_keys(event) -> tuple[str, ...]:
    """What the report counts an event as: sends by outcome, transactions by what
    became of them (committed, aborted on purpose, failed, indeterminate), polls,
    read_committed ones apart too."""
    if isinstance(event, Send):
        return (f"send:{event.outcome}",)
    if isinstance(event, Txn):
        label = ("aborted" if event.intent == ABORT else
                 {OK: "committed", FAILED: "failed", INDETERMINATE: "indeterminate"}[event.outcome])
        return (f"txn:{label}",)
    if isinstance(event, Poll) and event.isolation_level == READ_COMMITTED:
        return ("poll", "poll:read_committed")
    return (event.TYPE,)


@dataclasses.dataclass
class WorkloadOptions:
    topic: str = "verify"
    partitions: int = 3
    producers: int = 2
    members: int = 2
    member_actors: int = 2
    readers: int = 1
    acks: str = "all"
    idempotence: bool = True
    # Below what a producer gets through here (about 100 acks=all sends/s, one Ray
    # call each, on 2 cores shared with the cluster), so a send's latency is the
    # cluster's, not a queue's: the picture then shows what a fault costs.
    send_rate_per_producer: float = 50.0      # sends per second, at most
    window: int = 32                          # sends in flight per producer, at most
    member_lifetime_s: tuple[float, float] = (5.0, 20.0)
    commit_every_polls: int = 3
    # Transactions (issue 28): producers of `<topic>-txn`, read_committed readers.
    transactions: bool = True
    txn_producers: int = 2
    txn_readers: int = 1
    txn_rate_per_producer: float = 5.0           # transactions per second, at most
    txn_abort_fraction: float = 0.25             # aborted on purpose
    txn_writes: tuple[int, int] = (2, 5)         # values per transaction, round robin over partitions
    txn_open_s: float = 0.1                      # a transaction stays open up to this long after its sends
    transaction_timeout_ms: int = 10_000
    txn_call_timeout_s: float = 30.0             # commit / abort / init_transactions, each try
    ctp: bool = True                             # the consume-transform-produce chain (with transactions)
    ctp_batch_records: int = 20                  # input records per transaction, at most

    @property
    def txn_topic(self) -> str | None:
        return f"{self.topic}-txn" if self.transactions else None

    @property
    def ctp_topic(self) -> str | None:
        return f"{self.topic}-txn-out" if self.transactions and self.ctp else None

    def transactional_ids(self) -> list[str]:
        if not self.transactions:
            return []
        names = [f"txn-producer-{i}" for i in range(self.txn_producers)] + (["ctp"] if self.ctp else [])
        return [transactional_id(name) for name in names]


def transactional_id(producer: str) -> str:
    return f"verify-{producer}"


def _outcome(error: BaseException) -> str:
    """A definite error: the broker refused the write (nothing was written). Any
    other failure (a timeout, a lost answer, a dead connection) may or may not have
    written it: indeterminate, as Jepsen counts :info operations."""
    if isinstance(error, KafkaError) and not error.retriable:
        return FAILED
    return INDETERMINATE


class Workload:
    def __init__(self, cluster, history: History, clock: RunClock, options: WorkloadOptions, *,
                 actor_log_dir: str, seed: int = 0) -> None:
        self.cluster = cluster
        self.history = history
        self.clock = clock
        self.options = options
        self.actor_log_dir = actor_log_dir
        self.random = random.Random(seed)
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self._threads: list[threading.Thread] = []
        self.actor_group = None
        # kept across a pause: values stay unique and incarnations keep counting
        self._next_sequence: dict[str, int] = {}
        self._next_incarnation: dict[str, int] = {}

    # --- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        o = self.options
        targets = [(self._produce, f"producer-{i}") for i in range(o.producers)]
        targets += [(self._member, f"member-{i}") for i in range(o.members)]
        targets += [(self._read_tail, f"reader-{i}") for i in range(o.readers)]
        targets += [(self._observe_commits, "observer")]
        if o.transactions:
            targets += [(self._transact, f"txn-producer-{i}") for i in range(o.txn_producers)]
            targets += [(self._read_committed, f"txn-reader-{i}") for i in range(o.txn_readers)]
            if o.ctp:
                targets += [(self._transform, "ctp")]
        for target, name in targets:
            thread = threading.Thread(target=self._guarded, args=(target, name), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        if o.member_actors:
            Path(self.actor_log_dir).mkdir(parents=True, exist_ok=True)
            self.actor_group = self.cluster.run_consumer_group(
                ACTOR_GROUP, [o.topic], actor_history_handler(self.actor_log_dir, self.clock.started_s),
                members=o.member_actors, session_timeout_ms=6_000, heartbeat_interval_ms=500,
                fetch_max_wait_ms=100, max_poll_records=100)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self._threads:
            thread.join(120)
            if thread.is_alive():
                self.errors.append(f"{thread.name} did not stop")
        self._threads = []
        if self.actor_group is not None:
            try:
                self.actor_group.stop()
            except Exception as error:   # a member actor killed by the last fault
                self.errors.append(f"stopping the member actors: {error!r}")
            self.actor_group = None

    def restart_on(self, cluster) -> None:
        """Go on with every client on `cluster` (the same cluster restarted): after
        `stop()`, new clients, the same producer sequences and member incarnations."""
        self.cluster = cluster
        self.stopping.clear()
        self.start()

    def _guarded(self, target, name: str) -> None:
        try:
            target(name)
        except Exception as error:   # a workload bug: reported, the run goes on
            self.errors.append(f"{name}: {type(error).__name__}: {error}")

    # --- producers ----------------------------------------------------------------

    def _produce(self, name: str) -> None:
        o = self.options
        producer = self.cluster.producer(acks=o.acks, enable_idempotence=o.idempotence, linger_ms=2,
                                         request_timeout_ms=5_000, delivery_timeout_ms=20_000,
                                         max_block_ms=10_000)
        in_flight: deque = deque()
        sequence = self._next_sequence.get(name, 0)
        gap_s = 1.0 / o.send_rate_per_producer
        try:
            while not self.stopping.is_set():
                value = f"{name}-{sequence}"
                partition = sequence % o.partitions
                started_ms = self.clock.now_ms()
                try:
                    future = producer.send(o.topic, value=value.encode(), partition=partition)
                except Exception as error:   # refused at send: nothing queued
                    self.history.log(Send(name, o.topic, value, partition, _outcome(error), None, started_ms,
                                          self.clock.now_ms(), repr(error)))
                    future = None
                if future is not None:
                    in_flight.append((value, partition, started_ms, future))
                sequence += 1
                self._next_sequence[name] = sequence
                while in_flight and (in_flight[0][3].done() or len(in_flight) >= o.window):
                    self._log_send(name, *in_flight.popleft(), wait_s=30.0)
                time.sleep(gap_s)
            while in_flight:
                self._log_send(name, *in_flight.popleft(), wait_s=30.0)
        finally:
            producer.close()

    def _log_send(self, name: str, value: str, partition: int, started_ms: int, future, *, wait_s: float) -> None:
        try:
            offset = future.result(timeout=wait_s).offset
            outcome, error = OK, None
        except Exception as failure:
            offset, outcome, error = None, _outcome(failure), repr(failure)
        self.history.log(Send(name, self.options.topic, value, partition, outcome, offset, started_ms,
                              self.clock.now_ms(), error))

    # --- group members (driver side) ----------------------------------------------------

    def _member(self, name: str) -> None:
        while not self.stopping.is_set():
            incarnation = self._next_incarnation.get(name, 0)
            self._next_incarnation[name] = incarnation + 1
            lifetime_s = self.random.uniform(*self.options.member_lifetime_s)
            try:
                self._member_incarnation(name, incarnation, time.monotonic() + lifetime_s)
            except Exception as error:   # e.g. a poll during a fault: a new incarnation goes on
                self.errors.append(f"{name} incarnation {incarnation}: {type(error).__name__}: {error}")

    def _member_incarnation(self, name: str, incarnation: int, until_s: float) -> None:
        o = self.options
        consumer = self.cluster.consumer(group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False,
                                         session_timeout_ms=6_000, heartbeat_interval_ms=500,
                                         max_poll_records=100, fetch_max_wait_ms=100, client_id=name,
                                         request_timeout_ms=10_000, default_api_timeout_ms=20_000)
        history, clock, workload = self.history, self.clock, self
        owned: set[TopicPartition] = set()   # this incarnation's partitions, across rebalances

        class Listener:
            def on_partitions_revoked(self, revoked):
                pass

            def on_partitions_lost(self, lost):
                owned.difference_update(lost)

            def on_partitions_assigned(self, assigned):
                generation = consumer.group_metadata().generation_id
                history.log(Assigned(name, incarnation, GROUP, generation,
                                     tuple(sorted((tp.topic, tp.partition) for tp in assigned)), clock.now_ms()))
                # A partition this member keeps across the rebalance goes on from its
                # own position, as Kafka's consumer does (it is not a resume); only a
                # partition new to it starts at the group's committed offset.
                # Logged here, inside the poll that delivered the assignment: the
                # committed offset is read and the position resolved before this
                # member can poll or commit the partition (a Resume logged at its
                # first poll came after the member's own commits of it, which the
                # checker rightly took as a resume behind an acked commit).
                new = set(assigned) - owned
                owned.clear()
                owned.update(assigned)
                try:
                    committed = consumer.committed(new) if new else {}
                    resumes = [(tp, committed.get(tp), consumer.position(tp)) for tp in sorted(new)]
                except KafkaError as error:   # not judged: the member goes on
                    workload.errors.append(f"{name}: resume points not read: {error}")
                    return
                for tp, found, position in resumes:
                    history.log(Resume(name, incarnation, GROUP, tp.topic, tp.partition,
                                       found.offset if found is not None else None, position, clock.now_ms()))

        consumer.subscribe([o.topic], listener=Listener())
        polls = 0
        sync_next = True
        try:
            while not self.stopping.is_set() and time.monotonic() < until_s:
                records = consumer.poll(timeout=0.5)
                generation = consumer.group_metadata().generation_id
                for record in records:
                    history.log(Poll(name, incarnation, GROUP, generation, record.topic, record.partition,
                                     record.offset, record.value.decode(errors="replace"), clock.now_ms()))
                polls += 1
                if records and polls % o.commit_every_polls == 0:
                    self._commit(consumer, name, incarnation, generation, sync_next)
                    sync_next = not sync_next
        finally:
            try:
                consumer.close()   # a clean leave (a kill is the member actors' fault)
            except Exception as error:
                self.errors.append(f"{name}: close: {error!r}")

    def _commit(self, consumer, name: str, incarnation: int, generation: int, sync: bool) -> None:
        positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
        offsets = tuple(sorted((tp.topic, tp.partition, offset) for tp, offset in positions.items()))
        started_ms = self.clock.now_ms()

        def log(outcome: str) -> None:
            self.history.log(Commit(name, incarnation, GROUP, generation, offsets, sync, outcome, started_ms,
                                    self.clock.now_ms()))
        if sync:
            try:
                consumer.commit_sync({tp: offset for tp, offset in positions.items()}, timeout=10.0)
                log(OK)
            except Exception as error:
                log(_outcome(error))
        else:
            consumer.commit_async({tp: offset for tp, offset in positions.items()},
                                  callback=lambda _, error: log(OK if error is None else _outcome(error)))

    # --- transactional producers and read_committed readers ------------------------------

    def _transact(self, name: str) -> None:
        """Transactions one after another, each on 2+ partitions; a producer whose
        transaction ended indeterminate is closed, and its successor's
        init_transactions (same transactional id) fences it and completes or aborts
        what it left. At the end the last one is always a producer that ended
        cleanly, so no transaction of this id stays open."""
        o = self.options
        rng = random.Random(f"{self.random.random()}-{name}")
        number = self._next_sequence.get(name, 0)
        producer = None
        try:
            while not self.stopping.is_set():
                if producer is None:
                    producer = self._transactional_producer(name)
                    if producer is None:
                        continue
                count = rng.randint(*o.txn_writes)
                first = rng.randrange(o.partitions)
                writes = [(o.txn_topic, (first + j) % o.partitions, f"{name}-{number}-{j}") for j in range(count)]
                number += 1
                self._next_sequence[name] = number
                producer = self._one_transaction(producer, name, writes, abort=rng.random() < o.txn_abort_fraction,
                                                 open_s=rng.uniform(0.0, o.txn_open_s))
                self.stopping.wait(rng.uniform(0.0, 2.0 / o.txn_rate_per_producer))
        finally:
            if producer is None:   # the last one was given up: a successor ends what it left
                producer = self._transactional_producer(name, attempts=3)
            if producer is not None:
                _close_quietly(producer)

    def _transactional_producer(self, name: str, *, attempts: int | None = None):
        """A producer of `name`'s transactional id, initialised; None if stopping (or
        after `attempts` failures, which go on despite stopping)."""
        o = self.options
        tried = 0
        while attempts is not None or not self.stopping.is_set():
            producer = self.cluster.producer(transactional_id=transactional_id(name),
                                             transaction_timeout_ms=o.transaction_timeout_ms, linger_ms=2,
                                             request_timeout_ms=5_000, delivery_timeout_ms=20_000,
                                             max_block_ms=int(o.txn_call_timeout_s * 1000))
            try:
                producer.init_transactions(timeout=o.txn_call_timeout_s)
                return producer
            except Exception as error:   # e.g. its coordinator moving for longer than the timeout
                self.errors.append(f"{name}: init_transactions: {type(error).__name__}: {error}")
                _close_quietly(producer)
            tried += 1
            if attempts is not None and tried >= attempts:
                return None
            self.stopping.wait(0.5)
        return None

    def _one_transaction(self, producer, name: str, writes: list, *, abort: bool, open_s: float):
        """Begin, send `writes`, commit or abort, and log the Txn; returns the
        producer to go on with (None: it was given up)."""
        started_ms = self.clock.now_ms()
        try:
            producer.begin_transaction()
        except Exception as error:   # nothing sent: no transaction to log
            self.errors.append(f"{name}: begin_transaction: {type(error).__name__}: {error}")
            _close_quietly(producer)
            return None
        sent = []
        for topic, partition, value in writes:
            try:
                producer.send(topic, value=value.encode(), partition=partition)
            except Exception:   # refused at send (the transaction failed already): the commit says so
                break
            sent.append((topic, partition, value))
        if open_s:
            self.stopping.wait(open_s)
        requested_ms = self.clock.now_ms()
        outcome, error, usable = self._abort_transaction(producer) if abort else self._commit_transaction(producer)
        self.history.log(Txn(name, producer.transactional_id, ABORT if abort else COMMIT, outcome, tuple(sent),
                             started_ms, requested_ms, self.clock.now_ms(), error=error))
        if usable:
            return producer
        _close_quietly(producer)
        return None

    def _commit_transaction(self, producer) -> tuple[str, str | None, bool]:
        """(outcome, error, producer still usable). A commit that raised is aborted
        when the producer allows it (an abortable error: the coordinator never took
        the commit, so the transaction is definitely aborted: failed); a commit
        still in flight (the producer refuses the abort) is resumed; what cannot be
        told apart (fatal errors, fencing, time out) is indeterminate."""
        timeout_s = self.options.txn_call_timeout_s
        last = None
        for _ in range(3):
            try:
                producer.commit_transaction(timeout=timeout_s)
                return OK, None if last is None else f"committed on a retry after {last!r}", True
            except Exception as error:
                last = error
            try:
                producer.abort_transaction(timeout=timeout_s)
                return FAILED, repr(last), True
            except IllegalStateError:   # still committing: its EndTxn may be in flight; resume it
                continue
            except Exception as error:
                return INDETERMINATE, f"{last!r}; then abort: {error!r}", False
        return INDETERMINATE, repr(last), False

    def _abort_transaction(self, producer) -> tuple[str, str | None, bool]:
        """(outcome, error, producer still usable): aborted, or given up (still
        aborted: the commit was never asked for, and its successor's
        init_transactions or the coordinator's timeout ends it)."""
        last = None
        for _ in range(3):
            try:
                producer.abort_transaction(timeout=self.options.txn_call_timeout_s)
                return OK, None if last is None else f"aborted on a retry after {last!r}", True
            except IllegalStateError as error:
                return INDETERMINATE, repr(error), False
            except Exception as error:
                last = error
        return INDETERMINATE, repr(last), False

    def _transform(self, name: str) -> None:
        """The consume-transform-produce chain: incarnations one after another (a
        new one after a transaction ended indeterminate), each a read_committed
        group member and a transactional producer of one transactional id."""
        rng = random.Random(f"{self.random.random()}-{name}")
        while not self.stopping.is_set():
            incarnation = self._next_incarnation.get(name, 0)
            self._next_incarnation[name] = incarnation + 1
            producer = self._transactional_producer(name)
            if producer is None:
                return
            try:
                self._transform_incarnation(name, incarnation, producer, rng)
            except Exception as error:   # e.g. a poll during a fault: a new incarnation goes on
                self.errors.append(f"{name} incarnation {incarnation}: {type(error).__name__}: {error}")
            finally:
                _close_quietly(producer)

    def _transform_incarnation(self, name: str, incarnation: int, producer, rng: random.Random) -> None:
        o = self.options
        consumer = self.cluster.consumer(group_id=CTP_GROUP, isolation_level="read_committed",
                                         auto_offset_reset="earliest", enable_auto_commit=False,
                                         session_timeout_ms=6_000, heartbeat_interval_ms=500,
                                         fetch_max_wait_ms=100, client_id=name, request_timeout_ms=10_000,
                                         default_api_timeout_ms=20_000)
        history, clock, workload = self.history, self.clock, self

        def log_resumes(partitions) -> None:
            """Where each partition starts (again): its committed offset, or the log start."""
            committed = consumer.committed(partitions)
            for tp in sorted(partitions):
                found = committed.get(tp)
                if found is None:
                    consumer.seek_to_beginning(tp)
                else:
                    consumer.seek(tp, found.offset)
                history.log(Resume(name, incarnation, CTP_GROUP, tp.topic, tp.partition,
                                   None if found is None else found.offset, consumer.position(tp), clock.now_ms()))

        class Listener:
            def on_partitions_revoked(self, revoked):
                pass

            def on_partitions_assigned(self, assigned):
                history.log(Assigned(name, incarnation, CTP_GROUP, consumer.group_metadata().generation_id,
                                     tuple(sorted((tp.topic, tp.partition) for tp in assigned)), clock.now_ms()))
                try:
                    log_resumes(set(assigned))
                except KafkaError as error:   # the incarnation cannot say where it starts: a new one
                    workload.errors.append(f"{name}: resume points not read: {error}")
                    raise

        consumer.subscribe([o.txn_topic], listener=Listener())
        number = self._next_sequence.get(name, 0)
        try:
            while not self.stopping.is_set():
                records = consumer.poll(timeout=0.5, max_records=o.ctp_batch_records)
                if not records:
                    continue
                generation = consumer.group_metadata().generation_id
                now_ms = clock.now_ms()
                for record in records:
                    history.log(Poll(name, incarnation, CTP_GROUP, generation, record.topic, record.partition,
                                     record.offset, record.value.decode(errors="replace"), now_ms, READ_COMMITTED))
                number += 1
                self._next_sequence[name] = number
                fate, usable = self._transform_transaction(producer, consumer, name, number, records, rng)
                if not usable or fate == INDETERMINATE:
                    return   # a new incarnation (and producer) goes on from the committed offsets
                if fate == ABORTED:   # its input again, from the committed offsets
                    log_resumes(consumer.assignment())
        finally:
            try:
                consumer.close()
            except Exception as error:
                self.errors.append(f"{name}: close: {error!r}")

    def _transform_transaction(self, producer, consumer, name: str, number: int, records,
                               rng) -> tuple[str, bool]:
        """One transaction of the chain: the transformed records and the offsets
        past them; aborted on purpose now and then. Returns its fate and whether
        the producer can go on."""
        o = self.options
        abort = rng.random() < o.txn_abort_fraction
        started_ms = self.clock.now_ms()
        writes, sources, next_offsets = [], [], {}
        producer.begin_transaction()
        error = None
        try:
            for record in records:
                source = record.value.decode(errors="replace")
                value = f"{source}>{name}-{number}"
                producer.send(o.ctp_topic, value=value.encode(), partition=record.partition)
                writes.append((o.ctp_topic, record.partition, value))
                sources.append(source)
                next_offsets[TopicPartition(record.topic, record.partition)] = record.offset + 1
            producer.send_offsets_to_transaction(next_offsets, consumer.group_metadata(),
                                                 timeout=o.txn_call_timeout_s)
        except Exception as failure:   # the transaction cannot commit: the commit says so
            error = failure
        requested_ms = self.clock.now_ms()
        outcome, why, usable = self._abort_transaction(producer) if abort else self._commit_transaction(producer)
        if error is not None and why is None:
            why = repr(error)
        offsets = tuple((CTP_GROUP, tp.topic, tp.partition, offset) for tp, offset in sorted(next_offsets.items()))
        txn = Txn(name, producer.transactional_id, ABORT if abort else COMMIT, outcome, tuple(writes), started_ms,
                  requested_ms, self.clock.now_ms(), offsets, tuple(sources), why)
        self.history.log(txn)
        return txn.fate, usable

    def _read_committed(self, name: str) -> None:
        """The transactional topic from its start, read_committed, for as long as the
        run goes (a restart of the cluster starts a new incarnation from the start)."""
        o = self.options
        incarnation = self._next_incarnation.get(name, 0)
        self._next_incarnation[name] = incarnation + 1
        partitions = [TopicPartition(o.txn_topic, p) for p in range(o.partitions)]
        with self.cluster.consumer(isolation_level="read_committed", auto_offset_reset="earliest",
                                   fetch_max_wait_ms=100, client_id=name, request_timeout_ms=10_000,
                                   default_api_timeout_ms=20_000) as consumer:
            consumer.assign(partitions)
            while not self.stopping.is_set():
                try:
                    records = consumer.poll(timeout=0.5)
                except KafkaError as error:   # e.g. a leader change mid-poll: the next poll retries
                    if not error.retriable:
                        self.errors.append(f"{name}: poll: {error}")
                    continue
                now_ms = self.clock.now_ms()
                for record in records:
                    self.history.log(Poll(name, incarnation, None, None, record.topic, record.partition,
                                          record.offset, record.value.decode(errors="replace"), now_ms,
                                          READ_COMMITTED))

    # --- readers and the observer -------------------------------------------------------

    def _read_tail(self, name: str) -> None:
        o = self.options
        partitions = [TopicPartition(o.topic, p) for p in range(o.partitions)]
        with self.cluster.consumer(auto_offset_reset="latest", fetch_max_wait_ms=100, client_id=name,
                                   request_timeout_ms=10_000, default_api_timeout_ms=20_000) as consumer:
            consumer.assign(partitions)
            while not self.stopping.is_set():
                try:
                    records = consumer.poll(timeout=0.5)
                except KafkaError as error:   # e.g. a leader change mid-poll: the next poll retries
                    if not error.retriable:
                        self.errors.append(f"{name}: poll: {error}")
                    continue
                for record in records:
                    self.history.log(Poll(name, 0, None, None, record.topic, record.partition, record.offset,
                                          record.value.decode(errors="replace"), self.clock.now_ms()))

    def _observe_commits(self, name: str) -> None:
        admin = self.cluster.admin()
        while not self.stopping.wait(0.5):
            for group in (GROUP, ACTOR_GROUP):
                try:
                    offsets = admin.list_consumer_group_offsets(group)
                except Exception:   # a coordinator moving: the next look sees it
                    continue
                now_ms = self.clock.now_ms()
                for tp, offset in sorted(offsets.items()):
                    self.history.log(CommittedRead(group, tp.topic, tp.partition, offset, now_ms))

    # --- the end --------------------------------------------------------------------

    def _final_read(self, tp: TopicPartition, isolation_level: str, timeout_s: float) -> None:
        with self.cluster.consumer(auto_offset_reset="earliest", max_poll_records=10_000, fetch_max_wait_ms=100,
                                   isolation_level=isolation_level) as consumer:
            consumer.assign([tp])
            start, end = consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
            consumer.seek(tp, start)
            records, deadline_s = [], time.monotonic() + timeout_s
            while consumer.position(tp) < end:
                if time.monotonic() > deadline_s:
                    raise TimeoutError(f"the final read of {tp} ({isolation_level}) did not reach {end}")
                records += [r for r in consumer.poll(timeout=0.5) if r.offset < end]
        self.history.log(FinalRead(tp.topic, tp.partition, tuple((r.offset, r.value.decode(errors="replace"))
                                                                 for r in records), start, end, self.clock.now_ms(),
                                   isolation_level))

    def _wait_for_stable_offsets(self, timeout_s: float) -> None:
        """Until the transactional topics' LSO is their HW on every partition: every
        transaction ended (one left open by a producer given up ends at its
        timeout at the latest), so the read_committed final read sees them all."""
        o = self.options
        tps = [TopicPartition(topic, p) for topic in (o.txn_topic, o.ctp_topic) if topic for p in range(o.partitions)]
        deadline_s = time.monotonic() + timeout_s
        with self.cluster.consumer(isolation_level="read_committed") as committed, \
                self.cluster.consumer() as uncommitted:
            while True:
                stable, high = committed.end_offsets(tps), uncommitted.end_offsets(tps)
                if stable == high:
                    return
                if time.monotonic() > deadline_s:
                    self.errors.append(f"the LSO did not reach the HW in {timeout_s} s: LSO {stable}, HW {high}")
                    return
                time.sleep(0.2)

    def final_read(self, timeout_s: float = 120.0) -> None:
        """Every partition from its log start to its HW, the transactional topics'
        also read_committed to their LSO, and each group's last committed offsets
        (faults are over: the cluster has healed)."""
        o = self.options
        reads = [(o.topic, READ_UNCOMMITTED)]
        if o.transactions:
            self._wait_for_stable_offsets(timeout_s)
            for topic in (o.txn_topic, o.ctp_topic):
                if topic is not None:
                    reads += [(topic, READ_UNCOMMITTED), (topic, READ_COMMITTED)]
        for topic, isolation_level in reads:
            for partition in range(o.partitions):
                self._final_read(TopicPartition(topic, partition), isolation_level, timeout_s)
        admin = self.cluster.admin()
        for group in (GROUP, ACTOR_GROUP) + ((CTP_GROUP,) if o.ctp_topic else ()):
            now_ms = self.clock.now_ms()
            for tp, offset in sorted(admin.list_consumer_group_offsets(group).items()):
                self.history.log(CommittedRead(group, tp.topic, tp.partition, offset, now_ms))


def _close_quietly(producer) -> None:
    try:
        producer.close(timeout=5)
    except Exception:   # a producer given up: what it holds ends with it
        pass


def actor_history_handler(directory: str, started_s: float):
    """A member actor's handler: one Poll line per record, into a file per process
    (a killed process keeps what it wrote); incarnation = the process id, and the
    group generation the batch was polled in (a batch whose commit the group
    refused is handed again after the rebalance, in a newer generation)."""
    def handle(records) -> None:
        from rafka.actors.member import handling_generation
        now_ms = max(0, int((time.time() - started_s) * 1000))
        pid = os.getpid()
        generation = handling_generation()
        with open(os.path.join(directory, f"actor-{pid}.jsonl"), "a") as out:
            out.write("".join(Poll(f"actor-{pid}", pid, ACTOR_GROUP, generation, r.topic, r.partition, r.offset,
                                   r.value.decode(errors="replace"), now_ms).to_json() + "\n"
                              for r in records))
    return handle


def merge_actor_polls(directory: str, history: History) -> None:
    """The member actors' Poll lines into the run's history (a torn last line of a
    killed process is dropped: that record was handed but not logged)."""
    for path in sorted(Path(directory).glob("actor-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                history.log(event_from_json(line))
            except (ValueError, json.JSONDecodeError):
                continue
